//! The zone's own records: SOA and NS at the apex, glue for the NS hosts,
//! and the SOA that negative answers (NXDOMAIN, NODATA) carry.

use hickory_proto::rr::rdata::{A, AAAA, NS, SOA};
use hickory_proto::rr::{Name, RData, Record};

use super::draft::Draft;
use super::parse::Question;
use super::reply::Outcome;
use super::wire::{RCODE_NXDOMAIN, RCODE_SERVFAIL, TYPE_A, TYPE_AAAA};
use crate::model::{NsHost, Zone};
use crate::route_table::RouteTable;

/// The zone apex with the question's spelling (so that it compresses against it).
fn zone_owner(question: &Question, zone: &Zone) -> Option<Name> {
    let zone_labels = zone.name.split('.').filter(|l| !l.is_empty()).count();
    let have = question.name.num_labels_raw();
    if zone_labels > have {
        return fqdn(&zone.name);
    }
    Name::from_labels(question.name.iter().skip(have - zone_labels)).ok()
}

trait RawLabels {
    fn num_labels_raw(&self) -> usize;
}

impl RawLabels for Name {
    /// The label count, counting a leading `*` (hickory's `num_labels` does not).
    fn num_labels_raw(&self) -> usize {
        self.iter().count()
    }
}

pub(crate) fn fqdn(s: &str) -> Option<Name> {
    let mut n = Name::from_ascii(s).ok()?;
    n.set_fqdn(true);
    Some(n)
}

fn soa_record(question: &Question, zone: &Zone, ttl: u32) -> Option<Record> {
    soa_record_at(zone_owner(question, zone)?, zone, ttl)
}

pub(crate) fn soa_record_at(owner: Name, zone: &Zone, ttl: u32) -> Option<Record> {
    let soa = SOA::new(
        fqdn(&zone.soa_mname)?,
        fqdn(&zone.soa_rname)?,
        zone.soa_serial,
        zone.soa_refresh as i32,
        zone.soa_retry as i32,
        zone.soa_expire as i32,
        zone.soa_minimum,
    );
    Some(Record::from_rdata(owner, ttl, RData::SOA(soa)))
}

/// RFC 2308 §3: "The TTL of this record is set from the minimum of the
/// MINIMUM field of the SOA record and the TTL of the SOA itself, and
/// indicates how long a resolver may cache the negative answer."
pub(crate) fn negative_ttl(zone: &Zone) -> u32 {
    zone.ns_ttl.min(zone.soa_minimum)
}

/// Empty answer + SOA in authority (RCODE and outcome untouched).
pub(super) fn negative<'q>(mut r: Draft<'q>, question: &'q Question, zone: &Zone) -> Draft<'q> {
    // RFC 2308 §3: "Name servers authoritative for a zone MUST include the SOA
    // record of the zone in the authority section of the response when
    // reporting an NXDOMAIN or indicating that no data of the requested type
    // exists."
    match soa_record(question, zone, negative_ttl(zone)) {
        Some(soa) => {
            r.answer.clear();
            r.authority.push(soa);
            r
        }
        None => r.error(RCODE_SERVFAIL, Outcome::ServFail),
    }
}

pub(super) fn nodata<'q>(mut r: Draft<'q>, question: &'q Question, zone: &Zone) -> Draft<'q> {
    r.outcome = Outcome::NoData;
    negative(r, question, zone)
}

pub(super) fn nxdomain<'q>(mut r: Draft<'q>, question: &'q Question, zone: &Zone) -> Draft<'q> {
    r.outcome = Outcome::NxDomain;
    r.rcode = RCODE_NXDOMAIN;
    negative(r, question, zone)
}

pub(super) fn soa_answer<'q>(mut r: Draft<'q>, question: &'q Question, zone: &Zone) -> Draft<'q> {
    match soa_record(question, zone, zone.ns_ttl) {
        Some(soa) => {
            r.answer.push(soa);
            r
        }
        None => r.error(RCODE_SERVFAIL, Outcome::ServFail),
    }
}

fn in_zone(host: &str, zone: &Zone) -> bool {
    host == zone.name || host.ends_with(&format!(".{}", zone.name))
}

pub(super) fn ns_answer<'q>(mut r: Draft<'q>, question: &'q Question, zone: &Zone) -> Draft<'q> {
    if zone.ns_hosts.is_empty() {
        return nodata(r, question, zone);
    }
    let Some(owner) = zone_owner(question, zone) else { return r.error(RCODE_SERVFAIL, Outcome::ServFail) };
    for host in &zone.ns_hosts {
        let Some(target) = fqdn(&host.name) else { return r.error(RCODE_SERVFAIL, Outcome::ServFail) };
        r.answer.push(Record::from_rdata(owner.clone(), zone.ns_ttl, RData::NS(NS(target))));
    }
    // Glue: addresses of the NS hosts inside the zone, A then AAAA per host.
    for host in zone.ns_hosts.iter().filter(|h| in_zone(&h.name, zone)) {
        let Some(name) = fqdn(&host.name) else { continue };
        if let Some(a) = host.ipv4 {
            r.additional.push(Record::from_rdata(name.clone(), zone.ns_ttl, RData::A(A(a))));
        }
        if let Some(a) = host.ipv6 {
            r.additional.push(Record::from_rdata(name, zone.ns_ttl, RData::AAAA(AAAA(a))));
        }
    }
    r
}

pub(super) fn glue_answer<'q>(mut r: Draft<'q>, question: &'q Question, zone: &Zone, host: &NsHost) -> Draft<'q> {
    let rdata = match question.qtype {
        TYPE_A => host.ipv4.map(|a| RData::A(A(a))),
        TYPE_AAAA => host.ipv6.map(|a| RData::AAAA(AAAA(a))),
        _ => None,
    };
    match rdata {
        Some(rdata) => {
            r.answer.push(Record::from_rdata(question.name.clone(), zone.ns_ttl, rdata));
            r
        }
        None => nodata(r, question, zone),
    }
}

/// A name with no records of its own but names below it (RFC 8020 §2).
pub(super) fn is_empty_non_terminal(table: &RouteTable, zone: &Zone, name: &str) -> bool {
    let suffix = format!(".{name}");
    zone.ns_hosts.iter().any(|h| h.name.ends_with(&suffix))
        || table.hosts.iter().any(|h| h.name.ends_with(&suffix))
        || table
            .zones
            .iter()
            .filter(|z| z.zone.name == zone.name)
            .any(|z| z.names.iter().any(|n| n.name.ends_with(&suffix)))
}
