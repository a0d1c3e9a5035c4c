//! The report: the table of measured values against their targets.

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::time::Instant;

use anyhow::Context as _;

use super::resolver::ResolverShare;
use super::row::{Row, render, row};
use super::search::{Best, Run, cpu_per_answer};
use super::servers::Server;
use super::{Bench, Measured, Results, num};

pub(super) fn fmt_ns(r: &Results, key: &str) -> String {
    r.get(key).map_or("-".into(), |v| format!("{v} ns"))
}

/// Builds the report's rows from what the steps measured, in the order of the
/// table: load per generator, the services, the kernel's cost, correctness,
/// start-up and recompute.
fn rows(m: &mut Measured, gens: &[String], no_recompute: bool) -> Vec<Row> {
    let mut rows = Vec::new();
    for g in gens {
        qps_rows(m, g, &mut rows);
    }
    service_rows(m, &mut rows);
    table_rows(&m.tables, &mut rows);
    answered_rows(&m.tables, &m.live, &mut rows);
    correctness_rows(&m.tables, &mut rows);
    super::world::rows(&m.world, &mut rows);
    recompute_rows(m, no_recompute, &mut rows);
    super::steering::rows(&m.steering, &mut rows);
    super::signing::rows(&m.signing, &mut rows);
    rows
}

/// One generator's QPS rows: each server, the ratios, the CPU per answered query.
fn qps_rows(m: &mut Measured, g: &String, rows: &mut Vec<Row>) {
    let x = m.qps.get(&(Server::LagranXdp, g.clone()));
    let u = m.qps.get(&(Server::LagranUserspace, g.clone()));
    let k = m.qps.get(&(Server::Knot, g.clone()));
    let how = match g.as_str() {
        "gun" => "ECS, 4 096 real /24s",
        "kxdpgun" => "EDNS, no ECS",
        _ => "ECS, real /24s",
    };
    if let Some(x) = x {
        rows.push(row(format!("QPS XDP path [{g}: {how}]"), x.describe(), "-", None));
    }
    if g == "gun" {
        signed_rows(m, x, rows);
    }
    if let Some(u) = u {
        rows.push(row(format!("QPS userspace path [{g}]"), u.describe(), "-", None));
    }
    if let (Some(x), Some(u)) = (x, u)
        && u.qps > 0.0
    {
        // Shown, not judged: where the XDP path reaches the box's ceiling
        // (the reflector's rate), its ratio to userspace says how fast the
        // generator is, not what a query costs; the row below judges that.
        let ratio = x.qps / u.qps;
        let bound = if x.generator_bound { " (XDP generator-bound: ≥)" } else { "" };
        rows.push(row(format!("XDP / userspace, QPS [{g}]"), format!("{ratio:.1}×{bound}"), "-", None));
        match cpu_row(&m.qps, g, x, u) {
            Some(r) => rows.push(r),
            None => m.notes.push(format!("CPU per answered query [{g}]: no rate both paths held with a busy time")),
        }
    }
    if let Some(kx) = m.qps.get(&(Server::KnotXdp, g.clone())) {
        rows.push(row(format!("QPS knotd XDP, static zone [{g}]"), kx.describe(), "-", None));
        if let Some(x) = x {
            let ratio = x.qps / kx.qps.max(1.0);
            rows.push(row(
                format!("lagran-xdp / knot-XDP [{g}]"),
                format!("{ratio:.2}×"),
                "≥ 1.5×",
                Some(ratio >= 1.5),
            ));
        }
    }
    if let Some(r) = m.qps.get(&(Server::Reflector, g.clone())) {
        rows.push(row(format!("QPS bare XDP_TX reflector [{g}]"), r.describe(), "-", None));
        if let Some(x) = x {
            let ratio = x.qps / r.qps.max(1.0);
            rows.push(row(
                format!("lagran-xdp / reflector [{g}]"),
                format!("{ratio:.2}×"),
                "≥ 0.9×",
                Some(ratio >= 0.9),
            ));
        }
    }
    if let Some(k) = k {
        rows.push(row(format!("QPS knotd, static zone [{g}]"), k.describe(), "-", None));
        if let Some(x) = x {
            rows.push(row(
                format!("XDP / knotd [{g}]"),
                format!("{:.1}×", x.qps / k.qps.max(1.0)),
                "≥ 1×",
                Some(x.qps >= k.qps),
            ));
        }
    }
}

