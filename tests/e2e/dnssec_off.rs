//! Turning a zone's signing off, in the order RFC 8078 §4 makes safe: first
//! the apex publishes the CDS/CDNSKEY DELETE records (`CDS 0 0 0 00`,
//! `CDNSKEY 0 3 0 AA==`) while every answer stays signed — a validator that
//! still trusts the zone's key keeps getting `AD`, no SERVFAIL — and only
//! after `dnssec_delete_wait_secs` is the zone served unsigned: no RRSIG, no
//! DNSKEY, no NSEC. `lagran dnssec status` shows each step. A compressed
//! clock: TTLs of two seconds, a one-second recompute, an eight-second wait.

use std::time::{Duration, Instant};

use serde_json::json;

use crate::support::{Daemon, Dig, Options, have_tool, lagran_cli};
use crate::unbound::{Anchor, Unbound};

const ZONE: &str = "edge.lagran.net";
const SHENZHEN: &str = "+subnet=58.60.0.0/24";
const DELETE_WAIT_SECS: u64 = 8;

fn put_zone(d: &Daemon, signed: bool) {
    let mut body = json!({
        "ns_hosts": [
            {"name": "ns1.edge.lagran.net", "ipv4": "198.51.100.53"},
            {"name": "ns2.edge.lagran.net", "ipv4": "198.51.100.54"}
        ],
        "ns_ttl": 2,
        "soa_minimum": 2,
        "dnssec": signed
    });
    if signed {
        // No rollover of its own: the keys change only by turning signing off.
        body["dnssec_zsk_lifetime_secs"] = json!(0);
        body["dnssec_ksk_lifetime_secs"] = json!(0);
        body["dnssec_propagation_secs"] = json!(1);
    }
    let (s, v) = d.http("PUT", &format!("/api/v1/zones/{ZONE}"), Some(body), &[]);
    assert_eq!(s, 200, "PUT the zone (dnssec {signed}): {v}");
}

/// Every record type of an answer, in all three sections.
fn types(r: &Dig) -> Vec<String> {
    r.answer.iter().chain(&r.authority).chain(&r.additional).map(|x| x.rtype.clone()).collect()
}

fn signed(r: &Dig) -> bool {
    types(r).iter().any(|t| t == "RRSIG")
}

/// The scheduled name asked directly, with DO set.
fn direct_a(d: &Daemon) -> Dig {
    d.dig(&[ZONE, "A", SHENZHEN, "+dnssec"])
}

fn status(d: &Daemon) -> String {
    let (ok, out, err) = lagran_cli(d, &["dnssec", "status"]);
    assert!(ok, "lagran dnssec status: {err}");
    out
}

/// One validated lookup through Unbound; a failure is a failure only while
/// the zone is still served signed (the moment it turns unsigned, a
/// validator still holding its key is expected to fail: the parent's DS
/// should have gone during the wait).
fn validated(unbound: &Unbound, d: &Daemon, failures: &mut Vec<String>) {
    let r = unbound.dig(&[ZONE, "A", SHENZHEN]);
    if (r.status != "NOERROR" || !r.has_flag("ad") || r.answers("A").is_empty()) && signed(&direct_a(d)) {
        failures.push(format!("{} flags {:?}:\n{}", r.status, r.flags, r.text));
    }
}

