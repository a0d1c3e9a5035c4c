//! The HTTP listener of the control API (and of an NS host's `/metrics`):
//! hyper connections with limits a public-facing server needs.
//!
//! - **Header-read timeout** ([`Limits::header_read_timeout`]): a client must
//!   deliver a whole request head within it, counted from the moment the
//!   connection waits for one (the accept, or the end of the previous
//!   response), so an idle keep-alive connection or a slowloris one is closed.
//! - **Idle timeout** ([`Limits::idle_timeout`]): a connection on which no byte
//!   moves either way for this long is closed, whatever state it is in (a
//!   stalled request body, a client that stopped reading). It is above the
//!   route-table long poll's 30 s cap, which sends nothing while it waits.
//! - **Connection cap** ([`Limits::max_connections`]): past it, a new
//!   connection is answered `503` with `connection: close` at once (so the
//!   client learns why) and closed; the open ones are not disturbed.
//! - **TLS** (`--api-tls-cert`/`--api-tls-key`, [`serve_tls`]): the same
//!   connections over rustls; the handshake counts against the cap and must
//!   finish within [`TLS_HANDSHAKE_TIMEOUT`]. A client speaking cleartext
//!   fails its handshake: there is no fallback.

use std::io;
use std::pin::Pin;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::task::{Context, Poll};
use std::time::{Duration, Instant};

use axum::Router;
use hyper_util::rt::{TokioExecutor, TokioIo, TokioTimer};
use hyper_util::server::conn::auto;
use hyper_util::service::TowerToHyperService;
use tokio::io::{AsyncRead, AsyncWrite, AsyncWriteExt, ReadBuf};
use tokio::net::TcpListener;
use tokio::sync::Semaphore;
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;

/// Default: a request head must arrive within 10 s of the connection waiting for one.
pub const API_HEADER_READ_TIMEOUT: Duration = Duration::from_secs(10);
/// Default: a connection with no byte either way for 60 s is closed.
pub const API_IDLE_TIMEOUT: Duration = Duration::from_secs(60);
/// Default: at most 512 connections at once.
pub const API_MAX_CONNECTIONS: usize = 512;
/// A TLS handshake slower than this is dropped (a stalled client holds nothing).
pub const TLS_HANDSHAKE_TIMEOUT: Duration = Duration::from_secs(10);
/// How long open connections may finish after shutdown.
const DRAIN_TIMEOUT: Duration = Duration::from_secs(5);

/// The answer to a connection past the cap.
fn over_capacity() -> Vec<u8> {
    let body = r#"{"error":"too many connections to the API; try again later"}"#;
    format!(
        "HTTP/1.1 503 Service Unavailable\r\ncontent-type: application/json\r\nconnection: close\r\n\
         retry-after: 1\r\ncontent-length: {}\r\n\r\n{body}",
        body.len()
    )
    .into_bytes()
}

/// The listener's limits.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Limits {
    pub header_read_timeout: Duration,
    pub idle_timeout: Duration,
    pub max_connections: usize,
}

impl Default for Limits {
    fn default() -> Self {
        Limits {
            header_read_timeout: API_HEADER_READ_TIMEOUT,
            idle_timeout: API_IDLE_TIMEOUT,
            max_connections: API_MAX_CONNECTIONS,
        }
    }
}

/// Serves `app` on `listener` until `shutdown`, then lets open requests finish
/// (up to a few seconds).
pub async fn serve(listener: TcpListener, app: Router, limits: Limits, shutdown: CancellationToken) -> io::Result<()> {
    serve_with(listener, app, limits, None, shutdown).await
}

/// [`serve`] over TLS: every connection is a rustls stream, under the same limits.
pub async fn serve_tls(
    listener: TcpListener,
    app: Router,
    limits: Limits,
    config: Arc<rustls::ServerConfig>,
    shutdown: CancellationToken,
) -> io::Result<()> {
    serve_with(listener, app, limits, Some(tokio_rustls::TlsAcceptor::from(config)), shutdown).await
}

