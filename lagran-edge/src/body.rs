//! Response bodies: one boxed type for everything the edge sends, a body that replays
//! what was already read from the origin before the rest, a body fed by a task
//! through a channel, a body cut off at a deadline, and a byte counter feeding the agent's bandwidth figure and, when the
//! body is done, the request's access log line and metrics.

use std::collections::VecDeque;
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::task::{Context, Poll};

use bytes::Bytes;
use http_body_util::combinators::BoxBody;
use http_body_util::{BodyExt, Empty, Full};
use hyper::body::{Body, Frame, Incoming, SizeHint};
use tokio::sync::mpsc;

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
pub async fn read_up_to(mut body: EdgeBody, limit: usize) -> Result<Read, BoxError> {
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
    rest: EdgeBody,
}

impl Body for Replay {
    type Data = Bytes;
    type Error = BoxError;

    fn poll_frame(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Result<Frame<Bytes>, BoxError>>> {
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

/// The chunks a task sends through `rx`, until it closes its end; an error
/// ends the body with it (hyper then cuts the response short).
pub fn channel(rx: mpsc::Receiver<Result<Bytes, BoxError>>) -> EdgeBody {
    Channel(rx).boxed()
}

struct Channel(mpsc::Receiver<Result<Bytes, BoxError>>);

impl Body for Channel {
    type Data = Bytes;
    type Error = BoxError;

    fn poll_frame(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Result<Frame<Bytes>, BoxError>>> {
        self.get_mut().0.poll_recv(cx).map(|next| next.map(|r| r.map(Frame::data)))
    }
}

/// The body was not done by the deadline of the whole origin exchange.
#[derive(Debug, thiserror::Error)]
#[error("the origin's body did not end in time")]
pub struct BodyTimeout;

/// `inner`, failing with [`BodyTimeout`] once `deadline` passes.
pub fn until(inner: EdgeBody, deadline: tokio::time::Instant) -> EdgeBody {
    Until { inner, sleep: Box::pin(tokio::time::sleep_until(deadline)) }.boxed()
}

struct Until {
    inner: EdgeBody,
    sleep: Pin<Box<tokio::time::Sleep>>,
}

impl Body for Until {
    type Data = Bytes;
    type Error = BoxError;

    fn poll_frame(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Result<Frame<Bytes>, BoxError>>> {
        let this = self.get_mut();
        if let Poll::Ready(frame) = Pin::new(&mut this.inner).poll_frame(cx) {
            return Poll::Ready(frame);
        }
        match this.sleep.as_mut().poll(cx) {
            Poll::Ready(()) => Poll::Ready(Some(Err(BodyTimeout.into()))),
            Poll::Pending => Poll::Pending,
        }
    }

    fn is_end_stream(&self) -> bool {
        self.inner.is_end_stream()
    }

    fn size_hint(&self) -> SizeHint {
        self.inner.size_hint()
    }
}

/// Called once with the body bytes sent when a response body is done or dropped.
pub type OnDone = Box<dyn FnOnce(u64) + Send + Sync>;

/// Adds the data it passes on to `Stats::bytes_served`, and tells `on_done` the
/// total when the body ends or is dropped (a client that went away).
pub struct Counted {
    inner: EdgeBody,
    stats: Arc<Stats>,
    sent: u64,
    on_done: Option<OnDone>,
}

impl Counted {
    pub fn new(inner: EdgeBody, stats: Arc<Stats>, on_done: Option<OnDone>) -> Counted {
        Counted { inner, stats, sent: 0, on_done }
    }
}

impl Drop for Counted {
    fn drop(&mut self) {
        if let Some(done) = self.on_done.take() {
            done(self.sent);
        }
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
            this.sent += data.len() as u64;
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
