//! A large object written to the disk tier as it streams to its client.
//!
//! Objects over `cache_max_object_bytes` (and with a `Content-Length`) are not
//! read whole: their chunks go to the client and, through a small bounded
//! channel, to a file `<hash>.fill.tmp` written on tokio's blocking pool. The
//! file is renamed into place only when the origin's body ended and its length
//! is the one announced; it is removed when the origin fails, the client goes
//! away, or a write fails. Its bytes are reserved against `cache_disk_max_bytes`
//! from the start, so files being written never take the tier past its budget.
//! One file per key is written at a time.
//!
//! Like every fetch, a fill took a [`Ticket`] before it read the cache: a purge
//! that began since keeps the finished file out.

use std::fs;
use std::io::{self, Write};
use std::path::Path;
use std::sync::{Arc, RwLock};

use bytes::Bytes;
use tokio::sync::mpsc;
use tracing::debug;

use super::disk::DiskTier;
use super::{CachedObject, Ticket};

/// What the streaming side sends the writer.
pub enum Chunk {
    Data(Bytes),
    /// The origin's body ended; without it, a closed channel means it failed.
    End,
}

/// A reserved place in the disk tier for one object being streamed. The
/// reservation is given back by [`DiskFill::write`], whatever becomes of the
/// file, so every fill begun is to be written (its channel may be closed at
/// once: the file is then removed).
pub struct DiskFill {
    disk: Arc<DiskTier>,
    key: String,
    head: Vec<u8>,
    body_len: u64,
    tags: Vec<String>,
    purges: Arc<RwLock<u64>>,
    ticket: Ticket,
}

#[derive(Debug, thiserror::Error)]
enum FillError {
    #[error("the origin's body failed or its client went away")]
    Abandoned,
    #[error("the body has {got} bytes, not the {announced} announced")]
    Length { got: u64, announced: u64 },
    #[error(transparent)]
    Io(#[from] io::Error),
}

impl DiskFill {
    /// Reserves room for `head` (the object without its body) under `key`,
    /// with a body of `body_len` bytes; `None` when it does not fit or the
    /// object is being written already.
    pub(super) fn begin(
        disk: &Arc<DiskTier>,
        key: String,
        head: &CachedObject,
        body_len: u64,
        purges: (Arc<RwLock<u64>>, Ticket),
    ) -> Option<DiskFill> {
        let bytes = super::disk::head(&key, head);
        if !disk.reserve(&key, bytes.len() as u64 + body_len) {
            return None;
        }
        let (purges, ticket) = purges;
        let tags = super::tags(&head.headers);
        Some(DiskFill { disk: disk.clone(), key, head: bytes, body_len, tags, purges, ticket })
    }

    fn size(&self) -> u64 {
        self.head.len() as u64 + self.body_len
    }

    /// Writes the chunks received until [`Chunk::End`] and commits the file,
    /// or removes it. Blocks: call it on the blocking pool.
    pub fn write(self, chunks: &mut mpsc::Receiver<Chunk>) {
        let tmp = self.disk.fill_path(&self.key);
        match write_file(&tmp, &self.head, self.body_len, chunks) {
            Ok(()) => self.commit(tmp),
            Err(e) => {
                debug!(key = self.key, error = %e, "large object not kept on disk");
                let _ = fs::remove_file(&tmp);
                self.disk.release(&self.key, self.size());
            }
        }
    }

    fn commit(self, tmp: std::path::PathBuf) {
        let disk = self.disk.clone();
        let key = self.key.clone();
        let then = Box::new(move |renamed: bool| {
            let size = self.size();
            let purges = self.purges.read().unwrap_or_else(|e| e.into_inner());
            self.disk.release(&self.key, size);
            if renamed && *purges == self.ticket.0 {
                self.disk.admit(&self.key, size, self.tags);
            } else if renamed {
                debug!(key = self.key, "a purge began during the fill: its file is removed");
                let _ = fs::remove_file(self.disk.path(&self.key));
            }
        });
        disk.commit(&key, tmp, then);
    }
}

fn write_file(tmp: &Path, head: &[u8], body_len: u64, chunks: &mut mpsc::Receiver<Chunk>) -> Result<(), FillError> {
    let mut file = fs::File::create(tmp)?;
    file.write_all(head)?;
    let mut got = 0u64;
    loop {
        match chunks.blocking_recv() {
            Some(Chunk::Data(data)) => {
                got += data.len() as u64;
                if got > body_len {
                    return Err(FillError::Length { got, announced: body_len });
                }
                file.write_all(&data)?;
            }
            Some(Chunk::End) if got == body_len => return Ok(()),
            Some(Chunk::End) => return Err(FillError::Length { got, announced: body_len }),
            None => return Err(FillError::Abandoned),
        }
    }
}
