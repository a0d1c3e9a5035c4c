//! The cache stage of a `GET` or `HEAD`: answer from the cache when the stored
//! object is fresh, revalidate or refetch when it is not, store what the origin
//! sends when it may be stored.
//!
//! - Fresh: served (`HIT`). Stale within `stale-while-revalidate`: served
//!   (`STALE`) while one background request revalidates it (one per object:
//!   stale hits during it start no other). Otherwise the origin
//!   is asked, conditionally (`If-None-Match`, `If-Modified-Since`) when the object
//!   has validators; a `304` refreshes the stored object's headers and freshness
//!   (RFC 9111 §4.3.4) and it is served (`REVALIDATED`). When the origin cannot be
//!   reached or answers 5xx and the object is within `stale-if-error`, it is served
//!   (`STALE`).
//! - Misses for one object at the same time make one origin request
//!   ([`crate::collapse`]); the others are answered from what it stored.
//! - A `Range` request that misses fetches the whole object to fill the cache and
//!   cuts the range from it; when the object turns out too large to store, or not
//!   storable, that fetch is abandoned and the range itself is asked from the
//!   origin, so the client never receives more than it asked for.
//! - Bodies over `cache_max_object_bytes` are never read whole: they stream to
//!   the client as they arrive and, when the disk tier has room, into the disk
//!   tier at once ([`crate::tee`]), with or without a `Content-Length`; later
//!   requests, `Range` ones included, are served from the file. Requests that
//!   miss the object while its file is written (those that waited for its
//!   fetch among them) make no fetch of their own: they are answered from the
//!   file as it grows ([`from_filling`]), marked `HIT` (the origin was not
//!   asked for them), and cut short if that fetch fails. A `Range` or `HEAD`
//!   request waits for the file to be complete and is answered from it. Without
//!   a disk tier, or without room in it, each such request fetches the object
//!   itself, streamed through.
//! - A client's own `If-None-Match` / `If-Modified-Since` is answered `304` from a
//!   stored object that matches. A client's `Cache-Control` is not obeyed: the
//!   origin's says how long objects are good for, and one client's `no-cache`
//!   would otherwise send every such request to the origin.

use std::net::IpAddr;
use std::sync::Arc;
use std::time::{Duration, SystemTime};

use http_body_util::BodyExt;
use hyper::header::{self, HeaderMap, HeaderValue};
use hyper::http::request::Parts;
use hyper::http::uri::Scheme;
use hyper::{Method, Request, Response, StatusCode, Uri};
use tracing::{debug, warn};

use crate::body::{self, EdgeBody, Read};
use crate::cache::{self, CachedObject, Payload, Stage, Ticket};
use crate::collapse::Turn;
use crate::freshness::{self, Freshness, State};
use crate::origin::{Forward, RequestHead};
use crate::outcome::{Answer, CacheResult};
use crate::range::{self, ByteRange};
use crate::reply::{self, origin_failed, text, with_outcome};
use crate::{Edge, Site};

/// What the client asked, kept for the answer.
#[derive(Debug, Clone)]
struct Asked {
    head_only: bool,
    uri: Uri,
    headers: HeaderMap,
}

/// What is not answered from the cache as it is goes on in a boxed future
/// ([`not_fresh`]): inline, the origin's futures would make this one, and
/// every request's with it, kilobytes large, and HTTP/2 moves each request's
/// future into a task of its own.
pub async fn serve(edge: &Arc<Edge>, site: &Arc<Site>, parts: Parts, forward: Forward<'_>) -> Answer {
    let asked = Asked { head_only: parts.method == Method::HEAD, uri: parts.uri, headers: parts.headers };
    let key = edge.cache.key_from(cache::key(forward.host, &asked.uri), &asked.headers);
    let ticket = edge.cache.ticket();
    let mut stored = edge.cache.get(&key).await;
    // One clock read for the object's state and its `Age`.
    let now = SystemTime::now();
    // Past every stale window and nothing to revalidate with: of no more use.
    if stored.as_ref().is_some_and(|o| o.is_dead(now)) {
        edge.cache.remove(&key);
        stored = None;
    }
    if let Some(object) = &stored {
        match object.state(now) {
            State::Fresh => return from_cache_at(object, &asked, CacheResult::Hit, now),
            State::StaleWhileRevalidate => {
                revalidate_in_background(edge, site, &asked, forward, key);
                return from_cache_at(object, &asked, CacheResult::Stale, now);
            }
            State::Stale { .. } => {}
        }
    }
    Box::pin(not_fresh(edge, site, asked, (stored, ticket), key, forward)).await
}

