//! No cleartext where a token, a table or a key travels:
//!
//! - a real `lagran-edge` reads its sites and certificates from an `https://`
//!   control URL, trusting a private CA given with `ca`, and serves them;
//! - the same edge, and an NS host (`lagran dns`), refuse an `http://` control
//!   URL to a non-loopback address unless `--insecure-control`, and warn when
//!   it is given (run in a network namespace of their own with only loopback,
//!   so nothing could leave the machine even if they tried);
//! - an NS host refuses a forged table with a huge epoch from its control URL,
//!   keeps taking the real ones, and never saves the forged one.

use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpListener;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use serde_json::{Value, json};

use crate::edge_config::{certificate, curl, free_port, start_edge, start_origin, wait_for};
use crate::support::{Daemon, Options, Role, have_tool, lagran_bin};
use lagran::api_client::ApiClient;
use lagran::control_tls::ClientTls;

const ADMIN: &str = "admin-token-for-cleartext-tests";
const AGENT: &str = "global-agent-token-cleartext";
const OWN: &str = "gz-01-own-token-cleartext";

/// A private CA and a certificate for 127.0.0.1 it signed: `(ca, cert, key)` files.
fn private_ca(dir: &Path) -> (PathBuf, PathBuf, PathBuf) {
    use rcgen::{BasicConstraints, CertificateParams, IsCa, KeyPair};
    let ca_key = KeyPair::generate().unwrap();
    let mut ca_params = CertificateParams::new(Vec::<String>::new()).unwrap();
    ca_params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
    let ca = ca_params.self_signed(&ca_key).unwrap();
    let key = KeyPair::generate().unwrap();
    let params = CertificateParams::new(vec!["127.0.0.1".to_string(), "localhost".to_string()]).unwrap();
    let cert = params.signed_by(&key, &ca, &ca_key).unwrap();
    let paths = (dir.join("control-ca.pem"), dir.join("control.pem"), dir.join("control.key"));
    std::fs::write(&paths.0, ca.pem()).unwrap();
    std::fs::write(&paths.1, cert.pem()).unwrap();
    std::fs::write(&paths.2, key.serialize_pem()).unwrap();
    paths
}

