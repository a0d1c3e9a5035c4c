//! The world step: `bench_helper world` measures the real ip2region file alone
//! and with `@ip-location-db`'s GeoLite2 City MMDBs and ASN CSVs merged over
//! it (the files `cargo xtask setup` fetches into `data/`), side by side: load
//! and merge, geo lookup ns/op on one fixed-seed address sample, the route
//! tables of the demo nodes and of the world fleet (entries per family), and
//! the kernel maps after a sync from empty (time, trie entries, memory as the
//! kernel accounts it). `--only-world` runs this step alone and prints its
//! rows without rewriting the results document.

use std::process::Command;
use std::time::Instant;

use anyhow::Context as _;

use super::row::{Row, render, row};
use super::{Bench, Results, num, parse_results};
use crate::util;

impl Bench {
    pub(super) fn world(&self) -> anyhow::Result<Results> {
        // Pinned to one CPU, as the tables step: lookup timings without migrations.
        let mut cmd = Command::new("taskset");
        cmd.args(["-c", &self.opts.server_cpu.to_string()])
            .arg(&self.helper)
            .args(["world", "--xdb"])
            .arg(&self.xdb)
            .env("LAGRAN_EBPF_OBJECT", &self.obj);
        crate::simulate_world::add_files(&self.root, &mut cmd)?;
        Ok(parse_results(&util::output(&mut cmd).context("bench_helper world")?))
    }

    /// `--only-world`: the step, its rows on the terminal and in
    /// `target/bench/world.md` (the results document keeps the last full run).
    pub(super) fn only_world(&self, started: Instant) -> anyhow::Result<()> {
        let w = self.world()?;
        let mut rows = Vec::new();
        self::rows(&w, &mut rows);
        let (_, md) = render(&rows);
        println!("\nLagran bench, world step ({:.0} s)\n{md}", started.elapsed().as_secs_f64());
        let raw: String = w.iter().map(|(k, v)| format!("{k} {v}\n")).collect();
        let path = self.work.join("world.md");
        std::fs::write(&path, format!("{md}\nRaw results:\n\n```\n{raw}```\n"))?;
        println!("report: {}", path.display());
        Ok(())
    }
}

/// One row of the report's table (the report makes its rows of these).
/// `ip2r → world` of one key (`<data>_<key>`), with `unit`.
fn beside(w: &Results, key: &str, unit: &str) -> String {
    let v = |data: &str| w.get(&format!("{data}_{key}")).map_or("-".to_string(), |v| format!("{v}{unit}"));
    format!("{} → {}", v("ip2r"), v("world"))
}

/// Bytes in MiB, one decimal.
fn mib(w: &Results, key: &str) -> String {
    num(w, key).map_or("-".into(), |b| format!("{:.1} MiB", b / 1_048_576.0))
}

/// The step's rows: each figure of the ip2region file alone beside the same
/// figure with the MaxMind City and ASN data merged over it (`ip2r → world`).
pub(super) fn rows(w: &Results, rows: &mut Vec<Row>) {
    if w.is_empty() {
        return;
    }
    rows.push(row(
        "geo data loaded, ip2region alone → + MaxMind City + ASN merged (read; merge v4; merge v6)",
        format!(
            "{} ({} ms; {} ms; {} ms)",
            beside(w, "load_ms", " ms"),
            w.get("world_read_ms").map_or("-", String::as_str),
            w.get("world_merge_v4_ms").map_or("-", String::as_str),
            w.get("world_merge_v6_ms").map_or("-", String::as_str),
        ),
        "-",
        None,
    ));
    rows.push(row(
        "  geo segments v4; v6; xdb bytes held (ip2region → merged)",
        format!(
            "{}; {}; {} → {}",
            beside(w, "segments_v4", ""),
            beside(w, "segments_v6", ""),
            mib(w, "ip2r_xdb_bytes"),
            mib(w, "world_xdb_bytes")
        ),
        "-",
        None,
    ));
    lookup_row(w, rows);
    rows.push(row(
        "  partitions (v4 ranges; v6 ranges; cut time)",
        format!(
            "{} ({}; {}; {})",
            beside(w, "partitions", ""),
            beside(w, "partition_ranges_v4", ""),
            beside(w, "partition_ranges_v6", ""),
            beside(w, "partitions_build_ms", " ms")
        ),
        "-",
        None,
    ));
    for (fleet, what) in [("demo", "demo nodes"), ("fleet", "world fleet, [schedule.distance]")] {
        fleet_rows(w, fleet, what, rows);
    }
    if let (Some(i), Some(m)) = (num(w, "ip2r_full_load_ms"), num(w, "world_full_load_ms")) {
        rows.push(row(
            "  loaded (+ merged) + partitions + route table (world fleet) + map sync",
            format!("{i:.0} ms → {m:.0} ms ({:.1}×)", m / i.max(1.0)),
            "-",
            None,
        ));
    }
}

