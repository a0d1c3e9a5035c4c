//! The latency model: what a client's round trip to a node costs.
//!
//! `access + propagation × stretch + interconnect + load + events`:
//! - access: the last mile, the same for every node (it moves no choice);
//! - propagation: the great-circle distance at 200 km/ms in fibre, both
//!   ways, stretched by a fixed per-(partition, node) route factor in
//!   `1.2..1.8` (routes are not great circles, and not equally so);
//! - interconnect: a penalty when the client's carrier is not the node's
//!   (the carriers' peering is thin and far);
//! - load: queueing on a busy node, growing with the square of its CPU use;
//! - events: a congested link (one carrier to one node) and a degraded node
//!   add their delay while they last.

use std::collections::HashMap;

use lagran::location::Location;
use lagran::location::coords::{coordinates, haversine_km};
use lagran::model::Node;
use lagran::steering::strategy::{node_key, partition_key};

/// The last mile, in ms.
const ACCESS_MS: f64 = 4.0;
/// Where neither end's place is known.
const UNKNOWN_KM: f64 = 1_500.0;
/// Between two mainland carriers, in ms.
const CROSS_CARRIER_MS: f64 = 30.0;
/// Queueing at 100 % CPU, in ms.
const FULL_LOAD_MS: f64 = 12.0;

/// The fleet's side of the model, and the events in force.
pub struct Model {
    coords: Vec<Option<(f64, f64)>>,
    isp: Vec<String>,
    load_ms: Vec<f64>,
    keys: Vec<u64>,
    /// (carrier, node) -> added ms.
    congested: HashMap<(String, usize), f64>,
    /// node -> added ms.
    degraded: HashMap<usize, f64>,
}

/// A client partition's side: where the geo data puts it.
#[derive(Clone, Debug)]
pub struct Place {
    pub coords: Option<(f64, f64)>,
    pub isp: String,
    key: u64,
}

impl Place {
    pub fn of(location: &Location) -> Place {
        Place { coords: coordinates(location), isp: location.isp.clone(), key: partition_key(location) }
    }
}

impl Model {
    pub fn new(nodes: &[Node]) -> Model {
        let place = |n: &Node| Location::new(&n.country, &n.province, &n.city, &n.isp);
        Model {
            coords: nodes.iter().map(|n| coordinates(&place(n))).collect(),
            isp: nodes.iter().map(|n| n.isp.clone()).collect(),
            load_ms: nodes.iter().map(|n| FULL_LOAD_MS * (n.cpu_usage / 100.0).powi(2)).collect(),
            keys: nodes.iter().map(|n| node_key(&n.name)).collect(),
            congested: HashMap::new(),
            degraded: HashMap::new(),
        }
    }

    pub fn nodes(&self) -> usize {
        self.coords.len()
    }

    /// The true round trip from `place`'s clients to `node`, in ms.
    pub fn rtt(&self, place: &Place, node: usize) -> f64 {
        let km = match (place.coords, self.coords[node]) {
            (Some(a), Some(b)) => haversine_km(a, b),
            _ => UNKNOWN_KM,
        };
        let stretch = 1.2 + 0.6 * unit(place.key ^ self.keys[node].rotate_left(17));
        let interconnect = if place.isp == self.isp[node] { 0.0 } else { CROSS_CARRIER_MS };
        let events = self.congested.get(&(place.isp.clone(), node)).copied().unwrap_or(0.0)
            + self.degraded.get(&node).copied().unwrap_or(0.0);
        ACCESS_MS + km / 100.0 * stretch + interconnect + self.load_ms[node] + events
    }

    /// The lowest round trip any node offers `place` (the oracle's pick).
    pub fn optimum(&self, place: &Place) -> (usize, f64) {
        (0..self.nodes()).map(|n| (n, self.rtt(place, n))).min_by(|a, b| a.1.total_cmp(&b.1)).unwrap_or((0, f64::NAN))
    }

    /// `carrier`'s link to `node` congests by `ms`.
    pub fn congest(&mut self, carrier: &str, node: usize, ms: f64) {
        self.congested.insert((carrier.to_string(), node), ms);
    }

    /// `node` degrades by `ms` for every client.
    pub fn degrade(&mut self, node: usize, ms: f64) {
        self.degraded.insert(node, ms);
    }
}

/// A fixed draw in `0..1` from `key` (splitmix64's finaliser).
fn unit(key: u64) -> f64 {
    let mut z = key.wrapping_add(0x9e37_79b9_7f4a_7c15);
    z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    ((z ^ (z >> 31)) >> 11) as f64 / (1u64 << 53) as f64
}
