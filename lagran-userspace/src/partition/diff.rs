//! What changes between two geo data sets: `lagran geo diff OLD NEW` and the safety
//! check of a reload: before a new geo file replaces the old one, a random sample of
//! 100 000 addresses is compared between the two versions, and the release is held
//! when more than 1 % of them change.
//!
//! Both sides are compared as [`PartitionTable`]s — the location tuple every address
//! is scheduled by, after the special-purpose ranges (always unknown) and, for a
//! reload, the overrides (which win over either file). So a change of the raw region
//! string that keeps the tuple (`中国|0|广东省|…` → `中国|华南|广东省|…`) is no change,
//! and a changed range under an override is none either.
//!
//! Two measures:
//! - **Ranges**: the address space is walked once; a changed range is a maximal run of
//!   addresses whose (old tuple, new tuple) pair is the same and differs.
//! - **Sampled addresses**: `sample` addresses per family from a fixed-seed RNG, each
//!   looked up on both sides. IPv4: uniform over the public address space (the
//!   special-purpose ranges never change). IPv6: uniform over 2^128 would only hit
//!   unallocated space, so a range with a known tuple is drawn first (uniformly among
//!   the known ranges of both sides) and then an address inside it.
//!
//!   A reload's check draws instead from the client prefixes the responders
//!   answered, weighted by their queries ([`diff_partitions_on`] with a
//!   [`TrafficSample`]), per family once it has [`MIN_QUERIES`]: the ratio is
//!   then the share of queries whose partition would change, not the share of
//!   address space.
//!
//! `ratio` is the largest per-family ratio of changed samples, so a small family is
//! not diluted by a large one.

use std::collections::HashMap;
use std::fmt::Write as _;
use std::net::{Ipv4Addr, Ipv6Addr};

use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use serde::Serialize;

use super::{PartitionTable, UNKNOWN};
use crate::answered::sample::{MIN_QUERIES, TrafficSample};
use crate::geo::{GeoDb, IpVersion, reserved};
use crate::location::Location;

/// Default number of sampled addresses per family (100 000).
pub const DEFAULT_SAMPLE: usize = 100_000;
/// Default RNG seed: the same sample every time, so two runs agree.
pub const DEFAULT_SEED: u64 = 0x4c61_6772_616e_0001;

/// What to compare and how much to report.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct DiffOptions {
    /// Sampled addresses per family.
    pub sample: usize,
    /// RNG seed of the sample.
    pub seed: u64,
    /// Compare IPv4.
    pub v4: bool,
    /// Compare IPv6.
    pub v6: bool,
    /// Entries kept in `by_province`, `by_isp` and `transitions`.
    pub top: usize,
    /// Changed ranges listed in `changed_ranges` (all are counted).
    pub list_ranges: usize,
}

impl Default for DiffOptions {
    fn default() -> Self {
        DiffOptions { sample: DEFAULT_SAMPLE, seed: DEFAULT_SEED, v4: true, v6: true, top: 20, list_ranges: 50 }
    }
}

/// The comparison of one address family.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct FamilyDiff {
    /// `IPv4` or `IPv6`.
    pub family: String,
    /// Whether this family was compared (a reload does not compare a family the
    /// serving data did not have: its first load cannot be checked against anything).
    pub compared: bool,
    /// Maximal changed ranges.
    pub ranges_changed: usize,
    /// Addresses sampled.
    pub sampled: usize,
    /// Sampled addresses whose tuple changed.
    pub changed: usize,
    /// `changed / sampled` (0 when nothing was sampled).
    pub ratio: f64,
    /// Where the sampled addresses came from.
    pub sampled_from: SampledFrom,
}

/// Where a family's sampled addresses came from.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum SampledFrom {
    /// Uniform over the public (IPv4) or known (IPv6) address space.
    Random,
    /// The answered client prefixes, weighted by queries.
    Traffic,
}

/// A name and how many changed samples it had.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct Count {
    /// Province or ISP (`(unknown)` when empty).
    pub name: String,
    /// Changed samples.
    pub count: usize,
}

/// One tuple change and how many samples made it.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct Transition {
    /// The tuple on the old side.
    pub from: Location,
    /// The tuple on the new side.
    pub to: Location,
    /// Changed samples.
    pub count: usize,
}

/// One changed range.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct ChangedRange {
    /// First address.
    pub start: String,
    /// Last address, inclusive.
    pub end: String,
    /// The tuple on the old side.
    pub from: Location,
    /// The tuple on the new side.
    pub to: Location,
}

