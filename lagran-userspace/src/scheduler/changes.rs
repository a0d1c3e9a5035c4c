//! The change log: one structured line per (name, old answer -> new answer)
//! when a published table moves answers.
//!
//! Computed after publishing, off the runtime, from the diff of the old and
//! new prefix maps: one merge walk over both maps' blocks finds the address
//! spans whose answer moved, and only the partition ranges inside those spans
//! are looked at for counts and labels. A name whose maps and answers are the
//! same (shared, unchanged maps compare by pointer) costs nothing.

use std::collections::{HashMap, VecDeque};

use serde::Serialize;

use crate::partition::PartitionTable;
use crate::prefix_map::PrefixMapV4;
use crate::route_table::{Answer, AnswerState, RouteTable};

/// How many answer changes [`ChangeLog`] keeps.
pub const CHANGE_LOG_CAPACITY: usize = 500;

/// One logged answer change: a name's clients moved from one node to another.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct ChangeEvent {
    /// When the table was generated (unix ms).
    pub at_ms: i64,
    /// The table version that made the change.
    pub version: u64,
    pub name: String,
    /// `None`: nothing answered before (or the name is new).
    pub from: Option<String>,
    pub to: Option<String>,
    /// Partition ranges (IPv4) that moved.
    pub ranges: usize,
    /// A few of the partitions, as `country/province/city/isp`.
    pub partitions: Vec<String>,
    pub state: AnswerState,
    pub reason: String,
}

/// The last [`CHANGE_LOG_CAPACITY`] answer changes, in memory (the console's
/// timeline; the structured log lines are the durable record).
#[derive(Debug, Default)]
pub struct ChangeLog {
    events: std::sync::Mutex<VecDeque<ChangeEvent>>,
}

impl ChangeLog {
    /// Appends `events`, dropping the oldest beyond the capacity.
    pub fn record(&self, events: Vec<ChangeEvent>) {
        let mut q = self.events.lock().expect("change log lock poisoned");
        for e in events {
            if q.len() == CHANGE_LOG_CAPACITY {
                q.pop_front();
            }
            q.push_back(e);
        }
    }

    /// Every kept change, oldest first.
    pub fn events(&self) -> Vec<ChangeEvent> {
        self.events.lock().expect("change log lock poisoned").iter().cloned().collect()
    }
}

/// One structured line per (name, old answer -> new answer): how many
/// partition ranges moved, a few of them by location, and the new answer's
/// reason (which names the stages and rules that decided it). Returns the
/// same as events, for the [`ChangeLog`].
pub(super) fn log_changes(partitions: &PartitionTable, old: &RouteTable, new: &RouteTable) -> Vec<ChangeEvent> {
    let mut events = Vec::new();
    if old.version == 0 {
        return events;
    }
    for name in new.scheduled_names() {
        let Some(before) = old.scheduled(&name.name) else {
            tracing::info!(name = %name.name, version = new.version, "name scheduled");
            events.push(ChangeEvent {
                at_ms: new.generated_at_ms,
                version: new.version,
                name: name.name.clone(),
                from: None,
                to: name.answers.first().and_then(|a| a.node.clone()),
                ranges: 0,
                partitions: Vec::new(),
                state: name.answers.first().map_or(AnswerState::Empty, |a| a.state),
                reason: "name scheduled".into(),
            });
            continue;
        };
        if before.answers == name.answers && before.v4 == name.v4 {
            continue; // the common case: a periodic recompute that changed nothing
        }
        let moved = |a: &Answer, b: &Answer| a.node != b.node || a.ipv4 != b.ipv4;
        for ((from, to), m) in moves(partitions, &before.v4, &name.v4, &before.answers, &name.answers, moved) {
            tracing::info!(
                name = %name.name,
                from = from.unwrap_or("-"),
                to = to.unwrap_or("-"),
                addresses = ?m.answer.ipv4,
                ranges = m.ranges,
                partitions = %m.sample.join(", "),
                state = ?m.answer.state,
                reason = %m.answer.reason,
                version = new.version,
                "answer changed"
            );
            events.push(ChangeEvent {
                at_ms: new.generated_at_ms,
                version: new.version,
                name: name.name.clone(),
                from: from.map(str::to_string),
                to: to.map(str::to_string),
                ranges: m.ranges,
                partitions: m.sample,
                state: m.answer.state,
                reason: m.answer.reason.clone(),
            });
        }
    }
    events
}

