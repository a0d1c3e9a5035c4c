//! TLS termination: one certificate per site, chosen by SNI (exact name, then
//! `*.suffix`). A client that sends no SNI, or a name no site covers, gets no
//! certificate and the handshake is refused. The set of certificates is
//! swapped whole when the control plane sends new ones ([`SniResolver::replace`]);
//! handshakes under way keep the set they started with.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use arc_swap::ArcSwap;
use rustls::ServerConfig;
use rustls::crypto::CryptoProvider;
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer};
use rustls::server::{ClientHello, ResolvesServerCert};
use rustls::sign::CertifiedKey;
use tokio_rustls::TlsAcceptor;

use crate::config::SiteConfig;
use crate::host::HostMap;

#[derive(Debug, thiserror::Error)]
pub enum TlsError {
    #[error("cannot read PEM {path}")]
    Pem { path: PathBuf, source: rustls::pki_types::pem::Error },
    #[error("{path} holds no certificate")]
    NoCertificate { path: PathBuf },
    #[error("certificate {cert} and key {key} of site {host}")]
    Key { host: String, cert: PathBuf, key: PathBuf, source: Box<rustls::Error> },
    #[error("TLS configuration: {0}")]
    Config(Box<rustls::Error>),
    #[error("no site has cert_pem/key_pem")]
    NoSites,
    #[error("the certificate of {domain} from the control plane: {reason}")]
    Remote { domain: String, reason: String },
}

/// Certificates by SNI name pattern.
pub type CertMap = HostMap<Arc<CertifiedKey>>;

/// Picks the site certificate for the client's SNI.
#[derive(Debug, Default)]
pub struct SniResolver {
    certs: ArcSwap<CertMap>,
}

impl SniResolver {
    /// Serves `certs` from the next handshake on.
    pub fn replace(&self, certs: CertMap) {
        self.certs.store(Arc::new(certs));
    }

    /// Whether a certificate covers `name`.
    pub fn covers(&self, name: &str) -> bool {
        self.certs.load().get(name).is_some()
    }
}

impl ResolvesServerCert for SniResolver {
    fn resolve(&self, hello: ClientHello<'_>) -> Option<Arc<CertifiedKey>> {
        self.certs.load().get(hello.server_name()?).cloned()
    }
}

fn provider() -> Arc<CryptoProvider> {
    Arc::new(rustls::crypto::ring::default_provider())
}

fn pem_error(path: &Path) -> impl FnOnce(rustls::pki_types::pem::Error) -> TlsError + '_ {
    move |source| TlsError::Pem { path: path.to_owned(), source }
}

/// Loads a certificate chain and its private key from PEM files.
pub fn load_certified_key(
    host: &str,
    cert: &Path,
    key: &Path,
    provider: &CryptoProvider,
) -> Result<CertifiedKey, TlsError> {
    let chain = CertificateDer::pem_file_iter(cert)
        .map_err(pem_error(cert))?
        .collect::<Result<Vec<_>, _>>()
        .map_err(pem_error(cert))?;
    if chain.is_empty() {
        return Err(TlsError::NoCertificate { path: cert.to_owned() });
    }
    let private = PrivateKeyDer::from_pem_file(key).map_err(pem_error(key))?;
    CertifiedKey::from_der(chain, private, provider).map_err(|source| TlsError::Key {
        host: host.to_owned(),
        cert: cert.to_owned(),
        key: key.to_owned(),
        source: Box::new(source),
    })
}

/// A certificate chain and key given as PEM text (from the control plane).
pub fn certified_key_from_pem(domain: &str, cert_pem: &str, key_pem: &str) -> Result<CertifiedKey, TlsError> {
    let bad = |reason: String| TlsError::Remote { domain: domain.to_owned(), reason };
    let chain = CertificateDer::pem_slice_iter(cert_pem.as_bytes())
        .collect::<Result<Vec<_>, _>>()
        .map_err(|e| bad(format!("cert_pem: {e}")))?;
    if chain.is_empty() {
        return Err(bad("cert_pem holds no certificate".into()));
    }
    let private = PrivateKeyDer::from_pem_slice(key_pem.as_bytes()).map_err(|e| bad(format!("key_pem: {e}")))?;
    CertifiedKey::from_der(chain, private, &provider()).map_err(|e| bad(e.to_string()))
}

/// The certificates of the sites that name PEM files, as `(host, key)`.
pub fn local_certs(sites: &[SiteConfig]) -> Result<Vec<(String, Arc<CertifiedKey>)>, TlsError> {
    let provider = provider();
    let mut out = Vec::new();
    for site in sites {
        if let (Some(cert), Some(key)) = (site.cert_pem(), site.key_pem()) {
            let host = &site.site().host;
            out.push((host.clone(), Arc::new(load_certified_key(host, cert, key, &provider)?)));
        }
    }
    Ok(out)
}

/// A server config taking its certificates from `resolver`; ALPN offers h2 and HTTP/1.1.
pub fn server_config_with(resolver: Arc<SniResolver>) -> Result<Arc<ServerConfig>, TlsError> {
    let mut config = ServerConfig::builder_with_provider(provider())
        .with_safe_default_protocol_versions()
        .map_err(|e| TlsError::Config(Box::new(e)))?
        .with_no_client_auth()
        .with_cert_resolver(resolver);
    config.alpn_protocols = vec![b"h2".to_vec(), b"http/1.1".to_vec()];
    Ok(Arc::new(config))
}

/// A server config serving every site of the file that has a certificate.
pub fn server_config(sites: &[SiteConfig]) -> Result<Arc<ServerConfig>, TlsError> {
    let mut certs = CertMap::default();
    for (host, key) in local_certs(sites)? {
        certs.insert(&host, key);
    }
    if certs.is_empty() {
        return Err(TlsError::NoSites);
    }
    let resolver = SniResolver::default();
    resolver.replace(certs);
    server_config_with(Arc::new(resolver))
}

pub fn acceptor(sites: &[SiteConfig]) -> Result<TlsAcceptor, TlsError> {
    Ok(TlsAcceptor::from(server_config(sites)?))
}
