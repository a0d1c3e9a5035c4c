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
//! builds its own lookup index from the sorted entries, so files whose ranges are not
//! split at /16 boundaries are read correctly too.
//!
//! Entries with `data_len == 0` are holes (written by [`write_xdb`](super::write_xdb)
//! for gaps; the reference searchers return "" for them): they are neither searched
//! nor iterated.
//!
//! # Lookup index
//!
//! A lookup on the file's own layout chases 5–7 dependent cache misses through the
//! 10 MB segment index (one 14-byte entry per binary-search probe) and re-validates
//! the UTF-8 of the region it returns: ~600 ns on the real file. Built once when the
//! file is validated, a flat index covering the whole address space (gaps become
//! holes) keeps what a lookup reads dense: the entry start
//! addresses (`u32` for IPv4), one region id per entry, a table of the distinct
//! regions (~14 000 in the real file), and `first[b]`, the first entry reaching /16
//! bucket `b`. A lookup is a bucket read, a binary search inside one or two cache
//! lines of starts, an id and the region string, already validated: 120–300 ns
//! on the real file on a loaded 2-core machine (release build, random addresses;
//! `geo::bench::bench_lookup`), for about 6 MB more memory (IPv4: 8 bytes per entry,
//! plus the distinct strings once).

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
    /// Number of entries with a region (holes excluded).
    regions: usize,
    /// The lookup index (see the module docs).
    index: Index,
}

/// Region id of a hole in [`Index::ids`].
const HOLE: u32 = u32::MAX;

/// The flat lookup index: entries covering the whole address space of the family, in
/// order; entry `i` spans `starts[i] ..= starts[i + 1] - 1` (the last one up to the
/// family's largest address).
struct Index {
    /// Entry start addresses.
    starts: Starts,
    /// Region id of each entry ([`HOLE`] for gaps and hole entries).
    ids: Box<[u32]>,
    /// Distinct regions: (offset, length) in `arena`.
    regions: Box<[(u32, u32)]>,
    /// The distinct region strings, validated once when the file is read, so a lookup
    /// hands out a `&str` without re-checking UTF-8 (which costs more than the search
    /// itself for Chinese region strings).
    arena: Box<str>,
    /// `first[b]` = the first entry whose end reaches /16 bucket `b`;
    /// `first[65536]` = the number of entries.
    first: Box<[u32]>,
}

impl Index {
    /// The string of region `id`.
    fn region(&self, id: u32) -> Option<&str> {
        let &(off, len) = self.regions.get(id as usize)?;
        let off = off as usize;
        self.arena.get(off..off + len as usize)
    }

    /// Inclusive end of entry `i`.
    fn end(&self, i: usize, version: IpVersion) -> u128 {
        self.starts.get(i + 1).map_or(version.max_addr(), |s| s - 1)
    }
}

/// Entry starts in the width of the family.
enum Starts {
    V4(Box<[u32]>),
    V6(Box<[u128]>),
}

impl Starts {
    fn len(&self) -> usize {
        match self {
            Starts::V4(s) => s.len(),
            Starts::V6(s) => s.len(),
        }
    }

    fn get(&self, i: usize) -> Option<u128> {
        match self {
            Starts::V4(s) => s.get(i).map(|&x| u128::from(x)),
            Starts::V6(s) => s.get(i).copied(),
        }
    }

    /// `lo` + the number of starts in `lo..hi` that are `<= addr`.
    fn upper_bound(&self, lo: usize, hi: usize, addr: u128) -> Option<usize> {
        Some(
            lo + match self {
                Starts::V4(s) => s.get(lo..hi)?.partition_point(|&x| u128::from(x) <= addr),
                Starts::V6(s) => s.get(lo..hi)?.partition_point(|&x| x <= addr),
            },
        )
    }
}

/// Builds an [`Index`] from validated entries fed in order.
struct IndexBuilder {
    version: IpVersion,
    starts4: Vec<u32>,
    starts6: Vec<u128>,
    ids: Vec<u32>,
    regions: Vec<(u32, u32)>,
    arena: String,
    by_data: std::collections::HashMap<(u32, u16), u32>,
    /// First address not yet covered; `None` once the last address is covered.
    next: Option<u128>,
}

impl IndexBuilder {
    fn new(version: IpVersion, entries: usize) -> IndexBuilder {
        let (mut starts4, mut starts6) = (Vec::new(), Vec::new());
        match version {
            IpVersion::V4 => starts4.reserve_exact(entries + 1),
            IpVersion::V6 => starts6.reserve_exact(entries + 1),
        }
        IndexBuilder {
            version,
            starts4,
            starts6,
            ids: Vec::with_capacity(entries + 1),
            regions: Vec::new(),
            arena: String::new(),
            by_data: std::collections::HashMap::new(),
            next: Some(0),
        }
    }

