//! Signing a route table: for every signed zone, its DNSKEY RRset, an RRSIG
//! for every RRset the responder can answer from the table, and the NSEC
//! chain or the NSEC3 chain with its NSEC3PARAM (the zone's `denial`),
//! gathered into the table's [`ZoneSignatures`].
//!
//! What is signed: SOA, NS and the in-zone NS hosts' addresses; each distinct
//! scheduled answer (its `A` and `AAAA` RRsets as the responder writes them,
//! at most [`MAX_ANSWERS`] addresses, or its `CNAME`); the node hostnames'
//! addresses (a CNAME's target); the NSEC or NSEC3 records and the NSEC3PARAM. `whoami` and `_version`
//! stay unsigned diagnostics: their text is made per query on the NS host,
//! which holds no key, so a validating resolver finds them bogus — ask the
//! NS host directly, or with checking disabled (`+cd`). The chain lists them
//! (TXT), so their other types are proven absent.
//!
//! Answers the NS host makes up itself are not signed either: the
//! `DNS_FALLBACK_IP` address, answered when the table is stale or no node is
//! eligible, fails validation, as a lie would.

use std::collections::{BTreeMap, BTreeSet, HashMap};

use hickory_proto::dnssec::rdata::{CDNSKEY, CDS, DNSSECRData};
use hickory_proto::dnssec::{DigestType, PublicKey as _};
use hickory_proto::rr::rdata::{A, AAAA, CNAME, NS};
use hickory_proto::rr::{Name, RData, Record, RecordType};

use super::denial::ZoneNames;
use super::keeper::{ChildKeys, KeySnapshot, ZoneKeySet};
use super::keys::{KeyError, ZoneKey};
use super::nsec3::{nsec3_chain, nsec3param};
use super::signer::{Rrset, RrsetSigner};
use crate::dns::answer::{MAX_ANSWERS, fqdn, negative_ttl, soa_record_at};
use crate::model::{Denial, Zone, ZoneDnssec};
use crate::route_table::{Answer, NodeHost, RouteTable, ZoneRoutes};
use crate::zone_signatures::{Nsec3Chain, ZoneSignatures};

/// The Original TTL of a node hostname's addresses: the responder serves them
/// with its own DNS_TTL, which the control plane does not know; a validator
/// takes the smaller of the two (RFC 4035 §5.3.3).
pub const NODE_HOST_ORIGINAL_TTL: u32 = 86_400;

/// Signs route tables with the keys of a [`KeySnapshot`], keeping
/// signatures from one table to the next.
#[derive(Default)]
pub struct TableSigner {
    signer: RrsetSigner,
}

impl TableSigner {
    pub fn new() -> Self {
        TableSigner::default()
    }

    /// Signatures made since this signer started.
    pub fn made(&self) -> u64 {
        self.signer.made
    }

    /// The DNSSEC records of `table`'s zones that have keys in `keys`, signed
    /// at `now` (Unix seconds), for [`RouteTable::with_signatures`]. A zone
    /// being withdrawn (its policy off, its keys withdrawing) is signed too,
    /// with the CDS/CDNSKEY DELETE records. One zone failing fails the whole
    /// table: publishing it unsigned would turn a signed delegation bogus.
    pub fn sign(
        &mut self,
        table: &RouteTable,
        keys: &KeySnapshot,
        now: u32,
    ) -> Result<BTreeMap<String, ZoneSignatures>, KeyError> {
        self.signer.begin_pass();
        let mut signatures = BTreeMap::new();
        for zone in &table.zones {
            let Some(set) = keys.zones.get(&zone.zone.name) else { continue };
            let signed = sign_zone(&mut self.signer, zone, &table.hosts, set, now)?;
            signatures.insert(zone.zone.name.clone(), signed);
        }
        self.signer.end_pass();
        Ok(signatures)
    }
}

/// A zone's RRsets to sign and its names, gathered from the table.
#[derive(Default)]
struct ZoneContent {
    rrsets: Vec<Rrset>,
    names: ZoneNames,
}

impl ZoneContent {
    fn add(&mut self, owner: &Name, ttl: u32, rdatas: Vec<RData>) {
        if let Some(first) = rdatas.first() {
            self.names.add(owner, [first.record_type()]);
            self.rrsets.push(Rrset::new(owner, ttl, rdatas));
        }
    }
}

fn name(s: &str) -> Result<Name, KeyError> {
    fqdn(s).ok_or_else(|| KeyError::new(format!("the name {s:?}"), "is not a DNS name"))
}

fn in_zone(name: &str, zone: &str) -> bool {
    name == zone || name.ends_with(&format!(".{zone}"))
}

