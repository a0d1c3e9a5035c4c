//! HTTP-01 answers (RFC 8555 §8.3): `GET /.well-known/acme-challenge/{token}`
//! on the plain HTTP listener, for any host and before the WAF and site
//! routing, answered with the key authorization the control plane's ACME
//! client stored for that token. The edge asks the control plane for it
//! (`GET {control_url}/api/v1/acme/challenges/{token}`, with the agent token)
//! when the request comes, so a challenge is answerable at every edge from the
//! moment the control plane has it: there is no poll to wait for.
//!
//! Each request costs a round trip to the control plane, so a client may ask
//! at most [`RPS`] times a second (burst [`BURST`]); an ACME server asks a few
//! times per order. A token that is not base64url is refused here, unasked.
//! Without a `control_url` the path is not intercepted: a site's own origin
//! may answer its challenges.

use std::net::IpAddr;
use std::time::{Duration, Instant};

use bytes::Bytes;
use http_body_util::{BodyExt, Full, Limited};
use hyper::header::{self, HeaderValue};
use hyper::{Request, Response, StatusCode};

use crate::agent::TOKEN_HEADER;
use crate::body::{self, EdgeBody};
use crate::config::Config;
use crate::control::{self, ControlClient, ControlError};
use crate::rate_limit::RateLimiter;
use crate::reply::text;

/// The path prefix answered here.
pub const PREFIX: &str = "/.well-known/acme-challenge/";
/// Challenge requests per second one client may make.
pub const RPS: f64 = 5.0;
pub const BURST: u32 = 20;
/// The control plane must answer within this.
const TIMEOUT: Duration = Duration::from_secs(5);
/// A key authorization is a token, a dot and a thumbprint: far below this.
const MAX_ANSWER_BYTES: usize = 1024;

/// The control plane's challenge answers, as this edge reaches them.
pub struct AcmeChallenges {
    client: ControlClient,
    /// `{control_url}/api/v1/acme/challenges/`.
    base: String,
    token: String,
    limiter: RateLimiter,
}

/// RFC 8555 §8.1: a token is base64url, at least 128 bits of entropy.
pub fn plausible_token(token: &str) -> bool {
    (16..=256).contains(&token.len()) && token.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_')
}

impl AcmeChallenges {
    /// `None` without a `control_url`.
    pub fn from_config(config: &Config) -> Option<Result<AcmeChallenges, ControlError>> {
        let base = config.control_url.as_deref()?.trim_end_matches('/');
        Some(control::client(config.ca.as_deref()).map(|client| AcmeChallenges {
            client,
            base: format!("{base}/api/v1/acme/challenges/"),
            token: config.agent_token.clone().unwrap_or_default(),
            limiter: RateLimiter::new(RPS, BURST, config.rate_limit_max_clients),
        }))
    }

    /// The answer to `GET {PREFIX}{token}` from `client_ip`.
    pub async fn answer(&self, token: &str, client_ip: IpAddr) -> Response<EdgeBody> {
        if !plausible_token(token) {
            return text(StatusCode::NOT_FOUND, "no such ACME challenge\n");
        }
        if !self.limiter.allow(client_ip, Instant::now()) {
            let mut resp = text(StatusCode::TOO_MANY_REQUESTS, "too many requests\n");
            resp.headers_mut().insert(header::RETRY_AFTER, HeaderValue::from_static("1"));
            return resp;
        }
        match tokio::time::timeout(TIMEOUT, self.ask(token)).await {
            Ok(Ok(Some(key_authorization))) => {
                let mut resp = Response::new(body::full(key_authorization));
                resp.headers_mut().insert(header::CONTENT_TYPE, HeaderValue::from_static("text/plain"));
                resp.headers_mut().insert(header::CACHE_CONTROL, HeaderValue::from_static("no-store"));
                resp
            }
            Ok(Ok(None)) => text(StatusCode::NOT_FOUND, "no such ACME challenge\n"),
            Ok(Err(reason)) => {
                tracing::warn!(%reason, "cannot read an ACME challenge from the control plane");
                text(StatusCode::BAD_GATEWAY, "the control plane cannot be asked\n")
            }
            Err(_) => text(StatusCode::GATEWAY_TIMEOUT, "the control plane did not answer\n"),
        }
    }

    /// The key authorization for `token`; `None` when the control plane has no such challenge.
    async fn ask(&self, token: &str) -> Result<Option<Bytes>, String> {
        let req = Request::get(format!("{}{token}", self.base))
            .header(TOKEN_HEADER, &self.token)
            .body(Full::default())
            .map_err(|e| e.to_string())?;
        let resp = self.client.request(req).await.map_err(|e| crate::error_chain(&e))?;
        let status = resp.status();
        let body = Limited::new(resp.into_body(), MAX_ANSWER_BYTES).collect().await.map_err(|e| e.to_string())?;
        match status {
            StatusCode::OK => Ok(Some(body.to_bytes())),
            StatusCode::NOT_FOUND => Ok(None),
            other => Err(format!("{}{token} answered {other}", self.base)),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_base64url_tokens_are_asked_for() {
        assert!(plausible_token("LoqXcYV8q5ONbJQxbmR7SCTNo3tiAXDfowyjxAjEuX0"));
        assert!(!plausible_token("..%2f..%2fadmin-aaaaaaaaaaaaa"));
        assert!(!plausible_token("x"));
    }
}
