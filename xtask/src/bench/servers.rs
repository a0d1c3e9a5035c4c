//! The servers under load: lagran with and without XDP, knotd, the bare reflector.

use std::process::Command;
use std::time::Instant;

use anyhow::{Context as _, bail};

use super::process::{Bg, tail};
use super::topology::Topology;
use super::{
    Bench, CLI_IF, PIN_DIR, PROBE_ANSWER, PROBE_SUBNET, Results, SRV_IF, SRV_IP, check_interrupted, parse_results,
};
use crate::util;

/// What a server under load is.
#[derive(Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Debug)]
pub(super) enum Server {
    LagranXdp,
    LagranUserspace,
    Knot,
    /// knotd answering from its own XDP path (AF_XDP, `xdp: listen`): the strongest peer.
    KnotXdp,
    /// A bare XDP_TX reflector (`lagran-ebpf/src/reflector.rs`): the ceiling of the box.
    Reflector,
}

impl Server {
    pub(super) fn label(self) -> &'static str {
        match self {
            Server::LagranXdp => "lagran XDP",
            Server::LagranUserspace => "lagran userspace",
            Server::Knot => "knotd",
            Server::KnotXdp => "knotd XDP",
            Server::Reflector => "XDP_TX reflector",
        }
    }
}

/// The reflector attached to the server veth; detached on drop, also on failure.
pub(super) struct Reflector {
    pub(super) ns: String,
}

impl Drop for Reflector {
    fn drop(&mut self) {
        let _ = Command::new("ip").args(["-n", &self.ns, "link", "set", "dev", SRV_IF, "xdp", "off"]).status();
    }
}

impl Bench {
    /// Starts `lagran serve --demo` in the server namespace, pinned to the server CPU.
    pub(super) fn start_lagran(&self, t: &Topology, xdp: bool) -> anyhow::Result<(Bg, f64)> {
        let db = self.work.join("lagran.db");
        for suffix in ["", "-wal", "-shm"] {
            let _ = std::fs::remove_file(format!("{}{suffix}", db.display()));
        }
        let lagran = self.lagran.display().to_string();
        let cpu = self.opts.server_cpu.to_string();
        let mut args = vec!["taskset", "-c", &cpu, &lagran, "serve", "--demo"];
        if xdp {
            args.extend(["--xdp", SRV_IF]);
        }
        let dns = format!("{SRV_IP}:53");
        args.extend(["--dns-listen", &dns, "--api-listen", "127.0.0.1:8080"]);
        let mut cmd = t.exec(&t.srv, &args);
        cmd.current_dir(&self.work)
            .env("GEOIP_PATH", &self.xdb)
            .env("DATABASE_URL", format!("sqlite://{}", db.display()))
            .env("LAGRAN_PIN_DIR", PIN_DIR)
            .env("LAGRAN_EBPF_OBJECT", &self.obj)
            // LAGRAN_BENCH_LOG: the daemon's RUST_LOG (its log is target/bench/lagran-*.log).
            .env("RUST_LOG", std::env::var("LAGRAN_BENCH_LOG").unwrap_or_else(|_| "warn".into()));
        let name = if xdp { "lagran serve --xdp" } else { "lagran serve" };
        let log = self.work.join(if xdp { "lagran-xdp.log" } else { "lagran-userspace.log" });
        let started = Instant::now();
        let mut bg = Bg::spawn(name, &mut cmd, &log)?;
        let r = self.wait_answer(t, &mut bg, 90.0)?;
        let secs = started.elapsed().as_secs_f64();
        if r.get("answer").map(String::as_str) != Some(PROBE_ANSWER) {
            bail!("{name}: {PROBE_SUBNET} was answered {:?}, expected gz-01 ({PROBE_ANSWER})", r.get("answer"));
        }
        eprintln!("==> {name}: first answer after {secs:.2} s (scope /{})", r.get("scope").map_or("-", String::as_str));
        Ok((bg, secs))
    }