/// Geo lookup ns/op: IPv4 on the same fixed-seed uniform addresses for both
/// data sets; IPv6 (merged data only) on addresses drawn from its segments.
fn lookup_row(w: &Results, rows: &mut Vec<Row>) {
    let (Some(i), Some(m)) = (num(w, "ip2r_lookup_v4_ns"), num(w, "world_lookup_v4_ns")) else { return };
    let v6 = num(w, "world_lookup_v6_ns");
    let worst = v6.map_or(m, |v| v.max(m)).max(i);
    rows.push(row(
        "  geo lookup ns/op, userspace (IPv4: the same fixed-seed uniform addresses; IPv6: drawn from the segments)",
        format!("IPv4 {i:.0} ns → {m:.0} ns; IPv6 {}", v6.map_or("-".into(), |v| format!("{v:.0} ns"))),
        "< 1 µs",
        Some(worst < 1000.0),
    ));
}

/// One fleet's route table and maps, ip2region alone → merged.
fn fleet_rows(w: &Results, fleet: &str, what: &str, rows: &mut Vec<Row>) {
    let k = |key: &str| format!("{fleet}_{key}");
    if !w.contains_key(&format!("world_{}", k("routes_v4"))) {
        return;
    }
    rows.push(row(
        format!(
            "  route table [{what}, {} nodes]: entries v4; v6 (answers; build)",
            w.get(&format!("world_{}", k("nodes"))).map_or("-", String::as_str)
        ),
        format!(
            "{}; {} ({}; {})",
            beside(w, &k("routes_v4"), ""),
            beside(w, &k("routes_v6"), ""),
            beside(w, &k("answers"), ""),
            beside(w, &k("route_build_ms"), " ms")
        ),
        "-",
        None,
    ));
    if !w.contains_key(&format!("world_{}", k("trie_entries"))) {
        return;
    }
    let max4 = num(w, "lagran_route_v4_max_entries");
    let max6 = num(w, "lagran_route_v6_max_entries");
    let fits = |family: &str, max: Option<f64>| {
        num(w, &format!("world_{}", k(&format!("routes_{family}")))).zip(max).is_some_and(|(n, m)| n <= m)
    };
    let skipped = num(w, &format!("world_{}", k("names_skipped")));
    rows.push(row(
        format!("  LPM trie entries after a sync from empty [{what}] (sync time; names left to userspace)"),
        format!(
            "{} ({}; {})",
            beside(w, &k("trie_entries"), ""),
            beside(w, &k("sync_ms"), " ms"),
            beside(w, &k("names_skipped"), "")
        ),
        format!(
            "routes ≤ max_entries ({} v4, {} v6), 0 skipped",
            max4.map_or("-".into(), |m| format!("{m:.0}")),
            max6.map_or("-".into(), |m| format!("{m:.0}"))
        ),
        Some(skipped == Some(0.0) && fits("v4", max4) && fits("v6", max6)),
    ));
    let mem = |data: &str| {
        let t4 = num(w, &format!("{data}_{}", k("mem_lagran_route_v4_bytes"))).unwrap_or(0.0);
        let t6 = num(w, &format!("{data}_{}", k("mem_lagran_route_v6_bytes"))).unwrap_or(0.0);
        let all = num(w, &format!("{data}_{}", k("mem_maps_bytes"))).unwrap_or(0.0);
        format!("{:.1} + {:.1} MiB; {:.1} MiB", t4 / 1_048_576.0, t6 / 1_048_576.0, all / 1_048_576.0)
    };
    rows.push(row(
        format!("  map memory [{what}] (kernel memlock from fdinfo: v4 + v6 route tries; all maps)"),
        format!("{} → {}", mem("ip2r"), mem("world")),
        "-",
        None,
    ));
}
