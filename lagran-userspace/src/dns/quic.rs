//! DNS over QUIC (RFC 9250) on `--doq-listen`, with quinn.
//!
//! RFC 9250 §4.2: "a DoQ client MUST send [...] each query on a new
//! client-initiated bidirectional QUIC stream", "prefixed with a 2-octet
//! length field", and "MUST indicate through the STREAM FIN mechanism that no
//! further data will be sent on that stream". So each stream is read to its
//! FIN, answered with [`answer()`] ([`Transport::Doq`], padded, RFC 8467) and
//! finished.
//!
//! - a client's address is validated before its connection costs anything:
//!   an Initial without a Retry token is answered with a QUIC Retry (RFC 9000
//!   §8.1.2: "a server can request that the client perform address validation
//!   ... by sending a Retry packet"), so a flood of spoofed Initials gets
//!   stateless Retries and takes no slot; a second retry for the same attempt
//!   (a token not answered) is refused;
//! - a validated connection then takes a slot of the shared listener's caps
//!   ([`crate::listener::Slots`]) before its handshake: [`DOQ_MAX_CONNECTIONS`]
//!   handshaking or open in all, `tcp_max_per_client` from one client; past
//!   them it is refused (counted in `lagran_dns_tls_rejected_total`);
//!   [`DOQ_MAX_STREAMS`] concurrent query streams per connection (QUIC flow
//!   control holds back the rest), no unidirectional streams,
//!   [`DOQ_IDLE_TIMEOUT`] idle timeout;
//! - a handshake has [`HANDSHAKE_TIMEOUT`], a stream [`STREAM_TIMEOUT`] to
//!   deliver its query;
//! - a message with a wrong length prefix or a non-zero ID closes the
//!   connection with DOQ_PROTOCOL_ERROR (RFC 9250 §4.2, §4.2.1);
//! - the certificate is the shared, SIGHUP-reloaded [`Certificate`].
//!
//! [`answer()`]: super::answer()

use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::Duration;

use quinn::crypto::rustls::QuicServerConfig;
use quinn::{Connection, Endpoint, Incoming, RecvStream, SendStream, VarInt};
use tokio::task::JoinSet;
use tokio_util::sync::CancellationToken;

use super::answer::Transport;
use super::cert::{ALPN_DOQ, CertError, Certificate};
use super::server::{DnsServer, TCP_MAX_MESSAGE};
use crate::listener::{Permit, Slots};

/// Concurrent DoQ connections; more are refused.
pub const DOQ_MAX_CONNECTIONS: usize = 256;
/// Concurrent query streams per connection.
pub const DOQ_MAX_STREAMS: u32 = 64;
/// A connection without traffic for this long is closed.
pub const DOQ_IDLE_TIMEOUT: Duration = Duration::from_secs(30);
/// A QUIC handshake taking longer than this is abandoned.
pub const HANDSHAKE_TIMEOUT: Duration = Duration::from_secs(5);
/// A stream must deliver its whole query within this.
pub const STREAM_TIMEOUT: Duration = Duration::from_secs(10);

/// RFC 9250 §4.3: "DOQ_NO_ERROR (0x0): No error."
const DOQ_NO_ERROR: u32 = 0x0;
/// RFC 9250 §4.3: "DOQ_PROTOCOL_ERROR (0x2): The DoQ implementation
/// encountered a protocol error and is forcibly aborting the connection."
const DOQ_PROTOCOL_ERROR: u32 = 0x2;
/// RFC 9250 §4.3: "DOQ_REQUEST_CANCELLED (0x3): A DoQ client uses this to
/// signal that it wants to cancel an outstanding transaction." Used for
/// streams whose query gets no response (dropped).
const DOQ_REQUEST_CANCELLED: u32 = 0x3;

/// A QUIC server endpoint on `socket` offering ALPN `doq` with `cert`.
pub fn endpoint(cert: &Arc<Certificate>, socket: std::net::UdpSocket) -> Result<Endpoint, DoqError> {
    let tls = cert.server_config(ALPN_DOQ)?;
    let crypto = QuicServerConfig::try_from(tls).map_err(|e| DoqError::Crypto(e.to_string()))?;
    let mut transport = quinn::TransportConfig::default();
    transport.max_concurrent_bidi_streams(VarInt::from_u32(DOQ_MAX_STREAMS));
    // RFC 9250 §4.2: queries travel on bidirectional streams only.
    transport.max_concurrent_uni_streams(VarInt::from_u32(0));
    transport.max_idle_timeout(Some(DOQ_IDLE_TIMEOUT.try_into().map_err(|_| DoqError::Crypto("idle timeout".into()))?));
    let mut server = quinn::ServerConfig::with_crypto(Arc::new(crypto));
    server.transport_config(Arc::new(transport));
    Endpoint::new(quinn::EndpointConfig::default(), Some(server), socket, Arc::new(quinn::TokioRuntime))
        .map_err(DoqError::Io)
}

