//! The HTTP(S) front: accept loops and the per-connection hyper service of an edge
//! node; each request goes to [`crate::request::respond`].
//!
//! - An HTTP/1.1 connection (plain, or TLS without `h2` by ALPN) starts on the
//!   hit path ([`h1_hits`]): fresh hits from memory are answered there without
//!   hyper ([`crate::hit_path`]), and the connection moves to hyper at the first
//!   request the path declines. HTTP/2 with prior knowledge is handed over at
//!   its preface.
//! - `/.well-known/lagran/*` (real-user measurement, see [`crate::rum`]) is
//!   answered on any host, before site routing; every connection's RTT is read
//!   from the kernel when it ends (see [`crate::measured_conn`]).
//! - At most `max_connections` client connections are open at once (HTTP and HTTPS
//!   together), and `max_connections_per_client` from one client; a connection past
//!   either is closed at once ([`crate::conn_limit`]). A connection, HTTP/1 or
//!   HTTP/2, on which nothing moves for `idle_timeout_secs` is closed ([`crate::idle`]).
//! - `GET /healthz` is rate-limited per client like every request: by the site's
//!   limiter when the host is a site, and by the edge's own ([`crate::HEALTHZ_RPS`]),
//!   since it is answered on any host.

mod conn_timer;
mod gathered;
mod h1_hits;
mod prefixed;

use std::convert::Infallible;
use std::future::Future;
use std::io;
use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::task::{Context, Waker};
use std::time::Duration;

use bytes::BytesMut;
use hyper::http::uri::Scheme;
use hyper::service::service_fn;
use hyper_util::rt::TokioIo;
use hyper_util::server::conn::auto;
use tokio::io::{AsyncRead, AsyncWrite};
use tokio::net::{TcpListener, TcpStream};
use tokio_rustls::TlsAcceptor;
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;
use tracing::{debug, info, warn};

use self::conn_timer::ConnTimer;
use self::prefixed::Prefixed;
use crate::conn_limit::ConnLimit;
use crate::idle::{Activity, Watched};
use crate::request::{self, Conn};
use crate::{Edge, Stats, host};

pub use crate::request::has_dot_segment;

/// How long open connections may finish their requests after shutdown.
const DRAIN_TIMEOUT: Duration = Duration::from_secs(10);
const TLS_HANDSHAKE_TIMEOUT: Duration = Duration::from_secs(10);
const HEADER_READ_TIMEOUT: Duration = Duration::from_secs(30);

/// Serves plain HTTP on `listener` until `shutdown`, then drains open connections.
pub async fn run(listener: TcpListener, state: Arc<Edge>, shutdown: CancellationToken) -> io::Result<()> {
    let token = shutdown.clone();
    let slots = state.conn_slots.clone();
    accept_loop(listener, &token, slots, move |stream, peer| {
        let conn = Conn { peer, sni: None, scheme: Scheme::HTTP, tls_version: None };
        serve_conn(state.measure(stream, peer), conn, state.clone(), shutdown.clone(), Protocol::Sniffed)
    })
    .await
}

/// Serves HTTPS on `listener`: TLS with a certificate chosen by SNI, then as [`run`].
pub async fn run_tls(
    listener: TcpListener,
    acceptor: TlsAcceptor,
    state: Arc<Edge>,
    shutdown: CancellationToken,
) -> io::Result<()> {
    let token = shutdown.clone();
    let slots = state.conn_slots.clone();
    accept_loop(listener, &token, slots, move |stream, peer| {
        let (acceptor, state, shutdown) = (acceptor.clone(), state.clone(), shutdown.clone());
        async move {
            let stream = state.measure(stream, peer);
            let tls = match tokio::time::timeout(TLS_HANDSHAKE_TIMEOUT, acceptor.accept(stream)).await {
                Ok(Ok(tls)) => tls,
                Ok(Err(e)) => return debug!(%peer, error = %e, "TLS handshake failed"),
                Err(_) => return debug!(%peer, "TLS handshake timed out"),
            };
            let session = tls.get_ref().1;
            let sni = session.server_name().map(host::normalize);
            let tls_version = session.protocol_version().map(tls_version_name);
            let protocol = match session.alpn_protocol() {
                Some(b"h2") => Protocol::Http2,
                _ => Protocol::Sniffed,
            };
            let conn = Conn { peer, sni, scheme: Scheme::HTTPS, tls_version };
            serve_conn(tls, conn, state, shutdown, protocol).await
        }
    })
    .await
}