async fn serve_with(
    listener: TcpListener,
    app: Router,
    limits: Limits,
    tls: Option<tokio_rustls::TlsAcceptor>,
    shutdown: CancellationToken,
) -> io::Result<()> {
    let slots = Arc::new(Semaphore::new(limits.max_connections));
    let tracker = TaskTracker::new();
    let mut refused: u64 = 0;
    loop {
        let (stream, peer) = tokio::select! {
            () = shutdown.cancelled() => break,
            accepted = listener.accept() => match accepted {
                Ok(a) => a,
                Err(e) => {
                    // Out of descriptors, or a connection reset in the backlog: keep serving.
                    tracing::warn!(error = %e, "API accept failed");
                    tokio::time::sleep(Duration::from_millis(50)).await;
                    continue;
                }
            },
        };
        let Ok(permit) = slots.clone().try_acquire_owned() else {
            if refused.is_multiple_of(100) {
                tracing::warn!(%peer, max = limits.max_connections, refused, "API connection cap reached; refusing");
            }
            refused += 1;
            tracker.spawn(async move {
                let mut stream = stream;
                let _ = tokio::time::timeout(Duration::from_secs(1), stream.write_all(&over_capacity())).await;
                let _ = stream.shutdown().await;
            });
            continue;
        };
        let (app, shutdown, tls) = (app.clone(), shutdown.clone(), tls.clone());
        tracker.spawn(async move {
            let _permit = permit;
            let Some(acceptor) = tls else {
                return serve_connection(stream, app, limits, shutdown).await;
            };
            match tokio::time::timeout(TLS_HANDSHAKE_TIMEOUT, acceptor.accept(stream)).await {
                Ok(Ok(stream)) => serve_connection(stream, app, limits, shutdown).await,
                Ok(Err(e)) => tracing::debug!(%peer, error = %e, "API TLS handshake failed"),
                Err(_) => tracing::debug!(%peer, "API TLS handshake timed out"),
            }
        });
    }
    drop(listener);
    tracker.close();
    if tokio::time::timeout(DRAIN_TIMEOUT, tracker.wait()).await.is_err() {
        tracing::warn!(open = tracker.len(), "API connections still open after {DRAIN_TIMEOUT:?}; closing them");
    }
    Ok(())
}

/// Serves one connection under the header-read and idle timeouts.
pub async fn serve_connection<I>(io: I, app: Router, limits: Limits, shutdown: CancellationToken)
where
    I: AsyncRead + AsyncWrite + Unpin + Send + 'static,
{
    let started = Instant::now();
    let activity = Arc::new(AtomicU64::new(0));
    let io = Activity { inner: io, started, last_ms: activity.clone() };
    let mut builder = auto::Builder::new(TokioExecutor::new());
    builder.http1().timer(TokioTimer::new()).header_read_timeout(limits.header_read_timeout);
    builder.http2().timer(TokioTimer::new());
    let served = builder.serve_connection_with_upgrades(TokioIo::new(io), TowerToHyperService::new(app));
    tokio::pin!(served);
    let mut idle_check = tokio::time::interval(limits.idle_timeout.div_f32(4.0).max(Duration::from_millis(10)));
    loop {
        tokio::select! {
            r = served.as_mut() => {
                if let Err(e) = r {
                    tracing::debug!(error = %e, "API connection ended with an error");
                }
                return;
            }
            () = shutdown.cancelled() => {
                served.as_mut().graceful_shutdown();
                let _ = served.await;
                return;
            }
            _ = idle_check.tick() => {
                let last = Duration::from_millis(activity.load(Ordering::Relaxed));
                if started.elapsed().saturating_sub(last) >= limits.idle_timeout {
                    tracing::debug!(idle = ?limits.idle_timeout, "API connection idle; closed");
                    return;
                }
            }
        }
    }
}

/// An I/O object recording when a byte last moved (ms since `started`).
struct Activity<I> {
    inner: I,
    started: Instant,
    last_ms: Arc<AtomicU64>,
}

impl<I> Activity<I> {
    fn touch(&self) {
        let ms = u64::try_from(self.started.elapsed().as_millis()).unwrap_or(u64::MAX);
        self.last_ms.store(ms, Ordering::Relaxed);
    }
}

impl<I: AsyncRead + Unpin> AsyncRead for Activity<I> {
    fn poll_read(self: Pin<&mut Self>, cx: &mut Context<'_>, buf: &mut ReadBuf<'_>) -> Poll<io::Result<()>> {
        let this = self.get_mut();
        let before = buf.filled().len();
        let r = Pin::new(&mut this.inner).poll_read(cx, buf);
        if buf.filled().len() > before {
            this.touch();
        }
        r
    }
}

