//! The faults, one at a time under the load, and the run that measures each.

use std::net::SocketAddr;
use std::path::Path;
use std::process::Command;
use std::time::{Duration, Instant};

use super::Profile;
use super::cluster::{Cluster, HOST_ADDR, NS1_ADDR, api, leader_of};
use super::flood;
use super::mitm::Mitm;
use super::traffic::{Probe, Snapshot, Traffic, Transport, answers_right, leader_table, oracle};

/// One row of the chaos table.
#[derive(Debug)]
pub struct Row {
    pub fault: &'static str,
    pub seen: Snapshot,
    pub withdrawn: u64,
    pub recovery: Option<Duration>,
    /// What the fault itself observed (a failure of its own when `fault_failed`).
    pub note: String,
    pub fault_failed: bool,
}

type Fault = fn(&mut Cluster, &Profile, &Path) -> (String, bool);

const FAULTS: [(&str, Fault); 8] = [
    ("PostgreSQL read-only", read_only),
    ("PostgreSQL killed, restarted", pg_killed),
    ("leader SIGSTOPped", leader_paused),
    ("ns1 cut from control (iptables)", partition),
    ("ns2 clock stepped +1 h, -1 h", clock_step),
    ("forged table (man in the middle)", forged_table),
    ("idle HTTP/2 connections on the edge", idle_h2),
    ("spoofed DoQ Initial flood", doq_flood),
];

pub fn run_all(profile: Profile, python: &Path) -> Vec<Row> {
    let mut c = Cluster::start();
    let ns1 = SocketAddr::from((NS1_ADDR, 53));
    let probes = oracle(&[ns1, c.ns2.dns]);
    let (names, ips) = serving_nodes(&c);
    let mut traffic = Traffic::new();
    for (target, transport) in [(ns1, Transport::Udp), (ns1, Transport::Tcp), (c.ns2.dns, Transport::Udp)] {
        traffic.querier(target, transport, probes.clone());
    }
    traffic.querier(c.ns2.dns, Transport::Tcp, probes.clone());
    traffic.querier(c.dot, Transport::Dot, probes.clone());
    traffic.heartbeats(c.control_addrs(), names);
    traffic.monitor(c.control_addrs(), ips.clone());

    let healthy = Healthy { targets: [ns1, c.ns2.dns], probes: &probes, ips: &ips };
    let mut rows = vec![measure(&mut c, &traffic, &profile, &healthy, "none (baseline)", python, |_, p, _| {
        std::thread::sleep(p.fault);
        (String::new(), false)
    })];
    let only = std::env::var("LAGRAN_CHAOS_ONLY").unwrap_or_default();
    for (name, fault) in FAULTS.into_iter().filter(|(name, _)| name.contains(only.as_str())) {
        rows.push(measure(&mut c, &traffic, &profile, &healthy, name, python, fault));
    }
    traffic.stop();
    rows
}

/// Runs `fault`, then waits for recovery; the counts cover both.
fn measure(
    c: &mut Cluster,
    traffic: &Traffic,
    profile: &Profile,
    healthy: &Healthy,
    name: &'static str,
    python: &Path,
    fault: impl FnOnce(&mut Cluster, &Profile, &Path) -> (String, bool),
) -> Row {
    let before = traffic.counts.snapshot();
    traffic.counts.reset_withdrawn();
    eprintln!("chaos: {name}");
    let (note, fault_failed) = fault(c, profile, python);
    let healed = Instant::now();
    let recovery = wait_recovered(c, healthy, profile.recovery_limit).then(|| healed.elapsed());
    // A second of settled traffic after recovery belongs to the fault too.
    std::thread::sleep(Duration::from_secs(1));
    Row {
        fault: name,
        seen: traffic.counts.snapshot().since(before),
        withdrawn: traffic.counts.reset_withdrawn(),
        recovery,
        note,
        fault_failed,
    }
}

