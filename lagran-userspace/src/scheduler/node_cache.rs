//! The nodes as the last recompute read them, so that a recompute after one
//! node's write reads that node again and not the whole fleet.
//!
//! Reading 1 000 nodes from the store takes 10–35 ms (the rows come one at a
//! time from the database's thread), longer than the incremental build that
//! follows: on the path from `PATCH /api/v1/nodes/{name}` to the XDP maps it
//! was the largest single step. Every write of a node reaches the scheduler
//! by name ([`Change::Node`](super::Change::Node) from the API, directly or
//! through a standby's notification) or with its row (a heartbeat, below); anything else
//! (a node created or deleted, a full recompute, a new leadership term) reads
//! every node again, and so does the periodic full recompute, the safety net.
//!
//! A heartbeat, taken by this process or passed on by a standby
//! (the scheduler's heartbeat forwarding), does not make the node be read again: its
//! statement returned the figures it wrote ([`Load`]), and those are laid
//! over the cached row (a fleet's heartbeats, more than [`MAX_SINGLE_READS`]
//! per build, made every build read every node: 9–17 ms twice a second).
//! Only a heartbeat's own columns are taken, and only when its
//! `last_heartbeat_ms` is newer than the row's: a row read after the
//! heartbeat (say, for a `PATCH` written after it) holds that heartbeat
//! already and wins, so a late report cannot undo a later write. Two reports
//! of one node arriving out of order (or within one millisecond) make the
//! node be read again instead.

use std::collections::{BTreeSet, HashMap};

use crate::model::Node;

/// Above this many nodes written since the last read, one read of every
/// node is cheaper than one read each.
pub const MAX_SINGLE_READS: usize = 16;

/// What the next recompute reads of the nodes.
#[derive(Debug, PartialEq, Eq)]
pub enum NodeRead {
    /// Every node.
    All,
    /// These nodes again (each may have been deleted); the rest as last read.
    Some(Vec<String>),
}

/// What a heartbeat wrote: the node's load figures and when. Serialized
/// with short names: a standby passes these to the leader in notifications
/// of bounded size.
#[derive(Debug, Clone, PartialEq, serde::Serialize, serde::Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Load {
    #[serde(rename = "cpu")]
    cpu_usage: f64,
    #[serde(rename = "mem")]
    memory_usage: f64,
    #[serde(rename = "bw")]
    bandwidth_mbps: f64,
    conns: i64,
    #[serde(rename = "at")]
    last_heartbeat_ms: i64,
}

impl Load {
    /// The heartbeat's columns of `node` as its statement returned it
    /// (`None`: the row carries no heartbeat).
    pub fn of(node: &Node) -> Option<Load> {
        Some(Load {
            cpu_usage: node.cpu_usage,
            memory_usage: node.memory_usage,
            bandwidth_mbps: node.bandwidth_mbps,
            conns: node.conns,
            last_heartbeat_ms: node.last_heartbeat_ms?,
        })
    }

    /// When the heartbeat was taken (the node's `last_heartbeat_ms`).
    pub fn at_ms(&self) -> i64 {
        self.last_heartbeat_ms
    }

    /// Lays the figures over `node` if they are newer than its own.
    fn apply(&self, node: &mut Node) {
        if node.last_heartbeat_ms.is_none_or(|at| self.last_heartbeat_ms > at) {
            node.cpu_usage = self.cpu_usage;
            node.memory_usage = self.memory_usage;
            node.bandwidth_mbps = self.bandwidth_mbps;
            node.conns = self.conns;
            node.last_heartbeat_ms = Some(self.last_heartbeat_ms);
        }
    }
}

#[derive(Debug, Default)]
pub struct NodeCache {
    /// Sorted by name, as `Store::list_nodes` returns them; `None`: never read.
    nodes: Option<Vec<Node>>,
    /// Nodes written since the last read.
    written: BTreeSet<String>,
    /// Anything may have changed since the last read.
    all: bool,
    /// Heartbeats' figures since the last build, by node.
    heard: HashMap<String, Load>,
}

impl NodeCache {
    /// Node `name` was written (a PATCH, a heartbeat).
    pub fn written(&mut self, name: &str) {
        if !self.all && self.written.len() <= MAX_SINGLE_READS {
            self.written.insert(name.to_string());
        }
    }

    /// Node `name` reported `load` (its heartbeat's statement returned it).
    pub fn heard(&mut self, name: &str, load: Load) {
        match self.heard.get(name) {
            // Not after the report held: which one the row holds is for the store to say.
            Some(held) if load.last_heartbeat_ms <= held.last_heartbeat_ms => {
                self.heard.remove(name);
                self.written(name);
            }
            _ => {
                self.heard.insert(name.to_string(), load);
            }
        }
    }

    /// Anything may have changed: the next read takes every node.
    pub fn invalidate(&mut self) {
        self.all = true;
        self.written.clear();
    }

    /// What to read now; what was written until now counts as read from here on.
    pub fn plan(&mut self) -> NodeRead {
        let all = std::mem::take(&mut self.all);
        let written = std::mem::take(&mut self.written);
        if all || self.nodes.is_none() || written.len() > MAX_SINGLE_READS {
            return NodeRead::All;
        }
        NodeRead::Some(written.into_iter().collect())
    }

    /// Every node, as just read.
    pub fn put_all(&mut self, nodes: Vec<Node>) {
        self.nodes = Some(nodes);
    }

