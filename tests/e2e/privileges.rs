//! `lagran serve --xdp` as a user that is not root, holding only the
//! capabilities the packaged units give it (CAP_BPF, CAP_PERFMON,
//! CAP_NET_ADMIN, CAP_NET_BIND_SERVICE), its pins in a directory that user owns:
//! the kernel answers. Without CAP_BPF the daemon names what is missing.
//!
//! The daemon enters the server namespace with `nsenter --net` (not `ip netns
//! exec`, which would give it a private /sys without the host's bpffs) and drops
//! to `nobody` with `setpriv`.

use std::io::{BufRead as _, BufReader};
use std::os::unix::fs::{PermissionsExt as _, chown};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::mpsc;
use std::time::Duration;

use lagran::xdp::netns::{NetNs, VethPair};
use lagran::xdp::{XdpHandle, XdpOptions, object_bytes};

use crate::support::{Dig, have_tool, lagran_bin, metric_value as metric, write_small_geo};

const NOBODY: u32 = 65534;
const ALL_CAPS: &str = "+bpf,+perfmon,+net_admin,+net_bind_service";
/// CAP_BPF (39), CAP_PERFMON (38), CAP_NET_ADMIN (12), CAP_NET_BIND_SERVICE (10).
const ALL_CAPS_MASK: u64 = 1 << 39 | 1 << 38 | 1 << 12 | 1 << 10;

/// Two namespaces named for this test, joined by a veth pair, with the
/// pass-through program on the client end (XDP_TX on a veth reaches the peer
/// only when the peer runs XDP). Fields drop in order: program, then namespaces.
struct Topology {
    _client_prog: XdpHandle,
    pair: VethPair,
}

impl Topology {
    fn create() -> Topology {
        let server = NetNs::create("ops-srv").expect("a server namespace (root needed)");
        let client = NetNs::create("ops-cli").expect("a client namespace");
        let (server_if, client_if) = ("ops-s", "ops-c");
        let ip = |args: &[&str]| {
            let ok = Command::new("ip").args(args).status().expect("running ip").success();
            assert!(ok, "ip {}", args.join(" "));
        };
        ip(&[
            "link",
            "add",
            server_if,
            "netns",
            server.name(),
            "type",
            "veth",
            "peer",
            "name",
            client_if,
            "netns",
            client.name(),
        ]);
        server.ip(&["addr", "add", "198.18.0.1/30", "dev", server_if]).expect("server address");
        client.ip(&["addr", "add", "198.18.0.2/30", "dev", client_if]).expect("client address");
        server.ip(&["link", "set", server_if, "up"]).expect("server end up");
        client.ip(&["link", "set", client_if, "up"]).expect("client end up");
        let pair = VethPair {
            server,
            client,
            server_if,
            client_if,
            server_addr: std::net::Ipv4Addr::new(198, 18, 0, 1),
            client_addr: std::net::Ipv4Addr::new(198, 18, 0, 2),
            server_addr6: std::net::Ipv6Addr::new(0xfd00, 0x198, 0x18, 0, 0, 0, 0, 1),
            client_addr6: std::net::Ipv6Addr::new(0xfd00, 0x198, 0x18, 0, 0, 0, 0, 2),
        };
        let obj = object_bytes().unwrap_or_else(|e| panic!("this test needs the BPF object: {e}"));
        let opts = XdpOptions { pin_dir: None, ..XdpOptions::default() };
        let prog = pair
            .client
            .enter(|| XdpHandle::attach_with(client_if, 53, &obj, &opts))
            .expect("entering the client namespace")
            .expect("a pass-through program on the client veth");
        Topology { _client_prog: prog, pair }
    }

    fn dig(&self, args: &[&str]) -> Dig {
        let server = format!("@{}", self.pair.server_addr);
        let mut all = vec![server.as_str(), "+tries=1", "+time=2", "+nocookie"];
        all.extend_from_slice(args);
        let out = self.pair.client_run("dig", &all).expect("dig in the client namespace");
        Dig::parse(&String::from_utf8_lossy(&out.stdout))
    }
}

/// A directory on the host's bpffs owned by `nobody`, as tmpfiles.d makes
/// /sys/fs/bpf/lagran for the lagran user; removed with what is left in it.
struct PinDir(PathBuf);

