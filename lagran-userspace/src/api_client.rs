//! A small JSON client for the control API, used by the operator commands
//! (`lagran rule …`, `lagran routes …`) so that changes go through the running
//! daemon and reach the DNS answers at once; also the NS hosts' route-table
//! stream. `https://` URLs are spoken over TLS only ([`crate::control_tls`]):
//! never sent in cleartext; `http://` ones only to a loopback address unless
//! `insecure_control` ([`crate::control_url`]).

use http_body_util::{BodyExt, Full};
use hyper::body::Bytes;
use serde_json::Value;

use std::sync::{Arc, Mutex};

use crate::api::auth::AGENT_TOKEN_HEADER;
use crate::control_tls::ClientTls;

/// Why a request to the control API failed.
#[derive(Debug, thiserror::Error)]
pub enum ClientError {
    #[error("{url} is not a usable API URL: {reason}")]
    Url { url: String, reason: String },
    #[error("cannot reach the control API at {url}: {reason} (is `lagran serve` running? --api / LAGRAN_API)")]
    Connect { url: String, reason: String },
    #[error(transparent)]
    Cleartext(#[from] crate::control_url::ControlUrlError),
    #[error("TLS with {url} failed: {reason}")]
    Tls { url: String, reason: String },
    #[error("{method} {url}: {status}: {message}")]
    Status { method: String, url: String, status: u16, message: String },
}

/// Where the API is and which tokens to present.
#[derive(Clone, Debug, Default)]
pub struct ApiClient {
    /// e.g. `http://127.0.0.1:8080` or `https://control.example:8443`
    pub base: String,
    pub admin_token: Option<String>,
    pub agent_token: Option<String>,
    /// What an `https://` base trusts and presents.
    pub tls: ClientTls,
}

/// The rustls configuration of `tls`, built once per process and setting.
fn client_config(tls: &ClientTls) -> Result<Arc<rustls::ClientConfig>, String> {
    static BUILT: Mutex<Vec<(ClientTls, Arc<rustls::ClientConfig>)>> = Mutex::new(Vec::new());
    let mut built = BUILT.lock().unwrap_or_else(|p| p.into_inner());
    if let Some((_, c)) = built.iter().find(|(k, _)| k == tls) {
        return Ok(c.clone());
    }
    let config = tls.config().map_err(|e| e.to_string())?;
    built.push((tls.clone(), config.clone()));
    Ok(config)
}

/// An HTTP/1.1 connection over `io` (TCP or TLS), driven by a spawned task.
async fn http1<S>(io: S) -> hyper::Result<hyper::client::conn::http1::SendRequest<Full<Bytes>>>
where
    S: tokio::io::AsyncRead + tokio::io::AsyncWrite + Unpin + Send + 'static,
{
    let (sender, conn) = hyper::client::conn::http1::handshake(hyper_util::rt::TokioIo::new(io)).await?;
    tokio::spawn(async move {
        let _ = conn.await;
    });
    Ok(sender)
}

impl ApiClient {
    /// Sends a request; a non-2xx status is an error carrying the API's message.
    pub async fn call(&self, method: &str, path: &str, body: Option<&Value>) -> Result<Value, ClientError> {
        let (status, bytes, url) = self.send(method, path, body).await?;
        let value: Value = serde_json::from_slice(&bytes)
            .unwrap_or_else(|_| Value::String(String::from_utf8_lossy(&bytes).into_owned()));
        if !(200..300).contains(&status) {
            let message = value["error"].as_str().map_or_else(|| value.to_string(), str::to_string);
            let message = match value["field"].as_str() {
                Some(f) => format!("{message} (field `{f}`)"),
                None => message,
            };
            return Err(ClientError::Status { method: method.into(), url, status, message });
        }
        Ok(value)
    }

    /// Sends a request and returns the status with the JSON body (`Null` when
    /// empty, a string when not JSON), whatever the status.
    pub async fn request(&self, method: &str, path: &str, body: Option<&Value>) -> Result<(u16, Value), ClientError> {
        let (status, bytes, _) = self.send(method, path, body).await?;
        let value = if bytes.is_empty() {
            Value::Null
        } else {
            serde_json::from_slice(&bytes)
                .unwrap_or_else(|_| Value::String(String::from_utf8_lossy(&bytes).into_owned()))
        };
        Ok((status, value))
    }

    /// Sends a GET and returns the status and the raw body.
    pub async fn get_raw(&self, path: &str) -> Result<(u16, Bytes), ClientError> {
        let (status, bytes, _) = self.send("GET", path, None).await?;
        Ok((status, bytes))
    }

