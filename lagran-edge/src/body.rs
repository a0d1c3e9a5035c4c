//! Response bodies: one boxed type for everything the edge sends, a body that replays
//! what was already read from the origin before the rest, and a byte counter feeding
//! the agent's bandwidth figure.

use std::collections::VecDeque;
use std::pin::Pin;
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::task::{Context, Poll};

use bytes::Bytes;
use http_body_util::combinators::BoxBody;
use http_body_util::{BodyExt, Empty, Full};
use hyper::body::{Body, Frame, Incoming, SizeHint};

use crate::Stats;

pub type BoxError = Box<dyn std::error::Error + Send + Sync>;
pub type EdgeBody = BoxBody<Bytes, BoxError>;

pub fn full(bytes: impl Into<Bytes>) -> EdgeBody {
    Full::new(bytes.into()).map_err(|never| match never {}).boxed()
}

pub fn empty() -> EdgeBody {
    Empty::new().map_err(|never| match never {}).boxed()
}

pub fn incoming(body: Incoming) -> EdgeBody {
    body.map_err(BoxError::from).boxed()
}

/// The body read so far, then whatever the origin still sends.
pub enum Read {
    /// The body ended within the limit.
    Whole(Bytes),
    /// The body passed the limit; the chunks read so far and the rest.
    Partial(Replay),
}

/// Reads `body` until it ends or passes `limit` bytes.
pub async fn read_up_to(mut body: Incoming, limit: usize) -> Result<Read, hyper::Error> {
    let mut chunks = VecDeque::new();
    let mut len = 0;
    while let Some(frame) = body.frame().await {
        if let Ok(data) = frame?.into_data() {
            len += data.len();
            chunks.push_back(data);
            if len > limit {
                return Ok(Read::Partial(Replay { head: chunks, rest: body }));
            }
        }
    }
    let mut whole = Vec::with_capacity(len);
    chunks.iter().for_each(|c| whole.extend_from_slice(c));
    Ok(Read::Whole(whole.into()))
}

pub struct Replay {
    head: VecDeque<Bytes>,
    rest: Incoming,
}

impl Body for Replay {
    type Data = Bytes;
    type Error = hyper::Error;

    fn poll_frame(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Result<Frame<Bytes>, hyper::Error>>> {
        let this = self.get_mut();
        match this.head.pop_front() {
            Some(chunk) => Poll::Ready(Some(Ok(Frame::data(chunk)))),
            None => Pin::new(&mut this.rest).poll_frame(cx),
        }
    }

    fn is_end_stream(&self) -> bool {
        self.head.is_empty() && self.rest.is_end_stream()
    }
}

/// Adds the data it passes on to `Stats::bytes_served`.
pub struct Counted {
    inner: EdgeBody,
    stats: Arc<Stats>,
}

impl Counted {
    pub fn new(inner: EdgeBody, stats: Arc<Stats>) -> Counted {
        Counted { inner, stats }
    }
}

impl Body for Counted {
    type Data = Bytes;
    type Error = BoxError;

    fn poll_frame(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Result<Frame<Bytes>, BoxError>>> {
        let this = self.get_mut();
        let polled = Pin::new(&mut this.inner).poll_frame(cx);
        if let Poll::Ready(Some(Ok(frame))) = &polled
            && let Some(data) = frame.data_ref()
        {
            this.stats.bytes_served.fetch_add(data.len() as u64, Ordering::Relaxed);
        }
        polled
    }

    fn is_end_stream(&self) -> bool {
        self.inner.is_end_stream()
    }

    fn size_hint(&self) -> SizeHint {
        self.inner.size_hint()
    }
}
