//! The topology under test (see the module docs of `chaos`): PostgreSQL, two
//! control processes, two NS hosts, an edge and its origin. Dropping a
//! [`Cluster`] stops every process and removes the namespace, the veth pair
//! and the XDP programs (fields drop in declaration order).

use std::io::{Read, Write};
use std::net::{Ipv4Addr, SocketAddr, TcpListener};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use serde_json::Value;

use super::mitm::Mitm;
use crate::support::{Daemon, Options, Role, lagran_bin, write_test_certificate};
use lagran::testkit::TempPostgres;
use lagran::xdp::netns::NetNs;
use lagran::xdp::{XdpHandle, XdpOptions, object_bytes};

pub const ADMIN: &str = "chaos-admin-token-0123456789";
pub const AGENT: &str = "chaos-agent-token-0123456789";
/// The host end of `ns1`'s veth and its address; the namespace end and its address.
const HOST_IF: &str = "lgchaos-h";
const NS_IF: &str = "lgchaos-n";
pub const HOST_ADDR: Ipv4Addr = Ipv4Addr::new(10, 99, 0, 1);
pub const NS1_ADDR: Ipv4Addr = Ipv4Addr::new(10, 99, 0, 2);
/// The controls' configuration: short heartbeat timeouts, so a fault of a
/// few seconds spans several of them.
const CONTROL_TOML: &str = "[health]\nheartbeat_timeout_secs = 3\n";
/// The libfaketime preload (Debian's `faketime` package).
const FAKETIME_LIB: &str = "/usr/lib/x86_64-linux-gnu/faketime/libfaketime.so.1";

/// An API call that never panics: `(status, body)` or the transport error.
pub fn api(addr: SocketAddr, method: &str, path: &str, body: Option<&Value>) -> Result<(u16, Value), String> {
    let url = format!("http://127.0.0.1:{}{path}", addr.port());
    let req =
        ureq::request(method, &url).timeout(Duration::from_secs(2)).set("authorization", &format!("Bearer {ADMIN}"));
    let res = match body {
        Some(b) => req.send_json(b.clone()),
        None => req.call(),
    };
    let resp = match res {
        Ok(r) => r,
        Err(ureq::Error::Status(_, r)) => r,
        Err(e) => return Err(e.to_string()),
    };
    let status = resp.status();
    let text = resp.into_string().unwrap_or_default();
    Ok((status, serde_json::from_str(&text).unwrap_or(Value::String(text))))
}

/// A `lagran-edge` process with its log.
pub struct Edge {
    child: Child,
    pub http: SocketAddr,
    log: Arc<Mutex<String>>,
}

impl Edge {
    pub fn log(&self) -> String {
        self.log.lock().unwrap().clone()
    }
}

