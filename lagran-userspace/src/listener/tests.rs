use std::sync::atomic::{AtomicUsize, Ordering};

use tokio::io::{AsyncReadExt, AsyncWriteExt};

use super::*;

/// Echoes one line per connection after holding it open until the client closes;
/// counts what it sees.
#[derive(Default)]
struct Recorder {
    served: AtomicUsize,
    full: AtomicUsize,
    client_full: AtomicUsize,
}

impl ConnectionHandler for Recorder {
    async fn serve(self: Arc<Self>, mut stream: TcpStream, _: SocketAddr, permit: Permit, shutdown: CancellationToken) {
        let _permit = permit;
        self.served.fetch_add(1, Ordering::SeqCst);
        let _ = stream.write_all(b"hello\n").await;
        let mut buf = [0u8; 16];
        tokio::select! {
            _ = stream.read(&mut buf) => {}
            () = shutdown.cancelled() => {}
        }
    }

    fn refuse(
        self: Arc<Self>,
        stream: TcpStream,
        _: SocketAddr,
        why: Refusal,
    ) -> impl Future<Output = ()> + Send + 'static {
        match why {
            Refusal::Full => self.full.fetch_add(1, Ordering::SeqCst),
            Refusal::ClientFull => self.client_full.fetch_add(1, Ordering::SeqCst),
        };
        async move { drop(stream) }
    }

    fn accept_failed(&self, _: &io::Error) {}
}

const LIMITS: Limits = Limits {
    max_connections: 3,
    max_per_client: 2,
    header_timeout: Duration::from_secs(1),
    idle_timeout: Duration::from_secs(1),
};

async fn start(limits: Limits) -> (SocketAddr, Arc<Recorder>, CancellationToken, tokio::task::JoinHandle<()>) {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let recorder = Arc::new(Recorder::default());
    let shutdown = CancellationToken::new();
    let task = tokio::spawn(serve(listener, limits, shutdown.clone(), recorder.clone()));
    (addr, recorder, shutdown, task)
}

/// Connects from `source` (any 127.0.0.0/8 address) and reads the greeting:
/// `true` when admitted, `false` when closed at once.
async fn admitted(source: &str, to: SocketAddr) -> (bool, TcpStream) {
    let socket = tokio::net::TcpSocket::new_v4().unwrap();
    socket.bind(format!("{source}:0").parse().unwrap()).unwrap();
    let mut stream = socket.connect(to).await.unwrap();
    let mut buf = [0u8; 6];
    let read = tokio::time::timeout(Duration::from_secs(5), stream.read_exact(&mut buf)).await;
    (matches!(read, Ok(Ok(_))), stream)
}

#[tokio::test]
async fn the_per_client_and_total_caps_hold_and_slots_come_back() {
    let (addr, rec, shutdown, task) = start(LIMITS).await;
    let (a1, s1) = admitted("127.0.0.1", addr).await;
    let (a2, s2) = admitted("127.0.0.1", addr).await;
    let (a3, _s3) = admitted("127.0.0.1", addr).await;
    assert!(a1 && a2 && !a3, "a client gets max_per_client connections");
    assert_eq!(rec.client_full.load(Ordering::SeqCst), 1);
    let (b1, _t1) = admitted("127.0.0.2", addr).await;
    assert!(b1, "another client is not kept out by the first");
    let (b2, _t2) = admitted("127.0.0.2", addr).await;
    assert!(!b2, "max_connections in all");
    assert_eq!(rec.full.load(Ordering::SeqCst), 1);
    // Closing a connection frees both its slots.
    drop((s1, s2));
    let mut back = false;
    for _ in 0..50 {
        tokio::time::sleep(Duration::from_millis(20)).await;
        let (a, _s) = admitted("127.0.0.1", addr).await;
        if a {
            back = true;
            break;
        }
    }
    assert!(back, "the slots are freed when the connection ends");
    shutdown.cancel();
    tokio::time::timeout(Duration::from_secs(5), task).await.unwrap().unwrap();
}

#[test]
fn clients_are_ipv4_addresses_and_ipv6_slash_64s() {
    let key = |s: &str| ClientKey::of(s.parse().unwrap());
    assert_eq!(key("2001:db8:1:2::1"), key("2001:db8:1:2:ffff::9"));
    assert_ne!(key("2001:db8:1:2::1"), key("2001:db8:1:3::1"));
    assert_eq!(key("::ffff:192.0.2.1"), key("192.0.2.1"));
    assert_ne!(key("192.0.2.1"), key("192.0.2.2"));
}

#[test]
fn the_accept_backoff_doubles_to_a_second_and_resets() {
    let mut b = Backoff::default();
    let waits: Vec<_> = (0..9).map(|_| b.next()).collect();
    assert_eq!(waits[0], Duration::from_millis(10));
    assert_eq!(waits[1], Duration::from_millis(20));
    assert_eq!(waits[8], Duration::from_secs(1));
    b.reset();
    assert_eq!(b.next(), Duration::from_millis(10));
}

#[test]
fn a_permit_frees_its_slots_on_drop() {
    let slots = Slots::new(&Limits { max_connections: 1, max_per_client: 1, ..LIMITS });
    let ip: IpAddr = "192.0.2.1".parse().unwrap();
    let p = slots.claim(ip).unwrap();
    assert_eq!(slots.claim(ip).err(), Some(Refusal::ClientFull));
    assert_eq!(slots.claim("192.0.2.2".parse().unwrap()).err(), Some(Refusal::Full));
    drop(p);
    assert!(slots.claim(ip).is_ok());
}
