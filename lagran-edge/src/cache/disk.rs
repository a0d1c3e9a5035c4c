//! The disk tier: one file per object under `cache_dir`, bounded by bytes, least
//! recently used out first, found again after a restart.
//!
//! A file is `LGC1`, the length of a JSON record (key, headers, times), the record,
//! then the body; its name is the SHA-256 of the key. Files are written to a
//! temporary name and renamed, so a crash leaves whole files or none. Writes and
//! deletions go, in order, to one writer thread through a bounded queue: the
//! request path never waits for the disk to store, and when the queue is full
//! the object is simply not written. Reads run on tokio's blocking pool.
//!
//! Objects over `cache_max_object_bytes` are written as they stream to their
//! client ([`super::fill`]): their bytes are reserved against the budget while
//! the file is written, and they are read back as a file range, never whole.
//!
//! Written by hand rather than with `foyer`: purging by prefix and by tag needs
//! the keys of every stored object, and foyer's hybrid cache offers no way to
//! list them; the index here is a map of keys in memory, rebuilt at start by
//! reading each file's record.

use std::collections::{BTreeMap, HashMap, HashSet};
use std::fs;
use std::io::{self, Read, Write};
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, MutexGuard, mpsc};
use std::time::{Duration, SystemTime};

use bytes::Bytes;
use hyper::header::{HeaderMap, HeaderName, HeaderValue};
use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};
use tracing::{debug, warn};

use super::CachedObject;
use super::filling::Filling;
use super::payload::{FileRange, Payload};
use crate::freshness::Freshness;

const MAGIC: &[u8; 4] = b"LGC1";
/// Objects queued for the writer thread at most.
const WRITE_QUEUE: usize = 1024;

/// Everything of an object but its body, as stored on disk.
#[derive(Debug, Serialize, Deserialize)]
struct Record {
    key: String,
    primary: String,
    vary: Vec<String>,
    headers: Vec<(String, Vec<u8>)>,
    response_time_ms: u64,
    initial_age_ms: u64,
    lifetime_ms: u64,
    stale_while_revalidate_ms: u64,
    stale_if_error_ms: u64,
}

fn ms(d: Duration) -> u64 {
    d.as_millis() as u64
}

impl Record {
    fn of(key: &str, o: &CachedObject) -> Record {
        Record {
            key: key.to_owned(),
            primary: o.primary.clone(),
            vary: o.vary.iter().map(|n| n.as_str().to_owned()).collect(),
            headers: o.headers.iter().map(|(k, v)| (k.as_str().to_owned(), v.as_bytes().to_vec())).collect(),
            response_time_ms: ms(o.response_time.duration_since(SystemTime::UNIX_EPOCH).unwrap_or_default()),
            initial_age_ms: ms(o.initial_age),
            lifetime_ms: ms(o.freshness.lifetime),
            stale_while_revalidate_ms: ms(o.freshness.stale_while_revalidate),
            stale_if_error_ms: ms(o.freshness.stale_if_error),
        }
    }

    fn into_object(self, body: Payload) -> Option<CachedObject> {
        let mut headers = HeaderMap::with_capacity(self.headers.len() + super::ANSWER_HEADERS);
        for (k, v) in self.headers {
            headers.append(HeaderName::from_bytes(k.as_bytes()).ok()?, HeaderValue::from_bytes(&v).ok()?);
        }
        let vary = self.vary.iter().map(|n| HeaderName::from_bytes(n.as_bytes()).ok()).collect::<Option<_>>()?;
        Some(CachedObject {
            headers,
            body,
            response_time: SystemTime::UNIX_EPOCH + Duration::from_millis(self.response_time_ms),
            initial_age: Duration::from_millis(self.initial_age_ms),
            freshness: Freshness {
                lifetime: Duration::from_millis(self.lifetime_ms),
                stale_while_revalidate: Duration::from_millis(self.stale_while_revalidate_ms),
                stale_if_error: Duration::from_millis(self.stale_if_error_ms),
            },
            primary: self.primary,
            vary,
        })
    }
}

