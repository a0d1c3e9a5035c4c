//! DNSSEC end to end, judged by validators that are not ours: Unbound (with
//! ECS, the zone's KSK as its trust anchor, the NS host as a stub) sets `AD`
//! on the scheduled A and AAAA answers, on CNAME mode, on NXDOMAIN and on
//! NODATA; `delv` (bind9) says "fully validated" for the same and for the
//! CDS and CDNSKEY a parent scans for; a trust anchor
//! that names another key fails validation, so `AD` is not given away. A node
//! taken out re-points the answer, and the new answer is signed as well.

use std::path::Path;
use std::process::Command;
use std::time::{Duration, Instant};

use serde_json::json;

use crate::support::{Daemon, Dig, Options, XdpNamespaces, have_tool, metric_value};
use crate::unbound::{Anchor, Unbound};

pub(crate) const ZONE: &str = "edge.lagran.net";
pub(crate) const CDN: &str = "cdn.edge.lagran.net";
pub(crate) const SHENZHEN: &str = "+subnet=58.60.0.0/24";
const GZ_V6: &str = "2001:db8:21::1";

/// Turns signing on for the demo zone (its NS hosts as `--demo` made them).
fn sign_the_zone(d: &Daemon) {
    let body = json!({
        "ns_hosts": [
            {"name": "ns1.edge.lagran.net", "ipv4": "198.51.100.53"},
            {"name": "ns2.edge.lagran.net", "ipv4": "198.51.100.54"}
        ],
        "dnssec": true
    });
    let (s, v) = d.http("PUT", &format!("/api/v1/zones/{ZONE}"), Some(body), &[]);
    assert_eq!(s, 200, "PUT the zone with dnssec: {v}");
    assert_eq!(v["dnssec"]["algorithm"], "ecdsap256sha256", "algorithm 13 by default: {v}");
}

/// The KSK's DNSKEY rdata (`257 3 13 <base64>`), once the NS host answers it.
pub(crate) fn ksk(d: &Daemon) -> String {
    let r = d.dig_until(&[ZONE, "DNSKEY", "+dnssec"], Duration::from_secs(15), |r| !r.answers("DNSKEY").is_empty());
    let keys = r.answers("DNSKEY");
    assert_eq!(keys.len(), 2, "a KSK and a ZSK: {}", r.text);
    assert!(r.answers("RRSIG").iter().any(|s| s.starts_with("DNSKEY 13 ")), "the DNSKEY RRset is signed: {}", r.text);
    keys.into_iter().find(|k| k.starts_with("257 ")).expect("a key with the SEP flag")
}

/// Gives gz-01 an IPv6 address, every demo node a hostname in the zone, and
/// puts `cdn.<zone>` in CNAME mode.
pub(crate) fn answer_every_kind(d: &Daemon) {
    let (s, v) = d.http("PATCH", "/api/v1/nodes/gz-01", Some(json!({"public_ipv6": GZ_V6})), &[]);
    assert_eq!(s, 200, "{v}");
    for node in ["gz-01", "hk-01", "kr-01"] {
        let body = json!({ "hostname": format!("{node}.{ZONE}") });
        let (s, v) = d.http("PATCH", &format!("/api/v1/nodes/{node}"), Some(body), &[]);
        assert_eq!(s, 200, "{v}");
    }
    let body = json!({ "zone": ZONE, "answer_mode": "cname" });
    let (s, v) = d.http("PUT", &format!("/api/v1/domains/{CDN}"), Some(body), &[]);
    assert_eq!(s, 200, "{v}");
    let r = d.dig_until(&[CDN, "A", SHENZHEN], Duration::from_secs(15), |r| !r.answers("CNAME").is_empty());
    assert_eq!(r.answers("CNAME"), vec!["gz-01.edge.lagran.net."], "{}", r.text);
}

pub(crate) fn assert_validated(r: &Dig, status: &str, what: &str) {
    assert_eq!(r.status, status, "{what}: {}", r.text);
    assert!(r.has_flag("ad"), "{what}: the validator sets AD: {}", r.text);
}

pub(crate) fn delv(d: &Daemon, anchor_file: &Path, args: &[&str]) -> String {
    let out = Command::new("delv")
        .args([format!("@{}", d.dns.ip()), "-p".into(), d.dns.port().to_string()])
        .arg("-a")
        .arg(anchor_file)
        .arg(format!("+root={ZONE}"))
        .args(args)
        .output()
        .expect("running delv");
    format!("{}{}", String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr))
}

