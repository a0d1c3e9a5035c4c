//! The NSEC3 records proving a negative answer (RFC 5155 §7.2), from the
//! zone's precomputed chain. Lagran serves no wildcards and no delegations,
//! so the proofs are the closest encloser proof for NXDOMAIN and the
//! matching NSEC3 for NODATA.

use hickory_proto::rr::{Name, Record, RecordType};

use crate::zone_signatures::Nsec3Chain;

/// RFC 5155 §7.2.3: "If there is an NSEC3 RR that matches QNAME, the server
/// MUST return it in the response. The bits corresponding to QTYPE and CNAME
/// MUST NOT be set in the Type Bit Maps field." Of a name with several (one
/// per set of types), the one that lacks the type asked for; an empty
/// non-terminal's has no types at all.
pub(super) fn nodata_proof(chain: &Nsec3Chain, name: &Name, qtype: RecordType) -> Vec<Record> {
    let lacks = |r: &&Record| {
        r.data()
            .as_dnssec()
            .and_then(|d| d.as_nsec3())
            .is_some_and(|n| !n.type_bit_maps().any(|t| t == qtype || t == RecordType::CNAME))
    };
    chain.matching(name).iter().find(lacks).cloned().into_iter().collect()
}

/// RFC 5155 §7.2.2: "the server MUST include the NSEC3 RR that covers the
/// wildcard at the closest encloser" beside the closest encloser proof of
/// §7.2.1: "an NSEC3 RR that matches the closest (provable) encloser" and
/// "an NSEC3 RR that covers the "next closer" name". The closest encloser is
/// `name`'s longest ancestor that exists in the zone (`apex` at the least);
/// the next closer name is one label longer.
pub(super) fn nxdomain_proof(chain: &Nsec3Chain, apex: &Name, name: &Name) -> Vec<Record> {
    let mut next_closer = name.clone();
    let mut encloser = name.base_name();
    while encloser.num_labels() > apex.num_labels() && chain.matching(&encloser).is_empty() {
        next_closer = encloser;
        encloser = next_closer.base_name();
    }
    let mut proof: Vec<Record> = Vec::with_capacity(3);
    let wildcard = encloser.prepend_label("*").ok();
    let records = [
        chain.matching(&encloser).first(),
        chain.covering(&next_closer),
        wildcard.as_ref().and_then(|w| chain.covering(w)),
    ];
    for record in records.into_iter().flatten() {
        if !proof.contains(record) {
            proof.push(record.clone());
        }
    }
    proof
}
