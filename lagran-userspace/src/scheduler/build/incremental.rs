//! Incremental recompute: what a build keeps for the next one, and which
//! parts of it a change leaves valid.
//!
//! A build records, besides the table: the [`Plan`] (classes, node numbers),
//! each pool's tops and rankings per class, each name's decision per class
//! (the answers it interned, in order) and its prefix maps. The next build,
//! when the caller says only nodes or their liveness changed ([`Change`]),
//! diffs the nodes against the record itself (the caller's word only decides
//! whether to try), and
//!
//! - takes the last build's node views, copying only the nodes that changed
//!   ([`Record::take_views`]), and updates their numbers in the plan;
//! - re-ranks only the classes whose top held a changed node, that a changed
//!   node now enters, or whose ISP stages it takes part in
//!   ([`Plan::top_may_change`]), and those whose failover check moved;
//! - re-decides only those classes (and held hysteresis decisions whose
//!   previous primary changed); every other decision is replayed;
//! - reuses a name's prefix maps when its per-partition answers, its answer
//!   list and its prefix overrides came out as in the last build; for a name without
//!   prefix overrides whose answers moved in some partitions, splices those
//!   partitions' ranges into the last maps ([`spliced_maps`],
//!   `PrefixMap::splice`) instead of building them from every range.
//!
//! Anything else (a node added, removed, renamed, moved to another location
//! or pool; rules, lines, domains, zones, settings or partitions changed; a
//! rule or line naming a changed node) falls back to the full build, as does
//! every [`Change::Everything`] (the periodic safety net). Either way the
//! table is the one the full build computes: the equivalence test holds both
//! to the oracle.

use std::collections::HashMap;
use std::sync::Arc;

use rustc_hash::FxHashMap;

use super::answers::Answers;
use super::overrides::Overrides;
use super::rank::PoolRanks;
use crate::engine::planner::Plan;
use crate::engine::{NodeView, Policy};
use crate::model::{Domain, Line, Node, Rule, Zone};
use crate::partition::PartitionTable;
use crate::prefix_map::{PrefixMapV4, PrefixMapV6};
use crate::route_table::Answer;
use crate::scheduler::settings::ScheduleSettings;

/// What changed since the last build, as the writer knows it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Change {
    /// A node's load, weight, status or addresses (PATCH, heartbeat).
    Node(String),
    /// Probe verdicts or heartbeat timeouts (health transitions), or load
    /// figures the node cache already holds (heartbeats): no node by name.
    Liveness,
    /// Rules were written or expired.
    Rules,
    /// Anything else, or not known: the full build.
    Everything,
}

impl Change {
    /// The change as a standby tells the leader (`NOTIFY lagran_changes`).
    pub fn to_notification(&self) -> String {
        match self {
            Change::Node(name) => format!("node:{name}"),
            Change::Liveness => "liveness".into(),
            Change::Rules => "rules".into(),
            Change::Everything => "everything".into(),
        }
    }

    /// A standby's notification read back; anything unknown is [`Change::Everything`].
    pub fn from_notification(payload: &str) -> Change {
        match payload {
            "liveness" => Change::Liveness,
            "rules" => Change::Rules,
            p => p.strip_prefix("node:").map_or(Change::Everything, |n| Change::Node(n.to_string())),
        }
    }
    /// Whether a build may start from the last one's record.
    pub fn allows_incremental(&self) -> bool {
        matches!(self, Change::Node(_) | Change::Liveness)
    }

    /// Two pending changes as one.
    pub fn merge(self, other: Change) -> Change {
        match (self, other) {
            (a, b) if a == b => a,
            (Change::Node(_) | Change::Liveness, Change::Node(_) | Change::Liveness) => Change::Liveness,
            _ => Change::Everything,
        }
    }
}

/// One class's decision for one name, as recorded: the ids of the answers it
/// interned, in order, and of the one it chose, in the name's answer list of
/// the build that recorded it; and its automatic primary (a stable node id,
/// or `NO_CHOICE`).
#[derive(Clone, Debug)]
pub(in crate::scheduler) struct Decided {
    pub ids: Vec<u32>,
    pub last: u32,
    pub primary: u32,
}