    async fn send(&self, method: &str, path: &str, body: Option<&Value>) -> Result<(u16, Bytes, String), ClientError> {
        let url = format!("{}{}", self.base.trim_end_matches('/'), path);
        crate::control_url::check(&url, self.tls.insecure_control)?;
        let uri: hyper::Uri = url
            .parse()
            .map_err(|e: hyper::http::uri::InvalidUri| ClientError::Url { url: url.clone(), reason: e.to_string() })?;
        // An https:// URL is never sent in cleartext (its token would travel in the clear).
        let https = match uri.scheme_str() {
            Some("http") => false,
            Some("https") => true,
            other => {
                return Err(ClientError::Url {
                    url: url.clone(),
                    reason: format!("the scheme {other:?} is neither http nor https"),
                });
            }
        };
        let host =
            uri.host().ok_or_else(|| ClientError::Url { url: url.clone(), reason: "no host".into() })?.to_string();
        let port = uri.port_u16().unwrap_or(if https { 443 } else { 80 });
        let connect = |reason: String| ClientError::Connect { url: url.clone(), reason };
        // `[::1]` in a URL; the bare address to connect to and to check the certificate against.
        let bare = host.trim_start_matches('[').trim_end_matches(']').to_string();
        let stream = tokio::net::TcpStream::connect((bare.as_str(), port)).await.map_err(|e| connect(e.to_string()))?;
        let mut sender = if https {
            let tls = |reason: String| ClientError::Tls { url: url.clone(), reason };
            let config = client_config(&self.tls).map_err(tls)?;
            let name = rustls::pki_types::ServerName::try_from(bare.clone()).map_err(|e| tls(e.to_string()))?;
            let stream =
                tokio_rustls::TlsConnector::from(config).connect(name, stream).await.map_err(|e| tls(e.to_string()))?;
            http1(stream).await
        } else {
            http1(stream).await
        }
        .map_err(|e| connect(e.to_string()))?;
        let mut req = hyper::Request::builder()
            .method(method)
            .uri(uri.path_and_query().map_or("/", |p| p.as_str()))
            .header(hyper::header::HOST, format!("{host}:{port}"))
            .header(hyper::header::CONTENT_TYPE, "application/json");
        if let Some(t) = &self.admin_token {
            req = req.header(hyper::header::AUTHORIZATION, format!("Bearer {t}"));
        }
        if let Some(t) = &self.agent_token {
            req = req.header(AGENT_TOKEN_HEADER, t);
        }
        let payload = body.map(|b| b.to_string()).unwrap_or_default();
        let req = req.body(Full::new(Bytes::from(payload))).map_err(|e| connect(e.to_string()))?;
        let resp = sender.send_request(req).await.map_err(|e| connect(e.to_string()))?;
        let status = resp.status().as_u16();
        let bytes = resp.into_body().collect().await.map_err(|e| connect(e.to_string()))?.to_bytes();
        Ok((status, bytes, url))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use tokio::io::AsyncReadExt;

    /// An `https://` URL is never sent in cleartext: the first bytes on the wire
    /// are a TLS ClientHello, and a server that does not speak TLS is an error,
    /// never a cleartext retry.
    #[tokio::test]
    async fn https_urls_never_travel_in_cleartext() {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let seen = tokio::spawn(async move {
            let mut all = Vec::new();
            for _ in 0..2 {
                let Ok(Ok((mut s, _))) =
                    tokio::time::timeout(std::time::Duration::from_secs(3), listener.accept()).await
                else {
                    break;
                };
                let mut buf = vec![0u8; 4096];
                let n = s.read(&mut buf).await.unwrap_or(0);
                all.push(buf[..n].to_vec());
                drop(s); // not TLS: hang up
            }
            all
        });
        let dir = tempfile::tempdir().unwrap();
        let ca = dir.path().join("ca.pem");
        std::fs::write(&ca, rcgen::generate_simple_self_signed(vec!["ca.test".into()]).unwrap().cert.pem()).unwrap();
        let client = ApiClient {
            base: format!("https://{addr}"),
            admin_token: Some("secret-admin-token".into()),
            tls: ClientTls { ca: Some(ca), ..ClientTls::default() },
            ..ApiClient::default()
        };
        let e = client.call("GET", "/api/v1/nodes", None).await.unwrap_err();
        assert!(matches!(e, ClientError::Tls { .. }), "a failed handshake is a TLS error: {e}");
        let seen = seen.await.unwrap();
        assert_eq!(seen.len(), 1, "one connection, no cleartext retry");
        assert_eq!(seen[0].first(), Some(&0x16), "a TLS handshake record, not HTTP");
        let text = String::from_utf8_lossy(&seen[0]);
        assert!(!text.contains("secret-admin-token") && !text.contains("GET "), "nothing in cleartext");
    }

    /// An `http://` URL to another machine is refused before any connection
    /// (the address is in TEST-NET-1: nothing would answer anyway).
    #[tokio::test]
    async fn cleartext_to_another_machine_is_refused_unless_allowed() {
        let client = ApiClient { base: "http://192.0.2.1:8080".into(), ..ApiClient::default() };
        let e = client.call("GET", "/api/v1/nodes", None).await.unwrap_err();
        assert!(matches!(e, ClientError::Cleartext(_)), "{e}");
        assert!(e.to_string().contains("--insecure-control"), "{e}");
    }
}
