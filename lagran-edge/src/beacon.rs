//! What a browser's beacon may say, and what the edge makes of it.
//!
//! A beacon is `{"timings":[{"node":"gz-01","samples_ms":[31.5,30.9]}]}`: for each
//! node it timed (at most [`MAX_NODES`], each once), up to [`MAX_SAMPLES`] fetch
//! times in milliseconds. It names no subnet: the subnet is always the one the
//! beacon's own connection came from, so a field naming one (or anything else) is
//! refused. Every time must lie in `0 < ms ≤` [`MAX_RTT_MS`]; a node must be one the
//! control plane named as a candidate for that subnet. A node's samples are reduced to
//! their median, so one slow fetch (a cold DNS lookup, a stalled TLS handshake) in a
//! beacon does not count.

use std::time::Duration;

use serde::Deserialize;

use crate::control_api::Candidate;

pub const MAX_NODES: usize = 3;
pub const MAX_SAMPLES: usize = 5;
pub const MAX_RTT_MS: f64 = 10_000.0;
/// Larger request bodies are refused unread.
pub const MAX_BYTES: usize = 4096;

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Beacon {
    pub timings: Vec<Timing>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Timing {
    pub node: String,
    pub samples_ms: Vec<f64>,
}

/// Why a beacon was refused; the message names the field.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum BeaconError {
    #[error("the body is not a beacon: {0}")]
    Json(String),
    #[error("`timings`: {0}")]
    Timings(String),
    #[error("`timings[{index}].node`: {reason}")]
    Node { index: usize, reason: String },
    #[error("`timings[{index}].samples_ms`: {reason}")]
    Samples { index: usize, reason: String },
}

/// One node's time from a beacon.
#[derive(Debug, Clone, PartialEq)]
pub struct NodeRtt {
    pub node: String,
    pub rtt: Duration,
}

pub fn parse(body: &[u8]) -> Result<Beacon, BeaconError> {
    serde_json::from_slice(body).map_err(|e| BeaconError::Json(e.to_string()))
}

/// Checks `beacon` against the `candidates` of its subnet; the median time per node.
pub fn validate(beacon: Beacon, candidates: &[Candidate]) -> Result<Vec<NodeRtt>, BeaconError> {
    if beacon.timings.is_empty() || beacon.timings.len() > MAX_NODES {
        return Err(BeaconError::Timings(format!("1 to {MAX_NODES} nodes, got {}", beacon.timings.len())));
    }
    let mut out: Vec<NodeRtt> = Vec::with_capacity(beacon.timings.len());
    for (index, timing) in beacon.timings.into_iter().enumerate() {
        let node_error = |reason: String| BeaconError::Node { index, reason };
        if !candidates.iter().any(|c| c.node == timing.node) {
            return Err(node_error(format!("{:?} is not a candidate for this client", truncated(&timing.node))));
        }
        if out.iter().any(|r| r.node == timing.node) {
            return Err(node_error(format!("{} is timed twice", timing.node)));
        }
        let mut ms = timing.samples_ms;
        if ms.is_empty() || ms.len() > MAX_SAMPLES {
            return Err(BeaconError::Samples { index, reason: format!("1 to {MAX_SAMPLES} times, got {}", ms.len()) });
        }
        if let Some(bad) = ms.iter().find(|v| !(v.is_finite() && **v > 0.0 && **v <= MAX_RTT_MS)) {
            let reason = format!("{bad} is outside 0 < ms <= {MAX_RTT_MS}");
            return Err(BeaconError::Samples { index, reason });
        }
        ms.sort_unstable_by(f64::total_cmp);
        let median = ms[ms.len() / 2];
        out.push(NodeRtt { node: timing.node, rtt: Duration::from_secs_f64(median / 1000.0) });
    }
    Ok(out)
}

fn truncated(s: &str) -> &str {
    s.char_indices().nth(64).map_or(s, |(i, _)| &s[..i])
}

#[cfg(test)]
mod tests {
    use super::*;

    fn candidates() -> Vec<Candidate> {
        ["gz-01", "sh-01"].map(|n| Candidate { node: n.into(), hostname: format!("{n}.cdn.test") }).to_vec()
    }

    fn check(body: &str) -> Result<Vec<NodeRtt>, BeaconError> {
        validate(parse(body.as_bytes())?, &candidates())
    }

    #[test]
    fn a_good_beacon_gives_each_node_its_median() {
        let got =
            check(r#"{"timings":[{"node":"gz-01","samples_ms":[30,900,31]},{"node":"sh-01","samples_ms":[55.5]}]}"#)
                .unwrap();
        assert_eq!(got[0], NodeRtt { node: "gz-01".into(), rtt: Duration::from_millis(31) }, "900 ms is trimmed");
        assert_eq!(got[1].rtt, Duration::from_micros(55_500));
    }

    #[test]
    fn a_beacon_naming_its_subnet_is_refused() {
        let e = check(r#"{"client_subnet":"58.60.0.0/24","timings":[{"node":"gz-01","samples_ms":[30]}]}"#);
        assert!(matches!(&e, Err(BeaconError::Json(m)) if m.contains("client_subnet")), "{e:?}");
        let e = check(r#"{"timings":[{"node":"gz-01","samples_ms":[30],"client_subnet":"1.2.3.0/24"}]}"#);
        assert!(matches!(e, Err(BeaconError::Json(_))), "{e:?}");
    }

    #[test]
    fn out_of_range_times_are_refused() {
        for bad in ["0", "-1", "10000.5", "1e9"] {
            let e = check(&format!(r#"{{"timings":[{{"node":"gz-01","samples_ms":[30,{bad}]}}]}}"#)).unwrap_err();
            assert!(matches!(e, BeaconError::Samples { index: 0, .. }), "{bad}: {e}");
        }
        assert!(check(r#"{"timings":[{"node":"gz-01","samples_ms":[10000]}]}"#).is_ok(), "10 s is the upper bound");
        let e = check(r#"{"timings":[{"node":"gz-01","samples_ms":[]}]}"#).unwrap_err();
        assert!(e.to_string().contains("timings[0].samples_ms"), "{e}");
        let e = check(r#"{"timings":[{"node":"gz-01","samples_ms":[1,2,3,4,5,6]}]}"#).unwrap_err();
        assert!(e.to_string().contains("1 to 5"), "{e}");
    }

    #[test]
    fn only_candidates_once_each_and_at_most_three() {
        let e = check(r#"{"timings":[{"node":"bj-09","samples_ms":[30]}]}"#).unwrap_err();
        assert_eq!(e.to_string(), "`timings[0].node`: \"bj-09\" is not a candidate for this client");
        let e = check(r#"{"timings":[{"node":"gz-01","samples_ms":[30]},{"node":"gz-01","samples_ms":[1]}]}"#);
        assert!(matches!(e, Err(BeaconError::Node { index: 1, .. })), "{e:?}");
        let four = r#"{"node":"gz-01","samples_ms":[1]}"#;
        let e = check(&format!(r#"{{"timings":[{four},{four},{four},{four}]}}"#)).unwrap_err();
        assert!(matches!(e, BeaconError::Timings(_)), "{e}");
        assert!(matches!(check(r#"{"timings":[]}"#), Err(BeaconError::Timings(_))));
        assert!(matches!(check("not json"), Err(BeaconError::Json(_))));
    }
}
