//! The diff behind [`MapWriter::sync`](super::MapWriter::sync): which trie
//! entries to insert, update and delete to go from the prefix maps written
//! last to the table's, compared column by column (a spliced map only over
//! the blocks its splice split again).

use lagran_common::route_v4::RouteValue;

use crate::prefix_map::{PrefixAddr, PrefixMap, PrefixMapV6};

/// One trie entry as last written: block start (host order: `u32` for IPv4,
/// `u128` for IPv6), CIDR length, value.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) struct Route<A = u32> {
    pub addr: A,
    pub len: u8,
    pub value: RouteValue,
}

/// The answer id of a block's answer index (`None`: no valid answer, no entry).
pub(super) fn answer_of(ids: &[Option<u32>], value: u32) -> Option<u32> {
    ids.get(value as usize).copied().flatten()
}

/// The trie entries a name's prefix map makes, in order.
pub(super) fn routes_in<'a, A: PrefixAddr>(
    map: &'a PrefixMap<A>,
    ids: &'a [Option<u32>],
) -> impl Iterator<Item = Route<A>> + 'a {
    map.iter().filter_map(|p| {
        let answer_id = answer_of(ids, p.value)?;
        Some(Route { addr: p.addr, len: p.len, value: RouteValue { answer_id, scope: p.len as u32 } })
    })
}

/// The IPv6 trie entries of a name: one per block with a valid answer (the
/// program passes the others). Blocks inside `::ffff:0:0/96` are written too;
/// the program never looks an IPv4-mapped client up there (it uses the IPv4
/// trie, as the responder does).
pub(super) fn routes_of(v6: &PrefixMapV6, ids: &[Option<u32>]) -> Vec<Route<u128>> {
    routes_in(v6, ids).collect()
}

/// [`diff_routes`] of the trie entries two prefix maps make (`have`: none
/// when `None`), each block's value turned into an answer id through its
/// map's `ids` (a block without one makes no entry), walked over the maps'
/// columns: the real data's names have hundreds of thousands of blocks.
/// [`diff_spliced`] does the same for a map and one spliced from it, over
/// the blocks the splice split again only.
pub(super) fn diff_maps<A: PrefixAddr>(
    have: Option<(&PrefixMap<A>, &[Option<u32>])>,
    want: (&PrefixMap<A>, &[Option<u32>]),
) -> RouteDiff<A> {
    let (hs, hl, hv, hids) = match have {
        Some((m, ids)) => {
            let (s, l, v) = m.columns();
            (s, l, v, ids)
        }
        None => (&[][..], &[][..], &[][..], &[][..]),
    };
    let ((ws, wl, wv), wids) = (want.0.columns(), want.1);
    let count = entries(wv, wids);
    let (mut up, mut del) = (Vec::new(), Vec::new());
    let same = same_values(hids, wids);
    diff_columns((hs, hl, hv, hids), (ws, wl, wv, wids), &same, &mut up, &mut del);
    (up, del, count)
}

/// Per value, whether it makes the same entry in both maps (a value neither
/// id list holds makes none in either).
fn same_values(hids: &[Option<u32>], wids: &[Option<u32>]) -> Vec<bool> {
    (0..hids.len().max(wids.len())).map(|v| answer_of(hids, v as u32) == answer_of(wids, v as u32)).collect()
}

/// Trie entries to insert or update, entries to delete, and how many the
/// wanted routes make in all.
pub(super) type RouteDiff<A> = (Vec<Route<A>>, Vec<Route<A>>, usize);

/// How many trie entries blocks with these values make.
fn entries(values: &[u32], ids: &[Option<u32>]) -> usize {
    values.iter().filter(|&&v| answer_of(ids, v).is_some()).count()
}