/// Why the DoQ endpoint could not be made.
#[derive(Debug, thiserror::Error)]
pub enum DoqError {
    #[error(transparent)]
    Cert(#[from] CertError),
    #[error("QUIC TLS configuration: {0}")]
    Crypto(String),
    #[error("QUIC endpoint: {0}")]
    Io(std::io::Error),
}

/// Serves DoQ on `endpoint` until `shutdown` is cancelled.
pub async fn run(dns: Arc<DnsServer>, endpoint: Endpoint, shutdown: CancellationToken) {
    if let Ok(addr) = endpoint.local_addr() {
        tracing::info!(addr = %addr, "dns over quic listening");
    }
    let slots = Slots::new(&dns.stream_limits(DOQ_MAX_CONNECTIONS));
    // For the query log: the address a client reached is this port on the
    // connection's local address.
    let port = endpoint.local_addr().ok().map(|a| a.port());
    let mut conns = JoinSet::new();
    loop {
        let incoming = tokio::select! {
            _ = shutdown.cancelled() => break,
            i = endpoint.accept() => match i {
                Some(i) => i,
                None => break,
            },
        };
        while conns.try_join_next().is_some() {}
        let Some(permit) = admit(&dns, &slots, incoming) else { continue };
        conns.spawn(connection(dns.clone(), permit, port, shutdown.clone()));
    }
    endpoint.close(VarInt::from_u32(DOQ_NO_ERROR), b"shutting down");
    while conns.join_next().await.is_some() {}
}

/// A connection attempt with a validated address and its slot.
struct Admitted {
    incoming: Incoming,
    _permit: Permit,
}

/// Retries an attempt whose address is not validated yet; gives a validated
/// one its slot, or refuses it when the caps are reached.
fn admit(dns: &DnsServer, slots: &Slots, incoming: Incoming) -> Option<Admitted> {
    if !incoming.remote_address_validated() {
        if incoming.may_retry() {
            // Stateless: quinn answers with a Retry and forgets the attempt.
            let _ = incoming.retry();
        } else {
            incoming.refuse();
        }
        return None;
    }
    match slots.claim(incoming.remote_address().ip()) {
        Ok(permit) => Some(Admitted { incoming, _permit: permit }),
        Err(why) => {
            dns.counters.tls_rejected.fetch_add(1, Ordering::Relaxed);
            tracing::debug!(peer = %incoming.remote_address(), ?why, "dns over quic connection refused");
            incoming.refuse();
            None
        }
    }
}

async fn connection(dns: Arc<DnsServer>, admitted: Admitted, port: Option<u16>, shutdown: CancellationToken) {
    let Admitted { incoming, _permit } = admitted;
    let peer = incoming.remote_address();
    let handshake = tokio::select! {
        _ = shutdown.cancelled() => return,
        r = tokio::time::timeout(HANDSHAKE_TIMEOUT, incoming) => r,
    };
    let conn = match handshake {
        Ok(Ok(c)) => c,
        Ok(Err(e)) => {
            dns.counters.tls_handshake_failed.fetch_add(1, Ordering::Relaxed);
            tracing::debug!(peer = %peer, error = %e, "dns over quic handshake failed");
            return;
        }
        Err(_) => {
            dns.counters.tls_handshake_failed.fetch_add(1, Ordering::Relaxed);
            tracing::debug!(peer = %peer, "dns over quic handshake timed out");
            return;
        }
    };
    let local = conn.local_ip().zip(port).map(|(ip, port)| SocketAddr::new(ip, port));
    let mut streams = JoinSet::new();
    loop {
        let accepted = tokio::select! {
            _ = shutdown.cancelled() => {
                conn.close(VarInt::from_u32(DOQ_NO_ERROR), b"shutting down");
                break;
            }
            s = conn.accept_bi() => s,
        };
        // Closed by the peer, idle timeout or a protocol error below.
        let Ok((send, recv)) = accepted else { break };
        while streams.try_join_next().is_some() {}
        streams.spawn(query_stream(dns.clone(), conn.clone(), (peer, local), send, recv));
    }
    streams.abort_all();
    while streams.join_next().await.is_some() {}
}

async fn query_stream(
    dns: Arc<DnsServer>,
    conn: Connection,
    (peer, local): (SocketAddr, Option<SocketAddr>),
    mut send: SendStream,
    mut recv: RecvStream,
) {
    let read = tokio::time::timeout(STREAM_TIMEOUT, recv.read_to_end(2 + TCP_MAX_MESSAGE)).await;
    let Ok(Ok(framed)) = read else {
        // Too long, too slow or reset: nothing to answer.
        let _ = send.reset(VarInt::from_u32(DOQ_REQUEST_CANCELLED));
        return;
    };
    // RFC 9250 §4.2: "every message MUST be prefixed with a 2-octet length field";
    // one message per stream, so the prefix must count exactly the rest.
    let declared = framed.get(..2).map(|l| u16::from_be_bytes([l[0], l[1]]) as usize);
    if declared != Some(framed.len().saturating_sub(2)) {
        dns.counters.malformed.fetch_add(1, Ordering::Relaxed);
        conn.close(VarInt::from_u32(DOQ_PROTOCOL_ERROR), b"bad length prefix");
        return;
    }
    let msg = &framed[2..];
    // RFC 9250 §4.2.1: "When sending queries over a QUIC connection, the DNS
    // Message ID MUST be set to 0." [...] "If a DoQ client or server receives a
    // message with a non-zero Message ID, it MUST treat this as a connection
    // error of type DOQ_PROTOCOL_ERROR."
    if msg.len() >= 2 && msg[..2] != [0, 0] {
        dns.counters.malformed.fetch_add(1, Ordering::Relaxed);
        conn.close(VarInt::from_u32(DOQ_PROTOCOL_ERROR), b"message id must be 0");
        return;
    }
    let started = dns.tap_start();
    let reply = dns.handle(msg, peer.ip(), Transport::Doq);
    if let Some(at) = started {
        dns.tap(Transport::Doq, (peer, local), at, msg, reply.bytes.as_deref());
    }
    let Some(bytes) = reply.bytes else {
        let _ = send.reset(VarInt::from_u32(DOQ_REQUEST_CANCELLED));
        return;
    };
    let Ok(len) = u16::try_from(bytes.len()) else { return };
    let mut out = Vec::with_capacity(bytes.len() + 2);
    out.extend_from_slice(&len.to_be_bytes());
    out.extend_from_slice(&bytes);
    // RFC 9250 §4.2: the server "MUST indicate through the STREAM FIN
    // mechanism that no further data will be sent on that stream".
    if send.write_all(&out).await.is_ok() {
        let _ = send.finish();
        // Keep the stream until the client has the response (or gives up).
        let _ = tokio::time::timeout(STREAM_TIMEOUT, send.stopped()).await;
    }
}

#[cfg(test)]
mod tests {
    use std::net::Ipv4Addr;

