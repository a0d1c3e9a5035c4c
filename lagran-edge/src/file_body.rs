//! Response bodies read from files, a chunk at a time on tokio's blocking
//! pool: a range of a stored object's file, sent with one chunk in memory
//! whatever its size, and the file of an object being written
//! ([`growing`]), read as far as it is written, then waited on for more.

use std::fs::File;
use std::future::Future;
use std::io;
use std::os::unix::fs::FileExt;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll, ready};

use bytes::Bytes;
use http_body_util::BodyExt;
use hyper::body::{Body, Frame, SizeHint};
use tokio::sync::mpsc;
use tokio::task::JoinHandle;

use crate::body::{self, BoxError, EdgeBody};
use crate::cache::{FileRange, Filling, Progress, Stage};

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

fn read_chunk(file: &Arc<File>, pos: u64, len: u64) -> JoinHandle<io::Result<Bytes>> {
    let file = file.clone();
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
        let reading = this.reading.get_or_insert_with(|| read_chunk(&this.range.file, pos, len));
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

/// Bytes read per chunk of a file being written: less than [`CHUNK`], as
/// each request reading it holds its own chunks.
const GROWING_CHUNK: u64 = 64 * 1024;

/// Chunks read ahead of their client, per request reading a file being written.
const READ_AHEAD: usize = 2;

/// Why a body read from a file being written ended early.
#[derive(Debug, thiserror::Error)]
pub enum GrowingError {
    #[error("the object's fetch failed while it was being read")]
    FillFailed,
}

/// The body of `filling`, from its start: what is written, then what is
/// written next, until the fill is done. A fill that fails ends it with an
/// error, so its client sees a response cut short, never a complete wrong one.
pub fn growing(filling: Arc<Filling>) -> EdgeBody {
    let (tx, rx) = mpsc::channel(READ_AHEAD);
    tokio::spawn(follow(filling, tx));
    body::channel(rx)
}

async fn follow(filling: Arc<Filling>, to_client: mpsc::Sender<Result<Bytes, BoxError>>) {
    let _reader = filling.reader();
    let mut progress = filling.watch();
    let mut pos = 0;
    loop {
        let Progress { written, stage } = *progress.borrow_and_update();
        if pos < written {
            let len = GROWING_CHUNK.min(written - pos);
            let chunk = match read_chunk(&filling.file, filling.body_offset + pos, len).await {
                Ok(Ok(chunk)) => chunk,
                Ok(Err(e)) => return fail(&to_client, e.into()).await,
                Err(join) => return fail(&to_client, join.into()).await,
            };
            pos += chunk.len() as u64;
            if to_client.send(Ok(chunk)).await.is_err() {
                return;
            }
            continue;
        }
        match stage {
            Stage::Done => return,
            Stage::Failed => return fail(&to_client, GrowingError::FillFailed.into()).await,
            Stage::Writing => {
                tokio::select! {
                    changed = progress.changed() => {
                        // The writer always publishes its last stage before it
                        // goes; a writer gone without one failed all the same.
                        if changed.is_err() && progress.borrow().stage == Stage::Writing {
                            return fail(&to_client, GrowingError::FillFailed.into()).await;
                        }
                    }
                    () = to_client.closed() => return,
                }
            }
        }
    }
}

/// Ends the body with `error`.
async fn fail(to_client: &mpsc::Sender<Result<Bytes, BoxError>>, error: BoxError) {
    let _ = to_client.send(Err(error)).await;
}
