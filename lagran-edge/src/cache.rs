//! In-memory response cache bounded by bytes, least recently used out first.
//!
//! Keys are host + path + query. Only complete `200` responses to `GET` are stored
//! (a `HEAD` is answered from them); what may be stored and for how long follows the
//! origin's `Cache-Control` as a shared cache (RFC 9111 §3, §4.2.1: `s-maxage` over
//! `max-age`; `no-store`, `private` and `no-cache` are not stored here), else the site's
//! default TTL. Ranges are cut from stored objects (RFC 9110 §14).

use std::collections::{BTreeMap, HashMap};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use bytes::Bytes;
use hyper::Uri;
use hyper::header::{self, HeaderMap};

#[derive(Debug)]
pub struct CachedObject {
    pub headers: HeaderMap,
    pub body: Bytes,
    pub stored: Instant,
    pub expires: Instant,
}

impl CachedObject {
    /// What the object is charged against the budget: body, headers and a fixed overhead.
    fn cost(&self, key: &str) -> usize {
        let headers: usize = self.headers.iter().map(|(k, v)| k.as_str().len() + v.len() + 32).sum();
        self.body.len() + headers + key.len() + 128
    }
}

#[derive(Debug)]
pub struct Cache {
    max_bytes: usize,
    max_object_bytes: usize,
    inner: Mutex<Inner>,
}

#[derive(Debug, Default)]
struct Inner {
    entries: HashMap<String, Entry>,
    /// Last-use tick → key; the first entry is the least recently used.
    lru: BTreeMap<u64, String>,
    tick: u64,
    bytes: usize,
}

#[derive(Debug)]
struct Entry {
    object: Arc<CachedObject>,
    tick: u64,
    cost: usize,
}

impl Inner {
    fn remove(&mut self, key: &str) {
        if let Some(e) = self.entries.remove(key) {
            self.lru.remove(&e.tick);
            self.bytes -= e.cost;
        }
    }
}

pub fn key(host: &str, uri: &Uri) -> String {
    format!("{host}{}", uri.path_and_query().map_or("/", |pq| pq.as_str()))
}

impl Cache {
    pub fn new(max_bytes: usize, max_object_bytes: usize) -> Cache {
        Cache { max_bytes, max_object_bytes, inner: Mutex::default() }
    }

