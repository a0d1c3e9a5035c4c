//! The change log: one structured line per (name, old answer -> new answer)
//! when a published table moves answers.

use std::collections::HashMap;

use crate::partition::PartitionTable;
use crate::route_table::{Answer, RouteTable};

/// One structured line per (name, old answer -> new answer): how many
/// partitions moved, a few of them by location, and the new answer's reason
/// (which names the stages and rules that decided it).
pub(super) fn log_changes(partitions: &PartitionTable, old: &RouteTable, new: &RouteTable) {
    if old.version == 0 {
        return;
    }
    for name in new.scheduled_names() {
        let Some(before) = old.scheduled(&name.name) else {
            tracing::info!(name = %name.name, version = new.version, "name scheduled");
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
        }
    }
}
