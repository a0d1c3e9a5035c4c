//! The two network namespaces and the veth pair the load steps run in.

use std::path::Path;
use std::process::Command;

use anyhow::Context as _;

use super::{Bench, CLI_IF, CLI_IP, NS_PREFIX, Options, SRV_IF, SRV_IP};
use crate::util;

/// Two namespaces joined by a veth pair; both namespaces (and with them the
/// veth ends, their XDP programs and every process-less trace) are deleted on drop.
pub(super) struct Topology {
    pub(super) srv: String,
    pub(super) cli: String,
    pub(super) srv_mac: String,
    pub(super) cli_mac: String,
    pub(super) created: Vec<String>,
}

pub(super) fn ip(args: &[&str]) -> anyhow::Result<()> {
    util::output(Command::new("ip").args(args)).map(|_| ())
}

impl Topology {
    pub(super) fn create(opts: &Options, helper: &Path) -> anyhow::Result<Topology> {
        let pid = std::process::id();
        let mut t = Topology {
            srv: format!("{NS_PREFIX}srv-{pid}"),
            cli: format!("{NS_PREFIX}cli-{pid}"),
            srv_mac: String::new(),
            cli_mac: String::new(),
            created: Vec::new(),
        };
        for ns in [t.srv.clone(), t.cli.clone()] {
            ip(&["netns", "add", &ns])?;
            t.created.push(ns.clone());
            ip(&["-n", &ns, "link", "set", "lo", "up"])?;
        }
        ip(&["link", "add", SRV_IF, "netns", &t.srv, "type", "veth", "peer", "name", CLI_IF, "netns", &t.cli])?;
        ip(&["-n", &t.srv, "addr", "add", &format!("{SRV_IP}/30"), "dev", SRV_IF])?;
        ip(&["-n", &t.cli, "addr", "add", &format!("{CLI_IP}/30"), "dev", CLI_IF])?;
        ip(&["-n", &t.srv, "link", "set", SRV_IF, "up"])?;
        ip(&["-n", &t.cli, "link", "set", CLI_IF, "up"])?;
        t.srv_mac = t.exec_out(&t.srv, &["cat", &format!("/sys/class/net/{SRV_IF}/address")])?.trim().to_string();
        t.cli_mac = t.exec_out(&t.cli, &["cat", &format!("/sys/class/net/{CLI_IF}/address")])?.trim().to_string();
        // Static neighbours: the generators drop everything arriving at the client
        // veth (ARP replies too) while they run.
        ip(&["-n", &t.srv, "neigh", "replace", CLI_IP, "lladdr", &t.cli_mac, "dev", SRV_IF, "nud", "permanent"])?;
        ip(&["-n", &t.cli, "neigh", "replace", SRV_IP, "lladdr", &t.srv_mac, "dev", CLI_IF, "nud", "permanent"])?;
        // NAPI threading (with GRO, so the veths have NAPI without XDP too), the
        // NAPI kthreads pinned: the server's receive work on the server CPU.
        for (ns, dev, cpu) in [(&t.srv, SRV_IF, opts.server_cpu), (&t.cli, CLI_IF, opts.gen_cpu)] {
            let cpu = cpu.to_string();
            t.exec_out(ns, &[&helper.display().to_string(), "napi", "--iface", dev, "--cpu", &cpu])?;
        }
        Ok(t)
    }

    /// `ip netns exec NS args…`.
    pub(super) fn exec(&self, ns: &str, args: &[&str]) -> Command {
        let mut c = Command::new("ip");
        c.args(["netns", "exec", ns]).args(args);
        c
    }

    pub(super) fn exec_out(&self, ns: &str, args: &[&str]) -> anyhow::Result<String> {
        util::output(&mut self.exec(ns, args))
    }

    /// Removes whatever XDP program a generator left on the client veth.
    pub(super) fn client_xdp_off(&self) {
        let _ = util::output(Command::new("ip").args(["-n", &self.cli, "link", "set", "dev", CLI_IF, "xdp", "off"]));
    }
}

impl Drop for Topology {
    fn drop(&mut self) {
        for ns in self.created.drain(..).rev() {
            if let Err(e) = ip(&["netns", "delete", &ns]) {
                eprintln!("warning: {e}");
            }
        }
    }
}

/// Deletes namespaces left by a bench whose process is gone (killed with -9).
pub(super) fn remove_stale_namespaces() {
    let Ok(list) = util::output(Command::new("ip").args(["netns", "list"])) else { return };
    for line in list.lines() {
        let name = line.split_whitespace().next().unwrap_or("");
        let Some(rest) = name.strip_prefix(NS_PREFIX) else { continue };
        let pid = rest.rsplit('-').next().unwrap_or("");
        if !pid.is_empty() && !Path::new("/proc").join(pid).exists() {
            eprintln!("removing stale namespace {name} (its bench is gone)");
            let _ = ip(&["netns", "delete", name]);
        }
    }
}

impl Bench {
    /// The namespaces and the veth pair, announced.
    pub(super) fn topology(&self) -> anyhow::Result<Topology> {
        let t = Topology::create(&self.opts, &self.helper).context("creating the namespaces and the veth pair")?;
        eprintln!(
            "==> namespaces {} / {} joined by {SRV_IF} ({SRV_IP}) <-> {CLI_IF} ({CLI_IP}); server CPU {}, generator CPU {}",
            t.srv, t.cli, self.opts.server_cpu, self.opts.gen_cpu
        );
        Ok(t)
    }

    /// `bench_helper args…` in namespace `ns`, pinned to `cpu` when given.
    pub(super) fn helper_cmd(&self, t: &Topology, ns: &str, cpu: Option<u32>, args: &[&str]) -> Command {
        let mut all: Vec<String> = Vec::new();
        if let Some(cpu) = cpu {
            all.extend(["taskset".into(), "-c".into(), cpu.to_string()]);
        }
        all.push(self.helper.display().to_string());
        all.extend(args.iter().map(|s| s.to_string()));
        let refs: Vec<&str> = all.iter().map(String::as_str).collect();
        t.exec(ns, &refs)
    }
}
