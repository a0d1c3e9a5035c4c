//! One scheduled name's decisions: per class of partitions, the automatic
//! answer (with hysteresis and failover), then the region rules.

use super::NO_CHOICE;
use super::answers::{AnswerShape, Answers, Pinned, after_region_rules, answer_of};
use super::incremental::Decided;
use super::rank::{Ctx, PoolRanks, RegionRule};
use crate::engine::{self, Ranking};
use crate::model::RuleKind;
use crate::route_table::AnswerState;
use crate::scheduler::settings::ScheduleSettings;

/// One scheduled name's build: its answers and how each is made.
pub(super) struct NameBuild<'a> {
    pub name: &'a str,
    pub shape: AnswerShape,
    pub settings: &'a ScheduleSettings,
    pub answers: Answers,
}

/// A pinned answer in class `class` of pool `pr` (see [`Pinned`]): the
/// node is looked for past the top of the rankings `r4` and `r6`.
pub(super) fn pinned_in<'a>(
    ctx: &'a Ctx,
    pr: &'a PoolRanks,
    class: u32,
    (r4, r6): (&'a Ranking, &'a Ranking),
    shape: AnswerShape,
) -> impl Pinned + 'a {
    move |answers: &mut Answers, node: &str, why: &str, state: AnswerState| {
        let rankings = (ctx.with_node(r4, pr, 0, class, node), ctx.with_node(r6, pr, 1, class, node));
        shape.pinned(answers, rankings, node, why, state)
    }
}

impl NameBuild<'_> {
    /// `decide` (a [`NameBuild::decide`]) recorded for replay: the ids of the
    /// answers it interns, in order, and its primary as a stable node id.
    pub fn recorded(&mut self, node_ids: &[u32], decide: impl FnOnce(&mut Self) -> (u32, Option<usize>)) -> Decided {
        self.answers.log = Some(Vec::with_capacity(1));
        let (id, primary) = decide(self);
        let ids = self.answers.log.take().unwrap_or_default();
        Decided { ids, last: id, primary: primary.map_or(NO_CHOICE, |i| node_ids[i]) }
    }

    /// The answer of one class (given the previous automatic primary, for
    /// hysteresis): automatic, then region rules. Returns it and the new primary.
    pub fn decide(
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
        let steady_ttl = self.shape.steady_ttl;
        let (st, ttl) = if failover {
            (AnswerState::Failover, self.settings.failover_ttl.min(steady_ttl))
        } else {
            (AnswerState::Steady, steady_ttl)
        };
        let id = self.answers.id(answer_of(r4, r6, self.shape.per_answer, ttl, st));
        let matching = || rules.iter().filter(|r| r.applies_to(self.name) && ctx.plan.filter_matches(&r.filter, class));
        let canary = matching().find(|r| r.rule.kind == RuleKind::Canary).map(|r| r.rule);
        let manual = matching().find(|r| r.rule.kind == RuleKind::Manual).map(|r| r.rule);
        let pinned = pinned_in(ctx, pr, class, (r4, r6), self.shape);
        (after_region_rules(&mut self.answers, &self.shape, id, canary, manual, pinned), primary)
    }
}
