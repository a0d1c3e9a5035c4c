//! The DNSSEC metrics only the signing control process knows: signatures
//! made, key states, each zone's next key event (the expiry of what is
//! served is exported by every process that serves a table: see
//! `signature_expiry`).

use std::fmt::Write;

use super::Signing;

/// Signatures made, each stored key's state, each zone's next key event.
pub fn render_signing(signing: &Signing, out: &mut String) {
    let made = signing.signer.lock().unwrap_or_else(|e| e.into_inner()).made();
    let _ = writeln!(out, "# HELP lagran_dnssec_signatures_total RRSIG records made since start.");
    let _ = writeln!(out, "# TYPE lagran_dnssec_signatures_total counter");
    let _ = writeln!(out, "lagran_dnssec_signatures_total {made}");
    let Some(snapshot) = signing.keeper.last() else { return };
    let _ = writeln!(out, "# HELP lagran_dnssec_key_state 1 for each DNSSEC key in its state.");
    let _ = writeln!(out, "# TYPE lagran_dnssec_key_state gauge");
    for k in &snapshot.keys {
        let _ = writeln!(
            out,
            "lagran_dnssec_key_state{{zone=\"{}\",role=\"{}\",tag=\"{}\",state=\"{}\"}} 1",
            k.zone,
            k.role.as_str(),
            k.tag,
            k.state.as_str()
        );
    }
    let _ = writeln!(
        out,
        "# HELP lagran_dnssec_next_key_event_timestamp_seconds When the zone's next key event is due (Unix time)."
    );
    let _ = writeln!(out, "# TYPE lagran_dnssec_next_key_event_timestamp_seconds gauge");
    for (zone, event) in &snapshot.next {
        let at = event.at_ms.max(0) as f64 / 1e3;
        let _ = writeln!(out, "lagran_dnssec_next_key_event_timestamp_seconds{{zone=\"{zone}\"}} {at}");
    }
}
