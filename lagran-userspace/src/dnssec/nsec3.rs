//! The NSEC3 chain of a zone (RFC 5155 §7.1), made with its table like the
//! NSEC chain: one NSEC3 per name and set of types (as [`ZoneNames`] gives
//! them), one with an empty type bitmap per empty non-terminal, and the
//! NSEC3PARAM record of the apex. Hashing is hickory-proto's
//! ([`crate::zone_signatures::nsec3::nsec3_hash`]).
//!
//! Opt-out is never set: it only skips insecure delegations, and a Lagran
//! zone has none — every name in it is known and signed.

use std::collections::{BTreeMap, BTreeSet};

use hickory_proto::dnssec::Nsec3HashAlgorithm;
use hickory_proto::dnssec::rdata::{DNSSECRData, NSEC3, NSEC3PARAM};
use hickory_proto::rr::{Name, RData, Record, RecordType};

use super::denial::ZoneNames;
use super::keys::KeyError;
use crate::model::ZoneDnssec;
use crate::zone_signatures::nsec3::{hashed_label, nsec3_hash};

/// The NSEC3PARAM of `policy` (RFC 5155 §4.1.2: its flags are 0).
pub fn nsec3param(policy: &ZoneDnssec) -> NSEC3PARAM {
    NSEC3PARAM::new(Nsec3HashAlgorithm::SHA1, false, policy.nsec3_iterations, policy.nsec3_salt.0.clone())
}

/// Every name of the zone with its type sets, empty non-terminals included
/// (RFC 5155 §7.1: "Each empty non-terminal MUST have a corresponding NSEC3
/// RR"), with an empty set each.
fn names_and_ents(names: &ZoneNames, apex: &Name) -> BTreeMap<Name, Vec<BTreeSet<RecordType>>> {
    let mut all: BTreeMap<Name, Vec<BTreeSet<RecordType>>> = BTreeMap::new();
    for (owner, sets) in names.type_sets() {
        if !apex.zone_of(owner) {
            continue;
        }
        let signed = sets.into_iter().map(|mut set| {
            set.insert(RecordType::RRSIG);
            set
        });
        all.entry(owner.clone()).or_default().extend(signed);
        let mut above = owner.base_name();
        while above.num_labels() > apex.num_labels() {
            if !names.contains(&above) {
                all.entry(above.clone()).or_insert_with(|| vec![BTreeSet::new()]);
            }
            above = above.base_name();
        }
    }
    all
}

/// The NSEC3 records of `names` under `param`, each with `ttl` (RFC 5155
/// §3: "The NSEC3 RR SHOULD have the same TTL value as the SOA minimum TTL
/// field"), in hash order, the last one's next hash the first one's.
pub fn nsec3_chain(names: &ZoneNames, apex: &Name, param: &NSEC3PARAM, ttl: u32) -> Result<Vec<Record>, KeyError> {
    let mut hashed: Vec<(Vec<u8>, Vec<BTreeSet<RecordType>>)> = Vec::new();
    for (name, sets) in names_and_ents(names, apex) {
        let hash = nsec3_hash(param, &name).map_err(|e| KeyError::new(format!("hashing {name}"), e))?;
        hashed.push((hash, sets));
    }
    hashed.sort_by(|a, b| a.0.cmp(&b.0));
    if let Some(pair) = hashed.windows(2).find(|w| w[0].0 == w[1].0) {
        // RFC 5155 §7.1: "If a hash collision is detected, then a new salt
        // has to be chosen, and the signing process restarted."
        let reason = "two names have the same hash; change dnssec_nsec3_salt";
        return Err(KeyError::new(format!("the NSEC3 chain of {apex} ({})", hashed_label(&pair[0].0)), reason));
    }
    let mut chain = Vec::new();
    for (i, (hash, sets)) in hashed.iter().enumerate() {
        let next = hashed[(i + 1) % hashed.len()].0.clone();
        let owner = apex
            .prepend_label(hashed_label(hash))
            .map_err(|e| KeyError::new(format!("the NSEC3 owner of {apex}"), e))?;
        for set in sets {
            let nsec3 = NSEC3::new(
                Nsec3HashAlgorithm::SHA1,
                false,
                param.iterations(),
                param.salt().to_vec(),
                next.clone(),
                set.iter().copied(),
            );
            chain.push(Record::from_rdata(owner.clone(), ttl, RData::DNSSEC(DNSSECRData::NSEC3(nsec3))));
        }
    }
    Ok(chain)
}
