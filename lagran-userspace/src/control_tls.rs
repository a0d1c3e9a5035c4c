//! TLS wherever a token travels: the control API's server side
//! (`--api-tls-cert`/`--api-tls-key`, TOML `[api.tls]`) and the clients that
//! talk to it — NS hosts (route-table stream), operator commands, the edge
//! agent — which trust `--ca FILE` (TOML `ca`, env `LAGRAN_CA`) or, without
//! it, the system's certificate store, and may present a client certificate
//! (`--client-cert`/`--client-key`). rustls on ring, as DoT/DoQ.
//!
//! An `https://` URL is only ever spoken over TLS: a failed handshake is an
//! error, never a fallback to cleartext.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer};
use rustls::{ClientConfig, RootCertStore, ServerConfig};

use crate::settings::{InvalidSetting, Key, KeyDefault};

/// Why a TLS configuration could not be built.
#[derive(Debug, thiserror::Error)]
pub enum ControlTlsError {
    #[error("cannot read the PEM file {path}: {source}")]
    Pem { path: PathBuf, source: rustls::pki_types::pem::Error },
    #[error("{path} holds no certificate")]
    NoCertificate { path: PathBuf },
    #[error("the TLS settings are not usable: {0}")]
    Config(#[from] rustls::Error),
    #[error("the client-certificate verifier: {0}")]
    Verifier(String),
    #[error("no trusted CA for https:// URLs: the system store gave none ({0}); pass --ca FILE (LAGRAN_CA)")]
    NoRoots(String),
    #[error("{0} needs {1} as well")]
    Pair(&'static str, &'static str),
}

fn provider() -> Arc<rustls::crypto::CryptoProvider> {
    Arc::new(rustls::crypto::ring::default_provider())
}

fn certificates(path: &Path) -> Result<Vec<CertificateDer<'static>>, ControlTlsError> {
    let pem = |source| ControlTlsError::Pem { path: path.to_owned(), source };
    let certs = CertificateDer::pem_file_iter(path).map_err(pem)?.collect::<Result<Vec<_>, _>>().map_err(pem)?;
    if certs.is_empty() {
        return Err(ControlTlsError::NoCertificate { path: path.to_owned() });
    }
    Ok(certs)
}

fn private_key(path: &Path) -> Result<PrivateKeyDer<'static>, ControlTlsError> {
    PrivateKeyDer::from_pem_file(path).map_err(|source| ControlTlsError::Pem { path: path.to_owned(), source })
}

fn roots_from(path: &Path) -> Result<RootCertStore, ControlTlsError> {
    let mut roots = RootCertStore::empty();
    for c in certificates(path)? {
        roots.add(c)?;
    }
    Ok(roots)
}

/// The control API's server configuration: its certificate chain and key
/// and, with `client_ca`, client certificates required and checked against it.
pub fn server_config(cert: &Path, key: &Path, client_ca: Option<&Path>) -> Result<Arc<ServerConfig>, ControlTlsError> {
    let builder = ServerConfig::builder_with_provider(provider()).with_safe_default_protocol_versions()?;
    let builder = match client_ca {
        Some(ca) => {
            let verifier =
                rustls::server::WebPkiClientVerifier::builder_with_provider(Arc::new(roots_from(ca)?), provider())
                    .build()
                    .map_err(|e| ControlTlsError::Verifier(e.to_string()))?;
            builder.with_client_cert_verifier(verifier)
        }
        None => builder.with_no_client_auth(),
    };
    let mut config = builder.with_single_cert(certificates(cert)?, private_key(key)?)?;
    config.alpn_protocols = vec![b"http/1.1".to_vec()];
    Ok(Arc::new(config))
}

/// What a client trusts and presents.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ClientTls {
    /// PEM CA bundle; `None`: the system's certificate store.
    pub ca: Option<PathBuf>,
    /// A client certificate chain and its key (both or neither).
    pub cert: Option<PathBuf>,
    pub key: Option<PathBuf>,
    /// `http://` URLs to other machines are allowed ([`crate::control_url`]).
    pub insecure_control: bool,
}

