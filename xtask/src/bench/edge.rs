//! `cargo xtask bench --edge`: lagran-edge beside nginx (`proxy_cache`) and
//! Varnish in one run, for the same site and the same local origin, each pinned
//! to the server CPU with its access log on and a disk-backed cache, loaded
//! from the generator CPU. All three run at once (an idle server costs next to
//! nothing); the throughput runs and the miss storms load one server at a time,
//! the fixed-rate latency runs interleave them round by round (see
//! `edge_latency`). The table (with the ratios lagran-edge/nginx and
//! lagran-edge/varnish) goes to the terminal, `target/bench/edge.md` and the
//! edge section of `docs/bench-results.md`.

use std::fmt::Write as _;
use std::path::PathBuf;
use std::process::Command;

use anyhow::{Context as _, bail};

use super::edge_latency::{self as latency, Rounds, Summary};
use super::edge_load::{H2Run, Load, STORM_CLIENTS, WrkRun, tree_rss_mib};
use super::edge_peers::{self as peers, EdgeServer, LARGE, Running, SMALL, Tools};
use super::edge_section::with_section;
use super::{Options, check_interrupted, report};
use crate::util;

/// What one server measured alone under full load.
struct Throughput {
    h1_small: WrkRun,
    h2_small: H2Run,
    /// Over TLS; `None` for a server without TLS (Varnish).
    h1_tls: Option<WrkRun>,
    h2_tls: Option<H2Run>,
    large: WrkRun,
}

/// Everything one server measured.
struct Measured {
    tp: Throughput,
    rate: Summary,
    storm: H2Run,
    storm_fetches: usize,
    rss_mib: f64,
}

/// Removes the run's directory (configs, caches, access logs) on drop.
struct RunDir(PathBuf);

impl Drop for RunDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

pub(super) fn exec(opts: &Options) -> anyhow::Result<()> {
    // SAFETY: geteuid(2) has no preconditions.
    if unsafe { libc::geteuid() } != 0 {
        bail!("`cargo xtask bench --edge` runs nginx and varnishd as root in a scratch directory: run it as root");
    }
    let tool = |name: &str| util::which(name).with_context(|| format!("`{name}` is missing (apt-get install {name})"));
    let (nginx, varnishd, varnishncsa) = (tool("nginx")?, tool("varnishd")?, tool("varnishncsa")?);
    for t in ["wrk", "h2load", "taskset", "timeout"] {
        tool(t)?;
    }
    let root = util::workspace_root();
    let target = std::env::var_os("CARGO_TARGET_DIR").map_or_else(|| root.join("target"), |d| root.join(d));
    if !opts.no_build {
        util::run(Command::new("cargo").current_dir(&root).args(["build", "--release", "--package", "lagran-edge"]))?;
    }
    let edge = target.join("release/lagran-edge");
    if !edge.is_file() {
        bail!("{} is missing: run without --no-build", edge.display());
    }
    raise_nofile();
    let work = target.join("bench");
    let dir = RunDir(work.join("edge"));
    let _ = std::fs::remove_dir_all(&dir.0);
    std::fs::create_dir_all(&dir.0)?;
    let (cpu, gen_cpu) = (opts.server_cpu, opts.gen_cpu);
    let (_origin, origin) = peers::start_origin(&dir.0, &nginx, gen_cpu)?;
    let (cert, key) = peers::self_signed(&dir.0)?;
    let tools = Tools {
        dir: &dir.0,
        edge: &edge,
        nginx: &nginx,
        varnishd: &varnishd,
        varnishncsa: &varnishncsa,
        origin,
        cpu,
        cert: &cert,
        key: &key,
    };
    let load = Load { dir: &dir.0, cpu: gen_cpu, seconds: opts.seconds };
    let (all, rounds) = measure_all(&tools, &load, opts.latency_rounds)?;
    let md = table(&all, &rounds);
    let summary = format!(
        "## Edge: lagran-edge, nginx and Varnish\n\nMeasured on {} CPUs, kernel {}; `cargo xtask bench --edge \
         --seconds {} --latency-rounds {}` (server on CPU {cpu}, generators on CPU {gen_cpu}).\n\n{md}",
        report::cpus(),
        report::kernel_release(),
        opts.seconds,
        opts.latency_rounds,
    );
    println!("\n{summary}");
    std::fs::write(work.join("edge.md"), &summary)?;
    let results = root.join(report::RESULTS_DOC);
    let doc = std::fs::read_to_string(&results).unwrap_or_default();
    std::fs::write(&results, with_section(&doc, &summary)).with_context(|| format!("writing {}", results.display()))?;
    println!("report: {}; results: {}", work.join("edge.md").display(), results.display());
    Ok(())
}