    /// Bodies larger than this are not stored.
    pub fn max_object_bytes(&self) -> usize {
        self.max_object_bytes
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Inner> {
        self.inner.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// A fresh object for `key`; an expired one is dropped.
    pub fn get(&self, key: &str, now: Instant) -> Option<Arc<CachedObject>> {
        let mut inner = self.lock();
        let inner = &mut *inner;
        let entry = inner.entries.get_mut(key)?;
        if entry.object.expires <= now {
            inner.remove(key);
            return None;
        }
        inner.lru.remove(&entry.tick);
        inner.tick += 1;
        entry.tick = inner.tick;
        inner.lru.insert(inner.tick, key.to_owned());
        Some(entry.object.clone())
    }

    /// Stores `object` under `key`, evicting least recently used entries to make room.
    /// Returns false when it is too large to keep.
    pub fn insert(&self, key: String, object: Arc<CachedObject>) -> bool {
        let cost = object.cost(&key);
        if object.body.len() > self.max_object_bytes || cost > self.max_bytes {
            return false;
        }
        let mut inner = self.lock();
        inner.remove(&key);
        while inner.bytes + cost > self.max_bytes {
            let Some((_, oldest)) = inner.lru.pop_first() else {
                break;
            };
            inner.remove(&oldest);
        }
        inner.tick += 1;
        let tick = inner.tick;
        inner.lru.insert(tick, key.clone());
        inner.bytes += cost;
        inner.entries.insert(key, Entry { object, tick, cost });
        true
    }

    pub fn len(&self) -> usize {
        self.lock().entries.len()
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    pub fn bytes(&self) -> usize {
        self.lock().bytes
    }
}

/// How long a `200` response with these headers may be stored; `None` = not at all.
pub fn storable_for(headers: &HeaderMap, default_ttl: Duration) -> Option<Duration> {
    if headers.contains_key(header::SET_COOKIE) {
        return None;
    }
    // The key has no Vary dimensions: store only what is the same for every client.
    for vary in headers.get_all(header::VARY) {
        let vary = vary.to_str().ok()?;
        let encoded = headers.get(header::CONTENT_ENCODING).is_some_and(|v| v.as_bytes() != b"identity");
        if vary.split(',').any(|f| !f.trim().eq_ignore_ascii_case("accept-encoding")) || encoded {
            return None;
        }
    }
    let (mut max_age, mut s_maxage) = (None, None);
    for value in headers.get_all(header::CACHE_CONTROL) {
        for directive in value.to_str().ok()?.split(',') {
            let (name, arg) = directive.trim().split_once('=').unwrap_or((directive.trim(), ""));
            let secs = || arg.trim_matches('"').parse::<u64>().ok();
            match name.to_ascii_lowercase().as_str() {
                "no-store" | "private" | "no-cache" => return None,
                "max-age" => max_age = secs(),
                "s-maxage" => s_maxage = secs(),
                _ => {}
            }
        }
    }
    match s_maxage.or(max_age).map(Duration::from_secs).unwrap_or(default_ttl) {
        ttl if ttl.is_zero() => None,
        ttl => Some(ttl),
    }
}

/// The part of an object a `Range` header asks for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ByteRange {
    /// No (usable) range: the whole object, 200.
    Full,
    /// Inclusive first and last byte, 206.
    Part(u64, u64),
    /// 416.
    Unsatisfiable,
}

/// Interprets a single `bytes=` range against an object of `len` bytes. Malformed and
/// multi-range requests get the whole object ("a server MAY ignore the Range header
/// field", RFC 9110 §14.2).
pub fn byte_range(range: &str, len: u64) -> ByteRange {
    let Some(spec) = range.trim().strip_prefix("bytes=") else {
        return ByteRange::Full;
    };
    if spec.contains(',') {
        return ByteRange::Full;
    }
    let Some((first, last)) = spec.trim().split_once('-') else {
        return ByteRange::Full;
    };
    let (first, last) = (first.trim(), last.trim());
    let num = |s: &str| s.parse::<u64>().ok();
    match (first.is_empty(), last.is_empty()) {
        // Suffix: the last N bytes.
        (true, false) => match num(last) {
            Some(0) => ByteRange::Unsatisfiable,
            Some(_) if len == 0 => ByteRange::Unsatisfiable,
            Some(n) => ByteRange::Part(len.saturating_sub(n), len - 1),
            None => ByteRange::Full,
        },
        (false, _) => {
            let Some(first) = num(first) else {
                return ByteRange::Full;
            };
            let last = if last.is_empty() { Some(u64::MAX) } else { num(last) };
            match last {
                Some(last) if last < first => ByteRange::Full,
                Some(_) if first >= len => ByteRange::Unsatisfiable,
                Some(last) => ByteRange::Part(first, last.min(len - 1)),
                None => ByteRange::Full,
            }
        }
        (true, true) => ByteRange::Full,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use hyper::header::HeaderValue;

    fn object(body: &'static str, ttl: Duration) -> Arc<CachedObject> {
        let now = Instant::now();
        Arc::new(CachedObject {
            headers: HeaderMap::new(),
            body: Bytes::from_static(body.as_bytes()),
            stored: now,
            expires: now + ttl,
        })
    }

    #[test]
    fn expired_objects_are_gone() {
        let cache = Cache::new(1 << 20, 1 << 16);
        let now = Instant::now();
        assert!(cache.insert("a/x".into(), object("hello", Duration::from_secs(1))));
        assert!(cache.get("a/x", now).is_some());
        assert!(cache.get("a/x", now + Duration::from_secs(2)).is_none());
        assert!(cache.is_empty() && cache.bytes() == 0, "the expired entry was dropped");
    }

    #[test]
    fn bounded_by_bytes_evicting_least_recently_used() {
        let one = object("x", Duration::from_secs(60)).cost("k0");
        let cache = Cache::new(one * 3, 1024);
        let now = Instant::now();
        for k in ["k0", "k1", "k2"] {
            assert!(cache.insert(k.into(), object("x", Duration::from_secs(60))));
        }
        assert!(cache.get("k0", now).is_some(), "touch k0 so k1 is the oldest");
        cache.insert("k3".into(), object("x", Duration::from_secs(60)));
        assert!(cache.bytes() <= one * 3);
        assert!(cache.get("k1", now).is_none(), "the least recently used went first");
        assert!(cache.get("k0", now).is_some() && cache.get("k3", now).is_some());
    }

    #[test]
    fn too_large_objects_are_not_stored() {
        let cache = Cache::new(1 << 20, 4);
        assert!(!cache.insert("k".into(), object("12345", Duration::from_secs(60))));
        assert!(cache.is_empty());
    }

    fn headers(pairs: &[(&'static str, &'static str)]) -> HeaderMap {
        pairs.iter().map(|(k, v)| (header::HeaderName::from_static(k), HeaderValue::from_static(v))).collect()
    }

    #[test]
    fn cache_control_decides_storage_and_ttl() {
        let d = Duration::from_secs(60);
        assert_eq!(storable_for(&headers(&[]), d), Some(d));
        assert_eq!(
            storable_for(&headers(&[("cache-control", "public, max-age=300")]), d),
            Some(Duration::from_secs(300))
        );
        assert_eq!(
            storable_for(&headers(&[("cache-control", "max-age=300, s-maxage=10")]), d),
            Some(Duration::from_secs(10))
        );
        for cc in ["no-store", "private", "no-cache", "max-age=0", "Private, max-age=60"] {
            assert_eq!(storable_for(&headers(&[("cache-control", cc)]), d), None, "{cc}");
        }
        assert_eq!(storable_for(&headers(&[("set-cookie", "a=b")]), d), None);
        assert_eq!(storable_for(&headers(&[("vary", "cookie")]), d), None);
        assert_eq!(storable_for(&headers(&[("vary", "Accept-Encoding")]), d), Some(d));
        assert_eq!(storable_for(&headers(&[("vary", "Accept-Encoding"), ("content-encoding", "gzip")]), d), None);
        assert_eq!(storable_for(&headers(&[]), Duration::ZERO), None, "a zero default TTL stores nothing");
    }

    #[test]
    fn ranges() {
        use ByteRange::*;
        assert_eq!(byte_range("bytes=0-4", 10), Part(0, 4));
        assert_eq!(byte_range("bytes=5-", 10), Part(5, 9));
        assert_eq!(byte_range("bytes=-3", 10), Part(7, 9));
        assert_eq!(byte_range("bytes=-30", 10), Part(0, 9));
        assert_eq!(byte_range("bytes=8-100", 10), Part(8, 9));
        assert_eq!(byte_range("bytes=10-", 10), Unsatisfiable);
        assert_eq!(byte_range("bytes=-0", 10), Unsatisfiable);
        assert_eq!(byte_range("bytes=0-0", 0), Unsatisfiable);
        for ignored in ["bytes=4-2", "bytes=0-1,3-4", "items=0-1", "bytes=a-b", "bytes=-"] {
            assert_eq!(byte_range(ignored, 10), Full, "{ignored}");
        }
    }
}
