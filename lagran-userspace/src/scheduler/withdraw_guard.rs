//! The withdrawal guard: when more than `[health] max_withdraw_ratio` of a
//! pool's nodes would leave the answers in one recompute because their
//! heartbeats timed out — and for that reason alone — the fault is more
//! likely on the control plane's side (its store, its network) than on that
//! many nodes at once, so none of them is withdrawn. Each stays held in the
//! answers until a probe confirms it down (a probe verdict takes it out at
//! once, as always), its heartbeats come back, or an operator's write takes
//! it out. A held node without anything to probe stays until one of the
//! latter two.
//!
//! Agents report at different moments, so a pool falling silent at once
//! times out over a little while, possibly across several recomputes: the
//! nodes withdrawn for silence within the last heartbeat timeout count with
//! those going now, and are brought back and held with them.
//!
//! The first recompute of a process takes the nodes already timed out as
//! the starting point: a restart does not bring back nodes that were gone.

use std::collections::{BTreeMap, HashMap, HashSet};
use std::sync::Mutex;

use crate::health::Liveness;
use crate::model::{Node, NodeStatus};

/// What the guard remembers from one recompute to the next.
#[derive(Debug, Default)]
pub struct GuardState {
    /// A recompute has run: `timed_out` is known.
    seen: bool,
    /// Nodes out of the answers for their heartbeats after the last
    /// recompute, and since when (`i64::MIN`: before this process's first recompute).
    timed_out: HashMap<String, i64>,
    /// Nodes timed out by heartbeat but kept in the answers.
    held: HashSet<String>,
}

impl GuardState {
    /// Decides which nodes timed out by heartbeat stay held at `now_ms`
    /// (pure: the nodes and verdicts in, the held set out); returns the
    /// nodes newly held by this recompute, by pool.
    pub fn apply(
        &mut self,
        nodes: &[Node],
        liveness: &Liveness,
        now_ms: i64,
        max_ratio: f64,
    ) -> BTreeMap<String, Vec<String>> {
        let unguarded = Liveness { held: HashSet::new(), ..liveness.clone() };
        // Timed out for heartbeat reasons alone: online, probes not down, silent too long.
        let silent: HashSet<&str> = nodes
            .iter()
            .filter(|n| n.status == NodeStatus::Online)
            .filter(|n| liveness.probes.get(&n.name).is_none_or(|p| p.up))
            .filter(|n| !liveness.timeouts_suspended && unguarded.heartbeat_timed_out(n, now_ms))
            .map(|n| n.name.as_str())
            .collect();
        self.held.retain(|name| silent.contains(name.as_str()));
        let recent_since = now_ms.saturating_sub(liveness.heartbeat_timeout_ms);
        let mut newly = BTreeMap::new();
        if self.seen {
            // Per pool: online nodes, those going now or gone within the window, those held.
            let mut pools: BTreeMap<&str, (usize, Vec<&str>, usize)> = BTreeMap::new();
            for n in nodes.iter().filter(|n| n.status == NodeStatus::Online) {
                let pool = pools.entry(n.pool.as_str()).or_default();
                pool.0 += 1;
                let name = n.name.as_str();
                if self.held.contains(name) {
                    pool.2 += 1;
                } else if silent.contains(name) && self.timed_out.get(name).is_none_or(|&t| t >= recent_since) {
                    pool.1.push(name);
                }
            }
            for (pool, (size, going, held)) in pools {
                // "More than max_ratio of a pool's nodes would go down": those going now,
                // those gone within the window and those already held (in the answers too).
                let fresh = going.iter().filter(|n| !self.timed_out.contains_key(**n)).count();
                if fresh > 0 && (going.len() + held) as f64 > max_ratio * size as f64 {
                    self.held.extend(going.iter().map(|n| n.to_string()));
                    newly.insert(pool.to_string(), going.iter().map(|n| n.to_string()).collect());
                }
            }
        }
        let first = !self.seen;
        self.seen = true;
        let before = std::mem::take(&mut self.timed_out);
        for name in silent.iter().filter(|n| !self.held.contains(**n)) {
            let since = before.get(*name).copied().unwrap_or(if first { i64::MIN } else { now_ms });
            self.timed_out.insert(name.to_string(), since);
        }
        newly
    }

