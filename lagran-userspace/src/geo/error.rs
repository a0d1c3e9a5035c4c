//! Errors of the geo module: reading, validating and writing geo files (ip2region
//! xdb, V2Ray `geoip.dat`, CIDR CSV / JSON, ip2region source text), and the operator
//! commands around them.

use std::fmt;
use std::path::PathBuf;

use super::IpVersion;

/// Where in a file a problem is.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Position {
    /// 1-based line of a text file.
    Line(usize),
    /// 0-based byte offset of a binary file.
    Byte(usize),
    /// 1-based line and column (JSON syntax errors).
    LineColumn {
        /// Line, from 1.
        line: usize,
        /// Column, from 1.
        column: usize,
    },
    /// 0-based index of an element of a JSON array.
    Entry(usize),
    /// A key of a JSON object.
    Key(String),
}

impl fmt::Display for Position {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Position::Line(l) => write!(f, "line {l}"),
            Position::Byte(b) => write!(f, "byte offset {b}"),
            Position::LineColumn { line, column } => write!(f, "line {line} column {column}"),
            Position::Entry(i) => write!(f, "array entry #{i}"),
            Position::Key(k) => write!(f, "key {k:?}"),
        }
    }
}

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
    #[error("xdb vector index entry [{row}][{col}] at offset {offset}: pointers {start}..{end} {reason}")]
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

    /// A text, JSON or protobuf geo file is malformed at `at`.
    #[error("{format} {at}: {reason}")]
    Syntax {
        /// The format being read (`CIDR CSV`, `geoip.dat`, …).
        format: &'static str,
        /// Where.
        at: Position,
        /// What is wrong.
        reason: String,
    },

    /// A MaxMind DB that the `maxminddb` crate cannot read, or whose records are
    /// neither a City nor an ASN schema.
    #[error("MaxMind DB: {reason}")]
    Mmdb {
        /// What is wrong.
        reason: String,
    },

    /// Neither the file name nor the content says which format a file is in.
    #[error("unknown geo file format: {reason}")]
    UnknownFormat {
        /// What was seen.
        reason: String,
    },

    /// A file given for one address family holds no range of that family.
    #[error("{path} holds no {family} ranges")]
    NoData {
        /// The file.
        path: PathBuf,
        /// The family that was expected.
        family: IpVersion,
    },

    /// An operator command was given something it cannot use.
    #[error("{0}")]
    Usage(String),

    /// The running daemon's API could not be reached or answered an error.
    #[error("{method} {url}: {reason}")]
    Client {
        /// HTTP method.
        method: &'static str,
        /// The URL asked.
        url: String,
        /// What went wrong (connection error, or status and the API's error message).
        reason: String,
    },

    /// A reload was refused or could not be applied.
    #[error("geo reload: {0}")]
    Reload(String),
}

impl GeoError {
    /// A syntax error of `format` at `at`.
    pub fn syntax(format: &'static str, at: Position, reason: impl Into<String>) -> GeoError {
        GeoError::Syntax { format, at, reason: reason.into() }
    }

    /// Wraps a content error with the path of the file it was found in.
    pub fn in_file(self, path: impl Into<PathBuf>) -> GeoError {
        GeoError::InFile { path: path.into(), source: Box::new(self) }
    }
}
