//! UDP and TCP listeners on the same port, both answering with [`answer()`].
//!
//! - UDP: [`UDP_WORKERS`] threads of their own (`lagran-dns-udp`) share the
//!   socket, blocking in `recv_from` → answer → `send_to`; datagrams larger
//!   than [`UDP_BUFFER`] are ignored. They are not tokio tasks, so API
//!   requests, heartbeats and store calls on the runtime never queue a
//!   query: the kernel wakes a responder thread as soon as a datagram lands.
//!   (Answering is synchronous and allocation-light, so a thread loses nothing.)
//!   Each asks for the shortest scheduler slice ([`crate::wakeup_slice`]), so
//!   a woken responder preempts the thread holding the core at once.
//! - TCP (RFC 7766): one task per connection, 2-octet length framing, several
//!   queries per connection answered in order, messages above
//!   [`TCP_MAX_MESSAGE`] close the connection. Limits from [`DnsSettings`], so
//!   that one host holding hundreds of idle connections cannot keep others out:
//!   - `tcp_max_connections` in all and `tcp_max_per_client` per client (an
//!     IPv4 address or an IPv6 /64), kept by the shared listener
//!     ([`crate::listener`]); a connection over either is accepted and
//!     closed at once, counted;
//!   - `tcp_idle_secs` to deliver a whole query, counted from the accept or
//!     the previous response, so bytes trickled one at a time do not extend it;
//!   - `tcp_max_queries_per_connection`, then the server closes, so even a
//!     client trickling whole queries holds a slot for a bounded time.
//!
//! Socket errors are logged, counted and survived; only the shutdown token
//! ends [`DnsServer::run`].

use std::future::Future;
use std::io;
use std::net::{IpAddr, SocketAddr};
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::{Duration, SystemTime};

use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream, UdpSocket};
use tokio::task::JoinSet;
use tokio_util::sync::CancellationToken;

use super::answer::{AnswerContext, Reply, Transport, answer};
use super::cookie::{self, CookieJar};
use super::counters::DnsCounters;
use super::rrl::{self, Decision, RateLimiter, ResponseClass};
use super::settings::DnsSettings;
use crate::confirmation::Confirmation;
use crate::dnstap::{self, Tap};
use crate::listener::{self, ConnectionHandler, Limits, Permit, Refusal};
use crate::route_table::SharedRouteTable;

/// Largest UDP query accepted (bigger datagrams are ignored).
pub const UDP_BUFFER: usize = 4096;
/// Threads sharing the UDP socket.
pub const UDP_WORKERS: usize = 4;
/// How often a UDP responder thread blocked in `recv_from` looks at the
/// shutdown token.
const UDP_SHUTDOWN_POLL: Duration = Duration::from_millis(200);
/// Largest TCP query accepted; a longer one closes the connection.
pub const TCP_MAX_MESSAGE: usize = 16 * 1024;
/// Pause after a UDP receive error, so a persistent error cannot spin a core.
const ERROR_BACKOFF: Duration = Duration::from_millis(10);
/// At most one "serving stale answers" warning per this many milliseconds.
const STALE_WARN_EVERY_MS: i64 = 60_000;

/// The userspace responder.
pub struct DnsServer {
    pub table: SharedRouteTable,
    pub settings: Arc<DnsSettings>,
    pub counters: Arc<DnsCounters>,
    /// When the control plane last confirmed the table (how stale the answers are).
    pub confirmation: Arc<Confirmation>,
    /// Response rate limiting of UDP responses (`None`: off).
    pub rrl: Option<Arc<RateLimiter>>,
    /// Server cookie secrets (`None`: COOKIE options are ignored).
    pub cookies: Option<Arc<CookieJar>>,
    /// The query log (`None`: off).
    pub dnstap: Option<Arc<Tap>>,
}

impl DnsServer {
    pub fn new(
        table: SharedRouteTable,
        settings: Arc<DnsSettings>,
        counters: Arc<DnsCounters>,
        confirmation: Arc<Confirmation>,
    ) -> Self {
        DnsServer { table, settings, counters, confirmation, rrl: None, cookies: None, dnstap: None }
    }

    /// Limits UDP responses with `rrl` (see [`rrl`]).
    pub fn with_rrl(mut self, rrl: Option<Arc<RateLimiter>>) -> Self {
        self.rrl = rrl;
        self
    }

    /// Checks and sends server cookies with the secrets of `jar` (see [`cookie`]).
    pub fn with_cookies(mut self, jar: Arc<CookieJar>) -> Self {
        self.cookies = Some(jar);
        self
    }