/// A miss, or a stale object to revalidate: one request for the object goes
/// to the origin at a time, the others wait for what it stored.
async fn not_fresh(
    edge: &Edge,
    site: &Site,
    asked: Asked,
    (stored, ticket): (Option<Arc<CachedObject>>, Ticket),
    key: String,
    forward: Forward<'_>,
) -> Answer {
    if stored.is_none() && asked.head_only {
        let mut req = Request::new(body::empty());
        *req.method_mut() = Method::HEAD;
        *req.uri_mut() = asked.uri;
        *req.headers_mut() = asked.headers;
        return reply::proxy(site, req, forward, CacheResult::Miss).await;
    }
    match edge.collapser.turn(&key) {
        Turn::Lead(_leader) => {
            // The fetch that wrote this file may have handed over its turn
            // between this request's look in the cache and its own turn.
            if let Some(answer) = from_filling(edge, &asked, &key).await {
                return answer;
            }
            fetch(edge, site, &asked, (stored, ticket), forward).await
        }
        Turn::Follow(follower) => {
            follower.wait().await;
            let key = edge.cache.key_from(cache::key(forward.host, &asked.uri), &asked.headers);
            if let Some(object) = edge.cache.get(&key).await
                && object.state(SystemTime::now()) == State::Fresh
            {
                return from_cache(&object, &asked, CacheResult::Hit, None);
            }
            if let Some(answer) = from_filling(edge, &asked, &key).await {
                return answer;
            }
            fetch(edge, site, &asked, (stored, ticket), forward).await
        }
    }
}

/// The answer from the file of the object under `key` being written, when
/// one is and has not failed: its stored head and its body as it is written
/// (`HIT`: no origin request was made for it), or a `304` from the head when
/// the client's validators match it. A `Range` or `HEAD` request is answered
/// from the cache once the file is complete. `None` (the caller fetches) when
/// no file is being written, the fill failed, or its file was not kept.
async fn from_filling(edge: &Edge, asked: &Asked, key: &str) -> Option<Answer> {
    let filling = edge.cache.filling(key)?;
    if filling.progress().stage == Stage::Failed {
        return None;
    }
    let now = SystemTime::now();
    let head = &filling.head;
    if asked.head_only || asked.headers.contains_key(header::RANGE) {
        if filling.settled().await == Stage::Failed {
            return None;
        }
        let object = edge.cache.get(key).await?;
        return Some(from_cache(&object, asked, CacheResult::Hit, None));
    }
    if not_modified_for(head, &asked.headers) {
        return Some(from_cache_at(head, asked, CacheResult::Hit, now));
    }
    let mut headers = match filling.len {
        Some(len) => served_headers(&head.headers, len),
        None => {
            let mut headers = head.headers.clone();
            headers.remove(header::CONTENT_LENGTH);
            headers
        }
    };
    if filling.len.is_some() {
        headers.insert(header::ACCEPT_RANGES, HeaderValue::from_static("bytes"));
    }
    headers.insert(header::AGE, HeaderValue::from(head.age(now).as_secs()));
    let mut resp = Response::new(crate::file_body::growing(filling));
    *resp.headers_mut() = headers;
    Some(with_outcome(resp, CacheResult::Hit, None))
}

/// Starts one background revalidation of the object under `key`, unless one
/// (or a miss's fetch) is already under way: the turn is taken here, before
/// the stale answer goes out, so every stale hit arriving meanwhile follows
/// it. The refresh itself first looks again and skips an object that a fetch
/// finished between this request's read and its turn already refreshed.
fn revalidate_in_background(edge: &Arc<Edge>, site: &Arc<Site>, asked: &Asked, forward: Forward<'_>, key: String) {
    let Turn::Lead(leader) = edge.collapser.turn(&key) else {
        return;
    };
    let (edge, site, asked) = (edge.clone(), site.clone(), asked.clone());
    let (host, client_ip, scheme): (String, IpAddr, Scheme) =
        (forward.host.to_owned(), forward.client_ip, forward.scheme.clone());
    tokio::spawn(async move {
        let _leader = leader;
        let ticket = edge.cache.ticket();
        let stored = edge.cache.get(&key).await;
        if stored.as_ref().is_some_and(|o| o.state(SystemTime::now()) == State::Fresh) {
            return;
        }
        let forward = Forward { host: &host, client_ip, scheme: &scheme };
        let asked = Asked { head_only: true, ..asked };
        let answer = fetch(&edge, &site, &asked, (stored, ticket), forward).await;
        debug!(%host, status = %answer.response.status(), "revalidated in the background");
    });
}

