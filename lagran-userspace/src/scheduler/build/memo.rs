//! What a build reuses instead of computing it again, behind one type
//! ([`Memo`]):
//!
//! - each pool's rankings: the last build's, updated for the nodes that
//!   changed, or new ([`PoolMemo`]);
//! - twins: a name with the same pool, TTL, region rules and previous
//!   choices as one already built decides every partition alike, so it
//!   copies that name's decisions, and, when neither has prefix overrides,
//!   its whole result; names steered past geo are twins only of names
//!   steered alike ([`SteerKey`]: the same policy, strategy and latency
//!   choices held from the last build), so ten names steered by latency
//!   over one pool steer once;
//! - unchanged reuse: the last build's record of each name (decisions to
//!   replay, maps kept when nothing they depend on moved);
//! - shared maps: names without prefix overrides whose partitions answer
//!   alike share one pair of prefix maps;
//! - splicing: the partition ranges grouped by partition, kept across
//!   builds, so moved partitions are spliced into the last maps.

use std::collections::HashMap;
use std::sync::Arc;

use super::answers::Answers;
use super::incremental::{NameRecord, RangesByPartition, Record};
use super::rank::{Ctx, PoolRanks};
use super::steer::{Choices, SteerKey};
use crate::engine::NodeView;
use crate::engine::planner::Plan;
use crate::partition::PartitionTable;
use crate::prefix_map::{PrefixMapV4, PrefixMapV6};
use crate::route_table::Answer;

/// See the module doc.
pub(super) struct Memo {
    pub pools: PoolMemo,
    pub names: NameMemo,
}

/// Each pool's rankings: automatic rankings depend on (pool, class) only,
/// so names sharing a pool share them.
pub(super) struct PoolMemo {
    /// The last build's, not yet taken by this one.
    last: HashMap<String, PoolRanks>,
    /// This build's, and per class whether its decisions may differ from the
    /// last build's.
    built: HashMap<String, (PoolRanks, Vec<bool>)>,
    /// The nodes that changed since the last build (empty: a full build).
    changed: Vec<usize>,
}

/// What names reuse of the last build and of each other.
pub(super) struct NameMemo {
    /// The last build's records, not yet taken by this one.
    last: HashMap<String, NameRecord>,
    /// This build's records.
    built: HashMap<String, NameRecord>,
    twins: Vec<Twin>,
    /// Maps by per-partition answers and unlocated answer.
    shared: Vec<(Vec<u32>, PrefixMapV4, PrefixMapV6)>,
    /// The partition ranges by partition, for splicing maps (built on the
    /// first splice, kept while the partitions stay).
    ranges: Option<Arc<RangesByPartition>>,
}

/// A name's per-partition decisions, for the names that decide alike.
pub(super) struct Twin {
    name: String,
    pool: String,
    ttl: u32,
    /// The region rules that apply to it (indices).
    rules: Vec<usize>,
    /// How it is steered past its geo decisions (`None`: it is not).
    steer: Option<SteerKey>,
    /// Its answers; the first `answers_len` are those of its decisions.
    answers: Arc<Vec<Answer>>,
    answers_len: usize,
    by_partition: Vec<u32>,
    chosen: Vec<u32>,
    /// For a name without prefix overrides (no line, no prefix rule applies):
    /// its finished answers and maps, which another such name copies whole.
    done: Option<Done>,
    /// Its latency choices made in this build, when it is steered.
    held: Option<Choices>,
}

/// A finished name without prefix overrides.
pub(super) struct Done {
    /// Per partition its answer, steering applied.
    pub by_partition: Vec<u32>,
    pub answers: Arc<Vec<Answer>>,
    pub unlocated: u32,
    pub v4: PrefixMapV4,
    pub v6: PrefixMapV6,
}

/// A twin's whole result, as a name without prefix overrides copies it:
/// per partition the automatic primary, the answers and the maps.
pub(super) struct Copied<'a> {
    pub chosen: Vec<u32>,
    pub answers: Arc<Vec<Answer>>,
    pub v4: &'a PrefixMapV4,
    pub v6: &'a PrefixMapV6,
    /// The twin's latency choices, when it is steered.
    pub held: Option<Choices>,
}

impl Twin {
    /// A name just decided: `answers_len` answers, and per partition its
    /// answer and automatic primary. Its answers and result are set once
    /// complete ([`NameMemo::finish_twin`]).
    pub fn new(
        name: &str,
        (pool, ttl): (&str, u32),
        rules: Vec<usize>,
        steer: Option<SteerKey>,
        answers_len: usize,
        decided: &(Vec<u32>, Vec<u32>),
    ) -> Twin {
        Twin {
            name: name.to_string(),
            pool: pool.to_string(),
            ttl,
            rules,
            steer,
            answers: Arc::default(),
            answers_len,
            by_partition: decided.0.clone(),
            chosen: decided.1.clone(),
            done: None,
            held: None,
        }
    }
}

impl Memo {
    /// A build's memo: the last build's pools and names when it continues
    /// that build after `changed` nodes changed, `ranges` kept across builds.
    pub fn new(
        last: Option<(HashMap<String, PoolRanks>, HashMap<String, NameRecord>)>,
        changed: Vec<usize>,
        ranges: Option<Arc<RangesByPartition>>,
    ) -> Memo {
        let (pools, names) = last.unwrap_or_default();
        Memo {
            pools: PoolMemo { last: pools, built: HashMap::new(), changed },
            names: NameMemo { last: names, built: HashMap::new(), twins: Vec::new(), shared: Vec::new(), ranges },
        }
    }

