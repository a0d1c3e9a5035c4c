//! The route-table compiler: control-plane state in, one immutable table out.
//!
//! Pure: no store, no clock, no I/O. One answer per (scheduled name, partition),
//! stored as the coarsest client prefixes that share an answer.

use std::collections::HashMap;
use std::hash::BuildHasher;
use std::sync::Arc;

use hashbrown::HashTable;
use incremental::RangesByPartition;
use ipnet::IpNet;
use rustc_hash::{FxBuildHasher, FxHashMap};

use super::settings::ScheduleSettings;
use crate::engine::planner::{Eligible, Plan, RegionFilter, Top};
use crate::engine::{self, Family, NodeView, Policy, Ranking};
use crate::geo::reserved;
use crate::health::Liveness;
use crate::location::Location;
use crate::model::{AnswerMode, DEFAULT_POOL, Domain, Line, LineAnswer, Node, Rule, RuleKind, Zone};
use crate::partition::{PartitionTable, UNKNOWN};
use crate::prefix_map::{PrefixMapBuilder, PrefixMapV4, PrefixMapV6, push_merged};
use crate::route_table::{Answer, AnswerState, Canary, NodeHost, RouteTable, ScheduledName, ZoneRoutes};

pub use incremental::Change;

/// The control plane's state a route table is computed from.
#[derive(Clone, Debug, Default)]
pub struct Inputs {
    pub nodes: Vec<Node>,
    pub zones: Vec<Zone>,
    pub domains: Vec<Domain>,
    pub rules: Vec<Rule>,
    pub lines: Vec<Line>,
    pub liveness: Liveness,
    pub now_ms: i64,
}

/// What a recompute carries over from the previous one.
#[derive(Clone, Debug, Default)]
pub struct BuildState {
    /// Stable small integers for scheduled names, so the data-plane keys of a
    /// name never change while it exists.
    pub name_ids: NameIds,
    /// The automatic primary per name and partition (hysteresis): an index
    /// into `chosen_nodes`, or [`NO_CHOICE`].
    choices: HashMap<String, Vec<u32>>,
    /// The partition locations `choices` is indexed by, and their table's key.
    choice_locations: Vec<Location>,
    choice_key: (usize, usize, usize, usize),
    /// Node names that were chosen, interned.
    chosen_nodes: NameIds,
    chosen_names: Vec<String>,
    /// What the last build keeps for an incremental next one.
    record: Option<Box<incremental::Record>>,
    /// The partition ranges by partition, for splicing maps (built on the
    /// first incremental build, kept while the partitions stay).
    ranges: Option<Arc<RangesByPartition>>,
}

/// No automatic primary (no eligible node).
const NO_CHOICE: u32 = u32::MAX;

impl BuildState {
    /// Drops the incremental record (a copy used for a one-off full build
    /// need not carry it).
    pub fn forget_record(&mut self) {
        self.record = None;
    }

    /// The interned id of a node name in `choices`.
    fn node_id(&mut self, name: &str) -> u32 {
        let id = self.chosen_nodes.id(name) - 1;
        if id as usize == self.chosen_names.len() {
            self.chosen_names.push(name.to_string());
        }
        id
    }

    /// Re-indexes `choices` when the partitions changed (a geo reload): the
    /// choice follows the partition's location.
    fn follow_partitions(&mut self, partitions: &PartitionTable) {
        let key = incremental::partitions_key(partitions);
        let locations = partitions.locations();
        if self.choice_key == key || self.choice_locations.as_slice() == locations {
            self.choice_key = key;
            return;
        }
        self.choice_key = key;
        let old: HashMap<&Location, usize> = self.choice_locations.iter().enumerate().map(|(i, l)| (l, i)).collect();
        for v in self.choices.values_mut() {
            *v = locations.iter().map(|l| old.get(l).map_or(NO_CHOICE, |&i| v[i])).collect();
        }
        self.choice_locations = locations.to_vec();
    }
}

/// Stable name ids.
#[derive(Clone, Debug, Default)]
pub struct NameIds {
    ids: HashMap<String, u32>,
    next: u32,
}

impl NameIds {
    pub fn id(&mut self, name: &str) -> u32 {
        if let Some(&id) = self.ids.get(name) {
            return id;
        }
        self.next += 1;
        self.ids.insert(name.to_string(), self.next);
        self.next
    }
}

/// One scheduled name as the builder sees it.
struct NameSpec<'a> {
    name: String,
    pool: String,
    ttl: Option<u32>,
    domain: Option<&'a Domain>,
}

/// Interns answers of one name: each distinct answer once, in `list`, found
/// again by hash without a second copy of it as a key.
#[derive(Clone, Debug, Default)]
struct Answers {
    list: Vec<Answer>,
    /// Indices into `list`, hashed by the answer they name.
    ids: HashTable<u32>,
    /// While a decision is recorded: the ids it interned, in order.
    log: Option<Vec<u32>>,
}

impl Answers {
    /// An interner holding `list` (distinct answers) as it is.
    fn of_list(list: Vec<Answer>) -> Answers {
        let mut ids = HashTable::with_capacity(list.len());
        for (i, a) in list.iter().enumerate() {
            ids.insert_unique(FxBuildHasher.hash_one(a), i as u32, |&j| FxBuildHasher.hash_one(&list[j as usize]));
        }
        Answers { list, ids, log: None }
    }

    /// The id of `a`, if interned.
    fn get(&self, a: &Answer) -> Option<u32> {
        self.ids.find(FxBuildHasher.hash_one(a), |&i| self.list[i as usize] == *a).copied()
    }

    fn id(&mut self, a: Answer) -> u32 {
        let hash = FxBuildHasher.hash_one(&a);
        let list = &mut self.list;
        let id = match self.ids.find(hash, |&i| list[i as usize] == a) {
            Some(&id) => id,
            None => {
                let id = list.len() as u32;
                list.push(a);
                self.ids.insert_unique(hash, id, |&j| FxBuildHasher.hash_one(&list[j as usize]));
                id
            }
        };
        if let Some(log) = &mut self.log {
            log.push(id);
        }
        id
    }
}

/// The answer of a ranking: the first `per_answer` addresses of each family.
fn answer_of(r4: &Ranking, r6: &Ranking, per_answer: usize, ttl: u32, state: AnswerState) -> Answer {
    let ipv4: Vec<_> = r4.candidates.iter().filter_map(|c| c.public_ip).take(per_answer).collect();
    let ipv6: Vec<_> = r6.candidates.iter().filter_map(|c| c.public_ipv6).take(per_answer).collect();
    let primary = r4.primary().or(r6.primary());
    let state = if ipv4.is_empty() && ipv6.is_empty() { AnswerState::Empty } else { state };
    Answer {
        ttl,
        ipv4,
        ipv6,
        node: primary.map(|c| c.name.clone()),
        reason: primary.map_or_else(|| "no eligible node".to_string(), |c| c.reason.clone()),
        state,
        canary: None,
        hostname: None,
    }
}

/// Puts `node` first in a ranking (a manual pin); false when it is not eligible.
pub(super) fn pin(r: &mut Ranking, node: &str, why: &str) -> bool {
    let Some(i) = r.candidates.iter().position(|c| c.name == node) else { return false };
    let mut c = r.candidates.remove(i);
    c.reason = why.to_string();
    r.candidates.insert(0, c);
    true
}

