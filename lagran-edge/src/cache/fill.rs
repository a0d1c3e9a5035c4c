//! A large object written to the disk tier as it streams to its client.
//!
//! Objects over `cache_max_object_bytes` are not read whole: their chunks go
//! to the client and, through a small bounded channel, to a file
//! `<hash>.fill.tmp` written on tokio's blocking pool. The file is renamed
//! into place only when the origin's body ended (with the length announced,
//! when one was); it is removed when the origin fails, the fill is abandoned
//! ([`crate::tee`]), a write fails, or the disk budget cannot take more.
//!
//! Its bytes are reserved against `cache_disk_max_bytes` while it is written,
//! so files being written never take the tier past its budget: all of them
//! from the start when the origin announced the length, else in steps of
//! [`GROW_STEP`] as the bytes arrive, the reservation giving way to the real
//! size at the end. One file per key is written at a time.
//!
//! Requests that miss the object while its file is written read it as it
//! grows ([`Filling`]): the file is created, with the object's head, and
//! made known to the tier when the fill begins, and the writer publishes
//! how far it got after each write.
//!
//! Like every fetch, a fill took a [`Ticket`] before it read the cache: a purge
//! that began since keeps the finished file out.

use std::fs::{self, File};
use std::io;
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};
use std::sync::{Arc, RwLock};

use bytes::Bytes;
use tokio::sync::mpsc;
use tracing::debug;

use super::disk::DiskTier;
use super::filling::{Filling, Publisher};
use super::{CachedObject, Ticket};

/// What the streaming side sends the writer.
pub enum Chunk {
    Data(Bytes),
    /// The origin's body ended; without it, a closed channel means it failed.
    End,
}

/// Bytes reserved at a time for a body of unknown length.
pub const GROW_STEP: u64 = 1 << 20;

/// A reserved place in the disk tier for one object being streamed. The
/// reservation is given back by [`DiskFill::write`], whatever becomes of the
/// file, so every fill begun is to be written (its channel may be closed at
/// once: the file is then removed).
pub struct DiskFill {
    disk: Arc<DiskTier>,
    key: String,
    tmp: PathBuf,
    file: Arc<File>,
    /// Where the body starts in the file.
    head_len: u64,
    /// The body's length, when the origin announced it.
    body_len: Option<u64>,
    /// Bytes reserved in the tier so far.
    reserved: u64,
    tags: Vec<String>,
    purges: Arc<RwLock<u64>>,
    ticket: Ticket,
    filling: Arc<Filling>,
    publisher: Publisher,
}

#[derive(Debug, thiserror::Error)]
enum FillError {
    #[error("the origin's body failed or the fill was abandoned")]
    Abandoned,
    #[error("the body has {got} bytes, not the {announced} announced")]
    Length { got: u64, announced: u64 },
    #[error("the disk budget cannot take more than {0} bytes for it")]
    Budget(u64),
    #[error(transparent)]
    Io(#[from] io::Error),
}

impl DiskFill {
    /// Reserves room for `head` (the object without its body) under `key`,
    /// with a body of `body_len` bytes (`None`: not known), and creates its
    /// file with the head written (a small write, on the caller's thread);
    /// `None` when it does not fit, the object is being written already or
    /// the file cannot be created.
    pub(super) fn begin(
        disk: &Arc<DiskTier>,
        key: String,
        head: &CachedObject,
        body_len: Option<u64>,
        purges: (Arc<RwLock<u64>>, Ticket),
    ) -> Option<DiskFill> {
        let bytes = super::disk::head(&key, head);
        let head_len = bytes.len() as u64;
        let reserved = head_len + body_len.unwrap_or(GROW_STEP);
        if !disk.reserve(&key, reserved) {
            return None;
        }
        let tmp = disk.fill_path(&key);
        let file = match create(&tmp, &bytes) {
            Ok(file) => Arc::new(file),
            Err(e) => {
                debug!(key, error = %e, "large object not kept on disk");
                let _ = fs::remove_file(&tmp);
                disk.release(&key, reserved);
                return None;
            }
        };
        let (filling, publisher) = Filling::new(head.clone(), file.clone(), head_len, body_len);
        disk.register(&key, filling.clone());
        let (purges, ticket) = purges;
        let tags = super::tags(&head.headers);
        Some(DiskFill {
            disk: disk.clone(),
            key,
            tmp,
            file,
            head_len,
            body_len,
            reserved,
            tags,
            purges,
            ticket,
            filling,
            publisher,
        })
    }

    /// The fill as its readers see it.
    pub fn filling(&self) -> Arc<Filling> {
        self.filling.clone()
    }

    /// Writes the chunks received until [`Chunk::End`] and commits the file,
    /// or removes it. Blocks: call it on the blocking pool.
    pub fn write(mut self, chunks: &mut mpsc::Receiver<Chunk>) {
        match self.write_body(chunks) {
            Ok(got) => self.commit(got),
            Err(e) => {
                debug!(key = self.key, error = %e, "large object not kept on disk");
                let _ = fs::remove_file(&self.tmp);
                self.disk.release(&self.key, self.reserved);
                // Dropping the publisher tells the readers the fill failed.
            }
        }
    }

    /// Writes the body; returns its length.
    fn write_body(&mut self, chunks: &mut mpsc::Receiver<Chunk>) -> Result<u64, FillError> {
        let mut got = 0u64;
        loop {
            match chunks.blocking_recv() {
                Some(Chunk::Data(data)) => {
                    let next = got + data.len() as u64;
                    if let Some(announced) = self.body_len
                        && next > announced
                    {
                        return Err(FillError::Length { got: next, announced });
                    }
                    let needed = self.head_len + next;
                    if needed > self.reserved {
                        let more = (needed - self.reserved).max(GROW_STEP);
                        if !self.disk.grow(more) {
                            return Err(FillError::Budget(self.reserved));
                        }
                        self.reserved += more;
                    }
                    self.file.write_all_at(&data, self.head_len + got)?;
                    got = next;
                    self.publisher.wrote(got);
                }
                Some(Chunk::End) => {
                    return match self.body_len {
                        Some(announced) if announced != got => Err(FillError::Length { got, announced }),
                        _ => Ok(got),
                    };
                }
                None => return Err(FillError::Abandoned),
            }
        }
    }

    /// Renames the file of a body of `got` bytes into place and counts it in
    /// the tier with its real size, unless a purge began since the ticket.
    fn commit(self, got: u64) {
        let DiskFill { disk, key, tmp, head_len, reserved, tags, purges, ticket, publisher, .. } = self;
        let size = head_len + got;
        let (tier, name) = (disk.clone(), key.clone());
        let then = Box::new(move |renamed: bool| {
            let purges = purges.read().unwrap_or_else(|e| e.into_inner());
            if renamed && *purges == ticket.0 {
                disk.settle(&key, reserved, size, tags);
            } else {
                disk.release(&key, reserved);
                if renamed {
                    debug!(key, "a purge began during the fill: its file is removed");
                    let _ = fs::remove_file(disk.path(&key));
                }
            }
            drop(purges);
            // Every byte is in the file, kept or not.
            publisher.done();
        });
        tier.commit(&name, tmp, then);
    }
}

/// The file `tmp`, open for writing and reading, holding `head`.
fn create(tmp: &Path, head: &[u8]) -> io::Result<File> {
    let file = fs::OpenOptions::new().read(true).write(true).create(true).truncate(true).open(tmp)?;
    file.write_all_at(head, 0)?;
    Ok(file)
}
