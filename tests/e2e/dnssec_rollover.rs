//! Key rollovers on a compressed clock, judged by Unbound validating the
//! scheduled name all along: a ZSK rollover (pre-publication, started by its
//! lifetime) and a KSK rollover (double signature, started by hand with
//! `lagran dnssec rollover --ksk`) complete with no SERVFAIL and `AD` on
//! every answer. TTLs of two seconds, a one-second propagation delay, a
//! one-second full recompute: the RFC 7583 waits are seconds, not days.
//!
//! Unbound's trust anchor follows the KSK by RFC 5011 (`auto-trust-anchor-file`,
//! hold-down timers shortened with `permit-small-holddown`): the new KSK is
//! trusted only because the old, trusted one signs the DNSKEY RRset that
//! introduces it — the double signature under test. A parent copying the
//! CDS would be simulated by the test itself; RFC 5011 keeps the validator
//! independent of the code under test. The CDS RRset is checked on its own:
//! both KSKs during the roll, the new one after, each answer validated.

use std::time::{Duration, Instant};

use serde_json::json;

use crate::support::{Daemon, Options, have_tool, lagran_cli};
use crate::unbound::{Anchor, Unbound};

const ZONE: &str = "edge.lagran.net";
const SHENZHEN: &str = "+subnet=58.60.0.0/24";

/// The zone signed on a compressed clock; the ZSK rolls every `zsk_lifetime` s.
fn sign_the_zone(d: &Daemon, zsk_lifetime: u32) {
    let body = json!({
        "ns_hosts": [
            {"name": "ns1.edge.lagran.net", "ipv4": "198.51.100.53"},
            {"name": "ns2.edge.lagran.net", "ipv4": "198.51.100.54"}
        ],
        "ns_ttl": 2,
        "soa_minimum": 2,
        "dnssec": true,
        "dnssec_zsk_lifetime_secs": zsk_lifetime,
        "dnssec_ksk_lifetime_secs": 0,
        "dnssec_propagation_secs": 1,
        "dnssec_ds_wait_secs": 8
    });
    let (s, v) = d.http("PUT", &format!("/api/v1/zones/{ZONE}"), Some(body), &[]);
    assert_eq!(s, 200, "PUT the zone: {v}");
}

/// The keys of the zone as `GET /api/v1/dnssec` lists them: (role, tag, state).
fn keys(d: &Daemon) -> Vec<(String, u64, String)> {
    let (s, v) = d.http("GET", "/api/v1/dnssec", None, &[]);
    assert_eq!(s, 200, "{v}");
    let zone = v.as_array().and_then(|a| a.iter().find(|z| z["zone"] == ZONE)).cloned().unwrap_or_default();
    let keys = zone["keys"].as_array().cloned().unwrap_or_default();
    keys.iter()
        .map(|k| {
            (
                k["role"].as_str().unwrap_or("").into(),
                k["tag"].as_u64().unwrap_or(0),
                k["state"].as_str().unwrap_or("").into(),
            )
        })
        .collect()
}

fn tags_in(keys: &[(String, u64, String)], role: &str, state: &str) -> Vec<u64> {
    keys.iter().filter(|k| k.0 == role && k.2 == state).map(|k| k.1).collect()
}

/// What the validating loop saw.
#[derive(Default)]
struct Seen {
    answers: usize,
    failures: Vec<String>,
}

impl Seen {
    /// One validated lookup of the scheduled name.
    fn ask(&mut self, unbound: &Unbound) {
        let r = unbound.dig(&[ZONE, "A", SHENZHEN]);
        self.answers += 1;
        if r.status != "NOERROR" || !r.has_flag("ad") || r.answers("A").is_empty() {
            self.failures.push(format!("{} flags {:?}:\n{}", r.status, r.flags, r.text));
        }
    }

    /// Asks every 200 ms until `done` holds (checked each second), within `limit`.
    fn until(&mut self, unbound: &Unbound, limit: Duration, what: &str, mut done: impl FnMut() -> bool) {
        let deadline = Instant::now() + limit;
        let mut check = Instant::now();
        loop {
            self.ask(unbound);
            if check.elapsed() >= Duration::from_secs(1) {
                if done() {
                    return;
                }
                check = Instant::now();
            }
            assert!(Instant::now() < deadline, "{what} did not happen within {limit:?}\n{}", unbound.log());
            std::thread::sleep(Duration::from_millis(200));
        }
    }
}

