//! Fail static, end to end: `lagran control` on a SQLite file with a fleet
//! sending heartbeats; the filesystem under the file goes read-only (an
//! ext4 image mounted with `errors=remount-ro`, whose error is triggered
//! through `/sys/fs/ext4/<dev>/trigger_fs_error`, as a failing disk would:
//! the running daemon's writes fail with EROFS while its reads work) for
//! several heartbeat timeouts, and no node leaves the answers while
//! `/healthz` says why. A filesystem that went read-only on an error stays
//! so until it is mounted again, so the daemon is then restarted on the
//! same file, remounted, and the normal timeout and the mass-withdrawal
//! guard apply again.
//!
//! `LAGRAN_FAIL_STATIC_NODES` (default 100) and `LAGRAN_FAIL_STATIC_SECS`
//! (how long the store refuses writes, default 10 s: five 2 s timeouts) make
//! the long version: `cargo xtask chaos` runs it for 300 s.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use serde_json::{Value, json};

use crate::support::{Daemon, Options, Role, have_tool};

const TIMEOUT_SECS: u64 = 2;
const DOMAIN: &str = "fleet.edge.lagran.net";
const SCHEDULE: &str = "/api/v1/schedule?domain=fleet.edge.lagran.net&subnet=58.60.0.0/24";

fn env_or(name: &str, default: u64) -> u64 {
    std::env::var(name).ok().and_then(|v| v.parse().ok()).unwrap_or(default)
}

/// A small ext4 filesystem in an image file, loop-mounted with
/// `errors=remount-ro`; unmounted when dropped (lazily, also on a failed
/// assertion while a daemon still holds files in it).
struct Ext4Image {
    image: PathBuf,
    mount: PathBuf,
}

impl Ext4Image {
    fn create(dir: &Path) -> Ext4Image {
        let image = dir.join("store.ext4");
        let mount = dir.join("db");
        std::fs::File::create(&image).unwrap().set_len(64 << 20).unwrap();
        run(Command::new("mkfs.ext4").args(["-q", "-F"]).arg(&image));
        std::fs::create_dir(&mount).unwrap();
        let fs = Ext4Image { image, mount };
        fs.mount();
        fs
    }

    fn mount(&self) {
        run(Command::new("mount").args(["-o", "loop,errors=remount-ro"]).arg(&self.image).arg(&self.mount));
    }

    fn unmount(&self) {
        run(Command::new("umount").arg(&self.mount));
    }

    /// Raises an ext4 error on the filesystem: `errors=remount-ro` turns it
    /// read-only at once, for every open descriptor too.
    fn fail(&self) {
        let out = Command::new("findmnt").args(["-n", "-o", "SOURCE"]).arg(&self.mount).output().unwrap();
        let device = String::from_utf8_lossy(&out.stdout).trim().to_string();
        let name = Path::new(&device).file_name().expect("the loop device").to_string_lossy().into_owned();
        std::fs::write(format!("/sys/fs/ext4/{name}/trigger_fs_error"), "lagran fail_static test\n")
            .expect("triggering an ext4 error");
        let deadline = Instant::now() + Duration::from_secs(5);
        while std::fs::write(self.mount.join("probe"), "x").is_ok() {
            assert!(Instant::now() < deadline, "the filesystem did not go read-only");
            std::thread::sleep(Duration::from_millis(50));
        }
    }
}

impl Drop for Ext4Image {
    fn drop(&mut self) {
        let _ = Command::new("umount").arg("-l").arg(&self.mount).status();
    }
}

fn run(cmd: &mut Command) {
    let out = cmd.output().unwrap_or_else(|e| panic!("{cmd:?}: {e}"));
    assert!(out.status.success(), "{cmd:?}: {}", String::from_utf8_lossy(&out.stderr));
}

fn start_control(db: &Path) -> Daemon {
    Daemon::start(Options {
        role: Role::Control,
        database_url: Some(format!("sqlite://{}", db.display())),
        config: Some(format!("[health]\nheartbeat_timeout_secs = {TIMEOUT_SECS}\ninterval_secs = 1\n")),
        ..Options::default()
    })
}

fn wait_for_the_whole_fleet(d: &Daemon, nodes: usize) {
    let deadline = Instant::now() + Duration::from_secs(15);
    while fleet_state(d) != (nodes, vec![]) && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(200));
    }
    assert_eq!(fleet_state(d), (nodes, vec![]), "every node reports and answers");
}

