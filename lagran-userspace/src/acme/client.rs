//! The ACME client's HTTP: the workspace's hyper and rustls (ring), trusting
//! the system's CA certificates plus `acme.ca_file`. instant-acme's own client
//! would bring a second TLS stack (aws-lc) and the platform verifier; its
//! [`HttpClient`] trait lets it use this one instead.

use std::future::Future;
use std::path::Path;
use std::pin::Pin;
use std::sync::Arc;
use std::time::Duration;

use axum::body::Bytes;
use http_body_util::BodyExt;
use hyper_util::client::legacy::Client;
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::rt::TokioExecutor;
use instant_acme::{BodyWrapper, BytesResponse, HttpClient};
use rustls::pki_types::CertificateDer;
use rustls::pki_types::pem::PemObject;

/// One exchange with the ACME server may take this long (each is retried by the order flow).
const REQUEST_TIMEOUT: Duration = Duration::from_secs(30);

type Inner = Client<hyper_rustls::HttpsConnector<HttpConnector>, BodyWrapper<Bytes>>;

/// An HTTPS-only client for the ACME directory and everything it links to.
#[derive(Clone)]
pub struct AcmeHttp(Inner);

/// The PEM certificates of `path`; an error names the file and says what is wrong.
pub fn read_roots(path: &Path) -> Result<Vec<CertificateDer<'static>>, String> {
    let certs = CertificateDer::pem_file_iter(path)
        .and_then(|it| it.collect::<Result<Vec<_>, _>>())
        .map_err(|e| format!("{}: {e}", path.display()))?;
    if certs.is_empty() {
        return Err(format!("{} holds no PEM certificate", path.display()));
    }
    Ok(certs)
}

impl AcmeHttp {
    pub fn new(ca_file: Option<&Path>) -> Result<AcmeHttp, String> {
        let mut roots = rustls::RootCertStore::empty();
        roots.add_parsable_certificates(rustls_native_certs::load_native_certs().certs);
        if let Some(path) = ca_file {
            for cert in read_roots(path)? {
                roots.add(cert).map_err(|e| format!("{}: {e}", path.display()))?;
            }
        }
        let config = rustls::ClientConfig::builder_with_provider(Arc::new(rustls::crypto::ring::default_provider()))
            .with_safe_default_protocol_versions()
            .map_err(|e| e.to_string())?
            .with_root_certificates(roots)
            .with_no_client_auth();
        let connector =
            hyper_rustls::HttpsConnectorBuilder::new().with_tls_config(config).https_only().enable_http1().build();
        Ok(AcmeHttp(Client::builder(TokioExecutor::new()).build(connector)))
    }
}

impl HttpClient for AcmeHttp {
    fn request(
        &self,
        req: axum::http::Request<BodyWrapper<Bytes>>,
    ) -> Pin<Box<dyn Future<Output = Result<BytesResponse, instant_acme::Error>> + Send>> {
        let client = self.0.clone();
        Box::pin(async move {
            let exchange = async {
                let resp = client.request(req).await.map_err(|e| instant_acme::Error::Other(Box::new(e)))?;
                let (parts, body) = resp.into_parts();
                let body = body.collect().await.map_err(|e| instant_acme::Error::Other(Box::new(e)))?.to_bytes();
                Ok(BytesResponse { parts, body: Box::new(body) })
            };
            match tokio::time::timeout(REQUEST_TIMEOUT, exchange).await {
                Ok(result) => result,
                Err(_) => Err(instant_acme::Error::Other(Box::new(std::io::Error::new(
                    std::io::ErrorKind::TimedOut,
                    format!("the ACME server did not answer within {REQUEST_TIMEOUT:?}"),
                )))),
            }
        })
    }
}
