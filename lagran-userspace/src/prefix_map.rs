//! Non-overlapping CIDR prefixes covering a whole address space, each mapped to a value.
//!
//! This is the shape both answer paths (XDP and userspace) share: the scheduler turns
//! address ranges into the *coarsest* CIDR blocks that carry the same value,
//! userspace looks a client up by binary search, and the XDP map writer copies
//! the same prefixes into an LPM trie. Because the prefixes never nest, the
//! matched prefix length is a correct ECS SCOPE PREFIX-LENGTH (RFC 7871 §7.2.1):
//! every address inside the returned block maps to the same value.

use std::fmt::Debug;
use std::net::{Ipv4Addr, Ipv6Addr};
use std::sync::{Arc, Weak};

/// An unsigned integer holding an address of one family.
pub trait PrefixAddr: Copy + Ord + Debug + Send + Sync + 'static {
    /// Width of the address in bits (32 or 128).
    const BITS: u32;
    fn to_u128(self) -> u128;
    fn from_u128(v: u128) -> Self;
}

impl PrefixAddr for u32 {
    const BITS: u32 = 32;
    fn to_u128(self) -> u128 {
        self as u128
    }
    fn from_u128(v: u128) -> Self {
        v as u32
    }
}

impl PrefixAddr for u128 {
    const BITS: u32 = 128;
    fn to_u128(self) -> u128 {
        self
    }
    fn from_u128(v: u128) -> Self {
        v
    }
}

/// One CIDR block of a [`PrefixMap`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Prefix<A> {
    pub addr: A,
    pub len: u8,
    pub value: u32,
}

/// Sorted, non-overlapping CIDR blocks that cover the whole address space.
///
/// Immutable once built: the columns are shared, so a clone (the build's
/// record, names with the same answers, the published table) costs a
/// reference count, and equal clones compare by pointer. They serialize as
/// plain sequences, as before the sharing. A map made by
/// [`PrefixMap::splice`] also knows which of its blocks it copied from the
/// map it was spliced from ([`PrefixMap::copied_from`]); that lineage is not
/// part of its value (not compared, not serialized).
#[derive(Clone, Debug, serde::Serialize, serde::Deserialize)]
#[serde(bound(serialize = "A: serde::Serialize", deserialize = "A: serde::de::DeserializeOwned"))]
pub struct PrefixMap<A: PrefixAddr> {
    starts: Arc<Vec<A>>,
    lens: Arc<Vec<u8>>,
    values: Arc<Vec<u32>>,
    #[serde(skip)]
    lineage: Option<Arc<Lineage<A>>>,
}

impl<A: PrefixAddr> PartialEq for PrefixMap<A> {
    fn eq(&self, other: &Self) -> bool {
        self.starts == other.starts && self.lens == other.lens && self.values == other.values
    }
}

impl<A: PrefixAddr> Eq for PrefixMap<A> {}

/// Where a spliced map's blocks came from: the map it was spliced from, held
/// weakly (its columns' allocations stay while this map lives, so no other
/// map can be given their addresses; one generation back, never a chain: the
/// parent's own lineage goes with it), and the runs of its blocks copied with
/// the same start and length, their values through `remap`.
#[derive(Debug)]
struct Lineage<A> {
    parent: Parent<A>,
    copied: Vec<CopiedRun>,
    remap: Option<Arc<[u32]>>,
}

/// The parent's columns (starts, lengths, values), weakly.
type Parent<A> = (Weak<Vec<A>>, Weak<Vec<u8>>, Weak<Vec<u32>>);

/// Blocks `from..from + len` of the parent are blocks `to..to + len` of the
/// spliced map: the same starts and lengths, each value `v` now `remap[v]`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct CopiedRun {
    pub from: usize,
    pub to: usize,
    pub len: usize,
}

/// [`PrefixMap::copied_from`]: the copied runs, in order, and the value map
/// (`None`: values copied as they were).
pub struct Copied<'a> {
    pub runs: &'a [CopiedRun],
    pub remap: Option<&'a [u32]>,
}

