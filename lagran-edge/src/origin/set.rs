//! A site's origins in the order they are tried, each marked up or down.
//!
//! A request goes to the first origin that is up, or, when the site gives
//! weights, to the origin that is up picked by smooth weighted round-robin (the
//! one nginx uses: every pick adds each weight to its origin's running score,
//! takes the highest and subtracts the total from it, so 3:1 sends a,a,b,a…),
//! then to the others in order. When an origin cannot be
//! reached (no connection, no answer in time) it is marked down and, for a
//! request without a body, the next origin is asked at once, so clients see no
//! error while another origin answers; an idempotent request that failed on
//! its way is also repeated at the next origin. The health checks ([`super::health`])
//! mark origins up again, and down when they stop answering. When every origin
//! is down they are still tried, in order: a health check may be behind.

use std::sync::Mutex;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use hyper::header::HeaderValue;
use hyper::{HeaderMap, Method, Request, Response, Uri};
use tracing::{info, warn};

use super::{Forward, Origin, OriginClient, OriginError};
use crate::body::{self, EdgeBody};

/// What a site says about its origins.
#[derive(Debug, Clone)]
pub struct OriginSetConfig {
    /// In order of preference; never empty.
    pub origins: Vec<Origin>,
    /// `Host` sent to the origins instead of their own authority.
    pub host_header: Option<HeaderValue>,
    /// Path the health checks ask with `GET`.
    pub health_path: String,
    /// One weight per origin; empty: in order.
    pub weights: Vec<u32>,
}

#[derive(Debug)]
struct Member {
    origin: Origin,
    up: AtomicBool,
}

#[derive(Debug)]
pub struct OriginSet {
    members: Vec<Member>,
    host_header: Option<HeaderValue>,
    health_path: String,
    client: OriginClient,
    weights: Vec<u32>,
    /// Smooth weighted round-robin scores, one per origin.
    scores: Mutex<Vec<i64>>,
}

/// The request line and headers of a request, to send to one origin after another.
#[derive(Debug, Clone)]
pub struct RequestHead {
    pub method: Method,
    pub uri: Uri,
    pub headers: HeaderMap,
}

impl RequestHead {
    fn request(&self, body: EdgeBody) -> Request<EdgeBody> {
        let mut req = Request::new(body);
        *req.method_mut() = self.method.clone();
        *req.uri_mut() = self.uri.clone();
        *req.headers_mut() = self.headers.clone();
        req
    }
}

impl OriginSet {
    pub fn new(config: OriginSetConfig, client: OriginClient) -> OriginSet {
        let members: Vec<Member> =
            config.origins.into_iter().map(|origin| Member { origin, up: AtomicBool::new(true) }).collect();
        let scores = Mutex::new(vec![0; members.len()]);
        let (host_header, health_path, weights) = (config.host_header, config.health_path, config.weights);
        OriginSet { members, host_header, health_path, client, weights, scores }
    }

    /// The origins in the order to try them: the weighted pick, those up, then those down.
    fn in_order(&self) -> Vec<&Member> {
        let picked = self.weighted_pick();
        let mut order = Vec::with_capacity(self.members.len());
        order.extend(picked.map(|i| &self.members[i]));
        for up in [true, false] {
            let rest = self
                .members
                .iter()
                .enumerate()
                .filter(|(i, m)| m.up.load(Ordering::Relaxed) == up && Some(*i) != picked);
            order.extend(rest.map(|(_, m)| m));
        }
        order
    }

    /// The next origin by smooth weighted round-robin among those up.
    fn weighted_pick(&self) -> Option<usize> {
        if self.weights.is_empty() {
            return None;
        }
        let mut scores = self.scores.lock().unwrap_or_else(|e| e.into_inner());
        let (mut total, mut best) = (0, None::<usize>);
        for (i, member) in self.members.iter().enumerate() {
            let weight = i64::from(self.weights[i]);
            if weight == 0 || !member.up.load(Ordering::Relaxed) {
                continue;
            }
            scores[i] += weight;
            total += weight;
            if best.is_none_or(|b| scores[i] > scores[b]) {
                best = Some(i);
            }
        }
        let best = best?;
        scores[best] -= total;
        Some(best)
    }

    fn mark(&self, member: &Member, up: bool) {
        if member.up.swap(up, Ordering::Relaxed) != up {
            match up {
                true => info!(origin = ?member.origin, "origin is up"),
                false => warn!(origin = ?member.origin, "origin is down"),
            }
        }
    }

    /// Sends a bodiless request to the first origin that answers; the time the
    /// answering origin took to send its response head comes along.
    pub async fn fetch(
        &self,
        head: &RequestHead,
        forward: Forward<'_>,
    ) -> Result<(Response<EdgeBody>, Duration), OriginError> {
        let mut last = None;
        for member in self.in_order() {
            let start = Instant::now();
            match self
                .client
                .send(&member.origin, head.request(body::empty()), forward, self.host_header.as_ref())
                .await
            {
                Ok(resp) => return Ok((resp, start.elapsed())),
                Err(e) if e.origin_unreachable() => {
                    self.mark(member, false);
                    last = Some(e);
                }
                // A pooled connection the origin closed as the request went out:
                // an idempotent request may be repeated (RFC 9110 §9.2.2), at the
                // next origin, without condemning this one.
                Err(e @ OriginError::Request { .. }) if head.method.is_idempotent() => last = Some(e),
                Err(e) => return Err(e),
            }
        }
        Err(last.expect("a site has at least one origin"))
    }

    /// Sends a request with a body to the first origin that is up (a body is
    /// sent once, so it is not retried elsewhere).
    pub async fn send(
        &self,
        req: Request<EdgeBody>,
        forward: Forward<'_>,
    ) -> Result<(Response<EdgeBody>, Duration), OriginError> {
        let member = *self.in_order().first().expect("a site has at least one origin");
        let start = Instant::now();
        match self.client.send(&member.origin, req, forward, self.host_header.as_ref()).await {
            Ok(resp) => Ok((resp, start.elapsed())),
            Err(e) => {
                if e.origin_unreachable() {
                    self.mark(member, false);
                }
                Err(e)
            }
        }
    }

    /// One health check of every origin: up when it answers the health path
    /// with a status below 500.
    pub async fn check(&self, forward: Forward<'_>) {
        let head = RequestHead {
            method: Method::GET,
            uri: self.health_path.parse().unwrap_or_else(|_| Uri::from_static("/")),
            headers: HeaderMap::new(),
        };
        for member in &self.members {
            let sent =
                self.client.send(&member.origin, head.request(body::empty()), forward, self.host_header.as_ref());
            let up = matches!(sent.await, Ok(resp) if resp.status().as_u16() < 500);
            self.mark(member, up);
        }
    }

    /// How many origins there are.
    pub fn len(&self) -> usize {
        self.members.len()
    }

    pub fn is_empty(&self) -> bool {
        self.members.is_empty()
    }
}
