//! Client partitions: the geo database cut into non-overlapping address ranges,
//! each labelled with the canonical location tuple it stands for ("smart
//! partitioning": clients grouped by location so one cached answer serves a group).
//!
//! An answer depends only on the client's partition, never on the single
//! address. Partition 0 is "unknown": addresses the geo files do not cover and
//! every private or reserved range, which are never looked up.
//! Overrides from the database win over the files.

pub mod diff;

use std::collections::HashMap;
use std::net::IpAddr;

use ipnet::IpNet;

use crate::geo::{GeoDb, reserved};
use crate::location::Location;
use crate::prefix_map::push_merged;

/// The partition every unlocated or special-purpose address falls into.
pub const UNKNOWN: u32 = 0;

/// An override: a CIDR whose clients get `location` whatever the files say.
#[derive(Clone, Debug, PartialEq)]
pub struct Override {
    pub prefix: IpNet,
    pub location: Location,
}

impl From<&crate::model::GeoOverride> for Override {
    fn from(o: &crate::model::GeoOverride) -> Self {
        Override { prefix: o.prefix, location: Location::new(&o.country, &o.province, &o.city, &o.isp) }
    }
}

/// The address space of both families cut into labelled ranges.
#[derive(Clone, Debug)]
pub struct PartitionTable {
    /// Partition id -> location; index 0 is the unknown location.
    locations: Vec<Location>,
    /// Sorted inclusive ranges covering all of IPv4, adjacent equal ids merged.
    v4: Vec<(u32, u32, u32)>,
    /// Sorted inclusive ranges covering all of IPv6, adjacent equal ids merged.
    v6: Vec<(u128, u128, u32)>,
}

/// What one address resolved to.
#[derive(Clone, Debug, PartialEq)]
pub struct PartitionHit<'a> {
    pub id: u32,
    pub location: &'a Location,
    /// The partition range holding the address, inclusive, as integers of its family.
    pub start: u128,
    pub end: u128,
}

impl Default for PartitionTable {
    fn default() -> Self {
        PartitionTable::build(&GeoDb::empty(), &[])
    }
}

struct Interner {
    locations: Vec<Location>,
    ids: HashMap<Location, u32>,
}

impl Interner {
    fn new() -> Self {
        let mut ids = HashMap::new();
        ids.insert(Location::default(), UNKNOWN);
        Interner { locations: vec![Location::default()], ids }
    }

    fn id(&mut self, loc: Location) -> u32 {
        if let Some(&id) = self.ids.get(&loc) {
            return id;
        }
        let id = self.locations.len() as u32;
        self.locations.push(loc.clone());
        self.ids.insert(loc, id);
        id
    }
}

impl PartitionTable {
    /// Compiles the geo files, the special-purpose ranges and the overrides.
    pub fn build(geo: &GeoDb, overrides: &[Override]) -> PartitionTable {
        let mut interner = Interner::new();
        let mut v4 = base_ranges(geo.v4(), u32::MAX as u128, &mut interner);
        let mut v6 = base_ranges(geo.v6(), u128::MAX, &mut interner);

        let special4: Vec<(u128, u128, u32)> =
            reserved::special_ranges_v4().iter().map(|&(s, e)| (s as u128, e as u128, UNKNOWN)).collect();
        let special6: Vec<(u128, u128, u32)> =
            reserved::special_ranges_v6().iter().map(|&(s, e)| (s, e, UNKNOWN)).collect();
        v4 = overlay(v4, &special4);
        v6 = overlay(v6, &special6);

        let mut over4 = Vec::new();
        let mut over6 = Vec::new();
        for o in overrides {
            let id = interner.id(o.location.clone());
            match o.prefix.trunc() {
                IpNet::V4(n) => over4.push((u32::from(n.network()) as u128, u32::from(n.broadcast()) as u128, id)),
                IpNet::V6(n) => over6.push((u128::from(n.network()), u128::from(n.broadcast()), id)),
            }
        }
        // Wider overrides first, so a more specific one laid on top wins.
        over4.sort_by_key(|&(s, e, _)| (std::cmp::Reverse(e - s), s));
        over6.sort_by_key(|&(s, e, _)| (std::cmp::Reverse(e - s), s));
        for o in over4 {
            v4 = overlay(v4, &[o]);
        }
        for o in over6 {
            v6 = overlay(v6, &[o]);
        }

        PartitionTable {
            locations: interner.locations,
            v4: v4.into_iter().map(|(s, e, id)| (s as u32, e as u32, id)).collect(),
            v6,
        }
    }

