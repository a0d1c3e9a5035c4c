//! Prefix maps from per-partition answers: the partition ranges of both
//! families with each partition's answer, joined into runs, and the maps
//! built from them.

use crate::geo::reserved;
use crate::partition::{PartitionTable, UNKNOWN};
use crate::prefix_map::{PrefixMapBuilder, PrefixMapV4, PrefixMapV6, push_merged};

/// Lays `over` ranges (sorted by start, non-overlapping) on `base`, computing
/// each covered piece's value from the value underneath.
pub(in crate::scheduler) fn overlay_with<K>(
    base: Vec<(u128, u128, u32)>,
    over: &[(u128, u128, K)],
    mut f: impl FnMut(u32, &K) -> u32,
) -> Vec<(u128, u128, u32)> {
    if over.is_empty() {
        return base;
    }
    let mut out = Vec::with_capacity(base.len() + over.len() * 2);
    let mut oi = 0;
    for (mut s, e, v) in base {
        loop {
            while oi < over.len() && over[oi].1 < s {
                oi += 1;
            }
            if oi >= over.len() || over[oi].0 > e {
                out.push((s, e, v));
                break;
            }
            let (os, oe, ref k) = over[oi];
            if os > s {
                out.push((s, os - 1, v));
            }
            let end = oe.min(e);
            out.push((os.max(s), end, f(v, k)));
            if end == e {
                break;
            }
            s = end + 1;
            oi += 1;
        }
    }
    out
}

/// Inclusive address ranges with a value, sorted.
pub(in crate::scheduler) type Runs = Vec<(u128, u128, u32)>;

/// The partition ranges of both families with each partition's answer,
/// adjacent ranges of equal answer merged ([`partition_runs_into`]).
pub(in crate::scheduler) fn partition_runs(
    partitions: &PartitionTable,
    by_partition: &[u32],
    unlocated: u32,
) -> (Runs, Runs) {
    let (mut v4, mut v6) = (Runs::new(), Runs::new());
    partition_runs_into(
        partitions,
        by_partition,
        unlocated,
        |s, e, v| push_merged(&mut v4, s, e, v),
        |s, e, v| push_merged(&mut v6, s, e, v),
    );
    (v4, v6)
}

/// The partition maps of both families, built as the runs come (no list in
/// between: the real file's IPv4 runs alone are ~150 000).
pub(in crate::scheduler) fn partition_maps(
    partitions: &PartitionTable,
    by_partition: &[u32],
    unlocated: u32,
) -> (PrefixMapV4, PrefixMapV6) {
    let fill = by_partition[0];
    let mut v4 = PrefixMapBuilder::<u32>::new(fill, partitions.v4_ranges().len() / 4);
    let mut v6 = PrefixMapBuilder::<u128>::new(fill, partitions.v6_ranges().len() / 4);
    partition_runs_into(partitions, by_partition, unlocated, |s, e, v| v4.push(s, e, v), |s, e, v| v6.push(s, e, v));
    (v4.finish(), v6.finish())
}

/// The partition ranges of both families with each partition's answer, in
/// address order, to `v4` and `v6`. Unknown ranges outside the
/// special-purpose ones (public, but not located) get `unlocated`: a private
/// or reserved source stays in the unknown partition: it is answered
/// from the unknown partition, never for its resolver.
fn partition_runs_into(
    partitions: &PartitionTable,
    by_partition: &[u32],
    unlocated: u32,
    v4: impl FnMut(u128, u128, u32),
    v6: impl FnMut(u128, u128, u32),
) {
    let special4 = reserved::special_ranges_v4().iter().map(|&(s, e)| (s as u128, e as u128));
    let special6 = reserved::special_ranges_v6().iter().copied();
    family_runs(partitions.v4_ranges(), special4, by_partition, unlocated, v4);
    family_runs(partitions.v6_ranges(), special6, by_partition, unlocated, v6);
}

/// [`partition_runs_into`] of one family in one pass: `special` (sorted,
/// non-overlapping) splits the unknown partition's ranges into the resolver
/// fallback outside them and the unknown answer inside.
fn family_runs<A: crate::prefix_map::PrefixAddr>(
    ranges: &[(A, A, u32)],
    special: impl Iterator<Item = (u128, u128)>,
    by_partition: &[u32],
    unlocated: u32,
    mut out: impl FnMut(u128, u128, u32),
) {
    let special: Vec<(u128, u128)> = special.collect();
    let unknown = by_partition[UNKNOWN as usize];
    let mut si = 0;
    // Located ranges next to each other with the same answer (most of them:
    // the real file's 683 829 IPv4 ranges give ~150 000 runs with 100 nodes)
    // are joined here, in the family's own width, before `out` sees them.
    let mut run: Option<(A, A, u32)> = None;
    for &(s, e, p) in ranges {
        if p != UNKNOWN {
            let v = by_partition[p as usize];
            match &mut run {
                Some(r) if r.2 == v && r.1.to_u128().checked_add(1) == Some(s.to_u128()) => r.1 = e,
                r => {
                    if let Some((rs, re, rv)) = r.replace((s, e, v)) {
                        out(rs.to_u128(), re.to_u128(), rv);
                    }
                }
            }
            continue;
        }
        if let Some((rs, re, rv)) = run.take() {
            out(rs.to_u128(), re.to_u128(), rv);
        }
        let (s, e) = (s.to_u128(), e.to_u128());
        while si < special.len() && special[si].1 < s {
            si += 1;
        }
        let (mut cur, mut k) = (s, si);
        loop {
            if k >= special.len() || special[k].0 > e {
                out(cur, e, unlocated);
                break;
            }
            let (ss, se) = special[k];
            if ss > cur {
                out(cur, ss - 1, unlocated);
            }
            let end = se.min(e);
            out(ss.max(cur), end, unknown);
            if end == e {
                break;
            }
            cur = end + 1;
            k += 1;
        }
    }
    if let Some((rs, re, rv)) = run {
        out(rs.to_u128(), re.to_u128(), rv);
    }
}

/// The prefix maps of both families from their runs.
pub(in crate::scheduler) fn maps_of_runs(runs4: Runs, runs6: Runs, fill: u32) -> (PrefixMapV4, PrefixMapV6) {
    let v4 = PrefixMapV4::from_ranges(runs4.into_iter().map(|(s, e, v)| (s as u32, e as u32, v)), fill);
    let v6 = PrefixMapV6::from_ranges(runs6, fill);
    (v4, v6)
}
