//! A signed zone's DNSSEC records as the route table carries them: the
//! DNSKEY RRset, the CDS and CDNSKEY RRsets (RFC 7344), the NSEC chain or
//! the NSEC3 chain with its NSEC3PARAM ([`nsec3`]), and an RRSIG for every
//! RRset the zone can answer, all made on the control plane, so an NS host
//! answers signed without holding any private key.
//!
//! An RRSIG is found by the RRset it covers ([`rrset_key`]: the owner, the
//! type and a digest of the records' data), so the responder builds its
//! records as it always does and looks their signatures up; the signer
//! computes the same key for the RRsets it signs. On the wire every record is
//! its DNS wire form in hex, decoded once when the table is received.

use std::collections::HashMap;

use hickory_proto::rr::{Name, RData, Record, RecordType};
use hickory_proto::serialize::binary::{BinDecodable, BinEncodable};
use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};

pub mod nsec3;

pub use nsec3::Nsec3Chain;

/// The identity of an RRset: lowercase owner, type, and the first 64 bits of
/// SHA-256 over its records' data in sorted order (the order the responder
/// writes them in does not matter, as it does not for the signature).
pub fn rrset_key<'a>(owner: &Name, rtype: RecordType, rdatas: impl Iterator<Item = &'a RData>) -> String {
    let mut wire: Vec<Vec<u8>> = rdatas.filter_map(|r| r.to_bytes().ok()).collect();
    wire.sort();
    let mut digest = Sha256::new();
    for w in &wire {
        digest.update((w.len() as u32).to_be_bytes());
        digest.update(w);
    }
    let sum = digest.finalize();
    format!("{} {} {}", owner.to_lowercase(), u16::from(rtype), hex::encode(&sum[..8]))
}

/// A signed zone's records (see the module documentation).
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(try_from = "SignaturesWire", into = "SignaturesWire")]
pub struct ZoneSignatures {
    /// The DNSKEY RRset at the apex.
    dnskeys: Vec<Record>,
    /// The CDS and CDNSKEY RRsets at the apex: the KSK a parent that scans
    /// should name in its DS (RFC 7344 §4, RFC 8078).
    child_keys: Vec<Record>,
    /// The NSEC records in canonical order of their owners; one owner may
    /// hold several (one per set of types its answers can have).
    nsec: Vec<Record>,
    /// The NSEC3 chain, for a zone denying with NSEC3 (then `nsec` is empty).
    nsec3: Option<Nsec3Chain>,
    /// [`rrset_key`] -> the RRSIG records covering that RRset.
    rrsigs: HashMap<String, Vec<Record>>,
}

/// [`ZoneSignatures`] on the wire: every record in DNS wire form, hex.
#[derive(Serialize, Deserialize)]
struct SignaturesWire {
    dnskey: Vec<String>,
    /// CDS and CDNSKEY; absent from tables made before they were published.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    child_keys: Vec<String>,
    nsec: Vec<String>,
    /// The NSEC3PARAM record, for a zone denying with NSEC3.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    nsec3param: Option<String>,
    /// The NSEC3 records, for a zone denying with NSEC3.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    nsec3: Vec<String>,
    /// `(rrset key, RRSIG record)`.
    rrsig: Vec<(String, String)>,
}

fn decode(hex_record: &str) -> Result<Record, String> {
    let bytes = hex::decode(hex_record).map_err(|e| format!("a DNSSEC record is not hex: {e}"))?;
    Record::from_bytes(&bytes).map_err(|e| format!("a DNSSEC record does not decode: {e}"))
}

fn encode(record: &Record) -> String {
    hex::encode(record.to_bytes().unwrap_or_default())
}

impl TryFrom<SignaturesWire> for ZoneSignatures {
    type Error = String;

    fn try_from(w: SignaturesWire) -> Result<Self, String> {
        let dnskeys = w.dnskey.iter().map(|r| decode(r)).collect::<Result<Vec<_>, _>>()?;
        let child_keys = w.child_keys.iter().map(|r| decode(r)).collect::<Result<Vec<_>, _>>()?;
        let nsec = w.nsec.iter().map(|r| decode(r)).collect::<Result<Vec<_>, _>>()?;
        let mut rrsigs: HashMap<String, Vec<Record>> = HashMap::new();
        for (key, record) in &w.rrsig {
            rrsigs.entry(key.clone()).or_default().push(decode(record)?);
        }
        let signatures = ZoneSignatures::new(dnskeys, nsec, rrsigs).with_child_keys(child_keys);
        match w.nsec3param {
            Some(param) => {
                let records = w.nsec3.iter().map(|r| decode(r)).collect::<Result<Vec<_>, _>>()?;
                Ok(signatures.with_nsec3(Nsec3Chain::new(decode(&param)?, records)?))
            }
            None => Ok(signatures),
        }
    }
}

