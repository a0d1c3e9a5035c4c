//! Signing one RRset (RFC 4034 §3, RFC 4035 §2.2), and keeping each
//! signature until it nears its expiry: a table rebuilt every few seconds
//! re-signs nothing that did not change, so its deltas stay small and a
//! resolver's cached RRSIG stays the one served.

use std::collections::HashMap;

use hickory_proto::dnssec::TBS;
use hickory_proto::dnssec::rdata::{DNSSECRData, RRSIG, SIG};
use hickory_proto::rr::{DNSClass, Name, RData, Record};

use super::keys::{KeyError, ZoneKey, hickory_algorithm};
use crate::model::ZoneDnssec;
use crate::zone_signatures::rrset_key;

/// Signatures start this long before they are made, for clocks behind ours.
pub const INCEPTION_SKEW_SECS: u32 = 3600;

/// One RRset to sign: owner, its records' data and the TTL it is published with.
pub struct Rrset {
    pub owner: Name,
    pub rdatas: Vec<RData>,
    /// The Original TTL field (RFC 4034 §3.1.4).
    pub ttl: u32,
}

impl Rrset {
    /// `rdatas` at `owner` (lowercased), duplicates removed: RFC 2181 §5
    /// forbids them in an RRset and a validator drops them before it checks.
    pub fn new(owner: &Name, ttl: u32, mut rdatas: Vec<RData>) -> Rrset {
        rdatas.sort();
        rdatas.dedup();
        Rrset { owner: owner.to_lowercase(), rdatas, ttl }
    }

    fn records(&self) -> Vec<Record> {
        self.rdatas.iter().map(|r| Record::from_rdata(self.owner.clone(), self.ttl, r.clone())).collect()
    }
}

/// A kept signature and the pass that last used it.
struct Kept {
    rrsig: Record,
    expiration: u32,
    pass: u64,
}

/// Signs RRsets and keeps their signatures (see the module documentation).
#[derive(Default)]
pub struct RrsetSigner {
    kept: HashMap<(String, u16, u32), Kept>,
    pass: u64,
    /// Signatures made since this signer was created.
    pub made: u64,
}

impl RrsetSigner {
    /// Starts a pass over a whole table: signatures not used by the end of it
    /// are forgotten by [`RrsetSigner::end_pass`].
    pub fn begin_pass(&mut self) {
        self.pass += 1;
    }

    pub fn end_pass(&mut self) {
        let pass = self.pass;
        self.kept.retain(|_, k| k.pass == pass);
    }

    /// The RRset's key ([`rrset_key`]) and its RRSIG by `key`, kept from an
    /// earlier pass while more than `policy.refresh_secs` of it remain.
    pub fn sign(
        &mut self,
        rrset: &Rrset,
        key: &ZoneKey,
        zone: &Name,
        policy: &ZoneDnssec,
        now: u32,
    ) -> Result<(String, Record), KeyError> {
        let rtype = rrset
            .rdatas
            .first()
            .map(RData::record_type)
            .ok_or_else(|| KeyError::new(format!("signing at {}", rrset.owner), "an RRset without records"))?;
        let id = rrset_key(&rrset.owner, rtype, rrset.rdatas.iter());
        let cache_key = (id.clone(), key.tag(), rrset.ttl);
        if let Some(kept) = self.kept.get_mut(&cache_key)
            && kept.expiration.saturating_sub(now) > policy.refresh_secs
        {
            kept.pass = self.pass;
            return Ok((id, kept.rrsig.clone()));
        }
        let expiration = now.saturating_add(policy.validity_secs);
        let inception = now.saturating_sub(INCEPTION_SKEW_SECS);
        let unsigned = SIG::new(
            rtype,
            hickory_algorithm(key.algorithm),
            rrset.owner.num_labels(),
            rrset.ttl,
            expiration,
            inception,
            key.tag(),
            zone.to_lowercase(),
            Vec::new(),
        );
        let what = || format!("signing {} {rtype}", rrset.owner);
        let records = rrset.records();
        let tbs = TBS::from_sig(&rrset.owner, DNSClass::IN, &unsigned, records.iter())
            .map_err(|e| KeyError::new(what(), e))?;
        let signature = key.signing_key().sign(&tbs).map_err(|e| KeyError::new(what(), e))?;
        let rrsig = RRSIG::new(
            rtype,
            unsigned.algorithm(),
            unsigned.num_labels(),
            rrset.ttl,
            expiration,
            inception,
            key.tag(),
            unsigned.signer_name().clone(),
            signature,
        );
        let record = Record::from_rdata(rrset.owner.clone(), rrset.ttl, RData::DNSSEC(DNSSECRData::RRSIG(rrsig)));
        self.made += 1;
        self.kept.insert(cache_key, Kept { rrsig: record.clone(), expiration, pass: self.pass });
        Ok((id, record))
    }
}
