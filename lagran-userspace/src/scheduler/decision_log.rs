//! Decision logs: when a published table changes a partition's answer, one
//! structured line on the tracing target [`TARGET`] says which name and
//! partition, the previous and the new node and addresses, the new answer's
//! reason (the stages and rules that decided it: health, load, rules, lines,
//! hysteresis), every candidate's score terms as the engine ranks them for
//! that partition now, and both table versions.
//!
//! Bounded: the diff and the lines are made on a blocking thread after the
//! table is published, never in the recompute; one diff runs at a time (a
//! table published while one runs is summarised in one line instead); and a
//! table that changes more than [`MAX_LINES_PER_TABLE`] partitions writes that
//! many lines and one summary of the rest. The switch is the tracing filter:
//! `RUST_LOG=info,lagran::decision=off` turns them off, and nothing is
//! computed then.
//!
//! With `--log-format json` each line is one JSON object whose fields are the
//! decision's; `candidates` and the two answers are JSON text.

use std::collections::HashMap;
use std::net::Ipv4Addr;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use serde::Serialize;

use crate::engine::{self, Family, NodeView, Policy};
use crate::health::Liveness;
use crate::location::Location;
use crate::model::{DEFAULT_POOL, Node};
use crate::partition::PartitionTable;
use crate::route_table::{Answer, AnswerState, RouteTable};

/// The tracing target of the decision lines.
pub const TARGET: &str = "lagran::decision";
/// Lines written for one published table; the rest are counted in a summary.
pub const MAX_LINES_PER_TABLE: usize = 1000;

/// One changed (name, partition, previous answer, new answer).
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct DecisionLine {
    pub version: u64,
    pub previous_version: u64,
    pub name: String,
    /// `country/province/city/isp`.
    pub partition: String,
    /// The partition's IPv4 ranges that made this change.
    pub ranges: usize,
    pub previous: Served,
    pub new: Served,
    pub reason: String,
    pub state: AnswerState,
    /// Best first, as ranked for this partition with the nodes of this table.
    pub candidates: Vec<CandidateTerms>,
}

/// What an answer served: the node and its addresses.
#[derive(Clone, Debug, Default, PartialEq, Serialize)]
pub struct Served {
    pub node: Option<String>,
    pub ipv4: Vec<Ipv4Addr>,
}

impl Served {
    fn of(answer: Option<&Answer>) -> Served {
        answer.map_or_else(Served::default, |a| Served { node: a.node.clone(), ipv4: a.ipv4.clone() })
    }
}

/// A candidate's score and the terms that make it.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct CandidateTerms {
    pub node: String,
    pub score: i64,
    pub terms: Vec<(String, i64)>,
}

/// What the decisions are ranked with: the nodes and their liveness as the
/// table was built, and the scoring policy.
pub struct Inputs {
    pub nodes: Vec<Node>,
    pub liveness: Liveness,
    pub now_ms: i64,
    pub policy: Policy,
}

/// The changed decisions between `old` and `new` (at most `max_lines`), and
/// how many there were in all.
pub fn decisions(
    partitions: &PartitionTable,
    old: &RouteTable,
    new: &RouteTable,
    inputs: &Inputs,
    max_lines: usize,
) -> (Vec<DecisionLine>, usize) {
    let views = NodeView::prepare_live(inputs.nodes.iter().cloned(), &inputs.liveness, inputs.now_ms);
    let locations = partitions.locations();
    let mut lines: Vec<DecisionLine> = Vec::new();
    let mut total = 0;
    for name in new.scheduled_names() {
        let Some(before) = old.scheduled(&name.name) else { continue };
        if before.answers == name.answers && before.v4 == name.v4 {
            continue;
        }
        // (location, previous value, new value) -> index in `lines`, or usize::MAX past the limit.
        let mut seen: HashMap<(u32, u32, u32), usize> = HashMap::new();
        let moved = |x: u32, y: u32| {
            let (a, b) = (before.answers.get(x as usize), name.answers.get(y as usize));
            a.map(|a| (&a.node, &a.ipv4)) != b.map(|b| (&b.node, &b.ipv4))
        };
        let ranges = partitions.v4_ranges();
        for (start, end, was, is) in super::changes::changed_spans(&before.v4, &name.v4, moved) {
            if !moved(was, is) {
                continue; // the value was renumbered, the answer is the same
            }
            let (a, b) = (before.answers.get(was as usize), name.answers.get(is as usize));
            let first = ranges.partition_point(|r| r.1 < start);
            for &(_, _, loc) in ranges[first..].iter().take_while(|r| r.0 <= end) {
                if let Some(&i) = seen.get(&(loc, was, is)) {
                    if let Some(line) = lines.get_mut(i) {
                        line.ranges += 1;
                    }
                    continue;
                }
                total += 1;
                if lines.len() >= max_lines {
                    seen.insert((loc, was, is), usize::MAX);
                    continue;
                }
                seen.insert((loc, was, is), lines.len());
                let location = locations.get(loc as usize).cloned().unwrap_or_default();
                lines.push(DecisionLine {
                    version: new.version,
                    previous_version: old.version,
                    name: name.name.clone(),
                    partition: location_text(&location),
                    ranges: 1,
                    previous: Served::of(a),
                    new: Served::of(b),
                    reason: b.map(|b| b.reason.clone()).unwrap_or_else(|| "no answer".into()),
                    state: b.map_or(AnswerState::Empty, |b| b.state),
                    candidates: candidates(&views, &location, pool_of(&views, b.or(a)), &inputs.policy),
                });
            }
        }
    }
    (lines, total)
}

