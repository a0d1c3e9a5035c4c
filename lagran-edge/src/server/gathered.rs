//! Writes gathered per turn of a connection's task: what hyper writes to a
//! client connection while the task runs is collected, and written when the
//! turn ends ([`Gather::run`]), so responses answered together leave together.
//!
//! h2 writes each DATA frame of 256 bytes or more with a write of its own and
//! flushes after it: sixteen streams answered at once with 1 KiB each are
//! sixteen system calls and, over TLS, sixteen records sealed and framed one
//! by one. Gathered, they are one write: two records of up to 16 KiB and one
//! call. Only HTTP/2 connections gather, told by the client preface (RFC 9113
//! §3.4: "the client connection preface starts with a sequence of 24 octets"),
//! over TLS as in cleartext: hyper writes an HTTP/1.1 response whole, and
//! copying it would only cost.
//!
//! Large writes (a body chunk of [`DIRECT`] bytes or more) are not copied:
//! what is gathered goes first, then the write itself. At most [`LIMIT`] bytes
//! are held; a write that would pass it waits for the gathered bytes to leave,
//! so a client that stops reading still holds the connection back.

use std::future::{Future, poll_fn};
use std::io::{self, IoSlice};
use std::pin::Pin;
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::task::{Context, Poll, ready};

use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};

/// Bytes gathered at most before they are written.
const LIMIT: usize = 32 * 1024;
/// Writes this large go straight through, uncopied.
const DIRECT: usize = 8 * 1024;

/// The I/O object and the bytes gathered for it, shared by the connection
/// (reading and writing through [`Gathered`]) and the task's driver
/// ([`Gather::run`]); both are polled by the one task, one after the other.
struct Shared<I> {
    io: I,
    /// `None` until the client's first bytes tell the protocol; then whether
    /// writes are gathered (HTTP/2) or written as they come.
    gathering: Option<bool>,
    gathered: Vec<u8>,
    /// How many leading bytes of `gathered` are written.
    sent: usize,
}

/// The I/O object a connection is served on: reads pass through, writes are
/// gathered for [`Gather::run`] to write.
pub struct Gathered<I>(Arc<Mutex<Shared<I>>>);

/// Writes what the connection's task gathered, when each of its turns ends.
pub struct Gather<I>(Arc<Mutex<Shared<I>>>);

/// `io` to serve a connection on, and what writes its gathered bytes.
pub fn gathered<I>(io: I) -> (Gathered<I>, Gather<I>) {
    let shared = Arc::new(Mutex::new(Shared { io, gathering: None, gathered: Vec::new(), sent: 0 }));
    (Gathered(shared.clone()), Gather(shared))
}

fn lock<I>(shared: &Mutex<Shared<I>>) -> MutexGuard<'_, Shared<I>> {
    shared.lock().unwrap_or_else(PoisonError::into_inner)
}

impl<I: AsyncWrite + Unpin> Gather<I> {
    /// Runs `task` (the connection, served on the [`Gathered`] half), writing
    /// what it gathered after each poll, before the task sleeps. Ends with the
    /// task, or with the error of a failed write (the connection is then dead).
    /// `task` is pinned by the caller, so the connection's future (hyper's
    /// state, some kilobytes) is not copied into this one's.
    pub async fn run<F: Future>(self, mut task: Pin<&mut F>) -> io::Result<F::Output> {
        poll_fn(|cx| {
            if let Poll::Ready(out) = task.as_mut().poll(cx) {
                return Poll::Ready(Ok(out));
            }
            match lock(&self.0).poll_write_gathered(cx) {
                Poll::Ready(Err(e)) => Poll::Ready(Err(e)),
                // Written, or the socket's readiness will wake the task.
                Poll::Ready(Ok(())) | Poll::Pending => Poll::Pending,
            }
        })
        .await
    }
}

