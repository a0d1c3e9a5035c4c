//! A client connection whose RTT is recorded when it ends: [`Measured`] wraps the
//! accepted `TcpStream` (beneath TLS, for HTTPS), passes reads and writes through,
//! and on drop — while the socket is still open — reads the kernel's smoothed RTT
//! into the edge's [`RttTable`] under the client's /24 or /48. A connection that
//! lives longer than [`RESAMPLE_EVERY`] is also sampled as it goes, at the first
//! write after each such period, so a long download counts before it ends.

use std::io;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::{Duration, Instant};

use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::net::TcpStream;

use crate::client_subnet::ClientSubnet;
use crate::rtt::RttTable;

/// How often a long-lived connection adds a sample.
pub const RESAMPLE_EVERY: Duration = Duration::from_secs(30);

pub type SubnetRtts = RttTable<ClientSubnet>;

/// A `TcpStream` that reports its RTT to `table` (when there is one).
pub struct Measured {
    stream: TcpStream,
    subnet: ClientSubnet,
    table: Option<Arc<SubnetRtts>>,
    next_sample: Instant,
}

impl Measured {
    /// Wraps `stream` of a client at `subnet`; `table` `None` measures nothing.
    pub fn new(stream: TcpStream, subnet: ClientSubnet, table: Option<Arc<SubnetRtts>>) -> Measured {
        Measured { stream, subnet, table, next_sample: Instant::now() + RESAMPLE_EVERY }
    }

    fn sample(&self) {
        let Some(table) = &self.table else { return };
        #[cfg(unix)]
        {
            use std::os::fd::AsFd;
            match crate::tcp_info::smoothed_rtt(self.stream.as_fd()) {
                Ok(Some(rtt)) => table.record(&self.subnet, rtt),
                Ok(None) => {}
                Err(e) => tracing::debug!(subnet = %self.subnet, error = %e, "TCP_INFO unreadable"),
            }
        }
        #[cfg(not(unix))]
        let _ = table;
    }
}

impl Drop for Measured {
    fn drop(&mut self) {
        self.sample();
    }
}

impl AsyncRead for Measured {
    fn poll_read(mut self: Pin<&mut Self>, cx: &mut Context<'_>, buf: &mut ReadBuf<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.stream).poll_read(cx, buf)
    }
}

impl AsyncWrite for Measured {
    fn poll_write(mut self: Pin<&mut Self>, cx: &mut Context<'_>, buf: &[u8]) -> Poll<io::Result<usize>> {
        let polled = Pin::new(&mut self.stream).poll_write(cx, buf);
        self.after_write(&polled);
        polled
    }

    fn poll_write_vectored(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        let polled = Pin::new(&mut self.stream).poll_write_vectored(cx, bufs);
        self.after_write(&polled);
        polled
    }

    fn is_write_vectored(&self) -> bool {
        self.stream.is_write_vectored()
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.stream).poll_flush(cx)
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.stream).poll_shutdown(cx)
    }
}

impl Measured {
    /// Samples a long-lived connection once per [`RESAMPLE_EVERY`], after a write.
    fn after_write(&mut self, polled: &Poll<io::Result<usize>>) {
        if self.table.is_none() || !matches!(polled, Poll::Ready(Ok(_))) {
            return;
        }
        let now = Instant::now();
        if now >= self.next_sample {
            self.next_sample = now + RESAMPLE_EVERY;
            self.sample();
        }
    }
}

#[cfg(all(test, target_os = "linux"))]
mod tests {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    use tokio::net::TcpListener;

    use super::*;

    #[tokio::test]
    async fn a_finished_connection_leaves_one_sample_under_its_subnet() {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let mut client = TcpStream::connect(listener.local_addr().unwrap()).await.unwrap();
        let (server, peer) = listener.accept().await.unwrap();
        let table = Arc::new(SubnetRtts::new(8));
        let mut server = Measured::new(server, ClientSubnet::of(peer.ip()), Some(table.clone()));
        let mut buf = [0u8; 2];
        for _ in 0..3 {
            client.write_all(b"hi").await.unwrap();
            server.read_exact(&mut buf).await.unwrap();
            server.write_all(b"ok").await.unwrap();
            client.read_exact(&mut buf).await.unwrap();
        }
        assert!(table.is_empty(), "nothing recorded while the connection is young and open");
        drop(server);
        let got = table.drain(10);
        assert_eq!(got.len(), 1);
        assert_eq!(got[0].key.to_string(), "127.0.0.0/24");
        assert_eq!(got[0].samples, 1);
        assert!(got[0].median > Duration::ZERO && got[0].median < Duration::from_millis(100), "{:?}", got[0]);
    }
}
