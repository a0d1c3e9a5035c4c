//! `lagran dnssec status` and `lagran dnssec rollover --zsk|--ksk [ZONE]`,
//! through the control API: the signed zones' keys, their states, the next
//! key events with their times, the DS records to give each parent zone and
//! the trust anchor (the KSK's DNSKEY) for a validator; and a rollover
//! started by hand.

use clap::Subcommand;
use serde_json::json;

use crate::api::dnssec::ZoneKeysStatus;
use crate::api_client::{ApiClient, ClientError};

#[derive(Debug, Subcommand)]
pub enum DnssecCommand {
    /// Keys, their states, the next events and the DS for each parent.
    Status,
    /// Starts a key rollover now (the leader runs it on the zone's timers).
    Rollover {
        /// Roll the zone-signing key (pre-publication).
        #[arg(long, conflicts_with = "ksk", required_unless_present = "ksk")]
        zsk: bool,
        /// Roll the key-signing key (double signature; the parent's DS changes).
        #[arg(long)]
        ksk: bool,
        /// The zone; may be left out when exactly one zone is signed.
        zone: Option<String>,
    },
}

pub async fn run(client: &ApiClient, command: DnssecCommand) -> Result<String, ClientError> {
    match command {
        DnssecCommand::Status => {
            let v = client.call("GET", "/api/v1/dnssec", None).await?;
            let zones: Vec<ZoneKeysStatus> = serde_json::from_value(v).map_err(|e| ClientError::Url {
                url: "/api/v1/dnssec".into(),
                reason: format!("an answer this version does not read: {e}"),
            })?;
            Ok(status_text(&zones, crate::clock::now_ms()))
        }
        DnssecCommand::Rollover { zsk, zone, .. } => {
            let role = if zsk { "zsk" } else { "ksk" };
            let zone = match zone {
                Some(z) => z,
                None => only_signed_zone(client).await?,
            };
            let path = format!("/api/v1/zones/{zone}/dnssec/rollover");
            let key = client.call("POST", &path, Some(&json!({ "role": role }))).await?;
            Ok(format!(
                "{} rollover of {zone} started: key {} made, published with the next table (lagran dnssec status)\n",
                role.to_uppercase(),
                key["tag"]
            ))
        }
    }
}

async fn only_signed_zone(client: &ApiClient) -> Result<String, ClientError> {
    let v = client.call("GET", "/api/v1/dnssec", None).await?;
    let signed: Vec<&str> = v
        .as_array()
        .into_iter()
        .flatten()
        .filter(|z| z["signed"].as_bool() == Some(true))
        .filter_map(|z| z["zone"].as_str())
        .collect();
    match signed.as_slice() {
        [one] => Ok(one.to_string()),
        _ => Err(ClientError::Url {
            url: "/api/v1/dnssec".into(),
            reason: format!("name the zone: {} zones are signed ({})", signed.len(), signed.join(", ")),
        }),
    }
}

/// A Unix time in ms as UTC text, with how far away it is.
fn when(at_ms: i64, now_ms: i64) -> String {
    if at_ms <= now_ms {
        return "due now (next full build)".into();
    }
    let secs = (at_ms - now_ms) / 1000;
    let (d, h, m, s) = (secs / 86_400, secs % 86_400 / 3600, secs % 3600 / 60, secs % 60);
    format!("at {} (in {d}d {h:02}h {m:02}m {s:02}s)", utc_text(at_ms / 1000))
}

/// Unix seconds as `YYYY-MM-DD HH:MM:SS UTC` (the days-to-civil algorithm
/// of the proleptic Gregorian calendar; no time crate is in the tree).
fn utc_text(secs: i64) -> String {
    let (days, rem) = (secs.div_euclid(86_400), secs.rem_euclid(86_400));
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z - era * 146_097;
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let day = doy - (153 * mp + 2) / 5 + 1;
    let month = if mp < 10 { mp + 3 } else { mp - 9 };
    let year = yoe + era * 400 + i64::from(month <= 2);
    format!("{year:04}-{month:02}-{day:02} {:02}:{:02}:{:02} UTC", rem / 3600, rem % 3600 / 60, rem % 60)
}

/// The status text (see the module documentation).
pub fn status_text(zones: &[ZoneKeysStatus], now_ms: i64) -> String {
    if zones.is_empty() {
        return "no zone is signed\n".into();
    }
    let mut out = String::new();
    for z in zones {
        let signing = if z.signed { "signed" } else { "signing turned off (withdrawing)" };
        out.push_str(&format!("zone {} ({signing})\n", z.zone));
        for k in &z.keys {
            out.push_str(&format!(
                "  {} tag {} algorithm {} state {}\n    {}. IN DNSKEY {}\n",
                k.role.as_str().to_uppercase(),
                k.tag,
                k.algorithm,
                k.state.as_str(),
                z.zone,
                k.dnskey
            ));
        }
        out.push_str("  DS for the parent (SHA-256; also published as CDS):\n");
        for ds in &z.ds {
            out.push_str(&format!("    {}. IN DS {ds}\n", z.zone));
        }
        out.push_str("  next events:\n");
        if z.events.is_empty() {
            out.push_str("    none (lifetimes 0: keys roll only by hand)\n");
        }
        for e in &z.events {
            out.push_str(&format!("    {}: {}\n", when(e.at_ms, now_ms), e.what));
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::api::dnssec::EventStatus;
    use crate::model::{KeyRole, KeyState};
    use crate::store::dnssec_keys::StoredKey;

    #[test]
    fn status_prints_keys_states_events_and_ds() {
        assert!(status_text(&[], 0).contains("no zone is signed"));
        let key = StoredKey {
            id: "a".into(),
            zone: "edge.lagran.net".into(),
            role: KeyRole::Ksk,
            algorithm: 13,
            tag: 4242,
            state: KeyState::Published,
            dnskey: "257 3 13 AAAA".into(),
            ds: "4242 13 2 ABCD".into(),
            sealed: String::new(),
            created_at_ms: 0,
            published_at_ms: Some(0),
            active_at_ms: None,
            retired_at_ms: None,
            withdrawing_at_ms: None,
            removed_at_ms: None,
        };
        let zone = ZoneKeysStatus {
            zone: "edge.lagran.net".into(),
            signed: true,
            keys: vec![key],
            events: vec![EventStatus { at_ms: 90_061_000, what: "KSK 4242 becomes active".into() }],
            ds: vec!["4242 13 2 ABCD".into()],
        };
        let text = status_text(&[zone], 0);
        assert!(text.contains("KSK tag 4242 algorithm 13 state published"), "{text}");
        assert!(text.contains("edge.lagran.net. IN DS 4242 13 2 ABCD"), "{text}");
        assert!(text.contains("at 1970-01-02 01:01:01 UTC (in 1d 01h 01m 01s): KSK 4242 becomes active"), "{text}");
        assert_eq!(utc_text(1_764_928_800), "2025-12-05 10:00:00 UTC");
    }
}
