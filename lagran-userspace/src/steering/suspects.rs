//! Geo data checked against what clients measure: the partitions whose
//! measurements contradict where the geo data puts them.
//!
//! A partition is a suspect when its measured-best node sits more than
//! [`FAR_KM`] from the place the geo data gives its clients, and every
//! measured node nearer to that place is slower than the best by more than
//! the stabilize band: the nodes next to the located place are slow, one far
//! away is fast, so the clients are probably near the far one. The
//! suggestion is an override putting the partition's prefixes at the best
//! node's place, keeping their carrier.

use serde::Serialize;

use super::LatencyView;
use super::policy::Band;
use crate::location::Location;
use crate::location::coords::{coordinates, haversine_km};

/// How far from the located place the measured-best node must sit.
pub const FAR_KM: f64 = 1_000.0;

/// Measured nodes listed as evidence.
pub const EVIDENCE: usize = 5;

/// A place, as the API shows it.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize)]
pub struct Place {
    pub country: String,
    pub province: String,
    pub city: String,
    pub isp: String,
}

impl From<&Location> for Place {
    fn from(l: &Location) -> Place {
        Place { country: l.country.clone(), province: l.province.clone(), city: l.city.clone(), isp: l.isp.clone() }
    }
}

/// One measured node: where it is, its RTT to the partition, how far it
/// sits from the located place.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct Measured {
    pub node: String,
    pub place: Place,
    pub rtt_ms: f64,
    pub samples: u32,
    pub distance_km: f64,
}

/// A partition whose measurements contradict its location.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct Suspect {
    /// Stable across geo reloads: the partition's location hashed.
    pub id: String,
    /// Where the geo data puts the clients.
    pub located: Place,
    /// The measured-best node's distance from there.
    pub distance_km: f64,
    /// The measured nodes, fastest first.
    pub measured: Vec<Measured>,
    /// The override suggested for the partition's prefixes.
    pub suggested: Place,
}

/// The id of the partition at `location`.
pub fn id_of(location: &Location) -> String {
    format!("{:016x}", super::strategy::partition_key(location))
}

/// Every suspect of `view`, `nodes` giving each node's place; sorted by id.
pub fn find(view: &LatencyView, nodes: &[(String, Location)], band: &Band) -> Vec<Suspect> {
    let mut out: Vec<Suspect> = view.rows.keys().filter_map(|l| suspect(view, l, nodes, band)).collect();
    out.sort_by(|a, b| a.id.cmp(&b.id));
    out
}

fn suspect(view: &LatencyView, location: &Location, nodes: &[(String, Location)], band: &Band) -> Option<Suspect> {
    let here = coordinates(location)?;
    let measured: Vec<Measured> = view
        .rows
        .get(location)?
        .iter()
        .filter(|m| m.samples >= band.min_samples)
        .filter_map(|m| {
            let (_, place) = nodes.iter().find(|(n, _)| **n == *m.node)?;
            let distance_km = haversine_km(here, coordinates(place)?);
            Some(Measured {
                node: m.node.to_string(),
                place: place.into(),
                rtt_ms: m.rtt_ms,
                samples: m.samples,
                distance_km,
            })
        })
        .collect();
    let best = measured.iter().min_by(|a, b| a.rtt_ms.total_cmp(&b.rtt_ms))?;
    if best.distance_km <= FAR_KM {
        return None;
    }
    let slack = band.stabilize_ms.max(band.stabilize_ratio * best.rtt_ms);
    let nearer: Vec<&Measured> = measured.iter().filter(|m| m.distance_km < best.distance_km).collect();
    if nearer.is_empty() || nearer.iter().any(|m| m.rtt_ms - best.rtt_ms <= slack) {
        return None;
    }
    let suggested = Place { isp: location.isp.clone(), ..best.place.clone() };
    let distance_km = best.distance_km;
    let mut evidence = measured.clone();
    evidence.sort_by(|a, b| a.rtt_ms.total_cmp(&b.rtt_ms).then_with(|| a.node.cmp(&b.node)));
    evidence.truncate(EVIDENCE);
    Some(Suspect { id: id_of(location), located: location.into(), distance_km, measured: evidence, suggested })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::steering::matrix::NodeRtt;

    const BAND: Band = Band { min_samples: 10, stabilize_ms: 10.0, stabilize_ratio: 0.1 };

    fn nodes() -> Vec<(String, Location)> {
        vec![
            ("bj".into(), Location::new("CN", "北京", "北京", "电信")),
            ("gz".into(), Location::new("CN", "广东", "广州", "电信")),
            ("sz".into(), Location::new("CN", "广东", "深圳", "电信")),
        ]
    }

    fn view(location: &Location, rtts: &[(&str, f64, u32)]) -> LatencyView {
        let row = rtts.iter().map(|&(n, rtt_ms, samples)| NodeRtt { node: n.into(), rtt_ms, samples }).collect();
        LatencyView { rows: [(std::sync::Arc::new(location.clone()), row)].into(), settings: Default::default() }
    }

    #[test]
    fn clients_located_far_from_their_fastest_node_are_suspects() {
        // Located in Beijing, yet the Beijing node is slow and Guangzhou's fast.
        let bj = Location::new("CN", "北京", "北京", "电信");
        let s = find(&view(&bj, &[("bj", 48.0, 30), ("gz", 6.0, 30), ("sz", 9.0, 12)]), &nodes(), &BAND);
        assert_eq!(s.len(), 1);
        let s = &s[0];
        assert_eq!(s.id, id_of(&bj));
        assert_eq!(
            s.suggested,
            Place { country: "CN".into(), province: "广东".into(), city: "广州".into(), isp: "电信".into() }
        );
        assert!((1_800.0..2_000.0).contains(&s.distance_km), "{}", s.distance_km);
        let names: Vec<&str> = s.measured.iter().map(|m| m.node.as_str()).collect();
        assert_eq!(names, ["gz", "sz", "bj"]);
        assert!(s.measured[2].distance_km < 1.0, "the Beijing node sits at the located place");
    }

    #[test]
    fn consistent_or_thin_measurements_are_not() {
        let bj = Location::new("CN", "北京", "北京", "电信");
        // The nearest node is the fastest.
        assert!(find(&view(&bj, &[("bj", 5.0, 30), ("gz", 40.0, 30)]), &nodes(), &BAND).is_empty());
        // Far is fastest, but the near one is within the band.
        assert!(find(&view(&bj, &[("bj", 14.0, 30), ("gz", 6.0, 30)]), &nodes(), &BAND).is_empty());
        // Too few samples to say.
        assert!(find(&view(&bj, &[("bj", 48.0, 30), ("gz", 6.0, 9)]), &nodes(), &BAND).is_empty());
        // Nothing measured nearer than the best: no contradiction.
        assert!(find(&view(&bj, &[("gz", 6.0, 30)]), &nodes(), &BAND).is_empty());
    }
}
