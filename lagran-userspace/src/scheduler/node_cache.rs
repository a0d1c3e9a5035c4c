//! The nodes as the last recompute read them, so that a recompute after one
//! node's write reads that node again and not the whole fleet.
//!
//! Reading 1 000 nodes from the store takes 10–35 ms (the rows come one at a
//! time from the database's thread), longer than the incremental build that
//! follows: on the path from `PATCH /api/v1/nodes/{name}` to the XDP maps it
//! was the largest single step. Every write of a node reaches the scheduler
//! by name ([`Change::Node`](super::Change::Node) from the API and from
//! heartbeats, directly or through a standby's notification); anything else
//! (a node created or deleted, a full recompute, a new leadership term) reads
//! every node again, and so does the periodic full recompute, the safety net.

use std::collections::BTreeSet;

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

#[derive(Debug, Default)]
pub struct NodeCache {
    /// Sorted by name, as `Store::list_nodes` returns them; `None`: never read.
    nodes: Option<Vec<Node>>,
    /// Nodes written since the last read.
    written: BTreeSet<String>,
    /// Anything may have changed since the last read.
    all: bool,
}

impl NodeCache {
    /// Node `name` was written (a PATCH, a heartbeat).
    pub fn written(&mut self, name: &str) {
        if !self.all && self.written.len() <= MAX_SINGLE_READS {
            self.written.insert(name.to_string());
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
    pub fn put_all(&mut self, nodes: &[Node]) {
        self.nodes = Some(nodes.to_vec());
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

    /// The nodes as read (empty before the first read).
    pub fn nodes(&self) -> Vec<Node> {
        self.nodes.clone().unwrap_or_default()
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
        c.put_all(&[node("a", 1), node("c", 1)]);
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
}