impl Copied<'_> {
    /// The blocks between the runs (and before the first, after the last), as
    /// index ranges into the parent (`parent_len` blocks) and into the
    /// spliced map (`len` blocks): each pair covers the same addresses.
    pub fn gaps(
        &self,
        parent_len: usize,
        len: usize,
    ) -> impl Iterator<Item = (std::ops::Range<usize>, std::ops::Range<usize>)> + '_ {
        let ends = self.runs.iter().map(|r| (r.from, r.to, r.len)).chain(std::iter::once((parent_len, len, 0)));
        ends.scan((0, 0), |at, (from, to, n)| {
            let gap = (at.0..from, at.1..to);
            *at = (from + n, to + n);
            Some(gap)
        })
    }
}

/// A [`PrefixMap`] being built.
struct Columns<A> {
    starts: Vec<A>,
    lens: Vec<u8>,
    values: Vec<u32>,
}

/// [`PrefixMap::from_ranges`] one range at a time, for callers that produce
/// ranges in a loop: no intermediate list, each range merged with the one
/// before it (equal value, adjacent) and split into blocks as soon as the
/// next one differs.
pub struct PrefixMapBuilder<A> {
    columns: Columns<A>,
    /// The merged range not yet split into blocks.
    pending: Option<(u128, u128, u32)>,
    /// The first address no range has covered yet.
    next: u128,
    /// The last address is covered: later ranges are ignored.
    done: bool,
    fill: u32,
}

impl<A: PrefixAddr> PrefixMapBuilder<A> {
    /// A builder whose gaps take `fill`, with room for about `ranges` ranges.
    pub fn new(fill: u32, ranges: usize) -> Self {
        // Ranges split into two or three blocks on average (the real file's:
        // 2.2); room that is never written costs no memory.
        let n = ranges.saturating_mul(3);
        PrefixMapBuilder {
            columns: Columns {
                starts: Vec::with_capacity(n),
                lens: Vec::with_capacity(n),
                values: Vec::with_capacity(n),
            },
            pending: None,
            next: 0,
            done: false,
            fill,
        }
    }

    /// The next inclusive range (addresses as `u128`), sorted by start after
    /// the ones before. Overlapping or inverted input: the earlier range wins.
    #[inline]
    pub fn push(&mut self, s: u128, e: u128, v: u32) {
        if self.done || e < self.next || s > e {
            return;
        }
        let s = s.max(self.next);
        if s > self.next {
            self.merge(self.next, s - 1, self.fill);
        }
        self.merge(s, e, v);
        if e == max_addr::<A>() {
            self.done = true;
        } else {
            self.next = e + 1;
        }
    }

    /// Extends the pending range when `s..=e` continues it with the same
    /// value, else splits the pending range into blocks and starts anew.
    #[inline]
    fn merge(&mut self, s: u128, e: u128, v: u32) {
        if let Some(last) = &mut self.pending {
            // Ranges arrive in order without gaps (`push` fills them), so
            // "adjacent" is "after the pending one".
            if last.2 == v {
                last.1 = e;
                return;
            }
            let (ps, pe, pv) = *last;
            self.columns.push_range(ps, pe, pv);
        }
        self.pending = Some((s, e, v));
    }

    /// The map: what no range covered takes `fill`.
    pub fn finish(mut self) -> PrefixMap<A> {
        if !self.done {
            self.merge(self.next, max_addr::<A>(), self.fill);
        }
        if let Some((s, e, v)) = self.pending.take() {
            self.columns.push_range(s, e, v);
        }
        self.columns.into_map(None)
    }
}

/// Appends the inclusive range `s..=e` with value `v` to a list sorted by
/// start, merged into the last range when adjacent with the same value (the
/// run lists of the geo readers, the partition table and the route build, and
/// the geo tests' region lists).
pub(crate) fn push_merged<V: PartialEq>(out: &mut Vec<(u128, u128, V)>, s: u128, e: u128, v: V) {
    if let Some(last) = out.last_mut()
        && last.2 == v
        && last.1.checked_add(1) == Some(s)
    {
        last.1 = e;
        return;
    }
    out.push((s, e, v));
}

pub type PrefixMapV4 = PrefixMap<u32>;
pub type PrefixMapV6 = PrefixMap<u128>;

impl<A: PrefixAddr> PrefixMap<A> {
    /// One block, `/0`, holding `value`.
    pub fn uniform(value: u32) -> Self {
        PrefixMap {
            starts: Arc::new(vec![A::from_u128(0)]),
            lens: Arc::new(vec![0]),
            values: Arc::new(vec![value]),
            lineage: None,
        }
    }