/// Agents reporting for every node, round after round, until told to stop
/// (bounded: at most `limit`). Each thread takes a share of the nodes.
struct Fleet {
    stop: Arc<AtomicBool>,
    /// Nodes that fall silent (by index) while the rest go on.
    silent: Arc<std::sync::Mutex<Vec<usize>>>,
    threads: Vec<std::thread::JoinHandle<u64>>,
}

impl Fleet {
    fn start(d: &Daemon, nodes: usize, limit: Duration) -> Fleet {
        let stop = Arc::new(AtomicBool::new(false));
        let silent = Arc::new(std::sync::Mutex::new(Vec::new()));
        let threads = (0..4)
            .map(|t| {
                let (stop, silent, api) = (stop.clone(), silent.clone(), d.api);
                std::thread::spawn(move || {
                    let deadline = Instant::now() + limit;
                    let mut failed = 0;
                    while !stop.load(Ordering::SeqCst) && Instant::now() < deadline {
                        let round = Instant::now();
                        for i in (t..nodes).step_by(4) {
                            if silent.lock().unwrap().contains(&i) {
                                continue;
                            }
                            let url = format!("http://{api}/api/v1/nodes/{}/heartbeat", node_name(i));
                            let hb = json!({"cpu_usage": 10.0, "memory_usage": 20.0, "conns": i});
                            let r = ureq::post(&url)
                                .timeout(Duration::from_secs(5))
                                .set("x-lagran-agent-token", &node_token(i))
                                .send_json(hb);
                            if r.is_err() {
                                failed += 1;
                            }
                        }
                        std::thread::sleep(Duration::from_millis(500).saturating_sub(round.elapsed()));
                    }
                    failed
                })
            })
            .collect();
        Fleet { stop, silent, threads }
    }

    fn silence(&self, nodes: impl IntoIterator<Item = usize>) {
        self.silent.lock().unwrap().extend(nodes);
    }

    /// Stops the agents; how many heartbeats failed.
    fn stop(self) -> u64 {
        self.stop.store(true, Ordering::SeqCst);
        self.threads.into_iter().map(|t| t.join().unwrap()).sum()
    }
}

fn node_name(i: usize) -> String {
    format!("fs-{i:03}")
}

fn node_token(i: usize) -> String {
    format!("fs-{i:03}-agent-token-0123")
}

/// The fleet nodes the answers may take, and those the console shows dead.
fn fleet_state(d: &Daemon) -> (usize, Vec<String>) {
    let (s, v) = d.get(SCHEDULE);
    assert_eq!(s, 200, "{v}");
    let candidates = v["candidates"].as_array().map_or(0, Vec::len);
    let (s, nodes) = d.get("/api/v1/console/nodes");
    assert_eq!(s, 200, "{nodes}");
    let dead = nodes
        .as_array()
        .unwrap()
        .iter()
        .filter(|n| n["pool"] == "fleet" && !n["dead"].is_null())
        .map(|n| format!("{}: {}", n["name"], n["dead"]))
        .collect();
    (candidates, dead)
}

fn metric(d: &Daemon, name: &str) -> Option<f64> {
    let (_, v) = d.get("/metrics");
    let text = v.as_str().unwrap_or_default().to_string();
    text.lines().find_map(|l| l.strip_prefix(name)?.strip_prefix(' ')?.trim().parse().ok())
}

fn setup(d: &Daemon, nodes: usize) {
    let (s, v) = d.http(
        "PUT",
        &format!("/api/v1/domains/{DOMAIN}"),
        Some(json!({"zone": "edge.lagran.net", "pool": "fleet"})),
        &[],
    );
    assert!(s == 200 || s == 201, "{v}");
    for i in 0..nodes {
        let body = json!({
            "name": node_name(i), "pool": "fleet", "public_ip": format!("198.51.{}.{}", 100 + i / 250, 1 + i % 250),
            "country": "中国", "province": "广东", "city": "深圳", "isp": "电信", "auth_token": node_token(i),
        });
        let (s, v) = d.http("POST", "/api/v1/nodes", Some(body), &[]);
        assert_eq!(s, 201, "{v}");
    }
}

