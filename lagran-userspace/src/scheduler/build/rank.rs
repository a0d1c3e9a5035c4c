//! Ranking for one build: the plan's rankings per (pool, class), shared by
//! every name of a pool, and the region rules canonicalised once.

use rustc_hash::FxHashMap;

use super::rule_domain;
use crate::engine::planner::{Eligible, Plan, RegionFilter, Top};
use crate::engine::{self, Family, NodeView, Policy, Ranking};
use crate::location::Location;
use crate::model::Rule;
use crate::partition::PartitionTable;

/// A region rule, canonicalised once per build.
pub(super) struct RegionRule<'a> {
    pub rule: &'a Rule,
    /// The scheduled name it is limited to, lowercase without the dot.
    domain: Option<String>,
    want: Location,
    on: [bool; 4],
    pub filter: RegionFilter,
}

impl RegionRule<'_> {
    pub fn applies_to(&self, name: &str) -> bool {
        self.domain.as_deref().is_none_or(|d| d == name)
    }
}

impl<'a> RegionRule<'a> {
    /// The rules without a prefix, canonicalised (their filters are set by
    /// [`RegionRule::filter_with`] once the plan is known).
    pub fn of_rules(rules: &[&'a Rule]) -> Vec<RegionRule<'a>> {
        rules
            .iter()
            .filter(|r| r.prefix.is_none())
            .map(|&rule| {
                let f = |o: &Option<String>| o.as_deref().unwrap_or("").to_string();
                let want = Location::new(&f(&rule.country), &f(&rule.province), &f(&rule.city), &f(&rule.isp));
                let on = [rule.country.is_some(), rule.province.is_some(), rule.city.is_some(), rule.isp.is_some()];
                RegionRule { rule, domain: rule_domain(rule), want, on, filter: [None; 4] }
            })
            .collect()
    }

    /// The regions the rules select, in `plan`'s classes.
    pub fn filter_with(rules: &mut [RegionRule], plan: &Plan) {
        for r in rules {
            r.filter = plan.filter(&r.want, r.on);
        }
    }

    /// What a new plan needs of the rules: each one's location and fields.
    pub fn wants<'r>(rules: &'r [RegionRule]) -> impl Iterator<Item = (&'r Location, [bool; 4])> {
        rules.iter().map(|r| (&r.want, r.on))
    }
}

/// What the build shares across names: nodes, plan, rules.
pub(super) struct Ctx<'a> {
    pub views: &'a [NodeView],
    /// Each node's index by name (looked up per measured node and partition
    /// when steering: a fast hash).
    pub by_name: FxHashMap<&'a str, usize>,
    pub plan: Plan,
    pub policy: &'a Policy,
    pub partitions: &'a PartitionTable,
}

/// The automatic rankings of one pool: per class, the top of each family as
/// numbers and as engine candidates (with reasons).
#[derive(Clone, Debug)]
pub(in crate::scheduler) struct PoolRanks {
    sets: [Eligible; 2],
    pub tops: Vec<[Top; 2]>,
    pub rankings: Vec<(Ranking, Ranking)>,
}

impl Ctx<'_> {
    pub fn pool(&self, pool: &str, k: usize) -> PoolRanks {
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

    /// `old` after `changed` nodes changed (an incremental build): the sets again,
    /// and only the classes whose top may differ re-ranked. Also returns which
    /// classes' decisions may differ (re-ranked, or the failover check moved).
    pub fn pool_update(&self, pool: &str, k: usize, old: PoolRanks, changed: &[usize]) -> (PoolRanks, Vec<bool>) {
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
    pub fn candidate(&self, node: usize, class: u32) -> engine::Candidate {
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

    /// `node`'s score in `class`'s full IPv4 ranking of pool `pr`, if it is
    /// in it (eligible there).
    pub fn score_in(&self, pr: &PoolRanks, class: u32, node: usize) -> Option<i64> {
        self.plan.candidate_score(&pr.sets[0], &pr.tops[class as usize][0], node, class)
    }

    /// `r` with `node` in it when the full ranking has it (pins and hysteresis
    /// reach past the top).
    pub fn with_node(&self, r: &Ranking, pr: &PoolRanks, family: usize, class: u32, node: &str) -> Ranking {
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