    /// Builds the map from inclusive ranges sorted by start, which must not overlap.
    /// Gaps take `fill`. Adjacent ranges with equal values are merged before the
    /// split into CIDR blocks, so every block is as wide as the data allows.
    pub fn from_ranges(ranges: impl IntoIterator<Item = (A, A, u32)>, fill: u32) -> Self {
        let ranges = ranges.into_iter();
        let mut b = PrefixMapBuilder::new(fill, ranges.size_hint().0);
        for (s, e, v) in ranges {
            b.push(s.to_u128(), e.to_u128(), v);
        }
        b.finish()
    }

    /// This map with `changes` laid over it (inclusive ranges with their new
    /// values, sorted by start, not overlapping) and every other block's value
    /// `v` replaced by `remap[v]` (when given; it must keep distinct values
    /// distinct and cover every value outside the changes): the map
    /// [`PrefixMap::from_ranges`] builds from the changed ranges, at the
    /// cost of the blocks around the changes. Around each change only the old
    /// runs (adjacent blocks of one value) it touches or borders are split
    /// again; every other block is copied.
    pub fn splice(&self, changes: &[(A, A, u32)], remap: Option<&[u32]>) -> Self {
        let n = self.len();
        let max = max_addr::<A>();
        let starts = &self.starts;
        let end_of = |k: usize| if k + 1 < n { starts[k + 1].to_u128() - 1 } else { max };
        let block_of = |a: u128| self.starts.partition_point(|s| s.to_u128() <= a).saturating_sub(1);
        let mut out = Columns {
            starts: Vec::with_capacity(n + changes.len() * 2),
            lens: Vec::with_capacity(n + changes.len() * 2),
            values: Vec::with_capacity(n + changes.len() * 2),
        };
        // Old blocks from `k` on (from address `pos`, a block start) are not yet
        // in `out` or in the region being split again (`reg`, merged runs), which
        // must reach at least `need` (the end of an old run).
        let (mut k, mut pos, mut need) = (0usize, 0u128, None::<u128>);
        let mut reg: Vec<(u128, u128, u32)> = Vec::new();
        let push = |reg: &mut Vec<(u128, u128, u32)>, s: u128, e: u128, v: u32| match reg.last_mut() {
            Some(last) if last.2 == v && last.1.checked_add(1) == Some(s) => last.1 = e,
            _ => reg.push((s, e, v)),
        };
        // Old content of [pos, to] into `reg`; `pos` and `k` move past it.
        let absorb = |reg: &mut Vec<(u128, u128, u32)>, k: &mut usize, pos: &mut u128, to: u128| {
            while *k < n && *pos <= to {
                let e = end_of(*k).min(to);
                let v = self.values[*k];
                push(reg, *pos, e, remap.map_or(v, |to| to[v as usize]));
                if e == end_of(*k) {
                    *k += 1;
                }
                if e == max {
                    *pos = max;
                    *k = n;
                    break;
                }
                *pos = e + 1;
            }
        };
        let mut copied: Vec<CopiedRun> = Vec::with_capacity(changes.len() + 1);
        let mut copy = |out: &mut Columns<A>, k: &mut usize, until: usize| {
            if until > *k {
                copied.push(CopiedRun { from: *k, to: out.starts.len(), len: until - *k });
            }
            out.starts.extend_from_slice(&self.starts[*k..until]);
            out.lens.extend_from_slice(&self.lens[*k..until]);
            match remap {
                Some(to) => out.values.extend(self.values[*k..until].iter().map(|&v| to[v as usize])),
                None => out.values.extend_from_slice(&self.values[*k..until]),
            }
            *k = until;
        };
        let mut done = false;
        for &(s, e, v) in changes {
            let (s, e) = (s.to_u128(), e.to_u128());
            if done || s > e || s < pos {
                continue;
            }
            if let Some(to) = need
                && s > to.saturating_add(1)
            {
                absorb(&mut reg, &mut k, &mut pos, to);
                for (rs, re, rv) in reg.drain(..) {
                    out.push_range(rs, re, rv);
                }
                need = None;
            }
            if need.is_none() {
                // The old run holding `s - 1` is cut or merged: split again from its first block.
                let mut lb = block_of(s.saturating_sub(1));
                while lb > k && self.values[lb - 1] == self.values[lb] {
                    lb -= 1;
                }
                let lb = lb.max(k);
                copy(&mut out, &mut k, lb);
                pos = if k < n { self.starts[k].to_u128().max(pos) } else { pos };
            }
            if s > 0 {
                absorb(&mut reg, &mut k, &mut pos, s - 1);
            }
            push(&mut reg, s, e, v);
            // Skip the old blocks the change covers.
            while k < n && end_of(k) <= e {
                k += 1;
            }
            if e == max {
                done = true;
                need = Some(max);
                continue;
            }
            pos = e + 1;
            // ... and take the old run holding `e + 1` into the region (it may merge).
            let mut rb = block_of(e + 1);
            while rb + 1 < n && self.values[rb + 1] == self.values[rb] {
                rb += 1;
            }
            need = Some(need.map_or(end_of(rb), |to| to.max(end_of(rb))));
        }
        if let Some(to) = need {
            if !done {
                absorb(&mut reg, &mut k, &mut pos, to);
            }
            for (rs, re, rv) in reg.drain(..) {
                out.push_range(rs, re, rv);
            }
        }
        if !done {
            copy(&mut out, &mut k, n);
        }
        let lineage = Lineage {
            parent: (Arc::downgrade(&self.starts), Arc::downgrade(&self.lens), Arc::downgrade(&self.values)),
            copied,
            remap: remap.map(Arc::from),
        };
        out.into_map(Some(Arc::new(lineage)))
    }

