//! The route-table compiler: control-plane state in, one immutable table out.
//!
//! Pure: no store, no clock, no I/O. One answer per (scheduled name, partition),
//! stored as the coarsest client prefixes that share an answer. The stages,
//! per scheduled name:
//!
//! 1. decide partitions ([`Names::decide_partitions`], [`name`]): per class of
//!    partitions, the automatic ranking ([`rank`]) with hysteresis and
//!    failover, then the region rules;
//! 2. apply lines and prefix rules ([`overrides`]);
//! 3. build the prefix maps ([`maps`]), or splice the moved partitions into
//!    the last build's ([`incremental`]);
//!
//! with whatever earlier names and the last build already computed reused
//! through one type, [`memo::Memo`]. The oracle ([`oracle`], tests only)
//! ranks and decides on its own, and shares the plain parts.

mod answers;
pub mod incremental;
mod maps;
mod memo;
mod name;
mod overrides;
mod rank;
pub mod steer;

use std::collections::HashMap;
use std::sync::Arc;

use incremental::RangesByPartition;
use rustc_hash::FxHashMap;

use crate::engine::planner::Plan;
use crate::engine::{NodeView, Policy};
use crate::health::Liveness;
use crate::location::Location;
use crate::model::{AnswerMode, DEFAULT_POOL, Domain, Line, Node, Rule, Zone};
use crate::partition::PartitionTable;
use crate::prefix_map::{PrefixMapV4, PrefixMapV6};
use crate::route_table::{Answer, NodeHost, RouteTable, ScheduledName, ZoneRoutes};
use crate::scheduler::settings::ScheduleSettings;
use crate::steering::LatencyView;

pub(super) use answers::pin;
use answers::{AnswerShape, Answers, unlocated_answer};
pub use incremental::Change;
use incremental::{Decided, NameRecord, Remap};
use maps::{maps_of_runs, partition_maps, partition_runs};
use memo::{Done, Memo, NameMemo, Twin};
use name::{NameBuild, pinned_in};
use overrides::{OverrideScope, Overrides, line_applies, prefix_rule_applies};
use rank::{Ctx, PoolRanks, RegionRule};

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
    /// The measurement matrix's fresh estimates, for names steered by latency.
    pub latency: Arc<LatencyView>,
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
    /// The latency policy's choices, for its stabilize band.
    steered: steer::Held,
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

/// The names of `zone`: its apex first, then its other domains.
fn name_specs<'a>(zone: &Zone, domains: &'a [Domain]) -> Vec<NameSpec<'a>> {
    let apex = domains.iter().find(|d| d.name == zone.name);
    let mut specs = vec![NameSpec {
        name: zone.name.clone(),
        pool: apex.map_or(DEFAULT_POOL.to_string(), |d| d.pool.clone()),
        ttl: apex.and_then(|d| d.ttl),
        domain: apex,
    }];
    for d in domains.iter().filter(|d| d.zone == zone.name && d.name != zone.name) {
        specs.push(NameSpec { name: d.name.clone(), pool: d.pool.clone(), ttl: d.ttl, domain: Some(d) });
    }
    specs
}

/// The scheduled name a rule is limited to, lowercase without the dot.
fn rule_domain(rule: &Rule) -> Option<String> {
    rule.domain.as_deref().map(|d| d.trim_end_matches('.').to_ascii_lowercase())
}