impl PinDir {
    /// A directory of its own per test (`tag`): the tests of one binary run
    /// side by side under one process id, and each removes its directory.
    fn create(tag: &str) -> PinDir {
        host_bpffs();
        let dir = PathBuf::from(format!("/sys/fs/bpf/lagran-ops-e2e-{tag}-{}", std::process::id()));
        std::fs::create_dir_all(&dir).expect("a directory on /sys/fs/bpf (root, bpffs mounted)");
        chown(&dir, Some(NOBODY), Some(NOBODY)).expect("chown nobody");
        PinDir(dir)
    }
}

/// Mounts the host's bpffs on /sys/fs/bpf when nothing is mounted there, as
/// systemd does at boot (a fresh CI machine may not have it yet: the daemons of
/// other tests mount it only when they pin there). It stays mounted: it is the
/// system's own mount point, and tests running beside this one may pin on it.
fn host_bpffs() {
    let mounts = std::fs::read_to_string("/proc/mounts").expect("/proc/mounts");
    if mounts.lines().any(|l| l.split_whitespace().nth(1) == Some("/sys/fs/bpf")) {
        return;
    }
    let status = Command::new("mount").args(["-t", "bpf", "bpf", "/sys/fs/bpf"]).status().expect("running mount");
    // A test beside this one may have mounted it in the meantime.
    let mounted = std::fs::read_to_string("/proc/mounts").is_ok_and(|m| m.contains(" /sys/fs/bpf bpf "));
    assert!(status.success() || mounted, "mounting bpffs on /sys/fs/bpf (root needed)");
}

impl Drop for PinDir {
    fn drop(&mut self) {
        if let Ok(entries) = std::fs::read_dir(&self.0) {
            for e in entries.flatten() {
                let _ = std::fs::remove_file(e.path());
            }
        }
        let _ = std::fs::remove_dir(&self.0);
    }
}

/// `lagran serve --demo --xdp` in the server namespace as `nobody` with `caps`
/// (setpriv's syntax), its database and geo file in `dir`.
fn unprivileged_serve(topo: &Topology, pins: &Path, dir: &Path, caps: &str) -> Child {
    let netns = format!("--net=/run/netns/{}", topo.pair.server.name());
    let inh = format!("--inh-caps=-all,{caps}");
    let ambient = format!("--ambient-caps=-all,{caps}");
    let bounding = format!("--bounding-set=-all,{caps}");
    let mut cmd = Command::new("nsenter");
    cmd.arg(netns)
        .args(["setpriv", "--reuid=65534", "--regid=65534", "--clear-groups", &inh, &ambient, &bounding, "--"])
        .arg(lagran_bin())
        .args(["--log-format", "json", "serve", "--demo", "--dns-listen", "198.18.0.1:53"])
        .args(["--api-listen", "127.0.0.1:0", "--xdp", topo.pair.server_if])
        .current_dir(dir)
        .env("DATABASE_URL", format!("sqlite://{}/lagran.db", dir.display()))
        .env("GEOIP_PATH", write_small_geo(dir))
        .env("LAGRAN_PIN_DIR", pins)
        .env("RUST_LOG", "info")
        .env_remove("ADMIN_TOKEN")
        .env_remove("AGENT_TOKEN")
        .env_remove("DNS_FALLBACK_IP")
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::piped());
    cmd.spawn().expect("starting lagran through nsenter and setpriv")
}

/// Reads `child`'s log until `lagran serving` (the API address) or its end.
fn wait_serving(child: &mut Child) -> (Option<String>, mpsc::Receiver<String>) {
    let stderr = child.stderr.take().expect("piped stderr");
    let (tx, rx) = mpsc::channel();
    std::thread::spawn(move || {
        for line in BufReader::new(stderr).lines().map_while(Result::ok) {
            if tx.send(line).is_err() {
                break;
            }
        }
    });
    let mut log = String::new();
    while let Ok(line) = rx.recv_timeout(Duration::from_secs(60)) {
        log.push_str(&line);
        log.push('\n');
        let v: serde_json::Value = serde_json::from_str(&line).unwrap_or_default();
        if v["fields"]["message"] == "lagran serving" {
            return (v["fields"]["api"].as_str().map(str::to_string), rx);
        }
    }
    panic!("the daemon ended or did not serve within 60 s:\n{log}");
}

