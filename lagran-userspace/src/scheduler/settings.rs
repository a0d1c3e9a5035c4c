//! The scheduler's settings (`[schedule]`): route TTLs, answers per query,
//! the recompute period, hysteresis and the optional stages of the engine,
//! which are on when their table is present.

use serde::Deserialize;

use crate::engine::{CapPolicy, DistancePolicy, Policy, SpillPolicy};
use crate::settings::{InvalidSetting, Key, KeyDefault};

/// Scheduling knobs (`[schedule]`).
#[derive(Clone, Debug, PartialEq, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct ScheduleSettings {
    /// Route TTL in the steady state (SCHEDULE_TTL).
    pub ttl: u32,
    /// Route TTL while a partition is served by a failover node (its best node is down).
    pub failover_ttl: u32,
    /// Route TTL of answers under a canary split.
    pub canary_ttl: u32,
    /// Addresses per answer: the primary plus backups (1–4).
    pub answers_per_query: u8,
    /// Seconds between full recomputes.
    pub recompute_secs: u64,
    /// Keep the current answer unless the new best beats it by this share (0 = off).
    pub hysteresis: f64,
    /// ... and by more than this many score points (an absolute threshold), so
    /// that a point or two of load jitter cannot flip the answer of a partition
    /// whose scores are small. Applies when `hysteresis` > 0.
    pub hysteresis_points: i64,
    /// Only nodes of the client's ISP, when at least one is eligible.
    pub isp_must_match: bool,
    /// `[schedule.caps]`: bandwidth / connection caps as penalties.
    pub caps: Option<CapPolicy>,
    /// `[schedule.distance]`: haversine distance penalty.
    pub distance: Option<DistancePolicy>,
    /// `[schedule.spill]`: overload spill to the next best same-ISP node.
    pub spill: Option<SpillPolicy>,
}

impl Default for ScheduleSettings {
    fn default() -> Self {
        ScheduleSettings {
            ttl: 30,
            failover_ttl: 10,
            canary_ttl: 20,
            answers_per_query: 1,
            recompute_secs: 30,
            hysteresis: 0.15,
            hysteresis_points: 20,
            isp_must_match: false,
            caps: None,
            distance: None,
            spill: None,
        }
    }
}

impl ScheduleSettings {
    /// The engine policy these settings ask for.
    pub fn policy(&self) -> Policy {
        Policy {
            caps: self.caps.clone(),
            distance: self.distance.clone(),
            isp_must_match: self.isp_must_match,
            spill: self.spill.clone(),
            ..Default::default()
        }
    }

    /// Checks each value's range.
    pub fn validate(&self) -> Result<(), InvalidSetting> {
        if !(1..=4).contains(&self.answers_per_query) {
            return Err(InvalidSetting::new(
                "schedule.answers_per_query",
                format!("{} is outside 1..=4", self.answers_per_query),
            ));
        }
        if !(0.0..=10.0).contains(&self.hysteresis) {
            return Err(InvalidSetting::new("schedule.hysteresis", "must be within 0..=10"));
        }
        if !(0..=1000).contains(&self.hysteresis_points) {
            return Err(InvalidSetting::new("schedule.hysteresis_points", "must be within 0..=1000"));
        }
        if self.recompute_secs == 0 {
            return Err(InvalidSetting::new("schedule.recompute_secs", "must be > 0"));
        }
        Ok(())
    }
}

/// The keys of `[schedule]` and its optional tables.
pub const SCHEDULE_KEYS: &[Key] = &[
    Key::toml("schedule.ttl", KeyDefault::Toml("30"), "60", "route TTL").env("SCHEDULE_TTL"),
    Key::toml(
        "schedule.answers_per_query",
        KeyDefault::Toml("1"),
        "2",
        "addresses per answer, 1–4 (primary + backups)",
    ),
    Key::toml("schedule.recompute_secs", KeyDefault::Toml("30"), "10", "periodic full recompute"),
    Key::toml("schedule.failover_ttl", KeyDefault::Toml("10"), "5", "route TTL while a partition's best node is down"),
    Key::toml("schedule.canary_ttl", KeyDefault::Toml("20"), "15", "route TTL of answers under a canary split"),
    Key::toml(
        "schedule.hysteresis",
        KeyDefault::Toml("0.15"),
        "0.3",
        "keep the current answer unless the new best is this much better (0 = off)",
    ),
    Key::toml(
        "schedule.hysteresis_points",
        KeyDefault::Toml("20"),
        "40",
        "… and more than this many score points better, so load jitter cannot flip small scores",
    ),
    Key::toml(
        "schedule.isp_must_match",
        KeyDefault::Toml("false"),
        "true",
        "only nodes of the client's ISP, when one is eligible",
    ),
    Key::toml(
        "schedule.caps.penalty",
        KeyDefault::Described("300 (caps are off without `[schedule.caps]`)"),
        "250",
        "bandwidth/connection caps as penalties, never a veto: the penalty at the cap",
    ),
    Key::toml(
        "schedule.caps.soft_ratio",
        KeyDefault::Described("0.8"),
        "0.7",
        "usage ratio from which the cap penalty ramps up",
    ),
    Key::toml(
        "schedule.distance.per_1000km",
        KeyDefault::Described("200 (off without `[schedule.distance]`)"),
        "60.0",
        "haversine distance penalty per 1000 km between node and client",
    ),
    Key::toml(
        "schedule.distance.max_penalty",
        KeyDefault::Described("4000"),
        "400",
        "upper bound of the distance penalty",
    ),
    Key::toml(
        "schedule.distance.same_continent",
        KeyDefault::Described("3"),
        "5",
        "bonus for a node on the client's continent in another country (stated as `same-continent`)",
    ),
    Key::toml(
        "schedule.spill.cpu_percent",
        KeyDefault::Described("90 (off without `[schedule.spill]`)"),
        "80.0",
        "an overloaded best node (CPU percent from here) gives way to the next node of the client's ISP",
    ),
    Key::toml("schedule.spill.cap_ratio", KeyDefault::Described("1.0"), "0.9", "… or cap usage ratio from here"),
];
