//! The operator commands' view of the daemon's API (`lagran geo override …`,
//! `lagran geo reload`): any status is an answer (a refused reload's 409 carries
//! its report). The transport is [`crate::api_client`]: `https://` with `--ca`,
//! `http://` only to this machine unless `--insecure-control`.

use std::time::Duration;

use hyper::Method;
use serde_json::Value;

use crate::geo::GeoError;

/// How long one request may take (a reload of the real file is the slowest).
const TIMEOUT: Duration = Duration::from_secs(120);

/// Where the daemon's API is and which tokens to present.
#[derive(Clone, Debug)]
pub struct ApiClient {
    base: String,
    admin_token: Option<String>,
    agent_token: Option<String>,
    tls: crate::control_tls::ClientTls,
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
            Value::Object(o) => {
                match (o.get("error").and_then(Value::as_str), o.get("field").and_then(Value::as_str)) {
                    (Some(e), Some(f)) => format!("{e} (field {f})"),
                    (Some(e), None) => e.to_string(),
                    _ => self.body.to_string(),
                }
            }
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
            tls: crate::control_tls::ClientTls::default(),
        }
    }

    /// What an `https://` base trusts and presents (`--ca`).
    pub fn with_tls(mut self, tls: crate::control_tls::ClientTls) -> ApiClient {
        self.tls = tls;
        self
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
        let transport = crate::api_client::ApiClient {
            base: self.base.clone(),
            admin_token: self.admin_token.clone(),
            agent_token: self.agent_token.clone(),
            tls: self.tls.clone(),
        };
        let (status, body) = tokio::time::timeout(TIMEOUT, transport.request(m, path, body))
            .await
            .map_err(|_| fail(format!("no answer within {} s", TIMEOUT.as_secs())))?
            .map_err(|e| fail(e.to_string()))?;
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
        let e = ApiClient::new("ftp://x", None, None).request(Method::GET, "/", None).await.unwrap_err();
        assert!(e.to_string().contains("neither http nor https"), "{e}");
    }
}