/// What [`Op::Commit`] calls once the file is renamed into place (`true`) or
/// could not be (`false`).
pub type Committed = Box<dyn FnOnce(bool) + Send>;

enum Op {
    /// `bytes`, then `tail` copied from another file.
    Write {
        path: PathBuf,
        bytes: Vec<u8>,
        tail: Option<FileRange>,
    },
    Delete(PathBuf),
    /// Renames a file written elsewhere into place, in order with the deletes.
    Commit {
        tmp: PathBuf,
        path: PathBuf,
        then: Committed,
    },
    Flush(tokio::sync::oneshot::Sender<()>),
}

#[derive(Debug, Default)]
struct Index {
    entries: HashMap<String, Entry>,
    lru: BTreeMap<u64, String>,
    tick: u64,
    bytes: u64,
    /// Bytes promised to files being written ([`DiskTier::reserve`]).
    reserved: u64,
    /// Keys whose file is being written.
    filling: HashSet<String>,
    /// Those of them readable while they are written.
    fills: HashMap<String, Arc<Filling>>,
}

#[derive(Debug)]
struct Entry {
    tick: u64,
    size: u64,
    /// The origin's surrogate keys for the object, for purges by tag.
    tags: Vec<String>,
}

#[derive(Debug)]
pub struct DiskTier {
    dir: PathBuf,
    max_bytes: u64,
    /// Bodies up to this size are read into memory; larger ones are served
    /// from the file.
    inline_max: u64,
    index: Mutex<Index>,
    ops: mpsc::SyncSender<Op>,
}

/// A stored object's key and the request headers its variants depend on, for
/// rebuilding the Vary table at start.
pub type Found = (String, Vec<HeaderName>);

/// What [`DiskTier::open`] found besides the objects.
pub struct Opened {
    pub varies: Vec<Found>,
    /// When the oldest stored object arrived (ms since the epoch), if any.
    pub oldest_ms: Option<u64>,
}

impl DiskTier {
    /// Opens `dir` (created if missing), indexes the objects already there and
    /// returns the Vary lists found and when the oldest of them arrived.
    pub fn open(dir: &Path, max_bytes: u64, inline_max: u64) -> io::Result<(DiskTier, Opened)> {
        fs::create_dir_all(dir)?;
        let mut found = Vec::new();
        for entry in fs::read_dir(dir)? {
            let path = entry?.path();
            let name = path.file_name().and_then(|n| n.to_str()).unwrap_or("");
            if name.ends_with(".tmp") {
                let _ = fs::remove_file(&path);
                continue;
            }
            if !name.ends_with(".obj") {
                continue;
            }
            match read_record(&path) {
                Ok((record, size)) => found.push((record, size)),
                Err(e) => {
                    warn!(path = %path.display(), error = %e, "unreadable cache file removed");
                    let _ = fs::remove_file(&path);
                }
            }
        }
        found.sort_by_key(|(r, _)| r.response_time_ms);
        let (tx, rx) = mpsc::sync_channel(WRITE_QUEUE);
        std::thread::Builder::new().name("cache-disk".into()).spawn(move || writer(rx))?;
        let tier = DiskTier { dir: dir.to_owned(), max_bytes, inline_max, index: Mutex::default(), ops: tx };
        let mut varies = Vec::new();
        let mut oldest = None;
        for (record, size) in found {
            oldest = oldest.or(Some(record.response_time_ms));
            let headers = record.headers.iter().filter(|(k, _)| super::is_tag_header(k)).map(|(_, v)| v.as_slice());
            tier.admit(&record.key, size, super::tags_in(headers));
            if !record.vary.is_empty() {
                let names = record.vary.iter().filter_map(|n| HeaderName::from_bytes(n.as_bytes()).ok()).collect();
                varies.push((record.primary, names));
            }
        }
        Ok((tier, Opened { varies, oldest_ms: oldest }))
    }