pub(crate) fn write_anchor(path: &Path, ksk: &str) {
    let key = ksk.strip_prefix("257 3 13 ").expect("an algorithm 13 KSK").replace(' ', "");
    let text = format!("trust-anchors {{ {ZONE}. static-key 257 3 13 \"{key}\"; }};\n");
    std::fs::write(path, text).expect("writing the delv anchor");
}

#[test]
fn unbound_and_delv_validate_every_kind_of_answer_and_a_wrong_anchor_fails() {
    if !have_tool("dig", "dnssec") || !have_tool("unbound", "dnssec") || !have_tool("delv", "dnssec") {
        return;
    }
    let keys = tempfile::tempdir().expect("key dir");
    let d = Daemon::start(Options {
        env: vec![("DNSSEC_KEY_DIR".into(), keys.path().display().to_string())],
        ..Options::default()
    });
    sign_the_zone(&d);
    answer_every_kind(&d);
    let anchor = ksk(&d);
    let dir = tempfile::tempdir().expect("unbound dir");
    let unbound = Unbound::start(dir.path(), ZONE, d.dns, Anchor::Static(&anchor));

    let r = unbound.dig(&[ZONE, "A", SHENZHEN]);
    assert_validated(&r, "NOERROR", "A, Shenzhen Telecom");
    assert_eq!(r.answers("A"), vec!["203.0.113.21"], "the scheduled answer: gz-01: {}", r.text);
    let r = unbound.dig(&[ZONE, "AAAA", SHENZHEN]);
    assert_validated(&r, "NOERROR", "AAAA");
    assert_eq!(r.answers("AAAA"), vec![GZ_V6], "{}", r.text);
    let r = unbound.dig(&[CDN, "A", SHENZHEN]);
    assert_validated(&r, "NOERROR", "CNAME mode");
    assert_eq!(r.answers("CNAME"), vec!["gz-01.edge.lagran.net."], "{}", r.text);
    assert_eq!(r.answers("A"), vec!["203.0.113.21"], "the CNAME target's address: {}", r.text);
    assert_validated(&unbound.dig(&[&format!("nosuch.{ZONE}"), "A", SHENZHEN]), "NXDOMAIN", "NXDOMAIN");
    assert_validated(&unbound.dig(&[&format!("x.{CDN}"), "A", SHENZHEN]), "NXDOMAIN", "NXDOMAIN under CNAME mode");
    let r = unbound.dig(&[ZONE, "MX", SHENZHEN]);
    assert_validated(&r, "NOERROR", "NODATA for a type Lagran does not serve");
    assert!(r.answer.is_empty(), "{}", r.text);
    let r = unbound.dig(&[CDN, "TXT", SHENZHEN]);
    assert_validated(&r, "NOERROR", "NODATA under CNAME mode");
    assert!(r.answers("TXT").is_empty(), "{}", r.text);

    // A node taken out: the answer moves, and the new answer set is signed too.
    let (s, v) = d.http("PATCH", "/api/v1/nodes/gz-01", Some(json!({"status": "offline"})), &[]);
    assert_eq!(s, 200, "{v}");
    let deadline = Instant::now() + Duration::from_secs(15);
    let r = loop {
        let r = unbound.dig(&[ZONE, "A", SHENZHEN]);
        if r.answers("A") != vec!["203.0.113.21"] || Instant::now() >= deadline {
            break r;
        }
        std::thread::sleep(Duration::from_millis(200));
    };
    assert_validated(&r, "NOERROR", "the answer after gz-01 went offline");
    assert!(!r.answers("A").is_empty() && r.answers("A") != vec!["203.0.113.21"], "moved off gz-01: {}", r.text);

    // delv, bind9's validator, agrees.
    let anchor_file = dir.path().join("anchor.conf");
    write_anchor(&anchor_file, &anchor);
    for (args, want) in [
        (vec![ZONE, "A"], "; fully validated"),
        (vec![CDN, "A"], "; fully validated"),
        (vec!["nosuch.edge.lagran.net", "A"], "; negative response, fully validated"),
        (vec![ZONE, "MX"], "; negative response, fully validated"),
        (vec![ZONE, "CDS"], "; fully validated"),
        (vec![ZONE, "CDNSKEY"], "; fully validated"),
    ] {
        let out = delv(&d, &anchor_file, &args);
        assert!(out.contains(want), "delv {args:?}: {out}");
    }

    // A trust anchor naming another key: no chain of trust, no AD.
    let ksk_rdata = anchor.strip_prefix("257 3 13 ").unwrap().replace(' ', "");
    let flipped =
        if ksk_rdata.starts_with('A') { ksk_rdata.replacen('A', "B", 1) } else { format!("A{}", &ksk_rdata[1..]) };
    write_anchor(&anchor_file, &format!("257 3 13 {flipped}"));
    let out = delv(&d, &anchor_file, &[ZONE, "A"]);
    assert!(!out.contains("fully validated") && out.contains("resolution failed"), "a wrong anchor: {out}");
    drop(unbound);
}

