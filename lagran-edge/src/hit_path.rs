//! Fresh hits of HTTP/1.1 requests, answered without hyper: the request head
//! as `httparse` read it, the object from the memory tier, the response
//! written out as bytes.
//!
//! Why by hand: on a cached 1 KiB hit, hyper's HTTP/1 server (the head parsed
//! into a `HeaderMap`, its dispatcher, the response encoded from another map)
//! costs about 13 000 instructions, more than the whole rest of the hit, and no
//! crate serves a stored response from a parsed head. The parsing itself is
//! `httparse`'s, as in hyper.
//!
//! [`answer`] answers only what the full request flow ([`crate::request`])
//! would answer with a `200` from memory, with the same headers, counters and
//! access log line: a `GET` or `HEAD` in HTTP/1.1, in origin form, with one
//! `Host` naming a site and no `Range`, conditional, `Cookie`,
//! `Authorization`, body, `Expect`, `Upgrade` or `Connection` other than
//! `keep-alive`, passing the site's WAF and hotlink rules and its rate
//! limit, for a URL without variants whose object is fresh, in memory and
//! has a `Date`. Anything else it declines, and the caller hands the
//! connection to hyper, which answers that request and the rest.

use std::net::IpAddr;
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::{Instant, SystemTime};

use bytes::Bytes;
use hyper::header;

use crate::cache::{self, CachedObject, Payload};
use crate::freshness::State;
use crate::outcome::{CacheResult, Outcome, X_CACHE};
use crate::request::{self, Conn, Done};
use crate::{Edge, Site, host};

/// A request head as `httparse` read it.
#[derive(Debug, Clone, Copy)]
pub struct Head<'a> {
    pub method: &'a str,
    pub target: &'a str,
    /// The `x` of `HTTP/1.x`.
    pub minor_version: u8,
    pub headers: &'a [httparse::Header<'a>],
}

/// A fresh hit the hit path answers.
#[derive(Debug)]
struct Hit {
    site: Arc<Site>,
    object: Arc<CachedObject>,
    body: Bytes,
    now: SystemTime,
    client: IpAddr,
}

/// The request headers that decide whether the hit path may answer.
#[derive(Debug, Default)]
struct Fields<'a> {
    host: Option<&'a str>,
    user_agent: Option<&'a str>,
    referer: Option<&'a [u8]>,
}

/// Request headers with which the full flow answers otherwise than a plain
/// hit (ranges, conditionals, private requests) or that hyper must see
/// (bodies, `Expect`, upgrades).
const DECLINED: [&str; 12] = [
    "range",
    "if-range",
    "if-none-match",
    "if-modified-since",
    "if-match",
    "if-unmodified-since",
    "authorization",
    "cookie",
    "content-length",
    "transfer-encoding",
    "expect",
    "upgrade",
];

/// Answers `head` into `out` when it is a hit the hit path serves: the
/// response head is appended to `out` and the body to send after it is
/// returned (empty for `HEAD`); the request is counted and logged as the
/// full flow does. `None`: declined, nothing written or counted.
pub fn answer(edge: &Edge, conn: &Conn, head: &Head<'_>, out: &mut Vec<u8>) -> Option<Bytes> {
    let start = Instant::now();
    let hit = find(edge, conn, head)?;
    edge.stats.requests.fetch_add(1, Ordering::Relaxed);
    edge.stats.hit_path_requests.fetch_add(1, Ordering::Relaxed);
    let len = hit.body.len() as u64;
    write_head(&hit.object, len, hit.object.age(hit.now).as_secs(), out);
    let body = if head.method == "HEAD" { Bytes::new() } else { hit.body };
    let sent = body.len() as u64;
    edge.stats.bytes_served.fetch_add(sent, Ordering::Relaxed);
    let done = Done {
        client: hit.client,
        method: head.method,
        path: path_of(head.target),
        status: 200,
        outcome: Outcome { cache: CacheResult::Hit, origin_time: None },
        tls: conn.tls_version,
        start,
    };
    request::record(edge, Some(&hit.site), &done, sent);
    Some(body)
}

/// The hit `head` asks for, when the hit path may answer it; the site's
/// rate limit is taken last, once the answer is sure, so a declined request
/// takes no token the full flow takes again.
fn find(edge: &Edge, conn: &Conn, head: &Head<'_>) -> Option<Hit> {
    if head.minor_version != 1 || !(head.method == "GET" || head.method == "HEAD") || !is_plain_target(head.target) {
        return None;
    }
    let path = path_of(head.target);
    if request::answered_on_any_host(path) || request::has_dot_segment(path) {
        return None;
    }
    let fields = fields(head.headers)?;
    let host = host::normalized(fields.host?);
    let site = edge.site(&host).filter(|_| !host.is_empty())?;
    if request::fronted_by(edge, conn, &host, &site).is_some() || site.cache_ttl.is_zero() {
        return None;
    }
    let client = conn.peer.ip().to_canonical();
    site.waf.check(client, path, fields.user_agent).ok()?;
    site.waf.check_referer(fields.referer).ok()?;
    let key = edge.cache.plain_key(cache::url_key(&host, head.target))?;
    let object = edge.cache.memory_get(&key)?;
    let now = SystemTime::now();
    let Payload::Memory(body) = &object.body else { return None };
    if object.state(now) != State::Fresh || !object.headers.contains_key(header::DATE) {
        return None;
    }
    let body = body.clone();
    if let Some(limiter) = &site.limiter
        && !limiter.allow(client, Instant::now())
    {
        return None;
    }
    Some(Hit { site, object, body, now, client })
}