#[test]
fn a_store_that_refuses_writes_withdraws_no_node() {
    for tool in ["mkfs.ext4", "mount", "findmnt"] {
        if !have_tool(tool, "fail_static") {
            return;
        }
    }
    let nodes = env_or("LAGRAN_FAIL_STATIC_NODES", 100) as usize;
    let outage = Duration::from_secs(env_or("LAGRAN_FAIL_STATIC_SECS", 5 * TIMEOUT_SECS));
    let dir = tempfile::tempdir().unwrap();
    let fs = Ext4Image::create(dir.path());
    let db = fs.mount.join("control.db");
    let d = start_control(&db);
    setup(&d, nodes);
    let fleet = Fleet::start(&d, nodes, outage + Duration::from_secs(60));
    wait_for_the_whole_fleet(&d, nodes);
    assert_eq!(d.get("/healthz").0, 200);

    fs.fail();
    // The writes really fail: an operator's write is refused, and the daemon notices.
    let (s, v) = d.http("PATCH", "/api/v1/nodes/fs-000", Some(json!({"weight": 50})), &[]);
    assert_eq!(s, 500, "a write to a read-only database fails: {v}");
    assert_eq!(v["error"], "internal error", "the client gets an id, not the database's text: {v}");
    let id = v["id"].as_str().expect("an error id").to_string();
    // The log is read from the daemon's stderr by a thread: give the line a moment to arrive.
    let deadline = Instant::now() + Duration::from_secs(5);
    while !d.log().contains(&id) && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(50));
    }
    assert!(d.log().contains(&id), "the id finds the log line: {v}");
    let started = Instant::now();
    let mut checks = 0;
    while started.elapsed() < outage {
        let (candidates, dead) = fleet_state(&d);
        assert_eq!(candidates, nodes, "no node leaves the answers {:?} into the fault: {dead:?}", started.elapsed());
        assert!(dead.is_empty(), "no node is dead {:?} into the fault: {dead:?}", started.elapsed());
        if started.elapsed() > Duration::from_secs(2) {
            let (s, h) = d.get("/healthz");
            assert_eq!((s, h["status"].as_str()), (503, Some("degraded")), "{h}");
            let fault = &h["fail_static"]["store_write_fault"];
            assert!(fault["since_ms"].as_i64().is_some_and(|t| t > 0), "healthz says since when: {h}");
            assert!(fault.get("error").is_none(), "the database's text stays in the log: {h}");
            assert!(h["fail_static"]["reasons"].to_string().contains("refuses writes"), "{h}");
            assert_eq!(metric(&d, "lagran_store_writable"), Some(0.0));
        }
        checks += 1;
        std::thread::sleep(Duration::from_millis(500));
    }
    assert!(checks >= outage.as_secs() as usize, "checked throughout the fault ({checks} checks)");
    assert!(metric(&d, "lagran_store_write_errors_total").is_some_and(|n| n > 0.0));
    fleet.stop();

    // The disk is back: the filesystem mounted again and the daemon restarted on the same file.
    drop(d);
    fs.unmount();
    fs.mount();
    let d = start_control(&db);
    let fleet = Fleet::start(&d, nodes, Duration::from_secs(120));
    wait_for_the_whole_fleet(&d, nodes);
    let (s, h) = d.get("/healthz");
    assert_eq!((s, &h["fail_static"]), (200, &Value::Null), "writes work: {h}");
    assert_eq!(metric(&d, "lagran_store_writable"), Some(1.0));
    let (s, v) = d.http("PATCH", "/api/v1/nodes/fs-000", Some(json!({"weight": 50})), &[]);
    assert_eq!(s, 200, "writes work again: {v}");

    // Timeouts apply: one silent node leaves within its timeout (one of many is not a mass event).
    fleet.silence([0]);
    let deadline = Instant::now() + Duration::from_secs(3 * TIMEOUT_SECS + 5);
    while fleet_state(&d).1.is_empty() && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(200));
    }
    let (candidates, dead) = fleet_state(&d);
    assert_eq!((candidates, dead.len()), (nodes - 1, 1), "the silent node left: {dead:?}");
    assert!(dead[0].contains("fs-000") && dead[0].contains("HeartbeatTimeout"), "{dead:?}");

    // The whole fleet falls silent at once (after the one node's timeout window has passed, so
    // it is not part of the event): the guard holds them all (no probes to confirm).
    std::thread::sleep(Duration::from_secs(2 * TIMEOUT_SECS));
    fleet.silence(1..nodes);
    std::thread::sleep(Duration::from_secs(3 * TIMEOUT_SECS));
    let (candidates, dead) = fleet_state(&d);
    assert_eq!((candidates, dead.len()), (nodes - 1, 1), "a pool going silent at once is held: {dead:?}");
    let (s, h) = d.get("/healthz");
    assert_eq!(s, 503, "{h}");
    assert_eq!(h["fail_static"]["held_nodes"].as_array().map(Vec::len), Some(nodes - 1), "{h}");
    assert_eq!(metric(&d, "lagran_withdrawals_held"), Some((nodes - 1) as f64));
    assert!(d.log().contains("none is withdrawn until probes confirm each"), "and it is logged");
    fleet.stop();
    drop(d);
}
