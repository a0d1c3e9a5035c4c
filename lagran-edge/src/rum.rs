//! Real-user measurement: the `/.well-known/lagran/` paths every host the edge
//! serves answers, before site routing.
//!
//! - `rum.js`: the beacon script (no dependencies) a page includes;
//! - `ping`: an empty, uncacheable answer any origin may fetch and time
//!   (`Access-Control-Allow-Origin: *`, `Timing-Allow-Origin: *`);
//! - `candidates`: the control plane's candidate nodes for the connection's own
//!   address, remembered per client subnet for [`CANDIDATES_TTL`]; a subnet
//!   whose answer is not remembered may ask the control plane
//!   [`BEACONS_PER_MINUTE`] times a minute, so a spread of addresses cannot turn
//!   the edge into a load on the control plane;
//! - `beacon`: `POST`ed times (see [`crate::beacon`]). The subnet is the
//!   connection's source /24 (/48), never the body's; each subnet may post
//!   [`BEACONS_PER_MINUTE`] a minute (a token bucket of that many, refilled at
//!   that rate); a node must be among that subnet's candidates. Accepted times
//!   gather per (subnet, node) in a bounded [`RttTable`], which the measurement
//!   reporter forwards with source `rum` on the heartbeat cadence.

use std::collections::HashMap;
use std::net::IpAddr;
use std::sync::{Arc, Mutex, OnceLock};
use std::time::{Duration, Instant};

use bytes::Bytes;
use http_body_util::{BodyExt, Limited};
use hyper::body::Incoming;
use hyper::header::{self, HeaderValue};
use hyper::{Method, Request, Response, StatusCode};
use tracing::{debug, warn};

use crate::beacon;
use crate::client_subnet::ClientSubnet;
use crate::control_api::{Candidates, ControlApi};
use crate::rate_limit::RateLimiter;
use crate::rtt::RttTable;

/// Where the RUM paths live, on every host.
pub const PREFIX: &str = "/.well-known/lagran/";
pub const BEACONS_PER_MINUTE: u32 = 10;
pub const CANDIDATES_TTL: Duration = Duration::from_secs(60);
/// Client subnets whose candidates are remembered at once.
pub const MAX_CANDIDATE_SUBNETS: usize = 10_000;
/// (subnet, node) pairs gathered between two reports.
pub const MAX_RUM_ENTRIES: usize = 5_000;
/// Client subnets the beacon rate limit remembers.
const MAX_LIMITED_SUBNETS: usize = 100_000;

const SCRIPT: &str = include_str!("rum.js");

pub type RumRtts = RttTable<(ClientSubnet, String)>;

pub struct Rum {
    control: OnceLock<Arc<ControlApi>>,
    candidates: Mutex<HashMap<ClientSubnet, (Instant, Arc<Candidates>)>>,
    limiter: RateLimiter,
    /// Candidates asked of the control plane, per subnet.
    asked: RateLimiter,
    /// Accepted beacon times, until the next report takes them.
    pub rtts: Arc<RumRtts>,
}

impl Default for Rum {
    fn default() -> Self {
        Rum {
            control: OnceLock::new(),
            candidates: Mutex::default(),
            limiter: per_minute(BEACONS_PER_MINUTE),
            asked: per_minute(BEACONS_PER_MINUTE),
            rtts: Arc::new(RttTable::new(MAX_RUM_ENTRIES)),
        }
    }
}

/// `n` a minute per subnet, `n` at once.
fn per_minute(n: u32) -> RateLimiter {
    RateLimiter::new(f64::from(n) / 60.0, n, MAX_LIMITED_SUBNETS)
}

/// A plain answer for a RUM path.
fn reply(status: StatusCode, content_type: &'static str, body: impl Into<Bytes>) -> Response<Bytes> {
    let mut resp = Response::new(body.into());
    *resp.status_mut() = status;
    let h = resp.headers_mut();
    h.insert(header::CONTENT_TYPE, HeaderValue::from_static(content_type));
    h.insert(header::CACHE_CONTROL, HeaderValue::from_static("no-store"));
    h.insert(header::ACCESS_CONTROL_ALLOW_ORIGIN, HeaderValue::from_static("*"));
    resp
}