/// The partition ranges that moved from one node to another.
#[derive(Debug)]
pub(super) struct Move<'a> {
    /// Partition ranges (of the geo table) holding addresses that moved.
    pub ranges: usize,
    /// Up to five of their locations.
    pub sample: Vec<String>,
    /// The answer they moved to.
    pub answer: &'a Answer,
}

/// The inclusive address spans whose value differs between two maps of one
/// family, with the old and the new value. When `new` was spliced from `old`
/// itself and no copied block's answer moved (`moved_value(old, new)`), only
/// the blocks the splice split again are walked; else every block of both.
pub(super) fn changed_spans(
    old: &PrefixMapV4,
    new: &PrefixMapV4,
    moved_value: impl Fn(u32, u32) -> bool,
) -> Vec<(u32, u32, u32, u32)> {
    let mut out: Vec<(u32, u32, u32, u32)> = Vec::new();
    let (o, n) = (old.columns(), new.columns());
    if let Some(copied) = new.copied_from(old) {
        let to = |v: u32| copied.remap.map_or(v, |m| m[v as usize]);
        // Each value is looked at once (0: not yet, 1: stays, 2: moved), not once per block.
        let mut seen: Vec<u8> = Vec::new();
        let mut stays = |v: u32| {
            let i = v as usize;
            if i >= seen.len() {
                seen.resize(i + 1, 0);
            }
            if seen[i] == 0 {
                seen[i] = if moved_value(v, to(v)) { 2 } else { 1 };
            }
            seen[i] == 1
        };
        let still = copied.runs.iter().all(|r| o.2[r.from..r.from + r.len].iter().all(|&v| stays(v)));
        if still {
            for (og, ng) in copied.gaps(o.0.len(), n.0.len()) {
                let old_gap = (&o.0[og.clone()], &o.1[og.clone()], &o.2[og]);
                let new_gap = (&n.0[ng.clone()], &n.1[ng.clone()], &n.2[ng]);
                merge_spans(old_gap, new_gap, &mut out);
            }
            return out;
        }
    }
    merge_spans(o, n, &mut out);
    out
}

/// The merge walk of [`changed_spans`] over two runs of blocks (columns:
/// starts, lengths, values) that cover the same addresses.
fn merge_spans(old: (&[u32], &[u8], &[u32]), new: (&[u32], &[u8], &[u32]), out: &mut Vec<(u32, u32, u32, u32)>) {
    fn end(addr: u32, len: u8) -> u32 {
        let host = 32 - len as u32;
        (addr as u64 + ((1u64 << host) - 1)) as u32
    }
    let (mut i, mut j) = (0, 0);
    while i < old.0.len() && j < new.0.len() {
        let (xa, xv, ya, yv) = (old.0[i], old.2[i], new.0[j], new.2[j]);
        let (xe, ye) = (end(xa, old.1[i]), end(ya, new.1[j]));
        let (s, e) = (xa.max(ya), xe.min(ye));
        if xv != yv {
            match out.last_mut() {
                Some(last) if (last.2, last.3) == (xv, yv) && last.1.checked_add(1) == Some(s) => last.1 = e,
                _ => out.push((s, e, xv, yv)),
            }
        }
        if xe == e {
            i += 1;
        }
        if ye == e {
            j += 1;
        }
    }
}

