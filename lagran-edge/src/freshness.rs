//! How long a response may be stored and served, as a shared cache (RFC 9111).
//!
//! - Not stored: `no-store`, `private`, `no-cache` (RFC 9111 §5.2.2: a cache must
//!   revalidate those on every use; this cache does not keep them at all), a
//!   `Set-Cookie` (personal), `Vary: *`.
//! - Freshness lifetime (§4.2.1): `s-maxage`, else `max-age`, else `Expires` minus
//!   `Date`, else the site's default TTL.
//! - Age (§4.2.3): "corrected_initial_age = max(apparent_age, corrected_age_value)",
//!   plus the time since the response arrived.
//! - RFC 5861: within `stale-while-revalidate` seconds past the lifetime a stale
//!   object is served while it is revalidated in the background; within
//!   `stale-if-error` seconds it is served when the origin fails. Neither applies
//!   under `must-revalidate` or `proxy-revalidate` (§5.2.2.2: "the cache MUST NOT
//!   reuse a stored response without successful validation").

use std::time::{Duration, SystemTime};

use hyper::header::{self, HeaderMap};

/// The `Cache-Control` directives this cache acts on.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct Directives {
    pub no_store: bool,
    pub no_cache: bool,
    pub private: bool,
    pub must_revalidate: bool,
    pub max_age: Option<u64>,
    pub s_maxage: Option<u64>,
    pub stale_while_revalidate: Option<u64>,
    pub stale_if_error: Option<u64>,
}

impl Directives {
    pub fn parse(headers: &HeaderMap) -> Directives {
        let mut d = Directives::default();
        for value in headers.get_all(header::CACHE_CONTROL) {
            let Ok(value) = value.to_str() else { continue };
            for directive in value.split(',') {
                let (name, arg) = directive.trim().split_once('=').unwrap_or((directive.trim(), ""));
                let secs = || arg.trim().trim_matches('"').parse::<u64>().ok();
                match name.trim().to_ascii_lowercase().as_str() {
                    "no-store" => d.no_store = true,
                    "no-cache" => d.no_cache = true,
                    "private" => d.private = true,
                    "must-revalidate" | "proxy-revalidate" => d.must_revalidate = true,
                    "max-age" => d.max_age = secs(),
                    "s-maxage" => d.s_maxage = secs(),
                    "stale-while-revalidate" => d.stale_while_revalidate = secs(),
                    "stale-if-error" => d.stale_if_error = secs(),
                    _ => {}
                }
            }
        }
        d
    }
}

/// How long a stored response stays fresh, and may be served stale after that.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Freshness {
    pub lifetime: Duration,
    pub stale_while_revalidate: Duration,
    pub stale_if_error: Duration,
}

/// Where a stored response stands at some moment.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum State {
    Fresh,
    /// Serve it, revalidate in the background.
    StaleWhileRevalidate,
    /// Revalidate first; `if_error` says whether it may be served when the origin fails.
    Stale {
        if_error: bool,
    },
}

impl Freshness {
    /// The freshness of a `200` with `headers`, or `None` when it must not be stored.
    /// `default_ttl` is the site's lifetime for responses that name none.
    pub fn of(headers: &HeaderMap, default_ttl: Duration) -> Option<Freshness> {
        let d = Directives::parse(headers);
        let vary_star = headers
            .get_all(header::VARY)
            .iter()
            .any(|v| v.as_bytes().split(|&b| b == b',').any(|f| f.trim_ascii() == b"*"));
        if d.no_store || d.private || d.no_cache || vary_star || headers.contains_key(header::SET_COOKIE) {
            return None;
        }
        let lifetime = match (d.s_maxage.or(d.max_age), http_date(headers, header::EXPIRES)) {
            (Some(secs), _) => Duration::from_secs(secs),
            // "If the Expires response header field is present and contains an
            // invalid date, it is treated as already expired" (RFC 9111 §5.3).
            (None, Some(expires)) => {
                let date = http_date(headers, header::DATE).unwrap_or_else(SystemTime::now);
                expires.duration_since(date).unwrap_or(Duration::ZERO)
            }
            (None, None) if headers.contains_key(header::EXPIRES) => Duration::ZERO,
            (None, None) => default_ttl,
        };
        let stale =
            |secs: Option<u64>| if d.must_revalidate { Duration::ZERO } else { Duration::from_secs(secs.unwrap_or(0)) };
        let freshness = Freshness {
            lifetime,
            stale_while_revalidate: stale(d.stale_while_revalidate),
            stale_if_error: stale(d.stale_if_error),
        };
        let has_validator = headers.contains_key(header::ETAG) || headers.contains_key(header::LAST_MODIFIED);
        let useful = !lifetime.is_zero() || has_validator || !freshness.stale_if_error.is_zero();
        useful.then_some(freshness)
    }

