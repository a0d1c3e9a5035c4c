//! From records to sorted, non-overlapping ranges: CIDR blocks with "more specific
//! wins" ([`RangeBuilder`]) and explicit ranges that must not overlap
//! ([`from_explicit`]).

use std::collections::HashMap;

use ipnet::IpNet;

use super::{Position, Stats};
use crate::geo::GeoError;
use crate::prefix_map::push_merged;

/// Ranges per family, sorted, non-overlapping, adjacent equal regions merged, ready
/// for [`write_xdb`](crate::geo::write_xdb).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Ranges {
    /// IPv4 ranges (addresses as values below 2^32).
    pub v4: Vec<(u128, u128, String)>,
    /// IPv6 ranges.
    pub v6: Vec<(u128, u128, String)>,
    /// Records read and skipped.
    pub stats: Stats,
}

#[derive(Clone, Copy, Debug)]
struct Block {
    start: u128,
    end: u128,
    len: u8,
    order: u32,
    region: u32,
}

/// Collects CIDR blocks with their regions, then flattens them: the more specific
/// block wins where blocks nest, and of two records for the very same block the
/// later one wins.
#[derive(Debug, Default)]
pub struct RangeBuilder {
    regions: Vec<String>,
    ids: HashMap<String, u32>,
    v4: Vec<Block>,
    v6: Vec<Block>,
    /// Records read and skipped.
    pub stats: Stats,
}

impl RangeBuilder {
    /// An empty builder.
    pub fn new() -> RangeBuilder {
        RangeBuilder::default()
    }

    /// Adds one block (host bits are ignored).
    pub fn add(&mut self, net: IpNet, region: &str) {
        let id = match self.ids.get(region) {
            Some(&id) => id,
            None => {
                let id = self.regions.len() as u32;
                self.regions.push(region.to_string());
                self.ids.insert(region.to_string(), id);
                id
            }
        };
        let net = net.trunc();
        let order = (self.v4.len() + self.v6.len()) as u32;
        match net {
            IpNet::V4(n) => self.v4.push(Block {
                start: u128::from(u32::from(n.network())),
                end: u128::from(u32::from(n.broadcast())),
                len: n.prefix_len(),
                order,
                region: id,
            }),
            IpNet::V6(n) => self.v6.push(Block {
                start: u128::from(n.network()),
                end: u128::from(n.broadcast()),
                len: n.prefix_len(),
                order,
                region: id,
            }),
        }
    }

    /// Number of blocks added.
    pub fn len(&self) -> usize {
        self.v4.len() + self.v6.len()
    }

    /// Whether no block was added.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Flattens both families.
    pub fn finish(self) -> Ranges {
        let regions = self.regions;
        let name = |v: Vec<(u128, u128, u32)>| -> Vec<(u128, u128, String)> {
            v.into_iter().map(|(s, e, r)| (s, e, regions[r as usize].clone())).collect()
        };
        Ranges { v4: name(flatten(self.v4)), v6: name(flatten(self.v6)), stats: self.stats }
    }
}

/// The sweep: CIDR blocks are nested or disjoint, so with blocks sorted by start and
/// then wider first, a stack of open blocks gives, at every address, the innermost
/// (most specific) block.
fn flatten(mut blocks: Vec<Block>) -> Vec<(u128, u128, u32)> {
    blocks.sort_by_key(|b| (b.start, b.len, b.order));
    // The very same block twice: keep the last record.
    blocks.dedup_by(|later, kept| {
        if later.start == kept.start && later.len == kept.len {
            *kept = *later;
            true
        } else {
            false
        }
    });
    let mut out = Vec::with_capacity(blocks.len());
    let mut stack: Vec<Block> = Vec::new();
    // First address not yet emitted (meaningful while the stack is not empty).
    let mut cursor: u128 = 0;
    for b in blocks {
        while let Some(top) = stack.last().copied() {
            if top.end >= b.start {
                break;
            }
            if cursor <= top.end {
                push_merged(&mut out, cursor, top.end, top.region);
            }
            cursor = top.end + 1; // top.end < b.start, so no overflow
            stack.pop();
        }
        if let Some(top) = stack.last()
            && cursor < b.start
        {
            // `top` contains `b`: its part before `b`.
            push_merged(&mut out, cursor, b.start - 1, top.region);
        }
        cursor = b.start;
        stack.push(b);
    }
    while let Some(top) = stack.pop() {
        if cursor <= top.end {
            push_merged(&mut out, cursor, top.end, top.region);
        }
        match top.end.checked_add(1) {
            Some(c) => cursor = c,
            None => break, // reached the last address; every outer block ends there too
        }
    }
    out
}

/// One explicit range of a source file and the line it came from.
#[derive(Clone, Debug)]
pub struct Explicit {
    /// First address.
    pub start: u128,
    /// Last address, inclusive.
    pub end: u128,
    /// Region string.
    pub region: String,
    /// Where it was read (for overlap errors).
    pub at: usize,
}