    /// When this map was spliced from `parent` itself (that very map, not an
    /// equal one): the runs of blocks it copied from it. Every block outside
    /// the runs was split again; both maps' blocks between two runs cover the
    /// same addresses, so a diff of the two maps needs only those.
    pub fn copied_from(&self, parent: &PrefixMap<A>) -> Option<Copied<'_>> {
        let l = self.lineage.as_deref()?;
        // `parent` is alive, and a weak pointer keeps its allocation from being
        // reused, so equal pointers are the same columns.
        let same = std::ptr::addr_eq(l.parent.0.as_ptr(), Arc::as_ptr(&parent.starts))
            && std::ptr::addr_eq(l.parent.1.as_ptr(), Arc::as_ptr(&parent.lens))
            && std::ptr::addr_eq(l.parent.2.as_ptr(), Arc::as_ptr(&parent.values));
        same.then(|| Copied { runs: &l.copied, remap: l.remap.as_deref() })
    }

    /// The block holding `addr`: its value and prefix length.
    pub fn lookup(&self, addr: A) -> (u32, u8) {
        let i = self.starts.partition_point(|s| *s <= addr).saturating_sub(1);
        (self.values[i], self.lens[i])
    }

    /// The block holding `addr`, with its start address.
    pub fn lookup_prefix(&self, addr: A) -> Prefix<A> {
        let i = self.starts.partition_point(|s| *s <= addr).saturating_sub(1);
        Prefix { addr: self.starts[i], len: self.lens[i], value: self.values[i] }
    }

    pub fn len(&self) -> usize {
        self.starts.len()
    }

    /// Whether `other` is a clone of this very map (not only equal): then
    /// nothing built from one needs building again for the other.
    pub fn shares(&self, other: &Self) -> bool {
        Arc::ptr_eq(&self.starts, &other.starts)
            && Arc::ptr_eq(&self.lens, &other.lens)
            && Arc::ptr_eq(&self.values, &other.values)
    }

    pub fn is_empty(&self) -> bool {
        self.starts.is_empty()
    }

    /// The blocks as columns: starts, prefix lengths and values, block `i` at
    /// index `i` of each (for walks that want no iterator per block).
    pub fn columns(&self) -> (&[A], &[u8], &[u32]) {
        (&self.starts, &self.lens, &self.values)
    }

    pub fn iter(&self) -> impl Iterator<Item = Prefix<A>> + '_ {
        (0..self.starts.len()).map(|i| Prefix { addr: self.starts[i], len: self.lens[i], value: self.values[i] })
    }

    /// The blocks from the one holding `addr` on, in order.
    pub fn iter_from(&self, addr: A) -> impl Iterator<Item = Prefix<A>> + '_ {
        let first = self.starts.partition_point(|s| *s <= addr).saturating_sub(1);
        (first..self.starts.len()).map(|i| Prefix { addr: self.starts[i], len: self.lens[i], value: self.values[i] })
    }

    /// The covered ranges with their values, adjacent equal values merged.
    pub fn ranges(&self) -> Vec<(A, A, u32)> {
        let mut out: Vec<(A, A, u32)> = Vec::new();
        for p in self.iter() {
            let host = A::BITS - p.len as u32;
            let size_minus_one = if host >= 128 { u128::MAX } else { (1u128 << host) - 1 };
            let end = A::from_u128(p.addr.to_u128() + size_minus_one);
            match out.last_mut() {
                Some(last) if last.2 == p.value => last.1 = end,
                _ => out.push((p.addr, end, p.value)),
            }
        }
        out
    }

    /// Replaces every value through `f`, then re-merges blocks that became equal.
    pub fn map_values(&self, mut f: impl FnMut(u32) -> u32) -> Self {
        let ranges = self.ranges().into_iter().map(|(s, e, v)| (s, e, f(v)));
        PrefixMap::from_ranges(ranges, u32::MAX)
    }

    /// Checks a map that came from outside (a route-table stream): blocks
    /// sorted, aligned, contiguous from 0 to the end of the space, values
    /// below `values`.
    pub fn check(&self, values: u32) -> Result<(), String> {
        if self.starts.is_empty() || self.starts.len() != self.lens.len() || self.starts.len() != self.values.len() {
            return Err("prefix map is empty or its columns differ in length".into());
        }
        let mut next: u128 = 0;
        for (i, p) in self.iter().enumerate() {
            if p.len as u32 > A::BITS {
                return Err(format!("block {i}: /{} is longer than the family allows", p.len));
            }
            if p.value >= values {
                return Err(format!("block {i}: value {} has no answer (only {values})", p.value));
            }
            let start = p.addr.to_u128();
            if start != next {
                return Err(format!("block {i} starts at {start}, expected {next}"));
            }
            let host = A::BITS - p.len as u32;
            let size_minus_one = if host >= 128 { u128::MAX } else { (1u128 << host) - 1 };
            if start & size_minus_one != 0 {
                return Err(format!("block {i} is not aligned to its /{}", p.len));
            }
            let end = start + size_minus_one;
            if end == max_addr::<A>() {
                return if i + 1 == self.len() {
                    Ok(())
                } else {
                    Err(format!("blocks after the end of the space at {i}"))
                };
            }
            next = end + 1;
        }
        Err("prefix map does not cover the whole address space".into())
    }

    /// Approximate heap bytes held.
    pub fn heap_bytes(&self) -> usize {
        self.starts.len() * std::mem::size_of::<A>() + self.lens.len() + self.values.len() * 4
    }
}

