//! UDP and TCP listeners on the same port, both answering with [`answer()`].
//!
//! - UDP: [`UDP_WORKERS`] tasks share the socket (`recv_from` → answer →
//!   `send_to`); datagrams larger than [`UDP_BUFFER`] are ignored.
//! - TCP (RFC 7766): one task per connection, 2-octet length framing, several
//!   queries per connection answered in order, [`TCP_IDLE_TIMEOUT`] idle
//!   timeout, at most [`TCP_MAX_CONNECTIONS`] connections (more are closed at
//!   once), messages above [`TCP_MAX_MESSAGE`] close the connection.
//!
//! Socket errors are logged, counted and survived; only the shutdown token
//! ends [`DnsServer::run`].

use std::io;
use std::net::{IpAddr, SocketAddr};
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::Duration;

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream, UdpSocket};
use tokio::sync::{OwnedSemaphorePermit, Semaphore};
use tokio::task::JoinSet;
use tokio_util::sync::CancellationToken;

use super::answer::{Query, Reply, Transport, answer_confirmed};
use super::counters::DnsCounters;
use crate::config::DnsSettings;
use crate::confirmation::Confirmation;
use crate::route_table::SharedRouteTable;

/// Largest UDP query accepted (bigger datagrams are ignored).
pub const UDP_BUFFER: usize = 4096;
/// Tasks sharing the UDP socket.
pub const UDP_WORKERS: usize = 4;
/// A TCP connection with no complete query for this long is closed.
pub const TCP_IDLE_TIMEOUT: Duration = Duration::from_secs(10);
/// Concurrent TCP connections; more are accepted and closed at once.
pub const TCP_MAX_CONNECTIONS: usize = 256;
/// Largest TCP query accepted; a longer one closes the connection.
pub const TCP_MAX_MESSAGE: usize = 16 * 1024;
/// Pause after an accept/receive error, so a persistent error cannot spin a core.
const ERROR_BACKOFF: Duration = Duration::from_millis(10);
/// At most one "serving stale answers" warning per this many milliseconds.
const STALE_WARN_EVERY_MS: i64 = 60_000;

/// The userspace responder.
pub struct DnsServer {
    pub table: SharedRouteTable,
    pub settings: Arc<DnsSettings>,
    pub counters: Arc<DnsCounters>,
    /// When the control plane last confirmed the table (SPEC §7 staleness).
    pub confirmation: Arc<Confirmation>,
}

impl DnsServer {
    pub fn new(
        table: SharedRouteTable,
        settings: Arc<DnsSettings>,
        counters: Arc<DnsCounters>,
        confirmation: Arc<Confirmation>,
    ) -> Self {
        DnsServer { table, settings, counters, confirmation }
    }

    /// Answers one message against the current table, counts and logs it.
    pub fn handle(&self, bytes: &[u8], source: IpAddr, transport: Transport) -> Reply {
        let table = self.table.load();
        let now = crate::clock::now_ms();
        let confirmed_at = self.confirmation.last_ms();
        let query = Query { bytes, source: source.to_canonical(), transport };
        let reply = answer_confirmed(&query, &table, &self.settings, now, confirmed_at);
        self.counters.record(transport, &reply);
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
        let udp = Arc::new(udp);
        if let (Ok(u), Ok(t)) = (udp.local_addr(), tcp.local_addr()) {
            tracing::info!(udp = %u, tcp = %t, "dns responder listening");
        }
        let mut tasks = JoinSet::new();
        for _ in 0..UDP_WORKERS {
            tasks.spawn(self.clone().udp_worker(udp.clone(), shutdown.clone()));
        }
        tasks.spawn(self.clone().tcp_accept(tcp, shutdown.clone()));
        while let Some(res) = tasks.join_next().await {
            if let Err(e) = res {
                tracing::error!(error = %e, "dns listener task ended abnormally");
            }
        }
        Ok(())
    }

    async fn udp_worker(self: Arc<Self>, sock: Arc<UdpSocket>, shutdown: CancellationToken) {
        // One octet more than accepted, to tell an oversized datagram from a full one.
        let mut buf = vec![0u8; UDP_BUFFER + 1];
        loop {
            let received = tokio::select! {
                _ = shutdown.cancelled() => return,
                r = sock.recv_from(&mut buf) => r,
            };
            let (n, peer) = match received {
                Ok(v) => v,
                Err(e) => {
                    // e.g. ECONNREFUSED from an ICMP port unreachable of an earlier send.
                    self.counters.io_errors.fetch_add(1, Ordering::Relaxed);
                    tracing::debug!(error = %e, "dns udp receive error");
                    tokio::time::sleep(ERROR_BACKOFF).await;
                    continue;
                }
            };
            if n > UDP_BUFFER {
                self.counters.oversized.fetch_add(1, Ordering::Relaxed);
                continue;
            }
            let reply = self.handle(&buf[..n], peer.ip(), Transport::Udp);
            if let Some(bytes) = reply.bytes
                && let Err(e) = sock.send_to(&bytes, peer).await
            {
                self.counters.io_errors.fetch_add(1, Ordering::Relaxed);
                tracing::debug!(error = %e, peer = %peer, "dns udp send error");
            }
        }
    }

