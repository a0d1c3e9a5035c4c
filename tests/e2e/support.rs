//! Harness: starts the real `lagran` binary on free ports with its own
//! database and geo file, drives it with `dig` and HTTP, and stops it on drop.

use std::io::{BufRead, BufReader};
use std::net::{Ipv4Addr, SocketAddr};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::{Arc, Mutex, mpsc};
use std::time::{Duration, Instant};

use lagran::geo::{IpVersion, write_xdb};
use serde_json::Value;

/// The workspace root.
pub fn workspace_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).parent().expect("tests/ is inside the workspace").to_path_buf()
}

/// The `lagran` binary (built by `cargo xtask test` before the tests run).
pub fn lagran_bin() -> PathBuf {
    if let Some(p) = std::env::var_os("LAGRAN_BIN") {
        return PathBuf::from(p);
    }
    let target = std::env::var_os("CARGO_TARGET_DIR").map_or_else(|| workspace_root().join("target"), PathBuf::from);
    let bin = target.join("debug").join("lagran");
    assert!(
        bin.is_file(),
        "the end-to-end tests drive {}, which is not built: run `cargo xtask test` (or `cargo build --bins` first)",
        bin.display()
    );
    bin
}

/// Whether a missing external tool fails the test (CI) or skips it (a laptop).
pub fn tools_required() -> bool {
    std::env::var_os("CI").is_some() || std::env::var_os("LAGRAN_REQUIRE_TOOLS").is_some()
}

/// True when `tool` runs; otherwise panics under CI, or prints a note and returns false.
pub fn have_tool(tool: &str, test: &str) -> bool {
    let ok = Command::new(tool).arg("-v").stdout(Stdio::null()).stderr(Stdio::null()).status().is_ok();
    if !ok {
        assert!(!tools_required(), "{test}: `{tool}` is required (run `cargo xtask setup`)");
        eprintln!("note: {test}: skipped, `{tool}` is not installed");
    }
    ok
}

fn v4(s: &str) -> u128 {
    u32::from(s.parse::<Ipv4Addr>().expect("test address")) as u128
}

/// A small ip2region file: Shenzhen China Telecom at 58.60.0.0/14, Beijing
/// Unicom at 123.112.0.0/12, the rest of the space in the US.
pub fn write_small_geo(dir: &Path) -> PathBuf {
    let ranges = vec![
        (0, v4("58.59.255.255"), "美国|0|0|0|0".to_string()),
        (v4("58.60.0.0"), v4("58.63.255.255"), "中国|0|广东省|深圳市|电信".to_string()),
        (v4("58.64.0.0"), v4("123.111.255.255"), "美国|0|0|0|0".to_string()),
        (v4("123.112.0.0"), v4("123.127.255.255"), "中国|0|北京|北京市|联通".to_string()),
        (v4("123.128.0.0"), u32::MAX as u128, "美国|0|0|0|0".to_string()),
    ];
    let bytes = write_xdb(IpVersion::V4, &ranges).expect("writing the test xdb");
    let path = dir.join("test.xdb");
    std::fs::write(&path, bytes).expect("saving the test xdb");
    path
}

/// Which geo file the daemon gets.
#[derive(Clone, Debug)]
pub enum Geo {
    /// The small file of [`write_small_geo`].
    Small,
    /// The real ip2region file fetched by `scripts/fetch-geoip.sh`.
    Real(PathBuf),
    /// No file at all.
    None,
}

/// How to start a daemon.
#[derive(Clone, Debug)]
pub struct Options {
    pub database_url: Option<String>,
    pub env: Vec<(String, String)>,
    pub geo: Geo,
    pub demo: bool,
    /// A TOML configuration file's text (passed with `--config`).
    pub config: Option<String>,
    pub role: Role,
    /// Run the daemon inside this network namespace (`ip netns exec`).
    pub netns: Option<String>,
    /// Extra arguments after the role's own.
    pub args: Vec<String>,
    /// The DNS listen address (default 127.0.0.1:0).
    pub dns_listen: Option<String>,
    /// The API listen address (default 127.0.0.1:0).
    pub api_listen: Option<String>,
}

