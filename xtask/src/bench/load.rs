//! The load step: every generator against each server, the rate searched.

use std::collections::BTreeMap;
use std::time::Duration;

use anyhow::bail;

use super::search::{Best, Run, find_best};
use super::servers::Server;
use super::topology::Topology;
use super::{AFTER_FLEET, Bench, Measured, RESOLVER_QUERIES};
use crate::{busy, util};

impl Bench {
    /// One bounded load run of `generator` at `rate`.
    pub(super) fn load_run(&self, t: &Topology, server: Server, generator: &str, rate: u64) -> anyhow::Result<Run> {
        let ours = matches!(server, Server::LagranXdp | Server::LagranUserspace);
        let before = if ours { self.counters(t) } else { (None, None) };
        // The server core's busy time, from after the generator's start-up to
        // before its end (runs of 2 s and more).
        let secs = self.opts.duration as f64;
        let watch = (secs >= 2.0).then(|| {
            busy::watch(self.opts.server_cpu, Duration::from_millis(700), Duration::from_secs_f64(secs - 1.0))
        });
        let mut run = match generator {
            "gun" => self.run_gun(t, rate, false)?,
            super::signed::GUN_DO => self.run_gun(t, rate, true)?,
            "kxdpgun" => self.run_kxdpgun(t, rate)?,
            "dnsperf" => self.run_dnsperf(t, rate)?,
            other => bail!("unknown generator {other:?} (gun, kxdpgun, dnsperf)"),
        };
        run.server_busy = watch.and_then(|w| w.join().ok().flatten());
        if ours {
            let after = self.counters(t);
            run.xdp_answered = after.0.zip(before.0).map(|(a, b)| a.saturating_sub(b));
            run.udp_queries = after.1.zip(before.1).map(|(a, b)| a.saturating_sub(b));
        }
        // Let queues drain between runs.
        std::thread::sleep(Duration::from_millis(300));
        Ok(run)
    }

    /// The program's nanoseconds per run under real traffic: one more run of
    /// `generator` at `rate` (the best rate found) with `kernel.bpf_stats_enabled`
    /// on for it alone (off for the QPS search, whose rates stay comparable),
    /// from the daemon's /metrics, as an SRE reads it live. `None` where the
    /// sysctl cannot be set or the daemon exports no accounting.
    pub(super) fn live_cost(&self, t: &Topology, generator: &str, rate: u64) -> anyhow::Result<Option<(f64, u64)>> {
        const SYSCTL: &str = "/proc/sys/kernel/bpf_stats_enabled";
        let Ok(was) = std::fs::read_to_string(SYSCTL) else { return Ok(None) };
        if std::fs::write(SYSCTL, "1").is_err() {
            return Ok(None);
        }
        let before = self.xdp_run_stats(t);
        let run = self.load_run(t, Server::LagranXdp, generator, rate);
        let after = self.xdp_run_stats(t);
        let _ = std::fs::write(SYSCTL, was.trim());
        run?;
        Ok(match (before, after) {
            (Some((ns0, n0)), Some((ns1, n1))) if n1 > n0 => {
                Some((ns1.saturating_sub(ns0) as f64 / (n1 - n0) as f64, n1 - n0))
            }
            _ => None,
        })
    }

    /// Every generator against one running server.
    pub(super) fn qps(
        &self,
        t: &Topology,
        server: Server,
        gens: &[String],
        out: &mut BTreeMap<(Server, String), Best>,
    ) -> anyhow::Result<()> {
        for g in gens {
            eprintln!("==> QPS: {} with {g}", server.label());
            let best = find_best(&format!("{} / {g}", server.label()), 25_000, self.opts.max_rate, |rate| {
                self.load_run(t, server, g, rate)
            })?;
            eprintln!("==> {} / {g}: {}", server.label(), best.describe());
            out.insert((server, g.clone()), best);
        }
        Ok(())
    }

    /// The daemon with XDP on: failover, the resolver as client, the QPS search,
    /// the program's cost under load, then the fleet.
    pub(super) fn xdp_phase(&self, t: &Topology, gens: &[String], m: &mut Measured) -> anyhow::Result<()> {
        let (mut daemon, secs) = self.start_lagran(t, true)?;
        m.startup.insert("xdp", secs);
        m.failover = self.failover(&daemon, false, false)?;
        daemon.check_alive()?;
        if util::which("unbound").is_none() {
            m.notes.push("resolver as client: skipped, unbound not installed (`cargo xtask setup`)".into());
        } else {
            eprintln!("==> resolver as client: Unbound with ECS, {RESOLVER_QUERIES} queries from distinct /24s");
            m.resolver = Some(self.resolver_share(t, RESOLVER_QUERIES)?);
        }
        self.qps(t, Server::LagranXdp, gens, &mut m.qps)?;
        self.live_costs(t, gens, m)?;
        daemon.check_alive()?;
        if !self.opts.no_fleet {
            m.fleet = self.fleet_step(&mut daemon)?;
        }
        // Last: signing the zone changes what the steps above measure.
        self.sign_demo_zone(t, &daemon)?;
        let fleet = !self.opts.no_fleet;
        m.failover_signed = self.failover(&daemon, true, fleet)?;
        if fleet {
            m.failover_signed.insert(AFTER_FLEET.into(), "1".into());
        }
        daemon.check_alive()?;
        if gens.iter().any(|g| g == "gun") {
            self.signed_qps(t, m)?;
            daemon.check_alive()?;
        }
        daemon.stop();
        Ok(())
    }

    /// Per generator, the XDP program's own cost at the best rate it held.
    fn live_costs(&self, t: &Topology, gens: &[String], m: &mut Measured) -> anyhow::Result<()> {
        for g in gens {
            if let Some(best) = m.qps.get(&(Server::LagranXdp, g.clone()))
                && best.qps > 0.0
            {
                eprintln!("==> lagran XDP / {g}: the program's own cost per packet at {:.0} qps (bpf_stats)", best.qps);
                match self.live_cost(t, g, best.qps as u64)? {
                    Some(c) => {
                        m.live.insert(g.clone(), c);
                    }
                    None => m.notes.push(format!("XDP per packet under load [{g}]: no bpf_stats accounting")),
                }
            }
        }
        Ok(())
    }

    /// The same daemon with XDP off: the QPS search.
    pub(super) fn userspace_phase(&self, t: &Topology, gens: &[String], m: &mut Measured) -> anyhow::Result<()> {
        let (mut daemon, secs) = self.start_lagran(t, false)?;
        m.startup.insert("userspace", secs);
        self.qps(t, Server::LagranUserspace, gens, &mut m.qps)?;
        daemon.check_alive()
    }
}
