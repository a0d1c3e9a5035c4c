//! A zone's NSEC3 chain (RFC 5155) as the responder looks it up: the
//! NSEC3PARAM record of the apex, whose salt and iterations hash a name, and
//! the NSEC3 records in the order of their hashed owners.
//!
//! RFC 5155 §3: "The owner name for the NSEC3 RR is the base32 encoding of
//! the hashed owner name prepended as a single label to the name of the
//! zone." Base32 with the extended hex alphabet keeps the order of the
//! hashes, so the chain is sorted by its owners' first labels.

use data_encoding::BASE32_DNSSEC;
use hickory_proto::ProtoError;
use hickory_proto::dnssec::Nsec3HashAlgorithm;
use hickory_proto::dnssec::rdata::NSEC3PARAM;
use hickory_proto::rr::{Name, Record};

/// The hash of `name` under `param` (RFC 5155 §5: SHA-1, iterated, over the
/// lowercase wire form), as hickory-proto computes it.
pub fn nsec3_hash(param: &NSEC3PARAM, name: &Name) -> Result<Vec<u8>, ProtoError> {
    let digest = Nsec3HashAlgorithm::SHA1.hash(param.salt(), name, param.iterations())?;
    Ok(digest.as_ref().to_vec())
}

/// The owner label of a hash: base32 with the extended hex alphabet,
/// lowercase, without padding (RFC 4648 §7).
pub fn hashed_label(hash: &[u8]) -> String {
    BASE32_DNSSEC.encode(hash)
}

/// A signed zone's NSEC3PARAM and NSEC3 records (see the module
/// documentation).
#[derive(Clone, Debug, PartialEq)]
pub struct Nsec3Chain {
    param: Record,
    /// Sorted by owner; one hashed owner may hold several records (one per
    /// set of types a scheduled name answers with).
    records: Vec<Record>,
}

/// The first label of an NSEC3 record's owner: its hash in base32hex.
fn label_of(record: &Record) -> &[u8] {
    record.name().iter().next().unwrap_or_default()
}

impl Nsec3Chain {
    /// `param` must hold an NSEC3PARAM record. Owners are lowercased here,
    /// so lookups compare labels byte by byte.
    pub fn new(param: Record, mut records: Vec<Record>) -> Result<Self, String> {
        if param.data().as_dnssec().and_then(|d| d.as_nsec3param()).is_none() {
            return Err(format!("{param} is not an NSEC3PARAM record"));
        }
        for record in &mut records {
            let owner = record.name().to_lowercase();
            record.set_name(owner);
        }
        records.sort_by(|a, b| label_of(a).cmp(label_of(b)));
        Ok(Nsec3Chain { param, records })
    }

    /// The NSEC3PARAM record at the apex.
    pub fn param_record(&self) -> &Record {
        &self.param
    }

    fn param(&self) -> &NSEC3PARAM {
        self.param.data().as_dnssec().and_then(|d| d.as_nsec3param()).expect("checked in new")
    }

    pub fn records(&self) -> &[Record] {
        &self.records
    }

    /// `name`'s hashed owner label; `None` when it cannot be hashed (a name
    /// too long to be in the zone).
    fn label(&self, name: &Name) -> Option<Vec<u8>> {
        nsec3_hash(self.param(), name).ok().map(|h| hashed_label(&h).into_bytes())
    }

    /// Where `label` would sit in the chain: the first record not before it.
    fn position(&self, label: &[u8]) -> usize {
        self.records.partition_point(|r| label_of(r) < label)
    }

    /// The NSEC3 records whose owner is `name`'s hash (RFC 5155 §7.2.1:
    /// they "match" it): `name` exists, as an empty non-terminal when their
    /// type bitmap is empty.
    pub fn matching(&self, name: &Name) -> &[Record] {
        let Some(label) = self.label(name) else { return &[] };
        let start = self.position(&label);
        let end = start + self.records[start..].iter().take_while(|r| label_of(r) == label.as_slice()).count();
        &self.records[start..end]
    }

    /// The NSEC3 record covering `name`'s hash (RFC 5155 §1.3: its owner
    /// hash sorts before it and its next hash after it, or it is the last
    /// record, whose next hash is the first). `None` when `name` exists or
    /// the chain is empty.
    pub fn covering(&self, name: &Name) -> Option<&Record> {
        let label = self.label(name)?;
        let at = self.position(&label);
        if self.records.get(at).is_some_and(|r| label_of(r) == label.as_slice()) {
            return None;
        }
        match at {
            0 => self.records.last(),
            i => self.records.get(i - 1),
        }
    }
}
