//! Console sessions: a login gives the browser a random session id, not the
//! token it typed. The server keeps what the session grants (by the id's
//! SHA-256), until it expires ([`SESSION_TTL_MS`]) or the browser signs out;
//! the token itself never sits in a cookie. Failed logins are counted per
//! client address: more than [`MAX_LOGIN_FAILURES`] in [`LOGIN_WINDOW_MS`]
//! and the address waits.

use std::collections::HashMap;
use std::net::IpAddr;
use std::sync::Mutex;
use std::sync::atomic::{AtomicBool, Ordering};

use sha2::{Digest, Sha256};

/// What a presented token, or a session opened with it, may do.
#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Serialize)]
pub struct Grants {
    pub read: bool,
    pub write: bool,
}

/// Sessions are kept by the SHA-256 of their id: a copy of the map holds no usable id.
fn token_hash(id: &str) -> [u8; 32] {
    Sha256::digest(id.as_bytes()).into()
}

/// How long a console session lasts after login.
pub const SESSION_TTL_MS: i64 = 12 * 3600 * 1000;
/// Failed logins an address may make within [`LOGIN_WINDOW_MS`].
pub const MAX_LOGIN_FAILURES: usize = 5;
pub const LOGIN_WINDOW_MS: i64 = 60_000;
/// Most sessions kept; the oldest goes first beyond that.
const MAX_SESSIONS: usize = 10_000;

#[derive(Clone, Copy, Debug)]
struct Session {
    grants: Grants,
    expires_ms: i64,
}

/// The live sessions and the recent failed logins.
#[derive(Debug, Default)]
pub struct Sessions {
    live: Mutex<HashMap<[u8; 32], Session>>,
    failures: Mutex<HashMap<IpAddr, Vec<i64>>>,
    /// The API is served over TLS: cookies carry `Secure`.
    secure: AtomicBool,
}

impl Sessions {
    /// Opens a session granting `grants` at `now_ms`; its id (64 hex digits).
    pub fn open(&self, grants: Grants, now_ms: i64) -> String {
        let id = hex::encode(rand::random::<[u8; 32]>());
        let mut live = self.live.lock().expect("session lock poisoned");
        live.retain(|_, s| s.expires_ms > now_ms);
        if live.len() >= MAX_SESSIONS
            && let Some(oldest) = live.iter().min_by_key(|(_, s)| s.expires_ms).map(|(k, _)| *k)
        {
            live.remove(&oldest);
        }
        live.insert(token_hash(&id), Session { grants, expires_ms: now_ms + SESSION_TTL_MS });
        id
    }

    /// What session `id` grants at `now_ms` (`None`: unknown, expired or revoked).
    pub fn grants(&self, id: &str, now_ms: i64) -> Option<Grants> {
        let live = self.live.lock().expect("session lock poisoned");
        live.get(&token_hash(id)).filter(|s| s.expires_ms > now_ms).map(|s| s.grants)
    }

    /// Ends session `id` (sign-out).
    pub fn revoke(&self, id: &str) {
        self.live.lock().expect("session lock poisoned").remove(&token_hash(id));
    }

    /// Whether `addr` may try to log in at `now_ms`.
    pub fn login_allowed(&self, addr: IpAddr, now_ms: i64) -> bool {
        let mut failures = self.failures.lock().expect("login-failure lock poisoned");
        let Some(times) = failures.get_mut(&addr) else { return true };
        times.retain(|t| now_ms - t < LOGIN_WINDOW_MS);
        times.len() < MAX_LOGIN_FAILURES
    }

    /// A failed login from `addr` at `now_ms`.
    pub fn login_failed(&self, addr: IpAddr, now_ms: i64) {
        let mut failures = self.failures.lock().expect("login-failure lock poisoned");
        if failures.len() >= MAX_SESSIONS {
            failures.retain(|_, times| times.iter().any(|t| now_ms - t < LOGIN_WINDOW_MS));
        }
        failures.entry(addr).or_default().push(now_ms);
    }

    /// Cookies say `Secure` (the API is served over TLS).
    pub fn set_secure(&self, secure: bool) {
        self.secure.store(secure, Ordering::SeqCst);
    }

    /// The attributes every session cookie carries.
    pub fn cookie_attributes(&self) -> &'static str {
        if self.secure.load(Ordering::SeqCst) {
            "Path=/; HttpOnly; SameSite=Strict; Secure"
        } else {
            "Path=/; HttpOnly; SameSite=Strict"
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const RW: Grants = Grants { read: true, write: true };

    #[test]
    fn sessions_are_random_expire_and_are_revoked() {
        let s = Sessions::default();
        let a = s.open(RW, 0);
        let b = s.open(Grants { read: true, write: false }, 0);
        assert_ne!(a, b);
        assert_eq!(a.len(), 64);
        assert_eq!(s.grants(&a, 1), Some(RW));
        assert_eq!(s.grants(&b, 1), Some(Grants { read: true, write: false }));
        assert_eq!(s.grants("made-up", 1), None);
        assert_eq!(s.grants(&a, SESSION_TTL_MS), None, "expired");
        s.revoke(&b);
        assert_eq!(s.grants(&b, 1), None, "revoked at sign-out");
        assert!(!s.cookie_attributes().contains("Secure"));
        s.set_secure(true);
        assert!(s.cookie_attributes().ends_with("; Secure"));
    }

    #[test]
    fn five_failed_logins_a_minute_per_address() {
        let s = Sessions::default();
        let (a, b): (IpAddr, IpAddr) = ("192.0.2.1".parse().unwrap(), "192.0.2.2".parse().unwrap());
        for i in 0..MAX_LOGIN_FAILURES as i64 {
            assert!(s.login_allowed(a, i));
            s.login_failed(a, i);
        }
        assert!(!s.login_allowed(a, 10), "the sixth try within the minute waits");
        assert!(s.login_allowed(b, 10), "another address does not");
        assert!(s.login_allowed(a, LOGIN_WINDOW_MS + 5), "a minute later it may again");
    }
}