/// A stored object that may be served because the origin failed.
fn usable_on_error(stored: &Option<Arc<CachedObject>>) -> Option<&Arc<CachedObject>> {
    stored.as_ref().filter(|o| {
        matches!(
            o.state(SystemTime::now()),
            State::Stale { if_error: true } | State::Fresh | State::StaleWhileRevalidate
        )
    })
}

/// Asks the origin for the object (conditionally when `stored` has validators),
/// stores what may be stored and answers. `ticket` was taken before `stored`
/// was read: nothing is stored if a purge began since.
async fn fetch(
    edge: &Edge,
    site: &Site,
    asked: &Asked,
    (stored, ticket): (Option<Arc<CachedObject>>, Ticket),
    forward: Forward<'_>,
) -> Answer {
    let mut head = RequestHead { method: Method::GET, uri: asked.uri.clone(), headers: asked.headers.clone() };
    for name in [
        header::RANGE,
        header::IF_RANGE,
        header::IF_NONE_MATCH,
        header::IF_MODIFIED_SINCE,
        header::IF_MATCH,
        header::IF_UNMODIFIED_SINCE,
    ] {
        head.headers.remove(name);
    }
    let validated = stored.as_ref().filter(|o| o.has_validator());
    if let Some(o) = validated {
        for (from, to) in [(header::ETAG, header::IF_NONE_MATCH), (header::LAST_MODIFIED, header::IF_MODIFIED_SINCE)] {
            if let Some(v) = o.headers.get(from) {
                head.headers.insert(to, v.clone());
            }
        }
    }
    let request_time = SystemTime::now();
    let (resp, took) = match site.origins.fetch(&head, forward).await {
        Ok(answer) => answer,
        Err(e) => {
            return match usable_on_error(&stored) {
                Some(o) => {
                    site.metrics.origin_failed();
                    warn!(host = forward.host, error = %crate::error_chain(&e), "origin failed; serving stale");
                    from_cache(o, asked, CacheResult::Stale, None)
                }
                None => origin_failed(site, forward.host, e),
            };
        }
    };
    site.metrics.origin_answered(took);
    let response_time = SystemTime::now();
    let status = resp.status();
    if let (StatusCode::NOT_MODIFIED, Some(old)) = (status, validated) {
        let refreshed = refresh(old, resp.headers(), request_time, response_time, site.cache_ttl);
        let Some(object) = refreshed.map(Arc::new) else {
            edge.cache.remove(&edge.cache.key_for(&old.primary, &asked.headers));
            return from_cache(old, asked, CacheResult::Revalidated, Some(took));
        };
        edge.cache.insert_since(ticket, &asked.headers, object.clone());
        return from_cache(&object, asked, CacheResult::Revalidated, Some(took));
    }
    if status.is_server_error()
        && let Some(o) = usable_on_error(&stored)
    {
        warn!(host = forward.host, %status, "origin answered an error; serving stale");
        return from_cache(o, asked, CacheResult::Stale, Some(took));
    }
    let freshness = if status == StatusCode::OK { Freshness::of(resp.headers(), site.cache_ttl) } else { None };
    let too_large = content_length(resp.headers()).is_some_and(|len| len > edge.cache.max_object_bytes() as u64);
    let ranged = asked.headers.contains_key(header::RANGE);
    let Some(freshness) = freshness.filter(|_| !too_large || !ranged) else {
        if let Some(old) = &stored {
            edge.cache.remove(&edge.cache.key_for(&old.primary, &asked.headers));
        }
        if ranged && status == StatusCode::OK {
            drop(resp);
            return range_from_origin(site, asked, forward).await;
        }
        return with_outcome(resp, CacheResult::Miss, Some(took));
    };
    let exchange = Exchange { request_time, response_time, took, ticket };
    fill(edge, site, asked, forward, resp, freshness, exchange).await
}

/// When an origin exchange happened, how long it took to its response head,
/// and the cache's ticket from before it began.
#[derive(Debug, Clone, Copy)]
struct Exchange {
    request_time: SystemTime,
    response_time: SystemTime,
    took: Duration,
    ticket: Ticket,
}

