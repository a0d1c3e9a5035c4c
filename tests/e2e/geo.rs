//! Geo data operations on a running daemon, seen through `dig`: overrides through the
//! API and the CLI change answers without a restart; a reload through the API is
//! refused above the change ratio (answers unchanged), accepted when forced; a
//! corrupt file is refused with its name; SIGHUP reloads; the `lagran geo` file
//! commands (build, lookup --raw, diff, partitions) on the binary.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

use lagran::geo::formats::RangeBuilder;
use lagran::geo::{IpVersion, write_xdb};
use serde_json::{Value, json};

use crate::support::{Daemon, Geo, Options, have_tool, lagran_bin};

const ADMIN: &str = "geo-admin-secret";
const AUTH: (&str, &str) = ("authorization", "Bearer geo-admin-secret");
const GZ01: &str = "203.0.113.21";
const HK01: &str = "203.0.113.22";
const SZ: &str = "中国|0|广东省|深圳市|电信";

/// The harness's small file (Shenzhen Telecom 58.60.0.0/14, Beijing Unicom
/// 123.112.0.0/12, the rest US) with `over` laid on top (more specific wins).
fn write_geo(path: &Path, over: &[(&str, &str)]) {
    let mut b = RangeBuilder::new();
    b.add("0.0.0.0/0".parse().unwrap(), "美国|0|0|0|0");
    b.add("58.60.0.0/14".parse().unwrap(), SZ);
    b.add("123.112.0.0/12".parse().unwrap(), "中国|0|北京|北京市|联通");
    for (net, region) in over {
        b.add(net.parse().unwrap(), region);
    }
    let bytes = write_xdb(IpVersion::V4, &b.finish().v4).expect("writing the test xdb");
    // Replace atomically, as an operator would.
    let tmp = path.with_extension("tmp");
    std::fs::write(&tmp, bytes).unwrap();
    std::fs::rename(&tmp, path).unwrap();
}

fn start(geo: &Path) -> Daemon {
    Daemon::start(Options {
        geo: Geo::Real(geo.to_path_buf()),
        env: vec![("ADMIN_TOKEN".into(), ADMIN.into())],
        ..Options::default()
    })
}

fn a_for(d: &Daemon, subnet: &str) -> Vec<String> {
    d.dig(&["edge.lagran.net", "A", &format!("+subnet={subnet}")]).answers("A")
}

/// Waits (bounded) until `subnet` is answered `want`; returns the last answer.
fn wait_for(d: &Daemon, subnet: &str, want: &str) -> Vec<String> {
    let arg = format!("+subnet={subnet}");
    d.dig_until(&["edge.lagran.net", "A", &arg], Duration::from_secs(10), |r| r.answers("A") == vec![want.to_string()])
        .answers("A")
}

