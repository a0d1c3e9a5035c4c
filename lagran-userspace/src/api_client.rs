//! A small JSON client for the control API, used by the operator commands
//! (`lagran rule …`, `lagran routes …`) so that changes go through the running
//! daemon and reach the DNS answers at once.

use http_body_util::{BodyExt, Full};
use hyper::body::Bytes;
use serde_json::Value;

use crate::api::auth::AGENT_TOKEN_HEADER;

/// Why a request to the control API failed.
#[derive(Debug, thiserror::Error)]
pub enum ClientError {
    #[error("{url} is not a usable API URL: {reason}")]
    Url { url: String, reason: String },
    #[error("cannot reach the control API at {url}: {reason} (is `lagran serve` running? --api / LAGRAN_API)")]
    Connect { url: String, reason: String },
    #[error("{method} {url}: {status}: {message}")]
    Status { method: String, url: String, status: u16, message: String },
}

/// Where the API is and which tokens to present.
#[derive(Clone, Debug)]
pub struct ApiClient {
    /// e.g. `http://127.0.0.1:8080`
    pub base: String,
    pub admin_token: Option<String>,
    pub agent_token: Option<String>,
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
        let uri: hyper::Uri = url
            .parse()
            .map_err(|e: hyper::http::uri::InvalidUri| ClientError::Url { url: url.clone(), reason: e.to_string() })?;
        let host =
            uri.host().ok_or_else(|| ClientError::Url { url: url.clone(), reason: "no host".into() })?.to_string();
        let port = uri.port_u16().unwrap_or(80);
        let connect = |reason: String| ClientError::Connect { url: url.clone(), reason };
        let stream = tokio::net::TcpStream::connect((host.as_str(), port)).await.map_err(|e| connect(e.to_string()))?;
        let (mut sender, conn) = hyper::client::conn::http1::handshake(hyper_util::rt::TokioIo::new(stream))
            .await
            .map_err(|e| connect(e.to_string()))?;
        tokio::spawn(async move {
            let _ = conn.await;
        });
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