async fn accept_loop<F, Fut>(
    listener: TcpListener,
    shutdown: &CancellationToken,
    slots: Arc<ConnLimit>,
    mut on_conn: F,
) -> io::Result<()>
where
    F: FnMut(TcpStream, SocketAddr) -> Fut,
    Fut: Future<Output = ()> + Send + 'static,
{
    let local = listener.local_addr()?;
    let tracker = TaskTracker::new();
    let mut refused: u64 = 0;
    loop {
        let accepted = tokio::select! {
            () = shutdown.cancelled() => break,
            accepted = listener.accept() => accepted,
        };
        match accepted {
            Ok((stream, peer)) => {
                let permit = match slots.claim(peer.ip()) {
                    Ok(permit) => permit,
                    Err(why) => {
                        if refused.is_multiple_of(1000) {
                            warn!(%local, %peer, refused, ?why, "connection caps reached; closing new connections");
                        }
                        refused += 1;
                        drop(stream);
                        continue;
                    }
                };
                let _ = stream.set_nodelay(true);
                let conn = on_conn(stream, peer);
                tracker.spawn(async move {
                    let _permit = permit;
                    conn.await
                });
            }
            // Out of descriptors or a connection that died in the backlog: keep serving.
            Err(e) => {
                warn!(%local, error = %e, "accept failed");
                tokio::time::sleep(Duration::from_millis(50)).await;
            }
        }
    }
    drop(listener);
    tracker.close();
    info!(%local, open = tracker.len(), "listener closed, draining connections");
    if tokio::time::timeout(DRAIN_TIMEOUT, tracker.wait()).await.is_err() {
        warn!(%local, open = tracker.len(), "connections still open after {DRAIN_TIMEOUT:?}; closing them");
    }
    Ok(())
}

/// Counts a connection as open for as long as it lives.
struct OpenConn(Arc<Stats>);

impl OpenConn {
    fn new(stats: &Arc<Stats>) -> OpenConn {
        stats.open_conns.fetch_add(1, Ordering::Relaxed);
        OpenConn(stats.clone())
    }
}

impl Drop for OpenConn {
    fn drop(&mut self) {
        self.0.open_conns.fetch_sub(1, Ordering::Relaxed);
    }
}

/// What a connection speaks, as far as it is known before its first byte.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Protocol {
    /// HTTP/2, agreed by ALPN.
    Http2,
    /// HTTP/1.1, or HTTP/2 with prior knowledge: told by its first bytes.
    Sniffed,
}

/// Serves one connection: its HTTP/1.1 hits on the hit path ([`h1_hits`]),
/// then, from the first request that path declines, or at once for HTTP/2
/// by ALPN, in hyper.
async fn serve_conn<I>(io: I, conn: Conn, edge: Arc<Edge>, shutdown: CancellationToken, protocol: Protocol)
where
    I: AsyncRead + AsyncWrite + Unpin + Send + 'static,
{
    let _open = OpenConn::new(&edge.stats);
    let activity = Activity::new();
    let mut io = Watched::new(io, activity.clone());
    let mut unanswered = BytesMut::new();
    if protocol == Protocol::Sniffed {
        match hits_first(&mut io, &conn, &edge, &shutdown, &activity).await {
            h1_hits::Ended::Closed => return,
            h1_hits::Ended::HandOver(rest) => unanswered = rest,
        }
    }
    serve_in_hyper(Prefixed::new(unanswered, io), conn, edge, shutdown, activity).await;
}

/// Runs the hit path on `io` until it closes or hands over, within the
/// connection's idle timeout; at shutdown, a connection waiting for its next
/// request is closed, and one in the middle of an answer finishes it first.
async fn hits_first<I>(
    io: &mut I,
    conn: &Conn,
    edge: &Edge,
    shutdown: &CancellationToken,
    activity: &Activity,
) -> h1_hits::Ended
where
    I: AsyncRead + AsyncWrite + Unpin,
{
    let idle = AtomicBool::new(false);
    let hits = h1_hits::serve(io, conn, edge, shutdown, &idle);
    tokio::pin!(hits);
    tokio::select! {
        ended = hits.as_mut() => ended,
        () = shutdown.cancelled() => match idle.load(Ordering::Relaxed) {
            true => h1_hits::Ended::Closed,
            false => hits.await,
        },
        () = activity.idle(edge.idle_timeout) => {
            debug!(peer = %conn.peer, idle = ?edge.idle_timeout, "connection idle; closed");
            h1_hits::Ended::Closed
        }
    }
}

