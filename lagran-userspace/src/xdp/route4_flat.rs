//! Writes the flat IPv4 route arrays (`lagran_common::route_v4_flat`) beside the
//! trie: each served name gets a block of `lagran_route4_l1`, and each /16 its
//! routes split gets a group of `lagran_route4_l2`.
//!
//! Every slot carries the exact CIDR length of the route that covers it (the
//! ECS scope stays the route table's); a /24 that holds routes longer than /24
//! is marked "ask the trie", which always holds every route.
//!
//! Both arrays are written through a shared mapping (`BPF_F_MMAPABLE`). Order,
//! so that a packet racing a write sees an old route, a new one or none (and is
//! passed), never a wrong one:
//! - a /16 whose group changes gets a *new* group, written in full before the
//!   `l1` slot that points at it (a release fence between them);
//! - groups and blocks given up are reused only from the next sync on, when no
//!   packet can still be reading them.

use std::collections::{BTreeMap, HashMap};
use std::sync::atomic::{Ordering, fence};

use aya::maps::Map;
use lagran_common::route_v4_flat::{
    self as flat, FLAT_NAMES, L1_ENTRIES, L1_SLOTS, L2_ENTRIES, L2_GROUPS, L2_SLOTS, MAP_NAME_L1, MAP_NAME_L2,
};

use super::{XdpError, mapping::Mapping};

/// One route: block start (host order), CIDR length, answer id.
pub type FlatRoute = (u32, u8, u32);

/// What a name's routes become: its `l1` block with `NONE`/`LEAF` slots (the
/// split /16s are `NONE` here) and the `l2` slots of each split /16.
#[derive(Debug, PartialEq, Eq)]
pub struct Layout {
    pub l1: Vec<u32>,
    pub groups: BTreeMap<u16, Vec<u32>>,
}

/// Lays out a name's routes (blocks that do not overlap, as a prefix map's).
pub fn layout(routes: &[FlatRoute]) -> Layout {
    let mut l1 = vec![flat::NONE; L1_SLOTS as usize];
    let mut groups: BTreeMap<u16, Vec<u32>> = BTreeMap::new();
    for &(addr, len, answer) in routes {
        let len32 = u32::from(len);
        let v = flat::leaf(answer, len32);
        if len <= 16 {
            let start = (addr >> 16) as usize;
            let n = 1usize << (16 - len32);
            l1[start..start + n].fill(v);
            continue;
        }
        let g = groups.entry((addr >> 16) as u16).or_insert_with(|| vec![flat::NONE; L2_SLOTS as usize]);
        let j = ((addr >> 8) & 0xff) as usize;
        if len <= 24 {
            g[j..j + (1usize << (24 - len32))].fill(v);
        } else {
            g[j] = flat::TRIE;
        }
    }
    Layout { l1, groups }
}

/// One /16 of a name's layout, from its full sorted routes: the `l1` slot
/// (`LEAF` of a route of /16 or shorter, else `NONE`) and, when routes split
/// the /16, its `l2` slots. The same as [`layout`] gives for that /16.
pub fn layout16(routes: &[FlatRoute], hi: u16) -> (u32, Option<Vec<u32>>) {
    let lo = u32::from(hi) << 16;
    let top = lo | 0xffff;
    // Blocks do not overlap, so their last addresses are sorted as their starts.
    let last = |&(addr, len, _): &FlatRoute| addr | (u32::MAX.checked_shr(u32::from(len)).unwrap_or(0));
    let first = routes.partition_point(|r| last(r) < lo);
    let mut group: Option<Vec<u32>> = None;
    for &(addr, len, answer) in routes[first..].iter().take_while(|r| r.0 <= top) {
        let len32 = u32::from(len);
        let v = flat::leaf(answer, len32);
        if len <= 16 {
            return (v, None);
        }
        let g = group.get_or_insert_with(|| vec![flat::NONE; L2_SLOTS as usize]);
        let j = ((addr >> 8) & 0xff) as usize;
        if len <= 24 {
            g[j..j + (1usize << (24 - len32))].fill(v);
        } else {
            g[j] = flat::TRIE;
        }
    }
    (flat::NONE, group)
}

/// How many /16s routes longer than /16 split (each takes an `l2` group).
fn split_sixteens(routes: &[FlatRoute]) -> usize {
    let mut last = None;
    let mut n = 0;
    for &(addr, len, _) in routes {
        if len > 16 && last != Some(addr >> 16) {
            last = Some(addr >> 16);
            n += 1;
        }
    }
    n
}