/// The pool the name is scheduled in: the answered node's (only nodes of the
/// name's pool are eligible), else the default pool.
fn pool_of<'a>(views: &'a [NodeView], answer: Option<&Answer>) -> &'a str {
    let node = answer.and_then(|a| a.node.as_deref());
    views.iter().find(|v| Some(v.node.name.as_str()) == node).map_or(DEFAULT_POOL, |v| v.node.pool.as_str())
}

fn candidates(views: &[NodeView], location: &Location, pool: &str, policy: &Policy) -> Vec<CandidateTerms> {
    engine::rank(views, location, Family::V4, pool, policy)
        .candidates
        .into_iter()
        .map(|c| CandidateTerms { node: c.name, score: c.score, terms: c.terms })
        .collect()
}

fn location_text(l: &Location) -> String {
    format!("{}/{}/{}/{}", l.country, l.province, l.city, l.isp)
}

/// Whether decision lines are wanted (the tracing filter lets [`TARGET`] through).
pub fn enabled() -> bool {
    tracing::enabled!(target: "lagran::decision", tracing::Level::INFO)
}

/// One diff at a time, process-wide.
static RUNNING: AtomicBool = AtomicBool::new(false);

/// Writes the decision lines of `old` -> `new` from a blocking thread; the
/// caller has published `new` already. Call inside the tokio runtime.
pub fn spawn(partitions: Arc<PartitionTable>, old: Arc<RouteTable>, new: Arc<RouteTable>, inputs: Inputs) {
    if old.version == 0 {
        return;
    }
    if RUNNING.swap(true, Ordering::SeqCst) {
        tracing::info!(target: "lagran::decision", version = new.version, previous_version = old.version,
            "decision log skipped for this table: the previous table's diff still runs");
        return;
    }
    tokio::task::spawn_blocking(move || {
        // Cleared also when the diff panics.
        struct Done;
        impl Drop for Done {
            fn drop(&mut self) {
                RUNNING.store(false, Ordering::SeqCst);
            }
        }
        let _done = Done;
        let (lines, total) = decisions(&partitions, &old, &new, &inputs, MAX_LINES_PER_TABLE);
        for d in &lines {
            write(d);
        }
        if total > lines.len() {
            tracing::info!(target: "lagran::decision", version = new.version, previous_version = old.version,
                changed = total, logged = lines.len(),
                "decision log summarised: more partitions changed than are logged one by one");
        }
    });
}

/// JSON text of a nested value, for a field of the line.
fn json(v: &impl Serialize) -> String {
    serde_json::to_string(v).unwrap_or_default()
}

fn write(d: &DecisionLine) {
    tracing::info!(
        target: "lagran::decision",
        version = d.version,
        previous_version = d.previous_version,
        name = %d.name,
        partition = %d.partition,
        ranges = d.ranges,
        previous = %json(&d.previous),
        new = %json(&d.new),
        reason = %d.reason,
        state = ?d.state,
        candidates = %json(&d.candidates),
        "answer decision changed"
    );
}

#[cfg(test)]
#[path = "decision_log_tests.rs"]
mod tests;