/// Serves a connection in hyper; what it writes in a turn of its task leaves
/// in one write ([`gathered`]).
async fn serve_in_hyper<I>(io: I, conn: Conn, edge: Arc<Edge>, shutdown: CancellationToken, activity: Activity)
where
    I: AsyncRead + AsyncWrite + Unpin + Send + 'static,
{
    let peer = conn.peer;
    let conn = Arc::new(conn);
    let idle_timeout = edge.idle_timeout;
    let (io, gather) = gathered::gathered(io);
    let service = service_fn(move |req| {
        let (edge, conn) = (edge.clone(), conn.clone());
        async move { Ok::<_, Infallible>(request::respond(&edge, &conn, req).await) }
    });
    let mut builder = auto::Builder::new(FirstPollInline);
    builder.http1().timer(ConnTimer::default()).header_read_timeout(HEADER_READ_TIMEOUT);
    let served = builder.serve_connection(TokioIo::new(io), service);
    tokio::pin!(served);
    let serving = async {
        tokio::select! {
            result = served.as_mut() => result,
            () = shutdown.cancelled() => {
                served.as_mut().graceful_shutdown();
                served.await
            }
            () = activity.idle(idle_timeout) => {
                debug!(%peer, idle = ?idle_timeout, "connection idle; closed");
                Ok(())
            }
        }
    };
    tokio::pin!(serving);
    match gather.run(serving).await {
        Ok(Ok(())) => {}
        Ok(Err(e)) => debug!(%peer, error = %crate::error_chain(&*e), "connection ended with an error"),
        Err(e) => debug!(%peer, error = %e, "connection ended: a write failed"),
    }
}

/// Runs each HTTP/2 stream hyper hands over: polled once at once, on the
/// connection's task, and spawned only if it is not done. A cached hit
/// answers in that first poll, so it costs no task of its own (allocation,
/// scheduling, a move of its future) and its frames leave in the
/// connection's next write. The first poll's waker does nothing: a stream
/// that is not done is spawned, and its task polls it again. As for HTTP/1,
/// whose requests are served on the connection's task, a panic in that
/// first poll ends the connection, not just the stream.
#[derive(Clone, Copy, Debug, Default)]
struct FirstPollInline;

impl<F> hyper::rt::Executor<F> for FirstPollInline
where
    F: Future + Send + 'static,
    F::Output: Send + 'static,
{
    fn execute(&self, fut: F) {
        let mut fut = Box::pin(fut);
        if fut.as_mut().poll(&mut Context::from_waker(Waker::noop())).is_pending() {
            tokio::spawn(fut);
        }
    }
}

/// How the access log names a TLS version.
fn tls_version_name(version: rustls::ProtocolVersion) -> &'static str {
    match version {
        rustls::ProtocolVersion::TLSv1_3 => "TLSv1.3",
        rustls::ProtocolVersion::TLSv1_2 => "TLSv1.2",
        _ => "TLS",
    }
}

#[cfg(test)]
mod tests {
    use std::sync::atomic::AtomicBool;

    use hyper::rt::Executor;

    use super::*;

    #[tokio::test]
    async fn a_stream_done_at_once_runs_inline_and_one_that_waits_is_spawned() {
        let ran = Arc::new(AtomicBool::new(false));
        let flag = ran.clone();
        FirstPollInline.execute(async move { flag.store(true, Ordering::Relaxed) });
        assert!(ran.load(Ordering::Relaxed), "done within execute, on the caller's task");

        let (tx, rx) = tokio::sync::oneshot::channel::<u32>();
        let (done_tx, done_rx) = tokio::sync::oneshot::channel();
        FirstPollInline.execute(async move {
            let _ = done_tx.send(rx.await.unwrap() + 1);
        });
        tx.send(41).unwrap();
        // The first poll's waker was a no-op: the spawned task's own poll is what hears the send.
        let got = tokio::time::timeout(Duration::from_secs(5), done_rx).await.expect("the waiting stream ran on");
        assert_eq!(got.unwrap(), 42);
    }
}
