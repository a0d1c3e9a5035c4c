//! Reader for ip2region `.xdb` files (structure versions 2 and 3, IPv4 and IPv6).
//!
//! Written here rather than taken from crates.io: the `ip2region` crate (0.1.0, 2022)
//! reads only structure version 2 / IPv4, cannot iterate segments (which the prefix
//! compiler needs) and reports errors as `Box<dyn Error>`; this reader is small,
//! allocation-free on the lookup path and validates the whole file up front.
//!
//! # Format (all integers little-endian)
//!
//! | offset | size | field |
//! | --- | --- | --- |
//! | 0 | 2 | structure version: 2 (IPv4 only) or 3 (since IPv6 support) |
//! | 2 | 2 | index policy (1 = vector index; informational) |
//! | 4 | 4 | created_at, unix seconds |
//! | 8 | 4 | start_index_ptr: offset of the first segment index entry |
//! | 12 | 4 | end_index_ptr: offset of the **last** segment index entry |
//! | 16 | 2 | ip_version: 4 or 6 (version 3 only; 0 in version-2 files) |
//! | 18 | 2 | runtime_ptr_bytes: 4 (version 3 only; 0 in version-2 files) |
//! | 256 | 524 288 | vector index: 256×256 entries of (u32 first entry ptr, u32 end ptr, exclusive), addressed by the first two bytes of the address |
//! | 524 544 | … | region strings (UTF-8, deduplicated, no terminator) |
//! | start_index_ptr | … | segment index: (start ip, end ip, u16 data_len, u32 data_ptr) |
//!
//! IPv4 entries are 14 bytes with the addresses as little-endian u32. IPv6 entries
//! are 38 bytes with the 16-byte addresses in network (big-endian) byte order — the
//! reference maker copies the address bytes as they are, "to follow the network byte
//! order", while keeping IPv4 little-endian for compatibility (lionsoul2014/ip2region
//! `maker/golang/xdb/version.go`, `PutBytes`). The reference maker splits every range
//! at /16 boundaries so that each vector index cell covers whole entries.
//!
//! This reader does not rely on the file's vector index for correctness: it validates
//! it (a reference searcher would misread a file whose vector index is broken), then
//! builds its own table of the first entry reaching each /16 from the sorted entries,
//! so files whose ranges are not split at /16 boundaries are read correctly too.
//! Entries with `data_len == 0` are holes (written by [`write_xdb`](super::write_xdb)
//! for gaps; the reference searchers return "" for them): they are neither searched
//! nor iterated.

use std::fmt;
use std::net::IpAddr;
use std::path::Path;

use super::GeoError;

/// Size of the fixed header.
pub(crate) const HEADER_LEN: usize = 256;
/// Rows × columns of the vector index.
pub(crate) const VECTOR_CELLS: usize = 256 * 256;
/// Size of one vector index cell (two u32 pointers).
pub(crate) const VECTOR_CELL_LEN: usize = 8;
/// Size of the whole vector index.
pub(crate) const VECTOR_LEN: usize = VECTOR_CELLS * VECTOR_CELL_LEN;
/// Offset of the first byte after header and vector index.
pub(crate) const DATA_START: usize = HEADER_LEN + VECTOR_LEN;

/// Address family of an xdb file.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum IpVersion {
    /// 32-bit addresses, 14-byte segment entries.
    V4,
    /// 128-bit addresses, 38-byte segment entries.
    V6,
}

impl IpVersion {
    /// Bytes of one address in a segment entry.
    pub(crate) const fn addr_len(self) -> usize {
        match self {
            IpVersion::V4 => 4,
            IpVersion::V6 => 16,
        }
    }

    /// Bytes of one segment index entry: start, end, u16 length, u32 pointer.
    pub(crate) const fn entry_len(self) -> usize {
        2 * self.addr_len() + 6
    }

    /// Bits to shift an address (as u128) right to get its first two bytes.
    pub(crate) const fn bucket_shift(self) -> u32 {
        match self {
            IpVersion::V4 => 16,
            IpVersion::V6 => 112,
        }
    }

    /// The largest address of the family.
    pub(crate) const fn max_addr(self) -> u128 {
        match self {
            IpVersion::V4 => u32::MAX as u128,
            IpVersion::V6 => u128::MAX,
        }
    }

    /// The `ip_version` header value.
    pub(crate) const fn header_id(self) -> u16 {
        match self {
            IpVersion::V4 => 4,
            IpVersion::V6 => 6,
        }
    }
}

