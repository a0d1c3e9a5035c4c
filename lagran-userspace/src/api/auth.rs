//! API authentication: an admin bearer token for writes, the agent token for
//! reads by DNS hosts and agents. Tokens are kept only as SHA-256
//! hashes and compared in constant time.
//!
//! The console (`/ui`) keeps a random session id in an HttpOnly,
//! SameSite=Strict cookie ([`SESSION_COOKIE`], [`super::sessions`]); every
//! check below accepts what the session grants where it accepts the header,
//! since a browser's live connection cannot send headers.

use axum::http::HeaderMap;
use sha2::{Digest, Sha256};
use subtle::ConstantTimeEq;

use super::error::ApiError;
pub use super::sessions::Grants;
use super::sessions::Sessions;
use crate::clock::now_ms;

/// The header agents and DNS hosts authenticate with.
pub const AGENT_TOKEN_HEADER: &str = "x-lagran-agent-token";

/// The console's cookie: a session id given at login.
pub const SESSION_COOKIE: &str = "lagran_session";

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
    /// The console's sessions.
    pub sessions: std::sync::Arc<Sessions>,
}

impl Auth {
    pub fn new(agent_token: Option<&str>, admin_token: Option<&str>) -> Self {
        Auth { agent: agent_token.map(token_hash), admin: admin_token.map(token_hash), sessions: Default::default() }
    }

    /// What the request's console session grants (nothing without one).
    fn session(&self, headers: &HeaderMap) -> Grants {
        let none = Grants { read: false, write: false };
        Self::cookie(headers).and_then(|id| self.sessions.grants(id, now_ms())).unwrap_or(none)
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

    /// The console cookie's session id, if one was sent.
    pub fn cookie(headers: &HeaderMap) -> Option<&str> {
        headers
            .get_all(axum::http::header::COOKIE)
            .iter()
            .filter_map(|v| v.to_str().ok())
            .flat_map(|v| v.split(';'))
            .filter_map(|kv| kv.trim().split_once('='))
            .find(|(k, _)| *k == SESSION_COOKIE)
            .map(|(_, v)| v.trim())
            .filter(|v| !v.is_empty())
    }

    /// What `token` grants: the admin token reads and writes, the agent token
    /// reads; an unset class is open.
    pub fn grants_of(&self, token: Option<&str>) -> Grants {
        let admin = matches!((&self.admin, token), (Some(a), Some(t)) if token_matches(t, a));
        let agent = token.is_some_and(|t| self.agent_token_matches(t));
        Grants { read: self.reads_open() || admin || agent, write: self.writes_open() || admin }
    }

    /// What the request's credentials (bearer token, agent header or console session) grant.
    pub fn grants(&self, headers: &HeaderMap) -> Grants {
        let session = self.session(headers);
        let mut g = Grants { read: self.reads_open() || session.read, write: self.writes_open() || session.write };
        let presented = [Self::bearer(headers), headers.get(AGENT_TOKEN_HEADER).and_then(|v| v.to_str().ok())];
        for t in presented.into_iter().flatten() {
            let x = self.grants_of(Some(t));
            g.read |= x.read;
            g.write |= x.write;
        }
        g
    }

    /// Whether `presented` is the global agent token (never true when none is set).
    pub fn agent_token_matches(&self, presented: &str) -> bool {
        self.agent.as_ref().is_some_and(|a| token_matches(presented, a))
    }

    /// Whether the request comes from an NS host that authenticated, as a
    /// report on the table stream must: the agent token header or the admin
    /// bearer token (a console session reads, but is no NS host). Every
    /// caller when the API runs open (no tokens: bound to loopback), as for
    /// every read.
    pub fn authenticates_ns_host(&self, headers: &HeaderMap) -> bool {
        if self.reads_open() {
            return true;
        }
        let agent = headers.get(AGENT_TOKEN_HEADER).and_then(|v| v.to_str().ok());
        let admin = matches!((&self.admin, Self::bearer(headers)), (Some(a), Some(t)) if token_matches(t, a));
        admin || agent.is_some_and(|t| self.agent_token_matches(t))
    }

    /// Writes: `Authorization: Bearer <ADMIN_TOKEN>`.
    pub fn check_admin(&self, headers: &HeaderMap) -> Result<(), ApiError> {
        let Some(admin) = &self.admin else { return Ok(()) };
        if self.session(headers).write {
            return Ok(());
        }
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
        if self.session(headers).read {
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

    #[test]
    fn the_console_cookie_carries_a_session_not_a_token() {
        let a = Auth::new(Some("agent"), Some("admin"));
        let rw = a.sessions.open(a.grants_of(Some("admin")), now_ms());
        let ro = a.sessions.open(a.grants_of(Some("agent")), now_ms());
        let admin = headers(&[("cookie", &format!("theme=dark; lagran_session={rw}"))]);
        assert!(a.check_admin(&admin).is_ok());
        assert!(a.check_agent(&admin).is_ok());
        assert_eq!(a.grants(&admin), Grants { read: true, write: true });
        let agent = headers(&[("cookie", &format!("lagran_session={ro}"))]);
        assert!(a.check_agent(&agent).is_ok());
        assert!(a.check_admin(&agent).is_err(), "the agent token's session never writes");
        assert_eq!(a.grants(&agent), Grants { read: true, write: false });
        let raw = headers(&[("cookie", "lagran_session=admin")]);
        assert!(a.check_admin(&raw).is_err(), "the token itself is no session");
        assert_eq!(a.grants(&raw), Grants { read: false, write: false });
        a.sessions.revoke(&rw);
        assert!(a.check_admin(&admin).is_err(), "a revoked session grants nothing");
        assert_eq!(Auth::new(None, None).grants(&HeaderMap::new()), Grants { read: true, write: true });
        assert!(!a.authenticates_ns_host(&agent), "a console session is no NS host");
        assert!(a.authenticates_ns_host(&headers(&[(AGENT_TOKEN_HEADER, "agent")])));
        assert!(a.authenticates_ns_host(&headers(&[("authorization", "Bearer admin")])));
        assert!(!a.authenticates_ns_host(&headers(&[("authorization", "Bearer agent")])));
        assert!(!a.authenticates_ns_host(&headers(&[(AGENT_TOKEN_HEADER, "admin")])));
        assert!(!a.authenticates_ns_host(&HeaderMap::new()));
        assert!(Auth::new(None, None).authenticates_ns_host(&HeaderMap::new()), "an open API trusts every caller");
        // Only an agent token: reads need it, writes are open.
        let a = Auth::new(Some("agent"), None);
        assert_eq!(a.grants(&HeaderMap::new()), Grants { read: false, write: true });
    }
}
