//! The response cache: a memory tier in front of an optional disk tier, both
//! bounded by bytes, with variants by `Vary`.
//!
//! Keys are host + path + query. Only complete `200` responses to `GET` are stored
//! (a `HEAD` is answered from them); [`crate::freshness`] says which and for how
//! long. Objects are kept past their lifetime while they may still be revalidated
//! or served stale; the handler decides what a stored object is good for.
//!
//! Vary (RFC 9111 §4.1): a response with `Vary` is stored under its URL key plus
//! the values the request had for the listed headers, and the URL remembers the
//! list, so the next request is looked up under its own values ("the selecting
//! header fields nominated by the stored response … match").
//!
//! Every object goes to both tiers when stored; an object found only on disk is
//! read back into memory. Objects over `cache_max_object_bytes` live on disk
//! only: written as they stream to their first client ([`fill`]), readable
//! while they are written by the requests that miss them meanwhile
//! ([`Filling`], [`Cache::filling`]), and served from their file
//! ([`Payload::File`]).
//!
//! Each object's tags are the origin's `Surrogate-Key` and `Cache-Tag` response
//! headers (values separated by spaces or commas), kept with it in both tiers
//! for purges by tag ([`Cache::purge`]).
//!
//! A purge must not be undone by a fetch that was under way while it ran: the
//! fetch would store what the origin sent before the purge. So every fetch
//! takes a [`Ticket`] before it reads the cache, and [`Cache::insert_since`]
//! stores nothing once a purge has begun after the ticket was taken (the
//! response still goes to its client; the next request fetches again).

mod disk;
mod fill;
mod filling;
mod memory;
mod payload;

use std::collections::HashMap;
use std::io;
use std::path::Path;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, RwLock};
use std::time::{Duration, SystemTime};

use hyper::Uri;
use hyper::header::{self, HeaderMap, HeaderName};

use crate::freshness::{Freshness, State};
use disk::DiskTier;
pub use fill::{Chunk, DiskFill};
pub use filling::{Filling, Progress, Reader, Stage};
use memory::MemoryTier;
pub use payload::{FileRange, Payload};

/// Headers an answer from the cache adds to the stored ones (`Accept-Ranges`,
/// `Age`, `X-Cache`, `Content-Range`, `Via`). A stored map has room for them in
/// its index, which its copies keep, so a hit's copy is never re-indexed.
pub const ANSWER_HEADERS: usize = 5;

#[derive(Debug, Clone)]
pub struct CachedObject {
    pub headers: HeaderMap,
    pub body: Payload,
    /// When the response arrived, or was last revalidated.
    pub response_time: SystemTime,
    /// Its age on arrival.
    pub initial_age: Duration,
    pub freshness: Freshness,
    /// The URL key the object's variants share.
    pub primary: String,
    /// The request headers its `Vary` names.
    pub vary: Vec<HeaderName>,
}

impl CachedObject {
    /// What the object is charged against the memory budget.
    fn cost(&self, key: &str) -> usize {
        let headers: usize = self.headers.iter().map(|(k, v)| k.as_str().len() + v.len() + 32).sum();
        self.body.memory_cost() + headers + key.len() + 128
    }

    /// Its current age (RFC 9111 §4.2.3: initial age plus resident time).
    pub fn age(&self, now: SystemTime) -> Duration {
        self.initial_age + now.duration_since(self.response_time).unwrap_or(Duration::ZERO)
    }

    pub fn state(&self, now: SystemTime) -> State {
        self.freshness.state(self.age(now))
    }

    /// Whether it may be revalidated with a conditional request.
    pub fn has_validator(&self) -> bool {
        self.headers.contains_key(header::ETAG) || self.headers.contains_key(header::LAST_MODIFIED)
    }

    /// Whether it is of no use any more: stale past every window, nothing to revalidate with.
    pub fn is_dead(&self, now: SystemTime) -> bool {
        !self.has_validator() && self.age(now) >= self.freshness.keep_for()
    }

    /// An object that just arrived, fresh for a minute, varying on nothing:
    /// what the tests store.
    #[cfg(test)]
    pub(crate) fn fresh(primary: &str, headers: HeaderMap, body: Payload) -> CachedObject {
        CachedObject {
            headers,
            body,
            response_time: SystemTime::now(),
            initial_age: Duration::ZERO,
            freshness: Freshness {
                lifetime: Duration::from_secs(60),
                stale_while_revalidate: Duration::ZERO,
                stale_if_error: Duration::ZERO,
            },
            primary: primary.to_owned(),
            vary: Vec::new(),
        }
    }
}

