//! NSEC3 end to end: a zone signed with `dnssec_denial = "nsec3"` (a salt and
//! iterations, then none), judged by Unbound (the zone's KSK as its trust
//! anchor) and `delv`: the scheduled A answer, NXDOMAIN (under the apex and
//! under a CNAME-mode name), NODATA (a type Lagran does not serve, AAAA
//! where a name has none, under CNAME mode) all validate with `AD`. The
//! zone is then switched to NSEC and back to NSEC3 with other parameters
//! over the API, and the same questions validate after each switch.

use std::path::Path;
use std::time::Duration;

use serde_json::{Value, json};

use crate::dnssec::{CDN, SHENZHEN, ZONE, answer_every_kind, assert_validated, delv, ksk, write_anchor};
use crate::support::{Daemon, Options, have_tool};
use crate::unbound::{Anchor, Unbound};

/// Signs the demo zone with `denial` (the `dnssec_*` fields beside
/// `"dnssec": true`).
fn put_zone(d: &Daemon, denial: Value) {
    let mut body = json!({
        "ns_hosts": [
            {"name": "ns1.edge.lagran.net", "ipv4": "198.51.100.53"},
            {"name": "ns2.edge.lagran.net", "ipv4": "198.51.100.54"}
        ],
        "dnssec": true
    });
    body.as_object_mut().unwrap().extend(denial.as_object().unwrap().clone());
    let (s, v) = d.http("PUT", &format!("/api/v1/zones/{ZONE}"), Some(body), &[]);
    assert_eq!(s, 200, "PUT the zone: {v}");
}

/// Waits until the NS host proves a missing type with `rtype` records
/// (`NSEC` or `NSEC3`) and no others; returns the NSEC3PARAM it serves.
fn await_denial(d: &Daemon, rtype: &str) -> Vec<String> {
    let other = if rtype == "NSEC" { "NSEC3" } else { "NSEC" };
    let has = |r: &crate::support::Dig, t: &str| r.authority.iter().any(|a| a.rtype == t);
    let r = d.dig_until(&[ZONE, "MX", "+dnssec"], Duration::from_secs(15), |r| has(r, rtype) && !has(r, other));
    assert!(has(&r, rtype) && !has(&r, other), "the NS host denies with {rtype}: {}", r.text);
    d.dig(&[ZONE, "NSEC3PARAM", "+dnssec"]).answers("NSEC3PARAM")
}

/// Every kind of answer, through Unbound and delv, validated.
fn validate_everything(d: &Daemon, unbound: &Unbound, anchor_file: &Path, denial: &str) {
    let what = |s: &str| format!("{denial}: {s}");
    let r = unbound.dig(&[ZONE, "A", SHENZHEN]);
    assert_validated(&r, "NOERROR", &what("A, Shenzhen Telecom"));
    assert_eq!(r.answers("A"), vec!["203.0.113.21"], "the scheduled answer: gz-01: {}", r.text);
    assert_validated(&unbound.dig(&[&format!("nosuch.{ZONE}"), "A", SHENZHEN]), "NXDOMAIN", &what("NXDOMAIN"));
    let r = unbound.dig(&[&format!("a.b.x.{CDN}"), "A", SHENZHEN]);
    assert_validated(&r, "NXDOMAIN", &what("NXDOMAIN under CNAME mode"));
    for (name, rtype, kind) in [
        (ZONE, "TXT", "NODATA for a type Lagran does not serve"),
        (ZONE, "MX", "NODATA for another"),
        ("hk-01.edge.lagran.net", "AAAA", "NODATA: AAAA where the name has none"),
        (CDN, "TXT", "NODATA under CNAME mode"),
    ] {
        let r = unbound.dig(&[name, rtype, SHENZHEN]);
        assert_validated(&r, "NOERROR", &what(kind));
        assert!(r.answers(rtype).is_empty(), "{kind}: {}", r.text);
    }
    for (args, want) in [
        (vec![ZONE, "A"], "; fully validated"),
        (vec![CDN, "A"], "; fully validated"),
        (vec!["nosuch.edge.lagran.net", "A"], "; negative response, fully validated"),
        (vec!["x.cdn.edge.lagran.net", "A"], "; negative response, fully validated"),
        (vec![ZONE, "TXT"], "; negative response, fully validated"),
        (vec!["hk-01.edge.lagran.net", "AAAA"], "; negative response, fully validated"),
    ] {
        let out = delv(d, anchor_file, &args);
        assert!(out.contains(want), "{denial}: delv {args:?}: {out}");
    }
}

#[test]
fn unbound_and_delv_validate_nsec3_denials_and_a_switch_to_nsec_and_back() {
    if !have_tool("dig", "dnssec_nsec3") || !have_tool("unbound", "dnssec_nsec3") || !have_tool("delv", "dnssec_nsec3")
    {
        return;
    }
    let keys = tempfile::tempdir().expect("key dir");
    let d = Daemon::start(Options {
        env: vec![("DNSSEC_KEY_DIR".into(), keys.path().display().to_string())],
        ..Options::default()
    });
    put_zone(&d, json!({"dnssec_denial": "nsec3", "dnssec_nsec3_iterations": 2, "dnssec_nsec3_salt": "c0ffee"}));
    let (s, v) = d.get(&format!("/api/v1/zones/{ZONE}"));
    assert_eq!(s, 200, "{v}");
    assert_eq!(
        (&v["dnssec"]["denial"], &v["dnssec"]["nsec3_iterations"], &v["dnssec"]["nsec3_salt"]),
        (&json!("nsec3"), &json!(2), &json!("c0ffee")),
        "{v}"
    );
    let (s, v) = d.http(
        "PUT",
        &format!("/api/v1/zones/{ZONE}"),
        Some(json!({
            "ns_hosts": [{"name": "ns1.edge.lagran.net", "ipv4": "198.51.100.53"}],
            "dnssec": true, "dnssec_denial": "nsec3", "dnssec_nsec3_iterations": 500
        })),
        &[],
    );
    assert_eq!((s, &v["field"]), (422, &json!("dnssec_nsec3_iterations")), "too many iterations: {v}");
    answer_every_kind(&d);
    let anchor = ksk(&d);
    assert_eq!(await_denial(&d, "NSEC3"), vec!["1 0 2 C0FFEE"], "the NSEC3PARAM at the apex");
    let dir = tempfile::tempdir().expect("unbound dir");
    let anchor_file = dir.path().join("anchor.conf");
    write_anchor(&anchor_file, &anchor);
    let unbound = Unbound::start(dir.path(), ZONE, d.dns, Anchor::Static(&anchor));
    validate_everything(&d, &unbound, &anchor_file, "NSEC3 with salt and iterations");

    put_zone(&d, json!({}));
    assert!(await_denial(&d, "NSEC").is_empty(), "no NSEC3PARAM once the zone denies with NSEC");
    validate_everything(&d, &unbound, &anchor_file, "switched to NSEC");

    put_zone(&d, json!({"dnssec_denial": "nsec3"}));
    assert_eq!(await_denial(&d, "NSEC3"), vec!["1 0 0 -"], "RFC 9276's parameters");
    validate_everything(&d, &unbound, &anchor_file, "back to NSEC3 without salt");
    drop(unbound);
}
