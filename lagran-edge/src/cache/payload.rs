//! An object's body: bytes in memory, or a byte range of its file in the disk
//! tier (objects over `cache_max_object_bytes`, which are never held whole in
//! memory).
//!
//! A file-backed body holds its file open, so a purge or an eviction that
//! deletes the file while the body is being sent does not cut it short.

use std::fs::File;
use std::sync::Arc;

use bytes::Bytes;

#[derive(Debug, Clone)]
pub enum Payload {
    Memory(Bytes),
    File(FileRange),
}

/// `len` bytes of `file` from `offset`.
#[derive(Debug, Clone)]
pub struct FileRange {
    pub file: Arc<File>,
    pub offset: u64,
    pub len: u64,
}

impl FileRange {
    /// Bytes `first..=last` of this range.
    pub fn part(&self, first: u64, last: u64) -> FileRange {
        FileRange { file: self.file.clone(), offset: self.offset + first, len: last + 1 - first }
    }
}

impl Payload {
    pub fn len(&self) -> u64 {
        match self {
            Payload::Memory(b) => b.len() as u64,
            Payload::File(f) => f.len,
        }
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// The bytes, when they are in memory.
    pub fn in_memory(&self) -> Option<&Bytes> {
        match self {
            Payload::Memory(b) => Some(b),
            Payload::File(_) => None,
        }
    }

    /// What the body costs in memory.
    pub fn memory_cost(&self) -> usize {
        self.in_memory().map_or(0, Bytes::len)
    }
}

impl From<Bytes> for Payload {
    fn from(b: Bytes) -> Payload {
        Payload::Memory(b)
    }
}