/// The URL part of a cache key.
pub fn key(host: &str, uri: &Uri) -> String {
    url_key(host, uri.path_and_query().map_or("/", |pq| pq.as_str()))
}

/// [`key`] of a request target in origin form (`/path?query`).
pub fn url_key(host: &str, path_and_query: &str) -> String {
    // Two pieces, no `format!` machinery: this runs on every request.
    let mut key = String::with_capacity(host.len() + path_and_query.len());
    key.push_str(host);
    key.push_str(path_and_query);
    key
}

/// The header names a response's `Vary` lists (lower-case, in order).
pub fn vary_names(headers: &HeaderMap) -> Vec<HeaderName> {
    headers
        .get_all(header::VARY)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .flat_map(|v| v.split(','))
        .filter_map(|n| HeaderName::from_bytes(n.trim().as_bytes()).ok())
        .collect()
}

/// Whether a response header named `name` carries tags.
pub fn is_tag_header(name: &str) -> bool {
    name.eq_ignore_ascii_case("surrogate-key") || name.eq_ignore_ascii_case("cache-tag")
}

/// The tags in header values (separated by spaces or commas).
pub fn tags_in<'a>(values: impl Iterator<Item = &'a [u8]>) -> Vec<String> {
    let mut tags: Vec<String> = values
        .flat_map(|v| v.split(|b| b.is_ascii_whitespace() || *b == b','))
        .filter(|t| !t.is_empty())
        .map(|t| String::from_utf8_lossy(t).into_owned())
        .collect();
    tags.sort();
    tags.dedup();
    tags
}

/// An object's tags, from its `Surrogate-Key` and `Cache-Tag` headers.
pub fn tags(headers: &HeaderMap) -> Vec<String> {
    tags_in(headers.iter().filter(|(k, _)| is_tag_header(k.as_str())).map(|(_, v)| v.as_bytes()))
}

/// `primary` plus the request's values of `names`.
fn variant_key(primary: &str, names: &[HeaderName], request: &HeaderMap) -> String {
    let mut key = primary.to_owned();
    for name in names {
        key.push('\n');
        key.push_str(name.as_str());
        key.push(':');
        for (i, v) in request.get_all(name).iter().enumerate() {
            if i > 0 {
                key.push(',');
            }
            key.push_str(&String::from_utf8_lossy(v.as_bytes()));
        }
    }
    key
}

/// The purge count when a fetch began; see [`Cache::insert_since`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Ticket(u64);

#[derive(Debug)]
pub struct Cache {
    max_object_bytes: usize,
    memory: MemoryTier,
    disk: Option<Arc<DiskTier>>,
    /// URL key → the request headers its variants differ by.
    varies: Mutex<HashMap<String, Vec<HeaderName>>>,
    /// When the oldest object stored arrived (ms since the epoch; `u64::MAX`:
    /// none yet). Never raised, so it may be older than what is left.
    oldest_ms: AtomicU64,
    /// Purges begun so far. Inserts hold it shared from their check to their
    /// store; a purge takes it exclusively only to count itself, so an insert
    /// that passed its check is in the tiers before the purge removes anything.
    purges: Arc<RwLock<u64>>,
}

impl Cache {
    /// A memory-only cache.
    pub fn new(max_bytes: usize, max_object_bytes: usize) -> Cache {
        Cache {
            max_object_bytes,
            memory: MemoryTier::new(max_bytes),
            disk: None,
            varies: Mutex::default(),
            oldest_ms: AtomicU64::new(u64::MAX),
            purges: Arc::default(),
        }
    }

    /// A cache with a disk tier in `dir`, holding the objects stored there before.
    pub fn with_disk(max_bytes: usize, max_object_bytes: usize, dir: &Path, disk_max_bytes: u64) -> io::Result<Cache> {
        let (disk, opened) = DiskTier::open(dir, disk_max_bytes, max_object_bytes as u64)?;
        let cache = Cache { disk: Some(Arc::new(disk)), ..Cache::new(max_bytes, max_object_bytes) };
        cache.lock_varies().extend(opened.varies);
        if let Some(ms) = opened.oldest_ms {
            cache.oldest_ms.store(ms, Ordering::Relaxed);
        }
        Ok(cache)
    }

