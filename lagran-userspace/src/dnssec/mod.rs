//! DNSSEC on the control plane: each signed zone's keys, the signing of
//! every RRset the NS hosts can answer, and the NSEC or NSEC3 chain that
//! proves what does not exist — all made when a route table is built and carried in it
//! ([`crate::zone_signatures`]), so the NS hosts answer signed without any
//! private key.
//!
//! - `keys`: one zone key (KSK or ZSK), its DNSKEY, key tag and DS;
//! - `sealing`: the operator's key file, sealing the keys in the database;
//! - `key_store`: the key directory of earlier versions, imported once;
//! - `rollover`: when each key moves to its next state (RFC 7583 timings);
//! - `keeper`: the keys in the database, moved along on the leader;
//! - `signer`: signing one RRset, keeping signatures until they near expiry;
//! - `denial`: the names and types of a zone, and its NSEC chain;
//! - `nsec3`: its NSEC3 chain, when the zone asks for NSEC3;
//! - `zone_signer`: a whole table, zone by zone.
//!
//! Keys are ECDSA P-256 (algorithm 13) unless a zone asks for Ed25519
//! (algorithm 15); hickory-proto makes the records and the data to sign, and
//! ring (through it) the signatures. Keys roll over on timers, ZSKs by
//! pre-publication and KSKs by double signature ([`rollover`]).

pub mod denial;
pub mod keeper;
pub mod key_store;
pub mod keys;
pub mod metrics;
pub mod nsec3;
pub mod rollover;
pub mod sealing;
pub mod signer;
pub mod zone_signer;

#[cfg(test)]
mod keeper_tests;
#[cfg(test)]
mod nsec3_tests;
#[cfg(test)]
mod rollover_tests;
#[cfg(test)]
mod tests;

pub use keeper::{KeyKeeper, KeySnapshot, ZonesView};
pub use key_store::KeyDirectory;
pub use keys::{KeyError, KeyRole, ZoneKey, ZoneKeys};
pub use zone_signer::TableSigner;

pub use crate::model::DEFAULT_DELETE_WAIT_SECS;

/// Signing on a control process: the keys and the table signer.
pub struct Signing {
    pub keeper: KeyKeeper,
    pub signer: std::sync::Arc<std::sync::Mutex<TableSigner>>,
}

impl Signing {
    pub fn new(keeper: KeyKeeper) -> Self {
        Signing { keeper, signer: std::sync::Arc::new(std::sync::Mutex::new(TableSigner::new())) }
    }
}