    /// Where a response of `age` stands.
    pub fn state(&self, age: Duration) -> State {
        if age < self.lifetime {
            State::Fresh
        } else if age < self.lifetime + self.stale_while_revalidate {
            State::StaleWhileRevalidate
        } else {
            State::Stale { if_error: age < self.lifetime + self.stale_if_error }
        }
    }

    /// How long past its lifetime the response is still of any use.
    pub fn keep_for(&self) -> Duration {
        self.lifetime + self.stale_while_revalidate.max(self.stale_if_error)
    }
}

fn http_date(headers: &HeaderMap, name: header::HeaderName) -> Option<SystemTime> {
    httpdate::parse_http_date(headers.get(name)?.to_str().ok()?).ok()
}

/// The age a response had on arrival (RFC 9111 §4.2.3), from its `Age` and `Date`
/// and when the request was sent and the response received.
pub fn initial_age(headers: &HeaderMap, request_time: SystemTime, response_time: SystemTime) -> Duration {
    let date = http_date(headers, header::DATE).unwrap_or(response_time);
    let apparent_age = response_time.duration_since(date).unwrap_or(Duration::ZERO);
    let age_value = headers
        .get(header::AGE)
        .and_then(|v| v.to_str().ok()?.trim().parse::<u64>().ok())
        .map_or(Duration::ZERO, Duration::from_secs);
    let response_delay = response_time.duration_since(request_time).unwrap_or(Duration::ZERO);
    apparent_age.max(age_value + response_delay)
}

#[cfg(test)]
mod tests {
    use super::*;
    use hyper::header::HeaderValue;

    fn headers(pairs: &[(&'static str, &str)]) -> HeaderMap {
        pairs.iter().map(|(k, v)| (header::HeaderName::from_static(k), HeaderValue::from_str(v).unwrap())).collect()
    }

    fn lifetime(pairs: &[(&'static str, &str)]) -> Option<u64> {
        Freshness::of(&headers(pairs), Duration::from_secs(60)).map(|f| f.lifetime.as_secs())
    }

    #[test]
    fn lifetime_from_cache_control_expires_or_default() {
        assert_eq!(lifetime(&[]), Some(60));
        assert_eq!(lifetime(&[("cache-control", "public, max-age=300")]), Some(300));
        assert_eq!(lifetime(&[("cache-control", "max-age=300, s-maxage=10")]), Some(10));
        let date = "Fri, 04 Dec 2026 10:00:00 GMT";
        assert_eq!(lifetime(&[("date", date), ("expires", "Fri, 04 Dec 2026 10:02:00 GMT")]), Some(120));
        assert_eq!(lifetime(&[("expires", "0"), ("etag", "\"a\"")]), Some(0), "an invalid Expires is expired");
        for cc in ["no-store", "private", "no-cache", "max-age=0", "Private, max-age=60"] {
            assert_eq!(lifetime(&[("cache-control", cc)]), None, "{cc}");
        }
        assert_eq!(lifetime(&[("cache-control", "max-age=0"), ("etag", "\"a\"")]), Some(0), "kept to revalidate");
        assert_eq!(lifetime(&[("set-cookie", "a=b")]), None);
        assert_eq!(lifetime(&[("vary", "accept, *")]), None);
        assert_eq!(lifetime(&[("vary", "Accept-Encoding")]), Some(60));
    }

    #[test]
    fn stale_windows_and_must_revalidate() {
        let h = headers(&[("cache-control", "max-age=10, stale-while-revalidate=5, stale-if-error=100")]);
        let f = Freshness::of(&h, Duration::ZERO).unwrap();
        let at = |s| f.state(Duration::from_secs(s));
        assert_eq!(at(9), State::Fresh);
        assert_eq!(at(12), State::StaleWhileRevalidate);
        assert_eq!(at(50), State::Stale { if_error: true });
        assert_eq!(at(200), State::Stale { if_error: false });
        let h = headers(&[("cache-control", "max-age=10, must-revalidate, stale-if-error=100")]);
        let f = Freshness::of(&h, Duration::ZERO).unwrap();
        assert_eq!(f.state(Duration::from_secs(11)), State::Stale { if_error: false });
    }

    #[test]
    fn initial_age_takes_the_larger_of_age_and_date() {
        let t0 = httpdate::parse_http_date("Fri, 04 Dec 2026 10:00:00 GMT").unwrap();
        let resp = t0 + Duration::from_secs(2);
        let h = headers(&[("age", "30"), ("date", "Fri, 04 Dec 2026 10:00:00 GMT")]);
        assert_eq!(initial_age(&h, t0, resp), Duration::from_secs(32));
        let h = headers(&[("date", "Fri, 04 Dec 2026 09:59:00 GMT")]);
        assert_eq!(initial_age(&h, t0, resp), Duration::from_secs(62));
    }
}
