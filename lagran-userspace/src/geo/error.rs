//! Errors of the geo module: reading, validating and writing ip2region xdb files.

use std::path::PathBuf;

/// What went wrong with a geo database file. Every variant names the file (when
/// there is one), the byte offset and the field that is wrong.
#[derive(Debug, thiserror::Error)]
pub enum GeoError {
    /// The file could not be read at all.
    #[error("cannot read geo database {path}: {source}")]
    Io {
        /// The file that was opened.
        path: PathBuf,
        /// The operating system's error.
        #[source]
        source: std::io::Error,
    },

    /// The file was read but its content is not a valid xdb.
    #[error("invalid geo database {path}: {source}")]
    InFile {
        /// The file that was read.
        path: PathBuf,
        /// What is wrong inside it.
        #[source]
        source: Box<GeoError>,
    },

    /// Shorter than the fixed 256-byte header plus the 512 KiB vector index.
    #[error("xdb is {len} bytes, shorter than the {need}-byte header and vector index")]
    Truncated {
        /// Actual length.
        len: usize,
        /// Minimum length of any xdb.
        need: usize,
    },

    /// Header field `version` (offset 0) is neither 2 (IPv4 only) nor 3 (IPv4/IPv6).
    #[error("xdb header: unsupported structure version {version} at offset 0 (expected 2 or 3)")]
    UnsupportedVersion {
        /// The value found.
        version: u16,
    },

    /// Header field `ip_version` (offset 16) of a version-3 file is neither 4 nor 6.
    #[error("xdb header: unsupported ip_version {ip_version} at offset 16 (expected 4 or 6)")]
    UnsupportedIpVersion {
        /// The value found.
        ip_version: u16,
    },

    /// Header field `runtime_ptr_bytes` (offset 18) is not 4 (or 0 in old files).
    #[error("xdb header: unsupported runtime_ptr_bytes {bytes} at offset 18 (expected 4)")]
    UnsupportedPtrBytes {
        /// The value found.
        bytes: u16,
    },

    /// Header fields `start_index_ptr` (offset 8) / `end_index_ptr` (offset 12) do not
    /// describe a whole number of segment entries inside the file.
    #[error(
        "xdb header: segment index pointers start={start} end={end} invalid for a \
         {len}-byte file with {entry_size}-byte entries: {reason}"
    )]
    BadIndexPointers {
        /// `start_index_ptr`.
        start: u32,
        /// `end_index_ptr` (offset of the last entry).
        end: u32,
        /// File length.
        len: usize,
        /// Size of one segment index entry (14 for IPv4, 38 for IPv6).
        entry_size: usize,
        /// What is wrong.
        reason: &'static str,
    },

    /// An entry of the 256×256 vector index points outside the segment index.
    #[error(
        "xdb vector index entry [{row}][{col}] at offset {offset}: pointers {start}..{end} {reason}"
    )]
    BadVectorIndex {
        /// First address byte.
        row: usize,
        /// Second address byte.
        col: usize,
        /// Byte offset of the entry in the file.
        offset: usize,
        /// Start pointer found.
        start: u32,
        /// End pointer found.
        end: u32,
        /// What is wrong.
        reason: &'static str,
    },

    /// A segment index entry is inconsistent.
    #[error("xdb segment entry #{index} at offset {offset}: {reason}")]
    BadSegment {
        /// Position of the entry in the segment index (0-based).
        index: usize,
        /// Byte offset of the entry in the file.
        offset: usize,
        /// What is wrong.
        reason: String,
    },

    /// The writer was given a range it cannot store.
    #[error("xdb writer: range #{index} {start:#x}..={end:#x}: {reason}")]
    InvalidRange {
        /// Position of the range in the input.
        index: usize,
        /// Its first address.
        start: u128,
        /// Its last address.
        end: u128,
        /// What is wrong.
        reason: String,
    },

    /// The file would need pointers beyond the format's 32 bits.
    #[error("xdb writer: output of {len} bytes exceeds the 4 GiB addressable by 32-bit pointers")]
    TooLarge {
        /// The size reached.
        len: usize,
    },
}

impl GeoError {
    /// Wraps a content error with the path of the file it was found in.
    pub fn in_file(self, path: impl Into<PathBuf>) -> GeoError {
        GeoError::InFile {
            path: path.into(),
            source: Box::new(self),
        }
    }
}
