//! Answers for a signed zone to a query with the DO bit (RFC 3225, RFC 4035
//! §3.1): every RRset with its RRSIGs, negative answers with the NSEC or
//! NSEC3 records that prove them ([`super::nsec3_proof`]), and the DNSSEC
//! RRsets of the apex (DNSKEY, the CDS and CDNSKEY a parent scans for,
//! RFC 7344, and NSEC3PARAM). Everything
//! comes precomputed from the route table ([`crate::zone_signatures`]); a
//! record the table has no signature for goes out unsigned (a validator
//! then finds it bogus rather than this server inventing a signature).
//!
//! RFC 4035 §3.1.6: the AD bit is never set by this authoritative server.

use hickory_proto::rr::{Name, Record, RecordType};

use super::draft::Draft;
use super::nsec3_proof;
use super::parse::Question;
use super::wire::{RCODE_NOERROR, RCODE_NXDOMAIN};
use super::zone_records::{fqdn, nodata};
use crate::model::Zone;
use crate::route_table::RouteTable;
use crate::zone_signatures::{ZoneSignatures, rrset_key};

/// The DNSKEY, CDS, CDNSKEY or NSEC3PARAM RRset of a signed zone's apex (the
/// question's type); NODATA for an unsigned zone or one without it.
pub(super) fn key_answer<'q>(mut r: Draft<'q>, table: &RouteTable, question: &'q Question, zone: &Zone) -> Draft<'q> {
    let Some(signatures) = table.signatures.get(&zone.name) else { return nodata(r, question, zone) };
    let rtype = RecordType::from(question.qtype);
    let keys: Vec<&Record> = signatures.apex_records().filter(|k| k.record_type() == rtype).collect();
    if keys.is_empty() {
        return nodata(r, question, zone);
    }
    for key in keys {
        r.answer.push(Record::from_rdata(question.name.clone(), zone.ns_ttl, key.data().clone()));
    }
    r
}

/// `r` with its DNSSEC records, for a query with DO set.
pub(super) fn add_dnssec<'q>(mut r: Draft<'q>, table: &RouteTable, question: &Question) -> Draft<'q> {
    if table.signatures.is_empty() || !matches!(r.rcode, RCODE_NOERROR | RCODE_NXDOMAIN) {
        return r;
    }
    let negative = r.rcode == RCODE_NXDOMAIN || r.authority.iter().any(|a| a.record_type() == RecordType::SOA);
    if negative {
        // The name the answer ends at: the last CNAME's target, or the question.
        let last = r.answer.iter().rev().find_map(|a| a.data().as_cname().map(|c| c.0.clone()));
        let name = last.unwrap_or_else(|| question.name.clone()).to_lowercase();
        let key = name.to_ascii();
        if let Some((zone, signatures)) = table.signed_zone_of(key.trim_end_matches('.')) {
            let qtype = RecordType::from(question.qtype);
            let nxdomain = r.rcode == RCODE_NXDOMAIN;
            let proof = match (signatures.nsec3(), fqdn(&zone.name)) {
                (Some(chain), Some(apex)) if nxdomain => nsec3_proof::nxdomain_proof(chain, &apex, &name),
                (Some(chain), _) => nsec3_proof::nodata_proof(chain, &name, qtype),
                (None, _) if nxdomain => nxdomain_proof(signatures, &name),
                (None, _) => nodata_proof(signatures, &name, qtype),
            };
            r.authority.extend(proof);
        }
    }
    r.answer = with_rrsigs(table, std::mem::take(&mut r.answer));
    r.authority = with_rrsigs(table, std::mem::take(&mut r.authority));
    r.additional = with_rrsigs(table, std::mem::take(&mut r.additional));
    r
}

/// The records, each RRset followed by its RRSIGs (owner and TTL the RRset's,
/// RFC 4034 §3: "The TTL value of an RRSIG RR MUST match the TTL value of
/// the RRset it covers").
fn with_rrsigs(table: &RouteTable, records: Vec<Record>) -> Vec<Record> {
    let mut out = Vec::with_capacity(records.len() * 2);
    let mut start = 0;
    while start < records.len() {
        let first = &records[start];
        let end = start
            + records[start..]
                .iter()
                .take_while(|r| r.record_type() == first.record_type() && r.name() == first.name())
                .count();
        let rrset = &records[start..end];
        out.extend_from_slice(rrset);
        if first.record_type() != RecordType::RRSIG {
            let owner = first.name().to_lowercase();
            let zone_key = owner.to_ascii();
            if let Some((_, signatures)) = table.signed_zone_of(zone_key.trim_end_matches('.')) {
                let key = rrset_key(&owner, first.record_type(), rrset.iter().map(Record::data));
                for sig in signatures.rrsigs_for(&key) {
                    let mut sig = sig.clone();
                    sig.set_name(first.name().clone()).set_ttl(first.ttl());
                    out.push(sig);
                }
            }
        }
        start = end;
    }
    out
}

/// RFC 4035 §3.1.3.1: "If the zone contains RRsets matching <SNAME, SCLASS>
/// but contains no RRset matching <SNAME, SCLASS, STYPE>, then the name
/// server MUST include the NSEC RR for <SNAME, SCLASS> along with its
/// associated RRSIG RR(s) in the Authority section of the response". Of a
/// name with several, the one whose types lack the type asked for (and
/// CNAME); for an empty non-terminal, the NSEC whose span covers it.
fn nodata_proof(signatures: &ZoneSignatures, name: &Name, qtype: RecordType) -> Vec<Record> {
    let lacks = |r: &&Record| {
        r.data()
            .as_dnssec()
            .and_then(|d| d.as_nsec())
            .is_some_and(|n| !n.type_bit_maps().any(|t| t == qtype || t == RecordType::CNAME))
    };
    if let Some(nsec) = signatures.nsec_at(name).find(lacks) {
        return vec![nsec.clone()];
    }
    signatures.nsec_covering(name).cloned().into_iter().collect()
}

/// RFC 4035 §3.1.3.2: "the name server MUST include the following NSEC RRs
/// in the Authority section, along with their associated RRSIG RRs: o An
/// NSEC RR proving that there is no exact match for <SNAME, SCLASS>. o An
/// NSEC RR proving that the zone contains no RRsets that would match
/// <SNAME, SCLASS> via wildcard name expansion." The wildcard that could
/// have matched sits at the closest encloser: the longest existing ancestor.
fn nxdomain_proof(signatures: &ZoneSignatures, name: &Name) -> Vec<Record> {
    let mut proof: Vec<Record> = signatures.nsec_covering(name).cloned().into_iter().collect();
    let mut encloser = name.base_name();
    while encloser.num_labels() > 0 && !signatures.exists(&encloser) {
        encloser = encloser.base_name();
    }
    if let Ok(wildcard) = encloser.prepend_label("*")
        && let Some(nsec) = signatures.nsec_covering(&wildcard)
        && !proof.contains(nsec)
    {
        proof.push(nsec.clone());
    }
    proof
}