    /// The partition of a client address (IPv4-mapped IPv6 counts as IPv4).
    pub fn lookup(&self, ip: IpAddr) -> PartitionHit<'_> {
        let ip = match ip {
            IpAddr::V6(a) => a.to_ipv4_mapped().map_or(ip, IpAddr::V4),
            v4 => v4,
        };
        let (start, end, id) = match ip {
            IpAddr::V4(a) => {
                let a = u32::from(a);
                let i = self.v4.partition_point(|r| r.0 <= a).saturating_sub(1);
                let (s, e, id) = self.v4[i];
                (s as u128, e as u128, id)
            }
            IpAddr::V6(a) => {
                let a = u128::from(a);
                let i = self.v6.partition_point(|r| r.0 <= a).saturating_sub(1);
                self.v6[i]
            }
        };
        PartitionHit { id, location: &self.locations[id as usize], start, end }
    }

    /// Every partition's location, indexed by partition id.
    pub fn locations(&self) -> &[Location] {
        &self.locations
    }

    pub fn v4_ranges(&self) -> &[(u32, u32, u32)] {
        &self.v4
    }

    pub fn v6_ranges(&self) -> &[(u128, u128, u32)] {
        &self.v6
    }

    /// Range count per partition id (v4 + v6).
    pub fn range_counts(&self) -> Vec<usize> {
        let mut counts = vec![0usize; self.locations.len()];
        for r in &self.v4 {
            counts[r.2 as usize] += 1;
        }
        for r in &self.v6 {
            counts[r.2 as usize] += 1;
        }
        counts
    }
}

/// The ranges of one geo file, gaps as unknown, adjacent equal locations merged.
fn base_ranges(xdb: Option<&crate::geo::Xdb>, max: u128, interner: &mut Interner) -> Vec<(u128, u128, u32)> {
    let mut out: Vec<(u128, u128, u32)> = Vec::new();
    let mut by_region: HashMap<&str, u32> = HashMap::new();
    let mut next: u128 = 0;
    let mut done = false;
    if let Some(xdb) = xdb {
        for seg in xdb.segments() {
            if done || seg.end < next || seg.start > seg.end || seg.end > max {
                continue;
            }
            let start = seg.start.max(next);
            if start > next {
                push_merged(&mut out, next, start - 1, UNKNOWN);
            }
            let id = match by_region.get(seg.region) {
                Some(&id) => id,
                None => {
                    let id = interner.id(Location::from_region(seg.region));
                    by_region.insert(seg.region, id);
                    id
                }
            };
            push_merged(&mut out, start, seg.end, id);
            if seg.end == max {
                done = true;
            } else {
                next = seg.end + 1;
            }
        }
    }
    if !done {
        push_merged(&mut out, next, max, UNKNOWN);
    }
    out
}

/// Lays sorted, non-overlapping `over` ranges on top of `base` (which covers the space).
fn overlay(base: Vec<(u128, u128, u32)>, over: &[(u128, u128, u32)]) -> Vec<(u128, u128, u32)> {
    if over.is_empty() {
        return base;
    }
    let mut out = Vec::with_capacity(base.len() + over.len() * 2);
    let mut oi = 0;
    for (mut s, e, id) in base {
        loop {
            // Skip overlays that end before this piece.
            while oi < over.len() && over[oi].1 < s {
                oi += 1;
            }
            if oi >= over.len() || over[oi].0 > e {
                push_merged(&mut out, s, e, id);
                break;
            }
            let (os, oe, oid) = over[oi];
            if os > s {
                push_merged(&mut out, s, os - 1, id);
            }
            let ov_end = oe.min(e);
            push_merged(&mut out, os.max(s), ov_end, oid);
            if ov_end == e {
                break;
            }
            s = ov_end + 1;
            oi += 1;
        }
    }
    out
}

/// CIDR prefixes needed to cover an inclusive range of a family.
pub fn prefix_count(version: crate::geo::IpVersion, start: u128, end: u128) -> usize {
    match version {
        crate::geo::IpVersion::V4 => {
            ipnet::Ipv4Subnets::new(std::net::Ipv4Addr::from(start as u32), std::net::Ipv4Addr::from(end as u32), 0)
                .count()
        }
        crate::geo::IpVersion::V6 => {
            ipnet::Ipv6Subnets::new(std::net::Ipv6Addr::from(start), std::net::Ipv6Addr::from(end), 0).count()
        }
    }
}

/// One row of `lagran geo partitions` and `GET /api/v1/geo/partitions`.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct PartitionRow {
    /// Partition id.
    pub id: u32,
    /// Ranges (both families), from [`PartitionTable::range_counts`].
    pub ranges: usize,
    /// CIDR prefixes covering them (what the data-plane LPM maps hold).
    pub prefixes: usize,
    /// IPv4 addresses in it.
    pub v4_addresses: u64,
}