    /// Logs every exchange to `tap` (see [`dnstap`]).
    pub fn with_dnstap(mut self, tap: Option<Arc<Tap>>) -> Self {
        self.dnstap = tap;
        self
    }

    /// When the query log is on, the time a query is received (the start of
    /// its exchange); `None` when it is off, so nothing is read or copied.
    pub(crate) fn tap_start(&self) -> Option<SystemTime> {
        self.dnstap.as_ref().map(|_| SystemTime::now())
    }

    /// Logs one exchange begun at `query_time` (from [`Self::tap_start`]) to
    /// the query log, without waiting (a full log drops it, counted).
    pub(crate) fn tap(
        &self,
        transport: Transport,
        (client, server): (SocketAddr, Option<SocketAddr>),
        query_time: SystemTime,
        query: &[u8],
        response: Option<&[u8]>,
    ) {
        let Some(tap) = &self.dnstap else { return };
        let protocol = match transport {
            Transport::Udp => dnstap::Protocol::Udp,
            Transport::Tcp => dnstap::Protocol::Tcp,
            Transport::Dot => dnstap::Protocol::Dot,
            Transport::Doq => dnstap::Protocol::Doq,
        };
        let exchange = dnstap::Exchange {
            protocol,
            client,
            server,
            query_time,
            query: query.to_vec(),
            response: response.map(|r| (SystemTime::now(), r.to_vec())),
        };
        tap.log(dnstap::Source::Userspace, exchange);
    }

    /// Answers one message against the current table, counts and logs it.
    pub fn handle(&self, bytes: &[u8], source: IpAddr, transport: Transport) -> Reply {
        let table = self.table.load();
        let now = crate::clock::now_ms();
        let confirmed_at = self.confirmation.last_ms();
        let check = self.cookies.as_ref().map(|jar| jar.check(cookie::unix_now()));
        let ctx = AnswerContext::new(&table, &self.settings, source.to_canonical(), transport, now)
            .confirmed_at(confirmed_at)
            .with_cookies(check.as_ref());
        let mut reply = answer(bytes, &ctx);
        self.counters.record(transport, &reply);
        // Over UDP only (a TCP handshake proves the address), and not for a
        // query whose valid server cookie proves it (RFC 7873 §5.2.5).
        if transport == Transport::Udp
            && let Some(limiter) = &self.rrl
            && reply.bytes.is_some()
            && !reply.cookie.is_some_and(|c| c.valid)
            && let Some(class) = ResponseClass::of(reply.outcome)
        {
            match limiter.decide(ctx.source, class, rrl::monotonic_ms()) {
                Decision::Send => {}
                Decision::Drop => reply.bytes = None,
                Decision::Slip => {
                    reply.bytes = reply.bytes.as_deref().and_then(|b| rrl::slipped(b, reply.cookie.is_some()));
                }
            }
        }
        if reply.scheduled
            && let Some(c) = &reply.client
        {
            let ecs = c.ecs.map(|(a, s, sc)| format!("{a}/{s}/{sc}"));
            tracing::debug!(
                client = %c.address,
                ecs = ecs.as_deref().unwrap_or("none"),
                name = %c.name,
                node = c.node.as_deref().unwrap_or("-"),
                outcome = %reply.outcome,
                transport = ?transport,
                table_version = table.version,
                "dns answer"
            );
        }
        if reply.stale {
            let last = self.counters.last_stale_warn_ms.load(Ordering::Relaxed);
            if now.saturating_sub(last) >= STALE_WARN_EVERY_MS
                && self
                    .counters
                    .last_stale_warn_ms
                    .compare_exchange(last, now, Ordering::Relaxed, Ordering::Relaxed)
                    .is_ok()
            {
                tracing::warn!(
                    table_version = table.version,
                    confirmed_ms_ago = now.saturating_sub(confirmed_at),
                    stale_secs = self.settings.stale_secs,
                    "serving stale DNS answers: the control plane has not confirmed the route table for DNS_STALE_SECS and no DNS_FALLBACK_IP is set"
                );
            }
        }
        reply
    }