/// The /16s a block of `len` bits at `addr` covers.
pub fn sixteens(addr: u32, len: u8) -> std::ops::RangeInclusive<u16> {
    let last = addr | u32::MAX.checked_shr(u32::from(len)).unwrap_or(0);
    ((addr >> 16) as u16)..=((last >> 16) as u16)
}

/// Bytes per slot in the mapping (two `u32` slots per `u64` element).
const STRIDE: usize = 4;

/// One array's shared mapping, as `u32` slots.
struct Mapped {
    mapping: Mapping,
    entries: usize,
}

impl Mapped {
    fn new(map: Map, name: &'static str, entries: u32) -> Result<Mapped, XdpError> {
        Ok(Mapped { mapping: Mapping::new(map, name, entries as usize * STRIDE, true)?, entries: entries as usize })
    }

    fn set(&self, i: usize, v: u32) {
        assert!(i < self.entries);
        self.mapping.u32(i * STRIDE).store(v, Ordering::Relaxed)
    }

    fn zero(&self) {
        for i in 0..self.entries {
            self.set(i, 0);
        }
    }
}

/// What one name has in the arrays.
struct Block {
    /// 0-based block index (`NameValue::route4` is this plus one).
    index: u32,
    /// The block's `l1` slots as written.
    l1: Vec<u32>,
    /// Split /16 -> (group, its slots as written).
    groups: HashMap<u16, (u32, Vec<u32>)>,
}

/// The flat arrays and what is written in them.
pub struct FlatV4 {
    l1: Mapped,
    l2: Mapped,
    blocks: HashMap<u32, Block>,
    free_blocks: Vec<u32>,
    free_groups: Vec<u32>,
    /// Given up during this sync: reusable from the next one.
    retired_blocks: Vec<u32>,
    retired_groups: Vec<u32>,
    next_group: u32,
    /// Names that did not fit at their last write (warned once).
    unfit: std::collections::HashSet<u32>,
}

impl FlatV4 {
    /// The arrays of a loaded object (`None` for an object without them: every
    /// name then uses the trie).
    pub fn new(l1: Option<Map>, l2: Option<Map>) -> Result<Option<FlatV4>, XdpError> {
        let (Some(l1), Some(l2)) = (l1, l2) else { return Ok(None) };
        let f = FlatV4 {
            l1: Mapped::new(l1, MAP_NAME_L1, L1_ENTRIES)?,
            l2: Mapped::new(l2, MAP_NAME_L2, L2_ENTRIES)?,
            blocks: HashMap::new(),
            free_blocks: (0..FLAT_NAMES).rev().collect(),
            free_groups: Vec::new(),
            retired_blocks: Vec::new(),
            retired_groups: Vec::new(),
            next_group: 0,
            unfit: std::collections::HashSet::new(),
        };
        Ok(Some(f))
    }

    /// Clears both arrays and forgets every block (maps reused from anything).
    pub fn reset(&mut self) {
        self.l1.zero();
        self.l2.zero();
        self.blocks.clear();
        self.free_blocks = (0..FLAT_NAMES).rev().collect();
        self.free_groups.clear();
        self.retired_blocks.clear();
        self.retired_groups.clear();
        self.next_group = 0;
        self.unfit.clear();
    }

    /// The `NameValue::route4` of name `id` (0: none).
    pub fn route4(&self, id: u32) -> u32 {
        self.blocks.get(&id).map_or(0, |b| b.index + 1)
    }

    /// Groups in use (for the sync statistics).
    pub fn groups_used(&self) -> usize {
        self.blocks.values().map(|b| b.groups.len()).sum()
    }

    fn groups_free(&self) -> usize {
        self.free_groups.len() + (L2_GROUPS - self.next_group) as usize
    }

