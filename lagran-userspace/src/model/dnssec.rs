//! A zone's DNSSEC policy: whether it is signed, with which algorithm, for
//! how long each signature is valid and when it is renewed.

use serde::{Deserialize, Serialize};

/// Signature validity: three weeks.
pub const DEFAULT_VALIDITY_SECS: u32 = 21 * 86_400;
/// Renew a signature when fewer than ten days of it remain: the control plane
/// may be down for ten days (a week-long outage and then some) before any
/// answer's signature expires, and each RRset is re-signed once every eleven
/// days.
pub const DEFAULT_REFRESH_SECS: u32 = 10 * 86_400;

/// The signing algorithm of a zone's keys (RFC 8624 §3.1: both are
/// "RECOMMENDED" for signing).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum DnssecAlgorithm {
    /// ECDSA P-256 with SHA-256, algorithm 13.
    #[default]
    Ecdsap256sha256,
    /// Ed25519, algorithm 15.
    Ed25519,
}

impl DnssecAlgorithm {
    /// The algorithm's number in DNSKEY, RRSIG and DS records.
    pub fn number(self) -> u8 {
        match self {
            DnssecAlgorithm::Ecdsap256sha256 => 13,
            DnssecAlgorithm::Ed25519 => 15,
        }
    }

    pub fn parse(s: &str) -> Option<Self> {
        match s.trim().to_ascii_lowercase().as_str() {
            "ecdsap256sha256" | "13" => Some(DnssecAlgorithm::Ecdsap256sha256),
            "ed25519" | "15" => Some(DnssecAlgorithm::Ed25519),
            _ => None,
        }
    }
}

/// How missing names and types are proven (RFC 4035 §3.1.3). Only NSEC: the
/// names of a CDN zone are public (they are what clients ask for), so the
/// zone walking NSEC3 hides against gains nothing, and a precomputed NSEC
/// chain needs no hashing and no online key.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Denial {
    #[default]
    Nsec,
}

/// A signed zone's policy (`None` on [`super::Zone`]: the zone is unsigned).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct ZoneDnssec {
    #[serde(default)]
    pub algorithm: DnssecAlgorithm,
    /// How long a new signature is valid.
    #[serde(default = "default_validity")]
    pub validity_secs: u32,
    /// A signature with fewer seconds than this left is made anew.
    #[serde(default = "default_refresh")]
    pub refresh_secs: u32,
    #[serde(default)]
    pub denial: Denial,
}

fn default_validity() -> u32 {
    DEFAULT_VALIDITY_SECS
}

fn default_refresh() -> u32 {
    DEFAULT_REFRESH_SECS
}

impl Default for ZoneDnssec {
    fn default() -> Self {
        ZoneDnssec {
            algorithm: DnssecAlgorithm::default(),
            validity_secs: DEFAULT_VALIDITY_SECS,
            refresh_secs: DEFAULT_REFRESH_SECS,
            denial: Denial::Nsec,
        }
    }
}

impl ZoneDnssec {
    /// Why this policy cannot be used, if it cannot: a signature must be
    /// renewed before it expires, with at least an hour between the two.
    pub fn check(&self) -> Result<(), String> {
        if self.validity_secs < 2 * 3600 {
            return Err(format!("validity_secs {} is below two hours", self.validity_secs));
        }
        if self.refresh_secs < 3600 || self.refresh_secs > self.validity_secs - 3600 {
            return Err(format!(
                "refresh_secs {} must be at least an hour and an hour below validity_secs {}",
                self.refresh_secs, self.validity_secs
            ));
        }
        Ok(())
    }
}