impl Drop for Edge {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// The namespace of `ns1` and the veth joining it to this one; the host end
/// runs a pass-through program, because XDP_TX on a veth reaches the peer
/// only when the peer runs XDP too.
struct Ns1Net {
    _host_prog: XdpHandle,
    ns: NetNs,
}

impl Ns1Net {
    fn create(obj: &[u8]) -> Ns1Net {
        let ns = NetNs::create("chaos").expect("creating the chaos namespace (root needed)");
        let ip = |args: &[&str]| {
            let ok = Command::new("ip").args(args).status().is_ok_and(|s| s.success());
            assert!(ok, "ip {}", args.join(" "));
        };
        ip(&["link", "add", HOST_IF, "type", "veth", "peer", "name", NS_IF, "netns", ns.name()]);
        ip(&["addr", "add", &format!("{HOST_ADDR}/30"), "dev", HOST_IF]);
        ip(&["link", "set", HOST_IF, "up"]);
        ns.ip(&["addr", "add", &format!("{NS1_ADDR}/30"), "dev", NS_IF]).expect("addressing the namespace end");
        ns.ip(&["link", "set", NS_IF, "up"]).expect("bringing the namespace end up");
        let opts = XdpOptions { pin_dir: None, ..XdpOptions::default() };
        let host_prog =
            XdpHandle::attach_with(HOST_IF, 53, obj, &opts).expect("a pass-through program on the host end");
        Ns1Net { _host_prog: host_prog, ns }
    }
}

/// Everything the faults act on.
pub struct Cluster {
    pub edge: Edge,
    pub ns2: Daemon,
    /// Kept running: the queriers and the partition fault reach it by address.
    _ns1: Daemon,
    /// One man in the middle per control process, on every path `ns2` has to the control plane.
    pub mitms: Vec<Mitm>,
    /// The control processes (index 0 = `a`, 1 = `b`); `None` never happens
    /// between faults.
    pub controls: Vec<Daemon>,
    ns1_net: Ns1Net,
    pub pg: TempPostgres,
    /// ns2's libfaketime offset file (`+N` seconds).
    pub clock_file: PathBuf,
    pub doq: SocketAddr,
    pub dot: SocketAddr,
    origin_stop: Arc<AtomicBool>,
    pub dir: tempfile::TempDir,
}

impl Drop for Cluster {
    fn drop(&mut self) {
        self.origin_stop.store(true, Ordering::SeqCst);
        // A fault that panicked half way must not leave a control process stopped.
        for c in &self.controls {
            let _ = Command::new("kill").args(["-CONT", &c.pid().to_string()]).status();
        }
    }
}

impl Cluster {
    pub fn start() -> Cluster {
        raise_open_files_limit();
        let obj = object_bytes().unwrap_or_else(|e| panic!("chaos needs the BPF object: {e}"));
        let dir = tempfile::tempdir().expect("temp dir");
        let pg = TempPostgres::start().unwrap_or_else(|e| panic!("a private PostgreSQL for chaos: {e}"));
        let rt = tokio::runtime::Runtime::new().unwrap();
        let db = rt.block_on(pg.fresh_database());
        let a = control(&db, None);
        wait_until("control a leads", Duration::from_secs(30), || leader_of(&[a.api]).is_some());
        let b = control(&db, None);
        let controls = vec![a, b];
        let control_ports: Vec<u16> = controls.iter().map(|c| c.api.port()).collect();

        let ns1_net = Ns1Net::create(&obj);
        let ns1 = start_ns1(&ns1_net, &control_ports, dir.path());
        let mitms: Vec<Mitm> =
            control_ports.iter().map(|p| Mitm::start(SocketAddr::from(([127, 0, 0, 1], *p)), AGENT)).collect();
        let clock_file = dir.path().join("faketime");
        std::fs::write(&clock_file, "+0\n").unwrap();
        let (cert, key) = write_test_certificate(dir.path());
        let ns2 = start_ns2(&mitms, dir.path(), &clock_file, &cert, &key);
        let (dot, doq) = (ns2.entry("dot"), ns2.entry("doq"));

        let origin_stop = Arc::new(AtomicBool::new(false));
        let origin = start_origin(origin_stop.clone());
        let site = serde_json::json!({"origin": format!("http://{origin}"), "cache_ttl_secs": 60});
        let (s, v) = api(controls[0].api, "PUT", "/api/v1/sites/chaos.test", Some(&site)).expect("PUT site");
        assert!(s == 200 || s == 201, "the chaos site: {s} {v}");
        let edge = start_edge(controls[0].api, dir.path());
        Cluster { edge, ns2, _ns1: ns1, mitms, controls, ns1_net, pg, clock_file, doq, dot, origin_stop, dir }
    }

    pub fn ns1_namespace(&self) -> &str {
        self.ns1_net.ns.name()
    }

    pub fn control_addrs(&self) -> Vec<SocketAddr> {
        self.controls.iter().map(|c| c.api).collect()
    }