/// The result of a comparison.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct DiffReport {
    /// Changed ranges, both families.
    pub ranges_changed: usize,
    /// Sampled addresses, both families.
    pub sampled: usize,
    /// Changed samples, both families.
    pub changed: usize,
    /// The largest per-family ratio of changed samples.
    pub ratio: f64,
    /// Per family.
    pub families: Vec<FamilyDiff>,
    /// Changed samples by the province they were in (the new one when the old was unknown).
    pub by_province: Vec<Count>,
    /// Changed samples by the carrier they had (the new one when the old was unknown).
    pub by_isp: Vec<Count>,
    /// The most frequent tuple changes among the samples.
    pub transitions: Vec<Transition>,
    /// The first changed ranges, in address order (IPv4 first).
    pub changed_ranges: Vec<ChangedRange>,
}

/// Compares two geo data sets, files only (no overrides).
pub fn diff_geo(old: &GeoDb, new: &GeoDb, opts: &DiffOptions) -> DiffReport {
    let a = PartitionTable::build(old, &[]);
    let b = PartitionTable::build(new, &[]);
    diff_partitions(&a, &b, opts)
}

fn widen(v: &[(u32, u32, u32)]) -> Vec<(u128, u128, u32)> {
    v.iter().map(|&(s, e, id)| (u128::from(s), u128::from(e), id)).collect()
}

fn addr_text(version: IpVersion, a: u128) -> String {
    match version {
        IpVersion::V4 => Ipv4Addr::from(a as u32).to_string(),
        IpVersion::V6 => Ipv6Addr::from(a).to_string(),
    }
}

/// Changed ranges of one family: `(start, end, old id, new id)`, maximal.
fn range_diff(
    old: &[(u128, u128, u32)],
    new: &[(u128, u128, u32)],
    old_locs: &[Location],
    new_locs: &[Location],
) -> Vec<(u128, u128, u32, u32)> {
    let mut out: Vec<(u128, u128, u32, u32)> = Vec::new();
    let (mut i, mut j) = (0, 0);
    let mut cur: u128 = 0;
    // Cache: is old id X the same tuple as new id Y?
    let mut same: HashMap<(u32, u32), bool> = HashMap::new();
    while i < old.len() && j < new.len() {
        let (a, b) = (old[i], new[j]);
        let end = a.1.min(b.1);
        let eq = *same.entry((a.2, b.2)).or_insert_with(|| old_locs.get(a.2 as usize) == new_locs.get(b.2 as usize));
        if !eq && cur <= end {
            match out.last_mut() {
                Some(last) if last.2 == a.2 && last.3 == b.2 && last.1.checked_add(1) == Some(cur) => last.1 = end,
                _ => out.push((cur, end, a.2, b.2)),
            }
        }
        if a.1 == end {
            i += 1;
        }
        if b.1 == end {
            j += 1;
        }
        match end.checked_add(1) {
            Some(n) => cur = n,
            None => break,
        }
    }
    out
}

fn unknown_name(s: &str) -> String {
    if s.is_empty() { "(unknown)".to_string() } else { s.to_string() }
}

fn top_counts(map: HashMap<String, usize>, top: usize) -> Vec<Count> {
    let mut v: Vec<Count> = map.into_iter().map(|(name, count)| Count { name, count }).collect();
    v.sort_by(|a, b| b.count.cmp(&a.count).then_with(|| a.name.cmp(&b.name)));
    v.truncate(top);
    v
}

/// Compares two partition tables on random addresses (see the module docs).
pub fn diff_partitions(old: &PartitionTable, new: &PartitionTable, opts: &DiffOptions) -> DiffReport {
    diff_partitions_on(old, new, opts, &TrafficSample::default())
}

