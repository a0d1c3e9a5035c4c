//! Production split: `lagran control` + `lagran dns --control URL`. An NS host
//! follows the route-table stream, keeps answering when the control plane is
//! gone (also after its own restart), and answers DNS_FALLBACK_IP once stale.

use std::time::Duration;

use serde_json::json;

use crate::support::{Daemon, Options, Role, have_tool};

const SHENZHEN: [&str; 3] = ["edge.lagran.net", "A", "+subnet=58.60.0.0/24"];

fn ns_host(control: &Daemon, state_file: &std::path::Path, env: Vec<(String, String)>) -> Daemon {
    Daemon::start(Options {
        role: Role::Dns { control: format!("http://{}", control.api), state_file: state_file.to_path_buf() },
        env,
        ..Options::default()
    })
}

#[test]
fn ns_host_follows_the_control_plane_and_survives_its_loss() {
    if !have_tool("dig", "ns_host") {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let state = dir.path().join("routes.json");
    let control = Daemon::start(Options { role: Role::Control, ..Options::default() });
    let ns = ns_host(&control, &state, vec![]);
    let r = ns.dig_until(&SHENZHEN, Duration::from_secs(10), |r| !r.answers("A").is_empty());
    assert_eq!(r.answers("A"), vec!["203.0.113.21"], "the NS host answers from the streamed table\n{}", ns.log());

    // A change on the control plane reaches the NS host promptly.
    let (s, _) = control.http("PATCH", "/api/v1/nodes/gz-01", Some(json!({"status": "offline"})), &[]);
    assert_eq!(s, 200);
    let r = ns.dig_until(&SHENZHEN, Duration::from_secs(5), |r| r.answers("A") == vec!["203.0.113.22"]);
    assert_eq!(r.answers("A"), vec!["203.0.113.22"], "{}", ns.log());

    // The control plane goes away: the NS host keeps answering.
    drop(control);
    std::thread::sleep(Duration::from_millis(500));
    assert_eq!(ns.dig(&SHENZHEN).answers("A"), vec!["203.0.113.22"], "answers survive the control plane");
    let (s, v) = ns.get("/healthz");
    assert_eq!(s, 200, "an NS host with a table stays healthy: {v}");
    let (_, m) = ns.get("/metrics");
    assert!(m.as_str().unwrap_or("").contains("lagran_control_plane_failures_total"), "{m}");

    // Restarted with no control plane at all: it serves the saved table.
    drop(ns);
    assert!(state.is_file(), "the last table was saved");
    let gone = Daemon::start(Options { role: Role::Control, ..Options::default() });
    let addr = gone.api;
    drop(gone); // an address where nothing listens any more
    let ns = Daemon::start(Options {
        role: Role::Dns { control: format!("http://{addr}"), state_file: state.clone() },
        ..Options::default()
    });
    assert_eq!(ns.dig(&SHENZHEN).answers("A"), vec!["203.0.113.22"], "the saved table answers\n{}", ns.log());
}

/// DNS_STALE_SECS of the staleness test: short, yet with room for a loaded
/// CI machine to take a second over a long-poll round (a third of it).
const STALE_SECS: u64 = 4;
const STALE_MS: i64 = STALE_SECS as i64 * 1_000;

#[test]
fn a_stale_table_answers_the_fallback_when_one_is_set() {
    if !have_tool("dig", "stale") {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let state = dir.path().join("routes.json");
    let control = Daemon::start(Options { role: Role::Control, ..Options::default() });
    let env = vec![
        ("DNS_STALE_SECS".to_string(), STALE_SECS.to_string()),
        ("DNS_FALLBACK_IP".to_string(), "192.0.2.99".to_string()),
    ];
    let ns = ns_host(&control, &state, env);
    // Until its first table arrives the NS host has nothing confirmed: it may
    // answer the fallback, so wait for the table's answer itself.
    let r = ns.dig_until(&SHENZHEN, Duration::from_secs(10), |r| r.answers("A") == vec!["203.0.113.21"]);
    assert_eq!(r.answers("A"), vec!["203.0.113.21"], "the table from the control plane answers\n{}", ns.log());
    // A quiet, healthy control plane: the table outlives DNS_STALE_SECS but
    // stays confirmed (every poll_wait, a third of it), so it is not stale.
    std::thread::sleep(Duration::from_millis(STALE_SECS * 1_000 + 1_500));
    assert_eq!(ns.dig(&SHENZHEN).answers("A"), vec!["203.0.113.21"], "a confirmed table is not stale\n{}", ns.log());
    let confirmed = confirmed_ms_ago(&ns);
    assert!((0..STALE_MS).contains(&confirmed), "the stream keeps confirming the table: {confirmed} ms ago");
    // The confirmations stop: past DNS_STALE_SECS on the NS host's clock, the fallback.
    drop(control);
    let r = ns.dig_until(&SHENZHEN, Duration::from_secs(STALE_SECS + 6), |r| r.answers("A") == vec!["192.0.2.99"]);
    assert_eq!(r.answers("A"), vec!["192.0.2.99"], "past DNS_STALE_SECS the fallback answers\n{}", r.text);
    let r = ns.dig(&["_version.edge.lagran.net", "TXT"]);
    assert!(r.answers("TXT").join(" ").contains("age_ms="), "{}", r.text);
    assert!(confirmed_ms_ago(&ns) > STALE_MS, "_version shows the confirmations stopped: {}", r.text);
    let (_, m) = ns.get("/metrics");
    assert!(m.as_str().unwrap_or("").contains("lagran_route_table_stale 1"), "{m}");
}

/// `confirmed_ms_ago=` of the NS host's `_version` TXT.
fn confirmed_ms_ago(ns: &Daemon) -> i64 {
    let r = ns.dig(&["_version.edge.lagran.net", "TXT"]);
    let txt = r.answers("TXT").join(" ").replace('"', "");
    txt.split_whitespace()
        .find_map(|w| w.strip_prefix("confirmed_ms_ago="))
        .and_then(|v| v.parse().ok())
        .unwrap_or_else(|| panic!("no confirmed_ms_ago= in {}", r.text))
}

fn signal(pid: u32, sig: &str) -> bool {
    std::process::Command::new("kill").args([sig, &pid.to_string()]).status().unwrap().success()
}

/// SIGHUP re-reads the NS host's configuration: a corrected agent token is
/// taken at once, a broken file is refused and the running settings stay, and
/// the process never dies of the signal.
#[test]
fn sighup_reloads_the_ns_hosts_configuration_and_never_kills_it() {
    if !have_tool("dig", "sighup") {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let state = dir.path().join("routes.json");
    let env = vec![("AGENT_TOKEN".to_string(), "the-right-token-0123".to_string())];
    let control = Daemon::start(Options { role: Role::Control, env, ..Options::default() });
    let ns = Daemon::start(Options {
        role: Role::Dns { control: format!("http://{}", control.api), state_file: state },
        config: Some("agent_token = \"a-wrong-token-0123\"\n".to_string()),
        ..Options::default()
    });
    // With the wrong token the stream is refused: no table.
    let deadline = std::time::Instant::now() + Duration::from_secs(10);
    while !ns.log().contains("the agent token is wrong") {
        assert!(std::time::Instant::now() < deadline, "the wrong token was not refused:\n{}", ns.log());
        std::thread::sleep(Duration::from_millis(100));
    }
    assert!(ns.dig(&SHENZHEN).answers("A").is_empty());

    // The operator fixes the file and sends SIGHUP: the table arrives, nothing restarted.
    std::fs::write(ns.config_path(), "agent_token = \"the-right-token-0123\"\n").unwrap();
    assert!(signal(ns.pid(), "-HUP"));
    let r = ns.dig_until(&SHENZHEN, Duration::from_secs(10), |r| !r.answers("A").is_empty());
    assert_eq!(r.answers("A"), vec!["203.0.113.21"], "the reloaded token works\n{}", ns.log());
    assert!(ns.log().contains("agent_token_changed\":true"), "{}", ns.log());

    // A broken file: refused, logged, the NS host keeps serving.
    std::fs::write(ns.config_path(), "agent_token = [\n").unwrap();
    for _ in 0..3 {
        assert!(signal(ns.pid(), "-HUP"));
        std::thread::sleep(Duration::from_millis(200));
    }
    assert!(signal(ns.pid(), "-0"), "the NS host is alive after SIGHUPs:\n{}", ns.log());
    assert!(ns.log().contains("the running one stays"), "{}", ns.log());
    assert_eq!(ns.dig(&SHENZHEN).answers("A"), vec!["203.0.113.21"]);
    let (s, v) = ns.get("/healthz");
    assert_eq!(s, 200, "{v}");
}

/// The NS host's state file is saved durably: the temporary file is fsynced
/// before the rename, and the directory after it (watched with strace).
#[test]
fn the_state_file_is_fsynced_before_and_after_its_rename() {
    if !have_tool("strace", "state_fsync") || !have_tool("dig", "state_fsync") {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let state = dir.path().join("routes.json");
    let trace = dir.path().join("strace.out");
    let control = Daemon::start(Options { role: Role::Control, ..Options::default() });
    let mut strace = std::process::Command::new("strace")
        .args(["-f", "-y", "-qq", "-e", "trace=fsync,fdatasync,rename,renameat,renameat2", "-o"])
        .arg(&trace)
        .arg(crate::support::lagran_bin())
        .args(["dns", "--control", &format!("http://{}", control.api)])
        .args(["--dns-listen", "127.0.0.1:0", "--api-listen", "127.0.0.1:0", "--state-file"])
        .arg(&state)
        .current_dir(dir.path())
        .env_remove("AGENT_TOKEN")
        .stdin(std::process::Stdio::null())
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .spawn()
        .expect("starting lagran dns under strace");
    let deadline = std::time::Instant::now() + Duration::from_secs(20);
    while !state.is_file() && std::time::Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(100));
    }
    std::thread::sleep(Duration::from_millis(500));
    // Stop the traced daemon (strace's only child), then strace ends by itself.
    let children = std::process::Command::new("pgrep").args(["-P", &strace.id().to_string()]).output().unwrap();
    for pid in String::from_utf8_lossy(&children.stdout).split_whitespace() {
        signal(pid.parse().unwrap(), "-TERM");
    }
    let waited = std::time::Instant::now();
    while strace.try_wait().unwrap().is_none() {
        if waited.elapsed() > Duration::from_secs(10) {
            let _ = strace.kill();
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    assert!(state.is_file(), "the NS host saved its table");
    let text = std::fs::read_to_string(&trace).unwrap();
    let tmp = state.with_extension("tmp");
    let (tmp, json, dirname) =
        (tmp.display().to_string(), state.display().to_string(), dir.path().display().to_string());
    let lines: Vec<&str> = text.lines().collect();
    let find = |pred: &dyn Fn(&str) -> bool| lines.iter().position(|l| pred(l));
    let rename = find(&|l: &str| l.contains("rename") && l.contains(&tmp) && l.contains(&json) && l.ends_with("= 0"))
        .unwrap_or_else(|| panic!("no rename of {tmp} to {json}:\n{text}"));
    let synced_tmp = find(&|l: &str| l.contains("fsync(") && l.contains(&format!("<{tmp}>")))
        .unwrap_or_else(|| panic!("the temporary file was never fsynced:\n{text}"));
    let synced_dir = lines[rename..].iter().any(|l| l.contains("fsync(") && l.contains(&format!("<{dirname}>")));
    assert!(synced_tmp < rename, "the data is fsynced before the rename:\n{text}");
    assert!(synced_dir, "the directory is fsynced after the rename:\n{text}");
}