    /// The nodes held, sorted.
    pub fn held(&self) -> Vec<String> {
        let mut held: Vec<String> = self.held.iter().cloned().collect();
        held.sort();
        held
    }
}

/// The guard as the scheduler holds it.
#[derive(Debug, Default)]
pub struct WithdrawGuard {
    state: Mutex<GuardState>,
}

impl WithdrawGuard {
    /// [`GuardState::apply`], logging what it holds; `liveness` gains the
    /// held nodes, which are returned (sorted).
    pub fn apply(&self, nodes: &[Node], liveness: &mut Liveness, now_ms: i64, max_ratio: f64) -> Vec<String> {
        let mut state = self.state.lock().expect("withdraw-guard lock poisoned");
        let newly = state.apply(nodes, liveness, now_ms, max_ratio);
        for (pool, names) in &newly {
            tracing::error!(
                pool = %pool,
                nodes = names.len(),
                first = names.first().map(String::as_str).unwrap_or(""),
                max_withdraw_ratio = max_ratio,
                "too many of a pool's nodes timed out by heartbeat at once: none is withdrawn until probes confirm each"
            );
        }
        liveness.held = state.held.clone();
        state.held()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::health::{Dead, ProbeState};

    const TIMEOUT: i64 = 60_000;

    fn fleet(n: usize, pool: &str, heard_at: i64) -> Vec<Node> {
        (0..n)
            .map(|i| {
                let mut node = Node::new(format!("{pool}-{i:02}"));
                node.pool = pool.to_string();
                node.last_heartbeat_ms = Some(heard_at);
                node
            })
            .collect()
    }

    fn liveness() -> Liveness {
        Liveness { heartbeat_timeout_ms: TIMEOUT, ..Default::default() }
    }

    fn dead(nodes: &[Node], l: &Liveness, now: i64) -> usize {
        nodes.iter().filter(|n| l.verdict(n, now).is_some()).count()
    }

    #[test]
    fn a_pool_going_silent_at_once_is_held_and_a_few_are_not() {
        let mut nodes = fleet(10, "eu", 0);
        let mut g = GuardState::default();
        let mut l = liveness();
        assert!(g.apply(&nodes, &l, 1_000, 0.5).is_empty(), "all alive");
        // 4 of 10 go silent: at most half, withdrawn.
        for n in &mut nodes[6..] {
            n.last_heartbeat_ms = Some(-TIMEOUT);
        }
        for n in &mut nodes[..6] {
            n.last_heartbeat_ms = Some(TIMEOUT);
        }
        assert!(g.apply(&nodes, &l, TIMEOUT + 1_000, 0.5).is_empty());
        l.held = g.held.clone();
        assert_eq!(dead(&nodes, &l, TIMEOUT + 1_000), 4, "a few silent nodes leave at once");
        // The remaining 6 go silent together: more than half of the pool would go; none does.
        let now = 3 * TIMEOUT;
        let newly = g.apply(&nodes, &l, now, 0.5);
        assert_eq!(newly.get("eu").map(Vec::len), Some(6), "{newly:?}");
        l.held = g.held.clone();
        assert_eq!(dead(&nodes, &l, now), 4, "the six stay in the answers, the four already gone stay gone");
        // Held from one recompute to the next.
        assert!(g.apply(&nodes, &l, now + 5_000, 0.5).is_empty());
        assert_eq!(g.held().len(), 6);
        // A probe confirms one: it leaves at once and is no longer held.
        l.probes.insert("eu-00".into(), ProbeState { up: false, ..Default::default() });
        g.apply(&nodes, &l, now + 10_000, 0.5);
        l.held = g.held.clone();
        assert_eq!(l.verdict(&nodes[0], now + 10_000), Some(Dead::ProbeDown));
        assert_eq!(g.held().len(), 5);
        // One reports again: it is alive and no longer held.
        nodes[1].last_heartbeat_ms = Some(now + 10_000);
        g.apply(&nodes, &l, now + 11_000, 0.5);
        assert_eq!(g.held().len(), 4);
        // An operator's write takes a held node out.
        nodes[2].status = NodeStatus::Offline;
        g.apply(&nodes, &l, now + 12_000, 0.5);
        l.held = g.held.clone();
        assert_eq!(g.held().len(), 3);
        assert!(l.verdict(&nodes[3], now + 12_000).is_none(), "still held");
    }

    #[test]
    fn a_pool_falling_silent_over_several_recomputes_is_held_whole() {
        let mut nodes = fleet(10, "eu", 0);
        let mut g = GuardState::default();
        let mut l = liveness();
        g.apply(&nodes, &l, 1_000, 0.5);
        // Their last reports were spread over a second: three time out first, then the rest.
        for (i, n) in nodes.iter_mut().enumerate() {
            n.last_heartbeat_ms = Some(if i < 3 { 10_000 } else { 10_500 });
        }
        assert!(g.apply(&nodes, &l, 10_000 + TIMEOUT + 1, 0.5).is_empty(), "three of ten may go");
        l.held = g.held.clone();
        assert_eq!(dead(&nodes, &l, 10_000 + TIMEOUT + 1), 3);
        let newly = g.apply(&nodes, &l, 10_500 + TIMEOUT + 1, 0.5);
        assert_eq!(newly.get("eu").map(Vec::len), Some(10), "the three gone a moment ago come back: {newly:?}");
        l.held = g.held.clone();
        assert_eq!(dead(&nodes, &l, 10_500 + TIMEOUT + 1), 0);
        // Gone longer than a timeout ago: not part of a later event.
        let mut g = GuardState::default();
        g.apply(&fleet(10, "eu", 0), &l, 1_000, 0.5);
        for (i, n) in nodes.iter_mut().enumerate() {
            n.last_heartbeat_ms = Some(if i < 3 { 10_000 } else { 10_000 + 2 * TIMEOUT });
        }
        g.apply(&nodes, &l, 10_000 + TIMEOUT + 1, 0.5);
        let newly = g.apply(&nodes, &l, 10_000 + 3 * TIMEOUT + 1, 0.5);
        assert_eq!(newly.get("eu").map(Vec::len), Some(7), "only the seven going now: {newly:?}");
    }

    #[test]
    fn pools_are_counted_apart_and_a_ratio_of_one_disables_the_guard() {
        let mut nodes = fleet(4, "eu", 0);
        nodes.extend(fleet(4, "us", 0));
        let mut g = GuardState::default();
        let l = liveness();
        g.apply(&nodes, &l, 1_000, 0.5);
        // All of "us" and one of "eu" go silent.
        for n in &mut nodes[1..4] {
            n.last_heartbeat_ms = Some(TIMEOUT);
        }
        let newly = g.apply(&nodes, &l, TIMEOUT + 1_000, 0.5);
        assert_eq!(newly.keys().collect::<Vec<_>>(), vec!["us"], "one of four in eu is not too many: {newly:?}");
        assert_eq!(g.held(), vec!["us-00", "us-01", "us-02", "us-03"]);
        let mut off = GuardState::default();
        off.apply(&nodes, &l, 1_000, 1.0);
        for n in &mut nodes {
            n.last_heartbeat_ms = Some(-TIMEOUT);
        }
        assert!(off.apply(&nodes, &l, TIMEOUT + 1_000, 1.0).is_empty(), "ratio 1: the whole fleet may go");
    }

    #[test]
    fn the_first_recompute_holds_nothing_and_suspended_timeouts_need_no_guard() {
        let nodes = fleet(10, "", -10 * TIMEOUT);
        let mut g = GuardState::default();
        let mut l = liveness();
        assert!(g.apply(&nodes, &l, 0, 0.5).is_empty(), "nodes dead before this process started stay dead");
        assert!(g.held().is_empty());
        let mut g = GuardState::default();
        g.apply(&fleet(10, "", 0), &l, 1_000, 0.5);
        l.timeouts_suspended = true;
        assert!(g.apply(&nodes, &l, 0, 0.5).is_empty(), "nobody times out while timeouts are suspended");
        l.timeouts_suspended = false;
        assert_eq!(g.apply(&nodes, &l, 0, 0.5).get("").map(Vec::len), Some(10), "then the guard holds them");
    }
}