    /// Bodies larger than this are not kept in memory (nor stored at all
    /// without a disk tier).
    pub fn max_object_bytes(&self) -> usize {
        self.max_object_bytes
    }

    fn lock_varies(&self) -> MutexGuard<'_, HashMap<String, Vec<HeaderName>>> {
        self.varies.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// The key a request for `primary` with `request` headers is stored under.
    pub fn key_for(&self, primary: &str, request: &HeaderMap) -> String {
        self.key_from(primary.to_owned(), request)
    }

    /// [`Cache::key_for`], reusing `primary` as the key when the URL has no
    /// variants (the common case: no copy).
    pub fn key_from(&self, primary: String, request: &HeaderMap) -> String {
        match self.lock_varies().get(&primary) {
            Some(names) => variant_key(&primary, names, request),
            None => primary,
        }
    }

    /// The key of `primary` when its URL has no variants; `None` when it has
    /// (their keys need the request's headers, see [`Cache::key_from`]).
    pub fn plain_key(&self, primary: String) -> Option<String> {
        match self.lock_varies().contains_key(&primary) {
            true => None,
            false => Some(primary),
        }
    }

    /// The object under `key` when the memory tier holds it (no disk read).
    pub fn memory_get(&self, key: &str) -> Option<Arc<CachedObject>> {
        self.memory.get(key)
    }

    /// The object under `key`, from memory or else from disk.
    pub async fn get(&self, key: &str) -> Option<Arc<CachedObject>> {
        if let Some(object) = self.memory.get(key) {
            return Some(object);
        }
        // Boxed: only a memory miss carries the disk lookup's state.
        let object = Arc::new(Box::pin(self.disk.as_ref()?.get(key)).await?);
        if object.body.in_memory().is_some() {
            self.memory.insert(key.to_owned(), object.clone());
        }
        Some(object)
    }

    /// What a fetch takes before it reads the cache.
    pub fn ticket(&self) -> Ticket {
        Ticket(*self.purges.read().unwrap_or_else(|e| e.into_inner()))
    }

    /// Stores `object` (a response to a request with `request` headers) in both
    /// tiers, unless a purge began after `ticket` was taken; returns the key it
    /// is stored under, `None` when it was not stored for that reason.
    pub fn insert_since(&self, ticket: Ticket, request: &HeaderMap, object: Arc<CachedObject>) -> Option<String> {
        let purges = self.purges.read().unwrap_or_else(|e| e.into_inner());
        if *purges != ticket.0 {
            return None;
        }
        let key = self.insert(request, object);
        drop(purges);
        Some(key)
    }

    /// Stores `object` (a response to a request with `request` headers) in both
    /// tiers; returns the key it is stored under. Fetches store through
    /// [`Cache::insert_since`].
    pub fn insert(&self, request: &HeaderMap, object: Arc<CachedObject>) -> String {
        let key = self.key_of(request, &object);
        let large = object.body.len() > self.max_object_bytes as u64;
        if large && (self.disk.is_none() || object.body.in_memory().is_some()) {
            return key;
        }
        self.arrived(&object);
        if let Some(disk) = &self.disk {
            disk.put(&key, &object);
        }
        if !large {
            self.memory.insert(key.clone(), object);
        }
        key
    }

    /// The key `object` is stored under, noting its `Vary` list for its URL.
    fn key_of(&self, request: &HeaderMap, object: &CachedObject) -> String {
        if object.vary.is_empty() {
            self.lock_varies().remove(&object.primary);
            object.primary.clone()
        } else {
            self.lock_varies().insert(object.primary.clone(), object.vary.clone());
            variant_key(&object.primary, &object.vary, request)
        }
    }

    fn arrived(&self, object: &CachedObject) {
        let arrived = object.response_time.duration_since(SystemTime::UNIX_EPOCH).unwrap_or_default();
        self.oldest_ms.fetch_min(arrived.as_millis() as u64, Ordering::Relaxed);
    }