    /// The leading control process's index, if one answers within 2 s.
    pub fn leader(&self) -> Option<usize> {
        leader_of(&self.control_addrs())
    }
}

fn control(db: &str, api_listen: Option<SocketAddr>) -> Daemon {
    Daemon::start(Options {
        role: Role::Control,
        database_url: Some(db.to_string()),
        api_listen: Some(api_listen.map_or_else(|| "0.0.0.0:0".to_string(), |a| a.to_string())),
        config: Some(CONTROL_TOML.to_string()),
        env: tokens(),
        ..Options::default()
    })
}

fn tokens() -> Vec<(String, String)> {
    vec![("ADMIN_TOKEN".into(), ADMIN.into()), ("AGENT_TOKEN".into(), AGENT.into())]
}

/// `ns1`: in its namespace, XDP on its veth end, following both control
/// processes over the veth (plain HTTP to a non-loopback address: allowed by
/// `--insecure-control`, which is what the partition fault needs, not TLS).
fn start_ns1(net: &Ns1Net, control_ports: &[u16], dir: &Path) -> Daemon {
    let url = |port: u16| format!("http://{HOST_ADDR}:{port}");
    let mut args = vec!["--name".to_string(), "ns1".into(), "--insecure-control".into(), "--xdp".into(), NS_IF.into()];
    args.extend(["--control".to_string(), url(control_ports[1])]);
    let mut env = tokens();
    env.push(("LAGRAN_PIN_DIR".into(), "/sys/fs/bpf/lagran-chaos".into()));
    Daemon::start(Options {
        role: Role::Dns { control: url(control_ports[0]), state_file: dir.join("ns1.json") },
        netns: Some(net.ns.name().to_string()),
        dns_listen: Some(format!("{NS1_ADDR}:53")),
        args,
        env,
        ..Options::default()
    })
}

/// `ns2`: on loopback, following the control plane through the men in the
/// middle, with DoT and DoQ, its wall clock under libfaketime (the monotonic
/// clock untouched, as a stepped system clock leaves it).
fn start_ns2(mitms: &[Mitm], dir: &Path, clock: &Path, cert: &Path, key: &Path) -> Daemon {
    let mut args = vec!["--name".to_string(), "ns2".into()];
    for m in &mitms[1..] {
        args.extend(["--control".to_string(), m.url()]);
    }
    args.extend(["--dot-listen", "127.0.0.1:0", "--doq-listen", "127.0.0.1:0"].map(String::from));
    args.extend(["--tls-cert".to_string(), cert.display().to_string()]);
    args.extend(["--tls-key".to_string(), key.display().to_string()]);
    let mut env = tokens();
    env.extend([
        ("LD_PRELOAD".to_string(), FAKETIME_LIB.to_string()),
        ("FAKETIME_TIMESTAMP_FILE".into(), clock.display().to_string()),
        ("FAKETIME_NO_CACHE".into(), "1".into()),
        ("FAKETIME_DONT_FAKE_MONOTONIC".into(), "1".into()),
    ]);
    Daemon::start(Options {
        role: Role::Dns { control: mitms[0].url(), state_file: dir.join("ns2.json") },
        args,
        env,
        ..Options::default()
    })
}

/// An origin answering every request with a small cacheable body, until `stop`.
fn start_origin(stop: Arc<AtomicBool>) -> SocketAddr {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = listener.local_addr().unwrap();
    listener.set_nonblocking(true).unwrap();
    std::thread::spawn(move || {
        let started = Instant::now();
        while !stop.load(Ordering::SeqCst) && started.elapsed() < Duration::from_secs(3600) {
            let Ok((mut s, _)) = listener.accept() else {
                std::thread::sleep(Duration::from_millis(5));
                continue;
            };
            let _ = s.set_nonblocking(false);
            let _ = s.set_read_timeout(Some(Duration::from_secs(2)));
            let mut buf = [0u8; 4096];
            let _ = s.read(&mut buf);
            let body = "chaos origin";
            let _ = write!(
                s,
                "HTTP/1.1 200 OK\r\ncontent-length: {}\r\ncache-control: max-age=60\r\nconnection: close\r\n\r\n{body}",
                body.len()
            );
        }
    });
    addr
}

fn start_edge(control: SocketAddr, dir: &Path) -> Edge {
    let bin = lagran_bin().with_file_name("lagran-edge");
    let http = TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap();
    let path = dir.join("edge.toml");
    let toml = format!(
        "listen_http = \"{http}\"\nnode_name = \"gz-01\"\ncontrol_url = \"http://127.0.0.1:{}\"\n\
         agent_token = \"{AGENT}\"\nheartbeat_secs = 1\nconfig_poll_secs = 1\n",
        control.port()
    );
    std::fs::write(&path, toml).unwrap();
    let mut child = Command::new(bin)
        .arg("--config")
        .arg(&path)
        .env("RUST_LOG", "info")
        .env("NO_COLOR", "1")
        .env_remove("AGENT_TOKEN")
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("starting lagran-edge");
    let log = Arc::new(Mutex::new(String::new()));
    for out in [
        child.stdout.take().map(|o| Box::new(o) as Box<dyn Read + Send>),
        child.stderr.take().map(|e| Box::new(e) as Box<dyn Read + Send>),
    ]
    .into_iter()
    .flatten()
    {
        let sink = log.clone();
        std::thread::spawn(move || {
            use std::io::BufRead;
            for line in std::io::BufReader::new(out).lines().map_while(Result::ok) {
                let mut l = sink.lock().unwrap();
                l.push_str(&line);
                l.push('\n');
            }
        });
    }
    let edge = Edge { child, http, log };
    wait_until("the edge applies the control plane's sites", Duration::from_secs(30), || {
        edge.log().contains("sites and certificates from the control plane applied")
    });
    edge
}

/// Which of `controls` leads (`GET /api/v1/nshosts` says `leading`), if any answers.
pub fn leader_of(controls: &[SocketAddr]) -> Option<usize> {
    controls
        .iter()
        .position(|c| api(*c, "GET", "/api/v1/nshosts", None).is_ok_and(|(s, v)| s == 200 && v["leading"] == true))
}

/// Waits (bounded) for `done`, panicking with `what` when it does not come.
pub fn wait_until(what: &str, within: Duration, mut done: impl FnMut() -> bool) {
    let deadline = Instant::now() + within;
    while !done() {
        assert!(Instant::now() < deadline, "{what}: not within {within:?}");
        std::thread::sleep(Duration::from_millis(200));
    }
}

/// Thousands of connections need more descriptors than the default soft
/// limit; the edge, started after, inherits the raised one.
fn raise_open_files_limit() {
    let mut lim = libc::rlimit { rlim_cur: 0, rlim_max: 0 };
    // SAFETY: getrlimit/setrlimit with a valid pointer to a local struct.
    unsafe {
        if libc::getrlimit(libc::RLIMIT_NOFILE, &mut lim) == 0 {
            lim.rlim_cur = lim.rlim_max.min(65_536);
            let _ = libc::setrlimit(libc::RLIMIT_NOFILE, &lim);
        }
    }
}