/// "CPU per answered query", the XDP path against the userspace path,
/// compared at one offered rate because per-query costs fall as batches
/// fill; the bare reflector's figure at that rate beside it.
fn cpu_row(qps: &BTreeMap<(Server, String), Best>, g: &String, x: &Best, u: &Best) -> Option<Row> {
    let (rate, xr, ur) = cpu_per_answer(x, u)?;
    let (xn, un) = (xr.server_ns_per_answer().unwrap_or(f64::NAN), ur.server_ns_per_answer().unwrap_or(f64::NAN));
    let share = |r: &Run| r.server_busy.map_or(0.0, |b| b.share() * 100.0);
    // The floor under both: the bare reflector's core at the same
    // rate (the veth's receive, the NAPI thread's wakeups, XDP_TX).
    let floor = qps
        .get(&(Server::Reflector, g.clone()))
        .and_then(|r| r.runs.iter().find(|r| r.target == rate && r.passed()))
        .and_then(Run::server_ns_per_answer)
        .map_or(String::new(), |f| format!("; the bare reflector's {f:.0} ns"));
    Some(row(
        format!("server core's CPU per answered query at {rate} qps, userspace / XDP [{g}]"),
        format!(
            "{:.1}× ({un:.0} ns vs {xn:.0} ns; core busy {:.0} % vs {:.0} %{floor})",
            un / xn,
            share(ur),
            share(xr)
        ),
        "≥ 5×",
        Some(un / xn >= 5.0),
    ))
}

/// The resolver as client, failover on the demo, and the fleet.
fn service_rows(m: &Measured, rows: &mut Vec<Row>) {
    if let Some(ResolverShare { answered, upstream, in_kernel, passed }) = &m.resolver {
        let share = if *upstream == 0 { 0.0 } else { 100.0 * *in_kernel as f64 / *upstream as f64 };
        let why = if passed.is_empty() {
            String::new()
        } else {
            format!(" (passed: {})", passed.iter().map(|(r, n)| format!("{r} {n}")).collect::<Vec<_>>().join(", "))
        };
        rows.push(row(
            "Unbound (ECS) as the client: its upstream A queries answered in the kernel",
            format!("{in_kernel} / {upstream} = {share:.0} % ({answered} client queries answered){why}"),
            "100 %",
            Some(*upstream > 0 && in_kernel >= upstream),
        ));
    }
    failover_rows(m, rows);
    if let Some(v) = num(&m.fleet, "fleet_offline_median_ms") {
        let max = num(&m.fleet, "fleet_offline_max_ms").unwrap_or(v);
        let nodes = m.fleet.get("fleet_nodes_added").map_or("-", String::as_str);
        rows.push(row(
            format!("PATCH → map entry, {nodes} nodes on the real data (median / max)"),
            format!("{v:.1} / {max:.1} ms"),
            "< 20 ms median",
            Some(v < 20.0),
        ));
    }
    if let (Some(rate), Some(idle), Some(loaded)) =
        (num(&m.fleet, "heartbeats_per_s"), num(&m.fleet, "dns_p99_idle_us"), num(&m.fleet, "dns_p99_heartbeats_us"))
    {
        // "Unchanged": within a quarter of the idle p99 plus 100 µs of timer noise.
        let target = num(&m.fleet, "heartbeats_target_per_s").unwrap_or(1000.0);
        rows.push(row(
            "heartbeats absorbed on one core; userspace DNS p99 alone → under heartbeats (alternating windows)",
            format!("{rate:.0}/s (of {target:.0}/s); p99 {idle:.0} → {loaded:.0} µs"),
            "≥ 1 000/s, p99 unchanged",
            Some(rate >= 1000.0 && loaded <= idle * 1.25 + 100.0),
        ));
    }
}

