//! The edge takes its sites and certificates from the control plane:
//! a real `lagran control`, a real `lagran-edge` with no site of its own, and a
//! new site and certificate written through the API are served over HTTPS with
//! SNI — checked with `curl --resolve --cacert` and `openssl s_client
//! -servername` — without restarting the edge. A renewed certificate follows the
//! same way. Private keys are visible only to the node's own token or the admin.

use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpListener;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use serde_json::json;

use crate::support::{Daemon, Options, Role, have_tool, lagran_bin};

const ADMIN: &str = "admin-token-for-edge-config";
const AGENT: &str = "global-agent-token";
const OWN: &str = "gz-01-own-token";

/// A free loopback port (bound, then released for the edge to take).
pub(crate) fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port()
}

/// An origin answering every request `200 origin says hi` (one thread, bounded by the test).
pub(crate) fn start_origin() -> u16 {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let port = listener.local_addr().unwrap().port();
    std::thread::spawn(move || {
        for stream in listener.incoming().take(200) {
            let Ok(mut s) = stream else { continue };
            let _ = s.set_read_timeout(Some(Duration::from_secs(5)));
            let mut buf = [0u8; 4096];
            let _ = s.read(&mut buf);
            let body = "origin says hi";
            let _ = write!(
                s,
                "HTTP/1.1 200 OK\r\ncontent-length: {}\r\ncache-control: no-store\r\nconnection: close\r\n\r\n{body}",
                body.len()
            );
        }
    });
    port
}

pub(crate) struct Edge {
    pub(crate) child: Child,
    log: Arc<Mutex<String>>,
    _dir: tempfile::TempDir,
}

impl Edge {
    pub(crate) fn log(&self) -> String {
        self.log.lock().unwrap().clone()
    }
}