    /// What the next build keeps: the record (with this build's pools and
    /// names) and the ranges index.
    pub fn into_record(
        self,
        now: &super::incremental::Now,
        plan: Plan,
        views: Vec<NodeView>,
    ) -> (Record, Option<Arc<RangesByPartition>>) {
        let mut record = Record::new(now, plan, views);
        record.pools = self.pools.built.into_iter().map(|(p, (pr, _))| (p, pr)).collect();
        record.names = self.names.built;
        (record, self.names.ranges)
    }
}

impl PoolMemo {
    /// The nodes that changed since the last build (empty: a full build).
    pub fn changed(&self) -> &[usize] {
        &self.changed
    }

    /// `pool`'s rankings (the top `k` per class) and per class whether its
    /// decisions may differ from the last build's.
    pub fn get(&mut self, ctx: &Ctx, pool: &str, k: usize) -> (&PoolRanks, &[bool]) {
        let (last, changed) = (&mut self.last, &self.changed);
        let (ranks, dirty) = &*self.built.entry(pool.to_string()).or_insert_with(|| match last.remove(pool) {
            Some(old) => ctx.pool_update(pool, k, old, changed),
            None => (ctx.pool(pool, k), vec![true; ctx.plan.class_count()]),
        });
        (ranks, dirty.as_slice())
    }
}

impl NameMemo {
    /// The last build's record of `name` (empty when there is none).
    pub fn take_last(&mut self, name: &str) -> NameRecord {
        self.last.remove(name).unwrap_or_default()
    }

    /// Keeps this build's record of `name`.
    pub fn keep(&mut self, name: String, record: NameRecord) {
        self.built.insert(name, record);
    }

    /// The twin of a name with this pool, TTL, region rules, steering and
    /// previous choices (`choices`: every name's), if one was built.
    pub fn twin(
        &self,
        (pool, ttl): (&str, u32),
        rules: &[usize],
        steer: Option<&SteerKey>,
        previous: Option<&Vec<u32>>,
        choices: &HashMap<String, Vec<u32>>,
    ) -> Option<usize> {
        self.twins.iter().position(|t| {
            t.pool == pool
                && t.ttl == ttl
                && t.rules == rules
                && t.steer.as_ref() == steer
                && choices.get(&t.name) == previous
        })
    }

    /// The twin's decisions: its decisions' answers, and per partition its
    /// answer and automatic primary.
    pub fn twin_decisions(&self, twin: usize, answers: &mut Answers) -> (Vec<u32>, Vec<u32>) {
        let t = &self.twins[twin];
        *answers = Answers::of_list(t.answers[..t.answers_len].to_vec());
        (t.by_partition.clone(), t.chosen.clone())
    }

    /// A name without prefix overrides copies its twin's whole result, when
    /// the twin has one: its record is kept as `name`'s; returns the twin's
    /// per-partition primaries, answers and maps.
    pub fn copy_done(&mut self, twin: usize, name: &str) -> Option<Copied<'_>> {
        let t = &self.twins[twin];
        let done = t.done.as_ref()?;
        let record = NameRecord {
            by_partition: done.by_partition.clone(),
            pre_answers: done.answers.clone(),
            answers: done.answers.clone(),
            v4: Some(done.v4.clone()),
            v6: Some(done.v6.clone()),
            unlocated: done.unlocated,
            ..Default::default()
        };
        self.built.insert(name.to_string(), record);
        Some(Copied {
            chosen: t.chosen.clone(),
            answers: done.answers.clone(),
            v4: &done.v4,
            v6: &done.v6,
            held: t.held.clone(),
        })
    }

    /// A name decided anew: a twin for the names after it.
    pub fn push_twin(&mut self, twin: Twin) {
        self.twins.push(twin);
    }

    /// The last twin pushed is complete: its answers, its whole result
    /// when it has no prefix overrides, and its latency choices when steered.
    pub fn finish_twin(&mut self, answers: &Arc<Vec<Answer>>, done: Option<Done>, held: Option<Choices>) {
        if let Some(t) = self.twins.last_mut() {
            t.answers = answers.clone();
            t.done = done;
            t.held = held;
        }
    }

    /// The maps built for these per-partition answers and unlocated answer (`key`), if any.
    pub fn shared_maps(&self, key: &[u32]) -> Option<(&PrefixMapV4, &PrefixMapV6)> {
        self.shared.iter().find(|s| s.0 == key).map(|(_, v4, v6)| (v4, v6))
    }

    /// Keeps maps for the names after this one with the same `key`.
    pub fn share_maps(&mut self, key: Vec<u32>, v4: &PrefixMapV4, v6: &PrefixMapV6) {
        self.shared.push((key, v4.clone(), v6.clone()));
    }

    /// The partition ranges grouped by partition, for splicing.
    pub fn ranges(&mut self, partitions: &PartitionTable) -> &RangesByPartition {
        self.ranges.get_or_insert_with(|| Arc::new(RangesByPartition::new(partitions)))
    }
}
