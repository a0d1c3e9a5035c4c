//! Prefix overrides: what a client prefix gets instead of its partition's
//! answer (a line's answer, a prefix rule's pin or canary), collected for
//! one name and laid over its partition runs. Shared by the compiler and its
//! oracle; each passes how it pins a node ([`Pinned`]).

use ipnet::IpNet;

use super::answers::{AnswerShape, Answers, Pinned, answer_of};
use super::maps::{Runs, overlay_with};
use super::rule_domain;
use crate::engine::Ranking;
use crate::model::{Domain, Line, LineAnswer, Rule, RuleKind};
use crate::route_table::{Answer, AnswerState};

/// What a client prefix gets instead of its geo partition's answer.
#[derive(Clone, Debug, PartialEq)]
pub(in crate::scheduler) enum PrefixOverride {
    /// A line's fixed answer (beats geo).
    Fixed(u32),
    /// A canary rule on a prefix: `percent` % to `node`.
    Canary { node: String, percent: u8, rule: i64 },
    /// A manual rule on a prefix: always `node`.
    Manual { node: String, rule: i64 },
}

/// Inclusive address ranges (as `u128`) with their override.
pub(in crate::scheduler) type OverrideRanges = Vec<(u128, u128, PrefixOverride)>;

/// One name's prefix overrides per family, in the order they were given.
#[derive(Clone, Debug, Default, PartialEq)]
pub(in crate::scheduler) struct Overrides {
    pub v4: OverrideRanges,
    pub v6: OverrideRanges,
}

/// The name a compiler builds and what its lines and prefix rules need.
pub(in crate::scheduler) struct OverrideScope<'a> {
    pub name: &'a str,
    pub domain: Option<&'a Domain>,
    pub shape: AnswerShape,
    /// The unknown partition's rankings (lines and prefix rules rank there).
    pub unknown: (&'a Ranking, &'a Ranking),
}

/// Whether `line` applies to the scheduled name `name`.
pub(in crate::scheduler) fn line_applies(line: &Line, name: &str) -> bool {
    line.domains.is_empty() || line.domains.iter().any(|d| d == name)
}

/// Whether the prefix rule `rule` applies to the scheduled name `name`.
pub(in crate::scheduler) fn prefix_rule_applies(rule: &Rule, name: &str) -> bool {
    rule.prefix.is_some() && rule_domain(rule).is_none_or(|d| d == name)
}

fn net_range(n: &IpNet) -> (bool, u128, u128) {
    match n.trunc() {
        IpNet::V4(n) => (true, u32::from(n.network()) as u128, u32::from(n.broadcast()) as u128),
        IpNet::V6(n) => (false, u128::from(n.network()), u128::from(n.broadcast())),
    }
}

impl Overrides {
    fn push(&mut self, prefix: &IpNet, o: PrefixOverride) {
        let (is4, s, e) = net_range(prefix);
        let list = if is4 { &mut self.v4 } else { &mut self.v6 };
        list.push((s, e, o));
    }

    pub fn is_empty(&self) -> bool {
        self.v4.is_empty() && self.v6.is_empty()
    }

    /// Whether any override pins a node (its answer follows the rankings).
    pub fn pins(&self) -> bool {
        self.v4.iter().chain(&self.v6).any(|o| !matches!(o.2, PrefixOverride::Fixed(_)))
    }