/// Lays `over` ranges (sorted by start, non-overlapping) on `base`, computing
/// each covered piece's value from the value underneath.
fn overlay_with<K>(
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

fn net_range(n: &IpNet) -> (bool, u128, u128) {
    match n.trunc() {
        IpNet::V4(n) => (true, u32::from(n.network()) as u128, u32::from(n.broadcast()) as u128),
        IpNet::V6(n) => (false, u128::from(n.network()), u128::from(n.broadcast())),
    }
}

/// What a client prefix gets instead of its geo partition's answer.
#[derive(Clone, Debug, PartialEq)]
enum PrefixOverride {
    /// A line's fixed answer (beats geo).
    Fixed(u32),
    /// A canary rule on a prefix: `percent` % to `node`.
    Canary { node: String, percent: u8, rule: i64 },
    /// A manual rule on a prefix: always `node`.
    Manual { node: String, rule: i64 },
}

/// A region rule, canonicalised once per build.
struct RegionRule<'a> {
    rule: &'a Rule,
    /// The scheduled name it is limited to, lowercase without the dot.
    domain: Option<String>,
    want: Location,
    on: [bool; 4],
    filter: RegionFilter,
}

impl RegionRule<'_> {
    fn applies_to(&self, name: &str) -> bool {
        self.domain.as_deref().is_none_or(|d| d == name)
    }
}

fn rule_domain(rule: &Rule) -> Option<String> {
    rule.domain.as_deref().map(|d| d.trim_end_matches('.').to_ascii_lowercase())
}

/// What the build shares across names: nodes, plan, rules.
struct Ctx<'a> {
    views: &'a [NodeView],
    by_name: HashMap<&'a str, usize>,
    plan: Plan,
    policy: &'a Policy,
    partitions: &'a PartitionTable,
}

/// The automatic rankings of one pool: per class, the top of each family as
/// numbers and as engine candidates (with reasons).
#[derive(Clone, Debug)]
struct PoolRanks {
    sets: [Eligible; 2],
    tops: Vec<[Top; 2]>,
    rankings: Vec<(Ranking, Ranking)>,
}

impl Ctx<'_> {
    fn pool(&self, pool: &str, k: usize) -> PoolRanks {
        let sets = [self.plan.eligible(self.views, Family::V4, pool), self.plan.eligible(self.views, Family::V6, pool)];
        let mut tops = Vec::with_capacity(self.plan.class_count());
        let mut rankings = Vec::with_capacity(self.plan.class_count());
        for class in 0..self.plan.class_count() as u32 {
            let t = [self.plan.top(&sets[0], class, k), self.plan.top(&sets[1], class, k)];
            rankings.push((self.ranking(&t[0], class), self.ranking(&t[1], class)));
            tops.push(t);
        }
        PoolRanks { sets, tops, rankings }
    }

    /// `old` after `changed` nodes changed ([`incremental`]): the sets again,
    /// and only the classes whose top may differ re-ranked. Also returns which
    /// classes' decisions may differ (re-ranked, or the failover check moved).
    fn pool_update(&self, pool: &str, k: usize, old: PoolRanks, changed: &[usize]) -> (PoolRanks, Vec<bool>) {
        let sets = [self.plan.eligible(self.views, Family::V4, pool), self.plan.eligible(self.views, Family::V6, pool)];
        let PoolRanks { sets: old_sets, mut tops, mut rankings } = old;
        let mut dirty = vec![false; tops.len()];
        let deadish = changed.iter().any(|&n| old_sets[0].has_dead(n as u32) || sets[0].has_dead(n as u32));
        for class in 0..tops.len() as u32 {
            let c = class as usize;
            for f in 0..2 {
                let moved = changed
                    .iter()
                    .any(|&n| self.plan.top_may_change(&old_sets[f], &sets[f], &tops[c][f], class, k, n as u32));
                if moved {
                    tops[c][f] = self.plan.top(&sets[f], class, k);
                    dirty[c] = true;
                } else if f == 0 && deadish {
                    let max_dead = self.plan.max_dead(&sets[0], class);
                    if max_dead != tops[c][0].max_dead {
                        tops[c][0].max_dead = max_dead;
                        dirty[c] = true;
                    }
                }
            }
            if dirty[c] {
                rankings[c] = (self.ranking(&tops[c][0], class), self.ranking(&tops[c][1], class));
            }
        }
        (PoolRanks { sets, tops, rankings }, dirty)
    }

    /// The engine's candidate (score terms, reason) for one node and class.
    fn candidate(&self, node: usize, class: u32) -> engine::Candidate {
        let rep = &self.partitions.locations()[self.plan.representative(class) as usize];
        engine::score(&self.views[node], rep, self.plan.class_coords(class), self.policy)
    }

    /// The top as an engine ranking (what `engine::rank` would put first),
    /// its candidates brief: names, addresses, scores and reasons.
    fn ranking(&self, top: &Top, class: u32) -> Ranking {
        let mut r = Ranking { candidates: Vec::with_capacity(top.nodes.len()), excluded: Vec::new() };
        let rep = &self.partitions.locations()[self.plan.representative(class) as usize];
        for &(n, score) in &top.nodes {
            debug_assert_eq!(self.candidate(n as usize, class).score, score, "planner and engine::score disagree");
            r.candidates.push(engine::brief(&self.views[n as usize], rep, score, self.policy));
        }
        if let (Some(from), Some(first)) = (top.spilled_from, r.candidates.first_mut()) {
            first.reason = format!("{} (spill from overloaded {})", first.reason, self.views[from as usize].node.name);
        }
        r
    }

    /// `r` with `node` in it when the full ranking has it (pins and hysteresis
    /// reach past the top).
    fn with_node(&self, r: &Ranking, pr: &PoolRanks, family: usize, class: u32, node: &str) -> Ranking {
        let mut r = r.clone();
        if !r.candidates.iter().any(|c| c.name == node)
            && let Some(&i) = self.by_name.get(node)
            && self.plan.candidate_score(&pr.sets[family], &pr.tops[class as usize][family], i, class).is_some()
        {
            r.candidates.push(self.candidate(i, class));
        }
        r
    }
}

/// A name's per-partition decisions, for the names that decide alike.
struct Twin {
    name: String,
    pool: String,
    ttl: u32,
    /// The region rules that apply to it (indices).
    rules: Vec<usize>,
    /// Its answers; the first `answers_len` are those of its decisions.
    answers: Arc<Vec<Answer>>,
    answers_len: usize,
    by_partition: Vec<u32>,
    chosen: Vec<u32>,
    /// For a name without prefix overrides (no line, no prefix rule applies):
    /// its finished answers and maps, which another such name copies whole.
    done: Option<Done>,
}

/// A finished name without prefix overrides.
struct Done {
    answers: Arc<Vec<Answer>>,
    unlocated: u32,
    v4: PrefixMapV4,
    v6: PrefixMapV6,
}

/// One scheduled name's build: its answers and how each is made.
struct NameBuild<'a> {
    name: &'a str,
    steady_ttl: u32,
    per_answer: usize,
    settings: &'a ScheduleSettings,
    answers: Answers,
}