    /// Serves UDP and TCP until `shutdown` is cancelled.
    pub async fn run(self: Arc<Self>, udp: UdpSocket, tcp: TcpListener, shutdown: CancellationToken) -> io::Result<()> {
        if let (Ok(u), Ok(t)) = (udp.local_addr(), tcp.local_addr()) {
            tracing::info!(udp = %u, tcp = %t, "dns responder listening");
        }
        // Off the runtime's reactor: blocking, with a timeout to see the shutdown.
        let udp = udp.into_std()?;
        udp.set_nonblocking(false)?;
        udp.set_read_timeout(Some(UDP_SHUTDOWN_POLL))?;
        let udp = Arc::new(udp);
        let mut threads = Vec::with_capacity(UDP_WORKERS);
        for _ in 0..UDP_WORKERS {
            let (server, sock, shutdown) = (self.clone(), udp.clone(), shutdown.clone());
            threads.push(
                std::thread::Builder::new()
                    .name("lagran-dns-udp".into())
                    .spawn(move || server.udp_worker(&sock, &shutdown))?,
            );
        }
        let mut tasks = JoinSet::new();
        let limits = self.stream_limits(self.settings.tcp_max_connections);
        tasks.spawn(listener::serve(tcp, limits, shutdown.clone(), Arc::new(TcpConnections(self.clone()))));
        while let Some(res) = tasks.join_next().await {
            if let Err(e) = res {
                tracing::error!(error = %e, "dns listener task ended abnormally");
            }
        }
        // The TCP task ends only on shutdown; the threads see it within a poll.
        shutdown.cancelled().await;
        // Every thread is joined, whether or not one panicked.
        let panicked =
            tokio::task::spawn_blocking(move || threads.into_iter().map(|t| t.join()).filter(Result::is_err).count())
                .await
                .unwrap_or(UDP_WORKERS);
        if panicked > 0 {
            tracing::error!(threads = panicked, "dns udp responder threads panicked");
        }
        Ok(())
    }

    fn udp_worker(&self, sock: &std::net::UdpSocket, shutdown: &CancellationToken) {
        // Woken by a datagram, run at once rather than after another thread's turn.
        crate::wakeup_slice::prefer_wakeups();
        // One octet more than accepted, to tell an oversized datagram from a full one.
        let mut buf = vec![0u8; UDP_BUFFER + 1];
        let local = sock.local_addr().ok();
        while !shutdown.is_cancelled() {
            let (n, peer) = match sock.recv_from(&mut buf) {
                Ok(v) => v,
                Err(e) if matches!(e.kind(), io::ErrorKind::WouldBlock | io::ErrorKind::TimedOut) => continue,
                Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
                Err(e) => {
                    // e.g. ECONNREFUSED from an ICMP port unreachable of an earlier send.
                    self.counters.io_errors.fetch_add(1, Ordering::Relaxed);
                    tracing::debug!(error = %e, "dns udp receive error");
                    std::thread::sleep(ERROR_BACKOFF);
                    continue;
                }
            };
            if n > UDP_BUFFER {
                self.counters.oversized.fetch_add(1, Ordering::Relaxed);
                continue;
            }
            let started = self.tap_start();
            let reply = self.handle(&buf[..n], peer.ip(), Transport::Udp);
            if let Some(bytes) = &reply.bytes
                && let Err(e) = sock.send_to(bytes, peer)
            {
                self.counters.io_errors.fetch_add(1, Ordering::Relaxed);
                tracing::debug!(error = %e, peer = %peer, "dns udp send error");
            }
            if let Some(at) = started {
                self.tap(Transport::Udp, (peer, local), at, &buf[..n], reply.bytes.as_deref());
            }
        }
    }

    /// The limits of a TCP or DoT listener with `max_connections`:
    /// `tcp_max_per_client` per client and `tcp_idle_secs` for each whole message.
    pub fn stream_limits(&self, max_connections: usize) -> Limits {
        let idle = Duration::from_secs(self.settings.tcp_idle_secs);
        Limits {
            max_connections,
            max_per_client: self.settings.tcp_max_per_client,
            header_timeout: idle,
            idle_timeout: idle,
        }
    }