/// No new id yet for an old answer id.
const UNMAPPED: u32 = u32::MAX;

/// Old answer ids (the last build's list of a name) to new ones, filled as
/// decisions are replayed: every old answer is copied and interned once,
/// whatever number of classes chose it.
pub(super) struct Remap<'a> {
    old: &'a [Answer],
    new: Vec<u32>,
}

impl<'a> Remap<'a> {
    pub fn new(old: &'a [Answer]) -> Remap<'a> {
        Remap { old, new: vec![UNMAPPED; old.len()] }
    }

    fn id(&mut self, answers: &mut Answers, old: u32) -> u32 {
        let at = old as usize;
        if self.new[at] != UNMAPPED {
            return self.new[at];
        }
        let mut a = self.old[at].clone();
        if let Some(c) = &mut a.canary {
            c.answer = self.id(answers, c.answer);
        }
        let id = answers.id(a);
        self.new[at] = id;
        id
    }
}

impl Answers {
    /// Interns a recorded decision's answers in their order, rewriting its ids
    /// into this list; the id of the chosen one.
    pub(super) fn replay(&mut self, d: &mut Decided, remap: &mut Remap) -> u32 {
        for id in &mut d.ids {
            *id = remap.id(self, *id);
        }
        d.last = remap.id(self, d.last);
        d.last
    }
}

/// One name's record.
#[derive(Clone, Debug, Default)]
pub(super) struct NameRecord {
    /// Per class, the decision without a held primary.
    pub natural: Vec<Option<Decided>>,
    /// Per (class, previous primary), the decision with hysteresis.
    pub held: FxHashMap<(u32, u32), Decided>,
    pub by_partition: Vec<u32>,
    /// The answers before and after the prefix overrides.
    pub pre_answers: Arc<Vec<Answer>>,
    pub answers: Arc<Vec<Answer>>,
    /// The prefix overrides the maps were built with.
    pub over: Overrides,
    pub v4: Option<PrefixMapV4>,
    pub v6: Option<PrefixMapV6>,
    /// The id of the unlocated blocks' answer (see `unlocated_answer`).
    pub unlocated: u32,
}

/// The partition table's ranges grouped by partition: which ranges (so which
/// blocks of a name's maps) a partition whose answer changed covers. Built
/// once per partition table and kept while it stays.
#[derive(Debug)]
pub(super) struct RangesByPartition {
    key: (usize, usize, usize, usize),
    v4: Grouped,
    v6: Grouped,
}

/// Range indices grouped by partition id (ascending within a partition).
#[derive(Debug)]
struct Grouped {
    offsets: Vec<u32>,
    items: Vec<u32>,
}

impl Grouped {
    fn new(partitions: usize, of_range: impl Iterator<Item = u32> + Clone) -> Grouped {
        let mut offsets = vec![0u32; partitions + 1];
        for p in of_range.clone() {
            offsets[p as usize + 1] += 1;
        }
        for i in 0..partitions {
            offsets[i + 1] += offsets[i];
        }
        let mut next = offsets.clone();
        let mut items = vec![0u32; offsets[partitions] as usize];
        for (i, p) in of_range.enumerate() {
            items[next[p as usize] as usize] = i as u32;
            next[p as usize] += 1;
        }
        Grouped { offsets, items }
    }

    fn of(&self, partition: usize) -> &[u32] {
        &self.items[self.offsets[partition] as usize..self.offsets[partition + 1] as usize]
    }
}

impl RangesByPartition {
    pub fn new(p: &PartitionTable) -> RangesByPartition {
        let n = p.locations().len();
        RangesByPartition {
            key: partitions_key(p),
            v4: Grouped::new(n, p.v4_ranges().iter().map(|r| r.2)),
            v6: Grouped::new(n, p.v6_ranges().iter().map(|r| r.2)),
        }
    }

