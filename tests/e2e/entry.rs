//! The entry points beside plain DNS, each driven by a client that is not
//! ours: `kdig +tls` for DNS over TLS, dnspython with aioquic for DNS over
//! QUIC, `curl` for the HTTP 302 redirect. Each must decide exactly like the
//! UDP responder does for the same client.

use std::path::Path;
use std::process::Command;

use crate::support::{Daemon, Dig, Options, have_tool, write_test_certificate};

const ZONE: &str = "edge.lagran.net";
/// Shenzhen China Telecom in the test geo file: gz-01.
const SHENZHEN: &str = "58.60.0.0/24";

/// A daemon with DoT on port 0 and the certificate under `dir`.
fn encrypted_daemon(dir: &Path) -> Daemon {
    let (cert, key) = write_test_certificate(dir);
    let args = ["--dot-listen", "127.0.0.1:0", "--tls-cert"]
        .iter()
        .map(|s| s.to_string())
        .chain([cert.display().to_string(), "--tls-key".into(), key.display().to_string()])
        .collect();
    Daemon::start(Options { args, ..Options::default() })
}

/// `kdig +tls` (certificate not checked: it is self-signed) parsed like dig.
fn kdig_tls(d: &Daemon, args: &[&str]) -> Dig {
    let dot = d.entry("dot");
    let out = Command::new("kdig")
        .args([format!("@{}", dot.ip()), "-p".into(), dot.port().to_string()])
        .args(["+tls", "+time=3", "+retry=0"])
        .args(args)
        .output()
        .expect("running kdig");
    // kdig writes `;; CLIENT-SUBNET:` where dig writes `; CLIENT-SUBNET:`.
    let text = String::from_utf8_lossy(&out.stdout).replace(";; CLIENT-SUBNET:", "; CLIENT-SUBNET:");
    Dig::parse(&text)
}

fn metric(d: &Daemon, line_start: &str) -> f64 {
    let (_, body) = d.get("/metrics");
    let text = body.as_str().unwrap_or_default().to_string();
    text.lines()
        .find_map(|l| l.strip_prefix(line_start).and_then(|v| v.trim().parse().ok()))
        .unwrap_or_else(|| panic!("no `{line_start}` in /metrics:\n{text}"))
}

#[test]
fn dot_answers_like_udp_with_the_ecs_scope() {
    if !have_tool("dig", "dot_answers_like_udp") || !have_tool("kdig", "dot_answers_like_udp") {
        return;
    }
    let dir = tempfile::tempdir().expect("temp dir");
    let d = encrypted_daemon(dir.path());
    for subnet in [SHENZHEN, "123.112.0.0/24"] {
        let ecs = format!("+subnet={subnet}");
        let udp = d.dig(&[ZONE, "A", &ecs]);
        let dot = kdig_tls(&d, &[ZONE, "A", &ecs]);
        assert!(dot.text.contains("TLS session"), "kdig used TLS:\n{}", dot.text);
        assert_eq!(dot.answers("A"), udp.answers("A"), "DoT answers like UDP for {subnet}\n{}", dot.text);
        assert_eq!(dot.ecs, udp.ecs, "DoT echoes the same ECS scope as UDP for {subnet}\n{}", dot.text);
        assert!(dot.text.contains(";; PADDING:"), "RFC 8467: the DoT response is padded\n{}", dot.text);
    }
    let udp = d.dig(&[ZONE, "A", &format!("+subnet={SHENZHEN}")]);
    assert_eq!(udp.answers("A"), vec!["203.0.113.21"], "gz-01 for Shenzhen Telecom\n{}", udp.text);
    assert_eq!(metric(&d, "lagran_dns_queries_total{transport=\"dot\"}"), 2.0, "two DoT queries counted");
}