    async fn tcp_accept(self: Arc<Self>, listener: TcpListener, shutdown: CancellationToken) {
        let slots = Arc::new(Semaphore::new(TCP_MAX_CONNECTIONS));
        let mut conns = JoinSet::new();
        loop {
            let accepted = tokio::select! {
                _ = shutdown.cancelled() => break,
                r = listener.accept() => r,
            };
            while conns.try_join_next().is_some() {}
            let (stream, peer) = match accepted {
                Ok(v) => v,
                Err(e) => {
                    // EMFILE and friends: keep serving.
                    self.counters.io_errors.fetch_add(1, Ordering::Relaxed);
                    tracing::warn!(error = %e, "dns tcp accept error");
                    tokio::time::sleep(ERROR_BACKOFF).await;
                    continue;
                }
            };
            let Ok(permit) = slots.clone().try_acquire_owned() else {
                self.counters.tcp_rejected.fetch_add(1, Ordering::Relaxed);
                drop(stream);
                continue;
            };
            conns.spawn(self.clone().tcp_connection(stream, peer, shutdown.clone(), permit));
        }
        // Connections watch the same token; wait for them to wind down.
        while conns.join_next().await.is_some() {}
    }

    async fn tcp_connection(
        self: Arc<Self>,
        mut stream: TcpStream,
        peer: SocketAddr,
        shutdown: CancellationToken,
        _permit: OwnedSemaphorePermit,
    ) {
        let _ = stream.set_nodelay(true);
        let mut msg = Vec::new();
        loop {
            let mut len = [0u8; 2];
            let read = tokio::select! {
                _ = shutdown.cancelled() => return,
                r = tokio::time::timeout(TCP_IDLE_TIMEOUT, stream.read_exact(&mut len)) => r,
            };
            if !matches!(read, Ok(Ok(_))) {
                return; // idle timeout, EOF or error
            }
            let n = u16::from_be_bytes(len) as usize;
            if n > TCP_MAX_MESSAGE {
                self.counters.oversized.fetch_add(1, Ordering::Relaxed);
                tracing::debug!(peer = %peer, len = n, "dns tcp message too large, closing");
                return;
            }
            msg.clear();
            msg.resize(n, 0);
            let read = tokio::select! {
                _ = shutdown.cancelled() => return,
                r = tokio::time::timeout(TCP_IDLE_TIMEOUT, stream.read_exact(&mut msg)) => r,
            };
            if !matches!(read, Ok(Ok(_))) {
                return;
            }
            let reply = self.handle(&msg, peer.ip(), Transport::Tcp);
            let Some(bytes) = reply.bytes else { continue };
            let Ok(out_len) = u16::try_from(bytes.len()) else { continue };
            let mut out = Vec::with_capacity(bytes.len() + 2);
            out.extend_from_slice(&out_len.to_be_bytes());
            out.extend_from_slice(&bytes);
            let written = tokio::select! {
                _ = shutdown.cancelled() => return,
                r = tokio::time::timeout(TCP_IDLE_TIMEOUT, stream.write_all(&out)) => r,
            };
            if !matches!(written, Ok(Ok(()))) {
                return;
            }
        }
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

#[cfg(test)]
mod tests {
    use std::net::Ipv4Addr;

    use hickory_proto::op::{Edns, Message, MessageType, OpCode, Query as HQuery};
    use hickory_proto::rr::rdata::opt::{ClientSubnet, EdnsCode, EdnsOption};
    use hickory_proto::rr::{Name, RData, RecordType};

    use super::*;
    use crate::model::{NsHost, Zone};
    use crate::prefix_map::{PrefixMapV4, PrefixMapV6};
    use crate::route_table::{Answer, RouteTable, ScheduledName, ZoneRoutes};

    fn table() -> RouteTable {
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
            answers: vec![answer(10, "default-01"), answer(1, "gz-01")],
            // 10.1.0.0/16 -> gz-01, everything else (127.0.0.1 included) -> default-01
            v4: PrefixMapV4::from_ranges([(0x0a01_0000, 0x0a01_ffff, 1)], 0),
            v6: PrefixMapV6::uniform(0),
        };
        RouteTable::new(1, crate::clock::now_ms(), vec![ZoneRoutes { zone, names: vec![apex] }])
    }

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
        let shared = crate::route_table::empty_shared();
        shared.store(Arc::new(table()));
        let confirmed = Arc::new(Confirmation::new());
        confirmed.confirm(crate::clock::now_ms());
        let server =
            Arc::new(DnsServer::new(shared, Arc::new(DnsSettings::default()), Arc::new(DnsCounters::new()), confirmed));
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