/// Computes a route table: one answer per (scheduled name, partition), stored
/// as the coarsest client prefixes that share an answer. Stage order, lowest
/// priority first: automatic ranking (with hysteresis) → lines → canary → manual.
///
/// Rankings come from the numeric [`Plan`]: one per (pool, effective location
/// class), not per partition; `engine::rank` is the oracle the tests hold it to.
///
/// `change` says what differs from the last build recorded in `state`: the
/// same table comes out, computed from that record where the change allows
/// ([`incremental`]); [`Change::Everything`] builds from scratch.
pub fn build_route_table(
    version: u64,
    inputs: &Inputs,
    partitions: &PartitionTable,
    settings: &ScheduleSettings,
    policy: &Policy,
    state: &mut BuildState,
    change: &Change,
) -> RouteTable {
    let rules: Vec<&Rule> = inputs.rules.iter().filter(|r| r.is_active(inputs.now_ms)).collect();
    let now = incremental::Now {
        partitions,
        settings,
        policy,
        zones: &inputs.zones,
        domains: &inputs.domains,
        rules: &rules,
        lines: &inputs.lines,
    };
    let mut region = RegionRule::of_rules(&rules);
    let Start { views, plan, mut memo } = start(state, inputs, &now, &region, change);
    RegionRule::filter_with(&mut region, &plan);
    state.follow_partitions(partitions);
    let node_ids: Vec<u32> = views.iter().map(|v| state.node_id(&v.node.name)).collect();
    let names = Names {
        changed_ids: memo.pools.changed().iter().map(|&i| node_ids[i]).collect(),
        node_ids,
        ctx: Ctx { views: &views, by_name: by_name(&views), plan, policy, partitions },
        inputs,
        settings,
        rules: &rules,
        region: &region,
        per_answer: settings.answers_per_query.clamp(1, 4) as usize,
        hostnames: hostnames(&inputs.nodes),
    };
    let mut choices = HashMap::new();
    let mut zones = Vec::with_capacity(inputs.zones.len());
    for zone in &inputs.zones {
        let specs = name_specs(zone, &inputs.domains);
        let mut scheduled = Vec::with_capacity(specs.len());
        for spec in specs {
            scheduled.push(names.name(spec, &mut memo, state, &mut choices));
        }
        zones.push(ZoneRoutes { zone: zone.clone(), names: scheduled });
    }
    state.choices = choices;
    let Names { ctx: Ctx { plan, .. }, .. } = names;
    let (record, ranges) = memo.into_record(&now, plan, views);
    state.record = Some(Box::new(record));
    state.ranges = ranges;
    RouteTable::new(version, inputs.now_ms, zones).with_node_hosts(NodeHost::of_nodes(&inputs.nodes, &inputs.zones))
}

/// Where a build starts: the node views, the plan, and the memo of what
/// the last build left that still holds.
struct Start {
    views: Vec<NodeView>,
    plan: Plan,
    memo: Memo,
}

/// The last build's node views, updated where nodes or verdicts changed;
/// its plan and record when the change allows an incremental build and
/// nothing but those nodes moved; else a new plan.
fn start(
    state: &mut BuildState,
    inputs: &Inputs,
    now: &incremental::Now,
    region: &[RegionRule],
    change: &Change,
) -> Start {
    let mut last = state.record.take();
    let (views, node_changes) = match last.as_mut() {
        Some(r) => r.take_views(&inputs.nodes, &inputs.liveness, inputs.now_ms),
        None => (NodeView::prepare_live(inputs.nodes.iter().cloned(), &inputs.liveness, inputs.now_ms), None),
    };
    let ranges = state.ranges.take().filter(|r| r.is_of(now.partitions));
    let last = last.filter(|_| change.allows_incremental());
    let changed = match (&last, node_changes) {
        (Some(r), Some(c)) => r.continues(now, &views, &c).then_some(c),
        _ => None,
    };
    match (last, changed) {
        (Some(mut r), Some(changed)) => {
            r.refresh(&views, &changed);
            let r = *r;
            Start { views, plan: r.plan, memo: Memo::new(Some((r.pools, r.names)), changed, ranges) }
        }
        _ => {
            let plan = Plan::new(&views, now.partitions.locations(), RegionRule::wants(region), now.policy);
            Start { views, plan, memo: Memo::new(None, Vec::new(), ranges) }
        }
    }
}

/// Each node's index by name (the first of a name wins).
fn by_name(views: &[NodeView]) -> FxHashMap<&str, usize> {
    views.iter().enumerate().rev().map(|(i, v)| (v.node.name.as_str(), i)).collect()
}

/// Each node's hostname (without the final dot), for CNAME mode.
fn hostnames(nodes: &[Node]) -> HashMap<&str, &str> {
    nodes
        .iter()
        .filter_map(|n| Some((n.name.as_str(), n.hostname.as_deref()?.trim_end_matches('.'))))
        .filter(|(_, h)| !h.is_empty())
        .collect()
}