/// Node offline and online → map entry, the zone unsigned and signed side
/// by side, and when the new answer's RRSIG was in `lagran_rrsig`. The
/// signed times measured after the fleet step stand beside the fleet
/// step's unsigned ones.
fn failover_rows(m: &Measured, rows: &mut Vec<Row>) {
    let times = |r: &Results, key: &str| {
        let v = num(r, &format!("{key}_median_ms"))?;
        Some((v, num(r, &format!("{key}_max_ms")).unwrap_or(v)))
    };
    let show = |t: Option<(f64, f64)>| t.map_or("-".to_string(), |(v, max)| format!("{v:.1} / {max:.1} ms"));
    let fleet = m.failover_signed.contains_key(super::AFTER_FLEET);
    let mut pair = |what: String, unsigned: Option<(f64, f64)>, signed: Option<(f64, f64)>| {
        if unsigned.is_some() || signed.is_some() {
            rows.push(row(
                format!("{what}, unsigned | signed zone (median / max)"),
                format!("{} | {}", show(unsigned), show(signed)),
                "< 100 ms both",
                Some([unsigned, signed].iter().flatten().all(|(_, max)| *max < 100.0)),
            ));
        }
    };
    for change in ["offline", "online"] {
        let signed = if fleet { None } else { times(&m.failover_signed, change) };
        pair(format!("node {change} → map entry, demo"), times(&m.failover, change), signed);
    }
    if fleet {
        let (unsigned, signed) = (times(&m.fleet, "fleet_offline"), times(&m.failover_signed, "offline"));
        pair("node offline → map entry, with the fleet".to_string(), unsigned, signed);
    }
    if let Some((v, max)) = times(&m.failover_signed, "rrsig_offline") {
        let first = num(&m.failover_signed, "routes_before_rrsig").unwrap_or(f64::NAN);
        rows.push(row(
            "signed zone, node offline → the new answer's RRSIG in lagran_rrsig (median / max; 0: signed before); \
             routes seen before their RRSIG",
            format!("{v:.1} / {max:.1} ms; {first:.0}"),
            "≤ the map entry; 0",
            Some(first == 0.0),
        ));
    }
}

/// The trie's size and the kernel's per-packet cost on each table.
fn table_rows(t: &Results, rows: &mut Vec<Row>) {
    rows.push(row(
        "LPM trie entries, real xdb + demo nodes",
        t.get("trie_entries").cloned().unwrap_or("-".into()),
        "-",
        None,
    ));
    rows.push(row(
        "  unmerged (one answer per geo partition)",
        t.get("unmerged_entries").or(t.get("prefixes_unmerged")).cloned().unwrap_or("-".into()),
        "-",
        None,
    ));
    for (label, what) in [
        ("tiny", "1 entry"),
        ("small", "1 024 entries"),
        ("full", "full real table"),
        ("unmerged", "unmerged partitions"),
    ] {
        if t.contains_key(&format!("{label}_answered_mean_ns")) {
            rows.push(row(
                format!("XDP per packet, {what} (answered: test-run median / bpf_stats mean; lookup-only)"),
                format!(
                    "{} / {}; {}",
                    fmt_ns(t, &format!("{label}_answered_median_ns")),
                    fmt_ns(t, &format!("{label}_answered_prog_ns")),
                    fmt_ns(t, &format!("{label}_lookup_mean_ns"))
                ),
                "-",
                None,
            ));
        }
    }
}