/// Reads a storable `200`, stores it and answers from it; a body past
/// `cache_max_object_bytes` streams through instead, and into the disk tier
/// when it has room.
async fn fill(
    edge: &Edge,
    site: &Site,
    asked: &Asked,
    forward: Forward<'_>,
    resp: Response<EdgeBody>,
    freshness: Freshness,
    exchange: Exchange,
) -> Answer {
    let Exchange { request_time, response_time, took, ticket } = exchange;
    let ranged = asked.headers.contains_key(header::RANGE);
    let (parts, incoming) = resp.into_parts();
    let head = |headers: HeaderMap, body: Payload| CachedObject {
        vary: cache::vary_names(&headers),
        initial_age: freshness::initial_age(&headers, request_time, response_time),
        headers: without_age(headers),
        body,
        response_time,
        freshness,
        primary: cache::key(forward.host, &asked.uri),
    };
    let max = edge.cache.max_object_bytes() as u64;
    if let Some(len) = content_length(&parts.headers).filter(|&len| len > max) {
        let head = head(parts.headers.clone(), empty());
        let body = match edge.cache.begin_disk_fill(ticket, &asked.headers, &head, Some(len)) {
            Some(fill) => crate::tee::tee(incoming, fill),
            None => incoming,
        };
        return with_outcome(Response::from_parts(parts, body), CacheResult::Miss, Some(took));
    }
    match body::read_up_to(incoming, edge.cache.max_object_bytes()).await {
        Ok(Read::Whole(bytes)) => {
            site.metrics.origin_bytes(bytes.len() as u64);
            let object = Arc::new(head(parts.headers, bytes.into()));
            edge.cache.insert_since(ticket, &asked.headers, object.clone());
            from_cache(&object, asked, CacheResult::Miss, Some(took))
        }
        Ok(Read::Partial(rest)) => {
            if ranged {
                drop(rest);
                return range_from_origin(site, asked, forward).await;
            }
            // No `Content-Length`: the file's reservation grows as it is written.
            let body =
                match edge.cache.begin_disk_fill(ticket, &asked.headers, &head(parts.headers.clone(), empty()), None) {
                    Some(fill) => crate::tee::tee(rest.boxed(), fill),
                    None => rest.boxed(),
                };
            with_outcome(Response::from_parts(parts, body), CacheResult::Miss, Some(took))
        }
        Err(e) => {
            warn!(host = forward.host, error = %crate::error_chain(&*e), "origin body failed");
            site.metrics.origin_failed();
            text(StatusCode::BAD_GATEWAY, "origin response failed\n").into()
        }
    }
}

fn content_length(headers: &HeaderMap) -> Option<u64> {
    headers.get(header::CONTENT_LENGTH)?.to_str().ok()?.parse().ok()
}

/// The origin's headers as stored: without `Age`, with room for what answers add.
fn without_age(mut headers: HeaderMap) -> HeaderMap {
    headers.remove(header::AGE);
    headers.reserve(cache::ANSWER_HEADERS);
    headers
}

fn empty() -> Payload {
    Payload::Memory(bytes::Bytes::new())
}

/// `old` with the headers of a `304` answering its revalidation; `None` when the
/// refreshed response may no longer be stored.
fn refresh(
    old: &CachedObject,
    not_modified: &HeaderMap,
    request_time: SystemTime,
    response_time: SystemTime,
    default_ttl: Duration,
) -> Option<CachedObject> {
    let mut headers = old.headers.clone();
    // "The cache MUST … replace each stored header field with the corresponding
    // header field received in the 304", except the framing of the body.
    for name in not_modified.keys() {
        if name == header::CONTENT_LENGTH || name == header::AGE {
            continue;
        }
        headers.remove(name);
        for v in not_modified.get_all(name) {
            headers.append(name.clone(), v.clone());
        }
    }
    let freshness = Freshness::of(&headers, default_ttl)?;
    Some(CachedObject {
        headers,
        body: old.body.clone(),
        response_time,
        initial_age: freshness::initial_age(not_modified, request_time, response_time),
        freshness,
        primary: old.primary.clone(),
        vary: old.vary.clone(),
    })
}

/// Asks the origin for just the range a client wants, passed through uncached.
async fn range_from_origin(site: &Site, asked: &Asked, forward: Forward<'_>) -> Answer {
    let mut req = Request::new(body::empty());
    *req.uri_mut() = asked.uri.clone();
    *req.headers_mut() = asked.headers.clone();
    reply::proxy(site, req, forward, CacheResult::Miss).await
}