    /// Writes name `id`'s routes; returns its `route4` (0 when the arrays have no
    /// room: the name's routes are then looked up in the trie).
    pub fn write(&mut self, id: u32, routes: &[FlatRoute]) -> u32 {
        // Counted before anything is laid out: a name that cannot fit costs a
        // pass over its routes, not a layout, at every sync.
        let reusable = self.blocks.get(&id).map_or(0, |b| b.groups.len());
        if split_sixteens(routes) > self.groups_free() + reusable {
            if let Some(block) = self.blocks.remove(&id) {
                self.retire(block);
            }
            self.full(id);
            return 0;
        }
        let lay = layout(routes);
        let mut block = match self.blocks.remove(&id) {
            Some(b) => b,
            None => match self.free_blocks.pop() {
                Some(index) => Block { index, l1: vec![flat::NONE; L1_SLOTS as usize], groups: HashMap::new() },
                None => return 0,
            },
        };
        let new_groups = lay.groups.iter().filter(|(hi, g)| block.groups.get(hi).is_none_or(|(_, have)| have != *g));
        if new_groups.count() > self.groups_free() {
            self.retire(block);
            self.full(id);
            return 0;
        }
        self.unfit.remove(&id);
        let base = block.index as usize * L1_SLOTS as usize;
        // 1. New groups, written in full.
        let mut groups: HashMap<u16, (u32, Vec<u32>)> = HashMap::with_capacity(lay.groups.len());
        for (hi, slots) in lay.groups {
            match block.groups.remove(&hi) {
                Some((g, have)) if have == slots => {
                    groups.insert(hi, (g, have));
                    continue;
                }
                // Replaced below: reusable from the next sync on.
                Some((g, _)) => self.retired_groups.push(g),
                None => {}
            }
            let g = self.take_group();
            let gb = g as usize * L2_SLOTS as usize;
            for (j, &v) in slots.iter().enumerate() {
                self.l2.set(gb + j, v);
            }
            groups.insert(hi, (g, slots));
        }
        fence(Ordering::Release);
        // 2. The block's l1 slots, then the groups nothing points at any more.
        let mut l1 = lay.l1;
        for (&hi, &(g, _)) in &groups {
            l1[hi as usize] = flat::group(g);
        }
        for (i, (&want, have)) in l1.iter().zip(block.l1.iter()).enumerate() {
            if want != *have {
                self.l1.set(base + i, want);
            }
        }
        for (_, (g, _)) in block.groups.drain() {
            self.retired_groups.push(g);
        }
        block.l1 = l1;
        block.groups = groups;
        let route4 = block.index + 1;
        self.blocks.insert(id, block);
        route4
    }

    /// Rewrites only the /16s in `touched` of name `id`'s block (a sync that
    /// diffed the name's routes against the last ones: every other /16 stands
    /// as written); `routes16(hi)` gives the sorted routes that cover /16 `hi`.
    /// A name without a block is written whole from `all()`, except one that
    /// did not fit before: it stays on the trie until `retry_unfit` (a name
    /// written afresh, as after a reset). Returns its `route4`, as [`FlatV4::write`].
    pub fn update(
        &mut self,
        id: u32,
        touched: &std::collections::BTreeSet<u16>,
        routes16: impl Fn(u16) -> Vec<FlatRoute>,
        all: impl FnOnce() -> Vec<FlatRoute>,
        retry_unfit: bool,
    ) -> u32 {
        let Some(mut block) = self.blocks.remove(&id) else {
            if self.unfit.contains(&id) && !retry_unfit {
                return 0;
            }
            return self.write(id, &all());
        };
        let wanted: Vec<(u16, u32, Option<Vec<u32>>)> = touched
            .iter()
            .map(|&hi| {
                let (l1, g) = layout16(&routes16(hi), hi);
                (hi, l1, g)
            })
            .collect();
        let new_groups = wanted
            .iter()
            .filter(|(hi, _, g)| g.as_ref().is_some_and(|g| block.groups.get(hi).is_none_or(|(_, have)| have != g)))
            .count();
        if new_groups > self.groups_free() {
            self.retire(block);
            self.full(id);
            return 0;
        }
        let base = block.index as usize * L1_SLOTS as usize;
        // 1. New groups, written in full before anything points at them.
        let mut l1_now: Vec<(u16, u32)> = Vec::with_capacity(wanted.len());
        let mut given_up: Vec<u32> = Vec::new();
        for (hi, leaf, group) in wanted {
            let old = block.groups.remove(&hi);
            let Some(slots) = group else {
                given_up.extend(old.map(|(g, _)| g));
                l1_now.push((hi, leaf));
                continue;
            };
            let g = match old {
                Some((g, have)) if have == slots => {
                    block.groups.insert(hi, (g, have));
                    g
                }
                old => {
                    given_up.extend(old.map(|(g, _)| g));
                    let g = self.take_group();
                    let gb = g as usize * L2_SLOTS as usize;
                    for (j, &v) in slots.iter().enumerate() {
                        self.l2.set(gb + j, v);
                    }
                    block.groups.insert(hi, (g, slots));
                    g
                }
            };
            l1_now.push((hi, flat::group(g)));
        }
        fence(Ordering::Release);
        // 2. The l1 slots, then the groups nothing points at any more.
        for (hi, want) in l1_now {
            if block.l1[hi as usize] != want {
                self.l1.set(base + hi as usize, want);
                block.l1[hi as usize] = want;
            }
        }
        self.retired_groups.extend(given_up);
        let route4 = block.index + 1;
        self.blocks.insert(id, block);
        route4
    }