    /// Node `name` as just read (`None`: it no longer exists); the nodes to
    /// build from. Call only after [`NodeCache::plan`] said [`NodeRead::Some`].
    pub fn put(&mut self, name: &str, node: Option<Node>) {
        let Some(nodes) = self.nodes.as_mut() else { return };
        match (nodes.binary_search_by(|n| n.name.as_str().cmp(name)), node) {
            (Ok(i), Some(n)) => nodes[i] = n,
            (Ok(i), None) => {
                nodes.remove(i);
            }
            (Err(i), Some(n)) => nodes.insert(i, n),
            (Err(_), None) => {}
        }
    }

    /// The nodes to build from: as read, with the heartbeats heard since
    /// laid over them (empty before the first read).
    pub fn nodes(&mut self) -> Vec<Node> {
        let heard = std::mem::take(&mut self.heard);
        let Some(nodes) = self.nodes.as_mut() else { return Vec::new() };
        if !heard.is_empty() {
            for n in nodes.iter_mut() {
                if let Some(load) = heard.get(&n.name) {
                    load.apply(n);
                }
            }
        }
        nodes.clone()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn node(name: &str, weight: i64) -> Node {
        Node { name: name.into(), weight, ..crate::demo::demo_nodes()[0].clone() }
    }

    #[test]
    fn a_written_node_is_read_alone_and_everything_else_reads_all() {
        let mut c = NodeCache::default();
        assert_eq!(c.plan(), NodeRead::All, "nothing read yet");
        c.put_all(vec![node("a", 1), node("c", 1)]);
        assert_eq!(c.plan(), NodeRead::Some(vec![]), "nothing written: nothing to read");
        c.written("c");
        c.written("b");
        c.written("c");
        assert_eq!(c.plan(), NodeRead::Some(vec!["b".into(), "c".into()]));
        c.put("b", Some(node("b", 2)));
        c.put("c", None);
        c.put("a", Some(node("a", 5)));
        let names: Vec<(String, i64)> = c.nodes().into_iter().map(|n| (n.name, n.weight)).collect();
        assert_eq!(names, vec![("a".into(), 5), ("b".into(), 2)], "sorted by name, deleted gone, rewritten replaced");
        assert_eq!(c.plan(), NodeRead::Some(vec![]), "a plan takes what was written");
        for i in 0..=MAX_SINGLE_READS {
            c.written(&format!("n{i}"));
        }
        assert_eq!(c.plan(), NodeRead::All, "many written: one read of all is cheaper");
        c.written("a");
        c.invalidate();
        assert_eq!(c.plan(), NodeRead::All);
        assert_eq!(c.plan(), NodeRead::Some(vec![]), "an invalidation is read once");
    }

    fn reported(name: &str, cpu: f64, at: i64) -> Load {
        Load::of(&Node { cpu_usage: cpu, last_heartbeat_ms: Some(at), ..node(name, 1) }).unwrap()
    }

    fn cpu_of(c: &mut NodeCache) -> Vec<(String, f64, Option<i64>)> {
        c.nodes().into_iter().map(|n| (n.name, n.cpu_usage, n.last_heartbeat_ms)).collect()
    }

    #[test]
    fn a_heartbeat_is_laid_over_the_row_without_a_read_and_never_over_a_newer_one() {
        let mut c = NodeCache::default();
        c.plan();
        let row = |name: &str, cpu: f64, at: i64| Node { cpu_usage: cpu, last_heartbeat_ms: Some(at), ..node(name, 1) };
        c.put_all(vec![row("a", 10.0, 100), row("b", 10.0, 100)]);
        c.heard("a", reported("a", 20.0, 200));
        c.heard("a", reported("a", 30.0, 300));
        assert_eq!(c.plan(), NodeRead::Some(vec![]), "reports in order: nothing to read");
        assert_eq!(cpu_of(&mut c), vec![("a".into(), 30.0, Some(300)), ("b".into(), 10.0, Some(100))]);
        assert_eq!(cpu_of(&mut c)[0].1, 30.0, "the figures stay in the cached row");
        // A report older than the one held (out of order, or a clock step): the store decides.
        c.heard("b", reported("b", 50.0, 500));
        c.heard("b", reported("b", 40.0, 400));
        assert_eq!(c.plan(), NodeRead::Some(vec!["b".into()]));
        c.put("b", Some(row("b", 40.0, 400)));
        assert_eq!(cpu_of(&mut c)[1], ("b".into(), 40.0, Some(400)), "the row as read, nothing laid over it");
        // A row read after the report (a PATCH written after the heartbeat) holds it
        // already: a report heard late does not undo the later write.
        c.heard("a", reported("a", 60.0, 600));
        c.plan();
        c.put("a", Some(Node { status: crate::model::NodeStatus::Offline, ..row("a", 99.0, 600) }));
        let a = c.nodes().remove(0);
        assert_eq!(
            (a.cpu_usage, a.status),
            (99.0, crate::model::NodeStatus::Offline),
            "the read row wins at equal times"
        );
        // Reports are taken until the build reads them; a full read after them is compared too.
        c.heard("a", reported("a", 70.0, 700));
        c.invalidate();
        assert_eq!(c.plan(), NodeRead::All);
        c.put_all(vec![row("a", 80.0, 800), row("b", 40.0, 400)]);
        assert_eq!(cpu_of(&mut c)[0], ("a".into(), 80.0, Some(800)), "the newer read wins over an older report");
    }
}