/// Whether the client's own validators match `object` (RFC 9110 §13.1.1, §13.1.3).
fn not_modified_for(object: &CachedObject, asked: &HeaderMap) -> bool {
    if let Some(inm) = asked.get(header::IF_NONE_MATCH).and_then(|v| v.to_str().ok()) {
        let Some(etag) = object.headers.get(header::ETAG).and_then(|v| v.to_str().ok()) else { return false };
        let weak = |t: &str| t.trim().trim_start_matches("W/").to_owned();
        return inm.split(',').any(|t| t.trim() == "*" || weak(t) == weak(etag));
    }
    let date = |h: &HeaderMap, name| httpdate::parse_http_date(h.get(name)?.to_str().ok()?).ok();
    // The stored date is read only when the client sent one to compare it with.
    let Some(since) = date(asked, header::IF_MODIFIED_SINCE) else { return false };
    date(&object.headers, header::LAST_MODIFIED).is_some_and(|modified| modified <= since)
}

/// The stored headers for an answer with a body of `body_len` bytes: a copy
/// of the stored map (no header hashed again, unlike a map built entry by
/// entry; its index already has room, see [`cache::ANSWER_HEADERS`]); the
/// stored `Content-Length` is kept when it is already the body's (no new value).
fn served_headers(stored: &HeaderMap, body_len: u64) -> HeaderMap {
    let mut headers = stored.clone();
    headers.reserve(cache::ANSWER_HEADERS);
    if content_length(stored) != Some(body_len) {
        headers.insert(header::CONTENT_LENGTH, HeaderValue::from(body_len));
    }
    headers
}

/// [`from_cache`] for a hit, with the clock already read.
fn from_cache_at(object: &CachedObject, asked: &Asked, result: CacheResult, now: SystemTime) -> Answer {
    answer(object, asked, (result, None), now)
}

/// The answer from a stored object: whole, a range of it, or `304`.
fn from_cache(object: &CachedObject, asked: &Asked, result: CacheResult, origin_time: Option<Duration>) -> Answer {
    answer(object, asked, (result, origin_time), SystemTime::now())
}

fn answer(
    object: &CachedObject,
    asked: &Asked,
    (result, origin_time): (CacheResult, Option<Duration>),
    now: SystemTime,
) -> Answer {
    let len = object.body.len();
    let age = HeaderValue::from(object.age(now).as_secs());
    if not_modified_for(object, &asked.headers) {
        let mut resp = Response::new(body::empty());
        *resp.status_mut() = StatusCode::NOT_MODIFIED;
        for name in
            [header::ETAG, header::LAST_MODIFIED, header::CACHE_CONTROL, header::EXPIRES, header::VARY, header::DATE]
        {
            if let Some(v) = object.headers.get(&name) {
                resp.headers_mut().insert(name, v.clone());
            }
        }
        resp.headers_mut().insert(header::AGE, age);
        return with_outcome(resp, result, origin_time);
    }
    let (status, (first, last), content_range) = match range::resolve(&asked.headers, &object.headers, len) {
        ByteRange::Full => (StatusCode::OK, (0, len.saturating_sub(1)), None),
        ByteRange::Part(first, last) => {
            (StatusCode::PARTIAL_CONTENT, (first, last), Some(format!("bytes {first}-{last}/{len}")))
        }
        ByteRange::Unsatisfiable => {
            let mut resp = text(StatusCode::RANGE_NOT_SATISFIABLE, "range not satisfiable\n");
            let cr = HeaderValue::from_str(&format!("bytes */{len}")).expect("digits are a valid header value");
            resp.headers_mut().insert(header::CONTENT_RANGE, cr);
            return with_outcome(resp, result, origin_time);
        }
    };
    let body_len = if len == 0 { 0 } else { last + 1 - first };
    let body = match &object.body {
        _ if asked.head_only || body_len == 0 => body::empty(),
        Payload::Memory(bytes) => body::full(bytes.slice(first as usize..=last as usize)),
        Payload::File(range) => crate::file_body::file_range(range.part(first, last)),
    };
    let mut resp = Response::new(body);
    *resp.status_mut() = status;
    *resp.headers_mut() = served_headers(&object.headers, body_len);
    let headers = resp.headers_mut();
    headers.insert(header::ACCEPT_RANGES, HeaderValue::from_static("bytes"));
    headers.insert(header::AGE, age);
    if let Some(cr) = content_range {
        headers.insert(header::CONTENT_RANGE, HeaderValue::from_str(&cr).expect("digits are a valid header value"));
    }
    with_outcome(resp, result, origin_time)
}
