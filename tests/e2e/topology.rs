//! The production topology: two `lagran control` processes on one
//! PostgreSQL and two NS hosts following both, under continuous queries. Kill
//! the leader, then every control process, restart an NS host meanwhile,
//! bring a control process back: the NS hosts never stop answering.

use std::net::{SocketAddr, UdpSocket};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};

use serde_json::{Value, json};

use crate::support::{Daemon, Options, Role, have_tool, lagran_bin};
use lagran::api_client::ApiClient;
use lagran::control_tls::ClientTls;
use lagran::testkit::TempPostgres;

const SHENZHEN: [&str; 3] = ["edge.lagran.net", "A", "+subnet=58.60.0.0/24"];
/// gz-01's own agent token, in `standby_heartbeats`.
const GZ_TOKEN: &str = "gz-01-agent-secret-0123";

/// A UDP client asking one NS host for `edge.lagran.net A` every 20 ms until
/// stopped (at most 10 minutes), counting every outcome.
struct Querier {
    stop: Arc<AtomicBool>,
    counts: Arc<Counts>,
    thread: Option<std::thread::JoinHandle<()>>,
}

#[derive(Default, Debug)]
struct Counts {
    noerror: AtomicU64,
    servfail: AtomicU64,
    other_rcode: AtomicU64,
    timeouts: AtomicU64,
}

impl Counts {
    fn summary(&self) -> (u64, u64, u64, u64) {
        (
            self.noerror.load(Ordering::SeqCst),
            self.servfail.load(Ordering::SeqCst),
            self.other_rcode.load(Ordering::SeqCst),
            self.timeouts.load(Ordering::SeqCst),
        )
    }
}

/// `edge.lagran.net IN A`, id `id`.
fn query(id: u16) -> Vec<u8> {
    let mut q = id.to_be_bytes().to_vec();
    q.extend_from_slice(&[0, 0, 0, 1, 0, 0, 0, 0, 0, 0]);
    for label in ["edge", "lagran", "net"] {
        q.push(label.len() as u8);
        q.extend_from_slice(label.as_bytes());
    }
    q.extend_from_slice(&[0, 0, 1, 0, 1]);
    q
}

impl Querier {
    fn start(target: SocketAddr) -> Querier {
        let stop = Arc::new(AtomicBool::new(false));
        let counts = Arc::new(Counts::default());
        let (flag, c) = (stop.clone(), counts.clone());
        let thread = std::thread::spawn(move || {
            let sock = UdpSocket::bind("127.0.0.1:0").expect("binding the querier");
            sock.set_read_timeout(Some(Duration::from_secs(2))).unwrap();
            let started = Instant::now();
            let mut id: u16 = 0;
            let mut buf = [0u8; 1500];
            while !flag.load(Ordering::SeqCst) && started.elapsed() < Duration::from_secs(600) {
                id = id.wrapping_add(1);
                sock.send_to(&query(id), target).expect("sending a query");
                let deadline = Instant::now() + Duration::from_secs(2);
                let outcome = loop {
                    match sock.recv_from(&mut buf) {
                        Ok((n, _)) if n >= 12 && u16::from_be_bytes([buf[0], buf[1]]) == id => {
                            break Some(buf[3] & 0x0f);
                        }
                        Ok(_) if Instant::now() < deadline => continue, // a late answer to an earlier query
                        _ => break None,
                    }
                };
                match outcome {
                    Some(0) => c.noerror.fetch_add(1, Ordering::SeqCst),
                    Some(2) => c.servfail.fetch_add(1, Ordering::SeqCst),
                    Some(_) => c.other_rcode.fetch_add(1, Ordering::SeqCst),
                    None => c.timeouts.fetch_add(1, Ordering::SeqCst),
                };
                std::thread::sleep(Duration::from_millis(20));
            }
        });
        Querier { stop, counts, thread: Some(thread) }
    }