impl<A: PrefixAddr> Columns<A> {
    /// The finished map. The columns move into their `Arc`s as they are:
    /// `Arc<[T]>::from(Vec<T>)` would copy them once more, into fresh pages
    /// (the real data's IPv4 map has 8·10⁵ blocks, 7 MB: that copy and its
    /// page faults took most of a one-node-down splice). Spare capacity is
    /// given back first (`realloc` shrinks large blocks in place).
    fn into_map(mut self, lineage: Option<Arc<Lineage<A>>>) -> PrefixMap<A> {
        self.starts.shrink_to_fit();
        self.lens.shrink_to_fit();
        self.values.shrink_to_fit();
        PrefixMap { starts: Arc::new(self.starts), lens: Arc::new(self.lens), values: Arc::new(self.values), lineage }
    }

    /// Splits `s..=e` into the largest aligned blocks, in order.
    fn push_range(&mut self, s: u128, e: u128, v: u32) {
        if A::BITS <= 32 {
            // IPv4: the same in 64-bit arithmetic (u128 counts twice the instructions).
            return self.push_range_64(s as u64, e as u64, v);
        }
        let bits = A::BITS;
        let mut s = s;
        loop {
            // Largest block aligned at `s` that does not pass `e`.
            let align = if s == 0 { bits } else { s.trailing_zeros().min(bits) };
            let span = e - s; // size - 1
            let fit = if span == u128::MAX { 128 } else { 128 - (span + 1).leading_zeros() - 1 };
            let host_bits = align.min(fit).min(bits);
            self.starts.push(A::from_u128(s));
            self.lens.push((bits - host_bits) as u8);
            self.values.push(v);
            let size_minus_one = if host_bits >= 128 { u128::MAX } else { (1u128 << host_bits) - 1 };
            let block_end = s + size_minus_one;
            if block_end >= e {
                break;
            }
            s = block_end + 1;
        }
    }