    fn lock(&self) -> MutexGuard<'_, Index> {
        self.index.lock().unwrap_or_else(|e| e.into_inner())
    }

    pub(super) fn path(&self, key: &str) -> PathBuf {
        self.dir.join(format!("{}.obj", hex::encode(Sha256::digest(key.as_bytes()))))
    }

    /// Where the file of `key` is written while its object streams in (removed
    /// at start like every `.tmp`).
    pub(super) fn fill_path(&self, key: &str) -> PathBuf {
        self.path(key).with_extension("fill.tmp")
    }

    /// Evicts least recently used files until `size` more bytes fit.
    fn make_room(&self, index: &mut Index, size: u64) {
        while index.bytes + index.reserved + size > self.max_bytes {
            let Some((_, oldest)) = index.lru.pop_first() else { break };
            if let Some(e) = index.entries.remove(&oldest) {
                index.bytes -= e.size;
                let _ = self.ops.try_send(Op::Delete(self.path(&oldest)));
            }
        }
    }

    /// Counts `key` in, evicting least recently used files beyond the budget.
    pub(super) fn admit(&self, key: &str, size: u64, tags: Vec<String>) -> bool {
        self.admit_in(&mut self.lock(), key, size, tags)
    }

    fn admit_in(&self, index: &mut Index, key: &str, size: u64, tags: Vec<String>) -> bool {
        if size > self.max_bytes {
            return false;
        }
        if let Some(old) = index.entries.remove(key) {
            index.lru.remove(&old.tick);
            index.bytes -= old.size;
        }
        self.make_room(index, size);
        index.tick += 1;
        let tick = index.tick;
        index.lru.insert(tick, key.to_owned());
        index.entries.insert(key.to_owned(), Entry { tick, size, tags });
        index.bytes += size;
        true
    }

    /// Reserves `size` bytes for the file of `key` about to be written, evicting
    /// others to make room; false when it cannot fit or is being written already.
    pub(super) fn reserve(&self, key: &str, size: u64) -> bool {
        let mut index = self.lock();
        if size > self.max_bytes || index.filling.contains(key) {
            return false;
        }
        self.make_room(&mut index, size);
        if index.bytes + index.reserved + size > self.max_bytes {
            // What is left is promised to other files being written.
            return false;
        }
        index.reserved += size;
        index.filling.insert(key.to_owned());
        true
    }

    /// Reserves `size` bytes more for the file of `key` being written
    /// (one whose length was not known), evicting others to make room; false
    /// when they cannot fit.
    pub(super) fn grow(&self, size: u64) -> bool {
        let mut index = self.lock();
        self.make_room(&mut index, size);
        if index.bytes + index.reserved + size > self.max_bytes {
            return false;
        }
        index.reserved += size;
        true
    }

    /// Makes the file of `key` being written readable by the requests that
    /// miss it meanwhile ([`DiskTier::filling`]).
    pub(super) fn register(&self, key: &str, filling: Arc<Filling>) {
        self.lock().fills.insert(key.to_owned(), filling);
    }

    /// The file of `key` being written, if it is.
    pub fn filling(&self, key: &str) -> Option<Arc<Filling>> {
        self.lock().fills.get(key).cloned()
    }

    /// Gives back the `reserved` bytes [`DiskTier::reserve`] and
    /// [`DiskTier::grow`] took for `key`.
    pub(super) fn release(&self, key: &str, reserved: u64) {
        let mut index = self.lock();
        Self::release_in(&mut index, key, reserved);
    }

    fn release_in(index: &mut Index, key: &str, reserved: u64) {
        index.reserved -= reserved;
        index.filling.remove(key);
        index.fills.remove(key);
    }

    /// [`DiskTier::release`] and [`DiskTier::admit`] at once: a request
    /// looking for `key` finds the fill under way or the file, never neither.
    pub(super) fn settle(&self, key: &str, reserved: u64, size: u64, tags: Vec<String>) -> bool {
        let mut index = self.lock();
        Self::release_in(&mut index, key, reserved);
        self.admit_in(&mut index, key, size, tags)
    }

    /// Queues the rename of `tmp` into the place of `key`'s file; `then` is
    /// called on the writer thread once it is done.
    pub(super) fn commit(&self, key: &str, tmp: PathBuf, then: Committed) {
        let op = Op::Commit { tmp, path: self.path(key), then };
        if let Err(mpsc::SendError(Op::Commit { tmp, then, .. })) = self.ops.send(op) {
            let _ = fs::remove_file(tmp);
            then(false);
        }
    }

    /// Queues `object` for writing under `key`.
    pub fn put(&self, key: &str, object: &CachedObject) {
        let mut bytes = head(key, object);
        let tail = match &object.body {
            Payload::Memory(body) => {
                bytes.extend_from_slice(body);
                None
            }
            Payload::File(range) => Some(range.clone()),
        };
        let size = bytes.len() as u64 + tail.as_ref().map_or(0, |t| t.len);
        if !self.admit(key, size, super::tags(&object.headers)) {
            return;
        }
        if self.ops.try_send(Op::Write { path: self.path(key), bytes, tail }).is_err() {
            debug!(key, "disk write queue full; object kept in memory only");
            self.forget(key);
        }
    }

    fn forget(&self, key: &str) -> bool {
        let mut index = self.lock();
        match index.entries.remove(key) {
            Some(e) => {
                index.lru.remove(&e.tick);
                index.bytes -= e.size;
                true
            }
            None => false,
        }
    }

    pub fn remove(&self, key: &str) {
        if self.forget(key) {
            let _ = self.ops.try_send(Op::Delete(self.path(key)));
        }
    }

    /// Removes every object `doomed` picks (by key and tags); returns their keys.
    /// Fills under way that it picks are no longer found by new requests
    /// (their files are not kept: their tickets predate the purge).
    pub fn remove_where(&self, mut doomed: impl FnMut(&str, &[String]) -> bool) -> Vec<String> {
        let mut index = self.lock();
        index.fills.retain(|k, f| !doomed(k, &super::tags(&f.head.headers)));
        let keys: Vec<String> =
            index.entries.iter().filter(|(k, e)| doomed(k, &e.tags)).map(|(k, _)| k.clone()).collect();
        for k in &keys {
            if let Some(e) = index.entries.remove(k) {
                index.lru.remove(&e.tick);
                index.bytes -= e.size;
            }
        }
        drop(index);
        for k in &keys {
            // Queued behind any write of the same file, so the delete wins.
            let _ = self.ops.send(Op::Delete(self.path(k)));
        }
        keys
    }

    /// Marks `key` most recently used; `None` when it is not on disk.
    fn touch(&self, key: &str) -> Option<()> {
        let mut index = self.lock();
        let index = &mut *index;
        let entry = index.entries.get_mut(key)?;
        index.lru.remove(&entry.tick);
        index.tick += 1;
        entry.tick = index.tick;
        index.lru.insert(index.tick, key.to_owned());
        Some(())
    }

    /// The object under `key`, read from its file.
    pub async fn get(self: &Arc<Self>, key: &str) -> Option<CachedObject> {
        self.touch(key)?;
        let (path, inline_max) = (self.path(key), self.inline_max);
        let read = tokio::task::spawn_blocking(move || read_object(&path, inline_max)).await;
        match read {
            Ok(Ok((stored_key, object))) if stored_key == key => Some(object),
            _ => {
                self.remove(key);
                None
            }
        }
    }

    /// Waits until every write queued so far is on disk.
    pub async fn flush(&self) {
        let (tx, rx) = tokio::sync::oneshot::channel();
        if self.ops.send(Op::Flush(tx)).is_ok() {
            let _ = rx.await;
        }
    }

    pub fn len(&self) -> usize {
        self.lock().entries.len()
    }

    pub fn bytes(&self) -> u64 {
        self.lock().bytes
    }
}

