//! When a table's signatures expire: the earliest RRSIG expiration of each
//! signed zone, for the metric every process serving a table exports (so
//! each NS host reports what it hands out) and the console's warning.

use std::fmt::Write;

use hickory_proto::dnssec::rdata::DNSSECRData;
use hickory_proto::rr::{RData, Record};

use crate::route_table::RouteTable;
use crate::zone_signatures::ZoneSignatures;

/// An RRSIG record's expiration (Unix seconds); `None` for other records.
pub fn expiration(record: &Record) -> Option<u32> {
    match record.data() {
        RData::DNSSEC(DNSSECRData::RRSIG(sig)) => Some(sig.sig_expiration().get()),
        _ => None,
    }
}

/// The earliest expiration of the zone's signatures.
pub fn oldest(signatures: &ZoneSignatures) -> Option<u32> {
    signatures.rrsigs().values().flatten().filter_map(expiration).min()
}

/// `lagran_dnssec_oldest_signature_expiry_seconds{zone}`: seconds until the
/// earliest signature served for the zone expires (negative once past).
pub fn render_prometheus(table: &RouteTable, now_secs: i64, out: &mut String) {
    if table.signatures.is_empty() {
        return;
    }
    let _ = writeln!(
        out,
        "# HELP lagran_dnssec_oldest_signature_expiry_seconds Seconds until the earliest signature served for the zone expires."
    );
    let _ = writeln!(out, "# TYPE lagran_dnssec_oldest_signature_expiry_seconds gauge");
    for (zone, signatures) in &table.signatures {
        if let Some(first) = oldest(signatures) {
            let left = i64::from(first) - now_secs;
            let _ = writeln!(out, "lagran_dnssec_oldest_signature_expiry_seconds{{zone=\"{zone}\"}} {left}");
        }
    }
}
