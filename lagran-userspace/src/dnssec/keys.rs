//! One zone key: its role (KSK or ZSK), algorithm and private key, and what
//! is derived from it — the signing key, the DNSKEY record, the key tag and
//! the DS record a parent publishes.

use hickory_proto::dnssec::crypto::{EcdsaSigningKey, Ed25519SigningKey};
use hickory_proto::dnssec::rdata::{DNSKEY, DS};
use hickory_proto::dnssec::{Algorithm, DigestType, SigningKey};
use hickory_proto::rr::Name;
use rustls::pki_types::PrivatePkcs8KeyDer;

use crate::model::DnssecAlgorithm;
pub use crate::model::KeyRole;

/// A key that cannot be made or read.
#[derive(Debug, thiserror::Error)]
#[error("{what}: {reason}")]
pub struct KeyError {
    pub what: String,
    pub reason: String,
}

impl KeyError {
    pub fn new(what: impl Into<String>, reason: impl std::fmt::Display) -> Self {
        KeyError { what: what.into(), reason: reason.to_string() }
    }
}

/// hickory's algorithm for ours.
pub fn hickory_algorithm(algorithm: DnssecAlgorithm) -> Algorithm {
    match algorithm {
        DnssecAlgorithm::Ecdsap256sha256 => Algorithm::ECDSAP256SHA256,
        DnssecAlgorithm::Ed25519 => Algorithm::ED25519,
    }
}

/// One zone key with its private key (PKCS#8 DER).
pub struct ZoneKey {
    pub role: KeyRole,
    pub algorithm: DnssecAlgorithm,
    signing: Box<dyn SigningKey>,
    dnskey: DNSKEY,
    tag: u16,
    pkcs8: Vec<u8>,
}

impl std::fmt::Debug for ZoneKey {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ZoneKey")
            .field("role", &self.role)
            .field("algorithm", &self.algorithm)
            .field("tag", &self.tag)
            .finish()
    }
}

impl ZoneKey {
    /// A new key from the system's random source.
    pub fn generate(role: KeyRole, algorithm: DnssecAlgorithm) -> Result<ZoneKey, KeyError> {
        let what = || format!("generating a {} {algorithm:?} key", role.as_str());
        let pkcs8 = match algorithm {
            DnssecAlgorithm::Ecdsap256sha256 => EcdsaSigningKey::generate_pkcs8(Algorithm::ECDSAP256SHA256),
            DnssecAlgorithm::Ed25519 => Ed25519SigningKey::generate_pkcs8(),
        }
        .map_err(|e| KeyError::new(what(), e))?;
        ZoneKey::from_pkcs8(role, algorithm, pkcs8.secret_pkcs8_der().to_vec())
    }

    /// The key of `pkcs8` (DER), checked to be of `algorithm`.
    pub fn from_pkcs8(role: KeyRole, algorithm: DnssecAlgorithm, pkcs8: Vec<u8>) -> Result<ZoneKey, KeyError> {
        let what = || format!("reading a {} {algorithm:?} key", role.as_str());
        let der = PrivatePkcs8KeyDer::from(pkcs8.as_slice());
        let signing: Box<dyn SigningKey> = match algorithm {
            DnssecAlgorithm::Ecdsap256sha256 => Box::new(
                EcdsaSigningKey::from_pkcs8(&der, Algorithm::ECDSAP256SHA256).map_err(|e| KeyError::new(what(), e))?,
            ),
            DnssecAlgorithm::Ed25519 => {
                Box::new(Ed25519SigningKey::from_pkcs8(&der).map_err(|e| KeyError::new(what(), e))?)
            }
        };
        let public = signing.to_public_key().map_err(|e| KeyError::new(what(), e))?;
        let dnskey = DNSKEY::with_flags(role.flags(), public);
        let tag = dnskey.calculate_key_tag().map_err(|e| KeyError::new(what(), e))?;
        Ok(ZoneKey { role, algorithm, signing, dnskey, tag, pkcs8 })
    }

    pub fn signing_key(&self) -> &dyn SigningKey {
        self.signing.as_ref()
    }

    pub fn dnskey(&self) -> &DNSKEY {
        &self.dnskey
    }

    /// The key tag (RFC 4034 Appendix B) RRSIG and DS records name it by.
    pub fn tag(&self) -> u16 {
        self.tag
    }

    /// The private key, PKCS#8 DER (what the key directory stores).
    pub fn pkcs8(&self) -> &[u8] {
        &self.pkcs8
    }

    /// The DS record for the parent zone (RFC 4509: digest SHA-256).
    pub fn ds(&self, zone: &Name) -> Result<DS, KeyError> {
        let digest = self
            .dnskey
            .to_digest(zone, DigestType::SHA256)
            .map_err(|e| KeyError::new(format!("the DS of key {}", self.tag), e))?;
        Ok(DS::new(self.tag, hickory_algorithm(self.algorithm), DigestType::SHA256, digest.as_ref().to_vec()))
    }
}

/// A zone's two keys.
#[derive(Debug)]
pub struct ZoneKeys {
    pub ksk: ZoneKey,
    pub zsk: ZoneKey,
}