/// The judged cost per answered packet, what each run carries besides the
/// program, the cost under load, the small-trie regime and RRL's cost.
fn answered_rows(t: &Results, live: &BTreeMap<String, (f64, u64)>, rows: &mut Vec<Row>) {
    // The goal: "≤ 150 ns per answered packet" at full real-table size, judged
    // on the test-run median; beside it the kernel's own accounting (bpf_stats,
    // what `/metrics` exports live), a mean, so every outlier run is in it.
    if let Some(median) = num(t, "full_answered_median_ns") {
        rows.push(row(
            "XDP per answered packet, full real table (test-run median; bpf_stats run_time_ns / run_cnt)",
            format!("{median:.1} ns; {}", fmt_ns(t, "full_answered_prog_ns")),
            "≤ 150 ns",
            Some(median <= 150.0),
        ));
    }
    // The same path counted, not timed: instructions the object executes per
    // answered query, interpreted (`bench_helper xdp-insns`).
    if let (Some(ecs), Some(plain), Some(cookie)) =
        (num(t, "xdp_insns_ecs"), num(t, "xdp_insns_no_opt"), num(t, "xdp_insns_cookie"))
    {
        rows.push(row(
            "  BPF instructions executed per answered query (interpreted: ECS /24; no OPT; dig's client cookie)",
            format!("{ecs:.0}; {plain:.0}; {cookie:.0}"),
            "-",
            None,
        ));
    }
    // Shown beside it, not subtracted: what each of those single runs carries
    // besides the program (a frame passed at the program's first check, one
    // run at a time): the harness's clock reads and bottom-half toggles, and
    // bpf_stats's two clock reads.
    if t.contains_key("testrun_single_baseline_ns") {
        rows.push(row(
            "  the same timing of a frame the program passes at its first check (test-run median; bpf_stats mean)",
            format!("{}; {}", fmt_ns(t, "testrun_single_baseline_ns"), fmt_ns(t, "single_baseline_prog_ns")),
            "-",
            None,
        ));
    }
    // The same accounting under real traffic (the daemon's full real table,
    // one run at the best rate per generator): what `/metrics` shows an SRE.
    // Shown, not judged: the goal's row above is the one earlier runs judged.
    for (g, (ns, runs)) in live {
        rows.push(row(
            format!("XDP per packet under load [{g}] (bpf_stats over {runs} runs at the best rate, warm caches)"),
            format!("{ns:.1} ns"),
            "-",
            None,
        ));
    }
    if let (Some(full), Some(small)) = (num(t, "full_answered_median_ns"), num(t, "small_answered_median_ns")) {
        rows.push(row(
            "full real table vs 1 024-entry table (answered, median)",
            format!("{:.2}×", full / small),
            "≤ 1.5× (small-trie regime)",
            Some(full <= 1.5 * small),
        ));
    }
    if let (Some(cost), Some(on), Some(off)) =
        (num(t, "rrl_cost_median_ns"), num(t, "rrl_on_answered_median_ns"), num(t, "rrl_off_answered_median_ns"))
    {
        // Beside it, the difference of the kernel's own accounting (bpf_stats
        // means over alternating rounds, outliers included).
        let shown = match (num(t, "rrl_cost_prog_ns"), num(t, "rrl_on_prog_ns"), num(t, "rrl_off_prog_ns")) {
            (Some(p), Some(pon), Some(poff)) => {
                format!("{cost:.1} ns (medians {on:.0} vs {off:.0} ns); bpf_stats {p:.1} ns ({pon:.0} vs {poff:.0} ns)")
            }
            _ => format!("{cost:.1} ns (medians {on:.0} vs {off:.0} ns)"),
        };
        rows.push(row(
            "XDP per packet, full real table, RRL on − off (answered; median of per-packet differences, rounds alternating)",
            shown,
            "< 20 ns",
            Some(cost < 20.0),
        ));
    }
}

/// XDP against userspace, the ECS scopes, the geo lookup and the xdb's load.
fn correctness_rows(t: &Results, rows: &mut Vec<Row>) {
    let mism: f64 =
        ["tiny", "small", "full", "unmerged"].iter().filter_map(|l| num(t, &format!("{l}_parity_mismatches"))).sum();
    rows.push(row("XDP answers ≠ userspace (A, ECS scope)", format!("{mism:.0}"), "0", Some(mism == 0.0)));
    if let (Some(m), Some(u)) = (num(t, "ecs_mean_scope"), num(t, "ecs_mean_scope_unmerged")) {
        rows.push(row(
            format!("mean ECS scope, {} random public IPv4", t.get("ecs_samples").map_or("-", String::as_str)),
            format!("/{m:.2} (per-partition prefixes: /{u:.2})"),
            "≤ partition prefixes",
            Some(m <= u),
        ));
    }
    if let Some(v) = num(t, "ecs_scope_violations") {
        rows.push(row("ECS scope violations", format!("{v:.0}"), "0", Some(v == 0.0)));
    }
    if let Some(v) = num(t, "geo_lookup_ns") {
        rows.push(row("geo lookup (userspace, real xdb)", format!("{v:.0} ns"), "< 1 µs", Some(v < 1000.0)));
    }
    if let Some(v) = num(t, "full_load_ms") {
        rows.push(row(
            "real xdb loaded + compiled + synced to maps",
            format!(
                "{v:.0} ms (load {} + partitions {} + routes {} + sync {})",
                t.get("xdb_load_ms").map_or("-", String::as_str),
                t.get("partitions_build_ms").map_or("-", String::as_str),
                t.get("route_build_ms").map_or("-", String::as_str),
                t.get("map_sync_ms").map_or("-", String::as_str),
            ),
            "< 5 s",
            Some(v < 5000.0),
        ));
    }
}