/// Starts the three servers (stopped when this returns), then: the
/// throughput runs one server at a time, the fixed-rate latency rounds, and
/// per server its miss storm and its memory.
fn measure_all(t: &Tools, load: &Load, latency_rounds: u32) -> anyhow::Result<(Vec<(EdgeServer, Measured)>, Rounds)> {
    let mut servers = Vec::new();
    for server in EdgeServer::ALL {
        check_interrupted()?;
        servers.push((server, start_warm(server, t)?));
    }
    let mut throughput = Vec::new();
    for (server, running) in &servers {
        check_interrupted()?;
        eprintln!("==> {}: cached 1 KiB (HTTP/1.1, h2c, TLS), 1 MiB", server.label());
        throughput.push(throughput_runs(*server, running, load)?);
    }
    eprintln!("==> fixed-rate latency: a warm-up run of each server, then {latency_rounds} interleaved rounds");
    let targets: Vec<(EdgeServer, String)> = servers.iter().map(|(s, r)| (*s, url(r.h1, SMALL))).collect();
    let rounds = latency::measure(&targets, load, latency_rounds)?;
    let mut all = Vec::new();
    for ((i, (server, running)), tp) in servers.iter().enumerate().zip(throughput) {
        check_interrupted()?;
        eprintln!("==> {}: miss storm", server.label());
        let storm = logged(*server, "storm", load.storm(&url(running.h1, &peers::storm_path(*server))))?;
        let m = Measured {
            tp,
            rate: rounds.summary(i),
            storm,
            storm_fetches: peers::origin_fetches(t.dir, *server)?,
            rss_mib: tree_rss_mib(running.procs[0].pid()),
        };
        all.push((*server, m));
    }
    Ok((all, rounds))
}

fn url(port: u16, path: &str) -> String {
    format!("http://127.0.0.1:{port}{path}")
}

/// Starts `server` and warms its cache with both objects.
fn start_warm(server: EdgeServer, t: &Tools) -> anyhow::Result<Running> {
    let running = peers::start(server, t)?;
    for path in [SMALL, LARGE, SMALL, LARGE] {
        let code = peers::get_status(running.h1, path)?;
        if code != 200 {
            bail!("{} answered {code} for {path} while warming", server.label());
        }
    }
    Ok(running)
}

/// The cached-object runs of one server: 1 KiB over HTTP/1.1, h2c and TLS, 1 MiB.
fn throughput_runs(server: EdgeServer, running: &Running, load: &Load) -> anyhow::Result<Throughput> {
    let h1_small = logged(server, "h1-1k", load.h1_small(&url(running.h1, SMALL)))?;
    check_interrupted()?;
    let h2_small = logged(server, "h2-1k", load.h2_small(&url(running.h2, SMALL)))?;
    check_interrupted()?;
    let (h1_tls, h2_tls) = match running.tls {
        Some(port) => {
            let h1 = logged(server, "h1-tls-1k", load.h1_tls(port, SMALL))?;
            check_interrupted()?;
            (Some(h1), Some(logged(server, "h2-tls-1k", load.h2_tls(port, SMALL))?))
        }
        None => (None, None),
    };
    check_interrupted()?;
    let large = logged(server, "h1-1m", load.h1_large(&url(running.h1, LARGE)))?;
    Ok(Throughput { h1_small, h2_small, h1_tls, h2_tls, large })
}

/// Echoes a load run's output to stderr.
fn logged<T>(server: EdgeServer, what: &str, run: anyhow::Result<(T, String)>) -> anyhow::Result<T> {
    let (value, out) = run.with_context(|| format!("{} {what}", server.label()))?;
    eprintln!("--- {} {what}\n{}", server.label(), out.trim_end());
    Ok(value)
}

type Get = fn(&Measured) -> Option<f64>;

