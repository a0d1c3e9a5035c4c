//! The load generators: `gun`, `kxdpgun`, `dnsperf`.

use std::process::Command;
use std::time::Duration;

use anyhow::Context as _;

use super::process::Bg;
use super::search::Run;
use super::topology::Topology;
use super::{Bench, CLI_IF, CLI_IP, Options, SRV_IP, num, parse_results};
use crate::util;

/// The generators to use: as asked, else gun plus kxdpgun (or dnsperf).
pub(super) fn choose(opts: &Options, notes: &mut Vec<String>) -> Vec<String> {
    if !opts.generators.is_empty() {
        return opts.generators.clone();
    }
    let mut g = vec!["gun".to_string()];
    if util::which("kxdpgun").is_some() {
        g.push("kxdpgun".into());
    } else if util::which("dnsperf").is_some() {
        notes.push("kxdpgun not installed: dnsperf used as the second generator".into());
        g.push("dnsperf".into());
    } else {
        notes.push("neither kxdpgun nor dnsperf installed: only the built-in ECS generator".into());
    }
    g
}

impl Bench {
    /// `gun` at `rate`; `dnssec_ok`: its queries with the DO bit set.
    pub(super) fn run_gun(&self, t: &Topology, rate: u64, dnssec_ok: bool) -> anyhow::Result<Run> {
        let (rate_s, dur, xdb) = (rate.to_string(), self.opts.duration.to_string(), self.xdb.display().to_string());
        let mut args = vec![
            "gun",
            "--iface",
            CLI_IF,
            "--src-ip",
            CLI_IP,
            "--dst-ip",
            SRV_IP,
            "--dst-mac",
            &t.srv_mac,
            "--rate",
            &rate_s,
            "--duration",
            &dur,
            "--xdb",
            &xdb,
        ];
        if dnssec_ok {
            args.push("--dnssec-ok");
        }
        let mut cmd = self.helper_cmd(t, &t.cli, Some(self.opts.gen_cpu), &args);
        let out = util::output(&mut cmd)?;
        let r = parse_results(&out);
        Ok(Run {
            target: rate,
            sent: num(&r, "sent").unwrap_or(0.0) as u64,
            received: num(&r, "received").unwrap_or(0.0) as u64,
            secs: num(&r, "send_secs").unwrap_or(1.0),
            ..Run::default()
        })
    }

    pub(super) fn run_kxdpgun(&self, t: &Topology, rate: u64) -> anyhow::Result<Run> {
        let queries = self.work.join("kxdpgun-queries.txt");
        if !queries.exists() {
            // EDNS without options (no ECS: kxdpgun 3.2 cannot send it; no COOKIE).
            std::fs::write(&queries, "edge.lagran.net. A E\n")?;
        }
        let (rate_s, dur, cpu, q) = (
            rate.to_string(),
            self.opts.duration.to_string(),
            self.opts.gen_cpu.to_string(),
            queries.display().to_string(),
        );
        let mut cmd = t.exec(
            &t.cli,
            &["kxdpgun", "-t", &dur, "-Q", &rate_s, "-F", &cpu, "-i", &q, "-I", CLI_IF, "-R", &t.srv_mac, SRV_IP],
        );
        let res = util::output(&mut cmd);
        t.client_xdp_off();
        let out = res?;
        // "total queries:     2999990 (999996 pps) (100.0%)" / "total replies:     …"
        let field = |what: &str| -> Option<u64> {
            out.lines()
                .find(|l| l.trim_start().starts_with(what))
                .and_then(|l| l.split(':').nth(1))
                .and_then(|v| v.split_whitespace().next())
                .and_then(|v| v.parse().ok())
        };
        let dur_s = out
            .lines()
            .find_map(|l| l.strip_prefix("duration:"))
            .and_then(|v| v.split_whitespace().next())
            .and_then(|v| v.parse::<f64>().ok());
        let sent = field("total queries").with_context(|| format!("no `total queries` in kxdpgun output:\n{out}"))?;
        Ok(Run {
            target: rate,
            sent,
            received: field("total replies").unwrap_or(0),
            secs: dur_s.filter(|d| *d > 0.0).unwrap_or(self.opts.duration as f64),
            ..Run::default()
        })
    }

    pub(super) fn run_dnsperf(&self, t: &Topology, rate: u64) -> anyhow::Result<Run> {
        let data = self.work.join("dnsperf-queries.bin");
        if !data.exists() {
            let mut cmd = Command::new(&self.helper);
            cmd.args(["queries", "--xdb"]).arg(&self.xdb).arg("--out").arg(&data);
            util::output(&mut cmd)?;
        }
        // The answers of the XDP path reach dnsperf's socket only with a program on the client veth.
        let mut hold = self.helper_cmd(t, &t.cli, None, &["hold-pass", "--iface", CLI_IF, "--secs", "60"]);
        let _pass = Bg::spawn("bench_helper hold-pass", &mut hold, &self.work.join("hold-pass.log"))?;
        std::thread::sleep(Duration::from_millis(200));
        let (rate_s, dur, d) = (rate.to_string(), self.opts.duration.to_string(), data.display().to_string());
        let cpu = self.opts.gen_cpu.to_string();
        let mut cmd = t.exec(
            &t.cli,
            &[
                "taskset", "-c", &cpu, "dnsperf", "-B", "-d", &d, "-s", SRV_IP, "-l", &dur, "-Q", &rate_s, "-c", "8",
                "-q", "10000", "-t", "1",
            ],
        );
        let out = util::output(&mut cmd)?;
        let field = |what: &str| -> Option<f64> {
            out.lines()
                .find(|l| l.trim_start().starts_with(what))
                .and_then(|l| l.split(':').nth(1))
                .and_then(|v| v.split_whitespace().next())
                .and_then(|v| v.parse().ok())
        };
        Ok(Run {
            target: rate,
            sent: field("Queries sent").unwrap_or(0.0) as u64,
            received: field("Queries completed").unwrap_or(0.0) as u64,
            secs: field("Run time (s)").unwrap_or(self.opts.duration as f64),
            ..Run::default()
        })
    }
}
