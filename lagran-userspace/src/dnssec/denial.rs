//! Authenticated denial of existence (RFC 4035 §3.1.3) without an online
//! key: the names of a zone are all known when its table is built, so the
//! NSEC chain (RFC 4034 §4), or the NSEC3 chain ([`super::nsec3`]), is made
//! then and signed like any other RRset.
//!
//! A scheduled name answers different clients with different types (a node
//! without IPv6 gives some partitions no AAAA; a CNAME-mode name falls back
//! to addresses for a node without a hostname), so such a name may own one
//! NSEC per set of types it answers with; the responder proves NODATA with
//! the one that lacks the type asked for.

use std::collections::{BTreeMap, BTreeSet};

use hickory_proto::dnssec::rdata::{DNSSECRData, NSEC};
use hickory_proto::rr::{Name, RData, Record, RecordType};

/// The types each name of a zone has.
#[derive(Debug, Default)]
pub struct ZoneNames {
    owners: BTreeMap<Name, OwnerTypes>,
}

#[derive(Debug, Default)]
struct OwnerTypes {
    /// Types the name has for every client.
    fixed: BTreeSet<RecordType>,
    /// Sets of types that differ between clients (scheduled names).
    variants: BTreeSet<BTreeSet<RecordType>>,
}

impl ZoneNames {
    /// `owner` has `types` for every client.
    pub fn add(&mut self, owner: &Name, types: impl IntoIterator<Item = RecordType>) {
        self.owners.entry(owner.to_lowercase()).or_default().fixed.extend(types);
    }

    /// `owner` answers some clients with exactly `types`.
    pub fn add_variant(&mut self, owner: &Name, types: BTreeSet<RecordType>) {
        self.owners.entry(owner.to_lowercase()).or_default().variants.insert(types);
    }

    /// Each name in canonical order with the sets of types it answers with:
    /// one set when its types are the same for every client, else one per
    /// variant (each with the fixed types).
    pub fn type_sets(&self) -> impl Iterator<Item = (&Name, Vec<BTreeSet<RecordType>>)> {
        self.owners.iter().map(|(owner, types)| {
            let sets = if types.variants.is_empty() {
                vec![types.fixed.clone()]
            } else {
                types.variants.iter().map(|v| v.union(&types.fixed).copied().collect()).collect()
            };
            (owner, sets)
        })
    }

    /// Whether `name` owns records.
    pub fn contains(&self, name: &Name) -> bool {
        self.owners.contains_key(name)
    }

    /// The NSEC chain in canonical order, each record with `ttl` (RFC 4034
    /// §4: "The NSEC RR SHOULD have the same TTL value as the SOA minimum TTL
    /// field"). The last name's next name is the apex, the first owner.
    pub fn nsec_chain(&self, ttl: u32) -> Vec<Record> {
        let owners: Vec<&Name> = self.owners.keys().collect();
        let mut chain = Vec::new();
        for (i, (owner, sets)) in self.type_sets().enumerate() {
            let next = owners[(i + 1) % owners.len()].clone();
            for set in sets {
                let nsec = NSEC::new_cover_self(next.clone(), set.into_iter().chain([RecordType::RRSIG]));
                chain.push(Record::from_rdata(owner.clone(), ttl, RData::DNSSEC(DNSSECRData::NSEC(nsec))));
            }
        }
        chain
    }
}
