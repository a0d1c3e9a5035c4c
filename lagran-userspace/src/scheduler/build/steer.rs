//! Steering one scheduled name past its geo decisions: the latency policy
//! (the lowest measured RTT, with the stabilize band) and the weighted and
//! hash strategies, applied per partition after the automatic decisions and
//! the region rules, before lines and prefix rules (which still win, laid
//! over the maps).
//!
//! A partition whose class a manual or canary region rule matches keeps its
//! answer; so does the unknown partition. Only nodes eligible for the
//! partition's class (pool, health, addresses, ISP-must-match: the plan's
//! own membership) are considered. Under `latency`, a partition without
//! enough fresh samples keeps the geo answer (or the strategy's), and the
//! geo hysteresis state is never touched: when the measurements age out,
//! the partition gets exactly the answer the geo scoring gives it.

use std::collections::HashMap;
use std::sync::Arc;

use super::answers::AnswerShape;
use super::answers::Answers;
use super::name::pinned_in;
use super::rank::{Ctx, PoolRanks, RegionRule};
use crate::location::Location;
use crate::model::{Domain, RuleKind, Steering, Strategy};
use crate::partition::UNKNOWN;
use crate::route_table::AnswerState;
use crate::scheduler::settings::ScheduleSettings;
use crate::steering::LatencyView;
use crate::steering::matrix::MAX_NODES_PER_PARTITION;
use crate::steering::policy::{self, Measured};
use crate::steering::strategy::{hash_pick, node_key, partition_key, weighted_pick};

/// The reason of an answer the latency policy chose.
pub const BY_LATENCY: &str = "lowest measured RTT";
/// The reason of an answer the weighted strategy chose.
pub const BY_WEIGHT: &str = "weighted split";
/// The reason of an answer the hash strategy chose.
pub const BY_HASH: &str = "consistent hash";

/// Whether `domain` is steered past its geo decisions at all.
pub fn applies(domain: &Domain) -> bool {
    domain.steering != Steering::Geo || domain.strategy != Strategy::Best
}

/// One name's latency choices, per partition location (what the stabilize
/// band holds on to). Shared: names that steer alike hold one copy, and a
/// choice that stays shares its key and node name with the last build's.
pub type Choices = Arc<HashMap<Arc<Location>, Arc<str>>>;

/// The latency choices of the last build, per name.
pub type Held = HashMap<String, Choices>;

/// What makes two names steered alike, beside what makes their geo
/// decisions alike: the policy, the strategy and the latency choices they
/// start from.
#[derive(Clone, Debug)]
pub struct SteerKey {
    pub steering: Steering,
    pub strategy: Strategy,
    pub held: Option<Choices>,
}

impl SteerKey {
    /// The key of `domain`'s name, holding `held` from the last build.
    pub fn of(domain: &Domain, held: Option<&Choices>) -> SteerKey {
        SteerKey { steering: domain.steering, strategy: domain.strategy, held: held.cloned() }
    }
}

impl PartialEq for SteerKey {
    fn eq(&self, other: &SteerKey) -> bool {
        let held = match (&self.held, &other.held) {
            (None, None) => true,
            (Some(a), Some(b)) => Arc::ptr_eq(a, b) || a == b,
            _ => false,
        };
        self.steering == other.steering && self.strategy == other.strategy && held
    }
}

/// What steering one name reads.
pub(super) struct Steer<'a, 'c> {
    pub ctx: &'a Ctx<'c>,
    pub pr: &'a PoolRanks,
    pub region: &'a [RegionRule<'a>],
    pub settings: &'a ScheduleSettings,
    pub latency: &'a LatencyView,
    pub shape: AnswerShape,
    pub name: &'a str,
    pub domain: &'a Domain,
}