    /// Stops and returns (NOERROR, SERVFAIL, other rcodes, timeouts).
    fn finish(mut self) -> (u64, u64, u64, u64) {
        self.stop.store(true, Ordering::SeqCst);
        if let Some(t) = self.thread.take() {
            t.join().expect("the querier panicked");
        }
        self.counts.summary()
    }
}

/// TLS material for the run with TLS on: a CA and a server certificate for 127.0.0.1 signed by it.
struct Tls {
    ca: PathBuf,
    cert: PathBuf,
    key: PathBuf,
}

fn write_tls(dir: &Path) -> Tls {
    use rcgen::{BasicConstraints, CertificateParams, IsCa, KeyPair};
    let ca_key = KeyPair::generate().unwrap();
    let mut ca_params = CertificateParams::new(Vec::<String>::new()).unwrap();
    ca_params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
    let ca = ca_params.self_signed(&ca_key).unwrap();
    let key = KeyPair::generate().unwrap();
    let params = CertificateParams::new(vec!["127.0.0.1".to_string(), "localhost".to_string()]).unwrap();
    let cert = params.signed_by(&key, &ca, &ca_key).unwrap();
    let tls = Tls { ca: dir.join("ca.pem"), cert: dir.join("api-cert.pem"), key: dir.join("api-key.pem") };
    std::fs::write(&tls.ca, ca.pem()).unwrap();
    std::fs::write(&tls.cert, cert.pem()).unwrap();
    std::fs::write(&tls.key, key.serialize_pem()).unwrap();
    tls
}

/// The run's shared settings.
struct Topology {
    db: String,
    tls: Option<Tls>,
    rt: tokio::runtime::Runtime,
    /// The control processes' TOML configuration, if any.
    config: Option<String>,
}

impl Topology {
    fn scheme(&self) -> &'static str {
        if self.tls.is_some() { "https" } else { "http" }
    }

    fn url(&self, addr: SocketAddr) -> String {
        format!("{}://{addr}", self.scheme())
    }

    fn control(&self, api_listen: Option<SocketAddr>) -> Daemon {
        let mut args = Vec::new();
        if let Some(t) = &self.tls {
            args = vec![
                "--api-tls-cert".to_string(),
                t.cert.display().to_string(),
                "--api-tls-key".to_string(),
                t.key.display().to_string(),
            ];
        }
        Daemon::start(Options {
            role: Role::Control,
            database_url: Some(self.db.clone()),
            api_listen: api_listen.map(|a| a.to_string()),
            args,
            config: self.config.clone(),
            ..Options::default()
        })
    }

    fn ns(&self, name: &str, controls: &[SocketAddr], state: &Path) -> Daemon {
        let mut args = vec!["--name".to_string(), name.to_string()];
        for c in &controls[1..] {
            args.extend(["--control".to_string(), self.url(*c)]);
        }
        if let Some(t) = &self.tls {
            args.extend(["--ca".to_string(), t.ca.display().to_string()]);
        }
        Daemon::start(Options {
            role: Role::Dns { control: self.url(controls[0]), state_file: state.to_path_buf() },
            args,
            ..Options::default()
        })
    }

    fn client(&self, control: &Daemon) -> ApiClient {
        ApiClient {
            base: self.url(control.api),
            tls: ClientTls { ca: self.tls.as_ref().map(|t| t.ca.clone()), ..ClientTls::default() },
            ..ApiClient::default()
        }
    }

    fn call(&self, control: &Daemon, method: &str, path: &str, body: Option<Value>) -> Value {
        let c = self.client(control);
        self.rt
            .block_on(c.call(method, path, body.as_ref()))
            .unwrap_or_else(|e| panic!("{method} {path}: {e}\n{}", control.log()))
    }

    /// Waits (bounded) until `control` leads and has published its term's first
    /// table: `leading` turns true when the term starts, before that table is
    /// built, so until then `epoch` is still the adopted table's (at most `older`).
    fn wait_leading(&self, control: &Daemon, older: u64, within: Duration) -> Value {
        let deadline = Instant::now() + within;
        loop {
            let v = self.call(control, "GET", "/api/v1/nshosts", None);
            let published = v["epoch"].as_u64().is_some_and(|e| e > older);
            if (v["leading"] == true && published) || Instant::now() >= deadline {
                return v;
            }
            std::thread::sleep(Duration::from_millis(100));
        }
    }

    /// Waits (bounded) until `control` reports a table, and whether it leads.
    fn wait_table(&self, control: &Daemon, within: Duration) -> Value {
        let deadline = Instant::now() + within;
        loop {
            let v = self.call(control, "GET", "/api/v1/nshosts", None);
            if v["version"].as_u64().unwrap_or(0) != 0 || Instant::now() >= deadline {
                return v;
            }
            std::thread::sleep(Duration::from_millis(100));
        }
    }
}

