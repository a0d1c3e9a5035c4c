//! HTTP on the shared listener ([`super::serve`]): an axum router served by
//! hyper on each admitted connection, for the control API (and an NS host's
//! `/metrics`) and the HTTP 302 redirector.
//!
//! - **Header timeout** ([`Limits::header_timeout`]): a client must deliver a
//!   whole request head within it, counted from the moment the connection
//!   waits for one (the accept, or the end of the previous response), so an
//!   idle keep-alive connection or a slowloris one is closed.
//! - **Idle timeout** ([`Limits::idle_timeout`]): a connection on which no byte
//!   moves either way for this long is closed, whatever state it is in (a
//!   stalled request body, a client that stopped reading).
//! - **Caps**: a connection past either cap is answered `503` with
//!   `connection: close` at once (so the client learns why) and closed.
//! - **TLS** ([`serve_tls`]): the same connections over rustls; the handshake
//!   holds the connection's slots and must finish within
//!   [`TLS_HANDSHAKE_TIMEOUT`]. A client speaking cleartext fails its
//!   handshake: there is no fallback.
//!
//! Handlers can read the peer's address with `ConnectInfo<SocketAddr>`, and
//! find [`OverTls`] in a request's extensions when its connection is TLS.

use std::io;
use std::net::SocketAddr;
use std::pin::Pin;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::task::{Context, Poll};
use std::time::{Duration, Instant};

use axum::Router;
use axum::extract::ConnectInfo;
use hyper_util::rt::{TokioExecutor, TokioIo, TokioTimer};
use hyper_util::server::conn::auto;
use hyper_util::service::TowerToHyperService;
use tokio::io::{AsyncRead, AsyncWrite, AsyncWriteExt, ReadBuf};
use tokio::net::{TcpListener, TcpStream};
use tokio_util::sync::CancellationToken;
use tower::ServiceExt as _;

use super::{ConnectionHandler, Limits, Permit, Refusal};

/// The control API's limits: a request head within 10 s of the connection
/// waiting for one; no byte either way for 60 s closes it (above the route
/// table long poll's 30 s, which sends nothing while it waits); 512
/// connections, 128 from one client.
pub const API_LIMITS: Limits = Limits {
    max_connections: 512,
    max_per_client: 128,
    header_timeout: Duration::from_secs(10),
    idle_timeout: Duration::from_secs(60),
};

/// A TLS handshake slower than this is dropped (a stalled client holds nothing).
pub const TLS_HANDSHAKE_TIMEOUT: Duration = Duration::from_secs(10);

/// In a request's extensions when it came over TLS ([`serve_tls`]).
#[derive(Clone, Copy, Debug)]
pub struct OverTls;

/// The answer to a connection past a cap.
fn over_capacity(service: &str) -> Vec<u8> {
    let body = format!(r#"{{"error":"too many connections to the {service}; try again later"}}"#);
    format!(
        "HTTP/1.1 503 Service Unavailable\r\ncontent-type: application/json\r\nconnection: close\r\n\
         retry-after: 1\r\ncontent-length: {}\r\n\r\n{body}",
        body.len()
    )
    .into_bytes()
}

/// An axum router behind the shared listener.
struct HttpConnections {
    /// Names the service in logs and in the 503 body.
    service: &'static str,
    app: Router,
    limits: Limits,
    tls: Option<tokio_rustls::TlsAcceptor>,
}

impl ConnectionHandler for HttpConnections {
    async fn serve(self: Arc<Self>, stream: TcpStream, peer: SocketAddr, permit: Permit, shutdown: CancellationToken) {
        let _permit = permit;
        let Some(acceptor) = &self.tls else {
            return serve_connection(stream, peer, false, self.app.clone(), self.limits, shutdown).await;
        };
        match tokio::time::timeout(TLS_HANDSHAKE_TIMEOUT, acceptor.accept(stream)).await {
            Ok(Ok(stream)) => serve_connection(stream, peer, true, self.app.clone(), self.limits, shutdown).await,
            Ok(Err(e)) => tracing::debug!(service = self.service, %peer, error = %e, "TLS handshake failed"),
            Err(_) => tracing::debug!(service = self.service, %peer, "TLS handshake timed out"),
        }
    }

    async fn refuse(self: Arc<Self>, mut stream: TcpStream, peer: SocketAddr, why: Refusal) {
        tracing::debug!(service = self.service, %peer, ?why, "connection refused");
        let _ = tokio::time::timeout(Duration::from_secs(1), stream.write_all(&over_capacity(self.service))).await;
        let _ = stream.shutdown().await;
    }

    fn accept_failed(&self, error: &io::Error) {
        tracing::warn!(service = self.service, %error, "accept failed");
    }
}

/// Serves `app` on `listener` until `shutdown`, then lets open requests finish
/// (up to a few seconds). `service` names it in logs and refusals.
pub async fn serve(
    service: &'static str,
    listener: TcpListener,
    app: Router,
    limits: Limits,
    shutdown: CancellationToken,
) -> io::Result<()> {
    let handler = Arc::new(HttpConnections { service, app, limits, tls: None });
    super::serve(listener, limits, shutdown, handler).await;
    Ok(())
}

/// [`serve`] over TLS: every connection is a rustls stream, under the same limits.
pub async fn serve_tls(
    service: &'static str,
    listener: TcpListener,
    app: Router,
    limits: Limits,
    config: Arc<rustls::ServerConfig>,
    shutdown: CancellationToken,
) -> io::Result<()> {
    let tls = Some(tokio_rustls::TlsAcceptor::from(config));
    let handler = Arc::new(HttpConnections { service, app, limits, tls });
    super::serve(listener, limits, shutdown, handler).await;
    Ok(())
}

/// Serves one connection under the header-read and idle timeouts; `tls`: it is a TLS stream.
pub async fn serve_connection<I>(
    io: I,
    peer: SocketAddr,
    tls: bool,
    app: Router,
    limits: Limits,
    shutdown: CancellationToken,
) where
    I: AsyncRead + AsyncWrite + Unpin + Send + 'static,
{
    let started = Instant::now();
    let activity = Arc::new(AtomicU64::new(0));
    let io = Activity { inner: io, started, last_ms: activity.clone() };
    let mut builder = auto::Builder::new(TokioExecutor::new());
    builder.http1().timer(TokioTimer::new()).header_read_timeout(limits.header_timeout);
    builder.http2().timer(TokioTimer::new());
    let app = app.map_request(move |mut r: axum::http::Request<_>| {
        r.extensions_mut().insert(ConnectInfo(peer));
        if tls {
            r.extensions_mut().insert(OverTls);
        }
        r
    });
    let served = builder.serve_connection_with_upgrades(TokioIo::new(io), TowerToHyperService::new(app));
    tokio::pin!(served);
    let mut idle_check = tokio::time::interval(limits.idle_timeout.div_f32(4.0).max(Duration::from_millis(10)));
    loop {
        tokio::select! {
            r = served.as_mut() => {
                if let Err(e) = r {
                    tracing::debug!(error = %e, "HTTP connection ended with an error");
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
                    tracing::debug!(idle = ?limits.idle_timeout, "HTTP connection idle; closed");
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
        tokio::spawn(serve("API", listener, app, limits, shutdown.clone()));
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
        let limits = Limits { header_timeout: Duration::from_millis(300), ..API_LIMITS };
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
        let limits =
            Limits { header_timeout: Duration::from_secs(30), idle_timeout: Duration::from_millis(400), ..API_LIMITS };
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
        let limits = Limits { max_connections: 2, ..API_LIMITS };
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
