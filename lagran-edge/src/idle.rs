//! Idle connections are closed: a connection on which no byte has moved either
//! way for `idle_timeout_secs` — an HTTP/1 keep-alive connection between
//! requests, an HTTP/2 connection with no stream, a stalled body, a client that
//! stopped reading — is dropped, whatever protocol state it is in. hyper's own
//! timers cover only the wait for an HTTP/1 request head.

use std::io;
use std::pin::Pin;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::task::{Context, Poll};
use std::time::{Duration, Instant};

use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};

/// When a byte last moved on a connection (ms since it opened).
#[derive(Debug, Clone)]
pub struct Activity {
    opened: Instant,
    last_ms: Arc<AtomicU64>,
}

impl Activity {
    pub fn new() -> Activity {
        Activity { opened: Instant::now(), last_ms: Arc::default() }
    }

    fn touch(&self) {
        let ms = u64::try_from(self.opened.elapsed().as_millis()).unwrap_or(u64::MAX);
        self.last_ms.store(ms, Ordering::Relaxed);
    }

    /// How long nothing has moved.
    pub fn idle_for(&self) -> Duration {
        self.opened.elapsed().saturating_sub(Duration::from_millis(self.last_ms.load(Ordering::Relaxed)))
    }

    /// Resolves once nothing has moved for `timeout`. One timer, checked when
    /// it fires and set again to `timeout` after the last activity: the
    /// connection's task polls it on every wake-up, where a pending timer
    /// costs less than an interval's tick.
    pub async fn idle(&self, timeout: Duration) {
        let deadline = tokio::time::sleep(timeout);
        tokio::pin!(deadline);
        loop {
            deadline.as_mut().await;
            let idle = self.idle_for();
            if idle >= timeout {
                return;
            }
            deadline.as_mut().reset(tokio::time::Instant::now() + (timeout - idle));
        }
    }
}

impl Default for Activity {
    fn default() -> Self {
        Activity::new()
    }
}

/// An I/O object recording its [`Activity`].
pub struct Watched<I> {
    inner: I,
    activity: Activity,
}

impl<I> Watched<I> {
    pub fn new(inner: I, activity: Activity) -> Watched<I> {
        Watched { inner, activity }
    }
}

impl<I: AsyncRead + Unpin> AsyncRead for Watched<I> {
    fn poll_read(self: Pin<&mut Self>, cx: &mut Context<'_>, buf: &mut ReadBuf<'_>) -> Poll<io::Result<()>> {
        let this = self.get_mut();
        let before = buf.filled().len();
        let r = Pin::new(&mut this.inner).poll_read(cx, buf);
        if buf.filled().len() > before {
            this.activity.touch();
        }
        r
    }
}

impl<I: AsyncWrite + Unpin> AsyncWrite for Watched<I> {
    fn poll_write(self: Pin<&mut Self>, cx: &mut Context<'_>, buf: &[u8]) -> Poll<io::Result<usize>> {
        let this = self.get_mut();
        let r = Pin::new(&mut this.inner).poll_write(cx, buf);
        if matches!(r, Poll::Ready(Ok(n)) if n > 0) {
            this.activity.touch();
        }
        r
    }

    fn poll_write_vectored(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        let this = self.get_mut();
        let r = Pin::new(&mut this.inner).poll_write_vectored(cx, bufs);
        if matches!(r, Poll::Ready(Ok(n)) if n > 0) {
            this.activity.touch();
        }
        r
    }

    fn is_write_vectored(&self) -> bool {
        self.inner.is_write_vectored()
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.get_mut().inner).poll_flush(cx)
    }

    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.get_mut().inner).poll_shutdown(cx)
    }
}

#[cfg(test)]
mod tests {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};

    use super::*;

    #[tokio::test]
    async fn bytes_moving_either_way_keep_a_connection_busy() {
        let (a, mut b) = tokio::io::duplex(64);
        let activity = Activity::new();
        let mut watched = Watched::new(a, activity.clone());
        tokio::time::sleep(Duration::from_millis(60)).await;
        assert!(activity.idle_for() >= Duration::from_millis(50));
        b.write_all(b"x").await.unwrap();
        let mut buf = [0u8; 1];
        watched.read_exact(&mut buf).await.unwrap();
        assert!(activity.idle_for() < Duration::from_millis(50), "a read is activity");
        tokio::time::sleep(Duration::from_millis(60)).await;
        watched.write_all(b"y").await.unwrap();
        assert!(activity.idle_for() < Duration::from_millis(50), "a write is activity");
        let started = Instant::now();
        tokio::time::timeout(Duration::from_secs(2), activity.idle(Duration::from_millis(100))).await.unwrap();
        assert!(started.elapsed() >= Duration::from_millis(90), "idle only after the timeout");
    }
}