/// What every name of one build reads.
struct Names<'a> {
    ctx: Ctx<'a>,
    inputs: &'a Inputs,
    settings: &'a ScheduleSettings,
    /// The active rules, and those without a prefix canonicalised.
    rules: &'a [&'a Rule],
    region: &'a [RegionRule<'a>],
    per_answer: usize,
    /// Each node's stable id (in the build state), and the changed nodes'.
    node_ids: Vec<u32>,
    changed_ids: Vec<u32>,
    hostnames: HashMap<&'a str, &'a str>,
}

/// A name's maps, and the last build's answer list when its maps are kept whole.
struct NameMaps {
    v4: PrefixMapV4,
    v6: PrefixMapV6,
    kept: Option<Arc<Vec<Answer>>>,
}

impl<'a> Names<'a> {
    /// One scheduled name: decided, overridden, mapped (see the module doc).
    fn name(
        &self,
        spec: NameSpec,
        memo: &mut Memo,
        state: &mut BuildState,
        choices: &mut HashMap<String, Vec<u32>>,
    ) -> ScheduledName {
        let (pr, dirty) = memo.pools.get(&self.ctx, &spec.pool, self.per_answer + 1);
        let shape = AnswerShape {
            steady_ttl: spec.ttl.unwrap_or(self.settings.ttl),
            canary_ttl: self.settings.canary_ttl,
            per_answer: self.per_answer,
        };
        let applying: Vec<usize> =
            self.region.iter().enumerate().filter(|(_, r)| r.applies_to(&spec.name)).map(|(i, _)| i).collect();
        let previous = state.choices.get(&spec.name);
        let steered = spec.domain.filter(|d| steer::applies(d));
        let steer_key = steered.map(|d| steer::SteerKey::of(d, state.steered.get(&spec.name)));
        let twin =
            memo.names.twin((&spec.pool, shape.steady_ttl), &applying, steer_key.as_ref(), previous, &state.choices);
        // No line and no prefix rule applies: the answers come from the decisions alone.
        let plain = !self.inputs.lines.iter().any(|l| line_applies(l, &spec.name))
            && !self.rules.iter().any(|r| prefix_rule_applies(r, &spec.name));
        if plain
            && let Some(t) = twin
            && let Some(copied) = memo.names.copy_done(t, &spec.name)
        {
            choices.insert(spec.name.clone(), copied.chosen);
            match copied.held {
                Some(held) => state.steered.insert(spec.name.clone(), held),
                None => state.steered.remove(&spec.name),
            };
            let maps = (copied.v4, copied.v6);
            return scheduled_name(spec, &mut state.name_ids, copied.answers, &self.hostnames, maps);
        }
        let mut nb = NameBuild { name: &spec.name, shape, settings: self.settings, answers: Answers::default() };
        let mut last = memo.names.take_last(&spec.name);
        let mut rec = NameRecord { natural: vec![None; self.ctx.plan.class_count()], ..Default::default() };
        let (mut by_partition, chosen) = match twin {
            Some(t) => memo.names.twin_decisions(t, &mut nb.answers),
            None => {
                let decided =
                    self.decide_partitions(&mut nb, (pr, dirty), previous, &state.chosen_names, &mut last, &mut rec);
                let answers_len = nb.answers.list.len();
                let key = (spec.pool.as_str(), shape.steady_ttl);
                memo.names.push_twin(Twin::new(&spec.name, key, applying, steer_key, answers_len, &decided));
                decided
            }
        };
        let held = steered.map(|domain| {
            let held =
                self.steer(pr, shape, domain).apply(&mut by_partition, &mut nb.answers, state.steered.get(&spec.name));
            state.steered.insert(spec.name.clone(), held.clone());
            held
        });
        if held.is_none() {
            state.steered.remove(&spec.name);
        }
        choices.insert(spec.name.clone(), chosen);
        let class0 = self.ctx.plan.class_of()[0];
        let unknown = &pr.rankings[class0 as usize];
        let scope = OverrideScope { name: &spec.name, domain: spec.domain, shape, unknown: (&unknown.0, &unknown.1) };
        let pinned = pinned_in(&self.ctx, pr, class0, scope.unknown, shape);
        let over = Overrides::collect(&scope, &self.inputs.lines, self.rules, &mut nb.answers, pinned);
        // Public blocks the geo files cannot locate get the unknown answer flagged
        // (answered for the resolver), so they never merge with the special-purpose
        // ranges — unless every client gets that answer anyway (e.g. no geo file).
        let unlocated = unlocated_answer(&mut nb.answers, &by_partition, over.is_empty());
        // Without prefix overrides the answers are the same before and after
        // them: one list serves both (taken below, once complete).
        let pre_answers = (!over.is_empty()).then(|| Arc::new(nb.answers.list.clone()));
        let maps = self.maps(&mut nb, (pr, dirty), &last, (&by_partition, unlocated), &over, &mut memo.names);
        let answers = maps.kept.unwrap_or_else(|| Arc::new(std::mem::take(&mut nb.answers.list)));
        if twin.is_none() {
            let done = plain.then(|| Done {
                by_partition: by_partition.clone(),
                answers: answers.clone(),
                unlocated,
                v4: maps.v4.clone(),
                v6: maps.v6.clone(),
            });
            memo.names.finish_twin(&answers, done, held);
        }
        let record = NameRecord {
            by_partition,
            unlocated,
            pre_answers: pre_answers.unwrap_or_else(|| answers.clone()),
            answers: answers.clone(),
            over,
            v4: Some(maps.v4.clone()),
            v6: Some(maps.v6.clone()),
            ..rec
        };
        memo.names.keep(spec.name.clone(), record);
        scheduled_name(spec, &mut state.name_ids, answers, &self.hostnames, (&maps.v4, &maps.v6))
    }