/// The nodes in the leader's table before any fault: names (for the
/// heartbeats) and addresses (for the monitor).
fn serving_nodes(c: &Cluster) -> (Vec<String>, Vec<String>) {
    let leader = c.leader().expect("a leader before the faults");
    let (_, nodes) = api(c.controls[leader].api, "GET", "/api/v1/nodes", None).expect("GET /api/v1/nodes");
    let table = leader_table(&c.control_addrs()).expect("the leader's table");
    let mut names = Vec::new();
    let mut ips = Vec::new();
    for n in nodes.as_array().expect("a node list") {
        let (Some(name), Some(ip)) = (n["name"].as_str(), n["public_ip"].as_str()) else { continue };
        names.push(name.to_string());
        if table.contains(&format!("\"{ip}\"")) {
            ips.push(ip.to_string());
        }
    }
    assert!(!ips.is_empty(), "no node address in the table: {table}");
    (names, ips)
}

/// What recovery means: the NS hosts' addresses, the probes with the
/// oracle's answers, and the nodes that must be in the table.
struct Healthy<'a> {
    targets: [SocketAddr; 2],
    probes: &'a [Probe],
    ips: &'a [String],
}

/// Both NS hosts give the oracle's answers, a leader confirms both on its
/// current table, and every node of the baseline is in it.
fn recovered(c: &Cluster, h: &Healthy) -> bool {
    if !h.targets.iter().all(|t| answers_right(*t, h.probes)) {
        return false;
    }
    let ips = h.ips;
    let controls = c.control_addrs();
    let Some(leader) = leader_of(&controls) else { return false };
    let Ok((200, v)) = api(controls[leader], "GET", "/api/v1/nshosts", None) else { return false };
    let current = |h: &serde_json::Value| h["epoch"] == v["epoch"] && h["version"] == v["version"];
    let hosts = v["nshosts"].as_array().cloned().unwrap_or_default();
    let both = ["ns1", "ns2"].iter().all(|n| hosts.iter().any(|h| h["name"] == *n && current(h)));
    both && leader_table(&controls).is_some_and(|t| ips.iter().all(|ip| t.contains(&format!("\"{ip}\""))))
}

fn wait_recovered(c: &Cluster, h: &Healthy, limit: Duration) -> bool {
    let deadline = Instant::now() + limit;
    while Instant::now() < deadline {
        if recovered(c, h) {
            return true;
        }
        std::thread::sleep(Duration::from_millis(250));
    }
    false
}

/// Runs each statement on its own (autocommit) in one psql session.
fn psql(c: &Cluster, statements: &[&str]) {
    let mut cmd = Command::new("psql");
    cmd.args(["-X", "-q", "-o", "/dev/null", "-v", "ON_ERROR_STOP=1", &c.pg.url()]);
    for sql in statements {
        cmd.args(["-c", sql]);
    }
    assert!(cmd.status().is_ok_and(|s| s.success()), "psql {statements:?}");
}

/// Every new transaction of every session read-only (the server reloads the
/// setting into open sessions): what a full disk or a promoted-away primary
/// looks like to the control plane.
fn read_only(c: &mut Cluster, p: &Profile, _: &Path) -> (String, bool) {
    psql(c, &["ALTER SYSTEM SET default_transaction_read_only = on", "SELECT pg_reload_conf()"]);
    std::thread::sleep(p.fault);
    let heal = ["SET default_transaction_read_only = off", "ALTER SYSTEM RESET default_transaction_read_only"];
    psql(c, &[heal[0], heal[1], "SELECT pg_reload_conf()"]);
    (format!("{} s of refused writes", p.fault.as_secs()), false)
}

fn pg_killed(c: &mut Cluster, p: &Profile, _: &Path) -> (String, bool) {
    c.pg.kill().expect("killing PostgreSQL");
    std::thread::sleep(p.fault / 2);
    let started = Instant::now();
    let mut last = None;
    while started.elapsed() < Duration::from_secs(30) {
        match c.pg.restart() {
            Ok(()) => {
                last = None;
                break;
            }
            Err(e) => last = Some(e.to_string()),
        }
        std::thread::sleep(Duration::from_secs(1));
    }
    match last {
        None => (format!("down {} s", (p.fault / 2).as_secs()), false),
        Some(e) => (format!("PostgreSQL did not restart: {e}"), true),
    }
}

