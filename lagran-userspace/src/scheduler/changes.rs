//! The change log: one structured line per (name, old answer -> new answer)
//! when a published table moves answers.

use std::collections::{HashMap, VecDeque};

use serde::Serialize;

use crate::partition::PartitionTable;
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
/// partitions moved, a few of them by location, and the new answer's reason
/// (which names the stages and rules that decided it). Returns the same as events.
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
        // (from node, to node) -> (ranges moved, a few partition labels, the new answer)
        type Moves<'a> = HashMap<(Option<&'a str>, Option<&'a str>), (usize, Vec<String>, &'a Answer)>;
        let mut moves: Moves = HashMap::new();
        for &(start, _, pid) in partitions.v4_ranges() {
            let addr = std::net::IpAddr::V4(start.into());
            let (a_old, _) = before.answer_for(addr);
            let (a_new, _) = name.answer_for(addr);
            if a_old.node == a_new.node && a_old.ipv4 == a_new.ipv4 {
                continue;
            }
            let e = moves.entry((a_old.node.as_deref(), a_new.node.as_deref())).or_insert((0, Vec::new(), a_new));
            e.0 += 1;
            let loc = &partitions.locations()[pid as usize];
            let label = if loc.is_unknown() {
                "unknown".to_string()
            } else {
                format!("{}/{}/{}/{}", loc.country, loc.province, loc.city, loc.isp)
            };
            if e.1.len() < 5 && !e.1.contains(&label) {
                e.1.push(label);
            }
        }
        for ((from, to), (ranges, sample, answer)) in moves {
            tracing::info!(
                name = %name.name,
                from = from.unwrap_or("-"),
                to = to.unwrap_or("-"),
                addresses = ?answer.ipv4,
                ranges,
                partitions = %sample.join(", "),
                state = ?answer.state,
                reason = %answer.reason,
                version = new.version,
                "answer changed"
            );
            events.push(ChangeEvent {
                at_ms: new.generated_at_ms,
                version: new.version,
                name: name.name.clone(),
                from: from.map(str::to_string),
                to: to.map(str::to_string),
                ranges,
                partitions: sample,
                state: answer.state,
                reason: answer.reason.clone(),
            });
        }
    }
    events
}