impl From<ZoneSignatures> for SignaturesWire {
    fn from(z: ZoneSignatures) -> Self {
        let mut rrsig: Vec<(String, String)> =
            z.rrsigs.iter().flat_map(|(k, sigs)| sigs.iter().map(|s| (k.clone(), encode(s)))).collect();
        rrsig.sort();
        SignaturesWire {
            dnskey: z.dnskeys.iter().map(encode).collect(),
            child_keys: z.child_keys.iter().map(encode).collect(),
            nsec: z.nsec.iter().map(encode).collect(),
            nsec3param: z.nsec3.as_ref().map(|c| encode(c.param_record())),
            nsec3: z.nsec3.iter().flat_map(|c| c.records().iter().map(encode)).collect(),
            rrsig,
        }
    }
}

impl ZoneSignatures {
    /// The records of one signed zone; `nsec` is sorted here.
    pub fn new(dnskeys: Vec<Record>, mut nsec: Vec<Record>, rrsigs: HashMap<String, Vec<Record>>) -> Self {
        nsec.sort_by(|a, b| a.name().cmp(b.name()));
        ZoneSignatures { dnskeys, child_keys: Vec::new(), nsec, nsec3: None, rrsigs }
    }

    /// These records with `chain` as the zone's denial.
    pub fn with_nsec3(mut self, chain: Nsec3Chain) -> Self {
        self.nsec3 = Some(chain);
        self
    }

    /// These records with the apex's CDS and CDNSKEY records.
    pub fn with_child_keys(mut self, child_keys: Vec<Record>) -> Self {
        self.child_keys = child_keys;
        self
    }

    pub fn dnskeys(&self) -> &[Record] {
        &self.dnskeys
    }

    /// The CDS and CDNSKEY records.
    pub fn child_keys(&self) -> &[Record] {
        &self.child_keys
    }

    /// Every DNSSEC record the apex answers: DNSKEY, CDS, CDNSKEY and, with
    /// NSEC3, NSEC3PARAM.
    pub fn apex_records(&self) -> impl Iterator<Item = &Record> {
        let param = self.nsec3.as_ref().map(Nsec3Chain::param_record);
        self.dnskeys.iter().chain(&self.child_keys).chain(param)
    }

    /// The NSEC3 chain, when the zone denies with NSEC3.
    pub fn nsec3(&self) -> Option<&Nsec3Chain> {
        self.nsec3.as_ref()
    }

    pub fn nsec(&self) -> &[Record] {
        &self.nsec
    }

    /// Every RRSIG, by the key of the RRset it covers.
    pub fn rrsigs(&self) -> &HashMap<String, Vec<Record>> {
        &self.rrsigs
    }

    /// The RRSIGs covering the RRset of `key` ([`rrset_key`]).
    pub fn rrsigs_for(&self, key: &str) -> &[Record] {
        self.rrsigs.get(key).map_or(&[], Vec::as_slice)
    }

    /// The NSEC records owned by exactly `name`.
    pub fn nsec_at<'s>(&'s self, name: &'s Name) -> impl Iterator<Item = &'s Record> + 's {
        let start = self.nsec.partition_point(|r| r.name() < name);
        self.nsec[start..].iter().take_while(move |r| r.name() == name)
    }

    /// The NSEC record whose span covers `name` (RFC 4034 §4.1.1: its owner
    /// sorts before `name` and its next name after it, or it is the last in
    /// the chain). `None` when `name` itself owns one, or with no chain.
    pub fn nsec_covering(&self, name: &Name) -> Option<&Record> {
        let after = self.nsec.partition_point(|r| r.name() <= name);
        if self.nsec.get(after.wrapping_sub(1)).is_some_and(|r| r.name() == name) {
            return None;
        }
        match after {
            0 => self.nsec.last(),
            i => self.nsec.get(i - 1),
        }
    }

    /// Whether `name` exists in the zone: it owns an NSEC record, or one of
    /// the owners lies below it (an empty non-terminal, RFC 8020 §2).
    pub fn exists(&self, name: &Name) -> bool {
        self.nsec.iter().any(|r| name.zone_of(r.name()))
    }
}