fn signal(pid: u32, sig: &str) {
    let ok = Command::new("kill").args([sig, &pid.to_string()]).status().is_ok_and(|s| s.success());
    assert!(ok, "kill {sig} {pid}");
}

fn leader_paused(c: &mut Cluster, p: &Profile, _: &Path) -> (String, bool) {
    let Some(leader) = c.leader() else { return ("no leader to pause".into(), true) };
    let pid = c.controls[leader].pid();
    signal(pid, "-STOP");
    std::thread::sleep(p.pause);
    let during = leader_of(&c.control_addrs());
    signal(pid, "-CONT");
    let took_over = during.is_some_and(|l| l != leader);
    (format!("paused {} s; standby took over: {}", p.pause.as_secs(), if took_over { "yes" } else { "no" }), false)
}

/// Adds (`-I`) or removes (`-D`) the rules dropping what `ns1` sends to the
/// control processes' ports (its DNS answers to the queriers still flow).
fn ns1_iptables(c: &Cluster, op: &str) {
    for control in c.control_addrs() {
        let ok = Command::new("ip")
            .args(["netns", "exec", c.ns1_namespace(), "iptables", op, "OUTPUT", "-p", "tcp"])
            .args(["-d", &HOST_ADDR.to_string(), "--dport", &control.port().to_string(), "-j", "DROP"])
            .status()
            .is_ok_and(|s| s.success());
        assert!(ok, "iptables {op} in the ns1 namespace");
    }
}

fn partition(c: &mut Cluster, p: &Profile, _: &Path) -> (String, bool) {
    ns1_iptables(c, "-I");
    std::thread::sleep(p.fault);
    ns1_iptables(c, "-D");
    (format!("{} s without the control plane", p.fault.as_secs()), false)
}

fn clock_step(c: &mut Cluster, p: &Profile, _: &Path) -> (String, bool) {
    for offset in ["+3600", "-3600"] {
        std::fs::write(&c.clock_file, format!("{offset}\n")).unwrap();
        std::thread::sleep(p.fault / 2);
    }
    std::fs::write(&c.clock_file, "+0\n").unwrap();
    ("wall clock +1 h, then -1 h, then back".into(), false)
}

fn forged_table(c: &mut Cluster, p: &Profile, _: &Path) -> (String, bool) {
    c.mitms.iter().for_each(Mitm::forge);
    std::thread::sleep(p.fault);
    c.mitms.iter().for_each(Mitm::stop_forging);
    let sent: u64 = c.mitms.iter().map(Mitm::forged_sent).sum();
    (format!("{sent} forged tables sent"), sent == 0)
}

fn idle_h2(c: &mut Cluster, p: &Profile, _: &Path) -> (String, bool) {
    let idle = flood::open_idle_h2(c.edge.http, p.idle_conns, p.fault);
    let (mut ok, mut total) = (0, 0);
    let hold = Instant::now();
    while hold.elapsed() < p.fault {
        total += 1;
        ok += usize::from(flood::fetch_from_another_client(c.edge.http));
        std::thread::sleep(Duration::from_millis(200));
    }
    let note = format!(
        "{} held, {} not opened, {} closed by the edge; another client: {ok}/{total} fetches ok",
        idle.held(),
        idle.not_opened,
        idle.closed_by_server()
    );
    drop(idle);
    (note, ok < total)
}

fn doq_flood(c: &mut Cluster, p: &Profile, python: &Path) -> (String, bool) {
    let r = flood::doq_flood(python, c.dir.path(), c.doq, p.initials, p.fault.as_secs());
    let note = format!("{} Initials; a real DoQ client: {}/{} ok", r.initials, r.ok, r.ok + r.failed);
    (note, r.failed > 0 || r.ok == 0)
}
