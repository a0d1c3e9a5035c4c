//! A connection with bytes already read from it put back in front: what
//! hyper serves once the hit path ([`super::h1_hits`]) hands a connection
//! over. Written here because hyper-util keeps its own (`Rewind`) private.

use std::io::{self, IoSlice};
use std::pin::Pin;
use std::task::{Context, Poll};

use bytes::{Buf, BytesMut};
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};

/// `inner`, read after `prefix`.
pub struct Prefixed<I> {
    prefix: BytesMut,
    inner: I,
}

impl<I> Prefixed<I> {
    pub fn new(prefix: BytesMut, inner: I) -> Prefixed<I> {
        Prefixed { prefix, inner }
    }
}

impl<I: AsyncRead + Unpin> AsyncRead for Prefixed<I> {
    fn poll_read(self: Pin<&mut Self>, cx: &mut Context<'_>, buf: &mut ReadBuf<'_>) -> Poll<io::Result<()>> {
        let this = self.get_mut();
        if this.prefix.is_empty() {
            return Pin::new(&mut this.inner).poll_read(cx, buf);
        }
        let n = this.prefix.len().min(buf.remaining());
        buf.put_slice(&this.prefix[..n]);
        this.prefix.advance(n);
        if this.prefix.is_empty() {
            // Its buffer is not kept for the connection's life.
            this.prefix = BytesMut::new();
        }
        Poll::Ready(Ok(()))
    }
}

impl<I: AsyncWrite + Unpin> AsyncWrite for Prefixed<I> {
    fn poll_write(self: Pin<&mut Self>, cx: &mut Context<'_>, buf: &[u8]) -> Poll<io::Result<usize>> {
        Pin::new(&mut self.get_mut().inner).poll_write(cx, buf)
    }

    fn poll_write_vectored(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        Pin::new(&mut self.get_mut().inner).poll_write_vectored(cx, bufs)
    }

    fn is_write_vectored(&self) -> bool {
        self.inner.is_write_vectored()
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.get_mut().inner).poll_flush(cx)
    }

    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.get_mut().inner).poll_shutdown(cx)
    }
}

#[cfg(test)]
mod tests {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};

    use super::*;

    #[tokio::test]
    async fn the_prefix_is_read_first_then_the_connection_and_writes_pass_through() {
        let (near, mut far) = tokio::io::duplex(64);
        let mut io = Prefixed::new(BytesMut::from(&b"GET / HTTP/1.1\r\n"[..]), near);
        far.write_all(b"Host: a\r\n\r\n").await.unwrap();
        let mut got = vec![0; 27];
        io.read_exact(&mut got).await.unwrap();
        assert_eq!(got, b"GET / HTTP/1.1\r\nHost: a\r\n\r\n");
        io.write_all(b"ok").await.unwrap();
        let mut back = [0; 2];
        far.read_exact(&mut back).await.unwrap();
        assert_eq!(&back, b"ok");
    }
}