/// A control process's log lines about leadership and errors.
fn cluster_lines(d: &Daemon) -> String {
    d.log()
        .lines()
        .filter(|l| l.contains("lead") || l.contains("ERROR") || l.contains("WARN") || l.contains("standing by"))
        .collect::<Vec<_>>()
        .join("\n")
}

fn answers(ns: &Daemon, want: &str, within: Duration) -> bool {
    ns.dig_until(&SHENZHEN, within, |r| r.answers("A") == vec![want]).answers("A") == vec![want]
}

fn run_topology(with_tls: bool) {
    let test = if with_tls { "topology_tls" } else { "topology" };
    let Some(pg) = TempPostgres::shared_or_skip(test) else { return };
    if !have_tool("dig", test) {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let rt = tokio::runtime::Runtime::new().unwrap();
    let db = rt.block_on(pg.fresh_database());
    let tls = with_tls.then(|| write_tls(dir.path()));
    let topo = Topology { db, tls, rt, config: None };

    // Two control processes on one database, both started the same way (--demo).
    let mut a = topo.control(None);
    let first = topo.wait_table(&a, Duration::from_secs(20));
    assert_eq!(first["leading"], true, "the first control process leads: {first}\n{}", a.log());
    let first_epoch = first["epoch"].as_u64().unwrap();
    let mut b = topo.control(None);
    let standby = topo.wait_table(&b, Duration::from_secs(20));
    assert_eq!(standby["leading"], false, "the second one stands by: {standby}\n{}", b.log());
    assert_eq!(standby["version"], first["version"], "the standby serves the leader's table from the database");
    let controls = [a.api, b.api];

    let (s1, s2) = (dir.path().join("ns1.json"), dir.path().join("ns2.json"));
    let ns1 = topo.ns("ns1", &controls, &s1);
    let ns2 = topo.ns("ns2", &controls, &s2);
    for ns in [&ns1, &ns2] {
        assert!(answers(ns, "203.0.113.21", Duration::from_secs(10)), "the NS host follows\n{}", ns.log());
    }
    let q1 = Querier::start(ns1.dns);
    let q2 = Querier::start(ns2.dns);

    // The NS hosts report back; any control process shows them.
    let deadline = Instant::now() + Duration::from_secs(30);
    let reported = loop {
        let v = topo.call(&b, "GET", "/api/v1/nshosts", None);
        let names: Vec<&str> = v["nshosts"].as_array().unwrap().iter().filter_map(|h| h["name"].as_str()).collect();
        if names == ["ns1", "ns2"] || Instant::now() >= deadline {
            break v;
        }
        std::thread::sleep(Duration::from_millis(200));
    };
    let hosts = reported["nshosts"].as_array().unwrap();
    assert_eq!(hosts.len(), 2, "both NS hosts reported: {reported}");
    for h in hosts {
        assert_eq!(h["epoch"].as_u64(), Some(first_epoch), "{reported}");
        assert!(h["version"].as_u64().unwrap() > 0, "{reported}");
    }
    // The operator console's NS-host view shows the same reports.
    let traffic = topo.call(&b, "GET", "/api/v1/console/traffic", None);
    let shown: Vec<&str> = traffic["ns_hosts"].as_array().unwrap().iter().filter_map(|h| h["host"].as_str()).collect();
    assert_eq!(shown, ["ns1", "ns2"], "the console lists the reporting NS hosts: {traffic}");

    // kill -9 the leader; a write through the standby reaches both NS hosts within 10 s.
    a.kill_hard();
    topo.call(&b, "PATCH", "/api/v1/nodes/gz-01", Some(json!({"status": "offline"})));
    let written = Instant::now();
    for ns in [&ns1, &ns2] {
        let left = Duration::from_secs(10).saturating_sub(written.elapsed());
        assert!(
            answers(ns, "203.0.113.22", left),
            "the write reached the NS host within 10 s\n{}\n{}",
            ns.log(),
            b.log()
        );
    }
    let after = topo.call(&b, "GET", "/api/v1/nshosts", None);
    assert_eq!(after["leading"], true, "the standby took over: {after}\n{}", cluster_lines(&b));
    assert!(after["epoch"].as_u64().unwrap() > first_epoch, "under a new epoch: {after}");

    // Every control process gone: the NS hosts keep answering.
    b.kill_hard();
    std::thread::sleep(Duration::from_secs(2));
    for ns in [&ns1, &ns2] {
        assert!(answers(ns, "203.0.113.22", Duration::ZERO), "answers without any control process\n{}", ns.log());
    }
    // An NS host restarted meanwhile answers from its state file.
    let counts2 = q2.finish();
    drop(ns2);
    let ns2 = topo.ns("ns2", &controls, &s2);
    assert!(answers(&ns2, "203.0.113.22", Duration::ZERO), "the saved table answers\n{}", ns2.log());
    let q2 = Querier::start(ns2.dns);

    // A control process back on a known address: writes flow again.
    let c = topo.control(Some(controls[0]));
    let back = topo.wait_leading(&c, after["epoch"].as_u64().unwrap(), Duration::from_secs(20));
    assert_eq!(back["leading"], true, "the control process back leads: {back}\n{}", cluster_lines(&c));
    assert!(back["epoch"].as_u64() > after["epoch"].as_u64(), "under a newer epoch: {back}");
    topo.call(&c, "PATCH", "/api/v1/nodes/gz-01", Some(json!({"status": "online"})));
    for ns in [&ns1, &ns2] {
        assert!(answers(ns, "203.0.113.21", Duration::from_secs(30)), "writes flow again\n{}", ns.log());
    }

    let (c1, c2b) = (q1.finish(), q2.finish());
    for (what, (ok, servfail, other_rcode, timeouts)) in [("ns1", c1), ("ns2", counts2), ("ns2 restarted", c2b)] {
        eprintln!("{test}: {what}: {ok} NOERROR, {servfail} SERVFAIL, {other_rcode} other, {timeouts} timeouts");
        assert_eq!((servfail, other_rcode, timeouts), (0, 0, 0), "{what}: every query answered NOERROR");
    }
    assert!(c1.0 > 50 && counts2.0 > 50 && c2b.0 > 10, "the queriers ran: {c1:?} {counts2:?} {c2b:?}");
}

#[test]
fn topology_survives_losing_any_control_process() {
    run_topology(false);
}

/// The same run with TLS on the control API (a CA made here): the NS hosts
/// follow `https://` URLs trusting `--ca`, the writes go over HTTPS.
#[test]
fn topology_survives_losing_any_control_process_with_tls() {
    run_topology(true);
}

#[test]
fn a_second_control_process_on_sqlite_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    let db = format!("sqlite://{}/lagran.db", dir.path().display());
    let first = Daemon::start(Options { role: Role::Control, database_url: Some(db.clone()), ..Options::default() });
    let out = std::process::Command::new(lagran_bin())
        .args(["control", "--api-listen", "127.0.0.1:0", "--demo"])
        .env("DATABASE_URL", &db)
        .env_remove("ADMIN_TOKEN")
        .env_remove("AGENT_TOKEN")
        .output()
        .expect("running lagran control");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success(), "the second process must not run\n{stderr}");
    assert!(stderr.contains("only one may") && stderr.contains("PostgreSQL"), "a clear message: {stderr}");
    let (s, _) = first.get("/healthz");
    assert_eq!(s, 200, "the first one is untouched");
}