fn refuse(status: StatusCode, msg: impl Into<String>) -> Response<Bytes> {
    let mut msg = msg.into();
    msg.push('\n');
    reply(status, "text/plain; charset=utf-8", msg)
}

impl Rum {
    /// Lets `candidates` and `beacon` reach the control plane (once, at start).
    pub fn connect(&self, api: Arc<ControlApi>) {
        let _ = self.control.set(api);
    }

    /// Answers `PREFIX{name}` for a client at `peer`.
    pub async fn respond(&self, name: &str, peer: IpAddr, req: Request<Incoming>) -> Response<Bytes> {
        let method = req.method().clone();
        match (name, &method) {
            (_, &Method::OPTIONS) => preflight(),
            ("rum.js", &Method::GET | &Method::HEAD) => {
                let mut resp = reply(StatusCode::OK, "text/javascript; charset=utf-8", SCRIPT);
                resp.headers_mut().insert(header::CACHE_CONTROL, HeaderValue::from_static("public, max-age=300"));
                resp
            }
            ("ping", &Method::GET | &Method::HEAD) => {
                let mut resp = reply(StatusCode::NO_CONTENT, "text/plain", Bytes::new());
                resp.headers_mut().insert("timing-allow-origin", HeaderValue::from_static("*"));
                resp
            }
            ("candidates", &Method::GET) => match self.candidates_for(peer).await {
                Ok(c) => reply(StatusCode::OK, "application/json", serde_json::to_vec(&*c).expect("serializes")),
                Err(resp) => resp,
            },
            ("beacon", &Method::POST) => self.beacon(peer, req).await,
            ("rum.js" | "ping" | "candidates" | "beacon", _) => {
                let mut resp = refuse(StatusCode::METHOD_NOT_ALLOWED, format!("{method} is not allowed here"));
                let allow = if name == "beacon" { "POST, OPTIONS" } else { "GET, HEAD, OPTIONS" };
                resp.headers_mut().insert(header::ALLOW, HeaderValue::from_static(allow));
                resp
            }
            _ => refuse(StatusCode::NOT_FOUND, format!("{PREFIX}{name} does not exist")),
        }
    }

    /// Takes one of `subnet`'s beacon tokens. The limiter keys an IPv6 address by
    /// its /64; a /48's network address is one /64, so the whole subnet shares a bucket.
    fn admit(&self, subnet: ClientSubnet, now: Instant) -> bool {
        self.limiter.allow(subnet.network(), now)
    }

    /// The candidates for `peer`'s subnet: remembered, or asked for now.
    async fn candidates_for(&self, peer: IpAddr) -> Result<Arc<Candidates>, Response<Bytes>> {
        let subnet = ClientSubnet::of(peer);
        let now = Instant::now();
        if let Some((at, c)) = self.candidates.lock().unwrap_or_else(|e| e.into_inner()).get(&subnet)
            && now.duration_since(*at) < CANDIDATES_TTL
        {
            return Ok(c.clone());
        }
        let Some(api) = self.control.get() else {
            return Err(refuse(StatusCode::SERVICE_UNAVAILABLE, "this edge has no control plane"));
        };
        if !self.asked.allow(subnet.network(), now) {
            let mut resp = refuse(StatusCode::TOO_MANY_REQUESTS, "too many candidate requests from this network");
            resp.headers_mut().insert(header::RETRY_AFTER, HeaderValue::from_static("60"));
            return Err(resp);
        }
        let mut answer = match api.candidates(peer.to_canonical()).await {
            Ok(c) => c,
            Err(e) => {
                warn!(%subnet, error = %crate::error_chain(&e), "candidates unavailable");
                return Err(refuse(StatusCode::SERVICE_UNAVAILABLE, "candidates are unavailable"));
            }
        };
        answer.candidates.truncate(beacon::MAX_NODES);
        let answer = Arc::new(answer);
        let mut cache = self.candidates.lock().unwrap_or_else(|e| e.into_inner());
        if cache.len() >= MAX_CANDIDATE_SUBNETS {
            cache.retain(|_, (at, _)| now.duration_since(*at) < CANDIDATES_TTL);
            if cache.len() >= MAX_CANDIDATE_SUBNETS {
                cache.clear();
            }
        }
        cache.insert(subnet, (now, answer.clone()));
        Ok(answer)
    }