impl fmt::Display for IpVersion {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            IpVersion::V4 => "IPv4",
            IpVersion::V6 => "IPv6",
        })
    }
}

/// One address range of an xdb and its region string.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Segment<'a> {
    /// First address, inclusive (IPv4 addresses as values below 2^32).
    pub start: u128,
    /// Last address, inclusive.
    pub end: u128,
    /// The raw region string, e.g. `中国|0|广东省|深圳市|电信`.
    pub region: &'a str,
}

/// A decoded segment index entry.
#[derive(Clone, Copy)]
struct Entry {
    start: u128,
    end: u128,
    data_len: u16,
    data_ptr: u32,
}

/// An ip2region database held in memory: immutable, `Send + Sync`, validated when
/// built, so lookups cannot fail on a corrupt file.
pub struct Xdb {
    bytes: Vec<u8>,
    version: IpVersion,
    format_version: u16,
    created_at: u32,
    /// Offset of the first segment entry.
    index_start: usize,
    /// Number of segment entries, holes included.
    entries: usize,
    /// Number of entries with a region (holes excluded).
    regions: usize,
    /// `first[b]` = index of the first entry whose end reaches /16 bucket `b`;
    /// `first[65536]` = `entries`.
    first: Box<[u32]>,
}

impl fmt::Debug for Xdb {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Xdb")
            .field("version", &self.version)
            .field("format_version", &self.format_version)
            .field("created_at", &self.created_at)
            .field("bytes", &self.bytes.len())
            .field("segments", &self.regions)
            .finish()
    }
}

fn u16_at(b: &[u8], off: usize) -> Option<u16> {
    Some(u16::from_le_bytes(b.get(off..off + 2)?.try_into().ok()?))
}

fn u32_at(b: &[u8], off: usize) -> Option<u32> {
    Some(u32::from_le_bytes(b.get(off..off + 4)?.try_into().ok()?))
}

/// Decodes one segment entry from a slice of exactly `version.entry_len()` bytes.
fn decode(c: &[u8], version: IpVersion) -> Entry {
    let mut a = [0u8; 16];
    let mut z = [0u8; 16];
    let n = version.addr_len();
    let (start, end) = match version {
        IpVersion::V4 => (
            u128::from(u32::from_le_bytes([c[0], c[1], c[2], c[3]])),
            u128::from(u32::from_le_bytes([c[4], c[5], c[6], c[7]])),
        ),
        IpVersion::V6 => {
            a.copy_from_slice(&c[..16]);
            z.copy_from_slice(&c[16..32]);
            (u128::from_be_bytes(a), u128::from_be_bytes(z))
        }
    };
    Entry {
        start,
        end,
        data_len: u16::from_le_bytes([c[2 * n], c[2 * n + 1]]),
        data_ptr: u32::from_le_bytes([c[2 * n + 2], c[2 * n + 3], c[2 * n + 4], c[2 * n + 5]]),
    }
}

/// Decodes the segment entry at `off`, or `None` when it is not inside `b`.
fn entry_at(b: &[u8], version: IpVersion, off: usize) -> Option<Entry> {
    Some(decode(b.get(off..off + version.entry_len())?, version))
}