/// The scheduled `A` answer validated from the kernel: Unbound in a client
/// namespace asks the NS host across a veth, where the XDP program answers
/// its query (DO and ECS) with the RRSIG from `lagran_rrsig`, and sets AD;
/// with one byte of every stored signature flipped (`bpftool map update`),
/// the answer still comes from the kernel and Unbound says SERVFAIL.
#[test]
fn unbound_validates_the_kernels_signed_answer_and_a_flipped_signature_byte_fails() {
    if !have_tool("unbound", "dnssec_xdp") || !have_tool("bpftool", "dnssec_xdp") {
        return;
    }
    let Some(ns) = XdpNamespaces::create("dnssec_xdp") else { return };
    let pair = &ns.pair;
    // The pins on a bpffs of our own, which the daemon's namespace shares.
    let bpffs = crate::xdp::BpfFs::mount();
    let pins = format!("{}/pins", bpffs.dir.path().display());
    let keys = tempfile::tempdir().expect("key dir");
    let mut options = ns.daemon_options(&pins);
    options.env.push(("DNSSEC_KEY_DIR".into(), keys.path().display().to_string()));
    let d = Daemon::start(options);
    pair.server.enter(|| sign_the_zone(&d)).expect("entering the server namespace");
    let anchor = pair.server.enter(|| ksk(&d)).expect("entering the server namespace");
    let answered = || metric_value(&ns.metrics(&d), "lagran_xdp_packets_total{result=\"answered\"}");

    // The signed table reaches the maps: a query with DO across the veth gets an RRSIG.
    let server_at = format!("@{}", pair.server_addr);
    let deadline = Instant::now() + Duration::from_secs(15);
    loop {
        let out = pair
            .client_run("dig", &[&server_at, "+tries=1", "+time=2", "+dnssec", ZONE, "A", SHENZHEN])
            .expect("running dig in the client namespace");
        let r = Dig::parse(&String::from_utf8_lossy(&out.stdout));
        if !r.answers("RRSIG").is_empty() {
            break;
        }
        assert!(Instant::now() < deadline, "no signed answer across the veth within 15 s: {}\n{}", r.text, d.log());
        std::thread::sleep(Duration::from_millis(200));
    }
    let dir = tempfile::tempdir().expect("unbound dir");
    let server = std::net::SocketAddr::from((pair.server_addr, 53));
    let unbound = Unbound::start_in(Some(&pair.client), dir.path(), ZONE, server, Anchor::Static(&anchor));
    let before = answered();
    let r = unbound.dig(&[ZONE, "A", SHENZHEN]);
    assert_validated(&r, "NOERROR", "A from the kernel");
    assert_eq!(r.answers("A"), vec!["203.0.113.21"], "the scheduled answer: gz-01: {}", r.text);
    let signed = answered();
    assert!(signed > before, "the XDP program answered ({before} -> {signed}):\n{}", ns.metrics(&d));

    let flipped = flip_signatures(&format!("{pins}/lagran_rrsig"));
    assert!(flipped > 0, "lagran_rrsig holds the zone's answers' RRSIGs");
    // A fresh Unbound, with nothing cached: the question goes to the NS host.
    drop(unbound);
    let dir = tempfile::tempdir().expect("unbound dir");
    let unbound = Unbound::start_in(Some(&pair.client), dir.path(), ZONE, server, Anchor::Static(&anchor));
    let r = unbound.dig(&[ZONE, "A", SHENZHEN]);
    assert_eq!(r.status, "SERVFAIL", "a flipped signature byte fails validation: {}\n{}", r.text, unbound.log());
    assert!(!r.has_flag("ad"), "{}", r.text);
    assert!(answered() > signed, "the tampered answer came from the kernel:\n{}", ns.metrics(&d));
    drop(unbound);
    drop(d);
}

