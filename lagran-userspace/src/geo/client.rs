//! A tiny HTTP/1 client for the operator commands that talk to the running daemon's
//! API (`lagran geo override …`, `lagran geo reload`): plain `http://` only (the API
//! listens on loopback or behind a proxy), JSON in and out, bearer admin token.

use std::time::Duration;

use http_body_util::{BodyExt, Full};
use hyper::body::Bytes;
use hyper::{Method, Request};
use hyper_util::client::legacy::Client;
use hyper_util::rt::TokioExecutor;
use serde_json::Value;

use super::GeoError;
use crate::api::auth::AGENT_TOKEN_HEADER;

/// How long one request may take (a reload of the real file is the slowest).
const TIMEOUT: Duration = Duration::from_secs(120);

/// Where the daemon's API is and which tokens to present.
#[derive(Clone, Debug)]
pub struct ApiClient {
    base: String,
    admin_token: Option<String>,
    agent_token: Option<String>,
}

/// An answer: the status code and the JSON body (`Value::Null` when empty, a string
/// when not JSON).
#[derive(Clone, Debug, PartialEq)]
pub struct ApiResponse {
    /// HTTP status.
    pub status: u16,
    /// The body.
    pub body: Value,
}

impl ApiResponse {
    /// Whether the status is 2xx.
    pub fn ok(&self) -> bool {
        (200..300).contains(&self.status)
    }

    /// The API's `error` message, or the body as text.
    pub fn error_text(&self) -> String {
        match &self.body {
            Value::Object(o) => match (o.get("error").and_then(Value::as_str), o.get("field").and_then(Value::as_str)) {
                (Some(e), Some(f)) => format!("{e} (field {f})"),
                (Some(e), None) => e.to_string(),
                _ => self.body.to_string(),
            },
            Value::String(s) => s.clone(),
            other => other.to_string(),
        }
    }
}

impl ApiClient {
    /// `base` is like `http://127.0.0.1:8080` (a trailing `/` is ignored; a bare
    /// `host:port` gets `http://`).
    pub fn new(base: &str, admin_token: Option<String>, agent_token: Option<String>) -> ApiClient {
        let base = base.trim().trim_end_matches('/');
        let base = if base.contains("://") { base.to_string() } else { format!("http://{base}") };
        ApiClient {
            base,
            admin_token: admin_token.filter(|t| !t.is_empty()),
            agent_token: agent_token.filter(|t| !t.is_empty()),
        }
    }

    /// The API base URL.
    pub fn base(&self) -> &str {
        &self.base
    }

    /// Sends one request; any HTTP status is an `Ok` answer, transport problems are errors.
    pub async fn request(&self, method: Method, path: &str, body: Option<&Value>) -> Result<ApiResponse, GeoError> {
        let url = format!("{}{path}", self.base);
        let m: &'static str = match method {
            Method::GET => "GET",
            Method::POST => "POST",
            Method::PUT => "PUT",
            Method::DELETE => "DELETE",
            Method::PATCH => "PATCH",
            _ => "HTTP",
        };
        let fail = |reason: String| GeoError::Client { method: m, url: url.clone(), reason };
        if !url.starts_with("http://") {
            return Err(fail("only http:// API addresses are supported".into()));
        }
        let uri: hyper::Uri = url.parse().map_err(|e| fail(format!("not a valid URL: {e}")))?;
        let mut req = Request::builder().method(method).uri(uri).header("accept", "application/json");
        if let Some(t) = &self.admin_token {
            req = req.header("authorization", format!("Bearer {t}"));
        }
        if let Some(t) = &self.agent_token {
            req = req.header(AGENT_TOKEN_HEADER, t.as_str());
        }
        let bytes = match body {
            Some(v) => {
                req = req.header("content-type", "application/json");
                Bytes::from(serde_json::to_vec(v).map_err(|e| fail(e.to_string()))?)
            }
            None => Bytes::new(),
        };
        let req = req.body(Full::new(bytes)).map_err(|e| fail(e.to_string()))?;
        let client = Client::builder(TokioExecutor::new()).build_http::<Full<Bytes>>();
        let res = tokio::time::timeout(TIMEOUT, async {
            let res = client.request(req).await.map_err(|e| {
                let mut msg = e.to_string();
                let mut src = std::error::Error::source(&e);
                while let Some(s) = src {
                    msg.push_str(": ");
                    msg.push_str(&s.to_string());
                    src = s.source();
                }
                fail(format!("{msg} (is `lagran serve` running there? set --api or LAGRAN_API)"))
            })?;
            let status = res.status().as_u16();
            let body = res.into_body().collect().await.map_err(|e| fail(e.to_string()))?.to_bytes();
            Ok::<_, GeoError>((status, body))
        })
        .await
        .map_err(|_| fail(format!("no answer within {} s", TIMEOUT.as_secs())))??;
        let (status, body) = res;
        let body = if body.is_empty() {
            Value::Null
        } else {
            serde_json::from_slice(&body).unwrap_or_else(|_| Value::String(String::from_utf8_lossy(&body).into_owned()))
        };
        Ok(ApiResponse { status, body })
    }
}

/// Percent-encodes one path segment (a prefix such as `1.2.3.0/24` → `1.2.3.0%2F24`).
pub fn encode_segment(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    for b in s.bytes() {
        if b.is_ascii_alphanumeric() || matches!(b, b'-' | b'.' | b'_' | b'~' | b':') {
            out.push(b as char);
        } else {
            out.push_str(&format!("%{b:02X}"));
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn segments_are_encoded() {
        assert_eq!(encode_segment("1.2.3.0/24"), "1.2.3.0%2F24");
        assert_eq!(encode_segment("2001:db8::/32"), "2001:db8::%2F32");
    }

    #[tokio::test]
    async fn unreachable_api_is_a_clear_error() {
        // Port 9 (discard) on loopback: nothing listens there in the test environment.
        let c = ApiClient::new("127.0.0.1:9/", None, None);
        assert_eq!(c.base(), "http://127.0.0.1:9");
        let e = c.request(Method::GET, "/api/v1/geo/overrides", None).await.unwrap_err().to_string();
        assert!(e.contains("GET http://127.0.0.1:9/api/v1/geo/overrides") && e.contains("lagran serve"), "{e}");
        let e = ApiClient::new("https://x", None, None).request(Method::GET, "/", None).await.unwrap_err();
        assert!(e.to_string().contains("only http://"), "{e}");
    }
}
