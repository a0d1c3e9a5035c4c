//! API authentication: an admin bearer token for writes, the agent token for
//! reads by DNS hosts and agents (SPEC §6). Tokens are kept only as SHA-256
//! hashes and compared in constant time.

use axum::http::HeaderMap;
use sha2::{Digest, Sha256};
use subtle::ConstantTimeEq;

use super::error::ApiError;

/// The header agents and DNS hosts authenticate with.
pub const AGENT_TOKEN_HEADER: &str = "x-lagran-agent-token";

/// SHA-256 of a token (node tokens are stored hex-encoded by `store::hash_token`).
pub fn token_hash(token: &str) -> [u8; 32] {
    Sha256::digest(token.as_bytes()).into()
}

/// Constant-time comparison of a presented token with a stored hash.
pub fn token_matches(presented: &str, stored: &[u8; 32]) -> bool {
    token_hash(presented).ct_eq(stored).into()
}

/// Which tokens this API accepts. A class with no token configured is open.
#[derive(Clone, Debug, Default)]
pub struct Auth {
    agent: Option<[u8; 32]>,
    admin: Option<[u8; 32]>,
}

impl Auth {
    pub fn new(agent_token: Option<&str>, admin_token: Option<&str>) -> Self {
        Auth { agent: agent_token.map(token_hash), admin: admin_token.map(token_hash) }
    }

    pub fn writes_open(&self) -> bool {
        self.admin.is_none()
    }

    pub fn reads_open(&self) -> bool {
        self.agent.is_none() && self.admin.is_none()
    }

    fn bearer(headers: &HeaderMap) -> Option<&str> {
        let v = headers.get(axum::http::header::AUTHORIZATION)?.to_str().ok()?;
        v.strip_prefix("Bearer ").map(str::trim)
    }

    /// Whether `presented` is the global agent token (never true when none is set).
    pub fn agent_token_matches(&self, presented: &str) -> bool {
        self.agent.as_ref().is_some_and(|a| token_matches(presented, a))
    }

    /// Writes: `Authorization: Bearer <ADMIN_TOKEN>`.
    pub fn check_admin(&self, headers: &HeaderMap) -> Result<(), ApiError> {
        let Some(admin) = &self.admin else { return Ok(()) };
        match Self::bearer(headers) {
            Some(t) if token_matches(t, admin) => Ok(()),
            Some(_) => Err(ApiError::unauthorized("the admin token is wrong")),
            None => Err(ApiError::unauthorized("writes need `Authorization: Bearer <ADMIN_TOKEN>`")),
        }
    }

    /// Reads: the agent token header (or the admin bearer token).
    pub fn check_agent(&self, headers: &HeaderMap) -> Result<(), ApiError> {
        if self.reads_open() {
            return Ok(());
        }
        if let (Some(admin), Some(t)) = (&self.admin, Self::bearer(headers))
            && token_matches(t, admin)
        {
            return Ok(());
        }
        let presented = headers.get(AGENT_TOKEN_HEADER).and_then(|v| v.to_str().ok());
        match (presented, &self.agent) {
            (Some(t), Some(agent)) if token_matches(t, agent) => Ok(()),
            (None, _) => Err(ApiError::unauthorized(format!("reads need the `{AGENT_TOKEN_HEADER}` header"))),
            _ => Err(ApiError::unauthorized("the agent token is wrong")),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn headers(pairs: &[(&'static str, &str)]) -> HeaderMap {
        let mut h = HeaderMap::new();
        for (k, v) in pairs {
            h.insert(*k, v.parse().unwrap());
        }
        h
    }

    #[test]
    fn open_when_nothing_is_configured() {
        let a = Auth::new(None, None);
        assert!(a.check_admin(&HeaderMap::new()).is_ok());
        assert!(a.check_agent(&HeaderMap::new()).is_ok());
    }

    #[test]
    fn admin_token_guards_writes() {
        let a = Auth::new(Some("agent"), Some("admin"));
        assert!(a.check_admin(&headers(&[("authorization", "Bearer admin")])).is_ok());
        assert!(a.check_admin(&headers(&[("authorization", "Bearer agent")])).is_err());
        assert!(a.check_admin(&HeaderMap::new()).is_err());
    }

    #[test]
    fn agent_token_or_admin_reads() {
        let a = Auth::new(Some("agent"), Some("admin"));
        assert!(a.check_agent(&headers(&[(AGENT_TOKEN_HEADER, "agent")])).is_ok());
        assert!(a.check_agent(&headers(&[("authorization", "Bearer admin")])).is_ok());
        assert!(a.check_agent(&headers(&[(AGENT_TOKEN_HEADER, "nope")])).is_err());
        assert!(a.check_agent(&HeaderMap::new()).is_err());
    }
}