/// Start-up and the recompute rows.
fn recompute_rows(m: &mut Measured, no_recompute: bool, rows: &mut Vec<Row>) {
    if let Some(s) = m.startup.get("xdp") {
        rows.push(row("daemon start → first XDP answer", format!("{s:.2} s"), "-", None));
    }
    match m.recompute.get("recompute_1pool_ms") {
        Some(v) => {
            let ok = v.parse::<f64>().ok().map(|ms| ms < 50.0);
            rows.push(row(
                "recompute 1 000 nodes × 5 000 partitions × 10 names",
                format!("{v} ms"),
                "< 50 ms",
                Some(ok.unwrap_or(false)),
            ));
        }
        None if no_recompute => m.notes.push("recompute benchmark: skipped (--no-recompute)".into()),
        None => {}
    }
    // The real xdb's partitions, 10 names: a full recompute, and one node down
    // (incrementally: only the classes the node touches).
    let real = [
        ("recompute_1pool_one_down_ms", "one node down incrementally, 1 000 nodes × 5 000 partitions", 5.0),
        ("recompute_real_100nodes_ms", "recompute real xdb, 100 nodes × 10 names", 20.0),
        ("recompute_real_1000nodes_ms", "recompute real xdb, 1 000 nodes × 10 names", 50.0),
        ("recompute_real_1000nodes_one_down_ms", "one node down incrementally, 1 000 nodes, real xdb", 5.0),
        (
            "recompute_real_1000nodes_grown_one_down_ms",
            "the same after the fleet grew 20 nodes at a time (hysteresis holds)",
            5.0,
        ),
    ];
    for (key, label, goal) in real {
        if let Some(v) = m.recompute.get(key) {
            let ok = v.parse::<f64>().is_ok_and(|ms| ms < goal);
            rows.push(row(label, format!("{v} ms"), format!("< {goal} ms"), Some(ok)));
        }
    }
}

/// Where the bench records its latest results, relative to the workspace root.
pub(super) const RESULTS_DOC: &str = "docs/bench-results.md";

/// Prints the table and notes, writes `target/bench/latest.md` (the table, the
/// notes and every raw number and load run) and the results document.
pub(super) fn write(b: &Bench, gens: &[String], mut m: Measured, started: Instant) -> anyhow::Result<()> {
    let rows = rows(&mut m, gens, b.opts.no_recompute);
    let (text, md) = render(&rows);
    let secs = started.elapsed().as_secs_f64();
    println!("\nLagran bench ({secs:.0} s, {} CPUs, kernel {})", cpus(), kernel_release());
    println!("{text}");
    for n in &m.notes {
        println!("note: {n}");
    }
    let args: String = std::env::args().skip(2).map(|a| format!(" {a}")).collect();
    let mut summary = format!(
        "Measured on {} CPUs, kernel {}; `cargo xtask bench{args}` ({secs:.0} s).\n\n{md}",
        cpus(),
        kernel_release(),
    );
    for n in &m.notes {
        let _ = writeln!(summary, "\n- {n}");
    }
    let report = b.work.join("latest.md");
    std::fs::write(&report, format!("{summary}{}", raw(&m)))?;
    let results = b.root.join(RESULTS_DOC);
    // The edge comparison is a separate run (`--edge`): its section is kept.
    let edge =
        std::fs::read_to_string(&results).ok().and_then(|d| super::edge_section::section(&d)).unwrap_or_default();
    std::fs::write(&results, results_doc(&summary) + &edge)
        .with_context(|| format!("writing {}", results.display()))?;
    println!("report: {} (every raw number); results: {}", report.display(), results.display());
    Ok(())
}

