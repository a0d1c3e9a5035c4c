//! What became of a request, as the access log and the metrics record it.

use std::time::Duration;

use hyper::Response;
use hyper::header::{HeaderMap, HeaderName, HeaderValue};

use crate::body::EdgeBody;

/// The header an answer's [`CacheResult`] goes out in. A constant name: a
/// `&str` would be parsed into one on every response.
pub const X_CACHE: HeaderName = HeaderName::from_static("x-cache");

/// How the cache took part in an answer.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CacheResult {
    /// Served fresh from the cache, or from the file of a fetch in progress
    /// that this request did not make.
    Hit,
    /// Fetched from the origin.
    Miss,
    /// Served stale: while revalidating, or because the origin failed.
    Stale,
    /// Stale, revalidated with the origin (`304`), served from the cache.
    Revalidated,
    /// Not cacheable, passed to the origin.
    Bypass,
    /// Answered before the cache stage (blocked, bad request, no site).
    None,
}

impl CacheResult {
    pub fn as_str(self) -> &'static str {
        match self {
            CacheResult::Hit => "HIT",
            CacheResult::Miss => "MISS",
            CacheResult::Stale => "STALE",
            CacheResult::Revalidated => "REVALIDATED",
            CacheResult::Bypass => "BYPASS",
            CacheResult::None => "NONE",
        }
    }

    /// Sets `x-cache` (nothing for [`CacheResult::None`]).
    pub fn set(self, headers: &mut HeaderMap) {
        if self != CacheResult::None {
            headers.insert(X_CACHE, HeaderValue::from_static(self.as_str()));
        }
    }
}

/// What the handler says became of a request, beside its response.
#[derive(Debug, Clone, Copy)]
pub struct Outcome {
    pub cache: CacheResult,
    /// Time to the origin's response head, when the origin was asked.
    pub origin_time: Option<Duration>,
}

/// A response and its [`Outcome`]. Carried beside the response rather than in
/// its extensions: those are a map allocated on first insert, two or three
/// allocations on every cached hit.
#[derive(Debug)]
pub struct Answer {
    pub response: Response<EdgeBody>,
    pub outcome: Outcome,
}

impl From<Response<EdgeBody>> for Answer {
    /// A response answered before the cache stage.
    fn from(response: Response<EdgeBody>) -> Answer {
        Answer { response, outcome: Outcome { cache: CacheResult::None, origin_time: None } }
    }
}
