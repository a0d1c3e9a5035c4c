//! knotd in its XDP mode serving the demo zone pre-signed (knotd's automatic
//! signing, ECDSA P-256, done as it loads the zone), measured with `gun
//! --dnssec-ok` as Lagran's signed rate is. Before the search, `kdig
//! +dnssec` checks that knotd's answer is comparable: the `A` record of the
//! same name with its RRSIG.

use anyhow::{Context as _, bail};

use super::search::find_best;
use super::servers::Server;
use super::signed::GUN_DO;
use super::topology::Topology;
use super::{Bench, Measured, PROBE_ANSWER, SRV_IP};
use crate::util;

impl Bench {
    /// knotd XDP, the zone pre-signed: its answer checked, then its DO rate.
    pub(super) fn knot_signed(&self, t: &Topology, m: &mut Measured) -> anyhow::Result<()> {
        let mut knot = match self.start_knot(t, true, true) {
            Ok(knot) => knot,
            Err(e) => {
                m.notes.push(format!("knotd XDP, pre-signed: did not start ({e:#})"));
                return Ok(());
            }
        };
        self.check_knot_signed(t).context("knotd's signed answer")?;
        let label = "knotd XDP, pre-signed (DO) / gun";
        let best =
            find_best(label, 25_000, self.opts.max_rate, |rate| self.load_run(t, Server::KnotXdp, GUN_DO, rate))?;
        eprintln!("==> {label}: {}", best.describe());
        m.qps.insert((Server::KnotXdp, GUN_DO.to_string()), best);
        knot.check_alive()
    }

    /// `kdig +dnssec` from the client namespace: `edge.lagran.net A` answered
    /// with the demo's address and an RRSIG covering `A`, algorithm 13.
    fn check_knot_signed(&self, t: &Topology) -> anyhow::Result<()> {
        let server = format!("@{SRV_IP}");
        let out =
            util::output(&mut t.exec(
                &t.cli,
                &["kdig", &server, "edge.lagran.net", "A", "+dnssec", "+norecurse", "+time=2", "+retry=2"],
            ))?;
        let records: Vec<Vec<&str>> =
            out.lines().filter(|l| l.starts_with("edge.lagran.net.")).map(|l| l.split_whitespace().collect()).collect();
        let has_a = records.iter().any(|r| r.get(3) == Some(&"A") && r.get(4) == Some(&PROBE_ANSWER));
        let has_rrsig =
            records.iter().any(|r| r.get(3) == Some(&"RRSIG") && r.get(4) == Some(&"A") && r.get(5) == Some(&"13"));
        if !has_a || !has_rrsig {
            bail!("knotd did not answer edge.lagran.net A with {PROBE_ANSWER} and an RRSIG (A, algorithm 13):\n{out}");
        }
        eprintln!("==> knotd XDP, pre-signed: kdig +dnssec gets A {PROBE_ANSWER} and its RRSIG");
        Ok(())
    }
}