/// [`diff_maps`] of a map (with the number of entries it made) and one
/// spliced from it: `None` when `want` was not spliced from that very map, or
/// when a copied block's answer id changed (the answers' kernel ids moved:
/// every block is compared then).
pub(super) fn diff_spliced<A: PrefixAddr>(
    have: (&PrefixMap<A>, &[Option<u32>], usize),
    want: (&PrefixMap<A>, &[Option<u32>]),
) -> Option<RouteDiff<A>> {
    let (hm, hids, mut count) = have;
    let (wm, wids) = want;
    let copied = wm.copied_from(hm)?;
    let ((hs, hl, hv), (ws, wl, wv)) = (hm.columns(), wm.columns());
    // A copied block makes the same entry in both maps when its old value and
    // the value it became have the same answer id (or neither has one).
    let to = |v: u32| copied.remap.map_or(Some(v), |m| m.get(v as usize).copied());
    let keeps = |v: u32| to(v).is_some_and(|n| answer_of(hids, v) == answer_of(wids, n));
    let kept: Vec<bool> = (0..hids.len() as u32).map(keeps).collect();
    for r in copied.runs {
        let values = &hv[r.from..r.from + r.len];
        if !values.iter().all(|&v| kept.get(v as usize).copied().unwrap_or_else(|| keeps(v))) {
            return None;
        }
    }
    // Between runs (and before the first, after the last), both maps' blocks
    // cover the same addresses: those are diffed block by block.
    let (mut up, mut del) = (Vec::new(), Vec::new());
    let same = same_values(hids, wids);
    for (hg, wg) in copied.gaps(hs.len(), ws.len()) {
        let h = (&hs[hg.clone()], &hl[hg.clone()], &hv[hg], hids);
        let w = (&ws[wg.clone()], &wl[wg.clone()], &wv[wg], wids);
        count = count - entries(h.2, hids) + entries(w.2, wids);
        diff_columns(h, w, &same, &mut up, &mut del);
    }
    Some((up, del, count))
}

/// One map's blocks as columns (starts, lengths, values) and its answer ids.
type Blocks<'a, A> = (&'a [A], &'a [u8], &'a [u32], &'a [Option<u32>]);

/// The merge of two maps' blocks over the same addresses: entries to write
/// into `up`, entries to remove into `del`. `same`: [`same_values`] of the
/// two maps' ids.
fn diff_columns<A: PrefixAddr>(
    have: Blocks<'_, A>,
    want: Blocks<'_, A>,
    same: &[bool],
    up: &mut Vec<Route<A>>,
    del: &mut Vec<Route<A>>,
) {
    let ((hs, hl, hv, hids), (ws, wl, wv, wids)) = (have, want);
    let route =
        |addr: A, len: u8, answer_id: u32| Route { addr, len, value: RouteValue { answer_id, scope: len as u32 } };
    let unchanged = |v: u32| same.get(v as usize).copied().unwrap_or(true);
    let (mut i, mut j) = (0, 0);
    while i < hs.len() && j < ws.len() {
        // The long stretches one node's change leaves alone: same block, same value.
        if hs[i] == ws[j] && hl[i] == wl[j] && hv[i] == wv[j] && unchanged(hv[i]) {
            i += 1;
            j += 1;
            continue;
        }
        let (h, w) = ((hs[i], hl[i]), (ws[j], wl[j]));
        if h == w {
            match (answer_of(hids, hv[i]), answer_of(wids, wv[j])) {
                (Some(a), Some(b)) if a != b => up.push(route(w.0, w.1, b)),
                (None, Some(b)) => up.push(route(w.0, w.1, b)),
                (Some(a), None) => del.push(route(h.0, h.1, a)),
                _ => {}
            }
            i += 1;
            j += 1;
        } else if h < w {
            if let Some(a) = answer_of(hids, hv[i]) {
                del.push(route(h.0, h.1, a));
            }
            i += 1;
        } else {
            if let Some(b) = answer_of(wids, wv[j]) {
                up.push(route(w.0, w.1, b));
            }
            j += 1;
        }
    }
    for i in i..hs.len() {
        if let Some(a) = answer_of(hids, hv[i]) {
            del.push(route(hs[i], hl[i], a));
        }
    }
    for j in j..ws.len() {
        if let Some(b) = answer_of(wids, wv[j]) {
            up.push(route(ws[j], wl[j], b));
        }
    }
}