/// Sorts explicit ranges of one family and merges adjacent equal regions; two ranges
/// that overlap are an error naming both lines.
pub fn from_explicit(format: &'static str, mut list: Vec<Explicit>) -> Result<Vec<(u128, u128, String)>, GeoError> {
    list.sort_by_key(|r| (r.start, r.at));
    let mut out: Vec<(u128, u128, String)> = Vec::with_capacity(list.len());
    let mut prev_at = 0;
    for r in list {
        if let Some(last) = out.last_mut() {
            if r.start <= last.1 {
                return Err(GeoError::syntax(
                    format,
                    Position::Line(r.at),
                    format!("range overlaps the range of line {prev_at}"),
                ));
            }
            if last.2 == r.region && last.1 + 1 == r.start {
                last.1 = r.end;
                prev_at = r.at;
                continue;
            }
        }
        prev_at = r.at;
        out.push((r.start, r.end, r.region));
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn build(blocks: &[(&str, &str)]) -> Ranges {
        let mut b = RangeBuilder::new();
        for (net, region) in blocks {
            b.add(net.parse().unwrap(), region);
        }
        b.finish()
    }

    fn v4(s: &str) -> u128 {
        u128::from(u32::from(s.parse::<std::net::Ipv4Addr>().unwrap()))
    }

    #[test]
    fn more_specific_wins_and_the_outer_block_resumes() {
        let r = build(&[
            ("10.0.0.0/8", "A"),
            ("10.1.0.0/16", "B"),
            ("10.1.2.0/24", "C"),
            ("10.2.0.0/16", "A"),
            ("11.0.0.0/8", "A"),
        ]);
        assert_eq!(
            r.v4,
            vec![
                (v4("10.0.0.0"), v4("10.0.255.255"), "A".into()),
                (v4("10.1.0.0"), v4("10.1.1.255"), "B".into()),
                (v4("10.1.2.0"), v4("10.1.2.255"), "C".into()),
                (v4("10.1.3.0"), v4("10.1.255.255"), "B".into()),
                // the nested A /16 and the adjacent A /8 merge with the outer A
                (v4("10.2.0.0"), v4("11.255.255.255"), "A".into()),
            ]
        );
    }

    #[test]
    fn order_of_records_does_not_matter_but_duplicates_keep_the_last() {
        let r = build(&[("10.1.2.0/24", "C"), ("10.0.0.0/8", "A"), ("10.1.2.0/24", "D")]);
        assert_eq!(
            r.v4,
            vec![
                (v4("10.0.0.0"), v4("10.1.1.255"), "A".into()),
                (v4("10.1.2.0"), v4("10.1.2.255"), "D".into()),
                (v4("10.1.3.0"), v4("10.255.255.255"), "A".into()),
            ]
        );
    }

    #[test]
    fn whole_space_and_last_address() {
        let r = build(&[("0.0.0.0/0", "W"), ("255.255.255.255/32", "L"), ("::/0", "W6"), ("ffff::/16", "L6")]);
        assert_eq!(r.v4, vec![(0, u32::MAX as u128 - 1, "W".into()), (u32::MAX as u128, u32::MAX as u128, "L".into())]);
        assert_eq!(r.v6.len(), 2);
        assert_eq!(r.v6[1], (0xffff << 112, u128::MAX, "L6".into()));
    }

    #[test]
    fn random_blocks_match_a_brute_force_longest_match() {
        use rand::{Rng, SeedableRng, rngs::StdRng};
        let mut rng = StdRng::seed_from_u64(7);
        for _ in 0..50 {
            // Small space: everything inside 10.0.0.0/20 so the brute force is cheap.
            let mut blocks = Vec::new();
            for i in 0..rng.gen_range(1..40) {
                let len = rng.gen_range(20..=32u8);
                let addr = 0x0a00_0000u32 | (rng.r#gen::<u32>() & 0xfff);
                let net = ipnet::Ipv4Net::new(addr.into(), len).unwrap().trunc();
                blocks.push((net, format!("R{}", i % 7)));
            }
            let mut b = RangeBuilder::new();
            for (n, r) in &blocks {
                b.add(IpNet::V4(*n), r);
            }
            let ranges = b.finish().v4;
            for w in ranges.windows(2) {
                assert!(w[0].1 < w[1].0, "sorted and disjoint");
            }
            for a in 0x0a00_0000u32..=0x0a00_0fff {
                // longest prefix, then the last record of that prefix
                let want = blocks
                    .iter()
                    .enumerate()
                    .filter(|(_, (n, _))| n.contains(&std::net::Ipv4Addr::from(a)))
                    .max_by_key(|(i, (n, _))| (n.prefix_len(), *i))
                    .map(|(_, (_, r))| r.as_str());
                let got =
                    ranges.iter().find(|(s, e, _)| *s <= a as u128 && a as u128 <= *e).map(|(_, _, r)| r.as_str());
                assert_eq!(got, want, "address {}", std::net::Ipv4Addr::from(a));
            }
        }
    }

    #[test]
    fn explicit_ranges_merge_and_overlaps_name_both_lines() {
        let e = |s, e, r: &str, at| Explicit { start: s, end: e, region: r.into(), at };
        let out = from_explicit("t", vec![e(10, 19, "B", 2), e(0, 9, "A", 1), e(20, 29, "B", 3)]).unwrap();
        assert_eq!(out, vec![(0, 9, "A".into()), (10, 29, "B".into())]);
        let err = from_explicit("t", vec![e(0, 9, "A", 1), e(5, 12, "B", 2)]).unwrap_err().to_string();
        assert!(err.contains("line 2") && err.contains("line 1"), "{err}");
    }
}
