//! DNS over TLS (RFC 7858) on `--dot-listen`.
//!
//! RFC 7858 §3.3: "The messages [...] MUST use the two-octet length field
//! defined in Section 4.2.2 of [RFC1035]" — so after the handshake a DoT
//! connection is the TCP listener's connection ([`DnsServer`]'s
//! `stream_connection`): several queries per connection answered in order,
//! the same idle timeout and message limit, the same [`answer()`] (with
//! [`Transport::Dot`], which pads responses, RFC 8467).
//!
//! - at most [`DOT_MAX_CONNECTIONS`] connections, and `tcp_max_per_client`
//!   from one client, kept by the shared listener ([`crate::listener`]); more
//!   are closed at once and counted (`lagran_dns_tls_rejected_total`);
//! - a handshake has [`HANDSHAKE_TIMEOUT`]; failures are counted
//!   (`lagran_dns_tls_handshake_failed_total`);
//! - the certificate is the shared, SIGHUP-reloaded [`Certificate`].
//!
//! [`answer()`]: super::answer()
//! [`Certificate`]: super::cert::Certificate

use std::future::Future;
use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::Duration;

use tokio::net::{TcpListener, TcpStream};
use tokio_rustls::TlsAcceptor;
use tokio_util::sync::CancellationToken;

use super::answer::Transport;
use super::server::DnsServer;
use crate::listener::{self, ConnectionHandler, Permit, Refusal};

/// Concurrent DoT connections; more are accepted and closed at once.
pub const DOT_MAX_CONNECTIONS: usize = 256;
/// A TLS handshake taking longer than this is abandoned.
pub const HANDSHAKE_TIMEOUT: Duration = Duration::from_secs(5);

/// Serves DoT on `listener` until `shutdown` is cancelled.
pub async fn run(dns: Arc<DnsServer>, listener: TcpListener, acceptor: TlsAcceptor, shutdown: CancellationToken) {
    if let Ok(addr) = listener.local_addr() {
        tracing::info!(addr = %addr, "dns over tls listening");
    }
    let limits = dns.stream_limits(DOT_MAX_CONNECTIONS);
    listener::serve(listener, limits, shutdown, Arc::new(DotConnections { dns, acceptor })).await;
}

/// DoT connections on the shared listener: a TLS handshake, then the TCP
/// listener's connection.
struct DotConnections {
    dns: Arc<DnsServer>,
    acceptor: TlsAcceptor,
}

impl ConnectionHandler for DotConnections {
    async fn serve(self: Arc<Self>, stream: TcpStream, peer: SocketAddr, permit: Permit, shutdown: CancellationToken) {
        let _ = stream.set_nodelay(true);
        let local = stream.local_addr().ok();
        let handshake = tokio::select! {
            _ = shutdown.cancelled() => return,
            r = tokio::time::timeout(HANDSHAKE_TIMEOUT, self.acceptor.accept(stream)) => r,
        };
        let failed = |reason: &dyn std::fmt::Display| {
            self.dns.counters.tls_handshake_failed.fetch_add(1, Ordering::Relaxed);
            tracing::debug!(peer = %peer, reason = %reason, "dns over tls handshake failed");
        };
        match handshake {
            Ok(Ok(tls)) => {
                self.dns.clone().stream_connection(tls, (peer, local), Transport::Dot, shutdown, permit).await
            }
            Ok(Err(e)) => failed(&e),
            Err(_) => failed(&"timed out"),
        }
    }

    /// The same caps as plain TCP (RFC 7766 §6.2.2), one counter for both.
    fn refuse(
        self: Arc<Self>,
        stream: TcpStream,
        _peer: SocketAddr,
        _why: Refusal,
    ) -> impl Future<Output = ()> + Send + 'static {
        self.dns.counters.tls_rejected.fetch_add(1, Ordering::Relaxed);
        async move { drop(stream) }
    }

    fn accept_failed(&self, error: &std::io::Error) {
        self.dns.counters.io_errors.fetch_add(1, Ordering::Relaxed);
        tracing::warn!(%error, "dns over tls accept error");
    }
}

