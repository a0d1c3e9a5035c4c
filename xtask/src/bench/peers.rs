//! The peers on the same generators and pinning: knotd on UDP, knotd in its own
//! XDP mode (also with the zone pre-signed, against Lagran's signed rate), and
//! a bare XDP_TX reflector (the ceiling of the box).

use super::servers::Server;
use super::topology::Topology;
use super::{Bench, Measured};
use crate::util;

impl Bench {
    /// knotd serving an equivalent static zone, then knotd in XDP mode; skipped
    /// (and said so) with `--no-peer` or without knotd.
    pub(super) fn peers(&self, t: &Topology, gens: &[String], m: &mut Measured) -> anyhow::Result<()> {
        if self.opts.no_peer {
            m.notes.push("peer authoritative server: skipped (--no-peer)".into());
            return Ok(());
        }
        if util::which("knotd").is_none() {
            m.notes.push("peer authoritative server: skipped, knotd not installed (`apt-get install knot`)".into());
            return Ok(());
        }
        let mut knot = self.start_knot(t, false, false)?;
        self.qps(t, Server::Knot, gens, &mut m.qps)?;
        knot.check_alive()?;
        drop(knot);
        // The strongest peer: knotd in its own XDP mode.
        match self.start_knot(t, true, false) {
            Ok(mut knot) => {
                self.qps(t, Server::KnotXdp, gens, &mut m.qps)?;
                knot.check_alive()?;
            }
            Err(e) => m.notes.push(format!("knotd XDP: did not start ({e:#})")),
        }
        if gens.iter().any(|g| g == "gun") {
            self.knot_signed(t, m)?;
        }
        Ok(())
    }

    /// The ceiling of the box: a bare XDP_TX reflector, same generators, same pinning.
    pub(super) fn reflector_phase(&self, t: &Topology, gens: &[String], m: &mut Measured) -> anyhow::Result<()> {
        let _reflector = self.start_reflector(t)?;
        self.qps(t, Server::Reflector, gens, &mut m.qps)
    }
}
