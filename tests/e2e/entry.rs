//! The entry points beside plain DNS, each driven by a client that is not
//! ours: `kdig +tls` for DNS over TLS, dnspython with aioquic for DNS over
//! QUIC, `curl` for the HTTP 302 redirect. Each must decide exactly like the
//! UDP responder does for the same client.

use std::path::Path;
use std::process::Command;

use crate::support::{Daemon, Dig, Options, doq_python, have_tool, write_test_certificate};

const ZONE: &str = "edge.lagran.net";
/// Shenzhen China Telecom in the test geo file: gz-01.
const SHENZHEN: &str = "58.60.0.0/24";

/// A daemon with DoT and DoQ on port 0 and the certificate under `dir`.
fn encrypted_daemon(dir: &Path) -> Daemon {
    let (cert, key) = write_test_certificate(dir);
    let args = ["--dot-listen", "127.0.0.1:0", "--doq-listen", "127.0.0.1:0", "--tls-cert"]
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

    // SIGHUP reloads the certificate; DoT keeps answering with the new one.
    write_test_certificate(dir.path());
    let hup = Command::new("kill").args(["-HUP", &d.pid().to_string()]).status().expect("running kill");
    assert!(hup.success());
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
    while !d.log().contains("DoT/DoQ certificate reloaded") && std::time::Instant::now() < deadline {
        std::thread::sleep(std::time::Duration::from_millis(50));
    }
    assert!(d.log().contains("DoT/DoQ certificate reloaded"), "SIGHUP reloads the certificate:\n{}", d.log());
    let dot = kdig_tls(&d, &[ZONE, "A", &format!("+subnet={SHENZHEN}")]);
    assert_eq!(dot.answers("A"), vec!["203.0.113.21"], "DoT answers after the reload\n{}", dot.text);
}

/// `curl -sI`-like: the status line and headers of a request (no redirect followed).
fn curl(d: &Daemon, method: &str, path: &str, headers: &[&str]) -> (u16, String) {
    let http = d.entry("http");
    let mut cmd = Command::new("curl");
    cmd.args(["-s", "-o", "/dev/null", "-D", "-", "--max-time", "5", "-X", method]);
    if method == "HEAD" {
        cmd.arg("--head");
    }
    for h in headers {
        cmd.args(["-H", h]);
    }
    let out = cmd.arg(format!("http://{http}{path}")).output().expect("running curl");
    let text = String::from_utf8_lossy(&out.stdout).to_lowercase();
    let status = text.split_whitespace().nth(1).and_then(|s| s.parse().ok()).unwrap_or(0);
    (status, text)
}

fn header<'a>(text: &'a str, name: &str) -> Option<&'a str> {
    text.lines().find_map(|l| l.strip_prefix(name).and_then(|r| r.strip_prefix(':')).map(str::trim))
}

fn redirect_daemon(trusted: &str) -> Daemon {
    let config = format!("[http_redirect]\ntrusted_proxies = [{trusted}]\n");
    let args = vec!["--http-listen".to_string(), "127.0.0.1:0".to_string()];
    Daemon::start(Options { args, config: Some(config), ..Options::default() })
}

#[test]
fn http_302_to_the_node_of_the_forwarded_client_only_from_a_trusted_proxy() {
    if !have_tool("curl", "http_302") {
        return;
    }
    let host = "Host: edge.lagran.net";
    let xff = "X-Forwarded-For: 58.60.1.1";

    // 127.0.0.0/8 is a trusted proxy: its X-Forwarded-For names a Shenzhen Telecom client.
    let d = redirect_daemon("\"127.0.0.0/8\"");
    let (status, text) = curl(&d, "GET", "/video/a.mp4?start=10", &[host, xff]);
    assert_eq!(status, 302, "{text}");
    assert_eq!(header(&text, "location"), Some("http://203.0.113.21/video/a.mp4?start=10"), "gz-01\n{text}");
    assert_eq!(header(&text, "cache-control"), Some("no-store"), "{text}");
    let (status, text) = curl(&d, "HEAD", "/", &[host, xff]);
    assert_eq!((status, header(&text, "location")), (302, Some("http://203.0.113.21/")), "HEAD too\n{text}");
    let (status, text) = curl(&d, "GET", "/", &["Host: elsewhere.example", xff]);
    assert_eq!(status, 404, "an unknown Host\n{text}");
    assert_eq!(header(&text, "cache-control"), Some("no-store"), "{text}");
    let (status, _) = curl(&d, "POST", "/", &[host, xff]);
    assert_eq!(status, 405, "only GET and HEAD");
    assert_eq!(metric(&d, "lagran_http_redirects_total{node=\"gz-01\"}"), 2.0, "redirects counted per node");
    drop(d);

    // No trusted proxy: the same header is ignored and the client is the
    // peer, 127.0.0.1 (reserved: the unknown partition, hk-01).
    let d = redirect_daemon("");
    let (status, text) = curl(&d, "GET", "/video/a.mp4?start=10", &[host, xff]);
    assert_eq!(status, 302, "{text}");
    assert_eq!(header(&text, "location"), Some("http://203.0.113.22/video/a.mp4?start=10"), "hk-01\n{text}");
    let udp = d.dig(&[ZONE, "A"]);
    assert_eq!(udp.answers("A"), vec!["203.0.113.22"], "DNS decides the same for 127.0.0.1\n{}", udp.text);
    assert_eq!(metric(&d, "lagran_http_redirects_total{node=\"hk-01\"}"), 1.0);
}

