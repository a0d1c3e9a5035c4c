//! One name's answers: interned once each, and how an answer is made from
//! rankings (the first addresses, a pinned node, a canary share). Shared by
//! the compiler and its oracle.

use std::hash::BuildHasher;

use hashbrown::HashTable;
use rustc_hash::FxBuildHasher;

use crate::engine::Ranking;
use crate::model::Rule;
use crate::partition::UNKNOWN;
use crate::route_table::{Answer, AnswerState, Canary};

/// Interns answers of one name: each distinct answer once, in `list`, found
/// again by hash without a second copy of it as a key.
#[derive(Clone, Debug, Default)]
pub(in crate::scheduler) struct Answers {
    pub list: Vec<Answer>,
    /// Indices into `list`, hashed by the answer they name.
    ids: HashTable<u32>,
    /// While a decision is recorded: the ids it interned, in order.
    pub log: Option<Vec<u32>>,
}

impl Answers {
    /// An interner holding `list` (distinct answers) as it is.
    pub fn of_list(list: Vec<Answer>) -> Answers {
        let mut ids = HashTable::with_capacity(list.len());
        for (i, a) in list.iter().enumerate() {
            ids.insert_unique(FxBuildHasher.hash_one(a), i as u32, |&j| FxBuildHasher.hash_one(&list[j as usize]));
        }
        Answers { list, ids, log: None }
    }

    /// The id of `a`, if interned.
    pub fn get(&self, a: &Answer) -> Option<u32> {
        self.ids.find(FxBuildHasher.hash_one(a), |&i| self.list[i as usize] == *a).copied()
    }

    pub fn id(&mut self, a: Answer) -> u32 {
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

    /// Answer `base` with `percent` % of the client subnets sent to answer
    /// `canary`, its TTL at most `canary_ttl`.
    pub fn with_canary(&mut self, base: u32, percent: u8, canary: u32, canary_ttl: u32) -> u32 {
        let mut split = self.list[base as usize].clone();
        split.ttl = split.ttl.min(canary_ttl);
        split.canary = Some(Canary { percent, answer: canary });
        self.id(split)
    }
}

/// The answer of a ranking: the first `per_answer` addresses of each family.
pub(in crate::scheduler) fn answer_of(
    r4: &Ranking,
    r6: &Ranking,
    per_answer: usize,
    ttl: u32,
    state: AnswerState,
) -> Answer {
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
pub(in crate::scheduler) fn pin(r: &mut Ranking, node: &str, why: &str) -> bool {
    let Some(i) = r.candidates.iter().position(|c| c.name == node) else { return false };
    let mut c = r.candidates.remove(i);
    c.reason = why.to_string();
    r.candidates.insert(0, c);
    true
}

/// How one name's answers are made: its TTLs and how many addresses each has.
#[derive(Clone, Copy, Debug)]
pub(in crate::scheduler) struct AnswerShape {
    pub steady_ttl: u32,
    pub canary_ttl: u32,
    pub per_answer: usize,
}

impl AnswerShape {
    /// `node` put first in the rankings (a pin, a canary or a line's node),
    /// answered with the TTL of `state`; `None` when it is not eligible.
    pub fn pinned(
        &self,
        answers: &mut Answers,
        (mut r4, mut r6): (Ranking, Ranking),
        node: &str,
        why: &str,
        state: AnswerState,
    ) -> Option<u32> {
        (pin(&mut r4, node, why) || pin(&mut r6, node, why)).then(|| {
            let ttl = if state == AnswerState::Canary { self.canary_ttl } else { self.steady_ttl };
            answers.id(answer_of(&r4, &r6, self.per_answer, ttl, state))
        })
    }
}

/// A pinned answer: `(answers, node, why, state)` to the answer with `node`
/// first, `None` when it is not eligible. The compiler and the oracle rank
/// differently; what they do with the answer is the same.
pub(in crate::scheduler) trait Pinned:
    FnMut(&mut Answers, &str, &str, AnswerState) -> Option<u32>
{
}
impl<F: FnMut(&mut Answers, &str, &str, AnswerState) -> Option<u32>> Pinned for F {}

/// A partition's answer `id` after the region rules that match it: the
/// first canary rule splits it, then the first manual rule replaces it
/// (each when its node is eligible).
pub(in crate::scheduler) fn after_region_rules(
    answers: &mut Answers,
    shape: &AnswerShape,
    mut id: u32,
    canary: Option<&Rule>,
    manual: Option<&Rule>,
    mut pinned: impl Pinned,
) -> u32 {
    if let Some(rule) = canary {
        let why = format!("canary rule {} {}%", rule.id, rule.percent);
        if let Some(cid) = pinned(answers, &rule.node, &why, AnswerState::Canary) {
            id = answers.with_canary(id, rule.percent, cid, shape.canary_ttl);
        }
    }
    if let Some(rule) = manual {
        let why = format!("manual rule {}", rule.id);
        if let Some(mid) = pinned(answers, &rule.node, &why, AnswerState::Steady) {
            id = mid;
        }
    }
    id
}

/// The answer of public blocks the geo files cannot locate: the unknown
/// partition's, flagged [`AnswerState::Resolver`] (answered for the resolver's
/// address), or the unknown answer itself when no client can get another
/// (every partition answered alike and no prefix override), so that scopes
/// stay as wide as the answers allow.
pub(in crate::scheduler) fn unlocated_answer(answers: &mut Answers, by_partition: &[u32], no_overrides: bool) -> u32 {
    let unknown = by_partition[UNKNOWN as usize];
    if no_overrides && by_partition.iter().all(|&a| a == unknown) {
        return unknown;
    }
    answers.id(Answer { state: AnswerState::Resolver, ..answers.list[unknown as usize].clone() })
}
