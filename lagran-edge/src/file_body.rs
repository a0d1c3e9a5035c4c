//! A response body read from a range of a file, a chunk at a time on tokio's
//! blocking pool: an object of any size is sent with one chunk in memory.

use std::future::Future;
use std::io;
use std::os::unix::fs::FileExt;
use std::pin::Pin;
use std::task::{Context, Poll, ready};

use bytes::Bytes;
use http_body_util::BodyExt;
use hyper::body::{Body, Frame, SizeHint};
use tokio::task::JoinHandle;

use crate::body::{BoxError, EdgeBody};
use crate::cache::FileRange;

/// Bytes read per chunk.
const CHUNK: u64 = 256 * 1024;

pub fn file_range(range: FileRange) -> EdgeBody {
    FileBody { pos: range.offset, end: range.offset + range.len, range, reading: None }.boxed()
}

struct FileBody {
    range: FileRange,
    pos: u64,
    end: u64,
    reading: Option<JoinHandle<io::Result<Bytes>>>,
}

fn read_chunk(range: &FileRange, pos: u64, len: u64) -> JoinHandle<io::Result<Bytes>> {
    let file = range.file.clone();
    tokio::task::spawn_blocking(move || {
        let mut buf = vec![0; len as usize];
        let n = file.read_at(&mut buf, pos)?;
        if n == 0 {
            return Err(io::Error::new(io::ErrorKind::UnexpectedEof, "the cache file is shorter than its object"));
        }
        buf.truncate(n);
        Ok(Bytes::from(buf))
    })
}

impl Body for FileBody {
    type Data = Bytes;
    type Error = BoxError;

    fn poll_frame(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Result<Frame<Bytes>, BoxError>>> {
        let this = self.get_mut();
        if this.pos >= this.end {
            return Poll::Ready(None);
        }
        let (pos, len) = (this.pos, CHUNK.min(this.end - this.pos));
        let reading = this.reading.get_or_insert_with(|| read_chunk(&this.range, pos, len));
        let read = ready!(Pin::new(reading).poll(cx));
        this.reading = None;
        match read {
            Ok(Ok(chunk)) => {
                this.pos += chunk.len() as u64;
                Poll::Ready(Some(Ok(Frame::data(chunk))))
            }
            Ok(Err(e)) => Poll::Ready(Some(Err(e.into()))),
            Err(join) => Poll::Ready(Some(Err(join.into()))),
        }
    }

    fn is_end_stream(&self) -> bool {
        self.pos >= self.end
    }

    fn size_hint(&self) -> SizeHint {
        SizeHint::with_exact(self.end.saturating_sub(self.pos))
    }
}
