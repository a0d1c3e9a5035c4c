//! The latency policy's settings (`[steering]`).

use serde::Deserialize;

use super::policy::Band;
use crate::settings::{InvalidSetting, Key, KeyDefault};

/// `[steering]`.
#[derive(Clone, Debug, PartialEq, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct SteeringSettings {
    /// How long a report counts, in seconds.
    pub window_secs: u64,
    /// Fresh samples a node needs before its RTT decides.
    pub min_samples: u32,
    /// The stabilize band: a partition stays on its node while that node is
    /// within `max(stabilize_ms, stabilize_ratio × best)` of the best.
    pub stabilize_ms: f64,
    pub stabilize_ratio: f64,
}

impl Default for SteeringSettings {
    fn default() -> Self {
        SteeringSettings { window_secs: 300, min_samples: 10, stabilize_ms: 10.0, stabilize_ratio: 0.1 }
    }
}

impl SteeringSettings {
    pub fn window_ms(&self) -> i64 {
        (self.window_secs as i64).saturating_mul(1_000)
    }

    pub fn band(&self) -> Band {
        Band { min_samples: self.min_samples, stabilize_ms: self.stabilize_ms, stabilize_ratio: self.stabilize_ratio }
    }

    /// Checks each value's range.
    pub fn validate(&self) -> Result<(), InvalidSetting> {
        if !(1..=86_400).contains(&self.window_secs) {
            return Err(InvalidSetting::new("steering.window_secs", "must be within 1..=86400"));
        }
        if !(0.0..=10_000.0).contains(&self.stabilize_ms) {
            return Err(InvalidSetting::new("steering.stabilize_ms", "must be within 0..=10000"));
        }
        if !(0.0..=10.0).contains(&self.stabilize_ratio) {
            return Err(InvalidSetting::new("steering.stabilize_ratio", "must be within 0..=10"));
        }
        Ok(())
    }
}

/// The keys of `[steering]`.
pub const STEERING_KEYS: &[Key] = &[
    Key::toml(
        "steering.window_secs",
        KeyDefault::Toml("300"),
        "120",
        "how long an RTT report counts for names with `steering: \"latency\"`",
    ),
    Key::toml(
        "steering.min_samples",
        KeyDefault::Toml("10"),
        "20",
        "fresh samples a node needs in a partition before its RTT decides",
    ),
    Key::toml(
        "steering.stabilize_ms",
        KeyDefault::Toml("10"),
        "5.0",
        "a partition stays on its node while it is within max(stabilize_ms, stabilize_ratio × best) of the best",
    ),
    Key::toml("steering.stabilize_ratio", KeyDefault::Toml("0.1"), "0.2", "… the band's share of the best RTT"),
];
