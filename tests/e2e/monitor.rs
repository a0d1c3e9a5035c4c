//! `lagran monitor --watch --listen`: the outside monitor against two NS hosts,
//! one of which is frozen on an old table (restarted from its state file with
//! no control plane to follow). Its `/metrics` shows the frozen host's lag and
//! mismatches, and none for the host that follows, within one interval.

use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use serde_json::json;

use crate::support::{Daemon, Options, Role, have_tool, lagran_bin};

const SHENZHEN: [&str; 3] = ["edge.lagran.net", "A", "+subnet=58.60.0.0/24"];

/// A running monitor, killed on drop.
struct Monitor(Child);

impl Drop for Monitor {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

fn free_port() -> std::net::SocketAddr {
    std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap()
}

/// The value of the series `name{labels}` in `text`, if present.
fn series(text: &str, name: &str) -> Option<f64> {
    text.lines().find_map(|l| l.strip_prefix(name)?.strip_prefix(' ')?.parse().ok())
}

#[test]
fn the_monitor_shows_a_frozen_ns_host_lagging_and_mismatching() {
    if !have_tool("dig", "monitor") {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let control = Daemon::start(Options { role: Role::Control, ..Options::default() });
    let follower = |state: &str| {
        let role = Role::Dns { control: format!("http://{}", control.api), state_file: dir.path().join(state) };
        Daemon::start(Options { role, ..Options::default() })
    };
    let ns1 = follower("ns1.json");
    let ns2 = follower("ns2.json");
    for ns in [&ns1, &ns2] {
        let r = ns.dig_until(&SHENZHEN, Duration::from_secs(10), |r| !r.answers("A").is_empty());
        assert_eq!(r.answers("A"), vec!["203.0.113.21"], "{}", ns.log());
    }
    // Frozen: ns2 restarts from its state file, following an address where nothing listens.
    drop(ns2);
    let nothing = free_port();
    let role = Role::Dns { control: format!("http://{nothing}"), state_file: dir.path().join("ns2.json") };
    let ns2 = Daemon::start(Options { role, ..Options::default() });
    let (s, _) = control.http("PATCH", "/api/v1/nodes/gz-01", Some(json!({"status": "offline"})), &[]);
    assert_eq!(s, 200);
    let r = ns1.dig_until(&SHENZHEN, Duration::from_secs(5), |r| r.answers("A") == vec!["203.0.113.22"]);
    assert_eq!(r.answers("A"), vec!["203.0.113.22"], "ns1 follows\n{}", ns1.log());
    assert_eq!(ns2.dig(&SHENZHEN).answers("A"), vec!["203.0.113.21"], "ns2 is frozen");

    let listen = free_port();
    let child = Command::new(lagran_bin())
        .args(["--api", &format!("http://{}", control.api), "monitor", "--zone", "edge.lagran.net"])
        .args(["--ns", &ns1.dns.to_string(), "--ns", &ns2.dns.to_string(), "--watch", "1"])
        .args(["--listen", &listen.to_string(), "--expect", "edge.lagran.net@58.60.0.0/24"])
        .env_remove("ADMIN_TOKEN")
        .env_remove("AGENT_TOKEN")
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .expect("starting lagran monitor");
    let _monitor = Monitor(child);
    // One interval (1 s) after its start, bounded: the first round's figures.
    let deadline = Instant::now() + Duration::from_secs(15);
    let mut text = String::new();
    while Instant::now() < deadline {
        if let Ok(r) = ureq::get(&format!("http://{listen}/metrics")).timeout(Duration::from_secs(2)).call() {
            text = r.into_string().unwrap_or_default();
            if series(&text, "lagran_monitor_rounds_total").unwrap_or(0.0) >= 1.0 {
                break;
            }
        }
        std::thread::sleep(Duration::from_millis(200));
    }
    let started = series(&text, "lagran_monitor_rounds_total").unwrap_or(0.0);
    assert!(started >= 1.0, "no round within 15 s:\n{text}");
    for t in ["udp", "tcp"] {
        let of = |name: &str, ns: std::net::SocketAddr| {
            series(&text, &format!("{name}{{ns=\"{ns}\",transport=\"{t}\"}}"))
                .unwrap_or_else(|| panic!("{name} for {ns} over {t} missing:\n{text}"))
        };
        assert_eq!(of("lagran_monitor_up", ns1.dns), 1.0, "{text}");
        assert_eq!(of("lagran_monitor_up", ns2.dns), 1.0, "{text}");
        assert_eq!(of("lagran_monitor_version_mismatch", ns1.dns), 0.0, "ns1 follows:\n{text}");
        assert_eq!(of("lagran_monitor_version_mismatch", ns2.dns), 1.0, "ns2 is frozen:\n{text}");
        assert_eq!(of("lagran_monitor_lag_seconds", ns1.dns), 0.0, "{text}");
        assert!(of("lagran_monitor_lag_seconds", ns2.dns) > 0.0, "ns2 lags:\n{text}");
        assert_eq!(of("lagran_monitor_answer_mismatches", ns1.dns), 0.0, "{text}");
        assert_eq!(of("lagran_monitor_answer_mismatches", ns2.dns), 1.0, "ns2 still answers gz-01:\n{text}");
        assert!(of("lagran_monitor_rtt_seconds", ns2.dns) > 0.0, "{text}");
    }
}