impl ClientTls {
    /// The rustls client configuration.
    pub fn config(&self) -> Result<Arc<ClientConfig>, ControlTlsError> {
        let roots = match &self.ca {
            Some(ca) => roots_from(ca)?,
            None => {
                let found = rustls_native_certs::load_native_certs();
                let mut roots = RootCertStore::empty();
                let (added, _) = roots.add_parsable_certificates(found.certs);
                if added == 0 {
                    let why = found.errors.iter().map(ToString::to_string).collect::<Vec<_>>().join("; ");
                    return Err(ControlTlsError::NoRoots(if why.is_empty() { "empty".into() } else { why }));
                }
                roots
            }
        };
        let builder = ClientConfig::builder_with_provider(provider())
            .with_safe_default_protocol_versions()?
            .with_root_certificates(roots);
        let mut config = match (&self.cert, &self.key) {
            (Some(cert), Some(key)) => builder.with_client_auth_cert(certificates(cert)?, private_key(key)?)?,
            (None, None) => builder.with_no_client_auth(),
            (Some(_), None) => return Err(ControlTlsError::Pair("--client-cert", "--client-key")),
            (None, Some(_)) => return Err(ControlTlsError::Pair("--client-key", "--client-cert")),
        };
        config.alpn_protocols = vec![b"http/1.1".to_vec()];
        Ok(Arc::new(config))
    }
}

/// The control API's own settings (`[api]`).
#[derive(Clone, Debug, Default, PartialEq, serde::Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct ApiSettings {
    pub tls: ApiTlsSettings,
}

/// The control API's certificate (`[api.tls]`): with one, it speaks HTTPS only.
#[derive(Clone, Debug, Default, PartialEq, serde::Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct ApiTlsSettings {
    /// Certificate chain, leaf first (PEM).
    pub cert: Option<PathBuf>,
    /// Its private key (PEM).
    pub key: Option<PathBuf>,
    /// With it, every client must present a certificate this CA signed (PEM).
    pub client_ca: Option<PathBuf>,
}

impl ApiSettings {
    /// A certificate needs its key, and a client CA needs both.
    pub fn validate(&self) -> Result<(), InvalidSetting> {
        let t = &self.tls;
        if t.cert.is_some() != t.key.is_some() || (t.client_ca.is_some() && t.cert.is_none()) {
            return Err(InvalidSetting::new(
                "api.tls",
                "set both api.tls.cert and api.tls.key (--api-tls-cert, --api-tls-key); client_ca needs them",
            ));
        }
        Ok(())
    }
}

impl ClientTls {
    /// A client certificate needs its key.
    pub fn validate(&self) -> Result<(), InvalidSetting> {
        if self.cert.is_some() != self.key.is_some() {
            return Err(InvalidSetting::new(
                "client_cert",
                "set both client_cert and client_key (--client-cert, --client-key)",
            ));
        }
        Ok(())
    }
}

/// The keys of `[api.tls]`.
pub const API_TLS_KEYS: &[Key] = &[
    Key::toml(
        "api.tls.cert",
        KeyDefault::Described("none"),
        "\"/etc/lagran/api.pem\"",
        "PEM certificate chain of the control API (`serve`, `control`): it then serves HTTPS only",
    )
    .flags(&["--api-tls-cert"]),
    Key::toml(
        "api.tls.key",
        KeyDefault::Described("none"),
        "\"/etc/lagran/api.key\"",
        "the private key of `api.tls.cert`",
    )
    .flags(&["--api-tls-key"]),
    Key::toml(
        "api.tls.client_ca",
        KeyDefault::Described("none"),
        "\"/etc/lagran/clients-ca.pem\"",
        "PEM CA: every API client must present a certificate it signed",
    )
    .flags(&["--api-tls-client-ca"]),
];

/// The keys of what clients of the control API trust and present.
pub const CLIENT_KEYS: &[Key] = &[
    Key::toml(
        "ca",
        KeyDefault::Described("the system store"),
        "\"/etc/lagran/control-ca.pem\"",
        "PEM CA bundle trusted for `https://` control URLs (`lagran dns`, operator commands; the edge's `ca`); \
         an `https://` URL is never sent in cleartext",
    )
    .env("LAGRAN_CA")
    .flags(&["--ca"]),
    Key::toml(
        "client_cert",
        KeyDefault::Described("none"),
        "\"/etc/lagran/ns1.pem\"",
        "PEM client certificate an NS host presents to an `https://` control API",
    )
    .flags(&["--client-cert"]),
    Key::toml(
        "client_key",
        KeyDefault::Described("none"),
        "\"/etc/lagran/ns1.key\"",
        "the private key of `client_cert`",
    )
    .flags(&["--client-key"]),
    Key::toml(
        "insecure_control",
        KeyDefault::Toml("false"),
        "true",
        "accept `http://` control URLs to non-loopback addresses (`lagran dns`, operator commands; the edge's \
         `insecure_control`): tokens, route tables and keys then cross the network in cleartext; warned at every start",
    )
    .flags(&["--insecure-control"]),
];

