//! `lagran_rrsig`: the RRSIG of every answer of a signed zone's names that the
//! fast path sends, made from the route table's signatures
//! ([`crate::zone_signatures`]) and written with diffed inserts and deletes,
//! one entry per (name, distinct answer, type).
//!
//! An answer gets an entry only when the program can send exactly what the
//! responder sends for it: one RRSIG covering the RRset (a second one, as
//! during a key rollover, is the responder's to send) whose record fits
//! `RECORD_MAX`. Without an entry the program passes the query, and
//! userspace answers it.

use std::collections::HashMap;

use hickory_proto::rr::rdata::{A, AAAA};
use hickory_proto::rr::{RData, Record, RecordType};
use hickory_proto::serialize::binary::BinEncodable;
use lagran_common::answers::MAX_ADDRS;
use lagran_common::rrsig::{RrsigKey, RrsigValue};

use super::XdpError;
use super::maps::Maps;
use crate::dns::settings::DnsSettings;
use crate::route_table::{Answer, ScheduledName};
use crate::zone_signatures::{ZoneSignatures, rrset_key};

/// The RRSIG entries a table wants.
pub(super) type Entries = HashMap<RrsigKey, RrsigValue>;

/// Adds to `out` the entries of `name`, whose answer `i` the program sends
/// as answer id `ids[i]`.
pub(super) fn add_name(
    name: &ScheduledName,
    ids: &[Option<u32>],
    signatures: &ZoneSignatures,
    settings: &DnsSettings,
    out: &mut Entries,
) {
    let Some(owner) = crate::dns::answer::fqdn(&name.name) else { return };
    for (answer, id) in name.answers.iter().zip(ids) {
        let Some(id) = *id else { continue };
        let ttl = crate::dns::scheduled_ttl(answer.ttl, settings);
        for (aaaa, rdatas) in [(0, v4_rdatas(answer)), (1, v6_rdatas(answer))] {
            let Some(first) = rdatas.first() else { continue };
            let key = rrset_key(&owner, first.record_type(), rdatas.iter());
            if let [sig] = signatures.rrsigs_for(&key)
                && let Some(value) = value(sig, ttl)
            {
                out.insert(RrsigKey { name_id: name.id, answer_id: id, aaaa }, value);
            }
        }
    }
}

/// The `A` records the responder sends for `answer`: its first four addresses.
fn v4_rdatas(answer: &Answer) -> Vec<RData> {
    answer.ipv4.iter().take(MAX_ADDRS).map(|a| RData::A(A(*a))).collect()
}

fn v6_rdatas(answer: &Answer) -> Vec<RData> {
    answer.ipv6.iter().take(MAX_ADDRS).map(|a| RData::AAAA(AAAA(*a))).collect()
}

/// The map value of `sig` answered with `ttl`, if the program can send it
/// (see the module documentation).
fn value(sig: &Record, ttl: u32) -> Option<RrsigValue> {
    if sig.record_type() != RecordType::RRSIG {
        return None;
    }
    // Encoded alone, as the responder encodes it in a message: the signer's
    // name whole and lowercase (hickory-proto writes DNSSEC RDATA canonically).
    let rdata = sig.data().to_bytes().ok()?;
    RrsigValue::new(ttl, &rdata)
}

/// The RRSIG entries as last written, kept equal to a table's in two steps
/// around the names' (see [`super::MapWriter`]'s write order).
#[derive(Default)]
pub(super) struct RrsigWriter {
    written: Entries,
}

impl RrsigWriter {
    /// Writes every entry of `want` that is new or changed (a re-made
    /// signature replaces its entry whole). Returns how many.
    pub(super) fn write_changed(&mut self, maps: &mut Maps, want: &Entries) -> Result<usize, XdpError> {
        let mut n = 0;
        for (k, v) in want {
            if self.written.get(k) != Some(v) {
                maps.set_rrsig(*k, v)?;
                self.written.insert(*k, *v);
                n += 1;
            }
        }
        Ok(n)
    }

    /// Removes the entries `want` no longer has. Returns how many.
    pub(super) fn remove_gone(&mut self, maps: &mut Maps, want: &Entries) -> Result<usize, XdpError> {
        let gone: Vec<RrsigKey> = self.written.keys().filter(|k| !want.contains_key(k)).copied().collect();
        for k in &gone {
            maps.remove_rrsig(k)?;
            self.written.remove(k);
        }
        Ok(gone.len())
    }

    /// Forgets what was written (the maps were emptied).
    pub(super) fn clear(&mut self) {
        self.written.clear();
    }
}
