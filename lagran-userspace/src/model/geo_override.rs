//! Geo overrides: operator corrections, CIDR → geo tuple, for blocks the geo file
//! places wrongly; they win over the geo database file.

use ipnet::IpNet;
use serde::{Deserialize, Serialize};

/// One override. Empty tuple fields mean "unknown", as in the geo database.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct GeoOverride {
    /// Without host bits (`1.2.3.0/24`).
    pub prefix: IpNet,
    #[serde(default)]
    pub country: String,
    #[serde(default)]
    pub province: String,
    #[serde(default)]
    pub city: String,
    #[serde(default)]
    pub isp: String,
    #[serde(default)]
    pub note: String,
    /// Who made it (operator name or token label), for the audit trail.
    #[serde(default)]
    pub created_by: String,
    /// Set by the store when the override is first written; ignored on input.
    #[serde(default)]
    pub created_at_ms: i64,
}