/// Which `lagran` subcommand runs.
#[derive(Clone, Debug, Default)]
pub enum Role {
    /// `lagran serve`: everything in one process.
    #[default]
    Serve,
    /// `lagran control`: no DNS listener.
    Control,
    /// `lagran dns --control URL --state-file PATH`: an NS host.
    Dns { control: String, state_file: PathBuf },
}

impl Default for Options {
    fn default() -> Self {
        Options {
            database_url: None,
            env: Vec::new(),
            geo: Geo::Small,
            demo: true,
            config: None,
            role: Role::Serve,
            netns: None,
            args: Vec::new(),
            dns_listen: None,
            api_listen: None,
        }
    }
}

/// A running `lagran serve`.
pub struct Daemon {
    child: Child,
    pub dns: SocketAddr,
    pub api: SocketAddr,
    /// The database the daemon uses.
    pub db_url: String,
    /// The geo file it was given, if any.
    pub geo_path: Option<PathBuf>,
    log: Arc<Mutex<String>>,
    _dir: tempfile::TempDir,
}

impl Daemon {
    pub fn start(opts: Options) -> Daemon {
        let dir = tempfile::tempdir().expect("temp dir");
        let db = opts.database_url.clone().unwrap_or_else(|| format!("sqlite://{}/lagran.db", dir.path().display()));
        let mut cmd = match &opts.netns {
            Some(ns) => {
                let mut c = Command::new("ip");
                c.args(["netns", "exec", ns]).arg(lagran_bin());
                c
            }
            None => Command::new(lagran_bin()),
        };
        if let Some(text) = &opts.config {
            let path = dir.path().join("lagran.toml");
            std::fs::write(&path, text).expect("writing the test config");
            cmd.arg("--config").arg(path);
        }
        cmd.current_dir(dir.path()).args(["--log-format", "json"]);
        let api = opts.api_listen.as_deref().unwrap_or("127.0.0.1:0");
        match &opts.role {
            Role::Serve => {
                let dns = opts.dns_listen.as_deref().unwrap_or("127.0.0.1:0");
                cmd.args(["serve", "--dns-listen", dns, "--api-listen", api]);
            }
            Role::Control => {
                cmd.args(["control", "--api-listen", api]);
            }
            Role::Dns { control, state_file } => {
                let dns = opts.dns_listen.as_deref().unwrap_or("127.0.0.1:0");
                cmd.args(["dns", "--control", control, "--dns-listen", dns, "--api-listen", api])
                    .arg("--state-file")
                    .arg(state_file);
            }
        }
        cmd.env("DATABASE_URL", &db)
            .env("RUST_LOG", "info,lagran=debug")
            .env_remove("ADMIN_TOKEN")
            .env_remove("AGENT_TOKEN")
            .env_remove("GEOIP_PATH")
            .env_remove("DNS_FALLBACK_IP")
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::piped());
        if opts.demo && !matches!(opts.role, Role::Dns { .. }) {
            cmd.arg("--demo");
        }
        cmd.args(&opts.args);
        let geo_path = match &opts.geo {
            Geo::Small => Some(write_small_geo(dir.path())),
            Geo::Real(p) => Some(p.clone()),
            Geo::None => None,
        };
        if let Some(p) = &geo_path {
            cmd.env("GEOIP_PATH", p);
        }
        for (k, v) in &opts.env {
            cmd.env(k, v);
        }
        let mut child = cmd.spawn().expect("starting lagran serve");
        let stderr = child.stderr.take().expect("piped stderr");
        let log = Arc::new(Mutex::new(String::new()));
        let (tx, rx) = mpsc::channel();
        let sink = log.clone();
        std::thread::spawn(move || {
            for line in BufReader::new(stderr).lines().map_while(Result::ok) {
                if let Ok(v) = serde_json::from_str::<Value>(&line)
                    && v["fields"]["message"]
                        .as_str()
                        .is_some_and(|m| m.starts_with("lagran") && m.ends_with("serving"))
                {
                    let api: Option<SocketAddr> = v["fields"]["api"].as_str().and_then(|s| s.parse().ok());
                    // `lagran control` has no DNS listener: its "dns" is the API address, unused.
                    let dns = v["fields"]["dns"].as_str().and_then(|s| s.parse().ok()).or(api);
                    if let (Some(d), Some(a)) = (dns, api) {
                        let _ = tx.send((d, a));
                    }
                }
                let mut l = sink.lock().unwrap();
                l.push_str(&line);
                l.push('\n');
            }
        });
        // Long enough for an unoptimised build to load and merge the world data files.
        let (dns, api) = match rx.recv_timeout(Duration::from_secs(600)) {
            Ok(addrs) => addrs,
            Err(_) => {
                let _ = child.kill();
                let _ = &log;
                let _ = child.wait();
                std::thread::sleep(Duration::from_millis(200));
                panic!("lagran serve did not start within 600 s; its log:\n{}", log.lock().unwrap());
            }
        };
        Daemon { child, dns, api, db_url: db, geo_path, log, _dir: dir }
    }

    /// The address an entry point (`dot`, `doq`, `http`) was bound to, from
    /// its `entry point listening` log line (logged before `lagran serving`).
    pub fn entry(&self, entry: &str) -> SocketAddr {
        self.log()
            .lines()
            .filter_map(|l| serde_json::from_str::<Value>(l).ok())
            .find(|v| v["fields"]["message"] == "entry point listening" && v["fields"]["entry"] == entry)
            .and_then(|v| v["fields"]["addr"].as_str().and_then(|a| a.parse().ok()))
            .unwrap_or_else(|| panic!("no `{entry}` entry point in the log:\n{}", self.log()))
    }

    /// The `--config` file the daemon was started with (to rewrite before a SIGHUP).
    pub fn config_path(&self) -> PathBuf {
        self._dir.path().join("lagran.toml")
    }

    /// The daemon's process id (for signals).
    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    /// Everything the daemon logged so far.
    /// SIGKILL: the daemon gets no chance to detach or unpin anything.
    pub fn kill_hard(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }

    pub fn log(&self) -> String {
        self.log.lock().unwrap().clone()
    }

    /// Runs `dig @127.0.0.1 -p PORT ARGS…` and parses its answer.
    pub fn dig(&self, args: &[&str]) -> Dig {
        let out = Command::new("dig")
            .args([format!("@{}", self.dns.ip()), "-p".into(), self.dns.port().to_string()])
            .args(["+time=3", "+tries=1", "+nocookie"])
            .args(args)
            .output()
            .expect("running dig");
        let text = String::from_utf8_lossy(&out.stdout).into_owned();
        Dig::parse(&text)
    }

    /// An HTTP request to the API; returns the status and the JSON (or text) body.
    pub fn http(&self, method: &str, path: &str, body: Option<Value>, headers: &[(&str, &str)]) -> (u16, Value) {
        self.http_within(Duration::from_secs(10), method, path, body, headers)
    }

    /// [`Daemon::http`] waiting up to `timeout` for the answer (a debug build
    /// busy merging large geo files answers slowly).
    pub fn http_within(
        &self,
        timeout: Duration,
        method: &str,
        path: &str,
        body: Option<Value>,
        headers: &[(&str, &str)],
    ) -> (u16, Value) {
        let url = format!("http://{}{}", self.api, path);
        let mut req = ureq::request(method, &url).timeout(timeout);
        for (k, v) in headers {
            req = req.set(k, v);
        }
        let res = match body {
            Some(b) => req.send_json(b),
            None => req.call(),
        };
        let resp = match res {
            Ok(r) => r,
            Err(ureq::Error::Status(_, r)) => r,
            Err(e) => panic!("{method} {url}: {e}\ndaemon log:\n{}", self.log()),
        };
        let status = resp.status();
        let text = resp.into_string().unwrap_or_default();
        let value = serde_json::from_str(&text).unwrap_or(Value::String(text));
        (status, value)
    }

    pub fn get(&self, path: &str) -> (u16, Value) {
        self.http("GET", path, None, &[])
    }

    /// Waits (bounded) until `check` holds, re-running dig; returns the last result.
    pub fn dig_until(&self, args: &[&str], within: Duration, check: impl Fn(&Dig) -> bool) -> Dig {
        let deadline = Instant::now() + within;
        loop {
            let d = self.dig(args);
            if check(&d) || Instant::now() >= deadline {
                return d;
            }
            std::thread::sleep(Duration::from_millis(100));
        }
    }
}

