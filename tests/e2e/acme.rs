//! Certificates by ACME, end to end: Debian's `pebble` as the ACME server,
//! resolving names through Lagran's own DNS (`-dnsserver`), a real `lagran
//! serve` as control plane and NS, and a real `lagran-edge` on pebble's
//! HTTP-01 port. A site with `"acme": true` gets a certificate from pebble
//! (the challenge answered by the edge from the control plane), the edge
//! serves it under the site's SNI to a client trusting pebble's root; a
//! renewal asked through the API (`POST /api/v1/sites/{domain}/certificate/renew`)
//! and then a renewal window wider than the certificate's lifetime each
//! replace it with a certificate of a new serial number.

use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use serde_json::json;

use crate::edge_config::{curl, free_port, start_edge, start_origin, wait_for};
use crate::support::{Daemon, Options, Role, have_tool};

const ADMIN: &str = "admin-token-for-acme38-test";
const AGENT: &str = "agent-token-for-acme38-test";
const OWN: &str = "gz-01-own-token-acme38";
/// A node hostname answers A with the node's address: pebble finds the edge through it.
const HOST: &str = "shop.edge.lagran.net";

struct Pebble(Child);

impl Drop for Pebble {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// Pebble's HTTPS certificate for `localhost`, signed by a CA of the test's own: `(ca.pem, cert, key)` paths.
fn pebble_tls(dir: &Path) -> (std::path::PathBuf, std::path::PathBuf, std::path::PathBuf) {
    let ca_key = rcgen::KeyPair::generate().unwrap();
    let mut ca_params = rcgen::CertificateParams::new(Vec::<String>::new()).unwrap();
    ca_params.is_ca = rcgen::IsCa::Ca(rcgen::BasicConstraints::Unconstrained);
    ca_params.distinguished_name.push(rcgen::DnType::CommonName, "acme38 test CA for pebble");
    let ca = ca_params.self_signed(&ca_key).unwrap();
    let key = rcgen::KeyPair::generate().unwrap();
    let leaf = rcgen::CertificateParams::new(vec!["localhost".to_string()]).unwrap().signed_by(&key, &ca, &ca_key);
    let paths = (dir.join("ca.pem"), dir.join("pebble-cert.pem"), dir.join("pebble-key.pem"));
    std::fs::write(&paths.0, ca.pem()).unwrap();
    std::fs::write(&paths.1, leaf.unwrap().pem()).unwrap();
    std::fs::write(&paths.2, key.serialize_pem()).unwrap();
    paths
}

fn start_pebble(dir: &Path, port: u16, management: u16, http01: u16, dns: u16) -> Pebble {
    let (_, cert, key) = pebble_tls(dir);
    let config = json!({"pebble": {
        "listenAddress": format!("127.0.0.1:{port}"),
        "managementListenAddress": format!("127.0.0.1:{management}"),
        "certificate": cert, "privateKey": key,
        "httpPort": http01, "tlsPort": free_port(),
        "ocspResponderURL": "", "externalAccountBindingRequired": false,
    }});
    let path = dir.join("pebble-config.json");
    std::fs::write(&path, config.to_string()).unwrap();
    let child = Command::new("pebble")
        .arg("-config")
        .arg(&path)
        .args(["-dnsserver", &format!("127.0.0.1:{dns}")])
        .env("PEBBLE_VA_NOSLEEP", "1")
        .env("PEBBLE_WFE_NONCEREJECT", "0")
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .expect("starting pebble");
    Pebble(child)
}

/// `lagran serve` with the demo zone, on fixed ports, ordering from pebble.
fn start_lagran(db: &str, dns: u16, api: u16, acme: &str) -> Daemon {
    let env = vec![("ADMIN_TOKEN".to_string(), ADMIN.to_string()), ("AGENT_TOKEN".to_string(), AGENT.to_string())];
    Daemon::start(Options {
        role: Role::Serve,
        env,
        database_url: Some(db.to_string()),
        dns_listen: Some(format!("127.0.0.1:{dns}")),
        api_listen: Some(format!("127.0.0.1:{api}")),
        config: Some(acme.to_string()),
        ..Options::default()
    })
}

/// The serial number (hex) of the certificate the edge serves for `name`, if any.
fn served_serial(name: &str, port: u16) -> Option<String> {
    let shake = Command::new("openssl")
        .args(["s_client", "-connect", &format!("127.0.0.1:{port}"), "-servername", name])
        .stdin(Stdio::null())
        .stderr(Stdio::null())
        .output()
        .ok()?;
    let mut x509 = Command::new("openssl")
        .args(["x509", "-noout", "-serial", "-issuer"])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .ok()?;
    use std::io::Write;
    x509.stdin.take()?.write_all(&shake.stdout).ok()?;
    let out = String::from_utf8(x509.wait_with_output().ok()?.stdout).ok()?;
    // Pebble's intermediates are named "Pebble Intermediate CA …".
    out.contains("Pebble").then_some(())?;
    out.lines().find_map(|l| l.strip_prefix("serial=")).map(str::to_string)
}

/// Pebble's root of this run, which signs (through its intermediate) what it issues.
fn pebble_root(management: u16, dir: &Path) -> std::path::PathBuf {
    let out = Command::new("curl")
        .args(["-sSk", "--max-time", "5", &format!("https://127.0.0.1:{management}/roots/0")])
        .output()
        .expect("running curl");
    assert!(out.status.success(), "pebble's root: {}", String::from_utf8_lossy(&out.stderr));
    let path = dir.join("pebble-root.pem");
    std::fs::write(&path, &out.stdout).unwrap();
    path
}

#[test]
fn a_site_gets_its_certificate_from_pebble_and_renews_it() {
    if !have_tool("pebble", "acme") || !have_tool("curl", "acme") || !have_tool("openssl", "acme") {
        return;
    }
    let dir = tempfile::Builder::new().prefix("lagran-acme38-").tempdir().unwrap();
    let (dns, api, acme_port, management) = (free_port(), free_port(), free_port(), free_port());
    let (http, https) = (free_port(), free_port());
    let _pebble = start_pebble(dir.path(), acme_port, management, http, dns);
    let acme = |renew_before_days: u64| {
        format!(
            "[acme]\ndirectory_url = \"https://localhost:{acme_port}/dir\"\ncontact_email = \"ops@acme38.test\"\n\
             ca_file = \"{}\"\ncheck_secs = 1\nrenew_before_days = {renew_before_days}\n",
            dir.path().join("ca.pem").display()
        )
    };
    let db = format!("sqlite://{}/lagran.db", dir.path().display());
    let lagran = start_lagran(&db, dns, api, &acme(30));
    let admin = format!("Bearer {ADMIN}");
    let admin = [("authorization", admin.as_str())];
    // The demo's gz-01 is the edge below: its hostname answers its (loopback) address.
    let node = json!({"auth_token": OWN, "public_ip": "127.0.0.1", "public_ipv6": null, "hostname": HOST});
    let (s, v) = lagran.http("PATCH", "/api/v1/nodes/gz-01", Some(node), &admin);
    assert_eq!(s, 200, "{v}");

    let origin = start_origin();
    let edge = start_edge(&format!(
        "listen_http = \"127.0.0.1:{http}\"\nlisten_https = \"127.0.0.1:{https}\"\nnode_name = \"gz-01\"\n\
         control_url = \"http://127.0.0.1:{api}\"\nagent_token = \"{OWN}\"\nheartbeat_secs = 1\nconfig_poll_secs = 1\n"
    ));
    let site = json!({"origin": format!("http://127.0.0.1:{origin}"), "cache_ttl_secs": 0, "acme": true});
    let (s, v) = lagran.http("PUT", &format!("/api/v1/sites/{HOST}"), Some(site), &admin);
    assert_eq!(s, 201, "{v}");
    assert_eq!(v["acme"], true, "{v}");

    let first = wait_for(
        "a certificate from pebble on the edge",
        Duration::from_secs(90),
        || served_serial(HOST, https),
        || format!("edge:\n{}\nlagran:\n{}", edge.log(), lagran.log()),
    );
    let root = pebble_root(management, dir.path());
    let (ok, body) = curl(HOST, https, &root);
    assert!(ok && body == "origin says hi", "a client trusting pebble's root reaches the origin: {body}");
    let (s, store_view) = lagran.http("GET", &format!("/api/v1/certificates/{HOST}"), None, &admin);
    assert_eq!(s, 200, "{store_view}");
    assert!(store_view["key_pem"].as_str().is_some_and(|k| k.contains("PRIVATE KEY")), "the key is kept");
    let metrics = ureq::get(&format!("http://127.0.0.1:{api}/metrics")).call().unwrap().into_string().unwrap();
    let expiry = metrics
        .lines()
        .find_map(|l| l.strip_prefix(&format!("lagran_certificate_expiry_seconds{{domain=\"{HOST}\"}} ")))
        .and_then(|v| v.parse::<i64>().ok())
        .unwrap_or_else(|| panic!("no expiry metric for {HOST}:\n{metrics}"));
    assert!(expiry > 30 * 86_400, "pebble's certificate is valid for long: {expiry}");
    assert!(metrics.contains("lagran_acme_orders_total{result=\"issued\"} 1"), "{metrics}");
    let (_, warnings) = lagran.http("GET", "/api/v1/console/certificates", None, &admin);
    assert_eq!(warnings, json!([]), "a fresh certificate is no console warning");

    // A renewal asked through the API, far from the renewal window: renewed now.
    let (s, v) = lagran.http("POST", &format!("/api/v1/sites/{HOST}/certificate/renew"), None, &admin);
    assert_eq!((s, &v["domain"]), (202, &json!(HOST)), "{v}");
    let second = wait_for(
        "a certificate renewed on request on the edge",
        Duration::from_secs(90),
        || served_serial(HOST, https).filter(|s| *s != first),
        || format!("edge:\n{}\nlagran:\n{}", edge.log(), lagran.log()),
    );
    let (ok, body) = curl(HOST, https, &root);
    assert!(ok && body == "origin says hi", "the renewed certificate verifies too: {body}");
    let metrics = ureq::get(&format!("http://127.0.0.1:{api}/metrics")).call().unwrap().into_string().unwrap();
    assert!(metrics.contains("lagran_acme_orders_total{result=\"issued\"} 2"), "one order per renewal: {metrics}");

    // The same store, a renewal window wider than the certificate's lifetime: renewed at once.
    drop(lagran);
    let lagran = start_lagran(&db, dns, api, &acme(36_500));
    let third = wait_for(
        "a certificate renewed by its window on the edge",
        Duration::from_secs(90),
        || served_serial(HOST, https).filter(|s| *s != second),
        || format!("edge:\n{}\nlagran:\n{}", edge.log(), lagran.log()),
    );
    assert_ne!(first, third);
    let (ok, body) = curl(HOST, https, &root);
    assert!(ok && body == "origin says hi", "the renewed certificate verifies too: {body}");
    assert!(lagran.log().contains("ACME account restored from the store"), "one account, kept in the store");
}