/// SOA, NS, the NS hosts' addresses and the diagnostics' names.
fn zone_records(content: &mut ZoneContent, zone: &Zone, apex: &Name) -> Result<(), KeyError> {
    let soa = soa_record_at(apex.clone(), zone, zone.ns_ttl)
        .ok_or_else(|| KeyError::new(format!("the SOA of {}", zone.name), "MNAME or RNAME is not a DNS name"))?;
    content.add(apex, zone.ns_ttl, vec![soa.data().clone()]);
    let ns = zone.ns_hosts.iter().map(|h| name(&h.name).map(|n| RData::NS(NS(n)))).collect::<Result<_, _>>()?;
    content.add(apex, zone.ns_ttl, ns);
    content.names.add(apex, [RecordType::DNSKEY, RecordType::CDS, RecordType::CDNSKEY]);
    for host in zone.ns_hosts.iter().filter(|h| in_zone(&h.name, &zone.name)) {
        let owner = name(&host.name)?;
        content.add(&owner, zone.ns_ttl, host.ipv4.map(|a| RData::A(A(a))).into_iter().collect());
        content.add(&owner, zone.ns_ttl, host.ipv6.map(|a| RData::AAAA(AAAA(a))).into_iter().collect());
    }
    for diagnostic in ["whoami", "_version"] {
        content.names.add(&name(&format!("{diagnostic}.{}", zone.name))?, [RecordType::TXT]);
    }
    Ok(())
}

/// The RRsets of one scheduled answer, and the types it answers with.
fn answer_rrsets(content: &mut ZoneContent, owner: &Name, answer: &Answer) -> Result<BTreeSet<RecordType>, KeyError> {
    if let Some(host) = answer.hostname.as_deref() {
        content.rrsets.push(Rrset::new(owner, answer.ttl, vec![RData::CNAME(CNAME(name(host)?))]));
        return Ok([RecordType::CNAME].into());
    }
    let mut types = BTreeSet::new();
    let v4: Vec<RData> = answer.ipv4.iter().take(MAX_ANSWERS).map(|a| RData::A(A(*a))).collect();
    let v6: Vec<RData> = answer.ipv6.iter().take(MAX_ANSWERS).map(|a| RData::AAAA(AAAA(*a))).collect();
    for rdatas in [v4, v6] {
        if let Some(first) = rdatas.first() {
            types.insert(first.record_type());
            content.rrsets.push(Rrset::new(owner, answer.ttl, rdatas));
        }
    }
    Ok(types)
}

/// Everything a signed zone answers, signed (see the module documentation).
fn sign_zone(
    signer: &mut RrsetSigner,
    routes: &ZoneRoutes,
    hosts: &[NodeHost],
    keys: &ZoneKeySet,
    now: u32,
) -> Result<ZoneSignatures, KeyError> {
    let zone = &routes.zone;
    let policy = &keys.policy;
    let apex = name(&zone.name)?;
    let mut content = ZoneContent::default();
    zone_records(&mut content, zone, &apex)?;
    for scheduled in &routes.names {
        let owner = name(&scheduled.name)?;
        for answer in scheduled.answers.iter() {
            let types = answer_rrsets(&mut content, &owner, answer)?;
            content.names.add_variant(&owner, types);
        }
    }
    for host in hosts.iter().filter(|h| in_zone(&h.name, &zone.name)) {
        let owner = name(&host.name)?;
        content.add(&owner, NODE_HOST_ORIGINAL_TTL, host.ipv4.map(|a| RData::A(A(a))).into_iter().collect());
        content.add(&owner, NODE_HOST_ORIGINAL_TTL, host.ipv6.map(|a| RData::AAAA(AAAA(a))).into_iter().collect());
    }
    let denial = denial_records(&mut content, zone, &apex, policy)?;
    let mut rrsigs: HashMap<String, Vec<Record>> = HashMap::new();
    let mut sign = |rrset: &Rrset, key: &ZoneKey| -> Result<(), KeyError> {
        let (id, rrsig) = signer.sign(rrset, key, &apex, policy, now)?;
        let sigs = rrsigs.entry(id).or_default();
        if !sigs.contains(&rrsig) {
            sigs.push(rrsig);
        }
        Ok(())
    };
    for rrset in &content.rrsets {
        sign(rrset, &keys.zsk)?;
    }
    // Each NSEC or NSEC3 record is signed alone: a name may own several
    // (one per set of types), and an answer carries only the one it needs.
    for record in denial.chain.iter().chain(&denial.param) {
        sign(&Rrset::new(record.name(), record.ttl(), vec![record.data().clone()]), &keys.zsk)?;
    }
    let dnskeys: Vec<RData> =
        keys.served.iter().map(|k| RData::DNSSEC(DNSSECRData::DNSKEY(k.dnskey().clone()))).collect();
    let (cds, cdnskey) = child_keys(&keys.child, &apex)?;
    // RFC 6781 §3.1: the KSK signs the DNSKEY RRset, the ZSK everything else;
    // during a KSK rollover both KSKs sign it (RFC 6781 §4.1.2, double
    // signature). RFC 7344 §4.1: "the CDS/CDNSKEY RRset MUST be signed with a
    // key that is represented in both the current DNSKEY and DS RRsets": the
    // KSKs again, so whichever DS the parent holds validates them.
    for ksk in &keys.ksks {
        sign(&Rrset::new(&apex, zone.ns_ttl, dnskeys.clone()), ksk)?;
        sign(&Rrset::new(&apex, zone.ns_ttl, cds.clone()), ksk)?;
        sign(&Rrset::new(&apex, zone.ns_ttl, cdnskey.clone()), ksk)?;
    }
    let at_apex = |r: RData| Record::from_rdata(apex.clone(), zone.ns_ttl, r);
    let dnskey_records = dnskeys.into_iter().map(at_apex).collect();
    let child_records = cds.into_iter().chain(cdnskey).map(at_apex).collect();
    let signatures = match denial.param {
        None => ZoneSignatures::new(dnskey_records, denial.chain, rrsigs),
        Some(param) => ZoneSignatures::new(dnskey_records, Vec::new(), rrsigs)
            .with_nsec3(Nsec3Chain::new(param, denial.chain).map_err(|e| KeyError::new("the NSEC3 chain", e))?),
    };
    Ok(signatures.with_child_keys(child_records))
}