impl NameBuild<'_> {
    /// A manual pin or canary node put first; `None` when it is not eligible.
    #[expect(clippy::too_many_arguments, reason = "the stage's inputs, named")]
    fn node_answer(
        &mut self,
        ctx: &Ctx,
        pr: &PoolRanks,
        class: u32,
        node: &str,
        why: &str,
        r4: &Ranking,
        r6: &Ranking,
        st: AnswerState,
    ) -> Option<u32> {
        let (mut a, mut b) = (ctx.with_node(r4, pr, 0, class, node), ctx.with_node(r6, pr, 1, class, node));
        (pin(&mut a, node, why) || pin(&mut b, node, why)).then(|| {
            let ttl = if st == AnswerState::Canary { self.settings.canary_ttl } else { self.steady_ttl };
            self.answers.id(answer_of(&a, &b, self.per_answer, ttl, st))
        })
    }

    /// [`NameBuild::decide`], recorded for replay: the ids of the answers it
    /// interns, in order, and its primary as a stable node id.
    fn decide_recorded(
        &mut self,
        ctx: &Ctx,
        pr: &PoolRanks,
        rules: &[RegionRule],
        class: u32,
        prev: Option<&str>,
        node_ids: &[u32],
    ) -> incremental::Decided {
        self.answers.log = Some(Vec::with_capacity(1));
        let (id, primary) = self.decide(ctx, pr, rules, class, prev);
        let ids = self.answers.log.take().unwrap_or_default();
        incremental::Decided { ids, last: id, primary: primary.map_or(NO_CHOICE, |i| node_ids[i]) }
    }

    /// The answer of one class (given the previous automatic primary, for
    /// hysteresis): automatic, then region rules. Returns it and the new primary.
    fn decide(
        &mut self,
        ctx: &Ctx,
        pr: &PoolRanks,
        rules: &[RegionRule],
        class: u32,
        prev: Option<&str>,
    ) -> (u32, Option<usize>) {
        let (base4, r6) = &pr.rankings[class as usize];
        let held;
        let r4: &Ranking = match (self.settings.hysteresis > 0.0, prev, base4.primary()) {
            (true, Some(prev), Some(best)) if best.name != prev => {
                let mut r = ctx.with_node(base4, pr, 0, class, prev);
                engine::apply_hysteresis(&mut r, Some(prev), self.settings.hysteresis, self.settings.hysteresis_points);
                held = r;
                &held
            }
            _ => base4,
        };
        let primary = r4.primary().and_then(|c| ctx.by_name.get(c.name.as_str()).copied());
        let failover = match (r4.primary(), pr.tops[class as usize][0].max_dead) {
            (Some(c), Some(dead)) => dead > c.score,
            _ => false,
        };
        let (st, ttl) = if failover {
            (AnswerState::Failover, self.settings.failover_ttl.min(self.steady_ttl))
        } else {
            (AnswerState::Steady, self.steady_ttl)
        };
        let mut id = self.answers.id(answer_of(r4, r6, self.per_answer, ttl, st));
        let matching = || rules.iter().filter(|r| r.applies_to(self.name) && ctx.plan.filter_matches(&r.filter, class));
        if let Some(rule) = matching().find(|r| r.rule.kind == RuleKind::Canary).map(|r| r.rule) {
            let why = format!("canary rule {} {}%", rule.id, rule.percent);
            if let Some(cid) = self.node_answer(ctx, pr, class, &rule.node, &why, r4, r6, AnswerState::Canary) {
                let mut base = self.answers.list[id as usize].clone();
                base.ttl = base.ttl.min(self.settings.canary_ttl);
                base.canary = Some(Canary { percent: rule.percent, answer: cid });
                id = self.answers.id(base);
            }
        }
        if let Some(rule) = matching().find(|r| r.rule.kind == RuleKind::Manual).map(|r| r.rule) {
            let why = format!("manual rule {}", rule.id);
            if let Some(mid) = self.node_answer(ctx, pr, class, &rule.node, &why, r4, r6, AnswerState::Steady) {
                id = mid;
            }
        }
        (id, primary)
    }
}

/// Computes a route table: one answer per (scheduled name, partition), stored
/// as the coarsest client prefixes that share an answer. Stage order, lowest
/// priority first: automatic ranking (with hysteresis) → lines → canary → manual.
///
/// Rankings come from the numeric [`Plan`]: one per (pool, effective location
/// class), not per partition; `engine::rank` is the oracle the tests hold it to.
pub fn build_route_table(
    version: u64,
    inputs: &Inputs,
    partitions: &PartitionTable,
    settings: &ScheduleSettings,
    policy: &Policy,
    state: &mut BuildState,
) -> RouteTable {
    build_route_table_after(version, inputs, partitions, settings, policy, state, &Change::Everything)
}

