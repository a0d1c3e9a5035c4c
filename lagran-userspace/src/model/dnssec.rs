//! A zone's DNSSEC policy: whether it is signed, with which algorithm, for
//! how long each signature is valid and when it is renewed, and how missing
//! names and types are proven (NSEC or NSEC3, with its parameters).

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

/// How missing names and types are proven (RFC 4035 §3.1.3). NSEC by
/// default: the names of a CDN zone are public (they are what clients ask
/// for), so the zone walking NSEC3 hides against gains nothing, and an NSEC
/// chain needs no hashing on the NS hosts. NSEC3 (RFC 5155) for operators
/// whose policy or registry asks for it.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Denial {
    #[default]
    Nsec,
    Nsec3,
}

impl Denial {
    pub fn parse(s: &str) -> Option<Denial> {
        match s.trim().to_ascii_lowercase().as_str() {
            "nsec" => Some(Denial::Nsec),
            "nsec3" => Some(Denial::Nsec3),
            _ => None,
        }
    }
}

/// The most additional NSEC3 hash iterations a zone may ask for. RFC 9276
/// §3.1: "the number of additional iterations ... SHOULD be 0"; §3.2 lets a
/// validator treat any count above 0 as insecure, and validators do so above
/// a limit of their own (Unbound: 150), which would silently unsign the
/// zone's denials. 50 stays well below those limits.
pub const MAX_NSEC3_ITERATIONS: u16 = 50;

/// The longest NSEC3 salt: its length is one octet on the wire (RFC 5155
/// §3.2).
pub const MAX_NSEC3_SALT_OCTETS: usize = 255;

/// An NSEC3 salt, hex in JSON (`""` for none, as RFC 9276 §3.1 advises:
/// "Operators SHOULD NOT use a salt").
#[derive(Clone, Debug, Default, PartialEq, Eq, Hash)]
pub struct Nsec3Salt(pub Vec<u8>);

impl Nsec3Salt {
    /// The salt from hex digits (`""` or `"-"`: no salt), at most
    /// [`MAX_NSEC3_SALT_OCTETS`] octets.
    pub fn parse(hex_digits: &str) -> Result<Nsec3Salt, String> {
        let digits = hex_digits.trim();
        if digits.is_empty() || digits == "-" {
            return Ok(Nsec3Salt::default());
        }
        let salt = hex::decode(digits).map_err(|e| format!("{hex_digits:?} is not hex: {e}"))?;
        if salt.len() > MAX_NSEC3_SALT_OCTETS {
            return Err(format!("{} octets, more than the {MAX_NSEC3_SALT_OCTETS} an NSEC3 salt can hold", salt.len()));
        }
        Ok(Nsec3Salt(salt))
    }
}

impl Serialize for Nsec3Salt {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(&hex::encode(&self.0))
    }
}

impl<'de> Deserialize<'de> for Nsec3Salt {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let digits = String::deserialize(d)?;
        Nsec3Salt::parse(&digits).map_err(serde::de::Error::custom)
    }
}

/// A signed zone's policy (`None` on [`super::Zone`]: the zone is unsigned).
#[derive(Clone, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
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
    /// Additional NSEC3 hash iterations (with [`Denial::Nsec3`]).
    #[serde(default)]
    pub nsec3_iterations: u16,
    /// The NSEC3 salt (with [`Denial::Nsec3`]).
    #[serde(default)]
    pub nsec3_salt: Nsec3Salt,
    /// A ZSK is rolled (pre-publication) this long after it started
    /// signing; 0: never by itself.
    #[serde(default = "default_zsk_lifetime")]
    pub zsk_lifetime_secs: u32,
    /// A KSK is rolled (double signature) this long after it started
    /// signing; 0: never by itself.
    #[serde(default = "default_ksk_lifetime")]
    pub ksk_lifetime_secs: u32,
    /// How long the parent takes to act on a changed CDS/CDNSKEY RRset, plus
    /// the TTL of its DS RRset: an old KSK leaves only this long after the
    /// new one's DS could be seen.
    #[serde(default = "default_ds_wait")]
    pub ds_wait_secs: u32,
    /// How long a changed table takes to reach every NS host and the
    /// secondaries, if any (RFC 7583 Dprp).
    #[serde(default = "default_propagation")]
    pub propagation_secs: u32,
}

/// A ZSK signs for thirty days.
pub const DEFAULT_ZSK_LIFETIME_SECS: u32 = 30 * 86_400;
/// A KSK signs for a year.
pub const DEFAULT_KSK_LIFETIME_SECS: u32 = 365 * 86_400;
/// Two days for the parent to pick up a CDS change and its DS TTL to pass.
pub const DEFAULT_DS_WAIT_SECS: u32 = 2 * 86_400;
/// A zone whose signing is turned off serves the CDS/CDNSKEY DELETE records
/// this long (two days: a parent scanning daily, then its DS TTL).
pub const DEFAULT_DELETE_WAIT_SECS: u32 = 2 * 86_400;
/// Tables reach the NS hosts in seconds; five minutes leaves room.
pub const DEFAULT_PROPAGATION_SECS: u32 = 300;