/// Per (from node, to node), the partition ranges whose answer moved
/// (`moved` decides what counts as a move).
pub(super) fn moves<'a>(
    partitions: &PartitionTable,
    old_map: &PrefixMapV4,
    new_map: &PrefixMapV4,
    old_answers: &'a [Answer],
    new_answers: &'a [Answer],
    moved: impl Fn(&Answer, &Answer) -> bool,
) -> HashMap<(Option<&'a str>, Option<&'a str>), Move<'a>> {
    let mut out: HashMap<(Option<&'a str>, Option<&'a str>), Move<'a>> = HashMap::new();
    // The last partition range counted per move: one range spans several blocks.
    let mut counted: HashMap<(Option<&'a str>, Option<&'a str>), usize> = HashMap::new();
    let ranges = partitions.v4_ranges();
    let moved_value = |ov: u32, nv: u32| match (old_answers.get(ov as usize), new_answers.get(nv as usize)) {
        (Some(a), Some(b)) => moved(a, b),
        _ => false,
    };
    for (s, e, ov, nv) in changed_spans(old_map, new_map, moved_value) {
        if !moved_value(ov, nv) {
            continue;
        }
        let (a_old, a_new) = (&old_answers[ov as usize], &new_answers[nv as usize]);
        let key = (a_old.node.as_deref(), a_new.node.as_deref());
        let m = out.entry(key).or_insert(Move { ranges: 0, sample: Vec::new(), answer: a_new });
        let first = ranges.partition_point(|r| r.1 < s);
        for (i, &(rs, _, pid)) in ranges.iter().enumerate().skip(first) {
            if rs > e {
                break;
            }
            if counted.get(&key) == Some(&i) {
                continue;
            }
            counted.insert(key, i);
            m.ranges += 1;
            let loc = &partitions.locations()[pid as usize];
            let label = if loc.is_unknown() {
                "unknown".to_string()
            } else {
                format!("{}/{}/{}/{}", loc.country, loc.province, loc.city, loc.isp)
            };
            if m.sample.len() < 5 && !m.sample.contains(&label) {
                m.sample.push(label);
            }
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::geo::{GeoDb, IpVersion, Xdb, write_xdb};
    use crate::model::{Node, NodeStatus, Rule, RuleKind, Zone};
    use crate::scheduler::settings::ScheduleSettings;
    use crate::scheduler::{BuildState, Change, Inputs, build_route_table};
    use std::net::Ipv4Addr;

    fn partitions() -> PartitionTable {
        let ip = |s: &str| u32::from(s.parse::<Ipv4Addr>().unwrap()) as u128;
        let ranges = vec![
            (0, ip("58.59.255.255"), "美国|0|0|0|0".to_string()),
            (ip("58.60.0.0"), ip("58.61.255.255"), "中国|0|广东省|深圳市|电信".to_string()),
            (ip("58.62.0.0"), ip("58.62.255.255"), "中国|0|广东省|广州市|电信".to_string()),
            (ip("58.63.0.0"), ip("123.111.255.255"), "美国|0|0|0|0".to_string()),
            (ip("123.112.0.0"), ip("123.127.255.255"), "中国|0|北京|北京市|联通".to_string()),
            (ip("123.128.0.0"), u32::MAX as u128, "美国|0|0|0|0".to_string()),
        ];
        let xdb = Xdb::from_bytes(write_xdb(IpVersion::V4, &ranges).unwrap()).unwrap();
        PartitionTable::build(&GeoDb::from_xdbs(Some(xdb), None), &[])
    }

    fn node(name: &str, province: &str, city: &str, isp: &str, ip: [u8; 4]) -> Node {
        let mut n = Node::new(name);
        n.country = "CN".into();
        n.province = province.into();
        n.city = city.into();
        n.isp = isp.into();
        n.public_ip = Some(ip.into());
        n
    }

    /// What the log reported before the diff: every partition range, looked
    /// up at its start in both tables.
    fn scanned(p: &PartitionTable, old: &RouteTable, new: &RouteTable, name: &str) -> HashMap<(String, String), usize> {
        let (a, b) = (old.scheduled(name).unwrap(), new.scheduled(name).unwrap());
        let mut out = HashMap::new();
        for &(start, _, _) in p.v4_ranges() {
            let addr = std::net::IpAddr::V4(start.into());
            let (x, y) = (a.answer_for(addr).0, b.answer_for(addr).0);
            if x.node != y.node || x.ipv4 != y.ipv4 {
                let key = (x.node.clone().unwrap_or_default(), y.node.clone().unwrap_or_default());
                *out.entry(key).or_insert(0) += 1;
            }
        }
        out
    }

    #[test]
    fn the_map_diff_finds_the_moved_partitions_and_only_them() {
        let p = partitions();
        let s = ScheduleSettings::default();
        let zone = Zone::new("edge.lagran.net");
        let mut inputs = Inputs {
            nodes: vec![
                node("gd-01", "广东", "深圳", "电信", [192, 0, 2, 1]),
                node("bj-01", "北京", "北京", "联通", [192, 0, 2, 2]),
                node("hk-01", "", "", "", [192, 0, 2, 3]),
            ],
            zones: vec![zone],
            now_ms: 1_000,
            ..Default::default()
        };
        inputs.nodes[2].country = "HK".into();
        inputs.nodes[2].weight = 150;
        let mut state = BuildState::default();
        let t1 = build_route_table(1, &inputs, &p, &s, &s.policy(), &mut state, &Change::Everything);
        inputs.nodes[0].status = NodeStatus::Offline;
        let t2 = build_route_table(2, &inputs, &p, &s, &s.policy(), &mut state, &Change::Everything);
        let (a, b) = (t1.scheduled("edge.lagran.net").unwrap(), t2.scheduled("edge.lagran.net").unwrap());
        let m = moves(&p, &a.v4, &b.v4, &a.answers, &b.answers, |x, y| x.node != y.node);
        assert_eq!(m.len(), 1, "{m:?}");
        let mv = &m[&(Some("gd-01"), Some("hk-01"))];
        assert_eq!(mv.ranges, 2, "Shenzhen and Guangzhou moved, nothing else");
        assert!(mv.sample.iter().any(|l| l.contains("深圳")), "{:?}", mv.sample);
        assert!(mv.sample.iter().any(|l| l.contains("广州")), "{:?}", mv.sample);
        let want = scanned(&p, &t1, &t2, "edge.lagran.net");
        assert_eq!(want.get(&("gd-01".to_string(), "hk-01".to_string())), Some(&2), "{want:?}");

        // A prefix rule moves part of one range only: counted once, found by the diff.
        let r = Rule {
            id: 7,
            kind: RuleKind::Manual,
            domain: None,
            country: None,
            province: None,
            city: None,
            isp: None,
            prefix: Some("123.112.7.0/24".parse().unwrap()),
            node: "hk-01".into(),
            percent: 100,
            priority: 0,
            expires_at_ms: None,
            note: String::new(),
            created_at_ms: 0,
        };
        inputs.rules.push(r);
        let t3 = build_route_table(3, &inputs, &p, &s, &s.policy(), &mut state, &Change::Everything);
        let c = t3.scheduled("edge.lagran.net").unwrap();
        let m = moves(&p, &b.v4, &c.v4, &b.answers, &c.answers, |x, y| x.node != y.node);
        assert_eq!(m.len(), 1, "{m:?}");
        assert_eq!(m[&(Some("bj-01"), Some("hk-01"))].ranges, 1);
        // Unchanged maps: nothing to walk.
        let m = moves(&p, &c.v4, &c.v4, &c.answers, &c.answers, |x, y| x.node != y.node);
        assert!(m.is_empty());
    }

    /// A map spliced from the old one (the incremental build's) is walked
    /// between its copied runs only; the moves found are those of the same
    /// map built whole, also when a copied block's answer moved (every block
    /// is walked then).
    #[test]
    fn a_spliced_map_gives_the_moves_of_the_same_map_built_whole() {
        use crate::prefix_map::PrefixMapV4;
        let p = partitions();
        let answer = |n: &str| Answer { node: Some(n.into()), ..Answer::default() };
        let old = PrefixMapV4::from_ranges(p.v4_ranges().iter().map(|&(s, e, pid)| (s, e, pid % 3)), 0);
        let old_answers: Vec<Answer> = ["a", "b", "c"].iter().map(|n| answer(n)).collect();
        // The build renumbers the answers (0 -> 2, 1 -> 0, 2 -> 1) and the
        // Shenzhen range moves to a new answer, 3.
        let remap = [2, 0, 1];
        let sz = p.v4_ranges()[1];
        let spliced = old.splice(&[(sz.0, sz.1, 3)], Some(&remap));
        let whole = PrefixMapV4::from_ranges(spliced.ranges(), 0);
        assert_eq!(spliced, whole);
        assert!(spliced.copied_from(&old).is_some() && whole.copied_from(&old).is_none());
        let mut new_answers = vec![answer("b"), answer("c"), answer("a"), answer("d")];
        let summary = |m: HashMap<(Option<&str>, Option<&str>), Move>| {
            let mut v: Vec<_> = m.into_iter().map(|(k, m)| (k, m.ranges, m.sample, m.answer.node.clone())).collect();
            v.sort();
            format!("{v:?}")
        };
        for copied_moved in [false, true] {
            if copied_moved {
                new_answers[0] = answer("e"); // old answer 1 ("b") is now "e" where it was copied
            }
            let by = |x: &Answer, y: &Answer| x.node != y.node;
            let got = summary(moves(&p, &old, &spliced, &old_answers, &new_answers, by));
            let want = summary(moves(&p, &old, &whole, &old_answers, &new_answers, by));
            assert_eq!(got, want, "copied answer moved: {copied_moved}");
            assert!(got.contains("Some(\"d\")"), "{got}");
            assert_eq!(got.contains("Some(\"e\")"), copied_moved, "{got}");
        }
    }
}