impl Steer<'_, '_> {
    /// Rewrites `by_partition` (answer ids in `answers`) where steering
    /// decides, given the name's last latency choices; returns this build's.
    pub fn apply(&self, by_partition: &mut [u32], answers: &mut Answers, held: Option<&Choices>) -> Choices {
        let class_of = self.ctx.plan.class_of();
        let locations = self.ctx.partitions.locations();
        let mut made: HashMap<(u32, u32, &str), u32> = HashMap::new();
        let mut eligible: HashMap<u32, Vec<(usize, i64)>> = HashMap::new();
        let mut now_held = HashMap::with_capacity(held.map_or(0, |h| h.len()));
        let mut measured = Vec::with_capacity(MAX_NODES_PER_PARTITION);
        for (pid, answer) in by_partition.iter_mut().enumerate() {
            let class = class_of[pid];
            if pid as u32 == UNKNOWN || self.ruled(class) {
                continue;
            }
            let location = &locations[pid];
            let last = held.and_then(|h| h.get_key_value(location));
            let by_latency = match self.domain.steering {
                Steering::Latency => self.by_latency(class, location, last.map(|l| &**l.1), &mut measured),
                Steering::Geo => None,
            };
            let (node, why) = match by_latency {
                Some(n) => {
                    let name = &self.ctx.views[n].node.name;
                    let choice = match last {
                        Some((key, was)) if **was == **name => (key.clone(), was.clone()),
                        Some((key, _)) => (key.clone(), name.as_str().into()),
                        None => (Arc::new(location.clone()), name.as_str().into()),
                    };
                    now_held.insert(choice.0, choice.1);
                    (n, BY_LATENCY)
                }
                None => {
                    let nodes = eligible.entry(class).or_insert_with(|| self.eligible(class));
                    match self.by_strategy(nodes, location) {
                        Some(pick) => pick,
                        None => continue,
                    }
                }
            };
            let key = (class, node as u32, why);
            let id = match made.get(&key) {
                Some(&id) => Some(id),
                None => self.answer(answers, class, node, why).inspect(|&id| {
                    made.insert(key, id);
                }),
            };
            if let Some(id) = id {
                *answer = id;
            }
        }
        Arc::new(now_held)
    }

    /// Whether a manual or canary region rule decides `class` of this name.
    fn ruled(&self, class: u32) -> bool {
        self.region.iter().any(|r| {
            matches!(r.rule.kind, RuleKind::Manual | RuleKind::Canary)
                && r.applies_to(self.name)
                && self.ctx.plan.filter_matches(&r.filter, class)
        })
    }

    /// The node the latency policy picks for a partition, if it is
    /// measured enough (`measured`: a buffer reused across partitions).
    fn by_latency(
        &self,
        class: u32,
        location: &Location,
        current: Option<&str>,
        measured: &mut Vec<Measured>,
    ) -> Option<usize> {
        let row = self.latency.rows.get(&*crate::steering::matrix::key(location))?;
        measured.clear();
        measured.extend(row.iter().filter_map(|m| {
            let &i = self.ctx.by_name.get(&*m.node)?;
            self.ctx.score_in(self.pr, class, i)?;
            Some(Measured { node: i as u32, rtt_ms: m.rtt_ms, samples: m.samples })
        }));
        let current = current.and_then(|c| self.ctx.by_name.get(c)).map(|&i| i as u32);
        policy::choose(measured, current, &self.latency.settings.band()).map(|n| n as usize)
    }

    /// Every node eligible for `class`, with its score, best first.
    fn eligible(&self, class: u32) -> Vec<(usize, i64)> {
        let mut out: Vec<(usize, i64)> =
            (0..self.ctx.views.len()).filter_map(|i| Some((i, self.ctx.score_in(self.pr, class, i)?))).collect();
        out.sort_by(|a, b| b.1.cmp(&a.1).then(a.0.cmp(&b.0)));
        out
    }

    /// The node the name's strategy picks among `nodes` (best first), and why.
    fn by_strategy(&self, nodes: &[(usize, i64)], location: &Location) -> Option<(usize, &'static str)> {
        let &(best, best_score) = nodes.first()?;
        let key = partition_key(location);
        let view = |i: usize| &self.ctx.views[i].node;
        match self.domain.strategy {
            Strategy::Best => None,
            Strategy::Weighted => {
                // The hysteresis band of the best: the nodes the best would not displace.
                let (h, points) = (self.settings.hysteresis, self.settings.hysteresis_points);
                let within = |s: i64| best_score as f64 <= s.max(1) as f64 * (1.0 + h) || best_score - s <= points;
                let band: Vec<(u32, u64, f64)> = nodes
                    .iter()
                    .filter(|&&(_, s)| within(s))
                    .map(|&(i, _)| (i as u32, node_key(&view(i).name), view(i).weight.max(0) as f64))
                    .collect();
                weighted_pick(key, &band).map(|n| (n as usize, BY_WEIGHT))
            }
            Strategy::Hash => {
                let (country, province) = (&view(best).country, &view(best).province);
                let region: Vec<(u32, u64)> = nodes
                    .iter()
                    .filter(|&&(i, _)| view(i).country == *country && view(i).province == *province)
                    .map(|&(i, _)| (i as u32, node_key(&view(i).name)))
                    .collect();
                hash_pick(key, &region).map(|n| (n as usize, BY_HASH))
            }
        }
    }

    /// The answer with `node` first (the class's ranking after it), interned.
    fn answer(&self, answers: &mut Answers, class: u32, node: usize, why: &str) -> Option<u32> {
        let (r4, r6) = &self.pr.rankings[class as usize];
        let mut pinned = pinned_in(self.ctx, self.pr, class, (r4, r6), self.shape);
        pinned(answers, &self.ctx.views[node].node.name, why, AnswerState::Steady)
    }
}