impl Drop for Edge {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

pub(crate) fn start_edge(config: &str) -> Edge {
    let bin = lagran_bin().with_file_name("lagran-edge");
    assert!(bin.is_file(), "{} is not built: run `cargo build --bins`", bin.display());
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("edge.toml");
    std::fs::write(&path, config).unwrap();
    let mut child = Command::new(bin)
        .arg("--config")
        .arg(&path)
        .env("RUST_LOG", "info,lagran_edge=debug")
        .env("NO_COLOR", "1")
        .env_remove("AGENT_TOKEN")
        .stdin(Stdio::null())
        .stdout(Stdio::piped()) // lagran-edge logs to stdout
        .stderr(Stdio::null())
        .spawn()
        .expect("starting lagran-edge");
    let stderr = child.stdout.take().unwrap();
    let log = Arc::new(Mutex::new(String::new()));
    let sink = log.clone();
    std::thread::spawn(move || {
        for line in BufReader::new(stderr).lines().map_while(Result::ok) {
            let mut l = sink.lock().unwrap();
            l.push_str(&line);
            l.push('\n');
        }
    });
    Edge { child, log, _dir: dir }
}

/// `curl --resolve NAME:PORT:127.0.0.1 --cacert CA https://NAME:PORT/path`: `(ok, body or error)`.
pub(crate) fn curl(name: &str, port: u16, ca: &Path) -> (bool, String) {
    let out = Command::new("curl")
        .args(["-sS", "--max-time", "5", "--resolve", &format!("{name}:{port}:127.0.0.1"), "--cacert"])
        .arg(ca)
        .arg(format!("https://{name}:{port}/hello"))
        .output()
        .expect("running curl");
    let ok = out.status.success();
    let text = if ok { String::from_utf8_lossy(&out.stdout) } else { String::from_utf8_lossy(&out.stderr) };
    (ok, text.into_owned())
}

/// The certificate `openssl s_client -servername NAME` receives (PEM), if any.
fn served_certificate(name: &str, port: u16) -> Option<String> {
    let out = Command::new("openssl")
        .args(["s_client", "-connect", &format!("127.0.0.1:{port}"), "-servername", name])
        .stdin(Stdio::null())
        .output()
        .expect("running openssl s_client");
    let text = String::from_utf8_lossy(&out.stdout).into_owned();
    let start = text.find("-----BEGIN CERTIFICATE-----")?;
    let end = text.find("-----END CERTIFICATE-----")? + "-----END CERTIFICATE-----".len();
    Some(text[start..end].to_string())
}

/// Normalises PEM for comparison (line breaks aside).
fn pem_body(pem: &str) -> String {
    pem.lines().filter(|l| !l.starts_with("-----")).collect()
}

pub(crate) fn certificate(name: &str, dir: &Path) -> (String, String, PathBuf) {
    let ck = rcgen::generate_simple_self_signed(vec![name.to_string()]).unwrap();
    let (cert, key) = (ck.cert.pem(), ck.key_pair.serialize_pem());
    let path = dir.join(format!("{}-{}.pem", name, rand::random::<u32>()));
    std::fs::write(&path, &cert).unwrap();
    (cert, key, path)
}

pub(crate) fn wait_for<T>(
    what: &str,
    within: Duration,
    mut probe: impl FnMut() -> Option<T>,
    log: impl Fn() -> String,
) -> T {
    let deadline = Instant::now() + within;
    loop {
        if let Some(v) = probe() {
            return v;
        }
        assert!(Instant::now() < deadline, "{what} did not happen within {within:?}; edge log:\n{}", log());
        std::thread::sleep(Duration::from_millis(250));
    }
}

#[test]
fn the_edge_picks_up_a_new_site_and_certificate_without_a_restart() {
    if !have_tool("curl", "edge_config") || !have_tool("openssl", "edge_config") {
        return;
    }
    let env = vec![("ADMIN_TOKEN".to_string(), ADMIN.to_string()), ("AGENT_TOKEN".to_string(), AGENT.to_string())];
    let control = Daemon::start(Options { role: Role::Control, env, ..Options::default() });
    let admin = [("authorization", format!("Bearer {ADMIN}"))];
    let admin: Vec<(&str, &str)> = admin.iter().map(|(k, v)| (*k, v.as_str())).collect();
    // The demo's gz-01 gets a token of its own: that is what reads private keys.
    let (s, v) = control.http("PATCH", "/api/v1/nodes/gz-01", Some(json!({"auth_token": OWN})), &admin);
    assert_eq!(s, 200, "{v}");

    let origin = start_origin();
    let (http, https) = (free_port(), free_port());
    let edge = start_edge(&format!(
        "listen_http = \"127.0.0.1:{http}\"\nlisten_https = \"127.0.0.1:{https}\"\nnode_name = \"gz-01\"\n\
         control_url = \"http://{}\"\nagent_token = \"{OWN}\"\nheartbeat_secs = 1\nconfig_poll_secs = 1\n",
        control.api
    ));
    let pid = edge.child.id();
    wait_for(
        "the edge's first read of the control plane",
        Duration::from_secs(15),
        || edge.log().contains("sites and certificates from the control plane applied").then_some(()),
        || edge.log(),
    );
    let dir = tempfile::tempdir().unwrap();
    let (cert, key, ca) = certificate("shop.test", dir.path());
    let (ok, err) = curl("shop.test", https, &ca);
    assert!(!ok, "no certificate for shop.test yet: {err}");
    assert_eq!(served_certificate("shop.test", https), None, "no certificate is served for an unknown name");

    // A new site and its certificate, written through the API.
    let site = json!({"origin": format!("http://127.0.0.1:{origin}"), "cache_ttl_secs": 0});
    let (s, v) = control.http("PUT", "/api/v1/sites/shop.test", Some(site), &admin);
    assert_eq!(s, 201, "{v}");
    let (s, v) =
        control.http("PUT", "/api/v1/certificates/shop.test", Some(json!({"cert_pem": cert, "key_pem": key})), &admin);
    assert_eq!(s, 201, "{v}");
    assert!(v.get("key_pem").is_none(), "the key is not echoed back: {v}");

    // Only the node's own token (with ?node=) or the admin token reads the key.
    let (_, agent_view) = control.http("GET", "/api/v1/certificates", None, &[("x-lagran-agent-token", AGENT)]);
    assert_eq!(agent_view[0]["domain"], "shop.test");
    assert!(agent_view[0].get("key_pem").is_none(), "the global agent token sees no key: {agent_view}");
    let (_, wrong) = control.http("GET", "/api/v1/certificates?node=gz-02", None, &[("x-lagran-agent-token", OWN)]);
    assert_eq!(wrong, json!({"error": "the agent token is wrong"}), "gz-01's token is not gz-02's");
    let (_, own) = control.http("GET", "/api/v1/certificates?node=gz-01", None, &[("x-lagran-agent-token", OWN)]);
    assert_eq!(own[0]["key_pem"], key, "the node's own token reads the key");
    let (_, by_admin) = control.http("GET", "/api/v1/certificates/shop.test", None, &admin);
    assert_eq!(by_admin["key_pem"], key);
    let (s, _) = control.http("PUT", "/api/v1/sites/x.test", Some(json!({"origin": "http://o"})), &[]);
    assert_eq!(s, 401, "writes need the admin token");

    // The running edge serves it: a real TLS client with SNI, through to the origin.
    let body = wait_for(
        "HTTPS for shop.test",
        Duration::from_secs(15),
        || {
            let (ok, text) = curl("shop.test", https, &ca);
            ok.then_some(text)
        },
        || edge.log(),
    );
    assert_eq!(body, "origin says hi");
    let served = served_certificate("shop.test", https).expect("openssl receives a certificate");
    assert_eq!(pem_body(&served), pem_body(&cert), "the certificate from the control plane, chosen by SNI");

    // A renewed certificate replaces the old one, still without a restart.
    let (cert2, key2, ca2) = certificate("shop.test", dir.path());
    let (s, v) = control.http(
        "PUT",
        "/api/v1/certificates/shop.test",
        Some(json!({"cert_pem": cert2, "key_pem": key2})),
        &admin,
    );
    assert_eq!(s, 200, "{v}");
    wait_for(
        "the renewed certificate",
        Duration::from_secs(15),
        || served_certificate("shop.test", https).filter(|c| pem_body(c) == pem_body(&cert2)),
        || edge.log(),
    );
    assert_eq!(curl("shop.test", https, &ca2), (true, "origin says hi".to_string()));

    // Deleting the site takes it off the edge (plain HTTP: 421 for an unknown host).
    let (s, _) = control.http("DELETE", "/api/v1/sites/shop.test", None, &admin);
    assert_eq!(s, 204);
    wait_for(
        "the site's removal",
        Duration::from_secs(15),
        || {
            let out = Command::new("curl")
                .args(["-s", "-o", "/dev/null", "-w", "%{http_code}", "-H", "host: shop.test"])
                .arg(format!("http://127.0.0.1:{http}/hello"))
                .output()
                .unwrap();
            (String::from_utf8_lossy(&out.stdout) == "421").then_some(())
        },
        || edge.log(),
    );
    assert_eq!(edge.child.id(), pid);
    let mut edge = edge;
    assert!(edge.child.try_wait().unwrap().is_none(), "the edge was never restarted:\n{}", edge.log());
}

/// `curl -H "host: HOST" http://127.0.0.1:PORT/hello`: (status, body).
fn get_plain(host: &str, port: u16) -> (String, String) {
    let out = Command::new("curl")
        .args(["-s", "--max-time", "5", "-w", "\n%{http_code}", "-H", &format!("host: {host}")])
        .arg(format!("http://127.0.0.1:{port}/hello"))
        .output()
        .expect("running curl");
    let text = String::from_utf8_lossy(&out.stdout).into_owned();
    let (body, status) = text.rsplit_once('\n').unwrap_or(("", &text));
    (status.to_string(), body.to_string())
}

#[test]
fn a_control_plane_site_with_several_origins_fails_over_on_the_edge() {
    if !have_tool("curl", "edge_config") {
        return;
    }
    let env = vec![("ADMIN_TOKEN".to_string(), ADMIN.to_string()), ("AGENT_TOKEN".to_string(), AGENT.to_string())];
    let control = Daemon::start(Options { role: Role::Control, env, ..Options::default() });
    let admin = [("authorization", format!("Bearer {ADMIN}"))];
    let admin: Vec<(&str, &str)> = admin.iter().map(|(k, v)| (*k, v.as_str())).collect();
    // The first origin is a port nothing listens on; the second answers.
    let (dead, live) = (free_port(), start_origin());
    let site = json!({
        "origins": [format!("http://127.0.0.1:{dead}"), format!("http://127.0.0.1:{live}")],
        "origin_host": "www.ha.test",
        "origin_health_path": "/hello",
        "cache_ttl_secs": 0,
    });
    let (s, v) = control.http("PUT", "/api/v1/sites/ha.test", Some(site), &admin);
    assert_eq!(s, 201, "{v}");
    assert_eq!(v["origin"], format!("http://127.0.0.1:{dead}"), "`origin` names the first: {v}");
    assert_eq!(v["origins"].as_array().map(Vec::len), Some(2), "{v}");
    let bad = json!({"origins": ["http://a", "http://b"], "origin_weights": [1]});
    let (s, v) = control.http("PUT", "/api/v1/sites/bad.test", Some(bad), &admin);
    assert_eq!((s, v["field"].as_str()), (422, Some("origin_weights")), "{v}");

    let http = free_port();
    let edge = start_edge(&format!(
        "listen_http = \"127.0.0.1:{http}\"\nnode_name = \"gz-01\"\ncontrol_url = \"http://{}\"\n\
         agent_token = \"{AGENT}\"\nheartbeat_secs = 1\nconfig_poll_secs = 1\norigin_health_secs = 1\n",
        control.api
    ));
    // Every request is answered, by the second origin, from the first one on.
    let first = wait_for(
        "the site from the control plane",
        Duration::from_secs(15),
        || Some(get_plain("ha.test", http)).filter(|(status, _)| status != "000" && status != "421"),
        || edge.log(),
    );
    assert_eq!(first, ("200".to_string(), "origin says hi".to_string()), "edge log:\n{}", edge.log());
    for _ in 0..5 {
        assert_eq!(get_plain("ha.test", http), ("200".to_string(), "origin says hi".to_string()));
    }
    wait_for(
        "the dead origin marked down",
        Duration::from_secs(15),
        || edge.log().contains("origin is down").then_some(()),
        || edge.log(),
    );
}