impl Xdb {
    /// Reads and validates a whole xdb held in memory: header, index pointers, every
    /// vector index cell and every segment entry (order, bounds, UTF-8 region).
    /// A corrupt or truncated file is an error naming the offset and field, never a panic.
    pub fn from_bytes(bytes: Vec<u8>) -> Result<Xdb, GeoError> {
        let len = bytes.len();
        if len < DATA_START {
            return Err(GeoError::Truncated {
                len,
                need: DATA_START,
            });
        }
        let b = &bytes[..];
        // The length check above makes these header reads infallible; keep them total anyway.
        let hdr = |off| u16_at(b, off).unwrap_or(0);
        let hdr32 = |off| u32_at(b, off).unwrap_or(0);
        let format_version = hdr(0);
        let version = match format_version {
            2 => IpVersion::V4,
            3 => match hdr(16) {
                4 => IpVersion::V4,
                6 => IpVersion::V6,
                ip_version => return Err(GeoError::UnsupportedIpVersion { ip_version }),
            },
            version => return Err(GeoError::UnsupportedVersion { version }),
        };
        if format_version == 3 {
            let bytes = hdr(18);
            if bytes != 4 && bytes != 0 {
                return Err(GeoError::UnsupportedPtrBytes { bytes });
            }
        }
        let created_at = hdr32(4);
        let start_ptr = hdr32(8);
        let end_ptr = hdr32(12);
        let entry_len = version.entry_len();
        let bad_ptrs = |reason| GeoError::BadIndexPointers {
            start: start_ptr,
            end: end_ptr,
            len,
            entry_size: entry_len,
            reason,
        };
        let (start, end) = (start_ptr as usize, end_ptr as usize);
        if start < DATA_START {
            return Err(bad_ptrs(
                "segment index starts inside the header or vector index",
            ));
        }
        if end < start {
            return Err(bad_ptrs("end before start"));
        }
        if (end - start) % entry_len != 0 {
            return Err(bad_ptrs("span is not a whole number of entries"));
        }
        if end.checked_add(entry_len).is_none_or(|e| e > len) {
            return Err(bad_ptrs("last entry runs past the end of the file"));
        }
        let entries = (end - start) / entry_len + 1;
        if entries > u32::MAX as usize {
            return Err(bad_ptrs("too many entries"));
        }
        let index_end = end + entry_len; // exclusive

        // Vector index: every cell is empty (0, 0) or an entry-aligned span inside the
        // segment index. The reference searchers trust it, so a broken one is corruption.
        for (cell, c) in b[HEADER_LEN..DATA_START]
            .chunks_exact(VECTOR_CELL_LEN)
            .enumerate()
        {
            let s = u32::from_le_bytes([c[0], c[1], c[2], c[3]]);
            let e = u32::from_le_bytes([c[4], c[5], c[6], c[7]]);
            if s == 0 && e == 0 {
                continue;
            }
            let (su, eu) = (s as usize, e as usize);
            let reason = if su < start || eu > index_end || su > eu {
                "outside the segment index"
            } else if (su - start) % entry_len != 0 || (eu - su) % entry_len != 0 {
                "not aligned to segment entries"
            } else {
                continue;
            };
            return Err(GeoError::BadVectorIndex {
                row: cell >> 8,
                col: cell & 0xff,
                offset: HEADER_LEN + cell * VECTOR_CELL_LEN,
                start: s,
                end: e,
                reason,
            });
        }

        // Segment entries: sorted, non-overlapping, region in bounds and UTF-8. The same
        // pass fills our bucket table: `first[b]` = first entry whose end reaches /16 `b`.
        let shift = version.bucket_shift();
        let mut first = vec![entries as u32; VECTOR_CELLS + 1].into_boxed_slice();
        let mut next_bucket = 0usize;
        let mut regions = 0usize;
        let mut prev_end: Option<u128> = None;
        let mut last_checked: Option<(u32, u16)> = None;
        for (index, chunk) in b[start..index_end].chunks_exact(entry_len).enumerate() {
            let e = decode(chunk, version);
            let bad = |reason: String| GeoError::BadSegment {
                index,
                offset: start + index * entry_len,
                reason,
            };
            if e.start > e.end {
                return Err(bad(format!(
                    "start {:#x} is after end {:#x}",
                    e.start, e.end
                )));
            }
            if let Some(p) = prev_end
                && e.start <= p
            {
                return Err(bad(format!(
                    "start {:#x} is not after the previous entry's end {p:#x} (entries must be sorted and disjoint)",
                    e.start
                )));
            }
            prev_end = Some(e.end);
            let last_bucket = ((e.end >> shift) as usize).min(VECTOR_CELLS - 1);
            while next_bucket <= last_bucket {
                first[next_bucket] = index as u32;
                next_bucket += 1;
            }
            if e.data_len == 0 {
                continue; // a hole
            }
            regions += 1;
            if last_checked == Some((e.data_ptr, e.data_len)) {
                continue; // the same region as the previous entry (a /16 split)
            }
            let data = e.data_ptr as usize;
            let data_end = data + e.data_len as usize;
            let Some(region) = b.get(data..data_end) else {
                return Err(bad(format!(
                    "region data {data}..{data_end} is outside the {len}-byte file"
                )));
            };
            if let Err(err) = std::str::from_utf8(region) {
                return Err(bad(format!(
                    "region data at offset {data} is not UTF-8: {err}"
                )));
            }
            last_checked = Some((e.data_ptr, e.data_len));
        }
        first[VECTOR_CELLS] = entries as u32;

        Ok(Xdb {
            bytes,
            version,
            format_version,
            created_at,
            index_start: start,
            entries,
            regions,
            first,
        })
    }