    /// The lines of `scope`'s name, then its canary and manual prefix rules.
    /// Prefix rules match by domain and prefix; their region filters do not
    /// apply. A line with nothing to answer is skipped (and logged).
    pub fn collect(
        scope: &OverrideScope,
        lines: &[Line],
        rules: &[&Rule],
        answers: &mut Answers,
        mut pinned: impl Pinned,
    ) -> Overrides {
        let mut over = Overrides::default();
        for line in lines.iter().filter(|l| line_applies(l, scope.name)) {
            let Some(answer) = line_answer(scope, line, answers, &mut pinned) else {
                tracing::warn!(line = %line.name, name = %scope.name, "line has nothing to answer (no origin_ip / node not eligible); skipped");
                continue;
            };
            for p in &line.prefixes {
                over.push(p, PrefixOverride::Fixed(answer));
            }
        }
        for rule in rules.iter().filter(|r| prefix_rule_applies(r, scope.name)) {
            let Some(p) = &rule.prefix else { continue };
            let o = match rule.kind {
                RuleKind::Canary => {
                    PrefixOverride::Canary { node: rule.node.clone(), percent: rule.percent, rule: rule.id }
                }
                RuleKind::Manual => PrefixOverride::Manual { node: rule.node.clone(), rule: rule.id },
            };
            over.push(p, o);
        }
        over
    }

    /// Lays the overrides over `runs4` and `runs6` in priority order (lines,
    /// canary, manual), each layer sorted widest first so a later, more
    /// specific entry wins. `under` is the partition answer a piece had;
    /// `unlocated` the resolver fallback's, which a prefix rule's canary
    /// replaces by the unknown partition's `unknown`.
    pub fn apply(
        &self,
        (runs4, runs6): (&mut Runs, &mut Runs),
        answers: &mut Answers,
        (unlocated, unknown, canary_ttl): (u32, u32, u32),
        mut pinned: impl Pinned,
    ) {
        let picks: [fn(&PrefixOverride) -> bool; 3] = [
            |o| matches!(o, PrefixOverride::Fixed(_)),
            |o| matches!(o, PrefixOverride::Canary { .. }),
            |o| matches!(o, PrefixOverride::Manual { .. }),
        ];
        for pick in picks {
            for (runs, over) in [(&mut *runs4, &self.v4), (&mut *runs6, &self.v6)] {
                for o in layer(over, pick) {
                    let taken = std::mem::take(runs);
                    *runs = overlay_with(taken, std::slice::from_ref(&o), |under, k| match k {
                        PrefixOverride::Fixed(a) => *a,
                        PrefixOverride::Manual { node, rule } => {
                            let why = format!("manual rule {rule}");
                            pinned(answers, node, &why, AnswerState::Steady).unwrap_or(under)
                        }
                        PrefixOverride::Canary { node, percent, rule } => {
                            let why = format!("canary rule {rule} {percent}%");
                            match pinned(answers, node, &why, AnswerState::Canary) {
                                Some(cid) => {
                                    // A prefix rule beats the resolver fallback.
                                    let under = if under == unlocated { unknown } else { under };
                                    answers.with_canary(under, *percent, cid, canary_ttl)
                                }
                                None => under,
                            }
                        }
                    });
                }
            }
        }
    }
}

/// One layer: the overrides `pick` selects, widest first.
fn layer(list: &[(u128, u128, PrefixOverride)], pick: fn(&PrefixOverride) -> bool) -> OverrideRanges {
    let mut l: OverrideRanges = list.iter().filter(|o| pick(&o.2)).cloned().collect();
    l.sort_by_key(|&(s, e, _)| (std::cmp::Reverse(e - s), s));
    l
}

/// A line's answer for `scope`'s name: the domain's origin, a node put
/// first, or the unknown partition's own answer; `None` when there is none.
fn line_answer(scope: &OverrideScope, line: &Line, answers: &mut Answers, pinned: &mut impl Pinned) -> Option<u32> {
    let shape = &scope.shape;
    match line.answer {
        LineAnswer::Origin => scope.domain.and_then(|d| d.origin_ip).map(|ip| {
            answers.id(Answer {
                ttl: shape.steady_ttl,
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
            pinned(answers, n, &why, AnswerState::Steady)
        }),
        LineAnswer::Schedule => {
            let (r4, r6) = scope.unknown;
            let mut a = answer_of(r4, r6, shape.per_answer, shape.steady_ttl, AnswerState::Steady);
            a.reason = format!("line {}: {}", line.name, a.reason);
            Some(answers.id(a))
        }
    }
}