/// A zone's denial records: the NSEC chain, or the NSEC3 chain and its
/// NSEC3PARAM record.
struct DenialRecords {
    chain: Vec<Record>,
    param: Option<Record>,
}

/// The denial records the zone's policy asks for, each with the negative
/// TTL (the NSEC3PARAM with the apex's TTL).
fn denial_records(
    content: &mut ZoneContent,
    zone: &Zone,
    apex: &Name,
    policy: &ZoneDnssec,
) -> Result<DenialRecords, KeyError> {
    match policy.denial {
        Denial::Nsec => Ok(DenialRecords { chain: content.names.nsec_chain(negative_ttl(zone)), param: None }),
        Denial::Nsec3 => {
            let param = nsec3param(policy);
            content.names.add(apex, [RecordType::NSEC3PARAM]);
            let chain = nsec3_chain(&content.names, apex, &param, negative_ttl(zone))?;
            let param = Record::from_rdata(apex.clone(), zone.ns_ttl, RData::DNSSEC(DNSSECRData::NSEC3PARAM(param)));
            Ok(DenialRecords { chain, param: Some(param) })
        }
    }
}

/// The CDS (the DS a parent should hold, SHA-256) and CDNSKEY records
/// (RFC 7344 §3), so a parent that scans its children (RFC 8078) picks up a
/// new key, or the DELETE records of RFC 8078 §4 (`CDS 0 0 0 00`,
/// `CDNSKEY 0 3 0 AA==`) when the zone's signing is being turned off.
fn child_keys(child: &ChildKeys, apex: &Name) -> Result<(Vec<RData>, Vec<RData>), KeyError> {
    let ksks = match child {
        ChildKeys::Delete => {
            let cds = CDS::new(0, None, DigestType::Unknown(0), vec![0]);
            let cdnskey = CDNSKEY::with_flags(0, None, vec![0]);
            return Ok((
                vec![RData::DNSSEC(DNSSECRData::CDS(cds))],
                vec![RData::DNSSEC(DNSSECRData::CDNSKEY(cdnskey))],
            ));
        }
        ChildKeys::Keys(ksks) => ksks,
    };
    let (mut cds, mut cdnskey) = (Vec::new(), Vec::new());
    for ksk in ksks {
        let ds = ksk.ds(apex)?;
        cds.push(RData::DNSSEC(DNSSECRData::CDS(CDS::new(
            ds.key_tag(),
            Some(ds.algorithm()),
            ds.digest_type(),
            ds.digest().to_vec(),
        ))));
        let key = ksk.dnskey();
        cdnskey.push(RData::DNSSEC(DNSSECRData::CDNSKEY(CDNSKEY::with_flags(
            key.flags(),
            Some(key.public_key().algorithm()),
            key.public_key().public_bytes().to_vec(),
        ))));
    }
    Ok((cds, cdnskey))
}
