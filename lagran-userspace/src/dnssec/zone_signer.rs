//! Signing a route table: for every signed zone, its DNSKEY RRset, an RRSIG
//! for every RRset the responder can answer from the table, and the NSEC
//! chain, gathered into the table's [`ZoneSignatures`].
//!
//! What is signed: SOA, NS and the in-zone NS hosts' addresses; each distinct
//! scheduled answer (its `A` and `AAAA` RRsets as the responder writes them,
//! at most [`MAX_ANSWERS`] addresses, or its `CNAME`); the node hostnames'
//! addresses (a CNAME's target); the NSEC records. `whoami` and `_version`
//! stay unsigned diagnostics: their text is made per query on the NS host,
//! which holds no key, so a validating resolver finds them bogus — ask the
//! NS host directly, or with checking disabled (`+cd`). The chain lists them
//! (TXT), so their other types are proven absent.
//!
//! Answers the NS host makes up itself are not signed either: the
//! `DNS_FALLBACK_IP` address, answered when the table is stale or no node is
//! eligible, fails validation, as a lie would.

use std::collections::{BTreeMap, BTreeSet, HashMap};

use hickory_proto::dnssec::PublicKey as _;
use hickory_proto::dnssec::rdata::{CDNSKEY, CDS, DNSSECRData};
use hickory_proto::rr::rdata::{A, AAAA, CNAME, NS};
use hickory_proto::rr::{Name, RData, Record, RecordType};

use super::denial::ZoneNames;
use super::key_store::KeyDirectory;
use super::keys::{KeyError, ZoneKey, ZoneKeys};
use super::signer::{Rrset, RrsetSigner};
use crate::dns::answer::{MAX_ANSWERS, fqdn, negative_ttl, soa_record_at};
use crate::model::{DnssecAlgorithm, Zone, ZoneDnssec};
use crate::route_table::{Answer, NodeHost, RouteTable, ZoneRoutes};
use crate::zone_signatures::ZoneSignatures;

/// The Original TTL of a node hostname's addresses: the responder serves them
/// with its own DNS_TTL, which the control plane does not know; a validator
/// takes the smaller of the two (RFC 4035 §5.3.3).
pub const NODE_HOST_ORIGINAL_TTL: u32 = 86_400;

/// Signs route tables with the keys of a key directory, keeping signatures
/// from one table to the next.
pub struct TableSigner {
    keys: KeyDirectory,
    loaded: HashMap<(String, DnssecAlgorithm), ZoneKeys>,
    signer: RrsetSigner,
}

impl TableSigner {
    pub fn new(keys: KeyDirectory) -> Self {
        TableSigner { keys, loaded: HashMap::new(), signer: RrsetSigner::default() }
    }

    /// Signatures made since this signer started.
    pub fn made(&self) -> u64 {
        self.signer.made
    }

    /// The DNSSEC records of `table`'s signed zones, signed at `now` (Unix
    /// seconds), for [`RouteTable::with_signatures`]. A zone whose keys cannot
    /// be had fails the whole table: publishing it unsigned would turn a
    /// signed delegation bogus.
    pub fn sign(&mut self, table: &RouteTable, now: u32) -> Result<BTreeMap<String, ZoneSignatures>, KeyError> {
        self.signer.begin_pass();
        let mut signatures = BTreeMap::new();
        for zone in &table.zones {
            let Some(policy) = zone.zone.dnssec else { continue };
            let id = (zone.zone.name.clone(), policy.algorithm);
            if !self.loaded.contains_key(&id) {
                let keys = self.keys.load_or_create(&zone.zone.name, policy.algorithm)?;
                self.loaded.insert(id.clone(), keys);
            }
            let keys = &self.loaded[&id];
            let signed = sign_zone(&mut self.signer, zone, &table.hosts, keys, &policy, now)?;
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
    keys: &ZoneKeys,
    policy: &ZoneDnssec,
    now: u32,
) -> Result<ZoneSignatures, KeyError> {
    let zone = &routes.zone;
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
    let nsec = content.names.nsec_chain(negative_ttl(zone));
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
    for record in &nsec {
        sign(&Rrset::new(record.name(), record.ttl(), vec![record.data().clone()]), &keys.zsk)?;
    }
    let dnskeys: Vec<RData> =
        [&keys.ksk, &keys.zsk].iter().map(|k| RData::DNSSEC(DNSSECRData::DNSKEY(k.dnskey().clone()))).collect();
    let dnskey_rrset = Rrset::new(&apex, zone.ns_ttl, dnskeys.clone());
    // RFC 6781 §3.1: the KSK signs the DNSKEY RRset, the ZSK everything else.
    sign(&dnskey_rrset, &keys.ksk)?;
    // RFC 7344 §4.1: "the CDS/CDNSKEY RRset MUST be signed with a key that is
    // represented in both the current DNSKEY and DS RRsets": the KSK.
    let (cds, cdnskey) = child_keys(&keys.ksk, &apex)?;
    sign(&Rrset::new(&apex, zone.ns_ttl, vec![cds.clone()]), &keys.ksk)?;
    sign(&Rrset::new(&apex, zone.ns_ttl, vec![cdnskey.clone()]), &keys.ksk)?;
    let at_apex = |r: RData| Record::from_rdata(apex.clone(), zone.ns_ttl, r);
    let dnskey_records = dnskeys.into_iter().map(at_apex).collect();
    let child_keys = vec![at_apex(cds), at_apex(cdnskey)];
    Ok(ZoneSignatures::new(dnskey_records, nsec, rrsigs).with_child_keys(child_keys))
}

/// The CDS (the DS a parent should hold, SHA-256) and CDNSKEY records of the
/// zone's KSK (RFC 7344 §3), so a parent that scans its children (RFC 8078)
/// picks up the key without the operator copying a DS by hand.
fn child_keys(ksk: &ZoneKey, apex: &Name) -> Result<(RData, RData), KeyError> {
    let ds = ksk.ds(apex)?;
    let cds = CDS::new(ds.key_tag(), Some(ds.algorithm()), ds.digest_type(), ds.digest().to_vec());
    let key = ksk.dnskey();
    let cdnskey =
        CDNSKEY::with_flags(key.flags(), Some(key.public_key().algorithm()), key.public_key().public_bytes().to_vec());
    Ok((RData::DNSSEC(DNSSECRData::CDS(cds)), RData::DNSSEC(DNSSECRData::CDNSKEY(cdnskey))))
}