fn default_zsk_lifetime() -> u32 {
    DEFAULT_ZSK_LIFETIME_SECS
}

fn default_ksk_lifetime() -> u32 {
    DEFAULT_KSK_LIFETIME_SECS
}

fn default_ds_wait() -> u32 {
    DEFAULT_DS_WAIT_SECS
}

fn default_propagation() -> u32 {
    DEFAULT_PROPAGATION_SECS
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
            nsec3_iterations: 0,
            nsec3_salt: Nsec3Salt::default(),
            zsk_lifetime_secs: DEFAULT_ZSK_LIFETIME_SECS,
            ksk_lifetime_secs: DEFAULT_KSK_LIFETIME_SECS,
            ds_wait_secs: DEFAULT_DS_WAIT_SECS,
            propagation_secs: DEFAULT_PROPAGATION_SECS,
        }
    }
}

impl ZoneDnssec {
    /// Why this policy cannot be used, if it cannot: a signature must be
    /// renewed before it expires, with at least an hour between the two, and
    /// NSEC3 iterate at most [`MAX_NSEC3_ITERATIONS`] times.
    pub fn check(&self) -> Result<(), String> {
        if self.nsec3_iterations > MAX_NSEC3_ITERATIONS {
            return Err(format!(
                "nsec3_iterations {} is above {MAX_NSEC3_ITERATIONS}: validators would treat the denials as insecure \
                 (RFC 9276 advises 0)",
                self.nsec3_iterations
            ));
        }
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

/// What a key signs (RFC 6781 §3.1): the KSK signs the DNSKEY RRset and is
/// what the parent's DS names; the ZSK signs every other RRset.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum KeyRole {
    Ksk,
    Zsk,
}

impl KeyRole {
    pub fn as_str(self) -> &'static str {
        match self {
            KeyRole::Ksk => "ksk",
            KeyRole::Zsk => "zsk",
        }
    }

    pub fn parse(s: &str) -> Option<KeyRole> {
        match s.trim().to_ascii_lowercase().as_str() {
            "ksk" => Some(KeyRole::Ksk),
            "zsk" => Some(KeyRole::Zsk),
            _ => None,
        }
    }

    /// DNSKEY flags (RFC 4034 §2.1.1): Zone Key, plus Secure Entry Point for a KSK.
    pub fn flags(self) -> u16 {
        match self {
            KeyRole::Ksk => 257,
            KeyRole::Zsk => 256,
        }
    }
}

/// Where a key is in its life, in the terms of RFC 7583 §3.1 (a subset,
/// plus `withdrawing` for a zone whose signing is being turned off).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum KeyState {
    /// Made, kept in the database, not served yet (a rollover asked for by
    /// hand waits here for the leader's next table).
    Generated,
    /// In the DNSKEY RRset. A ZSK does not sign yet; a KSK signs the DNSKEY
    /// RRset beside the active one (double signature) and is listed in
    /// CDS/CDNSKEY so the parent adds its DS.
    Published,
    /// Signs: a ZSK every RRset, a KSK the DNSKEY, CDS and CDNSKEY RRsets.
    Active,
    /// A ZSK that no longer signs, left in the DNSKEY RRset until the
    /// signatures it made have left every cache.
    Retired,
    /// The zone's signing is turned off: the key still signs, and the apex
    /// publishes the CDS/CDNSKEY DELETE records until the parent had time to
    /// remove the DS.
    Withdrawing,
    /// Not served any more; the row stays for the record.
    Removed,
}

impl KeyState {
    pub fn as_str(self) -> &'static str {
        match self {
            KeyState::Generated => "generated",
            KeyState::Published => "published",
            KeyState::Active => "active",
            KeyState::Retired => "retired",
            KeyState::Withdrawing => "withdrawing",
            KeyState::Removed => "removed",
        }
    }

    pub fn parse(s: &str) -> Option<KeyState> {
        [
            KeyState::Generated,
            KeyState::Published,
            KeyState::Active,
            KeyState::Retired,
            KeyState::Withdrawing,
            KeyState::Removed,
        ]
        .into_iter()
        .find(|k| k.as_str() == s)
    }

    /// Whether the key is in the DNSKEY RRset served.
    pub fn served(self) -> bool {
        matches!(self, KeyState::Published | KeyState::Active | KeyState::Retired | KeyState::Withdrawing)
    }
}