#[cfg(test)]
mod tests {
    use std::net::Ipv4Addr;

    use hickory_proto::op::Message;
    use hickory_proto::rr::RData;
    use hickory_proto::rr::rdata::opt::{EdnsCode, EdnsOption};
    use rustls::pki_types::{CertificateDer, ServerName, pem::PemObject};
    use tokio::io::{AsyncReadExt, AsyncWriteExt};

    use super::*;
    use crate::dns::cert::{ALPN_DOT, Certificate, write_self_signed};
    use crate::dns::server::tests_support::{query, server};

    #[tokio::test]
    async fn answers_over_tls_padded_like_tcp() {
        let dir = tempfile::tempdir().unwrap();
        let (cert_path, key_path) = write_self_signed(dir.path(), &["dns.test"]);
        let cert = Certificate::load(&cert_path, &key_path).unwrap();
        let acceptor = TlsAcceptor::from(Arc::new(cert.server_config(ALPN_DOT).unwrap()));
        let dns = server();
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let shutdown = CancellationToken::new();
        let running = tokio::spawn(run(dns.clone(), listener, acceptor, shutdown.clone()));

        let mut roots = rustls::RootCertStore::empty();
        roots.add(CertificateDer::from_pem_file(&cert_path).unwrap()).unwrap();
        let mut client =
            rustls::ClientConfig::builder_with_provider(Arc::new(rustls::crypto::ring::default_provider()))
                .with_safe_default_protocol_versions()
                .unwrap()
                .with_root_certificates(roots)
                .with_no_client_auth();
        client.alpn_protocols = vec![ALPN_DOT.to_vec()];
        let connector = tokio_rustls::TlsConnector::from(Arc::new(client));
        let tcp = TcpStream::connect(addr).await.unwrap();
        let mut tls = connector.connect(ServerName::try_from("dns.test").unwrap(), tcp).await.unwrap();

        for (id, ecs, want, scope) in [(1u16, None, 10u8, None), (2, Some(("10.1.2.0", 24)), 1, Some(16u8))] {
            let q = query(id, ecs);
            let mut framed = (q.len() as u16).to_be_bytes().to_vec();
            framed.extend_from_slice(&q);
            tls.write_all(&framed).await.unwrap();
            let mut len = [0u8; 2];
            tls.read_exact(&mut len).await.unwrap();
            let mut buf = vec![0u8; u16::from_be_bytes(len) as usize];
            tls.read_exact(&mut buf).await.unwrap();
            assert_eq!(buf.len() % 468, 0, "RFC 8467: the response is padded to a multiple of 468 octets");
            let m = Message::from_vec(&buf).unwrap();
            assert_eq!(m.id(), id);
            match m.answers()[0].data() {
                RData::A(a) => assert_eq!(a.0, Ipv4Addr::new(203, 0, 113, want), "the same answer as UDP"),
                other => panic!("{other:?}"),
            }
            let opts = m.extensions().as_ref().expect("OPT echoed");
            assert!(opts.option(EdnsCode::Padding).is_some(), "a Padding option is present");
            if let Some(scope) = scope {
                let Some(EdnsOption::Subnet(cs)) = opts.option(EdnsCode::Subnet) else { panic!("no ECS echoed") };
                assert_eq!(cs.scope_prefix(), scope, "ECS honoured with the partition's scope");
            }
        }
        let snap: std::collections::HashMap<_, _> = dns.counters.snapshot().into_iter().collect();
        assert_eq!(snap["queries_dot"], 2);

        // A client that never finishes its handshake does not hold up the others.
        let _idle = TcpStream::connect(addr).await.unwrap();
        shutdown.cancel();
        tokio::time::timeout(Duration::from_secs(5), running).await.unwrap().unwrap();
    }
}
