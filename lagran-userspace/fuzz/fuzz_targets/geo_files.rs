//! Arbitrary bytes into every geo file reader (`lagran::geo::formats`: xdb,
//! `geoip.dat`, CIDR CSV, CIDR JSON, ip2region source text): never a panic; what a
//! reader accepts is a database whose segments are sorted and found again by search.
//!
//! Input layout: byte 0 picks the format (modulo the number of formats), the rest is
//! the file.
#![no_main]

use lagran::geo::formats::{Format, from_bytes};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let Some((&pick, file)) = data.split_first() else { return };
    let _ = Format::sniff(file);
    let format = Format::ALL[usize::from(pick) % Format::ALL.len()];
    let Ok(geo) = from_bytes(file.to_vec(), format) else { return };
    for xdb in [geo.v4.as_ref(), geo.v6.as_ref()].into_iter().flatten() {
        assert_eq!(xdb.segments().count(), xdb.len());
        let mut prev_end: Option<u128> = None;
        for seg in xdb.segments().take(256) {
            assert!(seg.start <= seg.end);
            assert!(prev_end.is_none_or(|p| p < seg.start), "segments sorted and disjoint");
            prev_end = Some(seg.end);
            assert_eq!(xdb.search_u128(seg.start).map(|s| s.region), Some(seg.region));
            assert_eq!(xdb.search_u128(seg.end).map(|s| s.region), Some(seg.region));
        }
    }
});