    /// Stage one: per partition, the answer of its class given its previous
    /// automatic primary (hysteresis), each distinct (class, previous
    /// primary) decided once; a decision of the last build is replayed where
    /// the change left it valid. Returns per partition the answer and the
    /// automatic primary; records the decisions in `rec`.
    fn decide_partitions(
        &self,
        nb: &mut NameBuild,
        (pr, dirty): (&PoolRanks, &[bool]),
        previous: Option<&Vec<u32>>,
        chosen_names: &[String],
        last: &mut NameRecord,
        rec: &mut NameRecord,
    ) -> (Vec<u32>, Vec<u32>) {
        let class_of = self.ctx.plan.class_of();
        // Each class's automatic primary: the first of its IPv4 top (its ranking's first).
        let best: Vec<u32> = pr
            .tops
            .iter()
            .map(|[t4, _]| t4.nodes.first().map_or(NO_CHOICE, |&(n, _)| self.node_ids[n as usize]))
            .collect();
        let mut natural: Vec<Option<(u32, u32)>> = vec![None; self.ctx.plan.class_count()];
        let mut held: FxHashMap<(u32, u32), (u32, u32)> = FxHashMap::default();
        let mut remap = Remap::new(&last.answers);
        let mut by_partition = Vec::with_capacity(class_of.len());
        let mut chosen = Vec::with_capacity(class_of.len());
        for (pid, &class) in class_of.iter().enumerate() {
            let c = class as usize;
            let prev = previous.map_or(NO_CHOICE, |p| p[pid]);
            let sticky = self.settings.hysteresis > 0.0 && prev != NO_CHOICE && best[c] != NO_CHOICE && prev != best[c];
            let (id, primary) = if sticky {
                match held.get(&(class, prev)) {
                    Some(&d) => d,
                    None => {
                        let valid = !dirty[c] && !self.changed_ids.contains(&prev);
                        let recorded = last.held.remove(&(class, prev)).filter(|_| valid);
                        let prev_name = Some(chosen_names[prev as usize].as_str());
                        let d = self.decision(nb, pr, class, prev_name, recorded, &mut remap);
                        let outcome = (d.last, d.primary);
                        rec.held.insert((class, prev), d);
                        held.insert((class, prev), outcome);
                        outcome
                    }
                }
            } else {
                match natural[c] {
                    Some(d) => d,
                    None => {
                        let recorded = last.natural.get_mut(c).and_then(Option::take).filter(|_| !dirty[c]);
                        let d = self.decision(nb, pr, class, None, recorded, &mut remap);
                        let outcome = (d.last, d.primary);
                        rec.natural[c] = Some(d);
                        natural[c] = Some(outcome);
                        outcome
                    }
                }
            };
            by_partition.push(id);
            chosen.push(primary);
        }
        (by_partition, chosen)
    }