/// [`build_route_table`] after `change`: the same table, computed from the
/// last build's record where the change allows ([`incremental`]).
pub fn build_route_table_after(
    version: u64,
    inputs: &Inputs,
    partitions: &PartitionTable,
    settings: &ScheduleSettings,
    policy: &Policy,
    state: &mut BuildState,
    change: &Change,
) -> RouteTable {
    let now = inputs.now_ms;
    // The last build's node views, updated where nodes or verdicts changed.
    let mut last = state.record.take();
    let (views, node_changes) = match last.as_mut() {
        Some(r) => r.take_views(&inputs.nodes, &inputs.liveness, now),
        None => (NodeView::prepare_live(inputs.nodes.iter().cloned(), &inputs.liveness, now), None),
    };
    let per_answer = settings.answers_per_query.clamp(1, 4) as usize;
    let rules: Vec<&Rule> = inputs.rules.iter().filter(|r| r.is_active(now)).collect();
    let mut region: Vec<RegionRule> = rules
        .iter()
        .filter(|r| r.prefix.is_none())
        .map(|&rule| {
            let f = |o: &Option<String>| o.as_deref().unwrap_or("").to_string();
            let want = Location::new(&f(&rule.country), &f(&rule.province), &f(&rule.city), &f(&rule.isp));
            let on = [rule.country.is_some(), rule.province.is_some(), rule.city.is_some(), rule.isp.is_some()];
            RegionRule { rule, domain: rule_domain(rule), want, on, filter: [None; 4] }
        })
        .collect();
    let now_inputs = incremental::Now {
        partitions,
        settings,
        policy,
        zones: &inputs.zones,
        domains: &inputs.domains,
        rules: &rules,
        lines: &inputs.lines,
    };
    // An incremental build starts from the last build's record and the nodes that changed.
    if state.ranges.as_ref().is_some_and(|r| !r.is_of(partitions)) {
        state.ranges = None;
    }
    let last = last.filter(|_| change.allows_incremental());
    let changed = match (&last, node_changes) {
        (Some(r), Some(c)) => r.continues(&now_inputs, &views, &c).then_some(c),
        _ => None,
    };
    let (plan, mut old_pools, mut old_names) = match (last, &changed) {
        (Some(mut r), Some(changed)) => {
            r.refresh(&views, changed);
            (r.plan, r.pools, r.names)
        }
        _ => (
            Plan::new(&views, partitions.locations(), region.iter().map(|r| (&r.want, r.on)), policy),
            HashMap::new(),
            HashMap::new(),
        ),
    };
    let changed = changed.unwrap_or_default();
    for r in &mut region {
        r.filter = plan.filter(&r.want, r.on);
    }
    let by_name: HashMap<&str, usize> =
        views.iter().enumerate().rev().map(|(i, v)| (v.node.name.as_str(), i)).collect();
    let ctx = Ctx { views: &views, by_name, plan, policy, partitions };
    let class_of = ctx.plan.class_of();
    state.follow_partitions(partitions);
    let node_ids: Vec<u32> = views.iter().map(|v| state.node_id(&v.node.name)).collect();
    let changed_ids: Vec<u32> = changed.iter().map(|&i| node_ids[i]).collect();
    let hostnames: HashMap<&str, &str> = inputs
        .nodes
        .iter()
        .filter_map(|n| Some((n.name.as_str(), n.hostname.as_deref()?.trim_end_matches('.'))))
        .filter(|(_, h)| !h.is_empty())
        .collect();
    // Automatic rankings depend on (pool, class) only: names sharing a pool share them.
    let k = per_answer + 1;
    let mut pools: HashMap<String, (PoolRanks, Vec<bool>)> = HashMap::new();
    let mut names: HashMap<String, incremental::NameRecord> = HashMap::new();
    let mut twins: Vec<Twin> = Vec::new();
    let mut new_choices: HashMap<String, Vec<u32>> = HashMap::new();
    let mut zones = Vec::with_capacity(inputs.zones.len());
    let mut shared: Vec<(Vec<u32>, PrefixMapV4, PrefixMapV6)> = Vec::new();

    for zone in &inputs.zones {
        let apex = inputs.domains.iter().find(|d| d.name == zone.name);
        let mut specs = vec![NameSpec {
            name: zone.name.clone(),
            pool: apex.map_or(DEFAULT_POOL.to_string(), |d| d.pool.clone()),
            ttl: apex.and_then(|d| d.ttl),
            domain: apex,
        }];
        for d in inputs.domains.iter().filter(|d| d.zone == zone.name && d.name != zone.name) {
            specs.push(NameSpec { name: d.name.clone(), pool: d.pool.clone(), ttl: d.ttl, domain: Some(d) });
        }
        let mut scheduled = Vec::with_capacity(specs.len());
        for spec in specs {
            let (pr, dirty) = &*pools.entry(spec.pool.clone()).or_insert_with(|| match old_pools.remove(&spec.pool) {
                Some(old) => ctx.pool_update(&spec.pool, k, old, &changed),
                None => (ctx.pool(&spec.pool, k), vec![true; ctx.plan.class_count()]),
            });
            let steady_ttl = spec.ttl.unwrap_or(settings.ttl);
            let mut nb = NameBuild { name: &spec.name, steady_ttl, per_answer, settings, answers: Answers::default() };
            // The last build's decisions for this name, replayed where still valid.
            let mut old = old_names.remove(&spec.name).unwrap_or_default();
            let mut rec = incremental::NameRecord { natural: vec![None; ctx.plan.class_count()], ..Default::default() };

            // Per partition: the answer of its class, given its previous primary.
            let previous = state.choices.get(&spec.name);
            // A name with the same pool, TTL, region rules and previous choices as
            // one already built decides every partition alike: its twin's work is copied.
            let applying: Vec<usize> =
                region.iter().enumerate().filter(|(_, r)| r.applies_to(&spec.name)).map(|(i, _)| i).collect();
            let twin = twins.iter().find(|t| {
                t.pool == spec.pool
                    && t.ttl == steady_ttl
                    && t.rules == applying
                    && state.choices.get(&t.name) == previous
            });
            // No line and no prefix rule applies: the answers come from the decisions alone.
            let plain = !inputs.lines.iter().any(|l| l.domains.is_empty() || l.domains.contains(&spec.name))
                && !rules.iter().any(|r| r.prefix.is_some() && rule_domain(r).is_none_or(|d| d == spec.name));
            if let (true, Some(Twin { done: Some(done), by_partition, chosen, .. })) = (plain, twin) {
                // The twin's whole result: the same answers and maps.
                new_choices.insert(spec.name.clone(), chosen.clone());
                let rec = incremental::NameRecord {
                    by_partition: by_partition.clone(),
                    pre_answers: done.answers.clone(),
                    answers: done.answers.clone(),
                    v4: Some(done.v4.clone()),
                    v6: Some(done.v6.clone()),
                    unlocated: done.unlocated,
                    ..Default::default()
                };
                names.insert(spec.name.clone(), rec);
                let answers = done.answers.clone();
                scheduled.push(scheduled_name(spec, &mut state.name_ids, answers, &hostnames, (&done.v4, &done.v6)));
                continue;
            }
            let mut pushed = false;
            let (by_partition, chosen) = if let Some(t) = twin {
                nb.answers = Answers::of_list(t.answers[..t.answers_len].to_vec());
                (t.by_partition.clone(), t.chosen.clone())
            } else {
                // Each class's automatic primary: the first of its IPv4 top (its ranking's first).
                let best: Vec<u32> = pr
                    .tops
                    .iter()
                    .map(|[t4, _]| t4.nodes.first().map_or(NO_CHOICE, |&(n, _)| node_ids[n as usize]))
                    .collect();
                let mut natural: Vec<Option<(u32, u32)>> = vec![None; ctx.plan.class_count()];
                let mut held: FxHashMap<(u32, u32), (u32, u32)> = FxHashMap::default();
                let mut remap = incremental::Remap::new(&old.answers);
                let mut by_partition = Vec::with_capacity(class_of.len());
                let mut chosen = Vec::with_capacity(class_of.len());
                for (pid, &class) in class_of.iter().enumerate() {
                    let prev = previous.map_or(NO_CHOICE, |p| p[pid]);
                    let b = best[class as usize];
                    let sticky = settings.hysteresis > 0.0 && prev != NO_CHOICE && b != NO_CHOICE && prev != b;
                    let c = class as usize;
                    let (id, primary) = if sticky {
                        match held.get(&(class, prev)) {
                            Some(&d) => d,
                            None => {
                                let d = match old.held.remove(&(class, prev)) {
                                    Some(mut d) if !dirty[c] && !changed_ids.contains(&prev) => {
                                        nb.answers.replay(&mut d, &mut remap);
                                        d
                                    }
                                    _ => nb.decide_recorded(
                                        &ctx,
                                        pr,
                                        &region,
                                        class,
                                        Some(&state.chosen_names[prev as usize]),
                                        &node_ids,
                                    ),
                                };
                                let r = (d.last, d.primary);
                                rec.held.insert((class, prev), d);
                                held.insert((class, prev), r);
                                r
                            }
                        }
                    } else {
                        match natural[c] {
                            Some(d) => d,
                            None => {
                                let d = match old.natural.get_mut(c).and_then(Option::take) {
                                    Some(mut d) if !dirty[c] => {
                                        nb.answers.replay(&mut d, &mut remap);
                                        d
                                    }
                                    _ => nb.decide_recorded(&ctx, pr, &region, class, None, &node_ids),
                                };
                                let r = (d.last, d.primary);
                                rec.natural[c] = Some(d);
                                natural[c] = Some(r);
                                r
                            }
                        }
                    };
                    by_partition.push(id);
                    chosen.push(primary);
                }
                twins.push(Twin {
                    name: spec.name.clone(),
                    pool: spec.pool.clone(),
                    ttl: steady_ttl,
                    rules: applying,
                    // The decisions' answers: the first `answers_len` of the
                    // name's final list (interning only appends), set below.
                    answers: Arc::default(),
                    answers_len: nb.answers.list.len(),
                    by_partition: by_partition.clone(),
                    chosen: chosen.clone(),
                    done: None,
                });
                pushed = true;
                (by_partition, chosen)
            };
            new_choices.insert(spec.name.clone(), chosen);

            // Prefix overrides: lines, then canary and manual prefix rules on top.
            let mut over4: Vec<(u128, u128, PrefixOverride)> = Vec::new();
            let mut over6: Vec<(u128, u128, PrefixOverride)> = Vec::new();
            let class0 = class_of[0];
            let unknown = &pr.rankings[class0 as usize];
            for line in inputs.lines.iter().filter(|l| l.domains.is_empty() || l.domains.contains(&spec.name)) {
                let answer = match line.answer {
                    LineAnswer::Origin => spec.domain.and_then(|d| d.origin_ip).map(|ip| {
                        nb.answers.id(Answer {
                            ttl: steady_ttl,
                            ipv4: vec![ip],
                            ipv6: vec![],
                            node: None,
                            reason: format!("line {}: origin", line.name),
                            state: AnswerState::Steady,
                            canary: None,
                            hostname: None,
                        })
                    }),
                    LineAnswer::Node => line.node.as_deref().and_then(|n| {
                        let why = format!("line {}", line.name);
                        nb.node_answer(&ctx, pr, class0, n, &why, &unknown.0, &unknown.1, AnswerState::Steady)
                    }),
                    LineAnswer::Schedule => {
                        let mut a = answer_of(&unknown.0, &unknown.1, per_answer, steady_ttl, AnswerState::Steady);
                        a.reason = format!("line {}: {}", line.name, a.reason);
                        Some(nb.answers.id(a))
                    }
                };
                let Some(answer) = answer else {
                    tracing::warn!(line = %line.name, name = %spec.name, "line has nothing to answer (no origin_ip / node not eligible); skipped");
                    continue;
                };
                for p in &line.prefixes {
                    let (is4, s, e) = net_range(p);
                    let list = if is4 { &mut over4 } else { &mut over6 };
                    list.push((s, e, PrefixOverride::Fixed(answer)));
                }
            }
            // Prefix rules match by domain and prefix; their region filters do not apply.
            for rule in &rules {
                let Some(p) = &rule.prefix else { continue };
                if rule_domain(rule).is_some_and(|d| d != spec.name) {
                    continue;
                }
                let (is4, s, e) = net_range(p);
                let list = if is4 { &mut over4 } else { &mut over6 };
                let o = match rule.kind {
                    RuleKind::Canary => {
                        PrefixOverride::Canary { node: rule.node.clone(), percent: rule.percent, rule: rule.id }
                    }
                    RuleKind::Manual => PrefixOverride::Manual { node: rule.node.clone(), rule: rule.id },
                };
                list.push((s, e, o));
            }
            // Names of one pool without prefix overrides of their own often get the
            // same answers everywhere: their prefix maps are built once.
            let own = over4.is_empty() && over6.is_empty();
            // Seed 001 §3.4: public blocks the geo files cannot locate get the unknown
            // answer flagged, so they never merge with the special-purpose ranges —
            // unless every client gets that answer anyway (e.g. no geo file).
            let unlocated = unlocated_answer(&mut nb.answers, &by_partition, own);
            let pins = |o: &[(u128, u128, PrefixOverride)]| o.iter().any(|o| !matches!(o.2, PrefixOverride::Fixed(_)));
            // The same answers (the flagged one included), overrides and pinned
            // rankings as last time: the same maps.
            let unchanged = old.by_partition == by_partition
                && *old.pre_answers == nb.answers.list
                && old.over4 == over4
                && old.over6 == over6
                && (!dirty[class0 as usize] || !(pins(&over4) || pins(&over6)));
            // Without prefix overrides the answers are the same before and after
            // them: one list serves both (taken below, once complete).
            let pre_answers = (!own).then(|| Arc::new(nb.answers.list.clone()));
            let key = [by_partition.as_slice(), &[unlocated]].concat();
            let shared_maps = own.then(|| shared.iter().find(|s| s.0 == key)).flatten();
            // The answers of an unchanged name: last build's list, shared.
            let mut kept = None;
            let (v4, v6) = if let (true, Some(v4), Some(v6)) = (unchanged, &old.v4, &old.v6) {
                kept = Some(old.answers.clone());
                (v4.clone(), v6.clone())
            } else if let Some((_, v4, v6)) = shared_maps {
                (v4.clone(), v6.clone())
            } else if let Some((v4, v6)) = own
                .then(|| {
                    let index = state.ranges.get_or_insert_with(|| Arc::new(RangesByPartition::new(partitions)));
                    incremental::spliced_maps(index, partitions, &old, &nb.answers, &by_partition, unlocated)
                })
                .flatten()
            {
                shared.push((key, v4.clone(), v6.clone()));
                (v4, v6)
            } else if own {
                let (v4, v6) = partition_maps(partitions, &by_partition, unlocated);
                shared.push((key, v4.clone(), v6.clone()));
                (v4, v6)
            } else {
                let (mut ranges4, mut ranges6) = partition_runs(partitions, &by_partition, unlocated);
                // Apply in priority order (lines, canary, manual), each layer sorted and
                // non-overlapping within itself (a later, more specific entry wins).
                let layer = |list: &[(u128, u128, PrefixOverride)], pick: fn(&PrefixOverride) -> bool| {
                    let mut l: Vec<(u128, u128, PrefixOverride)> =
                        list.iter().filter(|o| pick(&o.2)).cloned().collect();
                    l.sort_by_key(|&(s, e, _)| (std::cmp::Reverse(e - s), s));
                    l
                };
                let picks: [fn(&PrefixOverride) -> bool; 3] = [
                    |o| matches!(o, PrefixOverride::Fixed(_)),
                    |o| matches!(o, PrefixOverride::Canary { .. }),
                    |o| matches!(o, PrefixOverride::Manual { .. }),
                ];
                for pick in picks {
                    for (ranges, over) in [(&mut ranges4, &over4), (&mut ranges6, &over6)] {
                        for o in layer(over, pick) {
                            let taken = std::mem::take(ranges);
                            *ranges = overlay_with(taken, std::slice::from_ref(&o), |under, k| match k {
                                PrefixOverride::Fixed(a) => *a,
                                PrefixOverride::Manual { node, rule } => {
                                    let why = format!("manual rule {rule}");
                                    nb.node_answer(
                                        &ctx,
                                        pr,
                                        class0,
                                        node,
                                        &why,
                                        &unknown.0,
                                        &unknown.1,
                                        AnswerState::Steady,
                                    )
                                    .unwrap_or(under)
                                }
                                PrefixOverride::Canary { node, percent, rule } => {
                                    let why = format!("canary rule {rule} {percent}%");
                                    match nb.node_answer(
                                        &ctx,
                                        pr,
                                        class0,
                                        node,
                                        &why,
                                        &unknown.0,
                                        &unknown.1,
                                        AnswerState::Canary,
                                    ) {
                                        Some(cid) => {
                                            // A prefix rule beats the resolver fallback.
                                            let under = if under == unlocated { by_partition[0] } else { under };
                                            let mut base = nb.answers.list[under as usize].clone();
                                            base.ttl = base.ttl.min(settings.canary_ttl);
                                            base.canary = Some(Canary { percent: *percent, answer: cid });
                                            nb.answers.id(base)
                                        }
                                        None => under,
                                    }
                                }
                            });
                        }
                    }
                }
                let fill = by_partition[0];
                let v4 = PrefixMapV4::from_ranges(ranges4.into_iter().map(|(s, e, v)| (s as u32, e as u32, v)), fill);
                let v6 = PrefixMapV6::from_ranges(ranges6, fill);
                (v4, v6)
            };
            rec.by_partition = by_partition;
            rec.unlocated = unlocated;
            let answers = kept.unwrap_or_else(|| Arc::new(std::mem::take(&mut nb.answers.list)));
            rec.pre_answers = pre_answers.unwrap_or_else(|| answers.clone());
            rec.answers = answers.clone();
            if pushed && let Some(t) = twins.last_mut() {
                t.answers = answers.clone();
            }
            rec.over4 = over4;
            rec.over6 = over6;
            rec.v4 = Some(v4.clone());
            rec.v6 = Some(v6.clone());
            if let (true, true, Some(t)) = (plain, pushed, twins.last_mut()) {
                t.done = Some(Done { answers: rec.answers.clone(), unlocated, v4: v4.clone(), v6: v6.clone() });
            }
            names.insert(spec.name.clone(), rec);
            scheduled.push(scheduled_name(spec, &mut state.name_ids, answers, &hostnames, (&v4, &v6)));
        }
        zones.push(ZoneRoutes { zone: zone.clone(), names: scheduled });
    }
    state.choices = new_choices;
    let Ctx { plan, .. } = ctx;
    let mut record = incremental::Record::new(&now_inputs, plan, views);
    record.pools = pools.into_iter().map(|(p, (pr, _))| (p, pr)).collect();
    record.names = names;
    state.record = Some(Box::new(record));
    RouteTable::new(version, now, zones).with_node_hosts(NodeHost::of_nodes(&inputs.nodes, &inputs.zones))
}