    async fn beacon(&self, peer: IpAddr, req: Request<Incoming>) -> Response<Bytes> {
        let subnet = ClientSubnet::of(peer);
        if !self.admit(subnet, Instant::now()) {
            debug!(%subnet, "beacon over the rate limit");
            let mut resp = refuse(StatusCode::TOO_MANY_REQUESTS, "too many beacons from this network");
            resp.headers_mut().insert(header::RETRY_AFTER, HeaderValue::from_static("60"));
            return resp;
        }
        let body = match Limited::new(req.into_body(), beacon::MAX_BYTES).collect().await {
            Ok(b) => b.to_bytes(),
            Err(_) => {
                let msg = format!("a beacon is at most {} bytes", beacon::MAX_BYTES);
                return refuse(StatusCode::PAYLOAD_TOO_LARGE, msg);
            }
        };
        let parsed = match beacon::parse(&body) {
            Ok(b) => b,
            Err(e) => return refuse(StatusCode::UNPROCESSABLE_ENTITY, e.to_string()),
        };
        let candidates = match self.candidates_for(peer).await {
            Ok(c) => c,
            Err(resp) => return resp,
        };
        match beacon::validate(parsed, &candidates.candidates) {
            Ok(times) => {
                for t in times {
                    self.rtts.record(&(subnet, t.node), t.rtt);
                }
                reply(StatusCode::ACCEPTED, "text/plain; charset=utf-8", "accepted\n")
            }
            Err(e) => refuse(StatusCode::UNPROCESSABLE_ENTITY, e.to_string()),
        }
    }
}

fn preflight() -> Response<Bytes> {
    let mut resp = reply(StatusCode::NO_CONTENT, "text/plain", Bytes::new());
    let h = resp.headers_mut();
    h.insert(header::ACCESS_CONTROL_ALLOW_METHODS, HeaderValue::from_static("GET, HEAD, POST, OPTIONS"));
    h.insert(header::ACCESS_CONTROL_ALLOW_HEADERS, HeaderValue::from_static("content-type"));
    h.insert(header::ACCESS_CONTROL_MAX_AGE, HeaderValue::from_static("600"));
    resp
}

#[cfg(test)]
mod tests {
    use super::*;

    fn subnet(ip: &str) -> ClientSubnet {
        ClientSubnet::of(ip.parse().unwrap())
    }

    #[test]
    fn a_subnet_posts_at_most_its_rate_whatever_address_it_uses() {
        let rum = Rum::default();
        let t0 = Instant::now();
        let admitted = (0..=255u8).filter(|i| rum.admit(subnet(&format!("58.60.1.{i}")), t0)).count();
        assert_eq!(admitted, BEACONS_PER_MINUTE as usize, "256 addresses of one /24 share one bucket");
        assert!(rum.admit(subnet("58.60.2.1"), t0), "the next /24 has its own");
        let later = t0 + Duration::from_secs(6);
        assert!(rum.admit(subnet("58.60.1.9"), later), "one beacon back after a tenth of a minute");
        assert!(!rum.admit(subnet("58.60.1.9"), later));
        let v6 = (0..50u16).filter(|i| rum.admit(subnet(&format!("2001:db8:7:{i:x}::1")), t0)).count();
        assert_eq!(v6, BEACONS_PER_MINUTE as usize, "IPv6: one bucket per /48, across its /64s");
    }

    #[tokio::test]
    async fn without_a_control_plane_there_are_no_candidates() {
        let rum = Rum::default();
        let resp = rum.candidates_for("127.0.0.1".parse().unwrap()).await.unwrap_err();
        assert_eq!(resp.status(), StatusCode::SERVICE_UNAVAILABLE);
    }
}