#[test]
fn the_edge_applies_sites_and_certificates_from_an_https_control_url_with_its_ca() {
    if !have_tool("curl", "cleartext") {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let (ca, cert, key) = private_ca(dir.path());
    let env = vec![("ADMIN_TOKEN".to_string(), ADMIN.to_string()), ("AGENT_TOKEN".to_string(), AGENT.to_string())];
    let args = ["--api-tls-cert", &cert.display().to_string(), "--api-tls-key", &key.display().to_string()]
        .map(String::from)
        .to_vec();
    let control = Daemon::start(Options { role: Role::Control, env, args, ..Options::default() });
    let rt = tokio::runtime::Runtime::new().unwrap();
    let api = ApiClient {
        base: format!("https://{}", control.api),
        admin_token: Some(ADMIN.into()),
        tls: ClientTls { ca: Some(ca.clone()), ..ClientTls::default() },
        ..ApiClient::default()
    };
    let call = |method: &str, path: &str, body: Value| {
        rt.block_on(api.call(method, path, Some(&body)))
            .unwrap_or_else(|e| panic!("{method} {path}: {e}\n{}", control.log()))
    };
    call("PATCH", "/api/v1/nodes/gz-01", json!({"auth_token": OWN}));
    let origin = start_origin();
    call(
        "PUT",
        "/api/v1/sites/shop.test",
        json!({"origin": format!("http://127.0.0.1:{origin}"), "cache_ttl_secs": 0}),
    );
    let (site_cert, site_key, site_ca) = certificate("shop.test", dir.path());
    call("PUT", "/api/v1/certificates/shop.test", json!({"cert_pem": site_cert, "key_pem": site_key}));

    let https = free_port();
    let edge = start_edge(&format!(
        "listen_http = \"127.0.0.1:{}\"\nlisten_https = \"127.0.0.1:{https}\"\nnode_name = \"gz-01\"\n\
         control_url = \"https://127.0.0.1:{}\"\nca = \"{}\"\nagent_token = \"{OWN}\"\nheartbeat_secs = 1\n\
         config_poll_secs = 1\n",
        free_port(),
        control.api.port(),
        ca.display()
    ));
    let body = wait_for(
        "HTTPS for shop.test with the certificate read over https://",
        Duration::from_secs(20),
        || {
            let (ok, text) = curl("shop.test", https, &site_ca);
            ok.then_some(text)
        },
        || edge.log(),
    );
    assert_eq!(body, "origin says hi");
    let log = edge.log();
    assert!(log.contains("sites and certificates from the control plane applied"), "{log}");
    assert!(!log.contains("without its private key"), "the key came over TLS: {log}");
    assert!(!log.contains("cannot read sites"), "no failed poll: {log}");
}

/// Runs `bin args…` in a new network namespace with only loopback (up) until
/// it exits or `within` passes; `(exit status or None if still running, output)`.
fn run_isolated(bin: &Path, args: &[&str], within: Duration) -> (Option<std::process::ExitStatus>, String) {
    let dir = tempfile::tempdir().unwrap();
    let mut child = Command::new("unshare")
        .args(["--net", "sh", "-c", "ip link set lo up && exec \"$0\" \"$@\""])
        .arg(bin)
        .args(args)
        .current_dir(dir.path())
        .env("NO_COLOR", "1")
        .env_remove("AGENT_TOKEN")
        .env_remove("ADMIN_TOKEN")
        .env_remove("LAGRAN_CONTROL")
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("unshare --net (root needed)");
    let output = Arc::new(Mutex::new(String::new()));
    let readers: Vec<_> =
        [Box::new(child.stdout.take().unwrap()) as Box<dyn Read + Send>, Box::new(child.stderr.take().unwrap())]
            .into_iter()
            .map(|pipe| {
                let sink = output.clone();
                std::thread::spawn(move || {
                    for line in BufReader::new(pipe).lines().map_while(Result::ok) {
                        let mut s = sink.lock().unwrap();
                        s.push_str(&line);
                        s.push('\n');
                    }
                })
            })
            .collect();
    let deadline = Instant::now() + within;
    let status = loop {
        if let Some(s) = child.try_wait().unwrap() {
            break Some(s);
        }
        if Instant::now() >= deadline {
            let _ = child.kill();
            let _ = child.wait();
            break None;
        }
        std::thread::sleep(Duration::from_millis(100));
    };
    for r in readers {
        let _ = r.join();
    }
    let text = output.lock().unwrap().clone();
    (status, text)
}

#[test]
fn the_edge_refuses_cleartext_to_another_machine_without_insecure_control() {
    if !have_tool("unshare", "cleartext") {
        return;
    }
    let bin = lagran_bin().with_file_name("lagran-edge");
    let dir = tempfile::tempdir().unwrap();
    let config = dir.path().join("edge.toml");
    std::fs::write(&config, "control_url = \"http://192.0.2.1:8080\"\nagent_token = \"t\"\n").unwrap();
    let config = config.display().to_string();
    let (status, out) = run_isolated(&bin, &["--config", &config], Duration::from_secs(15));
    let status = status.unwrap_or_else(|| panic!("the edge kept running with an http:// control_url:\n{out}"));
    assert!(!status.success(), "{out}");
    assert!(out.contains("cleartext") && out.contains("insecure_control") && out.contains("192.0.2.1"), "{out}");

    // With --insecure-control it starts, and says what it accepted.
    let (status, out) = run_isolated(&bin, &["--config", &config, "--insecure-control"], Duration::from_secs(3));
    assert!(status.is_none(), "the edge runs with --insecure-control:\n{out}");
    assert!(out.contains("insecure_control is on"), "a warning at start:\n{out}");
}

#[test]
fn an_ns_host_refuses_cleartext_to_another_machine_without_insecure_control() {
    if !have_tool("unshare", "cleartext") {
        return;
    }
    let args = ["dns", "--control", "http://192.0.2.1:8080", "--dns-listen", "127.0.0.1:0", "--api-listen"];
    let args: Vec<&str> = args.into_iter().chain(["127.0.0.1:0", "--state-file", "routes.json"]).collect();
    let (status, out) = run_isolated(&lagran_bin(), &args, Duration::from_secs(15));
    let status = status.unwrap_or_else(|| panic!("lagran dns kept running with an http:// control URL:\n{out}"));
    assert!(!status.success(), "{out}");
    assert!(out.contains("cleartext") && out.contains("--insecure-control") && out.contains("192.0.2.1"), "{out}");

    let with_flag: Vec<&str> = args.iter().copied().chain(["--insecure-control"]).collect();
    let (status, out) = run_isolated(&lagran_bin(), &with_flag, Duration::from_secs(3));
    assert!(status.is_none(), "lagran dns runs with --insecure-control:\n{out}");
    assert!(out.contains("insecure_control is on"), "a warning at start:\n{out}");
}

/// A control URL that answers the route-table stream with `answers` in turn
/// (the last one again and again); counts the requests.
fn fake_control(answers: Vec<Vec<u8>>) -> (u16, Arc<Mutex<usize>>) {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let port = listener.local_addr().unwrap().port();
    let served = Arc::new(Mutex::new(0usize));
    let count = served.clone();
    std::thread::spawn(move || {
        for stream in listener.incoming().take(500) {
            let Ok(mut s) = stream else { continue };
            let _ = s.set_read_timeout(Some(Duration::from_secs(5)));
            // The whole request head first: closing with unread bytes would reset the connection.
            let (mut head, mut buf) = (Vec::new(), [0u8; 4096]);
            while !head.windows(4).any(|w| w == b"\r\n\r\n") {
                match s.read(&mut buf) {
                    Ok(0) | Err(_) => break,
                    Ok(n) => head.extend_from_slice(&buf[..n]),
                }
            }
            let n = {
                let mut c = count.lock().unwrap();
                *c += 1;
                *c
            };
            let body = &answers[(n - 1).min(answers.len() - 1)];
            let answer = format!(
                "HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ncontent-length: {}\r\nconnection: close\r\n\r\n",
                body.len()
            );
            let _ = s.write_all(answer.as_bytes()).and_then(|()| s.write_all(body));
            let _ = s.shutdown(std::net::Shutdown::Write);
            while matches!(s.read(&mut buf), Ok(n) if n > 0) {}
        }
    });
    (port, served)
}

#[test]
fn an_ns_host_refuses_a_forged_table_with_a_huge_epoch() {
    let control = Daemon::start(Options { role: Role::Control, ..Options::default() });
    // The raw answer, passed on byte for byte (a JSON value round trip would reorder it).
    let url = format!("http://{}/api/v1/routes/table?since=0&epoch=0&deltas=1", control.api);
    let real = ureq::get(&url).timeout(Duration::from_secs(10)).call().unwrap().into_string().unwrap();
    let parsed: Value = serde_json::from_str(&real).unwrap();
    let real_epoch = parsed["full"]["epoch"].as_u64().expect("a full table with its epoch");
    let field = format!("\"epoch\":{real_epoch}");
    assert_eq!(real.matches(&field).count(), 1, "one epoch field in {real}");
    let forged = real.replace(&field, &format!("\"epoch\":{}", 1u64 << 60));
    let (port, served) = fake_control(vec![forged.into_bytes(), real.into_bytes()]);

    let dir = tempfile::tempdir().unwrap();
    let state = dir.path().join("routes.json");
    let ns = Daemon::start(Options {
        role: Role::Dns { control: format!("http://127.0.0.1:{port}"), state_file: state.clone() },
        ..Options::default()
    });
    let deadline = Instant::now() + Duration::from_secs(20);
    while !(ns.log().contains("route table received") && std::fs::metadata(&state).is_ok()) {
        assert!(Instant::now() < deadline, "the real table was not taken; log:\n{}", ns.log());
        std::thread::sleep(Duration::from_millis(200));
    }
    let log = ns.log();
    assert!(log.contains("beyond what the control plane can have issued"), "the forged table was refused:\n{log}");
    assert!(*served.lock().unwrap() >= 2, "asked again after the refusal");
    let saved: Value = serde_json::from_slice(&std::fs::read(&state).unwrap()).unwrap();
    assert_eq!(saved["epoch"].as_u64(), Some(real_epoch), "the real table is saved, never the forged one");
    let (_, metrics) = ns.get("/metrics");
    let metrics = metrics.as_str().unwrap_or_default().to_string();
    let rejected = metrics.lines().find_map(|l| l.strip_prefix("lagran_route_tables_rejected_total "));
    assert!(rejected.and_then(|v| v.trim().parse::<u64>().ok()).is_some_and(|n| n >= 1), "{metrics}");
    let epoch = metrics.lines().find_map(|l| l.strip_prefix("lagran_route_table_epoch "));
    assert_eq!(epoch.map(str::trim), Some(real_epoch.to_string().as_str()), "{metrics}");
}
