//! The latency policy for one partition: the node with the lowest measured
//! round-trip time among those allowed, held while the current node stays
//! within the stabilize band of the best.

/// What decides a latency answer (`[steering]`).
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Band {
    /// Fresh samples a node needs before its RTT counts.
    pub min_samples: u32,
    /// The current node is kept while it is within
    /// `max(stabilize_ms, stabilize_ratio × best)` of the best.
    pub stabilize_ms: f64,
    pub stabilize_ratio: f64,
}

/// One allowed node's measurement: an id, its RTT and fresh samples.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Measured {
    pub node: u32,
    pub rtt_ms: f64,
    pub samples: u32,
}

/// The node a partition goes to: the current one while it is within the
/// band of the best, else the best; `None` (the geo answer stands) when no
/// allowed node has `min_samples` fresh samples.
pub fn choose(measured: &[Measured], current: Option<u32>, band: &Band) -> Option<u32> {
    let counted = || measured.iter().filter(|m| m.samples >= band.min_samples);
    let best = counted().min_by(|a, b| a.rtt_ms.total_cmp(&b.rtt_ms).then(a.node.cmp(&b.node)))?;
    let slack = band.stabilize_ms.max(band.stabilize_ratio * best.rtt_ms);
    let held = current.and_then(|c| counted().find(|m| m.node == c)).filter(|c| c.rtt_ms - best.rtt_ms <= slack);
    Some(held.map_or(best.node, |c| c.node))
}

#[cfg(test)]
mod tests {
    use super::*;

    const BAND: Band = Band { min_samples: 10, stabilize_ms: 10.0, stabilize_ratio: 0.1 };

    fn m(node: u32, rtt_ms: f64, samples: u32) -> Measured {
        Measured { node, rtt_ms, samples }
    }

    #[test]
    fn the_lowest_rtt_wins_without_a_current_node() {
        assert_eq!(choose(&[m(1, 85.0, 20), m(2, 9.0, 20)], None, &BAND), Some(2));
    }

    #[test]
    fn a_swap_smaller_than_the_band_keeps_the_current_node() {
        // best 80 ms: the band is max(10, 8) = 10 ms.
        assert_eq!(choose(&[m(1, 89.0, 20), m(2, 80.0, 20)], Some(1), &BAND), Some(1));
        // best 200 ms: the band is max(10, 20) = 20 ms.
        assert_eq!(choose(&[m(1, 219.0, 20), m(2, 200.0, 20)], Some(1), &BAND), Some(1));
    }

    #[test]
    fn a_swap_larger_than_the_band_moves_it() {
        assert_eq!(choose(&[m(1, 91.0, 20), m(2, 80.0, 20)], Some(1), &BAND), Some(2));
        assert_eq!(choose(&[m(1, 221.0, 20), m(2, 200.0, 20)], Some(1), &BAND), Some(2));
    }

    #[test]
    fn too_few_samples_keep_the_geo_answer() {
        assert_eq!(choose(&[m(1, 5.0, 9)], None, &BAND), None);
        // The fast node has too few samples: the measured one with enough wins.
        assert_eq!(choose(&[m(1, 5.0, 9), m(2, 50.0, 10)], None, &BAND), Some(2));
        // A current node without enough samples is not held.
        assert_eq!(choose(&[m(1, 51.0, 3), m(2, 50.0, 10)], Some(1), &BAND), Some(2));
        assert_eq!(choose(&[], Some(1), &BAND), None, "measurements aged out: geo again");
    }
}