impl Drop for Daemon {
    /// SIGTERM first, so the daemon detaches XDP and removes its pins; SIGKILL after 5 s.
    fn drop(&mut self) {
        if let Ok(Some(_)) = self.child.try_wait() {
            return; // already gone (e.g. `kill_hard`)
        }
        let _ = Command::new("kill").args(["-TERM", &self.child.id().to_string()]).status();
        let deadline = Instant::now() + Duration::from_secs(5);
        while Instant::now() < deadline {
            if let Ok(Some(_)) = self.child.try_wait() {
                return;
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// A Python with dnspython and aioquic (a DNS over QUIC client that is not
/// ours), in a venv under the target directory made on first use and reused
/// after. `None` (after a note) when it cannot be made on a laptop; a panic
/// under CI.
pub fn doq_python(test: &str) -> Option<PathBuf> {
    static MAKING: Mutex<()> = Mutex::new(());
    let _one_at_a_time = MAKING.lock().unwrap_or_else(|p| p.into_inner());
    let target = std::env::var_os("CARGO_TARGET_DIR").map_or_else(|| workspace_root().join("target"), PathBuf::from);
    let venv = target.join("e2e-venv");
    let python = venv.join("bin").join("python");
    let ready = |py: &Path| {
        Command::new(py)
            .args(["-c", "import dns.quic, aioquic; assert dns.quic.have_quic"])
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .status()
            .is_ok_and(|s| s.success())
    };
    if ready(&python) {
        return Some(python);
    }
    let made = Command::new("python3").arg("-m").arg("venv").arg(&venv).status().is_ok_and(|s| s.success())
        && Command::new(venv.join("bin").join("pip"))
            .args(["install", "--quiet", "--disable-pip-version-check", "dnspython", "aioquic"])
            .status()
            .is_ok_and(|s| s.success());
    if made && ready(&python) {
        return Some(python);
    }
    assert!(
        !tools_required(),
        "{test}: could not make {} with dnspython and aioquic (needs python3-venv: run `cargo xtask setup`, and PyPI)",
        venv.display()
    );
    eprintln!("note: {test}: skipped, no Python venv with dnspython and aioquic");
    None
}

/// A self-signed certificate for `dns.test` (DoT and DoQ), as PEM files under `dir`.
pub fn write_test_certificate(dir: &Path) -> (PathBuf, PathBuf) {
    let ck = rcgen::generate_simple_self_signed(vec!["dns.test".to_string()]).expect("generating a test certificate");
    let (cert, key) = (dir.join("cert.pem"), dir.join("key.pem"));
    std::fs::write(&cert, ck.cert.pem()).expect("writing the test certificate");
    std::fs::write(&key, ck.key_pair.serialize_pem()).expect("writing the test key");
    (cert, key)
}

/// One resource record as dig prints it.
#[derive(Clone, Debug, PartialEq)]
pub struct Record {
    pub name: String,
    pub ttl: u32,
    pub rtype: String,
    pub data: String,
}

/// A parsed dig answer.
#[derive(Clone, Debug, Default)]
pub struct Dig {
    pub text: String,
    pub status: String,
    pub flags: Vec<String>,
    pub answer: Vec<Record>,
    pub authority: Vec<Record>,
    pub additional: Vec<Record>,
    /// `; CLIENT-SUBNET: 58.60.0.0/24/14`
    pub ecs: Option<String>,
    pub edns: Option<String>,
}

impl Dig {
    pub fn parse(text: &str) -> Dig {
        let mut d = Dig { text: text.to_string(), ..Default::default() };
        let mut section = "";
        for line in text.lines() {
            let l = line.trim();
            if let Some(rest) = l.split("status: ").nth(1) {
                d.status = rest.split(',').next().unwrap_or("").trim().to_string();
            }
            if let Some(rest) = l.strip_prefix(";; flags:") {
                let flags = rest.split(';').next().unwrap_or("");
                d.flags = flags.split_whitespace().map(str::to_string).collect();
            }
            if let Some(rest) = l.strip_prefix("; CLIENT-SUBNET:") {
                d.ecs = Some(rest.trim().to_string());
            }
            if let Some(rest) = l.strip_prefix("; EDNS:") {
                d.edns = Some(rest.trim().to_string());
            }
            if l.starts_with(";; ANSWER SECTION") {
                section = "answer";
                continue;
            }
            if l.starts_with(";; AUTHORITY SECTION") {
                section = "authority";
                continue;
            }
            if l.starts_with(";; ADDITIONAL SECTION") {
                section = "additional";
                continue;
            }
            if l.is_empty() || l.starts_with(';') {
                if l.is_empty() {
                    section = "";
                }
                continue;
            }
            let parts: Vec<&str> = l.split_whitespace().collect();
            if parts.len() >= 5 && !section.is_empty() {
                let rec = Record {
                    name: parts[0].to_string(),
                    ttl: parts[1].parse().unwrap_or(u32::MAX),
                    rtype: parts[3].to_string(),
                    data: parts[4..].join(" "),
                };
                match section {
                    "answer" => d.answer.push(rec),
                    "authority" => d.authority.push(rec),
                    _ => d.additional.push(rec),
                }
            }
        }
        d
    }

    pub fn has_flag(&self, f: &str) -> bool {
        self.flags.iter().any(|x| x == f)
    }

    /// The data of every answer record of `rtype`.
    pub fn answers(&self, rtype: &str) -> Vec<String> {
        self.answer.iter().filter(|r| r.rtype == rtype).map(|r| r.data.clone()).collect()
    }
}

/// A stand-in edge node: an HTTP server on loopback answering `GET /healthz`
/// with 200, which can be stopped and started again on the same port.
pub struct FakeEdge {
    pub port: u16,
    stop: Arc<std::sync::atomic::AtomicBool>,
    thread: Option<std::thread::JoinHandle<()>>,
}

impl FakeEdge {
    pub fn start(port: u16) -> FakeEdge {
        use std::io::{Read, Write};
        use std::sync::atomic::Ordering;
        let listener = std::net::TcpListener::bind(("127.0.0.1", port)).expect("binding the fake edge");
        let port = listener.local_addr().unwrap().port();
        listener.set_nonblocking(true).unwrap();
        let stop = Arc::new(std::sync::atomic::AtomicBool::new(false));
        let flag = stop.clone();
        let thread = std::thread::spawn(move || {
            while !flag.load(Ordering::SeqCst) {
                match listener.accept() {
                    Ok((mut s, _)) => {
                        let _ = s.set_nonblocking(false);
                        let _ = s.set_read_timeout(Some(Duration::from_secs(1)));
                        let mut buf = [0u8; 1024];
                        let _ = s.read(&mut buf);
                        let _ = s.write_all(b"HTTP/1.1 200 OK\r\ncontent-length: 2\r\nconnection: close\r\n\r\nok");
                    }
                    Err(_) => std::thread::sleep(Duration::from_millis(20)),
                }
            }
        });
        FakeEdge { port, stop, thread: Some(thread) }
    }

    /// Stops answering: the port refuses connections from now on.
    pub fn stop(&mut self) {
        self.stop.store(true, std::sync::atomic::Ordering::SeqCst);
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

impl Drop for FakeEdge {
    fn drop(&mut self) {
        self.stop();
    }
}

/// Runs `lagran ARGS…` against a daemon's database, geo file and API; returns (success, stdout, stderr).
pub fn lagran_cli(d: &Daemon, args: &[&str]) -> (bool, String, String) {
    let mut cmd = Command::new(lagran_bin());
    cmd.args(args)
        .env("DATABASE_URL", &d.db_url)
        .env("LAGRAN_API", format!("http://{}", d.api))
        .env_remove("ADMIN_TOKEN")
        .env_remove("AGENT_TOKEN")
        .env("RUST_LOG", "warn");
    match &d.geo_path {
        Some(p) => cmd.env("GEOIP_PATH", p),
        None => cmd.env_remove("GEOIP_PATH"),
    };
    let out = cmd.output().expect("running lagran");
    (
        out.status.success(),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

/// Two fresh network namespaces joined by a veth pair, for the XDP tests: the
/// daemon runs in the server namespace with `--xdp` on its end; the client
/// end runs a pass-through program, because XDP_TX on a veth reaches the peer
/// only when the peer runs XDP too. Dropping it detaches the program, then
/// removes the namespaces (fields drop in declaration order).
pub struct XdpNamespaces {
    _client_prog: lagran::xdp::XdpHandle,
    pub pair: lagran::xdp::netns::VethPair,
}

impl XdpNamespaces {
    /// The namespaces, or `None` (the test skips, and says so) when `dig` or
    /// `ip` is missing. Panics without the BPF object or without root.
    pub fn create(test: &str) -> Option<XdpNamespaces> {
        use lagran::xdp::{XdpHandle, XdpOptions, object_bytes};
        if !["dig", "ip"].into_iter().all(|tool| have_tool(tool, test)) {
            return None;
        }
        let obj = object_bytes()
            .unwrap_or_else(|e| panic!("this test needs the BPF object: {e} (cargo xtask test builds it)"));
        let pair =
            lagran::xdp::netns::VethPair::create().expect("creating two namespaces and a veth pair (root needed)");
        let client_prog = pair
            .client
            .enter(|| {
                XdpHandle::attach_with(pair.client_if, 53, &obj, &XdpOptions { pin_dir: None, ..XdpOptions::default() })
            })
            .expect("entering the client namespace")
            .expect("a pass-through program on the client veth");
        Some(XdpNamespaces { _client_prog: client_prog, pair })
    }

    /// A daemon in the server namespace with `--xdp` on the server end,
    /// listening on the server address, its maps pinned under `pins`. Add to
    /// `args` and `env` for more.
    pub fn daemon_options(&self, pins: &str) -> Options {
        Options {
            netns: Some(self.pair.server.name().to_string()),
            args: vec!["--xdp".into(), self.pair.server_if.into()],
            env: vec![("LAGRAN_PIN_DIR".into(), pins.to_string())],
            dns_listen: Some(format!("{}:53", self.pair.server_addr)),
            ..Options::default()
        }
    }

    /// `d`'s `/metrics` text, read inside the server namespace.
    pub fn metrics(&self, d: &Daemon) -> String {
        let (_, v): (u16, Value) = self.pair.server.enter(|| d.get("/metrics")).expect("entering the server namespace");
        v.as_str().unwrap_or_default().to_string()
    }
}

/// The value of the first line of a `/metrics` text that starts with `name`
/// (0 when there is none).
pub fn metric_value(text: &str, name: &str) -> u64 {
    text.lines()
        .find(|l| l.starts_with(name))
        .and_then(|l| l.rsplit(' ').next())
        .and_then(|v| v.parse::<f64>().ok())
        .map_or(0, |v| v as u64)
}
