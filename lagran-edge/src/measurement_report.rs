//! The measurement reporter: every heartbeat interval, the RTTs gathered since the
//! last report — the edge's own connections per client subnet (source `edge`) and
//! the accepted browser beacons per subnet and node (source `rum`) — go to the
//! control plane in one `POST /api/v1/measurements`.
//!
//! A report carries at most [`MAX_EDGE_SUBNETS`] edge entries and [`MAX_RUM_ENTRIES`]
//! RUM entries, the most-sampled first (3 000 in all, under the API's 10 000); the
//! rest of that interval is dropped. A report that fails is logged and not resent:
//! the next interval brings fresh samples, and memory stays bounded.

use std::sync::Arc;
use std::time::Duration;

use tokio_util::sync::CancellationToken;
use tracing::{debug, info, warn};

use crate::client_subnet::ClientSubnet;
use crate::control_api::{ControlApi, Measurement};
use crate::measured_conn::SubnetRtts;
use crate::rtt::RttEntry;
use crate::rum::RumRtts;

pub const MAX_EDGE_SUBNETS: usize = 2_000;
pub const MAX_RUM_ENTRIES: usize = 1_000;

/// Milliseconds with microsecond precision.
fn millis(d: Duration) -> f64 {
    (d.as_micros() as f64) / 1000.0
}

/// The report for this interval's entries (the caller bounds them).
pub fn report(
    node: &str,
    edge: Vec<RttEntry<ClientSubnet>>,
    rum: Vec<RttEntry<(ClientSubnet, String)>>,
) -> Vec<Measurement> {
    let edge = edge.into_iter().map(|e| Measurement {
        client_subnet: e.key.to_string(),
        node: node.to_owned(),
        rtt_ms: millis(e.median),
        samples: e.samples,
        source: "edge",
    });
    let rum = rum.into_iter().map(|e| Measurement {
        client_subnet: e.key.0.to_string(),
        node: e.key.1,
        rtt_ms: millis(e.median),
        samples: e.samples,
        source: "rum",
    });
    edge.chain(rum).collect()
}

/// What a report reads: the edge's table (none when `report_rtt` is off) and the beacons'.
pub struct Sources {
    pub edge: Option<Arc<SubnetRtts>>,
    pub rum: Arc<RumRtts>,
}

impl Sources {
    /// Takes this interval's entries out, bounded.
    pub fn take(&self, node: &str) -> Vec<Measurement> {
        let edge = self.edge.as_ref().map(|t| t.drain(MAX_EDGE_SUBNETS)).unwrap_or_default();
        report(node, edge, self.rum.drain(MAX_RUM_ENTRIES))
    }
}

/// Reports every `interval` until `shutdown`.
pub async fn run(api: Arc<ControlApi>, sources: Sources, interval: Duration, shutdown: CancellationToken) {
    info!(interval = ?interval, edge = sources.edge.is_some(), "measurement reporter started");
    loop {
        tokio::select! {
            () = shutdown.cancelled() => break,
            () = tokio::time::sleep(interval) => {}
        }
        let batch = sources.take(&api.node);
        if batch.is_empty() {
            continue;
        }
        match api.post_measurements(&batch).await {
            Ok(()) => debug!(entries = batch.len(), "measurements reported"),
            Err(e) => {
                warn!(entries = batch.len(), error = %crate::error_chain(&e), "measurements report failed; dropped")
            }
        }
    }
    info!("measurement reporter stopped");
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::rtt::RttTable;

    #[test]
    fn a_report_is_bounded_busiest_first_and_names_its_sources() {
        let edge = Arc::new(SubnetRtts::new(10_000));
        for i in 0..5_000u32 {
            let ip = std::net::IpAddr::from((0x0a00_0000u32 + (i << 8)).to_be_bytes());
            for _ in 0..(1 + u32::from(i == 4_321) * 9) {
                edge.record(&ClientSubnet::of(ip), Duration::from_micros(1_500));
            }
        }
        let rum = Arc::new(RttTable::new(10));
        rum.record(&(ClientSubnet::of("58.60.1.7".parse().unwrap()), "sh-01".to_owned()), Duration::from_millis(42));
        let sources = Sources { edge: Some(edge.clone()), rum };
        let got = sources.take("gz-01");
        assert_eq!(got.len(), MAX_EDGE_SUBNETS + 1);
        let busiest = &got[0];
        assert_eq!(
            (busiest.client_subnet.as_str(), busiest.node.as_str(), busiest.samples, busiest.source),
            ("10.16.225.0/24", "gz-01", 10, "edge"),
            "the busiest subnet leads"
        );
        assert!((busiest.rtt_ms - 1.5).abs() < 1e-9);
        let last = got.last().unwrap();
        assert_eq!((last.client_subnet.as_str(), last.node.as_str(), last.source), ("58.60.1.0/24", "sh-01", "rum"));
        assert!(edge.is_empty(), "the rest of the interval is dropped, not carried over");
        assert!(sources.take("gz-01").is_empty());
        let json = serde_json::to_value(&got[0]).unwrap();
        assert_eq!(
            json,
            serde_json::json!({"client_subnet":"10.16.225.0/24","node":"gz-01","rtt_ms":1.5,"samples":10,"source":"edge"})
        );
    }
}
