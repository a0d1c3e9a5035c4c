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
use std::time::Duration;

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
}

impl DnsServer {
    pub fn new(
        table: SharedRouteTable,
        settings: Arc<DnsSettings>,
        counters: Arc<DnsCounters>,
        confirmation: Arc<Confirmation>,
    ) -> Self {
        DnsServer { table, settings, counters, confirmation, rrl: None, cookies: None }
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
            let reply = self.handle(&buf[..n], peer.ip(), Transport::Udp);
            if let Some(bytes) = reply.bytes
                && let Err(e) = sock.send_to(&bytes, peer)
            {
                self.counters.io_errors.fetch_add(1, Ordering::Relaxed);
                tracing::debug!(error = %e, peer = %peer, "dns udp send error");
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
    /// `_held` (the connection's slots) is released when the connection ends.
    pub(crate) async fn stream_connection<S: AsyncRead + AsyncWrite + Unpin, H: Send>(
        self: Arc<Self>,
        mut stream: S,
        peer: SocketAddr,
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
            let reply = self.handle(&msg, peer.ip(), transport);
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
        self.0.clone().stream_connection(stream, peer, Transport::Tcp, shutdown, permit).await;
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
mod tests {
    use std::net::Ipv4Addr;
    use std::sync::atomic::AtomicU64;

    use hickory_proto::op::{Edns, Message, MessageType, OpCode, Query as HQuery};
    use hickory_proto::rr::rdata::opt::{ClientSubnet, EdnsCode, EdnsOption};
    use hickory_proto::rr::{Name, RData, RecordType};

    use tokio::net::TcpStream;

    use super::tests_support;
    use super::*;

    fn query(id: u16, name: &str, t: RecordType, ecs: Option<(&str, u8)>) -> Vec<u8> {
        let mut m = Message::new();
        m.set_id(id).set_message_type(MessageType::Query).set_op_code(OpCode::Query);
        m.add_query(HQuery::query(Name::from_ascii(name).unwrap(), t));
        if let Some((addr, source)) = ecs {
            let mut e = Edns::new();
            e.set_max_payload(1232);
            e.options_mut().insert(EdnsOption::Subnet(ClientSubnet::new(addr.parse().unwrap(), source, 0)));
            m.set_edns(e);
        }
        m.to_vec().unwrap()
    }

    fn first_a(m: &Message) -> Ipv4Addr {
        match m.answers()[0].data() {
            RData::A(a) => a.0,
            other => panic!("{other:?}"),
        }
    }

    async fn tcp_ask(stream: &mut TcpStream, q: &[u8]) -> Message {
        let mut framed = (q.len() as u16).to_be_bytes().to_vec();
        framed.extend_from_slice(q);
        stream.write_all(&framed).await.unwrap();
        let mut len = [0u8; 2];
        stream.read_exact(&mut len).await.unwrap();
        let mut buf = vec![0u8; u16::from_be_bytes(len) as usize];
        stream.read_exact(&mut buf).await.unwrap();
        Message::from_vec(&buf).unwrap()
    }

    #[tokio::test]
    async fn serves_udp_and_tcp_on_one_port() {
        let (udp, tcp) = bind("127.0.0.1:0".parse().unwrap()).await.unwrap();
        let addr = udp.local_addr().unwrap();
        assert_eq!(tcp.local_addr().unwrap(), addr, "same port for UDP and TCP");
        let server = tests_support::server();
        let shutdown = CancellationToken::new();
        let running = tokio::spawn(server.clone().run(udp, tcp, shutdown.clone()));

        // UDP: garbage first (dropped, the server keeps going), then real queries.
        let client = UdpSocket::bind("127.0.0.1:0").await.unwrap();
        client.send_to(&[1, 2, 3], addr).await.unwrap();
        let mut buf = vec![0u8; 4096];
        for (id, ecs, want) in [(1u16, None, 10u8), (2, Some(("10.1.2.0", 24)), 1)] {
            client.send_to(&query(id, "edge.lagran.net.", RecordType::A, ecs), addr).await.unwrap();
            let (n, _) =
                tokio::time::timeout(Duration::from_secs(5), client.recv_from(&mut buf)).await.unwrap().unwrap();
            let m = Message::from_vec(&buf[..n]).unwrap();
            assert_eq!(m.id(), id);
            assert!(m.authoritative());
            assert_eq!(first_a(&m), Ipv4Addr::new(203, 0, 113, want));
            if ecs.is_some() {
                let Some(EdnsOption::Subnet(cs)) = m.extensions().as_ref().unwrap().option(EdnsCode::Subnet) else {
                    panic!("no ECS echoed")
                };
                assert_eq!(cs.scope_prefix(), 16);
            }
        }

        // TCP: several queries on one connection, answered in order.
        let mut stream = TcpStream::connect(addr).await.unwrap();
        let m = tcp_ask(&mut stream, &query(10, "edge.lagran.net.", RecordType::A, Some(("10.1.0.0", 16)))).await;
        assert_eq!((m.id(), first_a(&m)), (10, Ipv4Addr::new(203, 0, 113, 1)));
        let m = tcp_ask(&mut stream, &query(11, "whoami.edge.lagran.net.", RecordType::TXT, None)).await;
        assert_eq!(m.id(), 11);
        assert_eq!(m.answers()[0].data().to_string(), "client=127.0.0.1 ecs=none");
        let m = tcp_ask(&mut stream, &query(12, "nope.edge.lagran.net.", RecordType::A, None)).await;
        assert_eq!(m.response_code(), hickory_proto::op::ResponseCode::NXDomain);

        // A message above the limit closes the connection; the server lives on.
        let mut big = TcpStream::connect(addr).await.unwrap();
        big.write_all(&[0xff, 0xff]).await.unwrap();
        let mut one = [0u8; 1];
        let closed = tokio::time::timeout(Duration::from_secs(5), big.read(&mut one)).await.unwrap();
        assert!(matches!(closed, Ok(0) | Err(_)));
        let m = tcp_ask(&mut stream, &query(13, "edge.lagran.net.", RecordType::A, None)).await;
        assert_eq!(m.id(), 13);

        let snap: std::collections::HashMap<_, _> = server.counters.snapshot().into_iter().collect();
        assert_eq!(snap["queries_udp"], 3);
        assert_eq!(snap["queries_tcp"], 4);
        assert_eq!(snap["dropped"], 1);
        assert_eq!(snap["nxdomain"], 1);
        assert_eq!(snap["oversized"], 1);

        shutdown.cancel();
        tokio::time::timeout(Duration::from_secs(5), running).await.unwrap().unwrap().unwrap();
    }

    /// Raises the soft open-file limit to at least `want` (up to the hard limit).
    fn raise_fd_limit(want: libc::rlim_t) {
        let mut lim = libc::rlimit { rlim_cur: 0, rlim_max: 0 };
        // SAFETY: getrlimit/setrlimit only read and write the struct passed.
        unsafe {
            assert_eq!(libc::getrlimit(libc::RLIMIT_NOFILE, &mut lim), 0);
            if lim.rlim_cur < want {
                lim.rlim_cur = want.min(lim.rlim_max);
                assert_eq!(libc::setrlimit(libc::RLIMIT_NOFILE, &lim), 0);
            }
        }
        assert!(lim.rlim_cur >= want, "this test needs {want} open files; the hard limit is {}", lim.rlim_max);
    }

    async fn start(
        settings: DnsSettings,
    ) -> (SocketAddr, Arc<DnsServer>, CancellationToken, tokio::task::JoinHandle<io::Result<()>>) {
        let (udp, tcp) = bind("127.0.0.1:0".parse().unwrap()).await.unwrap();
        let addr = udp.local_addr().unwrap();
        let server = Arc::new(tests_support::server_with(settings));
        let shutdown = CancellationToken::new();
        let running = tokio::spawn(server.clone().run(udp, tcp, shutdown.clone()));
        (addr, server, shutdown, running)
    }

    async fn connect_from(source: &str, to: SocketAddr) -> io::Result<TcpStream> {
        let s = tokio::net::TcpSocket::new_v4()?;
        s.bind(SocketAddr::new(source.parse().unwrap(), 0))?;
        s.connect(to).await
    }

    /// Reads until EOF or error; true when the peer closed within `within`.
    async fn closed_within(stream: &mut TcpStream, within: Duration) -> bool {
        let mut buf = [0u8; 512];
        let deadline = tokio::time::Instant::now() + within;
        loop {
            match tokio::time::timeout_at(deadline, stream.read(&mut buf)).await {
                Err(_) => return false,
                Ok(Ok(0) | Err(_)) => return true,
                Ok(Ok(_)) => {}
            }
        }
    }

    #[tokio::test]
    async fn one_host_with_600_idle_connections_does_not_keep_another_out() {
        raise_fd_limit(2048);
        let (addr, server, shutdown, running) = start(DnsSettings::default()).await;
        let per_client = DnsSettings::default().tcp_max_per_client;

        // 600 idle connections from 127.0.0.1: the kernel completes every
        // handshake; the server keeps `tcp_max_per_client` and closes the rest.
        let mut idle = Vec::with_capacity(600);
        for i in 0..600 {
            match tokio::time::timeout(Duration::from_secs(5), connect_from("127.0.0.1", addr)).await {
                Ok(Ok(s)) => idle.push(s),
                other => panic!("idle connection {i} from 127.0.0.1 could not be opened: {other:?}"),
            }
        }
        let counted = |c: &AtomicU64| c.load(Ordering::Relaxed);
        let deadline = std::time::Instant::now() + Duration::from_secs(10);
        while counted(&server.counters.tcp_rejected_per_client) < (600 - per_client) as u64 {
            assert!(
                std::time::Instant::now() < deadline,
                "the server did not refuse the connections over the per-client limit"
            );
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        assert_eq!(counted(&server.counters.tcp_rejected_per_client), (600 - per_client) as u64);
        assert_eq!(counted(&server.counters.tcp_rejected), 0, "the total limit was never reached");

        // Another host is answered at once, and so is a UDP client.
        let started = std::time::Instant::now();
        let mut other = tokio::time::timeout(Duration::from_secs(3), connect_from("127.0.0.2", addr))
            .await
            .expect("127.0.0.2 connects within 3 s")
            .unwrap();
        let m = tokio::time::timeout(
            Duration::from_secs(3),
            tcp_ask(&mut other, &query(7, "edge.lagran.net.", RecordType::A, None)),
        )
        .await
        .expect("127.0.0.2 is answered within 3 s while 127.0.0.1 holds 600 connections");
        assert_eq!((m.id(), first_a(&m)), (7, Ipv4Addr::new(203, 0, 113, 10)));
        assert!(started.elapsed() < Duration::from_secs(3));

        // The host holding the slots still gets its own `tcp_max_per_client` back once it lets go.
        drop(idle);
        let deadline = std::time::Instant::now() + Duration::from_secs(10);
        loop {
            let mut s = connect_from("127.0.0.1", addr).await.unwrap();
            let q = query(8, "edge.lagran.net.", RecordType::A, None);
            if let Ok(m) = tokio::time::timeout(Duration::from_millis(500), tcp_ask_checked(&mut s, &q)).await
                && let Some(m) = m
            {
                assert_eq!(m.id(), 8);
                break;
            }
            assert!(
                std::time::Instant::now() < deadline,
                "127.0.0.1 was not served again after closing its connections"
            );
            tokio::time::sleep(Duration::from_millis(100)).await;
        }

        shutdown.cancel();
        tokio::time::timeout(Duration::from_secs(10), running).await.unwrap().unwrap().unwrap();
    }

    /// [`tcp_ask`] that returns `None` instead of panicking when the connection is closed.
    async fn tcp_ask_checked(stream: &mut TcpStream, q: &[u8]) -> Option<Message> {
        let mut framed = (q.len() as u16).to_be_bytes().to_vec();
        framed.extend_from_slice(q);
        stream.write_all(&framed).await.ok()?;
        let mut len = [0u8; 2];
        stream.read_exact(&mut len).await.ok()?;
        let mut buf = vec![0u8; u16::from_be_bytes(len) as usize];
        stream.read_exact(&mut buf).await.ok()?;
        Message::from_vec(&buf).ok()
    }

    #[tokio::test]
    async fn trickled_bytes_do_not_extend_the_idle_timeout_and_queries_per_connection_are_bounded() {
        let settings = DnsSettings {
            tcp_idle_secs: 1,
            tcp_max_queries_per_connection: 3,
            tcp_max_per_client: 4,
            tcp_max_connections: 6,
            ..DnsSettings::default()
        };
        let (addr, server, shutdown, running) = start(settings).await;
        let counted = |c: &AtomicU64| c.load(Ordering::Relaxed);

        // One octet every 200 ms of a 30-octet query: the 1 s deadline for the
        // whole message passes long before it is complete.
        let mut slow = connect_from("127.0.0.1", addr).await.unwrap();
        let q = query(1, "edge.lagran.net.", RecordType::A, None);
        let mut framed = (q.len() as u16).to_be_bytes().to_vec();
        framed.extend_from_slice(&q);
        let started = std::time::Instant::now();
        let mut closed = false;
        for b in framed.iter().take(25) {
            if slow.write_all(&[*b]).await.is_err() {
                closed = true;
                break;
            }
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
        closed = closed || closed_within(&mut slow, Duration::from_secs(3)).await;
        assert!(closed, "a trickling client was not closed");
        assert!(started.elapsed() < Duration::from_secs(4), "closed after {:?}", started.elapsed());
        assert_eq!(counted(&server.counters.tcp_idle_closed), 1);

        // Three queries answered on one connection, then the server closes it.
        let mut c = connect_from("127.0.0.1", addr).await.unwrap();
        for id in 0..3 {
            let m = tcp_ask(&mut c, &query(id, "edge.lagran.net.", RecordType::A, None)).await;
            assert_eq!(m.id(), id);
        }
        assert!(closed_within(&mut c, Duration::from_secs(3)).await, "the connection outlived its query limit");
        assert_eq!(counted(&server.counters.tcp_query_limit_closed), 1);

        // The total limit: 4 from 127.0.0.1 and 2 from 127.0.0.3 fill it; the 7th,
        // from a fresh host, is closed at once and counted.
        let mut held = Vec::new();
        for src in ["127.0.0.1", "127.0.0.1", "127.0.0.1", "127.0.0.1", "127.0.0.3", "127.0.0.3"] {
            held.push(connect_from(src, addr).await.unwrap());
        }
        let mut fifth = connect_from("127.0.0.1", addr).await.unwrap();
        assert!(closed_within(&mut fifth, Duration::from_secs(3)).await, "a 5th connection from one client was kept");
        let mut seventh = connect_from("127.0.0.4", addr).await.unwrap();
        assert!(closed_within(&mut seventh, Duration::from_secs(3)).await, "a connection over the total was kept");
        assert_eq!(counted(&server.counters.tcp_rejected_per_client), 1);
        assert_eq!(counted(&server.counters.tcp_rejected), 1);
        drop(held);

        shutdown.cancel();
        tokio::time::timeout(Duration::from_secs(10), running).await.unwrap().unwrap().unwrap();
    }

    /// A query for `name` with a COOKIE option of `cookie` (client cookie, maybe a server cookie).
    fn cookie_query(id: u16, name: &str, cookie: &[u8]) -> Vec<u8> {
        let mut q = query(id, name, RecordType::A, None);
        q[11] = 1; // ARCOUNT
        q.extend_from_slice(&[0, 0, 41, 4, 208, 0, 0, 0, 0]);
        q.extend_from_slice(&((cookie.len() + 4) as u16).to_be_bytes());
        q.extend_from_slice(&[0, 10]);
        q.extend_from_slice(&(cookie.len() as u16).to_be_bytes());
        q.extend_from_slice(cookie);
        q
    }

    /// Sends `queries` as fast as the socket takes them, then collects replies
    /// for `wait`; returns the replies by ID.
    async fn flood(sock: &UdpSocket, to: SocketAddr, queries: &[Vec<u8>], wait: Duration) -> Vec<Message> {
        for q in queries {
            sock.send_to(q, to).await.unwrap();
        }
        let mut got = Vec::new();
        let mut buf = vec![0u8; 4096];
        while let Ok(Ok((n, _))) = tokio::time::timeout(wait, sock.recv_from(&mut buf)).await {
            got.push(Message::from_vec(&buf[..n]).unwrap());
        }
        got
    }

    #[tokio::test]
    async fn rate_limiting_spares_valid_cookies_and_slips_as_configured() {
        use crate::dns::rrl::RrlSettings;
        let (udp, tcp) = bind("127.0.0.1:0".parse().unwrap()).await.unwrap();
        let addr = udp.local_addr().unwrap();
        let rrl = RateLimiter::new(&RrlSettings { responses_per_second: 5, slip: 2, window_secs: 15 }).map(Arc::new);
        let server = Arc::new(
            tests_support::server_with(DnsSettings::default())
                .with_rrl(rrl.clone())
                .with_cookies(Arc::new(CookieJar::fixed([3; 16]))),
        );
        let shutdown = CancellationToken::new();
        let running = tokio::spawn(server.clone().run(udp, tcp, shutdown.clone()));
        let client = UdpSocket::bind("127.0.0.1:0").await.unwrap();

        // 40 NXDOMAIN queries without a cookie: 5 answered, of the 35 limited every 2nd slips (TC=1).
        let qs: Vec<_> = (0..40).map(|i| query(i, "nope.edge.lagran.net.", RecordType::A, None)).collect();
        let got = flood(&client, addr, &qs, Duration::from_millis(500)).await;
        let full = got.iter().filter(|m| !m.truncated()).count();
        let tc = got.iter().filter(|m| m.truncated()).count();
        assert!((5..=6).contains(&full), "{full} full responses (rate 5/s)");
        assert!((16..=18).contains(&tc), "{tc} slipped responses");
        assert!(got.iter().filter(|m| m.truncated()).all(|m| m.answers().is_empty() && m.name_servers().is_empty()));
        let (limited, slipped) = rrl.as_ref().unwrap().counts(ResponseClass::Nxdomain);
        assert_eq!((limited + slipped) as usize, 40 - full);

        // TCP is never limited.
        let mut stream = TcpStream::connect(addr).await.unwrap();
        let m = tcp_ask(&mut stream, &query(99, "nope.edge.lagran.net.", RecordType::A, None)).await;
        assert_eq!(m.response_code(), hickory_proto::op::ResponseCode::NXDomain);

        // A client cookie alone is limited too; its slipped responses are BADCOOKIE with a fresh cookie.
        let client_cookie = [9u8; 8];
        let qs: Vec<_> = (100..110).map(|i| cookie_query(i, "nope.edge.lagran.net.", &client_cookie)).collect();
        let got = flood(&client, addr, &qs, Duration::from_millis(500)).await;
        assert!(got.iter().all(|m| m.response_code() == hickory_proto::op::ResponseCode::BADCOOKIE), "{got:?}");
        assert!((4..=6).contains(&got.len()), "{} BADCOOKIE responses of 10", got.len());
        let cookie = match got[0].extensions().as_ref().unwrap().option(EdnsCode::Cookie) {
            Some(EdnsOption::Unknown(_, data)) => data.clone(),
            other => panic!("{other:?}"),
        };
        assert_eq!((cookie.len(), &cookie[..8]), (24, &client_cookie[..]));

        // With that server cookie, every one of 60 queries is answered.
        let qs: Vec<_> = (200..260).map(|i| cookie_query(i, "nope.edge.lagran.net.", &cookie)).collect();
        let got = flood(&client, addr, &qs, Duration::from_millis(1000)).await;
        assert_eq!(got.len(), 60, "queries with a valid server cookie are exempt");
        assert!(got.iter().all(|m| m.response_code() == hickory_proto::op::ResponseCode::NXDomain && !m.truncated()));

        shutdown.cancel();
        tokio::time::timeout(Duration::from_secs(5), running).await.unwrap().unwrap().unwrap();
    }

    #[tokio::test]
    async fn bind_with_a_fixed_port_uses_it_for_both() {
        let (udp, _tcp) = bind("127.0.0.1:0".parse().unwrap()).await.unwrap();
        let port = udp.local_addr().unwrap().port();
        drop(udp);
        drop(_tcp);
        let (udp, tcp) = bind(SocketAddr::from(([127, 0, 0, 1], port))).await.unwrap();
        assert_eq!(udp.local_addr().unwrap().port(), port);
        assert_eq!(tcp.local_addr().unwrap().port(), port);
    }
}