impl<I: AsyncWrite + Unpin> Shared<I> {
    /// Writes the gathered bytes, then flushes (TLS: its records go out).
    fn poll_write_gathered(&mut self, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        if self.gathered.is_empty() {
            return Poll::Ready(Ok(()));
        }
        while self.sent < self.gathered.len() {
            let n = ready!(Pin::new(&mut self.io).poll_write(cx, &self.gathered[self.sent..]))?;
            if n == 0 {
                return Poll::Ready(Err(io::ErrorKind::WriteZero.into()));
            }
            self.sent += n;
        }
        ready!(Pin::new(&mut self.io).poll_flush(cx))?;
        self.gathered.clear();
        self.sent = 0;
        Poll::Ready(Ok(()))
    }

    fn poll_gather(&mut self, cx: &mut Context<'_>, bufs: &[IoSlice<'_>]) -> Poll<io::Result<usize>> {
        let len = bufs.iter().map(|b| b.len()).sum::<usize>();
        if len >= DIRECT || self.gathering != Some(true) {
            ready!(self.poll_write_gathered(cx))?;
            return Pin::new(&mut self.io).poll_write_vectored(cx, bufs);
        }
        if self.gathered.len() + len > LIMIT {
            ready!(self.poll_write_gathered(cx))?;
        }
        for buf in bufs {
            self.gathered.extend_from_slice(buf);
        }
        Poll::Ready(Ok(len))
    }
}

/// The HTTP/2 client connection preface (RFC 9113 §3.4).
const PREFACE: &[u8] = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n";

impl<I: AsyncRead + Unpin> AsyncRead for Gathered<I> {
    fn poll_read(self: Pin<&mut Self>, cx: &mut Context<'_>, buf: &mut ReadBuf<'_>) -> Poll<io::Result<()>> {
        let mut shared = lock(&self.0);
        let before = buf.filled().len();
        let polled = Pin::new(&mut shared.io).poll_read(cx, buf);
        if shared.gathering.is_none() && buf.filled().len() > before {
            let first = &buf.filled()[before..];
            shared.gathering = Some(PREFACE.starts_with(&first[..first.len().min(PREFACE.len())]));
        }
        polled
    }
}

impl<I: AsyncWrite + Unpin> AsyncWrite for Gathered<I> {
    fn poll_write(self: Pin<&mut Self>, cx: &mut Context<'_>, buf: &[u8]) -> Poll<io::Result<usize>> {
        lock(&self.0).poll_gather(cx, &[IoSlice::new(buf)])
    }

    fn poll_write_vectored(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        lock(&self.0).poll_gather(cx, bufs)
    }

    fn is_write_vectored(&self) -> bool {
        true
    }

    /// Gathered bytes count as flushed: [`Gather::run`] writes them before the
    /// task sleeps.
    fn poll_flush(self: Pin<&mut Self>, _: &mut Context<'_>) -> Poll<io::Result<()>> {
        Poll::Ready(Ok(()))
    }

    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        let mut shared = lock(&self.0);
        ready!(shared.poll_write_gathered(cx))?;
        Pin::new(&mut shared.io).poll_shutdown(cx)
    }
}

#[cfg(test)]
mod tests {
    use std::pin::pin;

    use tokio::io::{AsyncReadExt, AsyncWriteExt, DuplexStream};

    use super::*;

    /// Counts the writes that reach it.
    struct Counting {
        inner: DuplexStream,
        writes: usize,
    }

    impl AsyncRead for Counting {
        fn poll_read(mut self: Pin<&mut Self>, cx: &mut Context<'_>, buf: &mut ReadBuf<'_>) -> Poll<io::Result<()>> {
            Pin::new(&mut self.inner).poll_read(cx, buf)
        }
    }

    impl AsyncWrite for Counting {
        fn poll_write(mut self: Pin<&mut Self>, cx: &mut Context<'_>, buf: &[u8]) -> Poll<io::Result<usize>> {
            self.writes += 1;
            Pin::new(&mut self.inner).poll_write(cx, buf)
        }

        fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
            Pin::new(&mut self.inner).poll_flush(cx)
        }

        fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
            Pin::new(&mut self.inner).poll_shutdown(cx)
        }
    }

    /// A connection whose client sent `first`, served by `serve` on the
    /// gathered half; the writes that reached the socket and what the client got.
    async fn served<F, Fut>(first: &'static [u8], capacity: usize, serve: F) -> (usize, Vec<u8>)
    where
        F: FnOnce(Gathered<Counting>) -> Fut,
        Fut: Future<Output = ()>,
    {
        let (a, mut client) = tokio::io::duplex(capacity);
        let (io, gather) = gathered(Counting { inner: a, writes: 0 });
        let shared = gather.0.clone();
        client.write_all(first).await.unwrap();
        let mut got = Vec::new();
        let task = pin!(serve(io));
        let (done, read) = tokio::join!(gather.run(task), client.read_to_end(&mut got));
        done.unwrap();
        read.unwrap();
        let writes = lock(&shared).io.writes;
        (writes, got)
    }

    /// Reads what the client sent first, answers it with `writes` (each
    /// flushed) and closes.
    async fn answer(mut io: Gathered<Counting>, first: usize, writes: Vec<Vec<u8>>) {
        io.read_exact(&mut vec![0; first]).await.unwrap();
        for w in writes {
            io.write_all(&w).await.unwrap();
            io.flush().await.unwrap();
        }
        io.shutdown().await.unwrap();
    }

    #[tokio::test]
    async fn http2_writes_of_one_turn_leave_in_one_write() {
        let frames = (0..16u8).map(|i| vec![i; 1100]).collect::<Vec<_>>();
        let (writes, got) = served(PREFACE, 1 << 20, |io| answer(io, PREFACE.len(), frames)).await;
        assert_eq!(writes, 1, "sixteen flushed writes, one underneath");
        assert_eq!(got.len(), 16 * 1100);
        assert!(got.chunks(1100).enumerate().all(|(i, c)| c.iter().all(|&x| usize::from(x) == i)), "in order");
    }

    #[tokio::test]
    async fn http1_writes_pass_as_they_come() {
        let request = b"GET / HTTP/1.1\r\nhost: a.test\r\n\r\n";
        let (writes, got) = served(request, 1 << 20, |io| answer(io, request.len(), vec![vec![1; 100]; 3])).await;
        assert_eq!((writes, got.len()), (3, 300));
    }

    #[tokio::test]
    async fn large_writes_pass_uncopied_after_what_was_gathered() {
        let frames = vec![b"head".to_vec(), vec![7; DIRECT]];
        let (writes, got) = served(PREFACE, 1 << 20, |io| answer(io, PREFACE.len(), frames)).await;
        assert_eq!(writes, 2, "the gathered head, then the large write");
        assert_eq!((&got[..4], got.len()), (&b"head"[..], 4 + DIRECT));
    }

    #[tokio::test]
    async fn a_full_gather_waits_for_the_client_to_read() {
        let (a, mut client) = tokio::io::duplex(LIMIT);
        let (mut io, gather) = gathered(a);
        let shared = gather.0.clone();
        client.write_all(PREFACE).await.unwrap();
        let frames = 4 * LIMIT / 1000;
        let task = pin!(async move {
            io.read_exact(&mut [0; PREFACE.len()]).await.unwrap();
            for _ in 0..frames {
                io.write_all(&[1; 1000]).await.unwrap();
            }
            io.shutdown().await.unwrap();
        });
        let mut served = pin!(gather.run(task));
        let stalled = poll_fn(|cx| Poll::Ready(served.as_mut().poll(cx).is_pending())).await;
        assert!(stalled, "four times the limit cannot leave while the client reads nothing");
        let held = lock(&shared).gathered.len();
        assert!(held <= LIMIT, "{held} bytes held: writes past the limit wait");
        let mut got = Vec::new();
        let (done, read) = tokio::join!(served, client.read_to_end(&mut got));
        done.unwrap();
        read.unwrap();
        assert_eq!(got.len(), frames * 1000);
    }
}