    /// [`Columns::push_range`] for addresses of at most 32 bits: a span plus
    /// one always fits in 64 bits.
    fn push_range_64(&mut self, mut s: u64, e: u64, v: u32) {
        let bits = A::BITS;
        loop {
            let align = if s == 0 { bits } else { s.trailing_zeros().min(bits) };
            let fit = 63 - (e - s + 1).leading_zeros();
            let host_bits = align.min(fit);
            self.starts.push(A::from_u128(s as u128));
            self.lens.push((bits - host_bits) as u8);
            self.values.push(v);
            let block_end = s + ((1u64 << host_bits) - 1);
            if block_end >= e {
                break;
            }
            s = block_end + 1;
        }
    }
}

fn max_addr<A: PrefixAddr>() -> u128 {
    if A::BITS >= 128 { u128::MAX } else { (1u128 << A::BITS) - 1 }
}

pub fn v4_to_u32(a: Ipv4Addr) -> u32 {
    u32::from(a)
}

pub fn v6_to_u128(a: Ipv6Addr) -> u128 {
    u128::from(a)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Random ranges over a small space (so runs merge and blocks nest), random
    /// changes and a random injective remap: the spliced map is the one
    /// `from_ranges` builds from the ranges with the changes applied.
    #[test]
    fn splice_equals_a_rebuild() {
        use rand::{Rng, SeedableRng, rngs::StdRng};
        for seed in 0..3000u64 {
            let mut rng = StdRng::seed_from_u64(seed);
            let values = rng.gen_range(1..5u32);
            // Piecewise ranges over 0..=u32::MAX, cut at random points.
            let mut cuts: Vec<u32> = (0..rng.gen_range(0..40)).map(|_| rng.gen_range(1..4096u32) << 20).collect();
            if rng.gen_bool(0.3) {
                cuts.extend((0..rng.gen_range(0..10)).map(|_| rng.r#gen::<u32>()));
            }
            cuts.push(0);
            cuts.sort_unstable();
            cuts.dedup();
            let ranges: Vec<(u32, u32, u32)> = cuts
                .iter()
                .enumerate()
                .map(|(i, &s)| (s, cuts.get(i + 1).map_or(u32::MAX, |n| n - 1), rng.gen_range(0..values)))
                .collect();
            let old = PrefixMapV4::from_ranges(ranges.iter().copied(), 0);
            // Change some ranges (whole ones, as the builder does) to values 0..values+2.
            let mut changes: Vec<(u32, u32, u32)> = Vec::new();
            for &(s, e, _) in &ranges {
                if rng.gen_bool(0.3) {
                    changes.push((s, e, rng.gen_range(0..values + 2)));
                }
            }
            // A remap that keeps distinct values distinct (a shift by a random offset, or none).
            let shift = rng.gen_range(0..3u32);
            let remap: Vec<u32> = (0..values).map(|v| (v + shift) % (values + 3)).collect();
            let use_remap = shift > 0;
            let mut want = ranges.clone();
            for r in &mut want {
                if use_remap {
                    r.2 = remap[r.2 as usize];
                }
                if let Some(c) = changes.iter().find(|c| c.0 == r.0) {
                    r.2 = c.2;
                }
            }
            let rebuilt = PrefixMapV4::from_ranges(want, 0);
            let spliced = old.splice(&changes, use_remap.then_some(remap.as_slice()));
            assert_eq!(spliced, rebuilt, "seed {seed}: changes {changes:?} over {ranges:?}");
            check_copied_runs(&old, &spliced, use_remap.then_some(remap.as_slice()), seed);
            assert!(spliced.copied_from(&rebuilt).is_none(), "an equal map is not the parent");
            assert!(rebuilt.copied_from(&old).is_none(), "a built map has no lineage");
        }
    }

    /// What `copied_from` promises: each run is the parent's blocks with their
    /// values remapped, and the runs leave gaps over the same addresses.
    fn check_copied_runs(old: &PrefixMapV4, new: &PrefixMapV4, remap: Option<&[u32]>, seed: u64) {
        let c = new.copied_from(old).expect("a spliced map knows its parent");
        assert_eq!(c.remap, remap, "seed {seed}");
        let (os, ol, ov) = old.columns();
        let (ns, nl, nv) = new.columns();
        let (mut oi, mut ni) = (0, 0);
        for r in c.runs {
            assert!(r.from >= oi && r.to >= ni && r.len > 0, "seed {seed}: runs in order");
            // The gap before the run covers the same addresses in both maps.
            assert_eq!(os[r.from], ns[r.to], "seed {seed}: gap ends align");
            for i in 0..r.len {
                let (o, n) = (r.from + i, r.to + i);
                assert_eq!((os[o], ol[o]), (ns[n], nl[n]), "seed {seed}: copied block");
                assert_eq!(remap.map_or(ov[o], |m| m[ov[o] as usize]), nv[n], "seed {seed}: copied value");
            }
            (oi, ni) = (r.from + r.len, r.to + r.len);
        }
        assert_eq!(oi == os.len(), ni == ns.len(), "seed {seed}: both maps end in a run or a gap");
    }

    #[test]
    fn uniform_map_is_one_slash_zero() {
        let m = PrefixMapV4::uniform(7);
        assert_eq!(m.lookup(0x0a000001), (7, 0));
    }

    #[test]
    fn gaps_are_filled_and_blocks_are_aligned() {
        // 10.0.0.0 - 10.0.0.255 -> 1, everything else -> 0
        let m = PrefixMapV4::from_ranges([(0x0a000000, 0x0a0000ff, 1)], 0);
        assert_eq!(m.lookup(0x0a000010), (1, 24));
        assert_eq!(m.lookup(0x0a000100).0, 0);
        assert_eq!(m.lookup(0).0, 0);
        assert_eq!(m.lookup(u32::MAX).0, 0);
        // 0.0.0.0/5, 8.0.0.0/7, 10.0.0.0/24 ... : every block starts aligned to its size
        for p in m.iter() {
            let host = 32 - p.len as u32;
            if host < 32 {
                assert_eq!(p.addr & ((1u32 << host) - 1), 0, "{p:?} is not aligned");
            }
        }
    }

    #[test]
    fn adjacent_equal_values_merge_into_wider_blocks() {
        let m = PrefixMapV4::from_ranges([(0, 0x7fff_ffff, 3), (0x8000_0000, u32::MAX, 3)], 0);
        assert_eq!(m.len(), 1);
        assert_eq!(m.lookup(12345), (3, 0));
    }

    #[test]
    fn every_address_in_a_block_has_the_blocks_value() {
        let ranges = [(5u32, 17u32, 1u32), (18, 1000, 2), (4000, 4095, 1)];
        let m = PrefixMapV4::from_ranges(ranges, 9);
        for p in m.iter().take(64) {
            let host = 32 - p.len as u32;
            let end = p.addr as u64 + (1u64 << host) - 1;
            for a in [p.addr as u64, end, (p.addr as u64 + end) / 2] {
                assert_eq!(m.lookup(a as u32).0, p.value);
                let want = ranges.iter().find(|r| r.0 as u64 <= a && a <= r.1 as u64).map_or(9, |r| r.2);
                assert_eq!(p.value, want, "address {a} in block {p:?}");
            }
        }
    }

    #[test]
    fn v6_full_space() {
        let m = PrefixMapV6::from_ranges([(1u128 << 127, u128::MAX, 4)], 0);
        assert_eq!(m.lookup(u128::MAX), (4, 1));
        assert_eq!(m.lookup(1), (0, 1));
        assert_eq!(m.ranges().len(), 2);
    }

    #[test]
    fn check_accepts_built_maps_and_rejects_broken_ones() {
        let m = PrefixMapV4::from_ranges([(5u32, 17u32, 1u32), (18, 1000, 2)], 0);
        assert_eq!(m.check(3), Ok(()));
        assert!(m.check(2).is_err(), "value 2 has no answer");
        let mut starts = m.starts.to_vec();
        starts[1] += 1;
        let broken = PrefixMapV4 { starts: Arc::new(starts), ..m.clone() };
        assert!(broken.check(3).is_err());
        let short = PrefixMapV4 { starts: Arc::new(m.starts[..m.starts.len() - 1].to_vec()), ..m.clone() };
        assert!(short.check(3).is_err());
        assert_eq!(PrefixMapV6::uniform(0).check(1), Ok(()));
    }

    #[test]
    fn map_values_remerges() {
        let m = PrefixMapV4::from_ranges([(0, 0x7fff_ffff, 1), (0x8000_0000, u32::MAX, 2)], 0);
        let n = m.map_values(|_| 5);
        assert_eq!(n.len(), 1);
    }
}
