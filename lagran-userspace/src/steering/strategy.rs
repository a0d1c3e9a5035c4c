//! The strategies that spread one partition's clients over several nodes
//! instead of sending them to the best one.
//!
//! Answers are made per partition (the data plane serves a partition's
//! prefixes with one answer and ECS scopes as wide as that answer holds), so
//! the client prefix a strategy hashes is the partition: its key is the
//! partition's location tuple, stable across geo reloads and restarts. Both
//! strategies are rendezvous (highest random weight) hashing: each
//! (partition, node) pair gets a pseudo-random draw and the highest wins, so
//! a node that leaves moves only the partitions it held, and one that joins
//! takes only its share.

use serde::{Deserialize, Serialize};

use crate::location::Location;

/// How a scheduled name picks among the eligible nodes of a partition.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Strategy {
    /// The best node (with hysteresis).
    #[default]
    Best,
    /// A sticky split, by partition hash, across the eligible nodes within
    /// the hysteresis band of the best, in proportion to their weights.
    Weighted,
    /// Consistent hashing over the eligible nodes of the best node's region.
    Hash,
}

impl Strategy {
    pub fn as_str(self) -> &'static str {
        match self {
            Strategy::Best => "best",
            Strategy::Weighted => "weighted",
            Strategy::Hash => "hash",
        }
    }

    pub fn parse(s: &str) -> Option<Self> {
        match s {
            "best" => Some(Strategy::Best),
            "weighted" => Some(Strategy::Weighted),
            "hash" => Some(Strategy::Hash),
            _ => None,
        }
    }
}

/// A partition's hash key: its location tuple.
pub fn partition_key(location: &Location) -> u64 {
    let mut h = FNV_OFFSET;
    for field in [&location.country, &location.province, &location.city, &location.isp] {
        h = fnv(h, field.as_bytes());
        h = fnv(h, &[0xff]);
    }
    h
}

/// A node's hash key: its name.
pub fn node_key(name: &str) -> u64 {
    fnv(FNV_OFFSET, name.as_bytes())
}

/// The node of `nodes` (id, key, weight > 0) that `partition` goes to,
/// with chances proportional to weight (weighted rendezvous hashing:
/// the highest `-weight / ln(u)`, `u` the pair's draw in (0, 1)).
pub fn weighted_pick(partition: u64, nodes: &[(u32, u64, f64)]) -> Option<u32> {
    nodes
        .iter()
        .filter(|(_, _, w)| *w > 0.0)
        .map(|&(id, key, w)| (id, -w / draw(partition, key).ln()))
        .max_by(|a, b| a.1.total_cmp(&b.1).then(b.0.cmp(&a.0)))
        .map(|(id, _)| id)
}

/// The node of `nodes` (id, key) that `partition` goes to, each equally likely.
pub fn hash_pick(partition: u64, nodes: &[(u32, u64)]) -> Option<u32> {
    nodes.iter().max_by_key(|&&(id, key)| (mix(partition ^ mix(key)), std::cmp::Reverse(id))).map(|&(id, _)| id)
}

/// The pair's draw, uniform in (0, 1).
fn draw(partition: u64, node: u64) -> f64 {
    ((mix(partition ^ mix(node)) >> 11) as f64 + 0.5) / (1u64 << 53) as f64
}

// FNV-1a and the splitmix64 finaliser, written out rather than taken from a
// hashing crate: the draws decide answers, so they must stay the same across
// processes, builds and crate upgrades (std's hashers are seeded or unspecified).
const FNV_OFFSET: u64 = 0xcbf2_9ce4_8422_2325;

fn fnv(mut h: u64, bytes: &[u8]) -> u64 {
    for &b in bytes {
        h ^= b as u64;
        h = h.wrapping_mul(0x0100_0000_01b3);
    }
    h
}

fn mix(mut z: u64) -> u64 {
    z = z.wrapping_add(0x9e37_79b9_7f4a_7c15);
    z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    z ^ (z >> 31)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn partitions(n: usize) -> Vec<u64> {
        (0..n).map(|i| partition_key(&Location::new("CN", &format!("p{i}"), "", "电信"))).collect()
    }

    #[test]
    fn weighted_shares_follow_the_weights_and_stick() {
        let nodes = [(0, node_key("a"), 100.0), (1, node_key("b"), 300.0)];
        let keys = partitions(4_000);
        let picks: Vec<u32> = keys.iter().map(|&k| weighted_pick(k, &nodes).unwrap()).collect();
        let b = picks.iter().filter(|&&p| p == 1).count() as f64 / keys.len() as f64;
        assert!((0.71..=0.79).contains(&b), "b has weight 3/4 of the total and took {b}");
        let again: Vec<u32> = keys.iter().map(|&k| weighted_pick(k, &nodes).unwrap()).collect();
        assert_eq!(picks, again, "the split is sticky");
        // A third node takes its share from both, and moves nothing between them.
        let three = [nodes[0], nodes[1], (2, node_key("c"), 100.0)];
        for (&k, &before) in keys.iter().zip(&picks) {
            let now = weighted_pick(k, &three).unwrap();
            assert!(now == before || now == 2, "a partition moved from {before} to {now}");
        }
    }

    #[test]
    fn hash_moves_only_the_lost_nodes_share() {
        let nodes: Vec<(u32, u64)> = (0..5).map(|i| (i, node_key(&format!("n{i}")))).collect();
        let keys = partitions(2_000);
        let before: Vec<u32> = keys.iter().map(|&k| hash_pick(k, &nodes).unwrap()).collect();
        for n in 0..5u32 {
            let share = before.iter().filter(|&&p| p == n).count() as f64 / keys.len() as f64;
            assert!((0.15..=0.25).contains(&share), "node {n} holds {share}");
        }
        let without: Vec<(u32, u64)> = nodes.iter().copied().filter(|&(id, _)| id != 3).collect();
        let mut moved = 0;
        for (&k, &b) in keys.iter().zip(&before) {
            let now = hash_pick(k, &without).unwrap();
            if b == 3 {
                moved += 1;
            } else {
                assert_eq!(now, b, "a partition of a node that stayed moved");
            }
        }
        assert!(moved > 0);
        assert_eq!(hash_pick(1, &[]), None);
    }
}