/// Heartbeats an agent sends to a standby keep its node in the leader's
/// table, and the node leaves when it falls silent for its timeout; neither
/// can come from the leader's periodic recompute, 10 minutes away here.
#[test]
fn heartbeats_through_a_standby_reach_the_leader() {
    let test = "standby_heartbeats";
    let Some(pg) = TempPostgres::shared_or_skip(test) else { return };
    if !have_tool("dig", test) {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let rt = tokio::runtime::Runtime::new().unwrap();
    let db = rt.block_on(pg.fresh_database());
    let config = "[schedule]\nrecompute_secs = 600\n[health]\nheartbeat_timeout_secs = 2\n".to_string();
    let topo = Topology { db, tls: None, rt, config: Some(config) };
    let a = topo.control(None);
    let first = topo.wait_table(&a, Duration::from_secs(20));
    assert_eq!(first["leading"], true, "the first control process leads: {first}\n{}", a.log());
    let b = topo.control(None);
    let standby = topo.wait_table(&b, Duration::from_secs(20));
    assert_eq!(standby["leading"], false, "the second one stands by: {standby}\n{}", b.log());
    let ns = topo.ns("ns1", &[a.api, b.api], &dir.path().join("ns1.json"));
    assert!(answers(&ns, "203.0.113.21", Duration::from_secs(10)), "gz-01 answers Shenzhen\n{}", ns.log());

    let (s, v) = a.http("PATCH", "/api/v1/nodes/gz-01", Some(json!({"auth_token": GZ_TOKEN})), &[]);
    assert_eq!(s, 200, "gz-01 gets its own agent token: {v}");
    let beat = || {
        let body = json!({"cpu_usage": 20.0, "memory_usage": 30.0, "bandwidth_mbps": 5.0, "conns": 9});
        let (s, v) = b.http("POST", "/api/v1/nodes/gz-01/heartbeat", Some(body), &[("x-lagran-agent-token", GZ_TOKEN)]);
        assert_eq!(s, 200, "the standby takes the heartbeat: {v}\n{}", b.log());
    };
    // gz-01's agent reports to the standby only, for 3 timeouts: the leader must hear
    // of every report in time, or gz-01 times out there and Shenzhen moves.
    let beating = Instant::now();
    while beating.elapsed() < Duration::from_secs(6) {
        beat();
        std::thread::sleep(Duration::from_millis(300));
        let r = ns.dig(&SHENZHEN);
        assert_eq!(
            r.answers("A"),
            vec!["203.0.113.21"],
            "gz-01 reports through the standby after {:?}: the leader must keep it\n{}\n{}",
            beating.elapsed(),
            cluster_lines(&a),
            cluster_lines(&b)
        );
    }
    // Silent: the leader heard its reports (a node that never reported never
    // times out), so it leaves when the 2 s timeout ends.
    let silent = Instant::now();
    assert!(
        answers(&ns, "203.0.113.22", Duration::from_secs(10)),
        "gz-01 is silent: it leaves when its timeout ends, not at the 10-minute recompute\n{}\n{}",
        a.log(),
        ns.log()
    );
    let left = silent.elapsed();
    assert!(left >= Duration::from_secs(1), "gz-01 left {left:?} after its last report: before its timeout");
    // One report through the standby brings it back.
    beat();
    assert!(
        answers(&ns, "203.0.113.21", Duration::from_secs(10)),
        "gz-01 reports again through the standby: it is back\n{}",
        a.log()
    );
}
