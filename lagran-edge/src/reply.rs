//! Answers the request path builds: plain text from the edge itself, origin
//! responses passed through uncached, and origin failures; each marked with
//! its cache result for `x-cache`, the access log and the metrics.

use std::time::Duration;

use hyper::body::Body;
use hyper::header::{self, HeaderValue};
use hyper::{Request, Response, StatusCode};
use tracing::warn;

use crate::Site;
use crate::body::{self, EdgeBody};
use crate::origin::{Forward, OriginError, RequestHead};
use crate::outcome::{Answer, CacheResult, Outcome};

pub fn text(status: StatusCode, msg: impl Into<String>) -> Response<EdgeBody> {
    let mut resp = Response::new(body::full(msg.into()));
    *resp.status_mut() = status;
    resp.headers_mut().insert(header::CONTENT_TYPE, HeaderValue::from_static("text/plain; charset=utf-8"));
    resp.headers_mut().insert(header::CACHE_CONTROL, HeaderValue::from_static("no-store"));
    resp
}

/// Passes `req` to the origin and its answer back, uncached.
pub async fn proxy(site: &Site, req: Request<EdgeBody>, forward: Forward<'_>, result: CacheResult) -> Answer {
    let sent = match req.body().is_end_stream() {
        true => {
            let (parts, _) = req.into_parts();
            let head = RequestHead { method: parts.method, uri: parts.uri, headers: parts.headers };
            site.origins.fetch(&head, forward).await
        }
        false => site.origins.send(req, forward).await,
    };
    match sent {
        Ok((resp, took)) => {
            site.metrics.origin_answered(took);
            with_outcome(resp, result, Some(took))
        }
        Err(e) => origin_failed(site, forward.host, e),
    }
}

/// `resp` marked with its cache result (`x-cache`), with its outcome beside it.
pub fn with_outcome(mut resp: Response<EdgeBody>, cache: CacheResult, origin_time: Option<Duration>) -> Answer {
    cache.set(resp.headers_mut());
    Answer { response: resp, outcome: Outcome { cache, origin_time } }
}

pub fn origin_failed(site: &Site, host: &str, e: OriginError) -> Answer {
    site.metrics.origin_failed();
    warn!(%host, error = %crate::error_chain(&e), "origin fetch failed");
    let resp = match e {
        OriginError::Timeout { .. } => text(StatusCode::GATEWAY_TIMEOUT, "origin timed out\n"),
        _ => text(StatusCode::BAD_GATEWAY, "origin unreachable\n"),
    };
    with_outcome(resp, CacheResult::Miss, None)
}
