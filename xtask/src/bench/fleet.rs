//! The failover and fleet steps: PATCH → map entry, a real-size fleet, heartbeats.

use std::process::Command;

use anyhow::Context as _;

use super::process::Bg;
use super::topology::Topology;
use super::{Bench, PIN_DIR, Results, SRV_IP, parse_results};
use crate::util;

impl Bench {
    /// `bench_helper` in the daemon `pid`'s namespaces (`ns`: nsenter's `-n`,
    /// `-m`), on the generator's CPU: the daemon keeps its core to itself, as
    /// "on one core" says, and a poller or a heartbeat sender does not take
    /// turns with the daemon it measures.
    pub(super) fn helper_beside(&self, pid: &str, ns: &[&str]) -> Command {
        let mut c = Command::new("nsenter");
        c.args(["-t", pid]).args(ns).args(["taskset", "-c", &self.opts.gen_cpu.to_string()]).arg(&self.helper);
        c
    }

    /// The fleet step against the running XDP daemon: `--fleet-nodes` nodes at real
    /// client locations over the API, then PATCH → map entry for the node that
    /// serves the probe client (keys `fleet_*`), then heartbeats per second with
    /// the userspace responder's DNS p99 with and without them (alternating
    /// windows of each, so that both see the same minutes of the machine).
    pub(super) fn fleet(&self, daemon: &Bg) -> anyhow::Result<Results> {
        let pid = daemon.pid().to_string();
        let xdb = self.xdb.display().to_string();
        let nodes = self.opts.fleet_nodes.to_string();
        let on_gen_cpu = |ns: &[&str]| self.helper_beside(&pid, ns);
        let mut add = on_gen_cpu(&["-n"]);
        add.args(["fleet-add", "--xdb", &xdb, "--nodes", &nodes]);
        let mut r = parse_results(&util::output(&mut add).context("adding the fleet over the API")?);
        let mut failover = on_gen_cpu(&["-m", "-n"]);
        failover.args(["failover", "--pin-dir", PIN_DIR, "--node", "auto", "--client", "58.60.1.1"]);
        let f = parse_results(&util::output(&mut failover).context("PATCH → map entry with the fleet")?);
        r.extend(f.into_iter().map(|(k, v)| (format!("fleet_{k}"), v)));
        let (dns, rate) = (format!("{SRV_IP}:53"), self.opts.heartbeat_rate.to_string());
        let mut hb = on_gen_cpu(&["-n"]);
        hb.args(["heartbeats", "--dns", &dns, "--nodes", &nodes, "--rate", &rate]);
        r.extend(parse_results(&util::output(&mut hb).context("heartbeats per second")?));
        Ok(r)
    }

    /// Node-state change → map entry on the demo: `PATCH` gz-01 offline and
    /// online, polling the pinned maps from inside the daemon's namespaces;
    /// `signed`: the zone is signed, and the new answer's RRSIG is timed too.
    /// After the fleet step (`fleet`) gz-01 may no longer serve the probe
    /// client: the node that does goes offline instead, as in that step.
    pub(super) fn failover(&self, daemon: &Bg, signed: bool, fleet: bool) -> anyhow::Result<Results> {
        let zone = if signed { "signed" } else { "unsigned" };
        let node = if fleet { "auto" } else { "gz-01" };
        eprintln!("==> failover ({zone} zone): PATCH {node} offline/online, polling the pinned maps");
        let mut cmd = self.helper_beside(&daemon.pid().to_string(), &["-m", "-n"]);
        cmd.args([
            "failover",
            "--pin-dir",
            PIN_DIR,
            "--api",
            "127.0.0.1:8080",
            "--node",
            node,
            "--client",
            "58.60.1.1",
        ]);
        if signed {
            cmd.arg("--rrsig");
        }
        Ok(parse_results(&util::output(&mut cmd).with_context(|| format!("measuring node-down → map, {zone}"))?))
    }

    /// The fleet step, announced, with the daemon checked alive after it.
    pub(super) fn fleet_step(&self, daemon: &mut Bg) -> anyhow::Result<Results> {
        eprintln!(
            "==> fleet: {} nodes at real locations over the API; PATCH → map entry; {} heartbeats/s against DNS p99",
            self.opts.fleet_nodes, self.opts.heartbeat_rate
        );
        let fleet = self.fleet(daemon)?;
        daemon.check_alive()?;
        Ok(fleet)
    }

    /// `--only-fleet`: the XDP daemon, the fleet step, its raw results printed.
    pub(super) fn only_fleet(&self, t: &Topology) -> anyhow::Result<()> {
        let (daemon, _) = self.start_lagran(t, true)?;
        let mut daemon = daemon;
        let fleet = self.fleet_step(&mut daemon)?;
        drop(daemon);
        for (k, v) in &fleet {
            println!("{k} = {v}");
        }
        Ok(())
    }
}