/// A name's entry in the table: `answers` (with the chosen node's hostname
/// in CNAME mode) and maps.
fn scheduled_name(
    spec: NameSpec,
    ids: &mut NameIds,
    mut answers: Arc<Vec<Answer>>,
    hostnames: &HashMap<&str, &str>,
    (v4, v6): (&PrefixMapV4, &PrefixMapV6),
) -> ScheduledName {
    if spec.domain.is_some_and(|d| d.answer_mode == AnswerMode::Cname) {
        // Seed 004 §4.3: CNAME mode answers the chosen node's hostname. Set
        // after interning, so answers stay as distinct as their addresses.
        for a in Arc::make_mut(&mut answers) {
            a.hostname = a.node.as_deref().and_then(|n| hostnames.get(n)).map(|h| h.to_ascii_lowercase());
        }
    }
    let ecs = spec.domain.is_none_or(|d| d.ecs);
    ScheduledName { ecs, id: ids.id(&spec.name), name: spec.name, answers, v4: v4.clone(), v6: v6.clone() }
}

/// The answer of public blocks the geo files cannot locate: the unknown
/// partition's, flagged [`AnswerState::Resolver`] (answered for the resolver's
/// address), or the unknown answer itself when no client can get another
/// (every partition answered alike and no prefix override), so that scopes
/// stay as wide as before.
fn unlocated_answer(answers: &mut Answers, by_partition: &[u32], no_overrides: bool) -> u32 {
    let unknown = by_partition[UNKNOWN as usize];
    if no_overrides && by_partition.iter().all(|&a| a == unknown) {
        return unknown;
    }
    answers.id(Answer { state: AnswerState::Resolver, ..answers.list[unknown as usize].clone() })
}