    use hickory_proto::op::Message;
    use hickory_proto::rr::RData;
    use hickory_proto::rr::rdata::opt::{EdnsCode, EdnsOption};
    use rustls::pki_types::{CertificateDer, pem::PemObject};

    use super::*;
    use crate::dns::cert::write_self_signed;
    use crate::dns::server::tests_support::{self, server};

    /// [`tests_support::query`], framed as on a DoQ stream (RFC 9250 §4.2).
    fn query(id: u16, ecs: Option<(&str, u8)>) -> Vec<u8> {
        let q = tests_support::query(id, ecs);
        let mut framed = (q.len() as u16).to_be_bytes().to_vec();
        framed.extend_from_slice(&q);
        framed
    }

    async fn ask(conn: &Connection, framed: &[u8]) -> Result<Vec<u8>, String> {
        let (mut send, mut recv) = conn.open_bi().await.map_err(|e| e.to_string())?;
        send.write_all(framed).await.map_err(|e| e.to_string())?;
        send.finish().map_err(|e| e.to_string())?;
        recv.read_to_end(70_000).await.map_err(|e| e.to_string())
    }

    /// A QUIC client trusting the certificate at `cert_path`, offering ALPN `doq`.
    fn client_endpoint(cert_path: &std::path::Path) -> Endpoint {
        let mut roots = rustls::RootCertStore::empty();
        roots.add(CertificateDer::from_pem_file(cert_path).unwrap()).unwrap();
        let mut tls = rustls::ClientConfig::builder_with_provider(Arc::new(rustls::crypto::ring::default_provider()))
            .with_protocol_versions(&[&rustls::version::TLS13])
            .unwrap()
            .with_root_certificates(roots)
            .with_no_client_auth();
        tls.alpn_protocols = vec![ALPN_DOQ.to_vec()];
        let crypto = quinn::crypto::rustls::QuicClientConfig::try_from(tls).unwrap();
        let mut client = Endpoint::client("127.0.0.1:0".parse().unwrap()).unwrap();
        client.set_default_client_config(quinn::ClientConfig::new(Arc::new(crypto)));
        client
    }