    /// Whether this index is `p`'s.
    pub fn is_of(&self, p: &PartitionTable) -> bool {
        self.key == partitions_key(p)
    }
}

/// A name's prefix maps after some partitions' answers changed, spliced
/// into the last build's maps instead of built from every partition range:
/// `None` when that is not the same map (the unknown partition or the
/// unlocated answer changed: their ranges are split by the special-purpose
/// blocks). `old` answers old ids; `now` the new answer list's ids.
/// Only for names without prefix overrides, then or now.
pub(super) fn spliced_maps(
    index: &RangesByPartition,
    partitions: &PartitionTable,
    old: &NameRecord,
    now: &Answers,
    by_partition: &[u32],
    unlocated: u32,
) -> Option<(PrefixMapV4, PrefixMapV6)> {
    let (Some(v4), Some(v6)) = (&old.v4, &old.v6) else { return None };
    if old.by_partition.len() != by_partition.len() || !old.over.is_empty() {
        return None;
    }
    // Old answer ids to new ones (the same answer), `UNMAPPED` for answers gone.
    let to_new: Vec<u32> = old.answers.iter().map(|a| now.get(a).unwrap_or(UNMAPPED)).collect();
    let moved = |p: usize| to_new.get(old.by_partition[p] as usize) != Some(&by_partition[p]);
    if moved(crate::partition::UNKNOWN as usize) || to_new.get(old.unlocated as usize) != Some(&unlocated) {
        return None;
    }
    let changed: Vec<usize> = (0..by_partition.len()).filter(|&p| moved(p)).collect();

    let remap = to_new.iter().enumerate().any(|(i, &n)| n != i as u32).then_some(to_new.as_slice());
    fn changes<A: crate::prefix_map::PrefixAddr>(
        ranges: &[(A, A, u32)],
        grouped: &Grouped,
        changed: &[usize],
        by_partition: &[u32],
    ) -> Vec<(A, A, u32)> {
        let mut at: Vec<u32> = changed.iter().flat_map(|&p| grouped.of(p).iter().copied()).collect();
        at.sort_unstable();
        at.iter()
            .map(|&i| {
                let (s, e, p) = ranges[i as usize];
                (s, e, by_partition[p as usize])
            })
            .collect()
    }
    let c4 = changes(partitions.v4_ranges(), &index.v4, &changed, by_partition);
    let c6 = changes(partitions.v6_ranges(), &index.v6, &changed, by_partition);
    Some((v4.splice(&c4, remap), v6.splice(&c6, remap)))
}

/// What a build keeps for the next one.
#[derive(Clone, Debug)]
pub(super) struct Record {
    partitions: (usize, usize, usize, usize),
    settings: ScheduleSettings,
    policy: Policy,
    zones: Vec<Zone>,
    domains: Vec<Domain>,
    rules: Vec<Rule>,
    lines: Vec<Line>,
    /// The nodes as the build saw them (with liveness verdicts), taken and
    /// updated by the next build ([`Record::take_views`]).
    views: Vec<NodeView>,
    pub plan: Plan,
    pub pools: HashMap<String, PoolRanks>,
    pub names: HashMap<String, NameRecord>,
}

pub(super) fn partitions_key(p: &PartitionTable) -> (usize, usize, usize, usize) {
    (std::ptr::from_ref(p) as usize, p.locations().len(), p.v4_ranges().len(), p.v6_ranges().len())
}

/// Whether `a` and `b` are the same node as far as answers go (heartbeat
/// stamps only matter through liveness). Every field is named, so a field
/// added to [`Node`] cannot be forgotten here.
fn same_but_stamps(a: &Node, b: &Node) -> bool {
    let Node {
        name,
        status,
        public_ip,
        public_ipv6,
        hostname,
        country,
        province,
        city,
        isp,
        weight,
        cpu_usage,
        memory_usage,
        bandwidth_mbps,
        max_bandwidth_mbps,
        conns,
        max_conns,
        agent_url,
        probe_port,
        pool,
        lat,
        lon,
        created_at_ms,
        last_heartbeat_ms: _,
        updated_at_ms: _,
    } = b;
    a.name == *name
        && a.status == *status
        && a.public_ip == *public_ip
        && a.public_ipv6 == *public_ipv6
        && a.hostname == *hostname
        && a.country == *country
        && a.province == *province
        && a.city == *city
        && a.isp == *isp
        && a.weight == *weight
        && a.cpu_usage == *cpu_usage
        && a.memory_usage == *memory_usage
        && a.bandwidth_mbps == *bandwidth_mbps
        && a.max_bandwidth_mbps == *max_bandwidth_mbps
        && a.conns == *conns
        && a.max_conns == *max_conns
        && a.agent_url == *agent_url
        && a.probe_port == *probe_port
        && a.pool == *pool
        && a.lat == *lat
        && a.lon == *lon
        && a.created_at_ms == *created_at_ms
}

/// Whether a node kept everything that places it in the plan's classes.
fn same_place(a: &Node, b: &Node) -> bool {
    a.name == b.name
        && a.country == b.country
        && a.province == b.province
        && a.city == b.city
        && a.isp == b.isp
        && a.pool == b.pool
        && a.lat == b.lat
        && a.lon == b.lon
}

/// The inputs a record is checked against.
pub(super) struct Now<'a> {
    pub partitions: &'a PartitionTable,
    pub settings: &'a ScheduleSettings,
    pub policy: &'a Policy,
    pub zones: &'a [Zone],
    pub domains: &'a [Domain],
    pub rules: &'a [&'a Rule],
    pub lines: &'a [Line],
}

