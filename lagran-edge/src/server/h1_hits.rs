//! The HTTP/1.1 connection loop of the hit path: request heads are read and
//! parsed here and each fresh hit is answered by [`crate::hit_path`], the
//! answers to one read leaving in one write. The first request it declines,
//! and any head it cannot parse whole from what has arrived (a head split
//! across reads, an HTTP/2 preface, a malformed head), hands the connection
//! to hyper with every byte not yet answered ([`super::prefixed`]), for the
//! rest of its life: hyper answers those as ever, errors included.

use std::io;
use std::sync::atomic::{AtomicBool, Ordering};

use bytes::{Buf, BytesMut};
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};
use tokio_util::sync::CancellationToken;

use crate::Edge;
use crate::hit_path::{self, Head};
use crate::request::Conn;

/// Bytes read at a time; a head that does not fit goes to hyper.
const READ_BUF: usize = 8 * 1024;
/// Headers a head may have on this path; one with more goes to hyper.
const MAX_HEADERS: usize = 32;
/// Bodies up to this size are copied behind their head, to leave in one
/// write; larger ones are written from the cache's own buffer.
const INLINE_BODY: usize = 16 * 1024;
/// Answers gathered from pipelined requests are written once they reach this.
const OUT_FLUSH: usize = 64 * 1024;

/// How the loop ended.
#[derive(Debug)]
pub enum Ended {
    /// The client closed, a read or write failed, or the edge is shutting down.
    Closed,
    /// A request for hyper: the bytes read and not answered, from its head on.
    HandOver(BytesMut),
}

/// Serves `io` while its requests are hits; `idle` is true while the loop
/// waits for a new request with nothing half-read or half-written (what the
/// caller may drop it in, at shutdown). The loop itself stops before reading
/// a new request once `shutdown` is cancelled.
pub async fn serve<I>(io: &mut I, conn: &Conn, edge: &Edge, shutdown: &CancellationToken, idle: &AtomicBool) -> Ended
where
    I: AsyncRead + AsyncWrite + Unpin,
{
    let mut buf = BytesMut::with_capacity(READ_BUF);
    // Grown by the first answer and kept: a connection handed to hyper at
    // its first request has none.
    let mut out = Vec::new();
    loop {
        match answer_all(io, conn, edge, &mut buf, &mut out).await {
            Ok(true) => {}
            Ok(false) => return Ended::HandOver(buf),
            Err(_) => return Ended::Closed,
        }
        if shutdown.is_cancelled() {
            return Ended::Closed;
        }
        buf.reserve(READ_BUF);
        idle.store(true, Ordering::Relaxed);
        let read = io.read_buf(&mut buf).await;
        idle.store(false, Ordering::Relaxed);
        if !matches!(read, Ok(n) if n > 0) {
            return Ended::Closed;
        }
    }
}

/// Answers every request in `buf` and writes the answers; `false` (the
/// answers before it written) at the first one that is hyper's, which stays
/// in `buf`.
async fn answer_all<I>(io: &mut I, conn: &Conn, edge: &Edge, buf: &mut BytesMut, out: &mut Vec<u8>) -> io::Result<bool>
where
    I: AsyncWrite + Unpin,
{
    let mut all = true;
    while !buf.is_empty() {
        let Some((len, body)) = answer_one(conn, edge, buf, out) else {
            all = false;
            break;
        };
        buf.advance(len);
        if body.len() > INLINE_BODY {
            io.write_all(out).await?;
            out.clear();
            io.write_all(&body).await?;
        } else {
            out.extend_from_slice(&body);
        }
        if out.len() >= OUT_FLUSH {
            io.write_all(out).await?;
            out.clear();
        }
    }
    if !out.is_empty() {
        io.write_all(out).await?;
        out.clear();
    }
    Ok(all)
}

/// The length of the head at the start of `buf` and the body of its answer,
/// whose head is appended to `out`; `None` when it is not a whole head or
/// not a hit this path answers.
fn answer_one(conn: &Conn, edge: &Edge, buf: &[u8], out: &mut Vec<u8>) -> Option<(usize, bytes::Bytes)> {
    let mut headers = [httparse::EMPTY_HEADER; MAX_HEADERS];
    let mut req = httparse::Request::new(&mut headers);
    let httparse::Status::Complete(len) = req.parse(buf).ok()? else { return None };
    let head = Head { method: req.method?, target: req.path?, minor_version: req.version?, headers: req.headers };
    let body = hit_path::answer(edge, conn, &head, out)?;
    Some((len, body))
}