/// `LGC1`, the record's length and the record: a file up to its body.
pub(super) fn head(key: &str, object: &CachedObject) -> Vec<u8> {
    let record = serde_json::to_vec(&Record::of(key, object)).expect("a record serializes");
    let mut bytes = Vec::with_capacity(8 + record.len() + object.body.memory_cost());
    bytes.extend_from_slice(MAGIC);
    bytes.extend_from_slice(&(record.len() as u32).to_le_bytes());
    bytes.extend_from_slice(&record);
    bytes
}

/// Copies `range` to the end of `to`.
fn copy_range(range: &FileRange, to: &mut fs::File) -> io::Result<()> {
    let mut buf = vec![0; 256 * 1024];
    let mut done = 0;
    while done < range.len {
        let want = buf.len().min((range.len - done) as usize);
        let n = range.file.read_at(&mut buf[..want], range.offset + done)?;
        if n == 0 {
            return Err(io::Error::new(io::ErrorKind::UnexpectedEof, "the source cache file is short"));
        }
        to.write_all(&buf[..n])?;
        done += n as u64;
    }
    Ok(())
}

fn write_file(tmp: &Path, bytes: &[u8], tail: Option<&FileRange>) -> io::Result<()> {
    let mut file = fs::File::create(tmp)?;
    file.write_all(bytes)?;
    match tail {
        Some(range) => copy_range(range, &mut file),
        None => Ok(()),
    }
}

