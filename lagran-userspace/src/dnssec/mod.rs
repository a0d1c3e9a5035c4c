//! DNSSEC on the control plane: each signed zone's keys, the signing of
//! every RRset the NS hosts can answer, and the NSEC chain that proves what
//! does not exist — all made when a route table is built and carried in it
//! ([`crate::zone_signatures`]), so the NS hosts answer signed without any
//! private key.
//!
//! - `keys`: one zone key (KSK or ZSK), its DNSKEY, key tag and DS;
//! - `key_store`: the directory of key files (why files, not the database:
//!   see there);
//! - `signer`: signing one RRset, keeping signatures until they near expiry;
//! - `denial`: the NSEC chain;
//! - `zone_signer`: a whole table, zone by zone.
//!
//! Keys are ECDSA P-256 (algorithm 13) unless a zone asks for Ed25519
//! (algorithm 15); hickory-proto makes the records and the data to sign, and
//! ring (through it) the signatures. Key rollover is not automatic: both keys
//! of a zone stay active until they are replaced by hand.

pub mod denial;
pub mod key_store;
pub mod keys;
pub mod signer;
pub mod zone_signer;

#[cfg(test)]
mod tests;

pub use key_store::KeyDirectory;
pub use keys::{KeyError, KeyRole, ZoneKey, ZoneKeys};
pub use zone_signer::TableSigner;