impl Record {
    pub fn new(now: &Now, plan: Plan, views: Vec<NodeView>) -> Record {
        Record {
            partitions: partitions_key(now.partitions),
            settings: now.settings.clone(),
            policy: now.policy.clone(),
            zones: now.zones.to_vec(),
            domains: now.domains.to_vec(),
            rules: now.rules.iter().map(|&r| r.clone()).collect(),
            lines: now.lines.to_vec(),
            views,
            plan,
            pools: HashMap::new(),
            names: HashMap::new(),
        }
    }

    /// The node views of the next build: this build's, with every node that
    /// differs from `nodes` (or whose liveness verdict at `now_ms` moved)
    /// taken anew, so only those are copied. Also, when every node kept its
    /// name and place (and their number), the indices of those whose answers
    /// may move (stamps aside).
    pub fn take_views(
        &mut self,
        nodes: &[Node],
        liveness: &crate::health::Liveness,
        now_ms: i64,
    ) -> (Vec<NodeView>, Option<Vec<usize>>) {
        let mut views = std::mem::take(&mut self.views);
        if views.len() != nodes.len() {
            return (NodeView::prepare_live(nodes.iter().cloned(), liveness, now_ms), None);
        }
        let (mut changed, mut placed) = (Vec::new(), true);
        for (i, (v, n)) in views.iter_mut().zip(nodes).enumerate() {
            let dead = liveness.verdict(n, now_ms);
            if v.dead == dead && v.node == *n {
                continue;
            }
            if v.dead != dead || !same_but_stamps(&v.node, n) {
                changed.push(i);
            }
            if same_place(&v.node, n) {
                v.node = n.clone();
                v.dead = dead;
            } else {
                placed = false;
                *v = NodeView { dead, ..NodeView::new(n.clone()) };
            }
        }
        (views, placed.then_some(changed))
    }

    /// Whether this record can be built on with `views` after `changed`
    /// nodes changed: nothing but those nodes' load, weight, status,
    /// addresses or liveness moved.
    pub fn continues(&self, now: &Now, views: &[NodeView], changed: &[usize]) -> bool {
        if self.partitions != partitions_key(now.partitions)
            || self.settings != *now.settings
            || self.policy != *now.policy
            || self.zones != now.zones
            || self.domains != now.domains
            || self.lines != now.lines
            || self.rules.len() != now.rules.len()
            || self.rules.iter().zip(now.rules).any(|(a, b)| a != *b)
        {
            return false;
        }
        let named = |n: &str| changed.iter().any(|&i| views[i].node.name == n);
        !(now.rules.iter().any(|r| named(&r.node)) || now.lines.iter().any(|l| l.node.as_deref().is_some_and(named)))
    }

    /// Takes the changed nodes into the plan.
    pub fn refresh(&mut self, views: &[NodeView], changed: &[usize]) {
        for &i in changed {
            self.plan.update_node(i, &views[i]);
        }
    }
}
