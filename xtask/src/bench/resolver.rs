//! Unbound with ECS as the client: the share of its upstream queries answered in the kernel.

use std::collections::BTreeMap;
use std::time::Duration;

use anyhow::Context as _;

use super::process::Bg;
use super::topology::Topology;
use super::{Bench, CLI_IF, SRV_IP, check_interrupted};
use crate::util;

/// What the resolver-as-client step saw.
pub(super) struct ResolverShare {
    /// Queries answered through Unbound.
    pub(super) answered: u64,
    /// The queries Unbound sent us: answered in the kernel or by the responder
    /// (its subnet cache answers the rest).
    pub(super) upstream: u64,
    /// Of them, answered by the XDP path.
    pub(super) in_kernel: u64,
    /// The pass reasons that moved meanwhile, and by how much.
    pub(super) passed: Vec<(String, u64)>,
}

/// Takes the client veth's XDP program off on drop.
pub(super) struct ClientXdpOff<'a>(&'a Topology);

impl Drop for ClientXdpOff<'_> {
    fn drop(&mut self) {
        self.0.client_xdp_off();
    }
}

impl Bench {
    /// A real recursive resolver (Unbound, ECS on, a stub zone for the demo zone) in
    /// the client namespace as the client; every query carries a different client
    /// /24 so each goes upstream.
    pub(super) fn resolver_share(&self, t: &Topology, queries: u32) -> anyhow::Result<ResolverShare> {
        let dir = self.work.join("unbound");
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir)?;
        let conf = format!(
            "server:\n  interface: 127.0.0.1@5300\n  port: 5300\n  do-daemonize: no\n  username: \"\"\n  chroot: \"\"\n\
             \x20 directory: \"{d}\"\n  pidfile: \"{d}/unbound.pid\"\n  use-syslog: no\n  logfile: \"\"\n  verbosity: 1\n\
             \x20 do-not-query-localhost: no\n  access-control: 127.0.0.0/8 allow\n  module-config: \"subnetcache iterator\"\n\
             \x20 send-client-subnet: {SRV_IP}\n  client-subnet-always-forward: yes\n  max-client-subnet-ipv4: 24\n\
             \x20 cache-max-ttl: 0\n  msg-cache-size: 0\n  rrset-cache-size: 0\n  qname-minimisation: no\n\
             \x20 harden-referral-path: no\n  target-fetch-policy: \"0 0 0 0 0\"\n\
             stub-zone:\n  name: \"edge.lagran.net\"\n  stub-addr: {SRV_IP}\n",
            d = dir.display()
        );
        std::fs::write(dir.join("unbound.conf"), conf)?;
        let cfg = dir.join("unbound.conf").display().to_string();
        // XDP_TX on a veth reaches the peer only when the peer runs XDP too: the
        // reflector passes everything not addressed to port 53, so the client side
        // receives the kernel's answers (detached on return, also on error).
        let obj = self.reflector.display().to_string();
        util::output(
            &mut t.exec(&t.cli, &["ip", "-force", "link", "set", "dev", CLI_IF, "xdp", "obj", &obj, "sec", "xdp"]),
        )
        .context("a pass-through XDP program on the client veth")?;
        let _client_xdp = ClientXdpOff(t);
        let mut cmd = t.exec(&t.cli, &["unbound", "-d", "-c", &cfg]);
        let mut unbound = Bg::spawn("unbound", &mut cmd, &self.work.join("unbound.log"))?;
        std::thread::sleep(Duration::from_millis(500));
        let passed = |t: &Topology| -> BTreeMap<String, u64> {
            let out = util::output(&mut t.exec(&t.srv, &["curl", "-s", "-m", "2", "http://127.0.0.1:8080/metrics"]))
                .unwrap_or_default();
            out.lines()
                .filter_map(|l| l.strip_prefix("lagran_xdp_packets_total{result=\"passed\",reason=\""))
                .filter_map(|l| {
                    let (reason, v) = l.split_once("\"} ")?;
                    Some((reason.to_string(), v.trim().parse::<f64>().ok()? as u64))
                })
                .collect()
        };
        let (before, udp_before) = self.counters(t);
        let passed_before = passed(t);
        let mut answered = 0;
        for i in 0..queries {
            check_interrupted()?;
            unbound.check_alive()?;
            // /24s spread over the whole space (Unbound's subnet cache answers a second
            // query inside a returned scope itself, so close ones would not go upstream).
            let subnet = format!("+subnet={}.{}.{}.0/24", 1 + (i * 37) % 222, (i * 101) % 256, (i * 59) % 256);
            let out = util::output(&mut t.exec(
                &t.cli,
                &["dig", "@127.0.0.1", "-p", "5300", "+tries=1", "+time=2", "+short", &subnet, "edge.lagran.net", "A"],
            ))
            .unwrap_or_default();
            if out.lines().any(|l| l.parse::<std::net::Ipv4Addr>().is_ok()) {
                answered += 1;
            }
        }
        let (after, udp_after) = self.counters(t);
        let passed_after = passed(t);
        let moved = passed_after
            .into_iter()
            .filter_map(|(r, v)| {
                let d = v.saturating_sub(passed_before.get(&r).copied().unwrap_or(0));
                (d > 0).then_some((r, d))
            })
            .collect();
        unbound.check_alive()?;
        drop(unbound);
        let in_kernel = after.zip(before).map_or(0, |(a, b)| a.saturating_sub(b));
        let in_userspace = udp_after.zip(udp_before).map_or(0, |(a, b)| a.saturating_sub(b));
        Ok(ResolverShare { answered, upstream: in_kernel + in_userspace, in_kernel, passed: moved })
    }
}