#[test]
fn turning_signing_off_publishes_the_cds_delete_before_serving_unsigned() {
    if !have_tool("dig", "dnssec_off") || !have_tool("unbound", "dnssec_off") {
        return;
    }
    let config = "[schedule]\nrecompute_secs = 1\nttl = 2\n".to_string();
    let env = vec![("DNSSEC_DELETE_WAIT_SECS".to_string(), DELETE_WAIT_SECS.to_string())];
    let d = Daemon::start(Options { config: Some(config), env, ..Options::default() });
    put_zone(&d, true);
    let r = d.dig_until(&[ZONE, "DNSKEY", "+dnssec"], Duration::from_secs(15), |r| !r.answers("DNSKEY").is_empty());
    let ksk = r.answers("DNSKEY").into_iter().find(|k| k.starts_with("257 ")).expect("a KSK");
    let before = status(&d);
    assert!(before.contains(&format!("zone {ZONE} (signed)")) && before.contains("state active"), "{before}");
    let cds = d.dig(&[ZONE, "CDS", "+dnssec"]);
    assert!(!cds.answers("CDS").is_empty() && !cds.answers("CDS").iter().any(|c| c == "0 0 0 00"), "{}", cds.text);
    let dir = tempfile::tempdir().expect("unbound dir");
    let unbound = Unbound::start(dir.path(), ZONE, d.dns, Anchor::Static(&ksk));
    let mut failures = Vec::new();
    for _ in 0..5 {
        validated(&unbound, &d, &mut failures);
    }
    assert!(failures.is_empty(), "validated before signing is turned off: {}", failures[0]);

    put_zone(&d, false);
    let off_at = Instant::now();
    // Step one: the DELETE records, signed, with every answer still signed.
    let cds = d.dig_until(&[ZONE, "CDS", "+dnssec"], Duration::from_secs(10), |r| {
        r.answers("CDS").iter().any(|c| c == "0 0 0 00")
    });
    let delete_seen = off_at.elapsed();
    assert_eq!(cds.answers("CDS"), vec!["0 0 0 00".to_string()], "the CDS DELETE record alone: {}", cds.text);
    assert!(cds.answers("RRSIG").iter().any(|s| s.starts_with("CDS ")), "the CDS DELETE is signed: {}", cds.text);
    let cdnskey = d.dig(&[ZONE, "CDNSKEY", "+dnssec"]);
    assert_eq!(cdnskey.answers("CDNSKEY"), vec!["0 3 0 AA==".to_string()], "{}", cdnskey.text);
    assert!(cdnskey.answers("RRSIG").iter().any(|s| s.starts_with("CDNSKEY ")), "{}", cdnskey.text);
    let a = direct_a(&d);
    assert!(!a.answers("A").is_empty() && a.answers("RRSIG").iter().any(|s| s.starts_with("A ")), "{}", a.text);
    let during = status(&d);
    assert!(during.contains("signing turned off (withdrawing)"), "{during}");
    assert!(during.contains("state withdrawing") && !during.contains("state active"), "{during}");
    assert!(during.contains("keys removed, zone served unsigned"), "the next step, with its time: {during}");

    // Through the wait: Unbound, still trusting the key, validates every answer.
    let deadline = Instant::now() + Duration::from_secs(DELETE_WAIT_SECS + 15);
    let mut asked = 0;
    while signed(&direct_a(&d)) {
        assert!(Instant::now() < deadline, "still signed {:?} after turning signing off", off_at.elapsed());
        validated(&unbound, &d, &mut failures);
        asked += 1;
        std::thread::sleep(Duration::from_millis(200));
    }
    let unsigned_at = off_at.elapsed();
    assert!(
        failures.is_empty(),
        "{} of {asked} answers failed validation during the delete wait; first:\n{}\nunbound:\n{}",
        failures.len(),
        failures[0],
        unbound.log()
    );
    assert!(asked >= 10, "Unbound was asked all through the wait: {asked}");
    assert!(
        unsigned_at >= delete_seen + Duration::from_secs(DELETE_WAIT_SECS - 2),
        "served unsigned {unsigned_at:?} after turning off, the DELETE seen at {delete_seen:?}: \
         sooner than the {DELETE_WAIT_SECS} s wait"
    );

    // Step two: unsigned everywhere.
    let a = direct_a(&d);
    assert!(a.status == "NOERROR" && !a.answers("A").is_empty() && !signed(&a), "{}", a.text);
    let dnskey = d.dig(&[ZONE, "DNSKEY", "+dnssec"]);
    assert!(dnskey.answers("DNSKEY").is_empty() && !signed(&dnskey), "no DNSKEY: {}", dnskey.text);
    let cds = d.dig(&[ZONE, "CDS", "+dnssec"]);
    assert!(cds.answers("CDS").is_empty() && !signed(&cds), "no CDS: {}", cds.text);
    let nx = d.dig(&[&format!("nosuch.{ZONE}"), "A", "+dnssec"]);
    assert_eq!(nx.status, "NXDOMAIN", "{}", nx.text);
    assert!(!types(&nx).iter().any(|t| t == "NSEC" || t == "NSEC3" || t == "RRSIG"), "no denial proof: {}", nx.text);
    let after = status(&d);
    assert!(!after.contains("state withdrawing") && !after.contains("state active"), "no key serves: {after}");
}