fn stop(mut child: Child) {
    // SAFETY: kill(2) on our own child's pid.
    unsafe { libc::kill(child.id() as i32, libc::SIGTERM) };
    let _ = child.wait();
}

/// A temp directory the daemon, as nobody, may write.
fn nobody_dir() -> tempfile::TempDir {
    let dir = tempfile::tempdir().expect("temp dir");
    chown(dir.path(), Some(NOBODY), Some(NOBODY)).expect("chown nobody");
    std::fs::set_permissions(dir.path(), std::fs::Permissions::from_mode(0o755)).expect("chmod");
    dir
}

#[test]
fn a_daemon_that_is_not_root_answers_in_the_kernel_with_the_stated_capabilities() {
    if !["dig", "ip", "nsenter", "setpriv", "curl"].into_iter().all(|t| have_tool(t, "privileges")) {
        return;
    }
    let topo = Topology::create();
    let pins = PinDir::create("caps");
    let dir = nobody_dir();
    let mut child = unprivileged_serve(&topo, &pins.0, dir.path(), ALL_CAPS);
    let (api, _log) = wait_serving(&mut child);
    let api = api.expect("the API address in the serving line");

    // The process really is nobody with exactly those capabilities. `nsenter`
    // execs setpriv, which execs lagran: the child's pid is the daemon's.
    let status = std::fs::read_to_string(format!("/proc/{}/status", child.id())).expect("the daemon's status");
    let field = |name: &str| status.lines().find_map(|l| l.strip_prefix(name)).unwrap_or_default().trim().to_string();
    assert!(field("Uid:").starts_with("65534"), "runs as nobody:\n{status}");
    assert_eq!(u64::from_str_radix(&field("CapEff:"), 16).ok(), Some(ALL_CAPS_MASK), "{status}");
    let pinned = std::fs::read_dir(&pins.0).expect("the pin directory").count();
    assert!(pinned > 0, "the maps and the link are pinned in the directory nobody owns");

    let answer = topo.dig(&["edge.lagran.net", "A", "+subnet=58.60.0.0/24"]);
    assert_eq!(answer.answers("A"), vec!["203.0.113.21"], "{}", answer.text);
    let metrics_url = format!("http://{api}/metrics");
    let out = topo.pair.server.command("curl").args(["-s", &metrics_url]).output().expect("curl in the namespace");
    let m = String::from_utf8_lossy(&out.stdout);
    assert_eq!(metric(&m, "lagran_xdp_packets_total{result=\"answered\"}"), 1, "the kernel answered:\n{m}");
    assert_eq!(metric(&m, "lagran_dns_queries_total{transport=\"udp\"}"), 0, "userspace saw nothing:\n{m}");
    stop(child);
    assert!(pins.0.is_dir(), "a daemon that is not root leaves the directory it could not make again");
}

#[test]
fn without_cap_bpf_the_daemon_says_which_capability_is_missing() {
    if !["ip", "nsenter", "setpriv"].into_iter().all(|t| have_tool(t, "privileges")) {
        return;
    }
    let topo = Topology::create();
    let pins = PinDir::create("nocap");
    let dir = nobody_dir();
    let mut child = unprivileged_serve(&topo, &pins.0, dir.path(), "+perfmon,+net_admin,+net_bind_service");
    let mut status = None;
    for _ in 0..600 {
        status = child.try_wait().expect("waiting for the daemon");
        if status.is_some() {
            break;
        }
        std::thread::sleep(Duration::from_millis(100));
    }
    let Some(status) = status else {
        stop(child);
        panic!("the daemon did not give up within 60 s without CAP_BPF");
    };
    let out = child.wait_with_output().expect("the daemon's log");
    let log = String::from_utf8_lossy(&out.stderr);
    assert!(!status.success(), "it must not serve without CAP_BPF:\n{log}");
    assert!(log.contains("--xdp needs CAP_BPF (missing"), "the error names CAP_BPF:\n{log}");
    assert!(!log.contains("CAP_PERFMON (missing") && !log.contains("CAP_NET_ADMIN (missing"), "and only it:\n{log}");
    assert_eq!(std::fs::read_dir(&pins.0).expect("the pin directory").count(), 0, "nothing was loaded or pinned");
}
