//! The project's own ip2region xdb writer (structure version 3, IPv4 or IPv6).
//!
//! Output has the same layout as the reference maker (lionsoul2014/ip2region
//! `maker/golang/xdb/maker.go`): header, vector index, deduplicated region strings,
//! then the segment index, with every range split at /16 boundaries so each vector
//! index cell covers whole entries. See [`super::xdb`] for the byte layout.
//!
//! Gaps: the reference maker requires the input to cover the whole address space,
//! because its searchers assume every /16 cell is filled. This writer accepts gaps
//! (they are common in hand-made test data and override tables) and fills each one
//! with one *hole* entry (`data_len = 0`, `data_ptr = 0`), not split at /16
//! boundaries: every vector index cell the gap overlaps points at that one entry. The
//! reference searchers binary-search the entries a cell points at, find the hole and
//! return the empty string, their "not found"; [`Xdb`](super::Xdb) returns `None` and
//! does not list holes. So the output always covers the whole space, every vector
//! index cell is non-empty, and a sparse file stays small (an empty IPv6 file is one
//! entry, not 65 536).

use std::collections::HashMap;

use super::GeoError;
use super::xdb::{DATA_START, HEADER_LEN, IpVersion, VECTOR_CELL_LEN, VECTOR_LEN};

/// Structure version written in the header.
const FORMAT_VERSION: u16 = 3;
/// Index policy code for "vector index".
const VECTOR_INDEX_POLICY: u16 = 1;
/// Pointer width written in the header (`runtime_ptr_bytes`).
const PTR_BYTES: u16 = 4;

/// Writes an xdb holding `ranges`: sorted, non-overlapping, inclusive `(start, end,
/// region)` triples (IPv4 addresses as values below 2^32). Gaps between ranges are
/// allowed and become holes (see the module docs). Region strings must be non-empty
/// and at most 65 535 bytes. The header's `created_at` is the current time; use
/// [`write_xdb_at`] for reproducible output.
pub fn write_xdb(version: IpVersion, ranges: &[(u128, u128, String)]) -> Result<Vec<u8>, GeoError> {
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_secs().min(u64::from(u32::MAX)) as u32)
        .unwrap_or(0);
    write_xdb_at(version, ranges, now)
}