/// The CDS key tags, from a validated answer.
fn cds_tags(unbound: &Unbound) -> Vec<u64> {
    let r = unbound.dig(&[ZONE, "CDS"]);
    assert!(r.status == "NOERROR" && r.has_flag("ad"), "the CDS RRset validates: {}", r.text);
    let mut tags: Vec<u64> =
        r.answers("CDS").iter().filter_map(|c| c.split_whitespace().next()?.parse().ok()).collect();
    tags.sort_unstable();
    tags
}

#[test]
fn a_zsk_and_a_ksk_rollover_keep_every_answer_validated() {
    if !have_tool("dig", "dnssec_rollover") || !have_tool("unbound", "dnssec_rollover") {
        return;
    }
    let config = "[schedule]\nrecompute_secs = 1\nttl = 2\n".to_string();
    let d = Daemon::start(Options { config: Some(config), ..Options::default() });
    sign_the_zone(&d, 6);
    let r = d.dig_until(&[ZONE, "DNSKEY", "+dnssec"], Duration::from_secs(15), |r| !r.answers("DNSKEY").is_empty());
    let ksk = r.answers("DNSKEY").into_iter().find(|k| k.starts_with("257 ")).expect("a KSK");
    let start = keys(&d);
    let (old_ksk, old_zsk) = (tags_in(&start, "ksk", "active"), tags_in(&start, "zsk", "active"));
    assert_eq!((old_ksk.len(), old_zsk.len()), (1, 1), "{start:?}");
    let dir = tempfile::tempdir().expect("unbound dir");
    let unbound = Unbound::start(dir.path(), ZONE, d.dns, Anchor::Rfc5011(&ksk));
    let mut seen = Seen::default();

    // ZSK: its six-second lifetime starts the roll; it ends when the old ZSK is removed.
    seen.until(&unbound, Duration::from_secs(30), "the ZSK rollover", || {
        let now = keys(&d);
        !now.iter().any(|k| k.1 == old_zsk[0]) && !tags_in(&now, "zsk", "active").is_empty()
    });
    // No more ZSK rolls from here: the KSK rolls alone.
    sign_the_zone(&d, 0);

    // KSK: asked for by hand; both keys in the CDS while it runs, then the new one only.
    let (ok, out, err) = lagran_cli(&d, &["dnssec", "rollover", "--ksk", ZONE]);
    assert!(ok, "lagran dnssec rollover --ksk: {out}{err}");
    let mut new_ksk = Vec::new();
    seen.until(&unbound, Duration::from_secs(10), "the new KSK's publication", || {
        new_ksk = tags_in(&keys(&d), "ksk", "published");
        !new_ksk.is_empty()
    });
    seen.until(&unbound, Duration::from_secs(10), "the CDS listing both KSKs", || cds_tags(&unbound).len() == 2);
    let (ok, status, err) = lagran_cli(&d, &["dnssec", "status"]);
    assert!(ok, "{err}");
    assert!(status.contains(&format!("KSK tag {} algorithm 13 state published", new_ksk[0])), "{status}");
    assert!(status.contains("becomes active"), "the next event, with its time: {status}");
    seen.until(&unbound, Duration::from_secs(25), "the KSK rollover", || {
        let now = keys(&d);
        tags_in(&now, "ksk", "active") == new_ksk && !now.iter().any(|k| k.1 == old_ksk[0])
    });
    assert_eq!(cds_tags(&unbound), new_ksk, "the CDS names the new KSK only");
    // A few more TTLs with the old KSK gone from every cache.
    let settle = Instant::now();
    while settle.elapsed() < Duration::from_secs(5) {
        seen.ask(&unbound);
        std::thread::sleep(Duration::from_millis(200));
    }
    assert!(
        seen.failures.is_empty(),
        "{} of {} answers failed validation; first:\n{}\nunbound:\n{}",
        seen.failures.len(),
        seen.answers,
        seen.failures[0],
        unbound.log()
    );
    assert!(seen.answers > 50, "the loop asked all along: {}", seen.answers);
    // RFC 5011 as Unbound keeps it: the new KSK valid, the old one missing.
    let anchors = unbound.anchors();
    assert!(anchors.contains("[  VALID  ]") && anchors.contains("[ MISSING ]"), "{anchors}");
}