impl<I: AsyncWrite + Unpin> AsyncWrite for Activity<I> {
    fn poll_write(self: Pin<&mut Self>, cx: &mut Context<'_>, buf: &[u8]) -> Poll<io::Result<usize>> {
        let this = self.get_mut();
        let r = Pin::new(&mut this.inner).poll_write(cx, buf);
        if matches!(r, Poll::Ready(Ok(n)) if n > 0) {
            this.touch();
        }
        r
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.get_mut().inner).poll_flush(cx)
    }

    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.get_mut().inner).poll_shutdown(cx)
    }

    fn poll_write_vectored(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        let this = self.get_mut();
        let r = Pin::new(&mut this.inner).poll_write_vectored(cx, bufs);
        if matches!(r, Poll::Ready(Ok(n)) if n > 0) {
            this.touch();
        }
        r
    }

    fn is_write_vectored(&self) -> bool {
        self.inner.is_write_vectored()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use axum::routing::get;
    use tokio::io::AsyncReadExt;
    use tokio::net::TcpStream;

    async fn start(limits: Limits) -> (std::net::SocketAddr, CancellationToken) {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let app = Router::new().route("/", get(|| async { "hello" })).route(
            "/slow",
            get(|| async {
                tokio::time::sleep(Duration::from_millis(300)).await;
                "slow"
            }),
        );
        let shutdown = CancellationToken::new();
        tokio::spawn(serve(listener, app, limits, shutdown.clone()));
        (addr, shutdown)
    }

    /// Reads until EOF (or 5 s); returns what came and whether the peer closed.
    async fn read_to_close(s: &mut TcpStream) -> (String, bool) {
        let mut out = Vec::new();
        let mut buf = [0u8; 1024];
        loop {
            match tokio::time::timeout(Duration::from_secs(5), s.read(&mut buf)).await {
                Ok(Ok(0)) | Ok(Err(_)) => return (String::from_utf8_lossy(&out).into_owned(), true),
                Ok(Ok(n)) => out.extend_from_slice(&buf[..n]),
                Err(_) => return (String::from_utf8_lossy(&out).into_owned(), false),
            }
        }
    }

    #[tokio::test]
    async fn a_slow_request_head_is_cut_off() {
        let limits = Limits { header_read_timeout: Duration::from_millis(300), ..Limits::default() };
        let (addr, _shutdown) = start(limits).await;
        let mut s = TcpStream::connect(addr).await.unwrap();
        s.write_all(b"GET / HTTP/1.1\r\nhost: 127.0.0.1\r\n").await.unwrap(); // never finished
        let t = Instant::now();
        let (_, closed) = read_to_close(&mut s).await;
        assert!(closed, "a head never finished must be closed");
        assert!(t.elapsed() < Duration::from_secs(4), "closed by the 300 ms header timeout, took {:?}", t.elapsed());
        // A complete request is still served.
        let mut s = TcpStream::connect(addr).await.unwrap();
        s.write_all(b"GET / HTTP/1.1\r\nhost: 127.0.0.1\r\nconnection: close\r\n\r\n").await.unwrap();
        let (text, _) = read_to_close(&mut s).await;
        assert!(text.starts_with("HTTP/1.1 200") && text.ends_with("hello"), "{text}");
    }

    #[tokio::test]
    async fn an_idle_connection_is_closed() {
        let limits = Limits {
            header_read_timeout: Duration::from_secs(30),
            idle_timeout: Duration::from_millis(400),
            ..Limits::default()
        };
        let (addr, _shutdown) = start(limits).await;
        let mut s = TcpStream::connect(addr).await.unwrap();
        // A request whose body never comes: past the header timeout's reach.
        s.write_all(b"POST / HTTP/1.1\r\nhost: 127.0.0.1\r\ncontent-length: 100\r\n\r\nabc").await.unwrap();
        let t = Instant::now();
        let (_, closed) = read_to_close(&mut s).await;
        assert!(closed, "a stalled connection must be closed");
        assert!(t.elapsed() < Duration::from_secs(4), "closed by the 400 ms idle timeout, took {:?}", t.elapsed());
        // A request slower than nothing-moving but answered keeps its connection.
        let mut s = TcpStream::connect(addr).await.unwrap();
        s.write_all(b"GET /slow HTTP/1.1\r\nhost: 127.0.0.1\r\nconnection: close\r\n\r\n").await.unwrap();
        let (text, _) = read_to_close(&mut s).await;
        assert!(text.ends_with("slow"), "{text}");
    }

    #[tokio::test]
    async fn connections_past_the_cap_get_503_and_the_open_ones_stay() {
        let limits = Limits { max_connections: 2, ..Limits::default() };
        let (addr, _shutdown) = start(limits).await;
        let mut held = Vec::new();
        for _ in 0..2 {
            let mut s = TcpStream::connect(addr).await.unwrap();
            s.write_all(b"GET / HTTP/1.1\r\nhost: 127.0.0.1\r\n\r\n").await.unwrap();
            let mut buf = [0u8; 256];
            let n = s.read(&mut buf).await.unwrap();
            assert!(buf[..n].starts_with(b"HTTP/1.1 200"));
            held.push(s); // kept open (keep-alive)
        }
        let mut third = TcpStream::connect(addr).await.unwrap();
        let (text, closed) = read_to_close(&mut third).await;
        assert!(closed && text.starts_with("HTTP/1.1 503") && text.contains("too many connections"), "{text}");
        // The held ones still work.
        held[0].write_all(b"GET / HTTP/1.1\r\nhost: 127.0.0.1\r\nconnection: close\r\n\r\n").await.unwrap();
        let (text, _) = read_to_close(&mut held[0]).await;
        assert!(text.starts_with("HTTP/1.1 200"), "{text}");
        drop(held);
        // Slots free again once connections close.
        tokio::time::sleep(Duration::from_millis(100)).await;
        let mut s = TcpStream::connect(addr).await.unwrap();
        s.write_all(b"GET / HTTP/1.1\r\nhost: 127.0.0.1\r\nconnection: close\r\n\r\n").await.unwrap();
        let (text, _) = read_to_close(&mut s).await;
        assert!(text.starts_with("HTTP/1.1 200"), "{text}");
    }
}