/// Compares two partition tables, sampling each family from `traffic` when
/// it has [`MIN_QUERIES`] (see the module docs).
pub fn diff_partitions_on(
    old: &PartitionTable,
    new: &PartitionTable,
    opts: &DiffOptions,
    traffic: &TrafficSample,
) -> DiffReport {
    let mut rng = StdRng::seed_from_u64(opts.seed);
    let mut families = Vec::new();
    let mut changed_ranges = Vec::new();
    let mut ranges_changed = 0;
    let mut by_province: HashMap<String, usize> = HashMap::new();
    let mut by_isp: HashMap<String, usize> = HashMap::new();
    let mut transitions: HashMap<(Location, Location), usize> = HashMap::new();
    let (ol, nl) = (old.locations(), new.locations());
    for version in [IpVersion::V4, IpVersion::V6] {
        let compared = match version {
            IpVersion::V4 => opts.v4,
            IpVersion::V6 => opts.v6,
        };
        let from_traffic = match version {
            IpVersion::V4 => traffic.queries_v4() >= MIN_QUERIES,
            IpVersion::V6 => traffic.queries_v6() >= MIN_QUERIES,
        };
        let mut fam = FamilyDiff {
            family: version.to_string(),
            compared,
            ranges_changed: 0,
            sampled: 0,
            changed: 0,
            ratio: 0.0,
            sampled_from: if from_traffic { SampledFrom::Traffic } else { SampledFrom::Random },
        };
        if !compared {
            families.push(fam);
            continue;
        }
        let (a, b) = match version {
            IpVersion::V4 => (widen(old.v4_ranges()), widen(new.v4_ranges())),
            IpVersion::V6 => (old.v6_ranges().to_vec(), new.v6_ranges().to_vec()),
        };
        let diffs = range_diff(&a, &b, ol, nl);
        fam.ranges_changed = diffs.len();
        ranges_changed += diffs.len();
        for &(s, e, x, y) in diffs.iter().take(opts.list_ranges.saturating_sub(changed_ranges.len())) {
            changed_ranges.push(ChangedRange {
                start: addr_text(version, s),
                end: addr_text(version, e),
                from: ol[x as usize].clone(),
                to: nl[y as usize].clone(),
            });
        }

        // The sample.
        let known: Vec<(u128, u128)> = match version {
            IpVersion::V4 => Vec::new(),
            IpVersion::V6 => a.iter().chain(&b).filter(|r| r.2 != UNKNOWN).map(|r| (r.0, r.1)).collect(),
        };
        let lookup = |t: &[(u128, u128, u32)], addr: u128| -> u32 {
            let i = t.partition_point(|r| r.0 <= addr).saturating_sub(1);
            t.get(i).map_or(UNKNOWN, |r| r.2)
        };
        let n = match version {
            IpVersion::V6 if known.is_empty() && !from_traffic => 0,
            _ => opts.sample,
        };
        for _ in 0..n {
            let drawn = match version {
                IpVersion::V4 => traffic.draw_v4(&mut rng).map(u128::from),
                IpVersion::V6 => traffic.draw_v6(&mut rng),
            };
            let addr = match (drawn, version) {
                (Some(addr), _) => addr,
                (None, IpVersion::V4) => loop {
                    let x: u32 = rng.r#gen();
                    if !reserved::is_special_v4(Ipv4Addr::from(x)) {
                        break u128::from(x);
                    }
                },
                (None, IpVersion::V6) => {
                    let (s, e) = known[rng.gen_range(0..known.len())];
                    s + rng.gen_range(0..=e - s)
                }
            };
            fam.sampled += 1;
            let (x, y) = (lookup(&a, addr), lookup(&b, addr));
            let (from, to) = (&ol[x as usize], &nl[y as usize]);
            if from == to {
                continue;
            }
            fam.changed += 1;
            let pick = |f: &str, t: &str| unknown_name(if f.is_empty() { t } else { f });
            *by_province.entry(pick(&from.province, &to.province)).or_default() += 1;
            *by_isp.entry(pick(&from.isp, &to.isp)).or_default() += 1;
            *transitions.entry((from.clone(), to.clone())).or_default() += 1;
        }
        if fam.sampled > 0 {
            fam.ratio = fam.changed as f64 / fam.sampled as f64;
        }
        families.push(fam);
    }
    let mut trans: Vec<Transition> =
        transitions.into_iter().map(|((from, to), count)| Transition { from, to, count }).collect();
    trans.sort_by(|a, b| b.count.cmp(&a.count).then_with(|| (&a.from, &a.to).cmp(&(&b.from, &b.to))));
    trans.truncate(opts.top);
    DiffReport {
        ranges_changed,
        sampled: families.iter().map(|f| f.sampled).sum(),
        changed: families.iter().map(|f| f.changed).sum(),
        ratio: families.iter().map(|f| f.ratio).fold(0.0, f64::max),
        families,
        by_province: top_counts(by_province, opts.top),
        by_isp: top_counts(by_isp, opts.top),
        transitions: trans,
        changed_ranges,
    }
}