/// Inclusive address ranges with a value, sorted.
type Runs = Vec<(u128, u128, u32)>;

/// The partition ranges of both families with each partition's answer,
/// adjacent ranges of equal answer merged ([`partition_runs_into`]).
fn partition_runs(partitions: &PartitionTable, by_partition: &[u32], unlocated: u32) -> (Runs, Runs) {
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
fn partition_maps(partitions: &PartitionTable, by_partition: &[u32], unlocated: u32) -> (PrefixMapV4, PrefixMapV6) {
    let fill = by_partition[0];
    let mut v4 = PrefixMapBuilder::<u32>::new(fill, partitions.v4_ranges().len() / 4);
    let mut v6 = PrefixMapBuilder::<u128>::new(fill, partitions.v6_ranges().len() / 4);
    partition_runs_into(partitions, by_partition, unlocated, |s, e, v| v4.push(s, e, v), |s, e, v| v6.push(s, e, v));
    (v4.finish(), v6.finish())
}

/// The partition ranges of both families with each partition's answer, in
/// address order, to `v4` and `v6`. Unknown ranges outside the
/// special-purpose ones (public, but not located) get `unlocated`: a private
/// or reserved source stays in the unknown partition (SPEC §3).
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
pub mod incremental;
#[cfg(test)]
mod oracle;

#[cfg(test)]
mod tests {
    use super::*;
    use crate::geo::GeoDb;
    use crate::health::ProbeState;
    use crate::model::{NodeStatus, NsHost};
    use std::net::Ipv4Addr;

    mod cname;
    mod unlocated;

    const APEX: &str = "edge.lagran.net";

    #[expect(clippy::too_many_arguments, reason = "one call per row of a node table, in its column order")]
    fn node(
        name: &str,
        country: &str,
        province: &str,
        city: &str,
        isp: &str,
        w: i64,
        cpu: f64,
        mem: f64,
        ip: [u8; 4],
    ) -> Node {
        let mut n = Node::new(name);
        n.country = country.into();
        n.province = province.into();
        n.city = city.into();
        n.isp = isp.into();
        n.weight = w;
        n.cpu_usage = cpu;
        n.memory_usage = mem;
        n.public_ip = Some(ip.into());
        n
    }

    fn seed_inputs() -> Inputs {
        let mut zone = Zone::new(APEX);
        zone.ns_hosts =
            vec![NsHost { name: "ns1.edge.lagran.net".into(), ipv4: Some([192, 0, 2, 53].into()), ipv6: None }];
        Inputs {
            nodes: vec![
                node("gz-01", "CN", "广东", "深圳", "电信", 100, 20.0, 30.0, [203, 0, 113, 21]),
                node("hk-01", "HK", "香港", "", "BGP", 120, 10.0, 10.0, [203, 0, 113, 22]),
                node("kr-01", "KR", "", "", "BGP", 100, 10.0, 20.0, [203, 0, 113, 23]),
            ],
            zones: vec![zone],
            now_ms: 1_000_000,
            ..Default::default()
        }
    }

    fn partitions() -> PartitionTable {
        use crate::geo::{IpVersion, Xdb, write_xdb};
        let ip = |s: &str| u32::from(s.parse::<Ipv4Addr>().unwrap()) as u128;
        let ranges = vec![
            (0, ip("58.59.255.255"), "美国|0|0|0|0".to_string()),
            (ip("58.60.0.0"), ip("58.61.255.255"), "中国|0|广东省|深圳市|电信".to_string()),
            (ip("58.62.0.0"), ip("123.111.255.255"), "美国|0|0|0|0".to_string()),
            (ip("123.112.0.0"), ip("123.127.255.255"), "中国|0|北京|北京市|联通".to_string()),
            (ip("123.128.0.0"), u32::MAX as u128, "美国|0|0|0|0".to_string()),
        ];
        let xdb = Xdb::from_bytes(write_xdb(IpVersion::V4, &ranges).unwrap()).unwrap();
        PartitionTable::build(&GeoDb::from_xdbs(Some(xdb), None), &[])
    }

    fn build(inputs: &Inputs, settings: &ScheduleSettings) -> RouteTable {
        build_route_table(1, inputs, &partitions(), settings, &settings.policy(), &mut BuildState::default())
    }

    fn answer(t: &RouteTable, name: &str, ip: &str) -> (Answer, u8) {
        let (a, s) = t.scheduled(name).unwrap().answer_for(ip.parse().unwrap());
        (a.clone(), s)
    }

    fn rule(kind: RuleKind, node: &str, percent: u8) -> Rule {
        Rule {
            id: 1,
            kind,
            domain: None,
            country: None,
            province: None,
            city: None,
            isp: None,
            prefix: None,
            node: node.into(),
            percent,
            priority: 0,
            expires_at_ms: None,
            note: String::new(),
            created_at_ms: 0,
        }
    }

    /// The maps built as the runs come equal the runs listed, then built.
    #[test]
    fn partition_maps_equal_the_maps_of_the_listed_runs() {
        use crate::geo::{IpVersion, Xdb, write_xdb};
        use rand::{Rng, SeedableRng, rngs::StdRng};
        let mut rng = StdRng::seed_from_u64(7);
        let regions = [
            "中国|0|广东省|深圳市|电信",
            "中国|0|北京|北京市|联通",
            "美国|0|0|0|0",
            "0|0|0|0|0",
            "中国|0|广东省|广州市|移动",
        ];
        let mut cuts: Vec<u128> = (0..2_000).map(|_| rng.gen_range(1..u32::MAX as u128)).collect();
        cuts.sort_unstable();
        cuts.dedup();
        let mut ranges = Vec::new();
        let mut start = 0;
        for &c in cuts.iter().chain(std::iter::once(&(u32::MAX as u128 + 1))) {
            ranges.push((start, c - 1, regions[rng.gen_range(0..regions.len())].to_string()));
            start = c;
        }
        let xdb = Xdb::from_bytes(write_xdb(IpVersion::V4, &ranges).unwrap()).unwrap();
        let p = PartitionTable::build(&GeoDb::from_xdbs(Some(xdb), None), &[]);
        for round in 0..20 {
            let by_partition: Vec<u32> = (0..p.locations().len()).map(|_| rng.gen_range(0..3)).collect();
            let unlocated = if round % 2 == 0 { 3 } else { by_partition[UNKNOWN as usize] };
            let (r4, r6) = partition_runs(&p, &by_partition, unlocated);
            let fill = by_partition[0];
            let want4 = PrefixMapV4::from_ranges(r4.into_iter().map(|(s, e, v)| (s as u32, e as u32, v)), fill);
            let want6 = PrefixMapV6::from_ranges(r6, fill);
            let (v4, v6) = partition_maps(&p, &by_partition, unlocated);
            assert_eq!(v4, want4, "round {round}");
            assert_eq!(v6, want6, "round {round}");
            v4.check(4).unwrap();
            // And both say what the partitions say, at both ends of every located range.
            for &(s, e, pid) in p.v4_ranges().iter().filter(|r| r.2 != UNKNOWN) {
                let want = by_partition[pid as usize];
                assert_eq!((v4.lookup(s).0, v4.lookup(e).0), (want, want), "round {round}: {s}..={e}");
            }
        }
    }

    #[test]
    fn shenzhen_gets_gz01_with_a_wide_scope_and_the_rest_hk01() {
        let t = build(&seed_inputs(), &ScheduleSettings::default());
        let (a, scope) = answer(&t, APEX, "58.60.1.1");
        assert_eq!(a.ipv4, vec![Ipv4Addr::new(203, 0, 113, 21)]);
        assert_eq!(scope, 15, "58.60.0.0/15 is one partition");
        assert_eq!(answer(&t, APEX, "8.8.8.8").0.node.as_deref(), Some("hk-01"));
        let (a, scope) = answer(&t, APEX, "10.1.1.1");
        assert_eq!(a.node.as_deref(), Some("hk-01"), "private sources are unknown: weight and load");
        assert!(scope <= 8, "unknown and US merge into wide blocks, got /{scope}");
        let apex = t.scheduled(APEX).unwrap();
        for p in apex.v4.iter() {
            let host = 32 - p.len as u32;
            let last = (p.addr as u64 + (1u64 << host) - 1) as u32;
            assert_eq!(apex.v4.lookup(last).0, p.value, "every address in a scope gets its answer");
        }
    }

    #[test]
    fn answers_per_query_adds_backups() {
        let settings = ScheduleSettings { answers_per_query: 2, ..Default::default() };
        let (a, _) = answer(&build(&seed_inputs(), &settings), APEX, "58.60.1.1");
        assert_eq!(a.ipv4, vec![Ipv4Addr::new(203, 0, 113, 21), Ipv4Addr::new(203, 0, 113, 22)]);
    }

    #[test]
    fn no_eligible_node_gives_empty_answers() {
        let mut inputs = seed_inputs();
        inputs.nodes.iter_mut().for_each(|n| n.status = NodeStatus::Offline);
        let (a, scope) = answer(&build(&inputs, &ScheduleSettings::default()), APEX, "58.60.1.1");
        assert!(a.ipv4.is_empty());
        assert_eq!(a.state, AnswerState::Empty);
        assert_eq!(scope, 0, "one empty answer everywhere");
    }

    #[test]
    fn pool_names_answer_from_their_pool_and_keep_their_ids() {
        let mut inputs = seed_inputs();
        inputs.nodes[2].pool = "pool-a".into();
        inputs.domains.push(Domain {
            name: "pool-a.edge.lagran.net".into(),
            zone: APEX.into(),
            pool: "pool-a".into(),
            ttl: Some(10),
            origin_ip: None,
            answer_mode: Default::default(),
            ecs: true,
        });
        let mut state = BuildState::default();
        let s = ScheduleSettings::default();
        let t = build_route_table(1, &inputs, &partitions(), &s, &s.policy(), &mut state);
        let n = t.scheduled("pool-a.edge.lagran.net").unwrap();
        let (a, _) = n.answer_for("58.60.1.1".parse().unwrap());
        assert_eq!(a.node.as_deref(), Some("kr-01"));
        assert_eq!(a.ttl, 10);
        let id = n.id;
        let t2 = build_route_table(2, &inputs, &partitions(), &s, &s.policy(), &mut state);
        assert_eq!(t2.scheduled("pool-a.edge.lagran.net").unwrap().id, id);
    }

    #[test]
    fn canary_5_percent_of_10000_subnets_and_sticky() {
        let mut inputs = seed_inputs();
        inputs.rules.push(rule(RuleKind::Canary, "kr-01", 5));
        let t = build(&inputs, &ScheduleSettings::default());
        let name = t.scheduled(APEX).unwrap();
        let mut canary = 0;
        for i in 0..10_000u32 {
            // 10 000 distinct US /24s
            let a = Ipv4Addr::from(0x4000_0000u32 + (i << 8) + 7);
            let (ans, scope) = name.answer_for(a.into());
            assert!(scope >= 24, "a split answer is only valid for its /24, got /{scope}");
            if ans.node.as_deref() == Some("kr-01") {
                canary += 1;
                assert_eq!(ans.state, AnswerState::Canary);
            }
            let again = name.answer_for(Ipv4Addr::from(0x4000_0000u32 + (i << 8) + 200).into()).0;
            assert_eq!(again.node, ans.node, "the same /24 always gets the same node");
        }
        assert!((400..=600).contains(&canary), "5 ± 1 % of 10 000 subnets, got {canary}");
    }

    #[test]
    fn manual_beats_canary_beats_automatic() {
        let mut inputs = seed_inputs();
        let mut manual = rule(RuleKind::Manual, "kr-01", 100);
        manual.province = Some("广东省".into());
        inputs.rules.push(manual);
        inputs.rules.push(rule(RuleKind::Canary, "gz-01", 100));
        let t = build(&inputs, &ScheduleSettings::default());
        assert_eq!(answer(&t, APEX, "58.60.1.1").0.node.as_deref(), Some("kr-01"), "manual pin for 广东");
        assert_eq!(answer(&t, APEX, "8.8.8.8").0.node.as_deref(), Some("gz-01"), "100 % canary elsewhere");
        assert!(answer(&t, APEX, "58.60.1.1").0.reason.contains("manual rule"));
    }

    #[test]
    fn expired_rules_do_not_apply() {
        let mut inputs = seed_inputs();
        let mut r = rule(RuleKind::Manual, "kr-01", 100);
        r.expires_at_ms = Some(inputs.now_ms - 1);
        inputs.rules.push(r);
        let t = build(&inputs, &ScheduleSettings::default());
        assert_eq!(answer(&t, APEX, "58.60.1.1").0.node.as_deref(), Some("gz-01"));
    }

    #[test]
    fn prefix_rules_pin_only_their_prefix() {
        let mut inputs = seed_inputs();
        let mut r = rule(RuleKind::Manual, "kr-01", 100);
        r.prefix = Some("58.60.7.0/24".parse().unwrap());
        inputs.rules.push(r);
        let t = build(&inputs, &ScheduleSettings::default());
        let (a, scope) = answer(&t, APEX, "58.60.7.9");
        assert_eq!(a.node.as_deref(), Some("kr-01"));
        assert_eq!(scope, 24);
        assert_eq!(answer(&t, APEX, "58.60.8.9").0.node.as_deref(), Some("gz-01"));
    }

    #[test]
    fn a_line_beats_geo_and_answers_the_origin() {
        let mut inputs = seed_inputs();
        inputs.domains.push(Domain {
            name: APEX.into(),
            zone: APEX.into(),
            pool: DEFAULT_POOL.into(),
            ttl: None,
            origin_ip: Some(Ipv4Addr::new(198, 51, 100, 80)),
            answer_mode: Default::default(),
            ecs: true,
        });
        inputs.lines.push(Line::new("spiders", LineAnswer::Origin, vec!["58.60.0.0/20".parse().unwrap()]));
        let t = build(&inputs, &ScheduleSettings::default());
        let (a, scope) = answer(&t, APEX, "58.60.1.1");
        assert_eq!(a.ipv4, vec![Ipv4Addr::new(198, 51, 100, 80)], "the spider line answers the origin");
        assert_eq!(scope, 20);
        assert_eq!(answer(&t, APEX, "58.61.0.1").0.node.as_deref(), Some("gz-01"), "outside the line: geo");
    }

    #[test]
    fn hysteresis_holds_under_10_percent_and_moves_under_30() {
        let settings = ScheduleSettings::default(); // 15 %
        let mut inputs = seed_inputs();
        inputs.nodes = vec![
            node("a", "", "", "", "", 100, 0.0, 0.0, [192, 0, 2, 1]),
            node("b", "", "", "", "", 90, 0.0, 0.0, [192, 0, 2, 2]),
        ];
        let mut state = BuildState::default();
        let policy = settings.policy();
        let t = build_route_table(1, &inputs, &partitions(), &settings, &policy, &mut state);
        assert_eq!(answer(&t, APEX, "8.8.8.8").0.node.as_deref(), Some("a"));
        // b is now 10 % better than a: keep a
        inputs.nodes[1].weight = 110;
        let t = build_route_table(2, &inputs, &partitions(), &settings, &policy, &mut state);
        let (a, _) = answer(&t, APEX, "8.8.8.8");
        assert_eq!(a.node.as_deref(), Some("a"), "a 10 % swing holds");
        assert!(a.reason.contains("hysteresis"), "{}", a.reason);
        // b is now 30 % better: move
        inputs.nodes[1].weight = 130;
        let t = build_route_table(3, &inputs, &partitions(), &settings, &policy, &mut state);
        assert_eq!(answer(&t, APEX, "8.8.8.8").0.node.as_deref(), Some("b"), "a 30 % swing moves");
    }

    #[test]
    fn hysteresis_holds_a_swing_of_a_few_points_where_scores_are_small() {
        let mut inputs = seed_inputs();
        inputs.nodes = vec![
            node("a", "", "", "", "", 10, 0.0, 0.0, [192, 0, 2, 1]),
            node("b", "", "", "", "", 8, 0.0, 0.0, [192, 0, 2, 2]),
        ];
        for (points, moves) in [(20, false), (0, true)] {
            let settings = ScheduleSettings { hysteresis_points: points, ..Default::default() };
            let policy = settings.policy();
            let mut state = BuildState::default();
            inputs.nodes[1].weight = 8;
            let t = build_route_table(1, &inputs, &partitions(), &settings, &policy, &mut state);
            assert_eq!(answer(&t, APEX, "8.8.8.8").0.node.as_deref(), Some("a"));
            // b is now 40 % better, by 4 points: load jitter on small scores.
            inputs.nodes[1].weight = 14;
            let t = build_route_table(2, &inputs, &partitions(), &settings, &policy, &mut state);
            let expect = if moves { "b" } else { "a" };
            assert_eq!(answer(&t, APEX, "8.8.8.8").0.node.as_deref(), Some(expect), "4 points, floor {points}");
            // By more than 20 points (and 15 %), b takes over under either floor.
            inputs.nodes[1].weight = 31;
            let t = build_route_table(3, &inputs, &partitions(), &settings, &policy, &mut state);
            assert_eq!(answer(&t, APEX, "8.8.8.8").0.node.as_deref(), Some("b"), "21 points, floor {points}");
        }
    }

    #[test]
    fn an_all_overloaded_pool_still_answers() {
        let settings = ScheduleSettings { caps: Some(Default::default()), ..Default::default() };
        let mut inputs = seed_inputs();
        for n in &mut inputs.nodes {
            n.max_bandwidth_mbps = 100.0;
            n.bandwidth_mbps = 150.0;
            n.max_conns = 10;
            n.conns = 50;
        }
        let t = build(&inputs, &settings);
        let (a, _) = answer(&t, APEX, "58.60.1.1");
        assert_eq!(a.node.as_deref(), Some("gz-01"), "caps penalise, never veto");
        assert!(a.reason.contains("over-cap"), "{}", a.reason);
    }

    #[test]
    fn over_cap_node_loses_to_one_under_cap() {
        let settings = ScheduleSettings { caps: Some(Default::default()), ..Default::default() };
        let mut inputs = seed_inputs();
        inputs.nodes[0].max_bandwidth_mbps = 100.0;
        inputs.nodes[0].bandwidth_mbps = 100.0;
        let t = build(&inputs, &settings);
        assert_eq!(answer(&t, APEX, "58.60.1.1").0.node.as_deref(), Some("hk-01"));
    }

    #[test]
    fn overload_spills_to_the_next_same_isp_node() {
        let settings = ScheduleSettings { spill: Some(Default::default()), ..Default::default() };
        let mut inputs = seed_inputs();
        inputs.nodes[0].cpu_usage = 95.0; // gz-01 overloaded: 100+145-28-6 = 211 still best
        inputs.nodes.push(node("fs-01", "CN", "广东", "佛山", "电信", 50, 0.0, 0.0, [203, 0, 113, 24]));
        let t = build(&inputs, &settings);
        let (a, _) = answer(&t, APEX, "58.60.1.1");
        assert_eq!(a.node.as_deref(), Some("fs-01"), "{}", a.reason);
        assert!(a.reason.contains("spill"), "{}", a.reason);
    }

    #[test]
    fn isp_must_match_keeps_only_the_clients_isp() {
        let settings = ScheduleSettings { isp_must_match: true, ..Default::default() };
        let mut inputs = seed_inputs();
        inputs.nodes.push(node("bj-01", "CN", "北京", "北京", "联通", 10, 0.0, 0.0, [203, 0, 113, 25]));
        let t = build(&inputs, &settings);
        assert_eq!(answer(&t, APEX, "123.112.0.1").0.node.as_deref(), Some("bj-01"));
        // nobody has the client's ISP: everyone stays eligible
        assert_eq!(answer(&t, APEX, "8.8.8.8").0.node.as_deref(), Some("hk-01"));
    }

    #[test]
    fn distance_prefers_the_nearer_node() {
        let settings = ScheduleSettings {
            distance: Some(crate::engine::DistancePolicy { per_1000km: 20.0, max_penalty: 200 }),
            ..Default::default()
        };
        let mut inputs = seed_inputs();
        inputs.nodes = vec![
            node("far", "CN", "新疆", "", "", 100, 0.0, 0.0, [192, 0, 2, 1]),
            node("near", "CN", "河北", "", "", 100, 0.0, 0.0, [192, 0, 2, 2]),
        ];
        let t = build(&inputs, &settings);
        assert_eq!(answer(&t, APEX, "123.112.0.1").0.node.as_deref(), Some("near"), "Beijing is nearer Hebei");
    }

    #[test]
    fn a_dead_best_node_is_failover_with_its_ttl() {
        let settings = ScheduleSettings::default();
        let mut inputs = seed_inputs();
        inputs.liveness.probes.insert("gz-01".into(), ProbeState { up: false, ..Default::default() });
        let t = build(&inputs, &settings);
        let (a, _) = answer(&t, APEX, "58.60.1.1");
        assert_eq!(a.node.as_deref(), Some("hk-01"));
        assert_eq!(a.state, AnswerState::Failover);
        assert_eq!(a.ttl, settings.failover_ttl);
        assert_eq!(answer(&t, APEX, "8.8.8.8").0.state, AnswerState::Steady, "hk-01 is the best there anyway");
    }

    #[test]
    fn heartbeat_timeout_takes_a_node_out() {
        let mut inputs = seed_inputs();
        inputs.liveness.heartbeat_timeout_ms = 60_000;
        inputs.nodes[0].last_heartbeat_ms = Some(inputs.now_ms - 61_000);
        let t = build(&inputs, &ScheduleSettings::default());
        assert_eq!(answer(&t, APEX, "58.60.1.1").0.node.as_deref(), Some("hk-01"));
        inputs.nodes[0].last_heartbeat_ms = Some(inputs.now_ms - 1_000);
        let t = build(&inputs, &ScheduleSettings::default());
        assert_eq!(answer(&t, APEX, "58.60.1.1").0.node.as_deref(), Some("gz-01"), "back when it reports");
    }
}