/// The headers the hit path looks at; `None` when one of them (or one of
/// [`DECLINED`]) means the request is the full flow's. A repeated `Host`,
/// `User-Agent` or `Referer`, or one with bytes a `HeaderValue` would not
/// read as text, is declined too: the full flow reads the first.
fn fields<'a>(headers: &'a [httparse::Header<'a>]) -> Option<Fields<'a>> {
    let mut fields = Fields::default();
    for h in headers {
        let name = h.name;
        if name.eq_ignore_ascii_case("host") {
            set_once(&mut fields.host, text(h.value)?)?;
        } else if name.eq_ignore_ascii_case("user-agent") {
            set_once(&mut fields.user_agent, text(h.value)?)?;
        } else if name.eq_ignore_ascii_case("referer") {
            set_once(&mut fields.referer, h.value)?;
        } else if name.eq_ignore_ascii_case("connection") {
            if !h.value.trim_ascii().eq_ignore_ascii_case(b"keep-alive") {
                return None;
            }
        } else if DECLINED.iter().any(|d| name.eq_ignore_ascii_case(d)) {
            return None;
        }
    }
    Some(fields)
}

/// Sets `slot` to `value`; `None` when it was already set.
fn set_once<T>(slot: &mut Option<T>, value: T) -> Option<()> {
    slot.replace(value).is_none().then_some(())
}

/// `value` as text, when it is what `HeaderValue::to_str` accepts: visible
/// ASCII, spaces and tabs.
fn text(value: &[u8]) -> Option<&str> {
    let visible = value.iter().all(|&b| b == b'\t' || (b' '..=b'~').contains(&b));
    visible.then(|| std::str::from_utf8(value).ok()).flatten()
}

/// Whether `target` is in origin form and made only of the bytes RFC 3986
/// allows in a path and query (`pchar`, `/`, `?`): no fragment, nothing the
/// URI parser would refuse or rewrite.
fn is_plain_target(target: &str) -> bool {
    let allowed = |b: u8| b.is_ascii_alphanumeric() || b"-._~!$&'()*+,;=:@/?%".contains(&b);
    target.starts_with('/') && target.bytes().all(allowed)
}

/// The path of an origin-form target, without its query.
fn path_of(target: &str) -> &str {
    target.split_once('?').map_or(target, |(path, _)| path)
}

/// Appends the head of a `200` carrying the whole of `object` (`len` bytes,
/// `age` seconds old): its stored headers, in their order, with what an
/// answer from the cache sets (`Content-Length`, `Accept-Ranges`, `Age`,
/// `X-Cache`, `Via`) as [`crate::cached`] and [`crate::request::respond`]
/// set them: a stored `Content-Length` or `Accept-Ranges` is replaced where
/// it stands, the others follow.
fn write_head(object: &CachedObject, len: u64, age: u64, out: &mut Vec<u8>) {
    out.extend_from_slice(b"HTTP/1.1 200 OK\r\n");
    let mut digits = itoa::Buffer::new();
    let mut line = |name: &[u8], value: &[u8]| {
        out.extend_from_slice(name);
        out.extend_from_slice(b": ");
        out.extend_from_slice(value);
        out.extend_from_slice(b"\r\n");
    };
    let (mut wrote_len, mut wrote_ranges) = (false, false);
    for (name, value) in &object.headers {
        if name == header::CONTENT_LENGTH {
            // A name with several values gets one.
            if !std::mem::replace(&mut wrote_len, true) {
                line(b"content-length", digits.format(len).as_bytes());
            }
        } else if name == header::ACCEPT_RANGES {
            if !std::mem::replace(&mut wrote_ranges, true) {
                line(b"accept-ranges", b"bytes");
            }
        } else if name != header::AGE && name != X_CACHE {
            line(name.as_str().as_bytes(), value.as_bytes());
        }
    }
    if !wrote_len {
        line(b"content-length", digits.format(len).as_bytes());
    }
    if !wrote_ranges {
        line(b"accept-ranges", b"bytes");
    }
    line(b"age", digits.format(age).as_bytes());
    line(b"x-cache", b"HIT");
    line(b"via", b"1.1 lagran-edge");
    out.extend_from_slice(b"\r\n");
}

#[cfg(test)]
mod tests {
    use super::*;

    fn header<'a>(name: &'a str, value: &'a [u8]) -> httparse::Header<'a> {
        httparse::Header { name, value }
    }

    #[test]
    fn the_headers_of_a_plain_request_are_read_and_the_full_flows_are_declined() {
        let plain = [header("Host", b"bench.test"), header("user-agent", b"wrk"), header("Connection", b"Keep-Alive")];
        let f = fields(&plain).expect("a plain request");
        assert_eq!((f.host, f.user_agent, f.referer), (Some("bench.test"), Some("wrk"), None));
        for name in DECLINED {
            assert!(fields(&[header("host", b"a"), header(name, b"x")]).is_none(), "{name}");
        }
        assert!(fields(&[header("host", b"a"), header("connection", b"close")]).is_none());
        assert!(fields(&[header("host", b"a"), header("HOST", b"b")]).is_none(), "two hosts");
        assert!(fields(&[header("host", b"a\x80")]).is_none(), "not text");
    }

    #[test]
    fn only_origin_form_targets_of_uri_bytes_are_plain() {
        assert!(is_plain_target("/a/b.bin?x=1&y=%20"));
        for t in ["*", "http://h/a", "/a#frag", "/a b", "/a\"b", "/a{b}", "/a\\b", "/\u{e9}"] {
            assert!(!is_plain_target(t), "{t}");
        }
        assert_eq!(path_of("/a?b?c"), "/a");
        assert_eq!(path_of("/a"), "/a");
    }
}