/// The markdown table: one row per measure, the ratios beside; a server
/// without a measure (Varnish over TLS) shows why. The latency rows are the
/// medians over the rounds, followed by the p99's spread over them.
fn table(all: &[(EdgeServer, Measured)], rounds: &Rounds) -> String {
    let throughput: [(&str, Get, usize); 5] = [
        ("cached 1 KiB, HTTP/1.1 (wrk), requests/s", |m| Some(m.tp.h1_small.rps), 0),
        ("cached 1 KiB, HTTP/2 h2c (h2load), requests/s", |m| Some(m.tp.h2_small.rps), 0),
        ("cached 1 KiB, HTTP/1.1 over TLS (wrk), requests/s", |m| m.tp.h1_tls.as_ref().map(|r| r.rps), 0),
        ("cached 1 KiB, HTTP/2 over TLS (h2load), requests/s", |m| m.tp.h2_tls.as_ref().map(|r| r.rps), 0),
        ("cached 1 MiB, HTTP/1.1 (wrk), MB/s of bodies", |m| Some(m.tp.large.rps * 1.048_576), 0),
    ];
    let latency: [(&str, Get, usize); 2] = [
        ("p50 latency at a fixed rate, ms (median of the rounds)", |m| Some(m.rate.p50_ms), 3),
        ("p99 latency at a fixed rate, ms (median of the rounds)", |m| Some(m.rate.p99_ms), 3),
    ];
    let rest: [(&str, Get, usize); 4] = [
        ("fixed rate achieved, requests/s (median of the rounds)", |m| Some(m.rate.rps), 0),
        ("miss storm: origin fetches", |m| Some(m.storm_fetches as f64), 0),
        ("miss storm: clients answered 2xx", |m| Some(m.storm.succeeded as f64), 0),
        ("RSS after the runs, MiB", |m| Some(m.rss_mib), 1),
    ];
    let mut md = "| measure | lagran-edge | nginx | varnish | edge/nginx | edge/varnish |\n|---|--:|--:|--:|--:|--:|\n"
        .to_string();
    for (name, get, prec) in throughput.into_iter().chain(latency) {
        value_row(&mut md, all, name, get, prec);
    }
    let spread: Vec<String> =
        all.iter().map(|(_, m)| format!("{:.3}–{:.3}", m.rate.p99_min_ms, m.rate.p99_max_ms)).collect();
    let _ = writeln!(md, "| p99 latency at a fixed rate, lowest–highest round, ms | {} | - | - |", spread.join(" | "));
    for (name, get, prec) in rest {
        value_row(&mut md, all, name, get, prec);
    }
    md.push('\n');
    md.push_str(&rounds.notes());
    md.push_str(&notes(all));
    md
}

/// One row of `get`'s values with `prec` decimals, and lagran-edge's ratios to the others.
fn value_row(md: &mut String, all: &[(EdgeServer, Measured)], name: &str, get: Get, prec: usize) {
    let v: Vec<Option<f64>> = all.iter().map(|(_, m)| get(m)).collect();
    let cell = |x: Option<f64>| x.map_or_else(|| "no TLS".to_string(), |x| format!("{x:.prec$}"));
    let ratio = |d: Option<f64>| match (v[0], d) {
        (Some(n), Some(d)) if d > 0.0 => format!("{:.2}×", n / d),
        _ => "-".into(),
    };
    let _ = writeln!(
        md,
        "| {name} | {} | {} | {} | {} | {} |",
        cell(v[0]),
        cell(v[1]),
        cell(v[2]),
        ratio(v[1]),
        ratio(v[2])
    );
}

/// The notes on the other rows: the miss storm, HTTP/2, TLS, errors.
fn notes(all: &[(EdgeServer, Measured)]) -> String {
    let errors: Vec<String> = all
        .iter()
        .map(|(s, m)| {
            let tp = &m.tp;
            let tls = tp.h1_tls.as_ref().map_or(0, |r| r.errors) + tp.h2_tls.as_ref().map_or(0, |r| r.failed);
            format!("{} {}", s.label(), tp.h1_small.errors + tp.large.errors + m.rate.errors + tp.h2_small.failed + tls)
        })
        .collect();
    format!(
        "- Miss storm: {STORM_CLIENTS} HTTP/1.1 clients at once, one request each, on an object the origin \
         sends at 2 MB/s (~0.5 s); fetches counted in the origin's access log.\n\
         - The throughput runs and the miss storms load one server at a time, the other two idle beside it; the \
         memory row is each server's own process tree.\n\
         - HTTP/2 is h2c with prior knowledge (nginx on a second, HTTP/2-only listener).\n\
         - TLS: lagran-edge and nginx on one listener each (HTTP/2 and HTTP/1.1 by ALPN), the same self-signed \
         P-256 certificate, connections kept open (handshakes are not what is measured). Varnish has no TLS \
         (it is deployed behind a TLS terminator): its TLS rows are empty.\n\
         - Errors (non-2xx and socket errors, h2 failures) across the cached and fixed-rate runs: {}.\n",
        errors.join(", ")
    )
}

/// 1 000 clients need more than the default 1 024 descriptors, in the generator
/// and the servers (they inherit the limit): the soft limit is raised to the hard one.
fn raise_nofile() {
    let mut lim = libc::rlimit { rlim_cur: 0, rlim_max: 0 };
    // SAFETY: getrlimit(2)/setrlimit(2) with a valid struct.
    let ok = unsafe {
        libc::getrlimit(libc::RLIMIT_NOFILE, &mut lim) == 0 && {
            lim.rlim_cur = lim.rlim_max;
            libc::setrlimit(libc::RLIMIT_NOFILE, &lim) == 0
        }
    };
    if !ok || lim.rlim_cur < 4_096 {
        eprintln!("warning: the open-file limit is {}: the miss storm may fail", lim.rlim_cur);
    }
}