    /// Addresses are validated with a Retry first (quinn's client follows it),
    /// and one client gets `tcp_max_per_client` connections, no more; closing
    /// one frees its slot.
    #[tokio::test]
    async fn a_client_gets_its_share_of_connections_after_a_retry() {
        let dir = tempfile::tempdir().unwrap();
        let (cert_path, key_path) = write_self_signed(dir.path(), &["dns.test"]);
        let cert = Certificate::load(&cert_path, &key_path).unwrap();
        let ep = endpoint(&cert, std::net::UdpSocket::bind("127.0.0.1:0").unwrap()).unwrap();
        let addr = ep.local_addr().unwrap();
        let settings = crate::dns::settings::DnsSettings { tcp_max_per_client: 2, ..Default::default() };
        let dns = Arc::new(tests_support::server_with(settings));
        let shutdown = CancellationToken::new();
        let running = tokio::spawn(run(dns.clone(), ep, shutdown.clone()));
        let client = client_endpoint(&cert_path);
        let connect = || async { client.connect(addr, "dns.test").unwrap().await };
        let first = connect().await.expect("the first connection");
        let second = connect().await.expect("the second connection");
        ask(&second, &query(0, None)).await.expect("an answer on a validated connection");
        connect().await.expect_err("the third from the same client is refused");
        let snap: std::collections::HashMap<_, _> = dns.counters.snapshot().into_iter().collect();
        assert_eq!(snap["tls_rejected"], 1, "the refusal is counted");
        first.close(VarInt::from_u32(0), b"done");
        let deadline = tokio::time::Instant::now() + Duration::from_secs(5);
        let third = loop {
            match connect().await {
                Ok(c) => break c,
                Err(e) => assert!(tokio::time::Instant::now() < deadline, "the slot was not freed: {e}"),
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        };
        ask(&third, &query(0, None)).await.expect("an answer once a slot is free");
        shutdown.cancel();
        tokio::time::timeout(Duration::from_secs(5), running).await.unwrap().unwrap();
    }

    #[tokio::test]
    async fn answers_one_query_per_stream_and_closes_on_a_nonzero_id() {
        let dir = tempfile::tempdir().unwrap();
        let (cert_path, key_path) = write_self_signed(dir.path(), &["dns.test"]);
        let cert = Certificate::load(&cert_path, &key_path).unwrap();
        let socket = std::net::UdpSocket::bind("127.0.0.1:0").unwrap();
        let ep = endpoint(&cert, socket).unwrap();
        let addr = ep.local_addr().unwrap();
        let dns = server();
        let shutdown = CancellationToken::new();
        let running = tokio::spawn(run(dns.clone(), ep, shutdown.clone()));

        let client = client_endpoint(&cert_path);
        let conn = client.connect(addr, "dns.test").unwrap().await.unwrap();

        for (ecs, want, scope) in [(None, 10u8, None), (Some(("10.1.2.0", 24)), 1, Some(16u8))] {
            let framed = ask(&conn, &query(0, ecs)).await.unwrap();
            let len = u16::from_be_bytes([framed[0], framed[1]]) as usize;
            assert_eq!(len, framed.len() - 2, "the response carries its 2-octet length");
            assert_eq!(len % 468, 0, "RFC 8467: padded to a multiple of 468 octets");
            let m = Message::from_vec(&framed[2..]).unwrap();
            assert_eq!(m.id(), 0);
            match m.answers()[0].data() {
                RData::A(a) => assert_eq!(a.0, Ipv4Addr::new(203, 0, 113, want), "the same answer as UDP"),
                other => panic!("{other:?}"),
            }
            if let Some(scope) = scope {
                let opts = m.extensions().as_ref().expect("OPT echoed");
                let Some(EdnsOption::Subnet(cs)) = opts.option(EdnsCode::Subnet) else { panic!("no ECS echoed") };
                assert_eq!(cs.scope_prefix(), scope);
            }
        }
        let snap: std::collections::HashMap<_, _> = dns.counters.snapshot().into_iter().collect();
        assert_eq!(snap["queries_doq"], 2);

        // RFC 9250 §4.2.1: a non-zero ID is a connection error.
        let _ = ask(&conn, &query(7, None)).await;
        let reason = tokio::time::timeout(Duration::from_secs(5), conn.closed()).await.unwrap();
        assert!(reason.to_string().contains("message id"), "closed with DOQ_PROTOCOL_ERROR: {reason}");

        shutdown.cancel();
        tokio::time::timeout(Duration::from_secs(5), running).await.unwrap().unwrap();
        client.wait_idle().await;
    }
}