    fn push(&mut self, start: u128, id: u32) {
        match self.version {
            IpVersion::V4 => self.starts4.push(start as u32),
            IpVersion::V6 => self.starts6.push(start),
        }
        self.ids.push(id);
    }

    /// The region id of already validated data, if seen before.
    fn known(&self, ptr: u32, len: u16) -> Option<u32> {
        self.by_data.get(&(ptr, len)).copied()
    }

    /// Adds the validated `region` found at (`ptr`, `len`) in the file.
    fn add_region(&mut self, ptr: u32, len: u16, region: &str) -> u32 {
        let id = self.regions.len() as u32;
        self.regions.push((self.arena.len() as u32, region.len() as u32));
        self.arena.push_str(region);
        self.by_data.insert((ptr, len), id);
        id
    }

    /// Adds an entry (sorted, disjoint: validated by the caller), a hole before it
    /// when it does not follow the previous one.
    fn entry(&mut self, start: u128, end: u128, id: u32) {
        if let Some(n) = self.next
            && n < start
        {
            self.push(n, HOLE);
        }
        self.push(start, id);
        self.next = end.checked_add(1).filter(|&n| n <= self.version.max_addr());
    }

    fn finish(mut self) -> Index {
        if let Some(n) = self.next {
            self.push(n, HOLE);
        }
        let starts = match self.version {
            IpVersion::V4 => Starts::V4(self.starts4.into_boxed_slice()),
            IpVersion::V6 => Starts::V6(self.starts6.into_boxed_slice()),
        };
        let n = starts.len();
        let shift = self.version.bucket_shift();
        let mut first = vec![n as u32; VECTOR_CELLS + 1].into_boxed_slice();
        let mut next_bucket = 0usize;
        for i in 0..n {
            let end = starts.get(i + 1).map_or(self.version.max_addr(), |s| s - 1);
            let last_bucket = ((end >> shift) as usize).min(VECTOR_CELLS - 1);
            while next_bucket <= last_bucket {
                first[next_bucket] = i as u32;
                next_bucket += 1;
            }
        }
        Index {
            starts,
            ids: self.ids.into_boxed_slice(),
            regions: self.regions.into_boxed_slice(),
            arena: self.arena.into_boxed_str(),
            first,
        }
    }
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

/// What the 256-octet header says: the header structure version, the address
/// family and the creation time.
struct Header {
    format_version: u16,
    version: IpVersion,
    created_at: u32,
    start_ptr: u32,
    end_ptr: u32,
}

/// Where the segment index lies: `[start, index_end)`, `entries` entries of
/// `entry_len` octets each.
struct SegmentSpan {
    start: usize,
    index_end: usize,
    entries: usize,
    entry_len: usize,
}

/// Reads the header of a file at least `DATA_START` octets long.
fn read_header(b: &[u8]) -> Result<Header, GeoError> {
    // The caller's length check makes these header reads infallible; keep them total anyway.
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
    Ok(Header { format_version, version, created_at: hdr32(4), start_ptr: hdr32(8), end_ptr: hdr32(12) })
}

/// Checks the header's segment index pointers against the file: after the vector
/// index, in order, a whole number of entries, the last one inside the file.
fn segment_span(h: &Header, len: usize) -> Result<SegmentSpan, GeoError> {
    let entry_len = h.version.entry_len();
    let bad_ptrs =
        |reason| GeoError::BadIndexPointers { start: h.start_ptr, end: h.end_ptr, len, entry_size: entry_len, reason };
    let (start, end) = (h.start_ptr as usize, h.end_ptr as usize);
    if start < DATA_START {
        return Err(bad_ptrs("segment index starts inside the header or vector index"));
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
    Ok(SegmentSpan { start, index_end: end + entry_len, entries, entry_len })
}

/// Vector index: every cell is empty (0, 0) or an entry-aligned span inside the
/// segment index. The reference searchers trust it, so a broken one is corruption.
fn check_vector_index(b: &[u8], span: &SegmentSpan) -> Result<(), GeoError> {
    let SegmentSpan { start, index_end, entry_len, .. } = *span;
    for (cell, c) in b[HEADER_LEN..DATA_START].chunks_exact(VECTOR_CELL_LEN).enumerate() {
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
    Ok(())
}

/// Segment entries: sorted, non-overlapping, region in bounds and UTF-8 (each
/// distinct region checked once). The same pass builds the lookup index; returns it
/// with the number of entries that carry a region.
///
/// Regions are copied into the index once per distinct (pointer, length). A real
/// file stores each distinct string once, so these never add up to more than the
/// file; a crafted one whose entries point at overlapping windows of the data
/// (offset k, 65 535 octets, for every k) would make a small file cost gigabytes.
/// The total is checked before each copy: the index never holds more region octets
/// than the file has.
fn read_segments(b: &[u8], version: IpVersion, span: &SegmentSpan) -> Result<(Index, usize), GeoError> {
    let SegmentSpan { start, index_end, entries, entry_len } = *span;
    let len = b.len();
    let mut region_bytes = 0usize;
    let mut index = IndexBuilder::new(version, entries);
    let mut regions = 0usize;
    let mut prev_end: Option<u128> = None;
    for (i, chunk) in b[start..index_end].chunks_exact(entry_len).enumerate() {
        let e = decode(chunk, version);
        let bad = |reason: String| GeoError::BadSegment { index: i, offset: start + i * entry_len, reason };
        if e.start > e.end {
            return Err(bad(format!("start {:#x} is after end {:#x}", e.start, e.end)));
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
        if e.data_len == 0 {
            index.entry(e.start, e.end, HOLE);
            continue;
        }
        regions += 1;
        let id = match index.known(e.data_ptr, e.data_len) {
            Some(id) => id,
            None => {
                let data = e.data_ptr as usize;
                let data_end = data + e.data_len as usize;
                let Some(region) = b.get(data..data_end) else {
                    return Err(bad(format!("region data {data}..{data_end} is outside the {len}-byte file")));
                };
                region_bytes += region.len();
                if region_bytes > len {
                    return Err(bad(format!(
                        "distinct regions add up to more than the {len}-byte file (entries point at \
                         overlapping windows of the data)"
                    )));
                }
                let region = match std::str::from_utf8(region) {
                    Ok(r) => r,
                    Err(err) => {
                        return Err(bad(format!("region data at offset {data} is not UTF-8: {err}")));
                    }
                };
                index.add_region(e.data_ptr, e.data_len, region)
            }
        };
        index.entry(e.start, e.end, id);
    }
    Ok((index.finish(), regions))
}

impl Xdb {
    /// Reads and validates a whole xdb held in memory: header, index pointers, every
    /// vector index cell and every segment entry (order, bounds, UTF-8 region).
    /// A corrupt or truncated file is an error naming the offset and field, never a panic.
    pub fn from_bytes(bytes: Vec<u8>) -> Result<Xdb, GeoError> {
        let len = bytes.len();
        if len < DATA_START {
            return Err(GeoError::Truncated { len, need: DATA_START });
        }
        let header = read_header(&bytes)?;
        let span = segment_span(&header, len)?;
        check_vector_index(&bytes, &span)?;
        let (index, regions) = read_segments(&bytes, header.version, &span)?;
        let Header { format_version, version, created_at, .. } = header;
        Ok(Xdb { bytes, version, format_version, created_at, regions, index })
    }

    /// Reads the whole file at `path` and validates it; errors name the path.
    pub fn open(path: &Path) -> Result<Xdb, GeoError> {
        let bytes = std::fs::read(path).map_err(|source| GeoError::Io { path: path.to_path_buf(), source })?;
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
        let ix = &self.index;
        let bucket = (addr >> self.version.bucket_shift()) as usize;
        let lo = *ix.first.get(bucket)? as usize;
        // Entries before first[bucket+1] end inside this bucket or earlier; the entry at
        // first[bucket+1] may still start inside it.
        let hi = (*ix.first.get(bucket + 1)? as usize + 1).min(ix.starts.len());
        // The last entry in lo..hi whose start <= addr (the index covers every address).
        let i = ix.starts.upper_bound(lo, hi, addr)?.checked_sub(1)?;
        let id = *ix.ids.get(i)?;
        if id == HOLE {
            return None;
        }
        let region = ix.region(id)?;
        Some(Segment { start: ix.starts.get(i)?, end: ix.end(i, self.version), region })
    }

    /// All segments with a region, in address order (holes skipped).
    pub fn segments(&self) -> impl Iterator<Item = Segment<'_>> + '_ {
        let ix = &self.index;
        (0..ix.starts.len()).filter_map(move |i| {
            let id = *ix.ids.get(i)?;
            if id == HOLE {
                return None;
            }
            Some(Segment { start: ix.starts.get(i)?, end: ix.end(i, self.version), region: ix.region(id)? })
        })
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