/// Runs the `lagran` binary with `args`, the API token and no stray configuration.
fn lagran(dir: &Path, env: &[(&str, &str)], args: &[&str]) -> (bool, String, String) {
    let out = Command::new(lagran_bin())
        .current_dir(dir)
        .env_remove("GEOIP_PATH")
        .env_remove("GEOIP_IPV6_PATH")
        .env_remove("LAGRAN_API")
        .env("ADMIN_TOKEN", ADMIN)
        .env("RUST_LOG", "warn")
        .envs(env.iter().copied())
        .args(args)
        .output()
        .expect("running lagran");
    (
        out.status.success(),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

#[test]
fn override_via_api_and_cli_changes_the_answer_without_restart() {
    if !have_tool("dig", "override_via_api") {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let geo = dir.path().join("geo.xdb");
    write_geo(&geo, &[]);
    let d = start(&geo);
    assert_eq!(a_for(&d, "123.112.5.0/24"), vec![HK01], "Beijing Unicom has no node of its own");

    // Writes need the admin token; bad input names the field.
    let body = json!({"prefix": "123.112.0.0/16", "country": "CN", "province": "广东", "city": "深圳",
                      "isp": "电信", "note": "ticket 42: this /16 is in Shenzhen"});
    assert_eq!(d.http("POST", "/api/v1/geo/overrides", Some(body.clone()), &[]).0, 401);
    let (status, err) = d.http("POST", "/api/v1/geo/overrides", Some(json!({"prefix": "123.112.0.1/16"})), &[AUTH]);
    assert_eq!((status, err["field"].as_str()), (422, Some("prefix")), "{err}");
    let (status, saved) = d.http("POST", "/api/v1/geo/overrides", Some(body), &[AUTH]);
    assert_eq!(status, 201, "{saved}");
    assert_eq!(saved["created_by"], "api");

    // The next answer already uses it, and only inside the prefix.
    assert_eq!(a_for(&d, "123.112.5.0/24"), vec![GZ01]);
    assert_eq!(a_for(&d, "123.113.0.0/24"), vec![HK01]);
    let (status, list) = d.http("GET", "/api/v1/geo/overrides", None, &[AUTH]);
    assert_eq!(status, 200);
    assert_eq!(list.as_array().map(Vec::len), Some(1), "{list}");

    assert_eq!(d.http("DELETE", "/api/v1/geo/overrides/123.112.0.0%2F16", None, &[AUTH]).0, 204);
    assert_eq!(d.http("DELETE", "/api/v1/geo/overrides/123.112.0.0%2F16", None, &[AUTH]).0, 404);
    assert_eq!(a_for(&d, "123.112.5.0/24"), vec![HK01], "removed: the file's tuple again");

    // The same through `lagran geo override` (hyper client, bearer token from ADMIN_TOKEN).
    let api = format!("http://{}", d.api);
    let (ok, out, err) = lagran(
        dir.path(),
        &[],
        &[
            "geo",
            "override",
            "add",
            "123.112.7.0/24",
            "--country",
            "CN",
            "--province",
            "广东",
            "--city",
            "深圳",
            "--isp",
            "电信",
            "--by",
            "e2e",
            "--api",
            &api,
        ],
    );
    assert!(ok, "{out}{err}");
    assert!(out.contains("created override") && out.contains("123.112.7.0/24"), "{out}");
    assert_eq!(a_for(&d, "123.112.7.0/24"), vec![GZ01]);
    let (ok, out, err) = lagran(dir.path(), &[("LAGRAN_API", &api)], &["geo", "override", "list"]);
    assert!(ok && out.contains("123.112.7.0/24") && out.contains("e2e"), "{out}{err}");
    let (ok, out, err) = lagran(dir.path(), &[], &["geo", "override", "rm", "123.112.7.0/24", "--api", &api]);
    assert!(ok, "{out}{err}");
    assert_eq!(a_for(&d, "123.112.7.0/24"), vec![HK01]);
    // A wrong token is refused with the API's message.
    let (ok, _, err) = lagran(
        dir.path(),
        &[("ADMIN_TOKEN", "a-wrong-admin-token-0123")],
        &["geo", "override", "rm", "1.2.3.0/24", "--api", &api],
    );
    assert!(!ok && err.contains("401"), "{err}");
}

#[test]
fn reload_via_api_refused_above_the_ratio_accepted_when_forced() {
    if !have_tool("dig", "reload_via_api") {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let geo = dir.path().join("geo.xdb");
    write_geo(&geo, &[]);
    let d = start(&geo);
    assert_eq!(a_for(&d, "150.0.0.0/24"), vec![HK01]);

    // A quarter of the address space moves to Shenzhen: refused, nothing changes.
    write_geo(&geo, &[("128.0.0.0/2", SZ)]);
    assert_eq!(d.http("POST", "/api/v1/geo/reload", None, &[]).0, 401);
    let (status, report) = d.http("POST", "/api/v1/geo/reload", None, &[AUTH]);
    assert_eq!(status, 409, "{report}");
    assert_eq!(report["accepted"], false);
    let ratio = report["ratio"].as_f64().unwrap();
    assert!(ratio > 0.2 && ratio < 0.35, "{report}");
    assert_eq!(report["sampled"], 100_000);
    assert_eq!(report["by_province"][0]["name"], "广东", "{report}");
    assert_eq!(a_for(&d, "150.0.0.0/24"), vec![HK01], "a refused reload keeps the old data");

    // Forced: the next answer uses the new data.
    let (status, report) = d.http("POST", "/api/v1/geo/reload", Some(json!({"force": true})), &[AUTH]);
    assert_eq!(status, 200, "{report}");
    assert_eq!((report["accepted"].clone(), report["forced"].clone()), (Value::Bool(true), Value::Bool(true)));
    assert_eq!(a_for(&d, "150.0.0.0/24"), vec![GZ01]);

    // A corrupt file is refused even when forced, naming the file; answers stay.
    let good = std::fs::read(&geo).unwrap();
    std::fs::write(&geo, &good[..good.len() - 7]).unwrap();
    let (status, err) = d.http("POST", "/api/v1/geo/reload", Some(json!({"force": true})), &[AUTH]);
    assert_eq!(status, 422, "{err}");
    let msg = err["error"].as_str().unwrap_or_default();
    assert!(msg.contains("geo.xdb") && msg.contains("past the end"), "{err}");
    assert_eq!(a_for(&d, "150.0.0.0/24"), vec![GZ01]);
    assert_eq!(a_for(&d, "58.60.0.0/24"), vec![GZ01]);

    // A small change passes the check (also through `lagran geo reload`).
    write_geo(&geo, &[("128.0.0.0/2", SZ), ("123.112.0.0/12", SZ)]);
    let (ok, out, err) = lagran(dir.path(), &[], &["geo", "reload", "--api", &format!("http://{}", d.api)]);
    assert!(ok && out.contains("accepted"), "{out}{err}");
    assert_eq!(a_for(&d, "123.112.0.0/24"), vec![GZ01]);
    // And a big one through the CLI fails the command, printing why.
    write_geo(&geo, &[]);
    let (ok, out, err) = lagran(dir.path(), &[], &["geo", "reload", "--api", &format!("http://{}", d.api)]);
    assert!(!ok && err.contains("refused"), "{out}{err}");
    assert_eq!(a_for(&d, "150.0.0.0/24"), vec![GZ01]);
}

/// The pid of the process listening on `port` (TCP, IPv4), from /proc.
fn pid_listening_on(port: u16) -> Option<u32> {
    let tcp = std::fs::read_to_string("/proc/net/tcp").ok()?;
    let inode = tcp.lines().skip(1).find_map(|l| {
        let f: Vec<&str> = l.split_whitespace().collect();
        let local_port = u16::from_str_radix(f.get(1)?.rsplit(':').next()?, 16).ok()?;
        (local_port == port && f.get(3) == Some(&"0A")).then(|| f.get(9).map(|s| s.to_string()))?
    })?;
    let want = format!("socket:[{inode}]");
    for p in std::fs::read_dir("/proc").ok()?.flatten() {
        let Ok(pid) = p.file_name().to_string_lossy().parse::<u32>() else {
            continue;
        };
        let Ok(fds) = std::fs::read_dir(p.path().join("fd")) else {
            continue;
        };
        for fd in fds.flatten() {
            if std::fs::read_link(fd.path()).is_ok_and(|l| l.to_string_lossy() == want) {
                return Some(pid);
            }
        }
    }
    None
}

#[test]
fn sighup_reloads_the_configured_file() {
    if !have_tool("dig", "sighup_reload") {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let geo = dir.path().join("geo.xdb");
    write_geo(&geo, &[]);
    let d = start(&geo);
    assert_eq!(a_for(&d, "123.112.0.0/24"), vec![HK01]);
    let Some(pid) = pid_listening_on(d.api.port()) else {
        eprintln!("note: sighup_reload skipped: cannot find the daemon's pid in /proc");
        return;
    };
    write_geo(&geo, &[("123.112.0.0/12", SZ)]);
    let ok = Command::new("kill").args(["-HUP", &pid.to_string()]).status().expect("kill").success();
    assert!(ok);
    assert_eq!(wait_for(&d, "123.112.0.0/24", GZ01), vec![GZ01], "log:\n{}", d.log());
    // A refused SIGHUP reload keeps serving (and the daemon keeps running).
    write_geo(&geo, &[("123.112.0.0/12", SZ), ("0.0.0.0/1", SZ)]);
    assert!(Command::new("kill").args(["-HUP", &pid.to_string()]).status().unwrap().success());
    // The reload samples 100 000 addresses before it decides: wait for the verdict
    // (generously: a loaded machine takes seconds), then check nothing moved.
    let deadline = std::time::Instant::now() + Duration::from_secs(30);
    while !d.log().contains("geo reload refused") && std::time::Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(100));
    }
    assert!(d.log().contains("geo reload refused"), "log:\n{}", d.log());
    assert_eq!(a_for(&d, "8.8.8.0/24"), vec![HK01], "log:\n{}", d.log());
}

#[test]
fn geo_file_commands_on_the_binary() {
    let dir = tempfile::tempdir().unwrap();
    let src = dir.path().join("ip.merge.txt");
    std::fs::write(
        &src,
        "0.0.0.0|58.59.255.255|美国|0|0|0|0\n\
         58.60.0.0|58.63.255.255|中国|0|广东省|深圳市|电信\n\
         58.64.0.0|255.255.255.255|美国|0|0|0|0\n",
    )
    .unwrap();
    let (ok, out, err) = lagran(dir.path(), &[], &["geo", "build", "--from", "ip.merge.txt", "--out", "a.xdb"]);
    assert!(ok && out.contains("3 ranges"), "{out}{err}");
    let csv = dir.path().join("b.csv");
    std::fs::write(&csv, "cidr,country,province,city,isp\n0.0.0.0/0,美国\n58.60.0.0/14,中国,广东省,深圳市,电信\n58.61.0.0/16,中国,广东省,广州市,联通\n").unwrap();
    let (ok, out, err) = lagran(dir.path(), &[], &["geo", "build", "--from", "b.csv", "--out", "b.xdb"]);
    assert!(ok, "{out}{err}");

    let path = |n: &str| -> PathBuf { dir.path().join(n) };
    let (ok, out, err) =
        lagran(dir.path(), &[], &["geo", "lookup", "--raw", "--file", "a.xdb", "58.60.0.1", "10.0.0.1"]);
    assert!(ok, "{err}");
    assert_eq!(
        out, "58.60.0.1\t中国|0|广东省|深圳市|电信\n10.0.0.1\t美国|0|0|0|0\n",
        "--raw prints what the file stores, reserved ranges included"
    );
    let geo_env = path("b.xdb").display().to_string();
    let (ok, out, err) = lagran(dir.path(), &[("GEOIP_PATH", &geo_env)], &["geo", "lookup", "58.61.0.1"]);
    assert!(ok && out.contains("province=广东 city=广州 isp=联通"), "{out}{err}");

    let (ok, out, err) = lagran(dir.path(), &[], &["geo", "diff", "a.xdb", "b.xdb", "--sample", "20000"]);
    assert!(ok, "{err}");
    assert!(out.contains("ranges changed: 1") && out.contains("58.61.0.0-58.61.255.255"), "{out}");
    let (ok, out, err) = lagran(dir.path(), &[], &["geo", "diff", "a.xdb", "b.csv", "--json", "--sample", "1000"]);
    let v: Value = serde_json::from_str(&out).unwrap_or_else(|e| panic!("{e}: {out}{err}"));
    assert!(ok && v["ranges_changed"] == 1, "{v}");

    let (ok, out, err) = lagran(dir.path(), &[("GEOIP_PATH", &geo_env)], &["geo", "partitions", "--no-overrides"]);
    assert!(ok, "{err}");
    assert!(out.contains("CN/广东/广州/联通") && out.contains("PREFIXES"), "{out}");

    // A corrupt file: a clear error naming it and the position, non-zero exit.
    std::fs::write(path("bad.csv"), "1.2.3.0/24,CN\n1.2.3.0/33,CN\n").unwrap();
    let (ok, _, err) = lagran(dir.path(), &[], &["geo", "diff", "a.xdb", "bad.csv"]);
    assert!(!ok && err.contains("bad.csv") && err.contains("line 2"), "{err}");
}