/// Flips the last octet (the signature's) of every record in the pinned
/// `lagran_rrsig` map at `path`; returns how many.
fn flip_signatures(path: &str) -> usize {
    let out = Command::new("bpftool").args(["-j", "map", "dump", "pinned", path]).output().expect("running bpftool");
    assert!(out.status.success(), "bpftool map dump: {}", String::from_utf8_lossy(&out.stderr));
    let entries: serde_json::Value = serde_json::from_slice(&out.stdout).expect("bpftool's JSON");
    let entries = entries.as_array().cloned().unwrap_or_default();
    let hex = |v: &serde_json::Value| -> Vec<u8> {
        let octets = v.as_array().cloned().unwrap_or_default();
        octets
            .iter()
            .map(|o| u8::from_str_radix(o.as_str().unwrap_or("").trim_start_matches("0x"), 16).unwrap())
            .collect()
    };
    for e in &entries {
        let (key, mut value) = (hex(&e["key"]), hex(&e["value"]));
        let record_max = value.len() - 8;
        let len = u32::from_ne_bytes(value[record_max..record_max + 4].try_into().unwrap()) as usize;
        value[len - 1] ^= 0x01;
        // The checksum share follows the flip (an odd or even position of the record).
        let sum = u32::from_ne_bytes(value[record_max + 4..].try_into().unwrap());
        let delta = if (len - 1).is_multiple_of(2) { 0x100 } else { 0x1 };
        let sum = if value[len - 1] & 0x01 == 1 { sum + delta } else { sum - delta };
        value[record_max + 4..].copy_from_slice(&sum.to_ne_bytes());
        let mut args = vec!["map".to_string(), "update".into(), "pinned".into(), path.into(), "key".into()];
        args.extend(key.iter().map(|b| b.to_string()));
        args.push("value".into());
        args.extend(value.iter().map(|b| b.to_string()));
        let st = Command::new("bpftool").args(&args).output().expect("running bpftool map update");
        assert!(st.status.success(), "bpftool map update: {}", String::from_utf8_lossy(&st.stderr));
    }
    entries.len()
}

/// The demo zone declared signed in the configuration file, with NSEC3: the
/// control process writes it at start, and Unbound validates its answers.
#[test]
fn a_zone_declared_signed_in_the_configuration_file_is_served_signed() {
    if !have_tool("dig", "dnssec") || !have_tool("unbound", "dnssec") {
        return;
    }
    let config = format!(
        "[zones.\"{ZONE}\"]\n\
         ns_hosts = [{{ name = \"ns1.{ZONE}\", ipv4 = \"198.51.100.53\" }}]\n\
         dnssec = true\n\
         dnssec_denial = \"nsec3\"\n"
    );
    let d = Daemon::start(Options { config: Some(config), ..Options::default() });
    let (s, v) = d.http("GET", &format!("/api/v1/zones/{ZONE}"), None, &[]);
    assert_eq!(s, 200, "{v}");
    assert_eq!(v["dnssec"]["denial"], "nsec3", "the zone as the file declares it: {v}");
    assert_eq!(v["ns_hosts"].as_array().map(Vec::len), Some(1), "the file's NS set replaced the demo's: {v}");
    let anchor = ksk(&d);
    let dir = tempfile::tempdir().expect("unbound dir");
    let unbound = Unbound::start(dir.path(), ZONE, d.dns, Anchor::Static(&anchor));
    let r = unbound.dig(&[ZONE, "A", SHENZHEN]);
    assert_validated(&r, "NOERROR", "A from the declared zone");
    assert_eq!(r.answers("A"), vec!["203.0.113.21"], "{}", r.text);
    let r = unbound.dig(&[&format!("nosuch.{ZONE}"), "A", SHENZHEN]);
    assert_validated(&r, "NXDOMAIN", "NXDOMAIN proven by NSEC3");
    let direct = d.dig(&[&format!("nosuch.{ZONE}"), "A", "+dnssec"]);
    assert!(direct.authority.iter().any(|r| r.rtype == "NSEC3"), "the proof is NSEC3: {}", direct.text);
    drop(unbound);
}