    /// One TCP or DoT connection (RFC 7766 §8, RFC 7858 §3.3: the same
    /// 2-octet length framing), answered in order until idle, EOF or shutdown.
    /// `_held` (the connection's slots) is released when the connection ends;
    /// `local` (the address the client reached) is for the query log.
    pub(crate) async fn stream_connection<S: AsyncRead + AsyncWrite + Unpin, H: Send>(
        self: Arc<Self>,
        mut stream: S,
        (peer, local): (SocketAddr, Option<SocketAddr>),
        transport: Transport,
        shutdown: CancellationToken,
        _held: H,
    ) {
        let idle = Duration::from_secs(self.settings.tcp_idle_secs);
        let mut msg = Vec::new();
        for _ in 0..self.settings.tcp_max_queries_per_connection {
            // RFC 7766 §6.2.3: "DNS servers SHOULD ... manage their idle
            // timeouts"; one deadline for the whole next message (length and
            // body), so a client trickling an octet at a time cannot extend it.
            let deadline = tokio::time::Instant::now() + idle;
            let mut len = [0u8; 2];
            if !self.read_by(&mut stream, &mut len, deadline, &shutdown).await {
                return;
            }
            let n = u16::from_be_bytes(len) as usize;
            if n > TCP_MAX_MESSAGE {
                self.counters.oversized.fetch_add(1, Ordering::Relaxed);
                tracing::debug!(peer = %peer, len = n, "dns tcp message too large, closing");
                return;
            }
            msg.clear();
            msg.resize(n, 0);
            if !self.read_by(&mut stream, &mut msg, deadline, &shutdown).await {
                return;
            }
            let started = self.tap_start();
            let reply = self.handle(&msg, peer.ip(), transport);
            if let Some(at) = started {
                self.tap(transport, (peer, local), at, &msg, reply.bytes.as_deref());
            }
            let Some(bytes) = reply.bytes else { continue };
            let Ok(out_len) = u16::try_from(bytes.len()) else { continue };
            let mut out = Vec::with_capacity(bytes.len() + 2);
            out.extend_from_slice(&out_len.to_be_bytes());
            out.extend_from_slice(&bytes);
            let written = tokio::select! {
                _ = shutdown.cancelled() => return,
                // Flushed: a TLS stream holds written records until then.
                r = tokio::time::timeout(idle, async {
                    stream.write_all(&out).await?;
                    stream.flush().await
                }) => r,
            };
            if !matches!(written, Ok(Ok(()))) {
                return;
            }
        }
        // RFC 7766 §6.2.3: "A DNS server ... MAY close the connection at any
        // time", e.g. to share its resources; the client reconnects.
        self.counters.tcp_query_limit_closed.fetch_add(1, Ordering::Relaxed);
        let _ = tokio::time::timeout(idle, stream.shutdown()).await;
    }

    /// Fills `buf` from `stream` before `deadline`; false when the connection
    /// is to end instead: shutdown, EOF, a read error, or the deadline passing
    /// (counted as an idle close).
    async fn read_by<S: AsyncRead + Unpin>(
        &self,
        stream: &mut S,
        buf: &mut [u8],
        deadline: tokio::time::Instant,
        shutdown: &CancellationToken,
    ) -> bool {
        let read = tokio::select! {
            _ = shutdown.cancelled() => return false,
            r = tokio::time::timeout_at(deadline, stream.read_exact(buf)) => r,
        };
        match read {
            Ok(Ok(_)) => true,
            Err(_) => {
                self.counters.tcp_idle_closed.fetch_add(1, Ordering::Relaxed);
                false
            }
            Ok(Err(_)) => false, // EOF or error
        }
    }
}

/// Plain TCP connections (RFC 7766) on the shared listener.
struct TcpConnections(Arc<DnsServer>);

impl ConnectionHandler for TcpConnections {
    async fn serve(self: Arc<Self>, stream: TcpStream, peer: SocketAddr, permit: Permit, shutdown: CancellationToken) {
        let _ = stream.set_nodelay(true);
        let local = stream.local_addr().ok();
        self.0.clone().stream_connection(stream, (peer, local), Transport::Tcp, shutdown, permit).await;
    }

    // RFC 7766 §6.2.2: "To mitigate the risk of unintentional server
    // overload, DNS clients MUST take care to minimize the number of
    // concurrent TCP connections made to any individual server." A server
    // enforces what careless or hostile clients do not.
    fn refuse(
        self: Arc<Self>,
        stream: TcpStream,
        _peer: SocketAddr,
        why: Refusal,
    ) -> impl Future<Output = ()> + Send + 'static {
        let counter = match why {
            Refusal::ClientFull => &self.0.counters.tcp_rejected_per_client,
            Refusal::Full => &self.0.counters.tcp_rejected,
        };
        counter.fetch_add(1, Ordering::Relaxed);
        async move { drop(stream) }
    }

    fn accept_failed(&self, error: &io::Error) {
        self.0.counters.io_errors.fetch_add(1, Ordering::Relaxed);
        tracing::warn!(%error, "dns tcp accept error");
    }
}

