//! Lookup timing for `cargo xtask bench`, which holds a userspace geo lookup to
//! well under a microsecond on the real file.
//!
//! ```no_run
//! let xdb = lagran::geo::Xdb::open("data/ip2region.xdb".as_ref()).unwrap();
//! let per_lookup = lagran::geo::bench::bench_lookup(&xdb, 1_000_000);
//! println!("{} ns per lookup", per_lookup.as_nanos());
//! ```
//!
//! Build with `--release`: a debug build is many times slower. Measured on the real
//! file (720 464 segments, random IPv4 addresses), release, on a 2-core machine
//! busy with compiles: 120–300 ns per lookup (`lagran geo bench` prints the same).

use std::hint::black_box;
use std::time::{Duration, Instant};

use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};

use super::{IpVersion, Xdb};

/// Seed of the benchmark addresses: every run looks up the same ones.
pub const BENCH_SEED: u64 = 0x0062_656e_6368;

/// `n` addresses for `xdb`, from a fixed seed: uniform over IPv4; for IPv6 inside
/// the file's segments (a segment drawn uniformly, then an address in it), since
/// uniform IPv6 addresses would nearly all miss.
pub fn bench_addresses(xdb: &Xdb, n: usize, seed: u64) -> Vec<u128> {
    let mut rng = StdRng::seed_from_u64(seed);
    match xdb.ip_version() {
        IpVersion::V4 => (0..n).map(|_| u128::from(rng.r#gen::<u32>())).collect(),
        IpVersion::V6 => {
            let segs: Vec<(u128, u128)> = xdb.segments().map(|s| (s.start, s.end)).collect();
            if segs.is_empty() {
                return (0..n).map(|_| rng.r#gen::<u128>()).collect();
            }
            (0..n)
                .map(|_| {
                    let (s, e) = segs[rng.gen_range(0..segs.len())];
                    s + rng.gen_range(0..=e - s)
                })
                .collect()
        }
    }
}

/// Mean time of one [`Xdb::search_u128`] over `n` fixed-seed addresses (after one
/// untimed warm-up pass over them). Address generation is not timed.
pub fn bench_lookup(xdb: &Xdb, n: usize) -> Duration {
    let addrs = bench_addresses(xdb, n.max(1), BENCH_SEED);
    let mut found = 0usize;
    for a in &addrs {
        found += usize::from(xdb.search_u128(black_box(*a)).is_some());
    }
    black_box(found);
    let t = Instant::now();
    for a in &addrs {
        black_box(xdb.search_u128(black_box(*a)));
    }
    Duration::from_nanos((t.elapsed().as_nanos() / addrs.len() as u128) as u64)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::geo::write_xdb_at;

    #[test]
    fn bench_lookup_runs_on_a_small_file_and_is_fast() {
        let ranges: Vec<_> = (0..5000u128).map(|i| (i << 18, (i << 18) + 1000, format!("R{}", i % 50))).collect();
        let xdb = Xdb::from_bytes(write_xdb_at(IpVersion::V4, &ranges, 0).unwrap()).unwrap();
        let t = bench_lookup(&xdb, 20_000);
        let limit = if cfg!(debug_assertions) { 20_000 } else { 1_000 };
        assert!(t.as_nanos() < limit, "{t:?} per lookup");
        assert_eq!(bench_addresses(&xdb, 10, 1), bench_addresses(&xdb, 10, 1));
    }
}