/// [`write_xdb`] with a fixed `created_at` (unix seconds), so the same input always
/// gives the same bytes.
pub fn write_xdb_at(version: IpVersion, ranges: &[(u128, u128, String)], created_at: u32) -> Result<Vec<u8>, GeoError> {
    validate(version, ranges)?;

    // 1. Full coverage: the ranges plus holes (None) for the gaps.
    let max = version.max_addr();
    let mut pieces: Vec<(u128, u128, Option<usize>)> = Vec::with_capacity(ranges.len() * 2 + 1);
    let mut next: Option<u128> = Some(0); // first address not yet covered; None = all covered
    for (i, (start, end, _)) in ranges.iter().enumerate() {
        if let Some(n) = next
            && n < *start
        {
            pieces.push((n, start - 1, None));
        }
        pieces.push((*start, *end, Some(i)));
        next = end.checked_add(1).filter(|n| *n <= max);
    }
    if let Some(n) = next {
        pieces.push((n, max, None));
    }

    // 2. Region strings, deduplicated, in first-use order after the vector index.
    let mut out = vec![0u8; DATA_START];
    let mut region_ptr: HashMap<&str, u32> = HashMap::new();
    for (_, _, region) in ranges {
        if region_ptr.contains_key(region.as_str()) {
            continue;
        }
        let ptr = ptr32(out.len())?;
        out.extend_from_slice(region.as_bytes());
        region_ptr.insert(region.as_str(), ptr);
    }

    // 3. Segment index, split at /16 boundaries, and the vector index cells.
    let shift = version.bucket_shift();
    let entry_len = version.entry_len();
    let mut vector = vec![(0u32, 0u32); VECTOR_LEN / VECTOR_CELL_LEN];
    let index_start = ptr32(out.len())?;
    let mut last_entry = index_start;
    for (start, end, region) in pieces {
        let Some(i) = region else {
            // A hole is one entry, shared by every /16 cell it overlaps.
            let ptr = push_entry(&mut out, version, start, end, 0, 0)?;
            for cell in &mut vector[(start >> shift) as usize..=(end >> shift) as usize] {
                if cell.0 == 0 {
                    cell.0 = ptr;
                }
                cell.1 = ptr32(out.len())?;
            }
            last_entry = ptr;
            continue;
        };
        let r = ranges[i].2.as_str();
        let data_len = r.len() as u16; // validated <= u16::MAX
        let data_ptr = region_ptr.get(r).copied().unwrap_or(0);
        // A range is split at /16 boundaries like the reference maker does.
        let mut s = start;
        loop {
            let bucket = (s >> shift) as usize;
            let bucket_end = s | ((1u128 << shift) - 1);
            let e = end.min(bucket_end);
            let ptr = push_entry(&mut out, version, s, e, data_len, data_ptr)?;
            let cell = &mut vector[bucket];
            if cell.0 == 0 {
                cell.0 = ptr;
            }
            cell.1 = ptr32(out.len())?; // exclusive end
            last_entry = ptr;
            if e == end {
                break;
            }
            s = e + 1;
        }
    }
    debug_assert_eq!((out.len() - index_start as usize) % entry_len, 0);

    // 4. Header and vector index.
    let header = &mut out[..HEADER_LEN];
    header[0..2].copy_from_slice(&FORMAT_VERSION.to_le_bytes());
    header[2..4].copy_from_slice(&VECTOR_INDEX_POLICY.to_le_bytes());
    header[4..8].copy_from_slice(&created_at.to_le_bytes());
    header[8..12].copy_from_slice(&index_start.to_le_bytes());
    header[12..16].copy_from_slice(&last_entry.to_le_bytes());
    header[16..18].copy_from_slice(&version.header_id().to_le_bytes());
    header[18..20].copy_from_slice(&PTR_BYTES.to_le_bytes());
    for (cell, (s, e)) in vector.iter().enumerate() {
        let off = HEADER_LEN + cell * VECTOR_CELL_LEN;
        out[off..off + 4].copy_from_slice(&s.to_le_bytes());
        out[off + 4..off + 8].copy_from_slice(&e.to_le_bytes());
    }
    Ok(out)
}

/// Appends one segment index entry; returns its offset.
fn push_entry(
    out: &mut Vec<u8>,
    version: IpVersion,
    start: u128,
    end: u128,
    data_len: u16,
    data_ptr: u32,
) -> Result<u32, GeoError> {
    let ptr = ptr32(out.len())?;
    match version {
        IpVersion::V4 => {
            // Values are validated to fit in 32 bits.
            out.extend_from_slice(&(start as u32).to_le_bytes());
            out.extend_from_slice(&(end as u32).to_le_bytes());
        }
        IpVersion::V6 => {
            out.extend_from_slice(&start.to_be_bytes());
            out.extend_from_slice(&end.to_be_bytes());
        }
    }
    out.extend_from_slice(&data_len.to_le_bytes());
    out.extend_from_slice(&data_ptr.to_le_bytes());
    Ok(ptr)
}

/// A file offset as the format's u32 pointer, or [`GeoError::TooLarge`].
fn ptr32(len: usize) -> Result<u32, GeoError> {
    u32::try_from(len).map_err(|_| GeoError::TooLarge { len })
}

fn validate(version: IpVersion, ranges: &[(u128, u128, String)]) -> Result<(), GeoError> {
    let max = version.max_addr();
    let mut prev_end: Option<u128> = None;
    for (index, (start, end, region)) in ranges.iter().enumerate() {
        let bad = |reason: String| GeoError::InvalidRange { index, start: *start, end: *end, reason };
        if start > end {
            return Err(bad("start is after end".into()));
        }
        if *end > max {
            return Err(bad(format!("end is beyond the largest {version} address")));
        }
        if let Some(p) = prev_end
            && *start <= p
        {
            return Err(bad(format!(
                "overlaps or precedes the previous range ending at {p:#x} (ranges must be sorted and disjoint)"
            )));
        }
        if region.is_empty() {
            return Err(bad("empty region string (an empty region marks a hole)".into()));
        }
        if region.len() > usize::from(u16::MAX) {
            return Err(bad(format!("region is {} bytes, more than the 65535 a u16 length holds", region.len())));
        }
        prev_end = Some(*end);
    }
    Ok(())
}
