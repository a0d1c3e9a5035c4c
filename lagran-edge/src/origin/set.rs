//! A site's origins in the order they are tried, each marked up or down.
//!
//! A request goes to the first origin that is up. When an origin cannot be
//! reached (no connection, no answer in time) it is marked down and, for a
//! request without a body, the next origin is asked at once, so clients see no
//! error while another origin answers; an idempotent request that failed on
//! its way is also repeated at the next origin. The health checks ([`super::health`])
//! mark origins up again, and down when they stop answering. When every origin
//! is down they are still tried, in order: a health check may be behind.

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
        let members = config.origins.into_iter().map(|origin| Member { origin, up: AtomicBool::new(true) }).collect();
        OriginSet { members, host_header: config.host_header, health_path: config.health_path, client }
    }

    /// The origins in the order to try them: those up, then those down.
    fn in_order(&self) -> impl Iterator<Item = &Member> {
        let up = self.members.iter().filter(|m| m.up.load(Ordering::Relaxed));
        up.chain(self.members.iter().filter(|m| !m.up.load(Ordering::Relaxed)))
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
        let member = self.in_order().next().expect("a site has at least one origin");
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