    /// What steering `domain` reads ([`steer`]).
    fn steer<'s>(&'s self, pr: &'s PoolRanks, shape: AnswerShape, domain: &'s Domain) -> steer::Steer<'s, 'a> {
        steer::Steer {
            ctx: &self.ctx,
            pr,
            region: self.region,
            settings: self.settings,
            latency: &self.inputs.latency,
            shape,
            name: &domain.name,
            domain,
        }
    }

    /// One class's decision: the recorded one replayed, or decided anew.
    fn decision(
        &self,
        nb: &mut NameBuild,
        pr: &PoolRanks,
        class: u32,
        prev: Option<&str>,
        recorded: Option<Decided>,
        remap: &mut Remap,
    ) -> Decided {
        match recorded {
            Some(mut d) => {
                nb.answers.replay(&mut d, remap);
                d
            }
            None => nb.recorded(&self.node_ids, |nb| nb.decide(&self.ctx, pr, self.region, class, prev)),
        }
    }

    /// Stage three: the name's prefix maps, the cheapest way to the full
    /// build's: the last build's when the answers, overrides and pinned
    /// rankings are as last time; with prefix overrides, built and overlaid;
    /// else maps another name built from the same answers, the last maps
    /// with the moved partitions spliced in, or built from the partitions.
    fn maps(
        &self,
        nb: &mut NameBuild,
        (pr, dirty): (&PoolRanks, &[bool]),
        last: &NameRecord,
        (by_partition, unlocated): (&[u32], u32),
        over: &Overrides,
        memo: &mut NameMemo,
    ) -> NameMaps {
        let class0 = self.ctx.plan.class_of()[0];
        let unchanged = last.by_partition == by_partition
            && *last.pre_answers == nb.answers.list
            && last.over == *over
            && (!dirty[class0 as usize] || !over.pins());
        if let (true, Some(v4), Some(v6)) = (unchanged, &last.v4, &last.v6) {
            return NameMaps { v4: v4.clone(), v6: v6.clone(), kept: Some(last.answers.clone()) };
        }
        if !over.is_empty() {
            let unknown = &pr.rankings[class0 as usize];
            let (mut runs4, mut runs6) = partition_runs(self.ctx.partitions, by_partition, unlocated);
            let pinned = pinned_in(&self.ctx, pr, class0, (&unknown.0, &unknown.1), nb.shape);
            let fallback = (unlocated, by_partition[0], self.settings.canary_ttl);
            over.apply((&mut runs4, &mut runs6), &mut nb.answers, fallback, pinned);
            let (v4, v6) = maps_of_runs(runs4, runs6, by_partition[0]);
            return NameMaps { v4, v6, kept: None };
        }
        // Names of one pool without prefix overrides of their own often get the
        // same answers everywhere: their prefix maps are built once.
        let key = [by_partition, &[unlocated]].concat();
        if let Some((v4, v6)) = memo.shared_maps(&key) {
            return NameMaps { v4: v4.clone(), v6: v6.clone(), kept: None };
        }
        let partitions = self.ctx.partitions;
        let spliced =
            incremental::spliced_maps(memo.ranges(partitions), partitions, last, &nb.answers, by_partition, unlocated);
        let (v4, v6) = spliced.unwrap_or_else(|| partition_maps(partitions, by_partition, unlocated));
        memo.share_maps(key, &v4, &v6);
        NameMaps { v4, v6, kept: None }
    }
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
        // CNAME mode answers the chosen node's hostname. Set after
        // interning, so answers stay as distinct as their addresses.
        for a in Arc::make_mut(&mut answers) {
            a.hostname = a.node.as_deref().and_then(|n| hostnames.get(n)).map(|h| h.to_ascii_lowercase());
        }
    }
    let ecs = spec.domain.is_none_or(|d| d.ecs);
    ScheduledName { ecs, id: ids.id(&spec.name), name: spec.name, answers, v4: v4.clone(), v6: v6.clone() }
}

#[cfg(test)]
mod oracle;

#[cfg(test)]
mod tests;
