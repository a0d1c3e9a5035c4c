//! Query logs in dnstap: every exchange of the userspace responders (UDP,
//! TCP, DoT, DoQ) as `AUTH_QUERY`/`AUTH_RESPONSE` messages sent over Frame
//! Streams to a reader on a Unix socket (`[dnstap] socket`); with
//! `[dnstap] xdp_sample = "1/N"`, every Nth answer of the XDP fast path too,
//! read from the program's ring buffer by `crate::xdp::tap`.
//!
//! - [`Tap`]: what a responder holds; [`Tap::log`] hands an [`Exchange`] to
//!   a bounded channel with `try_send` and never waits: when the channel is
//!   full (the reader is slow or gone) the exchange is dropped and counted in
//!   `lagran_dnstap_dropped_total{source="userspace"}` (`source="xdp"`: the
//!   fast path's samples, also those its ring buffer had no room for);
//! - [`writer`]: the task that owns the socket: it encodes ([`schema`]),
//!   frames ([`frame_streams`]), reconnects with backoff when the reader goes
//!   away, and ends the stream with STOP/FINISH at shutdown;
//! - [`settings`]: the `[dnstap]` table.

pub mod frame_streams;
pub mod schema;
pub mod settings;
pub mod writer;

use std::fmt::Write as _;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::SystemTime;

use std::sync::Arc;

use tokio::sync::mpsc;
use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;

pub use settings::{DNSTAP_KEYS, DnstapSettings, XdpSample};

/// Exchanges waiting for the writer; beyond this they are dropped.
pub const QUEUE: usize = 4096;

/// When `settings.socket` is set: the tap the responders log to, and its
/// [`writer`]'s task, which ends after `shutdown` once the stream is closed.
pub fn start(settings: &DnstapSettings, shutdown: CancellationToken) -> Option<(Arc<Tap>, JoinHandle<()>)> {
    let socket = settings.socket.clone()?;
    let (tap, rx) = Tap::new(QUEUE);
    let tap = Arc::new(tap);
    tracing::info!(socket = %socket.display(), "dnstap query logs on");
    let task = tokio::spawn(writer::run(tap.clone(), rx, socket, shutdown));
    Some((tap, task))
}

/// The transport of an exchange (dnstap's `SocketProtocol`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Protocol {
    Udp,
    Tcp,
    /// DNS over TLS (RFC 7858).
    Dot,
    /// DNS over QUIC (RFC 9250).
    Doq,
}

/// Who logged an exchange (the `source` label of the drop counter).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Source {
    Userspace,
    /// The XDP fast path's sampled answers (`[dnstap] xdp_sample`).
    Xdp,
}

impl Source {
    pub const ALL: [Source; 2] = [Source::Userspace, Source::Xdp];

    fn label(self) -> &'static str {
        match self {
            Source::Userspace => "userspace",
            Source::Xdp => "xdp",
        }
    }
}

/// One query and the response sent to it, if any.
#[derive(Clone, Debug, PartialEq)]
pub struct Exchange {
    pub protocol: Protocol,
    /// The client (the query's source).
    pub client: SocketAddr,
    /// The address the query was sent to, when the socket tells it.
    pub server: Option<SocketAddr>,
    pub query_time: SystemTime,
    /// The query, as received.
    pub query: Vec<u8>,
    /// When the response was sent, and its octets.
    pub response: Option<(SystemTime, Vec<u8>)>,
}

/// The responders' end of the query log.
#[derive(Debug)]
pub struct Tap {
    queue: mpsc::Sender<writer::Queued>,
    /// Exchanges dropped, by [`Source`]: the queue was full or the writer lost them.
    dropped: [AtomicU64; Source::ALL.len()],
    /// dnstap messages written to the reader.
    written: AtomicU64,
}

impl Tap {
    /// A tap and the receiving end its [`writer`] drains.
    pub fn new(capacity: usize) -> (Tap, mpsc::Receiver<writer::Queued>) {
        let (queue, rx) = mpsc::channel(capacity);
        (Tap { queue, dropped: Default::default(), written: AtomicU64::new(0) }, rx)
    }

    /// Queues `exchange` for the writer without waiting; a full queue drops
    /// it (counted).
    pub fn log(&self, source: Source, exchange: Exchange) {
        if self.queue.try_send((source, exchange)).is_err() {
            self.count_dropped(source, 1);
        }
    }

    pub fn count_dropped(&self, source: Source, n: u64) {
        self.dropped[source as usize].fetch_add(n, Ordering::Relaxed);
    }

    fn count_written(&self, n: u64) {
        self.written.fetch_add(n, Ordering::Relaxed);
    }

    pub fn dropped(&self, source: Source) -> u64 {
        self.dropped[source as usize].load(Ordering::Relaxed)
    }

    /// The `/metrics` lines.
    pub fn render_prometheus(&self, out: &mut String) {
        out.push_str(
            "# HELP lagran_dnstap_dropped_total Exchanges not logged to dnstap: the queue to the reader was full \
             (a slow or absent reader), the connection broke, or (source=\"xdp\") the XDP program's ring buffer \
             was full.\n\
             # TYPE lagran_dnstap_dropped_total counter\n",
        );
        for source in Source::ALL {
            let _ =
                writeln!(out, "lagran_dnstap_dropped_total{{source=\"{}\"}} {}", source.label(), self.dropped(source));
        }
        out.push_str(
            "# HELP lagran_dnstap_messages_total dnstap messages written to the reader.\n\
             # TYPE lagran_dnstap_messages_total counter\n",
        );
        let _ = writeln!(out, "lagran_dnstap_messages_total {}", self.written.load(Ordering::Relaxed));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn exchange() -> Exchange {
        Exchange {
            protocol: Protocol::Udp,
            client: "192.0.2.1:5000".parse().unwrap(),
            server: None,
            query_time: SystemTime::now(),
            query: vec![0; 12],
            response: None,
        }
    }

    #[test]
    fn a_full_queue_drops_and_counts_by_source_without_waiting() {
        let (tap, mut rx) = Tap::new(2);
        for _ in 0..4 {
            tap.log(Source::Userspace, exchange());
        }
        assert_eq!(tap.dropped(Source::Userspace), 2);
        assert!(rx.try_recv().is_ok() && rx.try_recv().is_ok() && rx.try_recv().is_err());
        let mut out = String::new();
        tap.render_prometheus(&mut out);
        assert!(out.contains("lagran_dnstap_dropped_total{source=\"userspace\"} 2\n"), "{out}");
        assert!(out.contains("lagran_dnstap_dropped_total{source=\"xdp\"} 0\n"), "{out}");
        assert!(out.contains("lagran_dnstap_messages_total 0\n"), "{out}");
    }
}
