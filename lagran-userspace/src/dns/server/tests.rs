//! The responder's listeners end to end on loopback: UDP and TCP on one port, the
//! per-client TCP cap, idle timeouts, queries per connection, RRL with cookies.

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
        let (n, _) = tokio::time::timeout(Duration::from_secs(5), client.recv_from(&mut buf)).await.unwrap().unwrap();
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
        assert!(std::time::Instant::now() < deadline, "127.0.0.1 was not served again after closing its connections");
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