    /// A place in the disk tier for an object whose body of `body_len` bytes
    /// (`None`: not known) will be streamed to its client and written at once
    /// (`head` is the object without it); `None` without a disk tier, when it
    /// does not fit, or when the same object is being written already. From
    /// now until the fill ends, [`Cache::filling`] finds it.
    pub fn begin_disk_fill(
        &self,
        ticket: Ticket,
        request: &HeaderMap,
        head: &CachedObject,
        body_len: Option<u64>,
    ) -> Option<DiskFill> {
        let disk = self.disk.as_ref()?;
        let key = self.key_of(request, head);
        let fill = DiskFill::begin(disk, key, head, body_len, (self.purges.clone(), ticket))?;
        self.arrived(head);
        Some(fill)
    }

    /// The object under `key` whose file is being written, if one is: for
    /// misses only (it takes the disk tier's lock).
    pub fn filling(&self, key: &str) -> Option<Arc<Filling>> {
        self.disk.as_ref()?.filling(key)
    }

    pub fn remove(&self, key: &str) {
        self.memory.remove(key);
        if let Some(disk) = &self.disk {
            disk.remove(key);
        }
    }

    /// Removes, from both tiers, every object `doomed` picks by its key and
    /// tags; returns how many distinct keys went. Deleting files may wait for
    /// the disk writer: call it off the request path.
    pub fn purge(&self, doomed: impl Fn(&str, &[String]) -> bool) -> usize {
        *self.purges.write().unwrap_or_else(|e| e.into_inner()) += 1;
        let mut gone = self.memory.remove_where(|k, o| doomed(k, &tags(&o.headers)));
        if let Some(disk) = &self.disk {
            gone.extend(disk.remove_where(doomed));
        }
        gone.sort();
        gone.dedup();
        gone.len()
    }

    /// When the oldest object stored arrived, as far as the cache knows (it
    /// may be gone since); `None` when nothing was ever stored.
    pub fn oldest(&self) -> Option<SystemTime> {
        let ms = self.oldest_ms.load(Ordering::Relaxed);
        (ms != u64::MAX).then(|| SystemTime::UNIX_EPOCH + Duration::from_millis(ms))
    }

    /// Waits until every object stored so far is on disk.
    pub async fn flush(&self) {
        if let Some(disk) = &self.disk {
            disk.flush().await;
        }
    }