    /// Name `id` did not fit: it uses the trie (said once, until it fits again).
    fn full(&mut self, id: u32) {
        if self.unfit.insert(id) {
            tracing::warn!(
                name_id = id,
                groups = L2_GROUPS,
                "the flat IPv4 route arrays are full: this name's routes use the trie"
            );
        }
    }

    /// Clears name `id`'s block (after its name entry is gone).
    pub fn remove(&mut self, id: u32) {
        self.unfit.remove(&id);
        if let Some(b) = self.blocks.remove(&id) {
            self.retire(b);
        }
    }

    fn retire(&mut self, mut b: Block) {
        let base = b.index as usize * L1_SLOTS as usize;
        for (i, v) in b.l1.iter().enumerate() {
            if *v != flat::NONE {
                self.l1.set(base + i, flat::NONE);
            }
        }
        for (_, (g, _)) in b.groups.drain() {
            self.retired_groups.push(g);
        }
        self.retired_blocks.push(b.index);
    }

    fn take_group(&mut self) -> u32 {
        if let Some(g) = self.free_groups.pop() {
            return g;
        }
        let g = self.next_group;
        self.next_group += 1;
        g
    }

    /// Ends a sync: what was given up during it becomes reusable.
    pub fn end_sync(&mut self) {
        self.free_groups.append(&mut self.retired_groups);
        self.free_blocks.append(&mut self.retired_blocks);
        self.free_blocks.sort_unstable_by(|a, b| b.cmp(a));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ip(a: u8, b: u8, c: u8, d: u8) -> u32 {
        u32::from_be_bytes([a, b, c, d])
    }

    #[test]
    fn short_routes_fill_l1_with_their_exact_length() {
        let lay = layout(&[(ip(10, 0, 0, 0), 8, 3), (ip(11, 0, 0, 0), 16, 4)]);
        assert_eq!(lay.l1[ip(10, 0, 0, 0) as usize >> 16], flat::leaf(3, 8));
        assert_eq!(lay.l1[ip(10, 255, 0, 0) as usize >> 16], flat::leaf(3, 8));
        assert_eq!(lay.l1[ip(11, 0, 0, 0) as usize >> 16], flat::leaf(4, 16));
        assert_eq!(lay.l1[ip(11, 1, 0, 0) as usize >> 16], flat::NONE);
        assert_eq!(lay.l1[ip(9, 255, 0, 0) as usize >> 16], flat::NONE);
        assert!(lay.groups.is_empty());
    }

    #[test]
    fn longer_routes_split_their_16_and_past_24_ask_the_trie() {
        let lay = layout(&[(ip(1, 2, 0, 0), 17, 1), (ip(1, 2, 128, 0), 24, 2), (ip(1, 2, 129, 128), 25, 5)]);
        assert_eq!(lay.l1[ip(1, 2, 0, 0) as usize >> 16], flat::NONE);
        let g = &lay.groups[&((ip(1, 2, 0, 0) >> 16) as u16)];
        assert_eq!(g[0], flat::leaf(1, 17));
        assert_eq!(g[127], flat::leaf(1, 17));
        assert_eq!(g[128], flat::leaf(2, 24));
        assert_eq!(g[129], flat::TRIE);
        assert_eq!(g[130], flat::NONE);
        assert_eq!(flat::leaf_answer(g[128]), 2);
        assert_eq!(flat::leaf_len(g[0]), 17);
    }

    #[test]
    fn one_sixteen_lays_out_as_the_whole_layout_does() {
        let routes = [
            (ip(1, 0, 0, 0), 15, 9),
            (ip(1, 2, 0, 0), 17, 1),
            (ip(1, 2, 128, 0), 24, 2),
            (ip(1, 2, 129, 128), 25, 5),
            (ip(1, 3, 0, 0), 16, 6),
            (ip(200, 0, 0, 0), 5, 7),
        ];
        let lay = layout(&routes);
        for hi in (0..=u16::MAX).step_by(1) {
            let (l1, group) = layout16(&routes, hi);
            assert_eq!(l1, lay.l1[hi as usize], "/16 {hi}");
            assert_eq!(group.as_ref(), lay.groups.get(&hi), "/16 {hi}");
        }
        assert_eq!(sixteens(ip(1, 0, 0, 0), 15), 0x100..=0x101);
        assert_eq!(sixteens(ip(1, 2, 129, 128), 25), 0x102..=0x102);
        assert_eq!(sixteens(0, 0), 0..=u16::MAX);
    }

    #[test]
    fn the_whole_space_is_one_leaf_per_16_of_length_0() {
        let lay = layout(&[(0, 0, 7)]);
        assert!(lay.l1.iter().all(|&v| v == flat::leaf(7, 0)));
    }
}
