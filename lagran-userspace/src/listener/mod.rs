//! One accept loop for every TCP socket the daemon accepts connections on
//! (TCP DNS, DNS over TLS, the control API, the HTTP 302 redirector), under
//! the same kind of [`Limits`]:
//!
//! - at most `max_connections` open at once and `max_per_client` from one
//!   client, a client being an IPv4 address or the /64 of an IPv6 address
//!   (one host usually holds a whole /64); a connection over either cap is
//!   handed to [`ConnectionHandler::refuse`] (closed at once unless the
//!   protocol has something to say), the open ones are not disturbed;
//! - each accepted connection holds a [`Permit`] that frees both slots when
//!   the connection's task drops it, whatever way the connection ends;
//! - `header_timeout` and `idle_timeout` are handed to the connection's
//!   handler, which applies them in its protocol's terms (a DNS message, an
//!   HTTP request head);
//! - an accept error (out of descriptors, a connection reset in the backlog)
//!   is reported and followed by a pause that doubles while errors repeat,
//!   so a persistent error cannot spin a core.
//!
//! DNS over QUIC accepts through quinn, not a TCP listener; it claims the
//! same [`Slots`] once a handshake completes.

pub mod http;

use std::collections::HashMap;
use std::future::Future;
use std::io;
use std::net::{IpAddr, SocketAddr};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::net::{TcpListener, TcpStream};
use tokio::sync::{OwnedSemaphorePermit, Semaphore};
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;

/// How long open connections may finish after shutdown before the loop returns.
const DRAIN_TIMEOUT: Duration = Duration::from_secs(5);

/// What one listener allows.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Limits {
    /// Connections open at once.
    pub max_connections: usize,
    /// Connections open at once from one client (IPv4 address, IPv6 /64).
    pub max_per_client: usize,
    /// Time a connection has to deliver a whole first request (a DNS message,
    /// an HTTP request head), counted from the accept or the previous response.
    pub header_timeout: Duration,
    /// A connection on which nothing moves for this long is closed.
    pub idle_timeout: Duration,
}

/// Why a connection was not admitted.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Refusal {
    /// `max_connections` are open.
    Full,
    /// Its client already holds `max_per_client`.
    ClientFull,
}

/// What a listener does with its connections.
pub trait ConnectionHandler: Send + Sync + 'static {
    /// Serves one admitted connection; the slots are freed when `permit` drops.
    fn serve(
        self: Arc<Self>,
        stream: TcpStream,
        peer: SocketAddr,
        permit: Permit,
        shutdown: CancellationToken,
    ) -> impl Future<Output = ()> + Send + 'static;

    /// A connection over a cap; by default it is closed at once.
    fn refuse(
        self: Arc<Self>,
        stream: TcpStream,
        peer: SocketAddr,
        why: Refusal,
    ) -> impl Future<Output = ()> + Send + 'static {
        let _ = (peer, why);
        async move { drop(stream) }
    }

    /// An accept failed (the loop pauses and goes on).
    fn accept_failed(&self, error: &io::Error);
}

/// Accepts on `listener` until `shutdown`, admitting connections within
/// `limits` and handing them to `handler`; then waits for the open ones to
/// finish (up to [`DRAIN_TIMEOUT`]; they see the same `shutdown`).
pub async fn serve<H: ConnectionHandler>(
    listener: TcpListener,
    limits: Limits,
    shutdown: CancellationToken,
    handler: Arc<H>,
) {
    let slots = Slots::new(&limits);
    let tracker = TaskTracker::new();
    let mut backoff = Backoff::default();
    loop {
        let accepted = tokio::select! {
            () = shutdown.cancelled() => break,
            r = listener.accept() => r,
        };
        let (stream, peer) = match accepted {
            Ok(a) => a,
            Err(e) => {
                handler.accept_failed(&e);
                tokio::time::sleep(backoff.next()).await;
                continue;
            }
        };
        backoff.reset();
        match slots.claim(peer.ip()) {
            Ok(permit) => tracker.spawn(handler.clone().serve(stream, peer, permit, shutdown.clone())),
            Err(why) => tracker.spawn(handler.clone().refuse(stream, peer, why)),
        };
    }
    drop(listener);
    tracker.close();
    if tokio::time::timeout(DRAIN_TIMEOUT, tracker.wait()).await.is_err() {
        tracing::warn!(open = tracker.len(), "connections still open {DRAIN_TIMEOUT:?} after shutdown; leaving them");
    }
}