/// Binds UDP and TCP on the same address. Port 0 picks a port free for both
/// (retrying until UDP and TCP get the same one).
pub async fn bind(addr: SocketAddr) -> io::Result<(UdpSocket, TcpListener)> {
    if addr.port() != 0 {
        let udp = UdpSocket::bind(addr).await?;
        let tcp = TcpListener::bind(addr).await?;
        return Ok((udp, tcp));
    }
    let mut last_err = None;
    for _ in 0..64 {
        let udp = UdpSocket::bind(addr).await?;
        let port = udp.local_addr()?.port();
        match TcpListener::bind(SocketAddr::new(addr.ip(), port)).await {
            Ok(tcp) => return Ok((udp, tcp)),
            Err(e) => last_err = Some(e),
        }
    }
    Err(last_err.unwrap_or_else(|| io::Error::new(io::ErrorKind::AddrInUse, "no port free for both UDP and TCP")))
}

/// What the listener tests (UDP, TCP, DoT, DoQ) share: the small table they
/// answer from, a server over it, and the query they ask.
#[cfg(test)]
pub(crate) mod tests_support {
    use std::net::Ipv4Addr;
    use std::sync::Arc;

    use hickory_proto::op::{Edns, Message, MessageType, OpCode, Query};
    use hickory_proto::rr::rdata::opt::{ClientSubnet, EdnsOption};
    use hickory_proto::rr::{Name, RecordType};

    use super::DnsServer;
    use crate::confirmation::Confirmation;
    use crate::dns::counters::DnsCounters;
    use crate::dns::settings::DnsSettings;
    use crate::model::{NsHost, Zone};
    use crate::prefix_map::{PrefixMapV4, PrefixMapV6};
    use crate::route_table::{Answer, RouteTable, ScheduledName, ZoneRoutes};

    /// A server with default settings answering from [`table`], its table confirmed.
    pub(crate) fn server() -> Arc<DnsServer> {
        Arc::new(server_with(DnsSettings::default()))
    }

    /// A server with `settings` answering from [`table`], its table confirmed.
    pub(crate) fn server_with(settings: DnsSettings) -> DnsServer {
        let shared = crate::route_table::empty_shared();
        shared.store(Arc::new(table()));
        let confirmed = Arc::new(Confirmation::new());
        confirmed.confirm(crate::clock::now_ms());
        DnsServer::new(shared, Arc::new(settings), Arc::new(DnsCounters::new()), confirmed)
    }

    /// An A query for `edge.lagran.net` with EDNS (payload 1232) and, when
    /// given, an ECS option (address, source prefix length).
    pub(crate) fn query(id: u16, ecs: Option<(&str, u8)>) -> Vec<u8> {
        let mut m = Message::new();
        m.set_id(id).set_message_type(MessageType::Query).set_op_code(OpCode::Query);
        m.add_query(Query::query(Name::from_ascii("edge.lagran.net.").unwrap(), RecordType::A));
        let mut e = Edns::new();
        e.set_max_payload(1232);
        if let Some((addr, source)) = ecs {
            e.options_mut().insert(EdnsOption::Subnet(ClientSubnet::new(addr.parse().unwrap(), source, 0)));
        }
        m.set_edns(e);
        m.to_vec().unwrap()
    }

    pub(crate) fn table() -> RouteTable {
        let mut zone = Zone::new("edge.lagran.net");
        zone.ns_hosts =
            vec![NsHost { name: "ns1.edge.lagran.net".into(), ipv4: Some(Ipv4Addr::new(192, 0, 2, 53)), ipv6: None }];
        let answer = |last: u8, node: &str| Answer {
            ttl: 20,
            ipv4: vec![Ipv4Addr::new(203, 0, 113, last)],
            node: Some(node.into()),
            ..Answer::default()
        };
        let apex = ScheduledName {
            ecs: true,
            name: "edge.lagran.net".into(),
            id: 1,
            answers: std::sync::Arc::new(vec![answer(10, "default-01"), answer(1, "gz-01")]),
            // 10.1.0.0/16 -> gz-01, everything else (127.0.0.1 included) -> default-01
            v4: PrefixMapV4::from_ranges([(0x0a01_0000, 0x0a01_ffff, 1)], 0),
            v6: PrefixMapV6::uniform(0),
        };
        RouteTable::new(1, crate::clock::now_ms(), vec![ZoneRoutes { zone, names: vec![apex] }])
    }
}

#[cfg(test)]
mod tests;