#[test]
fn http_302_for_a_cname_mode_host_goes_to_the_nodes_hostname() {
    if !have_tool("curl", "http_302_cname") {
        return;
    }
    // HTTP_LISTEN in the environment, as DNS_LISTEN; the proxy on 127.0.0.0/8 is trusted.
    let config = "[http_redirect]\ntrusted_proxies = [\"127.0.0.0/8\"]\n".to_string();
    let env = vec![("HTTP_LISTEN".to_string(), "127.0.0.1:0".to_string())];
    let d = Daemon::start(Options { env, config: Some(config), ..Options::default() });
    for node in ["gz-01", "hk-01", "kr-01"] {
        let body = serde_json::json!({ "hostname": format!("{node}.{ZONE}") });
        let (s, v) = d.http("PATCH", &format!("/api/v1/nodes/{node}"), Some(body), &[]);
        assert_eq!(s, 200, "{v}");
    }
    let body = serde_json::json!({ "zone": ZONE, "answer_mode": "cname" });
    let (s, v) = d.http("PUT", &format!("/api/v1/domains/cdn.{ZONE}"), Some(body), &[]);
    assert_eq!(s, 200, "{v}");
    let host = format!("Host: cdn.{ZONE}");
    let dig =
        d.dig_until(&[&format!("cdn.{ZONE}"), "A", "+subnet=58.60.1.1/32"], std::time::Duration::from_secs(10), |r| {
            !r.answers("CNAME").is_empty()
        });
    assert_eq!(dig.answers("CNAME"), vec![format!("gz-01.{ZONE}.")], "{}", dig.text);
    let (status, text) = curl(&d, "GET", "/a.mp4?x=1", &[&host, "X-Forwarded-For: 58.60.1.1"]);
    assert_eq!(status, 302, "{text}");
    assert_eq!(
        header(&text, "location"),
        Some(format!("http://gz-01.{ZONE}/a.mp4?x=1").as_str()),
        "the node DNS names with its CNAME, by hostname\n{text}"
    );
    assert_eq!(metric(&d, "lagran_http_redirects_total{node=\"gz-01\"}"), 1.0);
}

/// dnspython's DoQ client (over aioquic): one `A` query for the zone with ECS
/// `subnet`; prints the answer, the ECS echoed and whether it was padded.
const DOQ_CLIENT: &str = r#"
import sys
import dns.edns, dns.message, dns.query
host, port, subnet = sys.argv[1], int(sys.argv[2]), sys.argv[3]
addr, plen = subnet.split("/")
q = dns.message.make_query("edge.lagran.net", "A", use_edns=0, options=[dns.edns.ECSOption(addr, int(plen))])
r = dns.query.quic(q, host, port=port, timeout=5, verify=False)
ecs = [o for o in r.options if isinstance(o, dns.edns.ECSOption)]
print("answer", " ".join(rd.to_text() for rrset in r.answer for rd in rrset))
print("ecs", f"{ecs[0].address}/{ecs[0].srclen}/{ecs[0].scopelen}" if ecs else "none")
print("padded", any(o.otype == dns.edns.OptionType.PADDING for o in r.options))
"#;

/// (answer addresses, ECS as dig prints it, padded) from dnspython over QUIC.
fn doq_query(python: &Path, d: &Daemon, subnet: &str) -> (Vec<String>, Option<String>, bool) {
    let doq = d.entry("doq");
    let out = Command::new(python)
        .args(["-c", DOQ_CLIENT, &doq.ip().to_string(), &doq.port().to_string(), subnet])
        .output()
        .expect("running the dnspython DoQ client");
    let text = String::from_utf8_lossy(&out.stdout).into_owned();
    assert!(out.status.success(), "the DoQ query failed: {text}{}", String::from_utf8_lossy(&out.stderr));
    let field = |k: &str| text.lines().find_map(|l| l.strip_prefix(k).map(|v| v.trim().to_string()));
    let answers = field("answer ").unwrap_or_default().split_whitespace().map(str::to_string).collect();
    let ecs = field("ecs ").filter(|e| e != "none");
    (answers, ecs, field("padded ").as_deref() == Some("True"))
}

#[test]
fn doq_answers_like_udp_with_the_ecs_scope() {
    if !have_tool("dig", "doq_answers_like_udp") {
        return;
    }
    let Some(python) = doq_python("doq_answers_like_udp") else { return };
    let dir = tempfile::tempdir().expect("temp dir");
    let d = encrypted_daemon(dir.path());
    for subnet in [SHENZHEN, "123.112.0.0/24"] {
        let udp = d.dig(&[ZONE, "A", &format!("+subnet={subnet}")]);
        let (answers, ecs, padded) = doq_query(&python, &d, subnet);
        assert_eq!(answers, udp.answers("A"), "DoQ answers like UDP for {subnet}\n{}", udp.text);
        assert_eq!(ecs, udp.ecs, "DoQ echoes the same ECS scope as UDP for {subnet}");
        assert!(padded, "RFC 8467: the DoQ response is padded");
    }
    let (answers, _, _) = doq_query(&python, &d, SHENZHEN);
    assert_eq!(answers, vec!["203.0.113.21"], "gz-01 for Shenzhen Telecom");
    assert_eq!(metric(&d, "lagran_dns_queries_total{transport=\"doq\"}"), 3.0, "three DoQ queries counted");
}