    /// Reads the whole file at `path` and validates it; errors name the path.
    pub fn open(path: &Path) -> Result<Xdb, GeoError> {
        let bytes = std::fs::read(path).map_err(|source| GeoError::Io {
            path: path.to_path_buf(),
            source,
        })?;
        Xdb::from_bytes(bytes).map_err(|e| e.in_file(path))
    }

    /// Address family of the file.
    pub fn ip_version(&self) -> IpVersion {
        self.version
    }

    /// Header structure version (2 or 3).
    pub fn format_version(&self) -> u16 {
        self.format_version
    }

    /// Header creation time, unix seconds.
    pub fn created_at(&self) -> u32 {
        self.created_at
    }

    /// Size of the file in bytes.
    pub fn byte_len(&self) -> usize {
        self.bytes.len()
    }

    /// Number of segments with a region, as stored: the reference maker splits ranges
    /// at /16 boundaries, so one source range may be several segments.
    pub fn len(&self) -> usize {
        self.regions
    }

    /// Whether the file has no segment with a region.
    pub fn is_empty(&self) -> bool {
        self.regions == 0
    }

    fn entry(&self, i: usize) -> Option<Entry> {
        entry_at(
            &self.bytes,
            self.version,
            self.index_start + i * self.version.entry_len(),
        )
    }

    /// The start address of entry `i` (the binary search reads only this).
    fn start_of(&self, i: usize) -> Option<u128> {
        let off = self.index_start + i * self.version.entry_len();
        match self.version {
            IpVersion::V4 => u32_at(&self.bytes, off).map(u128::from),
            IpVersion::V6 => Some(u128::from_be_bytes(
                self.bytes.get(off..off + 16)?.try_into().ok()?,
            )),
        }
    }

    fn segment(&self, e: Entry) -> Option<Segment<'_>> {
        if e.data_len == 0 {
            return None;
        }
        let data = e.data_ptr as usize;
        let region = std::str::from_utf8(self.bytes.get(data..data + e.data_len as usize)?).ok()?;
        Some(Segment {
            start: e.start,
            end: e.end,
            region,
        })
    }

    /// The segment containing `ip`, or `None` when the address is of the other family
    /// or falls in a hole. Allocation-free: a /16 table lookup and a binary search.
    pub fn search(&self, ip: IpAddr) -> Option<Segment<'_>> {
        let addr = match (ip, self.version) {
            (IpAddr::V4(v4), IpVersion::V4) => u128::from(u32::from(v4)),
            (IpAddr::V6(v6), IpVersion::V6) => u128::from(v6),
            _ => return None,
        };
        self.search_u128(addr)
    }

    /// [`search`](Self::search) by numeric address (IPv4 as a value below 2^32).
    pub fn search_u128(&self, addr: u128) -> Option<Segment<'_>> {
        if addr > self.version.max_addr() {
            return None;
        }
        let bucket = (addr >> self.version.bucket_shift()) as usize;
        let lo = *self.first.get(bucket)? as usize;
        // Entries before first[bucket+1] end inside this bucket or earlier; the entry at
        // first[bucket+1] may still start inside it.
        let hi = (*self.first.get(bucket + 1)? as usize + 1).min(self.entries);
        // Binary search for the last entry in lo..hi whose start <= addr.
        let (mut l, mut h) = (lo, hi);
        while l < h {
            let m = l + (h - l) / 2;
            if self.start_of(m)? <= addr {
                l = m + 1;
            } else {
                h = m;
            }
        }
        if l == lo {
            return None;
        }
        let e = self.entry(l - 1)?;
        if addr > e.end {
            return None;
        }
        self.segment(e)
    }

    /// All segments with a region, in address order (holes skipped).
    pub fn segments(&self) -> impl Iterator<Item = Segment<'_>> + '_ {
        (0..self.entries).filter_map(move |i| self.entry(i).and_then(|e| self.segment(e)))
    }

    /// Segments with adjacent, identical regions merged (undoes the /16 split of the
    /// reference maker), in address order.
    pub fn merged_segments(&self) -> impl Iterator<Item = Segment<'_>> + '_ {
        let mut it = self.segments().peekable();
        std::iter::from_fn(move || {
            let mut cur = it.next()?;
            while let Some(next) = it.peek() {
                if next.region == cur.region && cur.end.checked_add(1) == Some(next.start) {
                    cur.end = next.end;
                    it.next();
                } else {
                    break;
                }
            }
            Some(cur)
        })
    }
}
