//! Scheduling rules: manual pins and canary splits (e.g. 5 % of a region's traffic
//! to a new node), which the automatic scoring does not swallow.
//!
//! Priority between kinds is manual > canary > automatic; among rules of one
//! kind, higher `priority` first, then lower `id`. Every filter that is `null`
//! matches everything. Expired rules are ignored by the scheduler.

use ipnet::IpNet;
use serde::{Deserialize, Serialize};

/// What a rule does.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum RuleKind {
    /// Pin every matching client to `node`.
    Manual,
    /// Send `percent` % of the matching client subnets to `node`.
    Canary,
}

impl RuleKind {
    pub fn as_str(self) -> &'static str {
        match self {
            RuleKind::Manual => "manual",
            RuleKind::Canary => "canary",
        }
    }

    pub fn parse(s: &str) -> Option<Self> {
        match s {
            "manual" => Some(RuleKind::Manual),
            "canary" => Some(RuleKind::Canary),
            _ => None,
        }
    }
}

/// A stored rule.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Rule {
    pub id: i64,
    pub kind: RuleKind,
    /// The scheduled name it applies to; `None` = every domain.
    pub domain: Option<String>,
    pub country: Option<String>,
    pub province: Option<String>,
    pub city: Option<String>,
    pub isp: Option<String>,
    /// Client prefix it applies to; `None` = every client.
    pub prefix: Option<IpNet>,
    pub node: String,
    /// Share of the matching client subnets sent to `node`: 100 for manual rules.
    pub percent: u8,
    pub priority: i64,
    /// Unix milliseconds after which the rule no longer applies; `None` = never.
    pub expires_at_ms: Option<i64>,
    pub note: String,
    pub created_at_ms: i64,
}

impl Rule {
    /// Whether the rule still applies at `now_ms`.
    pub fn is_active(&self, now_ms: i64) -> bool {
        self.expires_at_ms.is_none_or(|t| t > now_ms)
    }
}