/// The pause after an accept error: 10 ms, doubling up to 1 s while errors repeat.
#[derive(Debug)]
struct Backoff {
    next: Duration,
}

impl Backoff {
    const FIRST: Duration = Duration::from_millis(10);
    const MAX: Duration = Duration::from_secs(1);

    fn next(&mut self) -> Duration {
        let now = self.next;
        self.next = (now * 2).min(Self::MAX);
        now
    }

    fn reset(&mut self) {
        self.next = Self::FIRST;
    }
}

impl Default for Backoff {
    fn default() -> Self {
        Backoff { next: Self::FIRST }
    }
}

/// The connection slots of one listener: a total and one count per client.
#[derive(Clone)]
pub struct Slots {
    total: Arc<Semaphore>,
    per_client: Arc<PerClient>,
    max_per_client: usize,
}

impl Slots {
    pub fn new(limits: &Limits) -> Self {
        Slots {
            total: Arc::new(Semaphore::new(limits.max_connections)),
            per_client: Arc::new(PerClient::default()),
            max_per_client: limits.max_per_client,
        }
    }

    /// A slot for one more connection from `ip`: its client's first, then the total.
    pub fn claim(&self, ip: IpAddr) -> Result<Permit, Refusal> {
        let client = self.per_client.claim(ip, self.max_per_client).ok_or(Refusal::ClientFull)?;
        let total = self.total.clone().try_acquire_owned().map_err(|_| Refusal::Full)?;
        Ok(Permit { _total: total, _client: client })
    }
}

/// An admitted connection's slots, freed on drop.
pub struct Permit {
    _total: OwnedSemaphorePermit,
    _client: ClientSlot,
}

/// A client as far as the per-client cap goes: an IPv4 address, or the /64
/// of an IPv6 address. An IPv4-mapped IPv6 address is its IPv4 address.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
enum ClientKey {
    V4(u32),
    V6(u64),
}

impl ClientKey {
    fn of(ip: IpAddr) -> ClientKey {
        match ip.to_canonical() {
            IpAddr::V4(a) => ClientKey::V4(u32::from(a)),
            IpAddr::V6(a) => ClientKey::V6((u128::from(a) >> 64) as u64),
        }
    }
}

/// Open connections by client.
#[derive(Default)]
struct PerClient {
    open: Mutex<HashMap<ClientKey, usize>>,
}

impl PerClient {
    /// One more connection for `ip`, or `None` when it already has `max`.
    fn claim(self: &Arc<Self>, ip: IpAddr, max: usize) -> Option<ClientSlot> {
        let key = ClientKey::of(ip);
        let mut open = self.open.lock().unwrap_or_else(|p| p.into_inner());
        let n = open.entry(key).or_insert(0);
        if *n >= max {
            if *n == 0 {
                open.remove(&key);
            }
            return None;
        }
        *n += 1;
        Some(ClientSlot { table: self.clone(), key })
    }
}

/// A claimed per-client connection, released on drop.
struct ClientSlot {
    table: Arc<PerClient>,
    key: ClientKey,
}

impl Drop for ClientSlot {
    fn drop(&mut self) {
        let mut open = self.table.open.lock().unwrap_or_else(|p| p.into_inner());
        if let Some(n) = open.get_mut(&self.key) {
            *n -= 1;
            if *n == 0 {
                open.remove(&self.key);
            }
        }
    }
}

#[cfg(test)]
mod tests;