#[cfg(test)]
mod tests {
    use super::*;
    use rcgen::{BasicConstraints, CertificateParams, IsCa, KeyPair};

    /// A CA and a certificate for `name` it signed, as PEM files under `dir`.
    fn write_pki(dir: &Path, name: &str) -> (PathBuf, PathBuf, PathBuf) {
        let ca_key = KeyPair::generate().unwrap();
        let mut ca_params = CertificateParams::new(Vec::<String>::new()).unwrap();
        ca_params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
        let ca = ca_params.self_signed(&ca_key).unwrap();
        let key = KeyPair::generate().unwrap();
        let cert = CertificateParams::new(vec![name.to_string()]).unwrap().signed_by(&key, &ca, &ca_key).unwrap();
        let paths =
            (dir.join(format!("{name}-ca.pem")), dir.join(format!("{name}.pem")), dir.join(format!("{name}.key")));
        std::fs::write(&paths.0, ca.pem()).unwrap();
        std::fs::write(&paths.1, cert.pem()).unwrap();
        std::fs::write(&paths.2, key.serialize_pem()).unwrap();
        paths
    }

    /// One TLS handshake over an in-memory pipe; the client's error, if any.
    async fn handshake(server: Arc<ServerConfig>, client: Arc<ClientConfig>, name: &str) -> Result<(), String> {
        use tokio::io::{AsyncReadExt, AsyncWriteExt};
        let (a, b) = tokio::io::duplex(64 * 1024);
        let server = tokio::spawn(async move {
            let mut s = tokio_rustls::TlsAcceptor::from(server).accept(a).await.map_err(|e| e.to_string())?;
            let mut buf = [0u8; 4];
            s.read_exact(&mut buf).await.map_err(|e| e.to_string())?;
            s.write_all(&buf).await.map_err(|e| e.to_string())
        });
        let name = rustls::pki_types::ServerName::try_from(name.to_string()).unwrap();
        let client = async {
            let mut c = tokio_rustls::TlsConnector::from(client).connect(name, b).await.map_err(|e| e.to_string())?;
            c.write_all(b"ping").await.map_err(|e| e.to_string())?;
            let mut buf = [0u8; 4];
            c.read_exact(&mut buf).await.map_err(|e| e.to_string())?;
            Ok::<_, String>(())
        };
        let r = client.await;
        let _ = server.await;
        r
    }

    #[tokio::test]
    async fn clients_trust_only_the_given_ca_and_present_certificates_when_required() {
        let dir = tempfile::tempdir().unwrap();
        let (ca, cert, key) = write_pki(dir.path(), "127.0.0.1");
        let (other_ca, client_cert, client_key) = write_pki(dir.path(), "ns1.test");
        let server = server_config(&cert, &key, None).unwrap();
        let trusting = ClientTls { ca: Some(ca.clone()), ..ClientTls::default() };
        handshake(server.clone(), trusting.config().unwrap(), "127.0.0.1").await.expect("the CA's certificate");
        let wrong = ClientTls { ca: Some(other_ca.clone()), ..ClientTls::default() };
        let e = handshake(server, wrong.config().unwrap(), "127.0.0.1").await.unwrap_err();
        assert!(e.contains("certificate"), "another CA's server is refused: {e}");

        // Client certificates required: only a client presenting one the CA signed gets in.
        let mtls = server_config(&cert, &key, Some(&other_ca)).unwrap();
        let with_cert =
            ClientTls { ca: Some(ca.clone()), cert: Some(client_cert), key: Some(client_key), ..ClientTls::default() };
        handshake(mtls.clone(), with_cert.config().unwrap(), "127.0.0.1").await.expect("a client certificate");
        assert!(handshake(mtls, trusting.config().unwrap(), "127.0.0.1").await.is_err(), "no client certificate");

        let half = ClientTls { ca: Some(ca), cert: Some(cert), ..ClientTls::default() };
        assert!(half.config().unwrap_err().to_string().contains("--client-key"));
    }
}