/// Trie entries to insert or update, and to delete, to go from `have` to `want`
/// (both sorted by address, then length), and how many `want` holds.
pub(super) fn diff_routes<A: Copy + Ord>(
    have: impl IntoIterator<Item = Route<A>>,
    want: impl IntoIterator<Item = Route<A>>,
) -> RouteDiff<A> {
    let (mut up, mut del, mut count) = (Vec::new(), Vec::new(), 0);
    let (mut have, mut want) = (have.into_iter().peekable(), want.into_iter().peekable());
    loop {
        match (have.peek().copied(), want.peek().copied()) {
            (Some(h), Some(w)) if (h.addr, h.len) == (w.addr, w.len) => {
                if h.value != w.value {
                    up.push(w);
                }
                have.next();
                want.next();
                count += 1;
            }
            (Some(h), Some(w)) if (h.addr, h.len) < (w.addr, w.len) => {
                del.push(h);
                have.next();
            }
            (Some(_), Some(w)) | (None, Some(w)) => {
                up.push(w);
                want.next();
                count += 1;
            }
            (Some(h), None) => {
                del.push(h);
                have.next();
            }
            (None, None) => break,
        }
    }
    (up, del, count)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn r(addr: u32, len: u8, id: u32) -> Route {
        Route { addr, len, value: RouteValue { answer_id: id, scope: len as u32 } }
    }
    #[test]
    fn diff_touches_only_changes() {
        let have = [r(0, 1, 1), r(0x8000_0000, 2, 2), r(0xc000_0000, 2, 3)];
        let want = [r(0, 1, 1), r(0x8000_0000, 2, 9), r(0xc000_0000, 3, 3), r(0xe000_0000, 3, 3)];
        let (up, del, n) = diff_routes(have, want);
        assert_eq!(up, vec![r(0x8000_0000, 2, 9), r(0xc000_0000, 3, 3), r(0xe000_0000, 3, 3)]);
        assert_eq!(del, vec![r(0xc000_0000, 2, 3)]);
        assert_eq!(n, want.len());
        let (up, del, _) = diff_routes(want, want);
        assert!(up.is_empty() && del.is_empty(), "no change, no writes");
    }

    #[test]
    fn the_column_diff_writes_what_the_route_diff_writes() {
        use crate::prefix_map::PrefixMapV4;
        use rand::{Rng as _, SeedableRng as _};
        let mut rng = rand::rngs::StdRng::seed_from_u64(7);
        // Random maps over a few answers; ids with gaps (answers the kernel cannot serve).
        let map = |rng: &mut rand::rngs::StdRng| {
            let mut cuts: Vec<u32> = (0..rng.gen_range(0..40)).map(|_| rng.r#gen::<u32>() & 0xffff_ff00).collect();
            cuts.sort_unstable();
            cuts.dedup();
            let mut ranges = Vec::new();
            let mut start = 0u32;
            for c in cuts.into_iter().filter(|&c| c > 0) {
                ranges.push((start, c - 1, rng.gen_range(0..5)));
                start = c;
            }
            ranges.push((start, u32::MAX, rng.gen_range(0..5)));
            PrefixMapV4::from_ranges(ranges, 0)
        };
        let ids = |rng: &mut rand::rngs::StdRng| -> Vec<Option<u32>> {
            (0..5).map(|_| if rng.gen_bool(0.2) { None } else { Some(rng.gen_range(1..4)) }).collect()
        };
        let mut refused = 0;
        for round in 0..1000 {
            let (a, b) = (map(&mut rng), map(&mut rng));
            let ia = ids(&mut rng);
            let (b, ib) = match round % 4 {
                // Unrelated maps.
                0 => (b, ids(&mut rng)),
                // Spliced, and every answer's kernel id moved.
                1 => (a.splice(&[(0x0a00_0000, 0x0a0f_ffff, 4)], None), ids(&mut rng)),
                // Spliced with a few random changes and a build's renumbering of
                // the answers (each answer's id follows it); in round 3, one
                // answer's id changed as well.
                _ => {
                    let mut perm: Vec<u32> = (0..5).collect();
                    for i in (1..5).rev() {
                        perm.swap(i, rng.gen_range(0..=i));
                    }
                    let mut cuts: Vec<u32> = (0..rng.gen_range(0..4) * 2).map(|_| rng.r#gen::<u32>()).collect();
                    cuts.sort_unstable();
                    cuts.dedup();
                    let changes: Vec<(u32, u32, u32)> =
                        cuts.chunks_exact(2).map(|c| (c[0], c[1], rng.gen_range(0..5))).collect();
                    let b = a.splice(&changes, Some(&perm));
                    let mut ib = vec![None; 5];
                    for (v, &to) in perm.iter().enumerate() {
                        ib[to as usize] = ia[v];
                    }
                    if round % 4 == 3 {
                        ib[rng.gen_range(0..5)] = Some(rng.gen_range(1..4));
                    }
                    (b, ib)
                }
            };
            let want = diff_routes(routes_in(&a, &ia), routes_in(&b, &ib));
            let count = routes_in(&a, &ia).count();
            assert_eq!(diff_maps(Some((&a, &ia)), (&b, &ib)), want, "round {round}");
            let spliced = diff_spliced((&a, &ia, count), (&b, &ib));
            // (In rounds 1 and 3 it may or may not apply: the moved ids need not be in copied blocks.)
            assert!(spliced.is_some() || round % 4 != 2, "round {round}: the splice alone compared");
            if let Some(d) = spliced {
                assert_eq!(d, want, "round {round}: spliced");
            } else if round % 2 == 1 {
                refused += 1;
            }
            let fresh = diff_routes(std::iter::empty(), routes_in(&b, &ib));
            assert_eq!(diff_maps(None, (&b, &ib)), fresh, "round {round}: nothing written before");
        }
        assert!(refused > 100, "copied blocks whose ids moved send the diff over every block ({refused} times)");
    }
}
