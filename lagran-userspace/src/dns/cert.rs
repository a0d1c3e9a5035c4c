//! The one certificate of DoT and DoQ: read from PEM files, swapped on SIGHUP.
//!
//! Both listeners resolve their certificate through the same [`Certificate`],
//! so a reload reaches new connections of both; established connections keep
//! the certificate they were opened with. A reload that fails (a missing file,
//! a key that does not match) keeps the old certificate and says why.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use arc_swap::ArcSwap;
use rustls::ServerConfig;
use rustls::crypto::CryptoProvider;
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer};
use rustls::server::{ClientHello, ResolvesServerCert};
use rustls::sign::CertifiedKey;
use tokio_util::sync::CancellationToken;

/// RFC 7858 §3.2 names no ALPN; RFC 8310 §8.1 registers "dot".
pub const ALPN_DOT: &[u8] = b"dot";
/// RFC 9250 §4.1.1: "the token "doq" identifies DoQ".
pub const ALPN_DOQ: &[u8] = b"doq";

/// Why the certificate could not be loaded.
#[derive(Debug, thiserror::Error)]
pub enum CertError {
    #[error("cannot read the PEM file {path}: {source}")]
    Pem { path: PathBuf, source: rustls::pki_types::pem::Error },
    #[error("{path} holds no certificate")]
    NoCertificate { path: PathBuf },
    #[error("the key {key} does not fit the certificate {cert}: {source}")]
    Key { cert: PathBuf, key: PathBuf, source: rustls::Error },
    #[error("TLS configuration: {0}")]
    Config(rustls::Error),
}

/// The certificate chain and key of `--tls-cert`/`--tls-key`, reloadable.
#[derive(Debug)]
pub struct Certificate {
    cert: PathBuf,
    key: PathBuf,
    provider: Arc<CryptoProvider>,
    current: ArcSwap<CertifiedKey>,
}

impl Certificate {
    /// Reads both files; fails when they cannot be read or do not match.
    pub fn load(cert: &Path, key: &Path) -> Result<Arc<Certificate>, CertError> {
        let provider = Arc::new(rustls::crypto::ring::default_provider());
        let current = ArcSwap::from_pointee(read(cert, key, &provider)?);
        Ok(Arc::new(Certificate { cert: cert.to_owned(), key: key.to_owned(), provider, current }))
    }

    /// Reads the files again; on error the old certificate stays.
    pub fn reload(&self) -> Result<(), CertError> {
        let fresh = read(&self.cert, &self.key, &self.provider)?;
        self.current.store(Arc::new(fresh));
        Ok(())
    }

    /// A TLS 1.3 server configuration offering `alpn` with this certificate.
    pub fn server_config(self: &Arc<Self>, alpn: &[u8]) -> Result<ServerConfig, CertError> {
        // RFC 9250 §10.1 and RFC 8310 §8.1 do not forbid TLS 1.2 for DoT, but
        // QUIC needs 1.3 (RFC 9001 §4.2) and every DoT client we know has it.
        let mut config = ServerConfig::builder_with_provider(self.provider.clone())
            .with_protocol_versions(&[&rustls::version::TLS13])
            .map_err(CertError::Config)?
            .with_no_client_auth()
            .with_cert_resolver(self.clone());
        config.alpn_protocols = vec![alpn.to_vec()];
        Ok(config)
    }

    /// Reloads on every SIGHUP until `shutdown`.
    pub async fn reload_on_sighup(self: Arc<Self>, shutdown: CancellationToken) {
        #[cfg(unix)]
        {
            use tokio::signal::unix::{SignalKind, signal};
            let Ok(mut hup) = signal(SignalKind::hangup()) else {
                tracing::warn!("cannot watch SIGHUP: the DoT/DoQ certificate will not be reloaded");
                return;
            };
            loop {
                tokio::select! {
                    _ = shutdown.cancelled() => return,
                    got = hup.recv() => if got.is_none() { return },
                }
                match self.reload() {
                    Ok(()) => tracing::info!(cert = %self.cert.display(), "DoT/DoQ certificate reloaded"),
                    Err(e) => tracing::error!(error = %e, "DoT/DoQ certificate NOT reloaded, the old one stays"),
                }
            }
        }
        #[cfg(not(unix))]
        shutdown.cancelled().await;
    }
}

impl ResolvesServerCert for Certificate {
    /// One certificate for every name: DNS clients often send no SNI at all.
    fn resolve(&self, _hello: ClientHello<'_>) -> Option<Arc<CertifiedKey>> {
        Some(self.current.load_full())
    }
}

fn read(cert: &Path, key: &Path, provider: &CryptoProvider) -> Result<CertifiedKey, CertError> {
    let pem = |path: &Path| {
        let path = path.to_owned();
        move |source| CertError::Pem { path, source }
    };
    let chain =
        CertificateDer::pem_file_iter(cert).map_err(pem(cert))?.collect::<Result<Vec<_>, _>>().map_err(pem(cert))?;
    if chain.is_empty() {
        return Err(CertError::NoCertificate { path: cert.to_owned() });
    }
    let private = PrivateKeyDer::from_pem_file(key).map_err(pem(key))?;
    CertifiedKey::from_der(chain, private, provider).map_err(|source| CertError::Key {
        cert: cert.to_owned(),
        key: key.to_owned(),
        source,
    })
}

/// A self-signed certificate for `names`, written as `cert.pem` and `key.pem` under `dir`.
#[cfg(test)]
pub(crate) fn write_self_signed(dir: &Path, names: &[&str]) -> (PathBuf, PathBuf) {
    let names: Vec<String> = names.iter().map(|s| s.to_string()).collect();
    let ck = rcgen::generate_simple_self_signed(names).expect("generating a test certificate");
    let (cert, key) = (dir.join("cert.pem"), dir.join("key.pem"));
    std::fs::write(&cert, ck.cert.pem()).expect("writing the test certificate");
    std::fs::write(&key, ck.key_pair.serialize_pem()).expect("writing the test key");
    (cert, key)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reload_swaps_and_a_bad_reload_keeps_the_old_one() {
        let dir = tempfile::tempdir().unwrap();
        let (cert, key) = write_self_signed(dir.path(), &["a.test"]);
        let c = Certificate::load(&cert, &key).unwrap();
        let first = c.current.load_full();
        write_self_signed(dir.path(), &["b.test"]);
        c.reload().unwrap();
        assert!(!Arc::ptr_eq(&first, &c.current.load_full()), "a reload installs the new certificate");
        let second = c.current.load_full();
        std::fs::write(&key, "not a key").unwrap();
        let err = c.reload().unwrap_err();
        assert!(err.to_string().contains("key.pem"), "the error names the file: {err}");
        assert!(Arc::ptr_eq(&second, &c.current.load_full()), "a failed reload keeps the old certificate");
    }
}