    /// Objects in memory.
    pub fn len(&self) -> usize {
        self.memory.len()
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Bytes charged in memory.
    pub fn bytes(&self) -> usize {
        self.memory.bytes()
    }

    /// Objects and bytes on disk (zeros without a disk tier).
    pub fn disk_usage(&self) -> (usize, u64) {
        self.disk.as_ref().map_or((0, 0), |d| (d.len(), d.bytes()))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use bytes::Bytes;
    use hyper::header::HeaderValue;

    fn object(primary: &str, body: &'static str, vary: &[&'static str]) -> Arc<CachedObject> {
        let mut headers = HeaderMap::new();
        headers.insert(header::ETAG, HeaderValue::from_static("\"v1\""));
        let vary = vary.iter().map(|n| HeaderName::from_static(n)).collect();
        Arc::new(CachedObject {
            vary,
            ..CachedObject::fresh(primary, headers, Bytes::from_static(body.as_bytes()).into())
        })
    }

    fn request(pairs: &[(&'static str, &'static str)]) -> HeaderMap {
        pairs.iter().map(|(k, v)| (HeaderName::from_static(k), HeaderValue::from_static(v))).collect()
    }

    #[tokio::test]
    async fn bounded_by_bytes_evicting_the_unused_first() {
        let one = object("k0", "x", &[]).cost("k0");
        let cache = Cache::new(one * 3, 1024);
        for k in ["k0", "k1", "k2"] {
            cache.insert(&HeaderMap::new(), object(k, "x", &[]));
        }
        assert!(cache.get("k0").await.is_some(), "touch k0 so k1 is the oldest");
        cache.insert(&HeaderMap::new(), object("k3", "x", &[]));
        assert!(cache.bytes() <= one * 3);
        assert!(cache.get("k1").await.is_none(), "the object not used since went first");
        assert!(cache.get("k0").await.is_some() && cache.get("k3").await.is_some());
    }

    #[tokio::test]
    async fn a_fetch_that_began_before_a_purge_stores_nothing() {
        let cache = Cache::new(1 << 20, 1024);
        let before = cache.ticket();
        assert_eq!(cache.purge(|_, _| true), 0, "nothing stored yet");
        let late = cache.insert_since(before, &HeaderMap::new(), object("a/x", "old", &[]));
        assert_eq!(late, None);
        assert!(cache.get("a/x").await.is_none(), "what the origin sent before the purge stays out");
        let after = cache.ticket();
        let stored = cache.insert_since(after, &HeaderMap::new(), object("a/x", "new", &[]));
        assert_eq!(stored.as_deref(), Some("a/x"));
        assert_eq!(cache.get("a/x").await.and_then(|o| o.body.in_memory().cloned()).as_deref(), Some(&b"new"[..]));
    }

    #[tokio::test]
    async fn too_large_objects_are_not_stored() {
        let cache = Cache::new(1 << 20, 4);
        cache.insert(&HeaderMap::new(), object("k", "12345", &[]));
        assert!(cache.is_empty());
    }

    #[tokio::test]
    async fn variants_by_vary() {
        let cache = Cache::new(1 << 20, 1 << 16);
        let (fr, de) = (request(&[("accept-language", "fr")]), request(&[("accept-language", "de")]));
        cache.insert(&fr, object("a/x", "bonjour", &["accept-language"]));
        cache.insert(&de, object("a/x", "hallo", &["accept-language"]));
        let body = async |h: &HeaderMap| cache.get(&cache.key_for("a/x", h)).await.map(|o| o.body.in_memory().cloned());
        assert_eq!(body(&fr).await.flatten().as_deref(), Some(&b"bonjour"[..]));
        assert_eq!(body(&de).await.flatten().as_deref(), Some(&b"hallo"[..]));
        assert_eq!(body(&request(&[("accept-language", "en")])).await, None);
    }

    #[tokio::test]
    async fn the_disk_tier_outlives_the_cache() {
        let dir = tempfile::tempdir().unwrap();
        let en = request(&[("accept-language", "en")]);
        {
            let cache = Cache::with_disk(1 << 20, 1 << 16, dir.path(), 1 << 20).unwrap();
            cache.insert(&en, object("a/x", "hello", &["accept-language"]));
            cache.insert(&HeaderMap::new(), object("a/y", "plain", &[]));
            cache.flush().await;
        }
        let cache = Cache::with_disk(1 << 20, 1 << 16, dir.path(), 1 << 20).unwrap();
        assert!(cache.is_empty() && cache.disk_usage().0 == 2);
        let x = cache.get(&cache.key_for("a/x", &en)).await.expect("the variant is found on disk");
        assert_eq!(
            (&x.body.in_memory().unwrap()[..], x.headers.get(header::ETAG).unwrap().as_bytes()),
            (&b"hello"[..], &b"\"v1\""[..])
        );
        assert_eq!(x.freshness.lifetime, Duration::from_secs(60));
        assert!(cache.get("a/y").await.is_some() && cache.len() == 2, "read back into memory");
    }

    #[tokio::test]
    async fn the_disk_tier_is_bounded_by_bytes() {
        let dir = tempfile::tempdir().unwrap();
        let cache = Cache::with_disk(1 << 20, 1 << 16, dir.path(), 700).unwrap();
        for k in ["k0", "k1", "k2", "k3"] {
            cache.insert(&HeaderMap::new(), object(k, "some body bytes", &[]));
        }
        cache.flush().await;
        let (objects, bytes) = cache.disk_usage();
        assert!(bytes <= 700 && objects < 4, "{objects} objects, {bytes} bytes");
        let files = std::fs::read_dir(dir.path()).unwrap().count();
        assert_eq!(files, objects, "evicted files are deleted");
    }

    /// Streams `body` through a fill of `key` begun now (false: refused), the
    /// channel ended by `End` when `complete`; stops sending when the writer
    /// gives up.
    async fn stream_fill(
        cache: &Cache,
        ticket: Ticket,
        key: &str,
        body: &[u8],
        announced: Option<u64>,
        complete: bool,
    ) -> bool {
        let Some(fill) = cache.begin_disk_fill(ticket, &HeaderMap::new(), &object(key, "", &[]), announced) else {
            return false;
        };
        let (tx, mut rx) = tokio::sync::mpsc::channel(2);
        let writer = tokio::task::spawn_blocking(move || fill.write(&mut rx));
        let mut open = true;
        for chunk in body.chunks(1000) {
            open = tx.send(Chunk::Data(Bytes::copy_from_slice(chunk))).await.is_ok();
            if !open {
                break;
            }
        }
        if complete && open {
            let _ = tx.send(Chunk::End).await;
        }
        drop(tx);
        writer.await.unwrap();
        cache.flush().await;
        true
    }

    fn files(dir: &Path) -> Vec<String> {
        let mut names: Vec<String> =
            std::fs::read_dir(dir).unwrap().map(|e| e.unwrap().file_name().into_string().unwrap()).collect();
        names.sort();
        names
    }

    #[tokio::test]
    async fn a_large_object_streamed_to_disk_is_served_from_its_file() {
        use std::os::unix::fs::FileExt;
        let dir = tempfile::tempdir().unwrap();
        let cache = Cache::with_disk(1 << 16, 1 << 10, dir.path(), 1 << 20).unwrap();
        let body: Vec<u8> = (0..50_000u32).map(|i| (i % 251) as u8).collect();
        assert!(stream_fill(&cache, cache.ticket(), "a/big", &body, Some(body.len() as u64), true).await);
        assert_eq!(cache.disk_usage().0, 1);
        let stored = cache.get("a/big").await.expect("on disk");
        let Payload::File(range) = &stored.body else { panic!("a large object is not read into memory") };
        assert_eq!(range.len, body.len() as u64);
        let mut back = vec![0; 100];
        range.file.read_exact_at(&mut back, range.offset + 40_000).unwrap();
        assert_eq!(back, body[40_000..40_100]);
        assert!(cache.is_empty(), "the memory tier holds none of it");

        let cache = Cache::with_disk(1 << 16, 1 << 10, dir.path(), 1 << 20).unwrap();
        assert_eq!(cache.get("a/big").await.map(|o| o.body.len()), Some(50_000), "found again after a restart");
    }

    #[tokio::test]
    async fn an_incomplete_or_purged_fill_leaves_no_file() {
        let dir = tempfile::tempdir().unwrap();
        let cache = Cache::with_disk(1 << 16, 1 << 10, dir.path(), 1 << 20).unwrap();
        let body = vec![7u8; 5000];
        assert!(
            stream_fill(&cache, cache.ticket(), "a/short", &body, Some(6000), true).await,
            "shorter than announced"
        );
        assert!(stream_fill(&cache, cache.ticket(), "a/cut", &body, Some(5000), false).await, "the origin failed");
        let before = cache.ticket();
        cache.purge(|_, _| true);
        assert!(stream_fill(&cache, before, "a/purged", &body, Some(5000), true).await);
        assert_eq!((cache.disk_usage(), files(dir.path())), ((0, 0), vec![]));
        assert!(
            stream_fill(&cache, cache.ticket(), "a/cut", &body, Some(5000), true).await,
            "its reservation was released"
        );
        assert_eq!(cache.disk_usage().0, 1);
        assert!(
            !stream_fill(&cache, cache.ticket(), "a/huge", &body, Some(2 << 20), true).await,
            "over the disk budget"
        );
        let half = DiskFill::begin(
            cache.disk.as_ref().unwrap(),
            "a/half".into(),
            &object("a/half", "", &[]),
            Some(600 << 10),
            (cache.purges.clone(), cache.ticket()),
        )
        .expect("room for one");
        let other =
            cache.begin_disk_fill(cache.ticket(), &HeaderMap::new(), &object("a/other", "", &[]), Some(600 << 10));
        assert!(other.is_none(), "what is left is promised to the fill under way");
        let (_, mut closed) = tokio::sync::mpsc::channel(1);
        tokio::task::spawn_blocking(move || half.write(&mut closed)).await.unwrap();
        assert!(stream_fill(&cache, cache.ticket(), "a/other", &body, Some(5000), true).await, "released by the write");
    }

    #[tokio::test]
    async fn a_body_of_unknown_length_reserves_as_it_grows_and_counts_its_real_size() {
        let dir = tempfile::tempdir().unwrap();
        let cache = Cache::with_disk(1 << 16, 1 << 10, dir.path(), 4 << 20).unwrap();
        let body: Vec<u8> = (0..2_500_000u32).map(|i| (i % 253) as u8).collect();
        assert!(stream_fill(&cache, cache.ticket(), "a/chunked", &body, None, true).await);
        let (objects, bytes) = cache.disk_usage();
        let file = dir.path().join(&files(dir.path())[0]);
        assert_eq!((objects, bytes), (1, std::fs::metadata(file).unwrap().len()), "counted with its real size");
        let stored = cache.get("a/chunked").await.expect("on disk");
        assert_eq!(stored.body.len(), body.len() as u64);
        let fits = (4 << 20) - bytes - 1000;
        let next = cache.begin_disk_fill(cache.ticket(), &HeaderMap::new(), &object("a/next", "", &[]), Some(fits));
        assert!(next.is_some(), "no reservation is left over");
    }

    #[tokio::test]
    async fn a_body_of_unknown_length_past_the_budget_leaves_no_file() {
        let dir = tempfile::tempdir().unwrap();
        let cache = Cache::with_disk(1 << 16, 1 << 10, dir.path(), 3 << 20).unwrap();
        let body = vec![1u8; 3 << 20];
        assert!(stream_fill(&cache, cache.ticket(), "a/endless", &body, None, true).await);
        assert_eq!((cache.disk_usage(), files(dir.path())), ((0, 0), vec![]));
        assert!(stream_fill(&cache, cache.ticket(), "a/small", &body[..5000], None, true).await, "all given back");
        assert_eq!(cache.disk_usage().0, 1);
    }

    #[tokio::test]
    async fn a_fill_is_found_while_written_then_the_file_is() {
        use std::os::unix::fs::FileExt;
        let dir = tempfile::tempdir().unwrap();
        let cache = Cache::with_disk(1 << 16, 1 << 10, dir.path(), 1 << 20).unwrap();
        assert!(cache.filling("a/grow").is_none());
        let fill =
            cache.begin_disk_fill(cache.ticket(), &HeaderMap::new(), &object("a/grow", "", &[]), Some(6)).unwrap();
        let filling = cache.filling("a/grow").expect("found from its start");
        assert_eq!((filling.len, filling.progress()), (Some(6), Progress { written: 0, stage: Stage::Writing }));
        let (tx, mut rx) = tokio::sync::mpsc::channel(2);
        let writer = tokio::task::spawn_blocking(move || fill.write(&mut rx));
        let mut watch = filling.watch();
        tx.send(Chunk::Data(Bytes::from_static(b"abc"))).await.unwrap();
        watch.wait_for(|p| p.written == 3).await.unwrap();
        let mut read = [0; 3];
        filling.file.read_exact_at(&mut read, filling.body_offset).unwrap();
        assert_eq!(&read, b"abc", "what is published is in the file");
        tx.send(Chunk::Data(Bytes::from_static(b"def"))).await.unwrap();
        tx.send(Chunk::End).await.unwrap();
        assert_eq!(filling.settled().await, Stage::Done);
        writer.await.unwrap();
        assert!(cache.filling("a/grow").is_none(), "gone once the file is in the index");
        assert_eq!(cache.get("a/grow").await.map(|o| o.body.len()), Some(6));

        let fill =
            cache.begin_disk_fill(cache.ticket(), &HeaderMap::new(), &object("a/fail", "", &[]), Some(6)).unwrap();
        let filling = cache.filling("a/fail").unwrap();
        let (tx, mut rx) = tokio::sync::mpsc::channel(2);
        let writer = tokio::task::spawn_blocking(move || fill.write(&mut rx));
        tx.send(Chunk::Data(Bytes::from_static(b"ab"))).await.unwrap();
        drop(tx);
        assert_eq!(filling.settled().await, Stage::Failed, "the origin failed");
        writer.await.unwrap();
        assert!(cache.filling("a/fail").is_none());
        cache.flush().await;
        assert!(cache.get("a/fail").await.is_none() && files(dir.path()).len() == 1);

        let fill =
            cache.begin_disk_fill(cache.ticket(), &HeaderMap::new(), &object("a/purged", "", &[]), Some(6)).unwrap();
        assert!(cache.filling("a/purged").is_some());
        cache.purge(|k, _| k == "a/purged");
        assert!(cache.filling("a/purged").is_none(), "a purge hides the fill under way from new requests");
        let (_, mut closed) = tokio::sync::mpsc::channel(1);
        tokio::task::spawn_blocking(move || fill.write(&mut closed)).await.unwrap();
    }
}