    /// Queries until the server answers (or `process` dies, or `wait` seconds pass).
    pub(super) fn wait_answer(&self, t: &Topology, process: &mut Bg, wait: f64) -> anyhow::Result<Results> {
        let start = Instant::now();
        let server = format!("{SRV_IP}:53");
        loop {
            check_interrupted()?;
            process.check_alive()?;
            let mut cmd = self.helper_cmd(
                t,
                &t.cli,
                None,
                &["query", "--iface", CLI_IF, "--server", &server, "--subnet", PROBE_SUBNET, "--wait", "2"],
            );
            if let Ok(out) = util::output(&mut cmd) {
                return Ok(parse_results(&out));
            }
            if start.elapsed().as_secs_f64() > wait {
                bail!(
                    "{} did not answer within {wait} s; last lines of {}:\n{}",
                    process.name,
                    process.log.display(),
                    tail(&process.log, 20)
                );
            }
        }
    }

    /// knotd serving the static zone; `xdp`: from its own XDP path; `signed`:
    /// the zone signed by knotd as it loads it (before serving), ECDSA P-256.
    pub(super) fn start_knot(&self, t: &Topology, xdp: bool, signed: bool) -> anyhow::Result<Bg> {
        let name = match (xdp, signed) {
            (false, false) => "knotd",
            (true, false) => "knotd-xdp",
            (false, true) => "knotd-signed",
            (true, true) => "knotd-xdp-signed",
        };
        let dir = self.work.join(name);
        let _ = std::fs::remove_dir_all(&dir);
        // The database directory, where a signing knotd keeps its keys.
        std::fs::create_dir_all(dir.join("db"))?;
        let zone = "$ORIGIN edge.lagran.net.\n$TTL 30\n@ SOA ns1 hostmaster 1 3600 600 604800 60\n@ NS ns1\n@ NS ns2\nns1 A 198.51.100.53\nns2 A 198.51.100.54\n@ A 203.0.113.21\n";
        std::fs::write(dir.join("edge.lagran.net.zone"), zone)?;
        let d = dir.display();
        // Automatic signing: knotd makes the keys (its KASP database under
        // the storage) and signs the whole zone when it loads it, so every
        // answer is pre-signed before the first query, as Lagran's are. (A
        // policy is defined before the zone that names it, or knotd refuses it.)
        let (policy, signing) = match signed {
            true => (
                "policy:\n  - id: p256\n    algorithm: ecdsap256sha256\n    nsec3: off\n",
                "    dnssec-signing: on\n    dnssec-policy: p256\n",
            ),
            false => ("", ""),
        };
        let conf = format!(
            "server:\n    rundir: \"{d}\"\n    listen: {SRV_IP}@53\n    udp-workers: 1\n    tcp-workers: 1\n    background-workers: 1\n\
             database:\n    storage: \"{d}/db\"\ncontrol:\n    listen: \"{d}/knot.sock\"\n\
             log:\n  - target: stderr\n    any: warning\n\
             template:\n  - id: default\n    storage: \"{d}\"\n    semantic-checks: off\n\
             {policy}zone:\n  - domain: edge.lagran.net\n    file: edge.lagran.net.zone\n{signing}"
        );
        // Knot's own fast path: AF_XDP on the server veth, UDP only.
        let conf = if xdp { format!("{conf}xdp:\n    listen: {SRV_IF}@53\n    udp: on\n    tcp: off\n") } else { conf };
        std::fs::write(dir.join("knot.conf"), conf)?;
        let cpu = self.opts.server_cpu.to_string();
        let cfg = dir.join("knot.conf").display().to_string();
        let mut cmd = t.exec(&t.srv, &["taskset", "-c", &cpu, "knotd", "-c", &cfg]);
        let log = self.work.join(format!("{name}.log"));
        let mut bg = Bg::spawn(name, &mut cmd, &log)?;
        let r = self.wait_answer(t, &mut bg, 20.0)?;
        eprintln!("==> {name} answers {:?}", r.get("answer"));
        Ok(bg)
    }

    /// Attaches the bare XDP_TX reflector to the server veth; detached on drop.
    pub(super) fn start_reflector(&self, t: &Topology) -> anyhow::Result<Reflector> {
        let obj = self.reflector.display().to_string();
        // -force: replace whatever a peer server left behind (knotd detaches as it exits).
        util::output(
            &mut t.exec(&t.srv, &["ip", "-force", "link", "set", "dev", SRV_IF, "xdp", "obj", &obj, "sec", "xdp"]),
        )
        .context("attaching the reflector")?;
        Ok(Reflector { ns: t.srv.clone() })
    }
}