/// Every partition with its counts, largest (most ranges, then most prefixes) first.
pub fn partition_rows(t: &PartitionTable) -> Vec<PartitionRow> {
    let counts = t.range_counts();
    let mut rows: Vec<PartitionRow> = counts
        .iter()
        .enumerate()
        .map(|(id, &ranges)| PartitionRow { id: id as u32, ranges, ..Default::default() })
        .collect();
    for &(s, e, id) in t.v4_ranges() {
        let r = &mut rows[id as usize];
        r.prefixes += prefix_count(crate::geo::IpVersion::V4, u128::from(s), u128::from(e));
        r.v4_addresses += u64::from(e - s) + 1;
    }
    for &(s, e, id) in t.v6_ranges() {
        rows[id as usize].prefixes += prefix_count(crate::geo::IpVersion::V6, s, e);
    }
    rows.sort_by(|a, b| b.ranges.cmp(&a.ranges).then(b.prefixes.cmp(&a.prefixes)).then(a.id.cmp(&b.id)));
    rows
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::geo::{IpVersion, Xdb, write_xdb};

    fn small_geo() -> GeoDb {
        let ip = |s: &str| u32::from(s.parse::<std::net::Ipv4Addr>().unwrap()) as u128;
        let ranges = vec![
            (0, ip("58.59.255.255"), "0|0|0|0|0".to_string()),
            (ip("58.60.0.0"), ip("58.60.255.255"), "中国|0|广东省|深圳市|电信".to_string()),
            (ip("58.61.0.0"), ip("58.61.255.255"), "中国|0|广东省|深圳市|电信".to_string()),
            (ip("58.62.0.0"), u32::MAX as u128, "美国|0|0|0|0".to_string()),
        ];
        let bytes = write_xdb(IpVersion::V4, &ranges).unwrap();
        GeoDb::from_xdbs(Some(Xdb::from_bytes(bytes).unwrap()), None)
    }

    #[test]
    fn adjacent_equal_regions_merge_and_special_ranges_are_unknown() {
        let t = PartitionTable::build(&small_geo(), &[]);
        let hit = t.lookup("58.60.1.2".parse().unwrap());
        assert_eq!(hit.location.province, "广东");
        assert_eq!((hit.start, hit.end), (0x3a3c_0000, 0x3a3d_ffff), "the two Shenzhen /16s merge");
        let private = t.lookup("10.1.2.3".parse().unwrap());
        assert_eq!(private.id, UNKNOWN);
        let cgnat = t.lookup("100.64.0.1".parse().unwrap());
        assert_eq!(cgnat.id, UNKNOWN, "CGNAT is never looked up");
        let us = t.lookup("100.128.0.1".parse().unwrap());
        assert_eq!(us.location.country, "US");
        // the ranges still cover the whole space without overlap
        let r = t.v4_ranges();
        assert_eq!(r.first().unwrap().0, 0);
        assert_eq!(r.last().unwrap().1, u32::MAX);
        for w in r.windows(2) {
            assert_eq!(w[0].1 + 1, w[1].0);
            assert_ne!(w[0].2, w[1].2, "adjacent equal ids must be merged");
        }
    }

    #[test]
    fn overrides_win_and_nest() {
        let wide = Override {
            prefix: "58.60.0.0/16".parse().unwrap(),
            location: Location::new("CN", "北京", "北京", "联通"),
        };
        let narrow = Override {
            prefix: "58.60.7.0/24".parse().unwrap(),
            location: Location::new("CN", "上海", "上海", "移动"),
        };
        let t = PartitionTable::build(&small_geo(), &[narrow, wide]);
        assert_eq!(t.lookup("58.60.1.1".parse().unwrap()).location.province, "北京");
        assert_eq!(t.lookup("58.60.7.9".parse().unwrap()).location.province, "上海");
        assert_eq!(t.lookup("58.61.0.1".parse().unwrap()).location.province, "广东");
    }

    #[test]
    fn no_geo_file_means_one_unknown_partition_apart_from_overrides() {
        let t = PartitionTable::build(&GeoDb::empty(), &[]);
        assert_eq!(t.v4_ranges(), &[(0, u32::MAX, UNKNOWN)]);
        assert_eq!(t.lookup("2001:db8::1".parse().unwrap()).id, UNKNOWN);
    }

    #[test]
    fn ipv4_mapped_ipv6_uses_the_v4_table() {
        let t = PartitionTable::build(&small_geo(), &[]);
        assert_eq!(t.lookup("::ffff:58.60.0.1".parse().unwrap()).location.isp, "电信");
    }
}