/// A tuple as `CN/广东/深圳/电信`, `-` for unknown fields.
pub fn tuple_text(l: &Location) -> String {
    let f = |s: &str| {
        if s.is_empty() { "-".to_string() } else { s.to_string() }
    };
    format!("{}/{}/{}/{}", f(&l.country), f(&l.province), f(&l.city), f(&l.isp))
}

impl DiffReport {
    /// The report as text for `lagran geo diff` and the logs.
    pub fn render(&self) -> String {
        let mut o = String::new();
        let _ = writeln!(o, "ranges changed: {}", self.ranges_changed);
        for f in &self.families {
            if !f.compared {
                let _ = writeln!(o, "  {}: not compared", f.family);
                continue;
            }
            let _ = writeln!(
                o,
                "  {}: {} ranges changed; {} of {} sampled addresses change tuple ({:.3} %){}",
                f.family,
                f.ranges_changed,
                f.changed,
                f.sampled,
                f.ratio * 100.0,
                match f.sampled_from {
                    SampledFrom::Random => "",
                    SampledFrom::Traffic => ", sampled from the answered traffic",
                }
            );
        }
        let _ = writeln!(
            o,
            "sampled: {} changed of {} ({:.3} %, largest family ratio)",
            self.changed,
            self.sampled,
            self.ratio * 100.0
        );
        let list = |o: &mut String, title: &str, v: &[Count]| {
            if v.is_empty() {
                return;
            }
            let _ = writeln!(o, "{title}:");
            for c in v {
                let _ = writeln!(o, "  {:>8}  {}", c.count, c.name);
            }
        };
        list(&mut o, "changed samples by province", &self.by_province);
        list(&mut o, "changed samples by ISP", &self.by_isp);
        if !self.transitions.is_empty() {
            let _ = writeln!(o, "most frequent changes:");
            for t in &self.transitions {
                let _ = writeln!(o, "  {:>8}  {} -> {}", t.count, tuple_text(&t.from), tuple_text(&t.to));
            }
        }
        if !self.changed_ranges.is_empty() {
            let shown = self.changed_ranges.len();
            let _ = writeln!(o, "changed ranges ({shown} of {} shown):", self.ranges_changed);
            for r in &self.changed_ranges {
                let _ = writeln!(o, "  {}-{}  {} -> {}", r.start, r.end, tuple_text(&r.from), tuple_text(&r.to));
            }
        }
        o
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::geo::{Xdb, write_xdb_at};

    fn ip(s: &str) -> u128 {
        u128::from(u32::from(s.parse::<Ipv4Addr>().unwrap()))
    }

    fn db(ranges: &[(&str, &str, &str)]) -> GeoDb {
        let r: Vec<_> = ranges.iter().map(|(s, e, g)| (ip(s), ip(e), g.to_string())).collect();
        GeoDb::from_xdbs(Some(Xdb::from_bytes(write_xdb_at(IpVersion::V4, &r, 0).unwrap()).unwrap()), None)
    }

    #[test]
    fn identical_data_has_no_change_and_layouts_do_not_count() {
        let a = db(&[("1.0.0.0", "1.255.255.255", "中国|0|广东省|深圳市|电信")]);
        let b = db(&[("1.0.0.0", "1.255.255.255", "中国|华南|广东省|深圳市|电信")]);
        let r = diff_geo(&a, &b, &DiffOptions { sample: 5000, ..Default::default() });
        assert_eq!((r.ranges_changed, r.changed), (0, 0));
        assert_eq!(r.sampled, 5000, "IPv4 sampled; IPv6 has no known range on either side");
        assert_eq!(r.ratio, 0.0);
    }

    #[test]
    fn changed_ranges_and_samples_are_reported_by_province_and_isp() {
        let a = db(&[
            ("1.0.0.0", "1.255.255.255", "中国|0|广东省|深圳市|电信"),
            ("2.0.0.0", "2.255.255.255", "中国|0|北京|北京市|联通"),
            ("3.0.0.0", "3.0.0.255", "中国|0|上海|上海市|移动"),
        ]);
        let b = db(&[
            ("1.0.0.0", "1.127.255.255", "中国|0|广东省|深圳市|电信"),
            ("1.128.0.0", "1.255.255.255", "中国|0|广西|南宁市|电信"),
            ("2.0.0.0", "2.255.255.255", "中国|0|北京|北京市|联通"),
            ("3.0.0.0", "3.0.0.255", "中国|0|上海|上海市|电信"),
            ("4.0.0.0", "4.0.0.255", "美国|0|0|0|0"),
        ]);
        let r = diff_geo(&a, &b, &DiffOptions { sample: 20_000, ..Default::default() });
        assert_eq!(r.ranges_changed, 3, "{}", r.render());
        assert_eq!(
            r.changed_ranges.iter().map(|c| (c.start.as_str(), c.end.as_str())).collect::<Vec<_>>(),
            vec![("1.128.0.0", "1.255.255.255"), ("3.0.0.0", "3.0.0.255"), ("4.0.0.0", "4.0.0.255")]
        );
        // 1.128/9 is 2^23 of ~3.7e9 public addresses: about 0.23 % of the sample.
        assert!(r.changed > 0 && r.ratio > 0.001 && r.ratio < 0.005, "{}", r.render());
        assert_eq!(r.by_province[0].name, "广东");
        assert_eq!(r.by_isp[0].name, "电信");
        assert_eq!(r.transitions[0].to.province, "广西");
        // The same seed gives the same sample.
        assert_eq!(r, diff_geo(&a, &b, &DiffOptions { sample: 20_000, ..Default::default() }));
        let text = r.render();
        assert!(
            text.contains("ranges changed: 3") && text.contains("CN/广东/深圳/电信 -> CN/广西/南宁/电信"),
            "{text}"
        );
    }

    #[test]
    fn a_traffic_sample_weighs_a_change_by_the_queries_it_moves() {
        let a = db(&[
            ("1.0.0.0", "1.255.255.255", "中国|0|广东省|深圳市|电信"),
            ("2.0.0.0", "2.255.255.255", "中国|0|北京|北京市|联通"),
        ]);
        // Only 1.0.0.0/16 moves: 0.002 % of the public address space.
        let b = db(&[
            ("1.0.0.0", "1.0.255.255", "中国|0|广西|南宁市|电信"),
            ("1.1.0.0", "1.255.255.255", "中国|0|广东省|深圳市|电信"),
            ("2.0.0.0", "2.255.255.255", "中国|0|北京|北京市|联通"),
        ]);
        let (old, new) = (PartitionTable::build(&a, &[]), PartitionTable::build(&b, &[]));
        let opts = DiffOptions { sample: 20_000, ..Default::default() };
        let net = |s: &str| s.parse::<ipnet::IpNet>().unwrap();
        let random = diff_partitions(&old, &new, &opts);
        assert!(random.ratio < 0.01, "random addresses hardly see it: {}", random.render());
        // 60 % of the queries come from inside the moved /16.
        let busy = TrafficSample::new([(net("1.0.5.0/24"), 600), (net("2.3.4.0/24"), 400)]);
        let r = diff_partitions_on(&old, &new, &opts, &busy);
        assert!((0.57..0.63).contains(&r.ratio), "{}", r.render());
        assert_eq!(r.families[0].sampled_from, SampledFrom::Traffic);
        assert_eq!(r.families[1].sampled_from, SampledFrom::Random, "no IPv6 traffic");
        // The same change where nobody queries moves no query.
        let elsewhere = TrafficSample::new([(net("1.2.5.0/24"), 600), (net("2.3.4.0/24"), 400)]);
        assert_eq!(diff_partitions_on(&old, &new, &opts, &elsewhere).ratio, 0.0);
        // Too little traffic: the random sample, exactly.
        let little = TrafficSample::new([(net("1.0.5.0/24"), MIN_QUERIES - 1)]);
        assert_eq!(diff_partitions_on(&old, &new, &opts, &little), random);
    }

    #[test]
    fn ipv6_is_sampled_inside_known_ranges() {
        let v6 = |region: &str| {
            let r = vec![(0x240e_u128 << 112, (0x240f_u128 << 112) - 1, region.to_string())];
            GeoDb::from_xdbs(None, Some(Xdb::from_bytes(write_xdb_at(IpVersion::V6, &r, 0).unwrap()).unwrap()))
        };
        let r = diff_geo(
            &v6("中国|广东省|深圳市|电信|CN"),
            &v6("中国|广东省|深圳市|联通|CN"),
            &DiffOptions { sample: 1000, v4: false, ..Default::default() },
        );
        assert_eq!(r.families[1].sampled, 1000);
        assert_eq!(r.families[1].changed, 1000);
        assert_eq!(r.ratio, 1.0);
        assert!(!r.families[0].compared);
        assert_eq!(r.changed_ranges[0].start, "240e::");
    }
}
