//! TLS termination: one certificate per site, chosen by SNI (exact name, then
//! `*.suffix`). A client that sends no SNI, or a name no site covers, gets no
//! certificate and the handshake is refused.

use std::path::{Path, PathBuf};
use std::sync::Arc;

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
}

/// Picks the site certificate for the client's SNI.
#[derive(Debug, Default)]
pub struct SniResolver {
    certs: HostMap<Arc<CertifiedKey>>,
}

impl ResolvesServerCert for SniResolver {
    fn resolve(&self, hello: ClientHello<'_>) -> Option<Arc<CertifiedKey>> {
        self.certs.get(hello.server_name()?).cloned()
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

/// A server config serving every site that has a certificate; ALPN offers h2 and HTTP/1.1.
pub fn server_config(sites: &[SiteConfig]) -> Result<Arc<ServerConfig>, TlsError> {
    let provider = provider();
    let mut resolver = SniResolver::default();
    for site in sites {
        if let (Some(cert), Some(key)) = (&site.cert_pem, &site.key_pem) {
            let ck = load_certified_key(&site.host, cert, key, &provider)?;
            resolver.certs.insert(&site.host, Arc::new(ck));
        }
    }
    if resolver.certs.is_empty() {
        return Err(TlsError::NoSites);
    }
    let mut config = ServerConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .map_err(|e| TlsError::Config(Box::new(e)))?
        .with_no_client_auth()
        .with_cert_resolver(Arc::new(resolver));
    config.alpn_protocols = vec![b"h2".to_vec(), b"http/1.1".to_vec()];
    Ok(Arc::new(config))
}

pub fn acceptor(sites: &[SiteConfig]) -> Result<TlsAcceptor, TlsError> {
    Ok(TlsAcceptor::from(server_config(sites)?))
}