fn writer(ops: mpsc::Receiver<Op>) {
    for op in ops {
        match op {
            Op::Write { path, bytes, tail } => {
                let tmp = path.with_extension("tmp");
                let written = write_file(&tmp, &bytes, tail.as_ref()).and_then(|()| fs::rename(&tmp, &path));
                if let Err(e) = written {
                    warn!(path = %path.display(), error = %e, "cache file not written");
                    let _ = fs::remove_file(&tmp);
                }
            }
            Op::Delete(path) => {
                let _ = fs::remove_file(&path);
            }
            Op::Commit { tmp, path, then } => {
                let renamed = fs::rename(&tmp, &path);
                if let Err(e) = &renamed {
                    warn!(path = %path.display(), error = %e, "cache file not renamed into place");
                    let _ = fs::remove_file(&tmp);
                }
                then(renamed.is_ok());
            }
            Op::Flush(done) => {
                let _ = done.send(());
            }
        }
    }
}

fn read_head(file: &mut fs::File) -> io::Result<Record> {
    let mut head = [0u8; 8];
    file.read_exact(&mut head)?;
    if &head[..4] != MAGIC {
        return Err(io::Error::new(io::ErrorKind::InvalidData, "not a cache file"));
    }
    let len = u32::from_le_bytes(head[4..].try_into().expect("four bytes")) as usize;
    let mut record = vec![0; len];
    file.read_exact(&mut record)?;
    serde_json::from_slice(&record).map_err(|e| io::Error::new(io::ErrorKind::InvalidData, e))
}

fn read_record(path: &Path) -> io::Result<(Record, u64)> {
    let mut file = fs::File::open(path)?;
    let size = file.metadata()?.len();
    Ok((read_head(&mut file)?, size))
}

/// The object in `path`: its body read into memory up to `inline_max` bytes,
/// else left in the file.
fn read_object(path: &Path, inline_max: u64) -> io::Result<(String, CachedObject)> {
    let mut file = fs::File::open(path)?;
    let size = file.metadata()?.len();
    let record = read_head(&mut file)?;
    let offset = std::io::Seek::stream_position(&mut file)?;
    let len = size.saturating_sub(offset);
    let body = if len > inline_max {
        Payload::File(FileRange { file: Arc::new(file), offset, len })
    } else {
        let mut body = Vec::with_capacity(len as usize);
        file.read_to_end(&mut body)?;
        Payload::Memory(Bytes::from(body))
    };
    let key = record.key.clone();
    let object = record.into_object(body).ok_or_else(|| io::Error::new(io::ErrorKind::InvalidData, "bad header"))?;
    Ok((key, object))
}