/// The results document: a header saying what writes it, then the run.
fn results_doc(summary: &str) -> String {
    format!(
        "<!-- Generated by `cargo xtask bench`: every run rewrites this file; do not edit it by hand. -->\n\
         # Benchmark results\n\n\
         The latest run of `cargo xtask bench`, as it printed it. What each row measures, how, and \
         the goals are in [bench.md](bench.md); earlier runs are in this file's git history.\n\n\
         {summary}"
    )
}

/// Every raw result and every load run, as a fenced block.
fn raw(m: &Measured) -> String {
    let mut doc = "\nRaw results:\n\n```\n".to_string();
    let signed_failover: Vec<(String, &String)> =
        m.failover_signed.iter().map(|(k, v)| (format!("signed_{k}"), v)).collect();
    for (k, v) in m
        .tables
        .iter()
        .chain(m.recompute.iter())
        .chain(m.failover.iter())
        .chain(signed_failover.iter().map(|(k, v)| (k, *v)))
        .chain(m.fleet.iter())
        .chain(m.world.iter())
        .chain(m.steering.iter())
        .chain(m.signing.iter())
    {
        let _ = writeln!(doc, "{k} {v}");
    }
    for ((s, g), best) in &m.qps {
        for r in &best.runs {
            let _ = writeln!(
                doc,
                "load {} {g} target={} sent_qps={:.0} answered_qps={:.0} ratio={:.3}{}",
                s.label().replace(' ', "_"),
                r.target,
                r.sent_qps(),
                r.answered_qps(),
                r.ratio(),
                r.xdp_answered.map_or(String::new(), |x| format!(" xdp_answered={x}"))
                    + &r.udp_queries.map_or(String::new(), |u| format!(" userspace_udp={u}")),
            );
        }
    }
    let _ = writeln!(doc, "```");
    doc
}

pub(super) fn cpus() -> usize {
    std::thread::available_parallelism().map_or(1, |n| n.get())
}

pub(super) fn kernel_release() -> String {
    std::fs::read_to_string("/proc/sys/kernel/osrelease").map_or("?".into(), |s| s.trim().to_string())
}

/// The signed rate and its ratio to the unsigned XDP rate (`x`) of `gun`.
fn signed_rows(m: &Measured, x: Option<&Best>, rows: &mut Vec<Row>) {
    let Some(s) = m.qps.get(&(Server::LagranXdp, super::signed::GUN_DO.to_string())) else { return };
    rows.push(row("QPS XDP path, signed zone, DO set [gun]", s.describe(), "-", None));
    if let Some(x) = x.filter(|x| x.qps > 0.0) {
        let (ratio, target) = (s.qps / x.qps, super::signed::TARGET_RATIO);
        rows.push(row(
            "signed (DO) / unsigned, XDP QPS [gun]",
            format!("{ratio:.2}×"),
            format!("≥ {target}×"),
            Some(ratio >= target),
        ));
    }
    let live = |g: &str| m.live.get(g).map(|(ns, _)| *ns);
    if let (Some(signed), Some(unsigned)) = (live(super::signed::GUN_DO), live("gun")) {
        rows.push(row(
            "XDP per packet under load, signed (DO) | unsigned [gun] (bpf_stats at each best rate)",
            format!("{signed:.1} ns | {unsigned:.1} ns ({:.2}×)", signed / unsigned.max(1.0)),
            "-",
            None,
        ));
    }
    if let Some(k) = m.qps.get(&(Server::KnotXdp, super::signed::GUN_DO.to_string())) {
        rows.push(row("QPS knotd XDP, the zone pre-signed (ECDSA P-256), DO set [gun]", k.describe(), "-", None));
        rows.push(row(
            "lagran XDP signed / knotd XDP pre-signed, DO set [gun]",
            format!("{:.2}×", s.qps / k.qps.max(1.0)),
            "-",
            None,
        ));
    }
}
