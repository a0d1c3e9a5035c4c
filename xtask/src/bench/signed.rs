//! The XDP rate of a signed zone: the demo zone signed over the API, then the
//! QPS search again with `gun --dnssec-ok` (DO set), so that the XDP program
//! answers every query with its `A` record and the RRSIG from
//! `lagran_rrsig`. Reported beside the unsigned rate, with their ratio (and
//! beside knotd's rate on the same zone pre-signed, see `peers`).

use std::time::{Duration, Instant};

use anyhow::{Context as _, bail};

use super::process::Bg;
use super::search::find_best;
use super::servers::Server;
use super::topology::Topology;
use super::{Bench, Measured, PIN_DIR};
use crate::util;

/// The generator name the signed runs are kept under (`gun` with DO set).
pub(super) const GUN_DO: &str = "gun-do";

/// The signed rate should hold this share of the unsigned one.
pub(super) const TARGET_RATIO: f64 = 0.8;

/// The demo zone as `--demo` makes it, with signing on.
const SIGN_BODY: &str = r#"{"ns_hosts":[{"name":"ns1.edge.lagran.net","ipv4":"198.51.100.53"},{"name":"ns2.edge.lagran.net","ipv4":"198.51.100.54"}],"dnssec":true}"#;

impl Bench {
    /// Signs the demo zone on the running XDP daemon and waits for the
    /// RRSIGs to reach `lagran_rrsig`.
    pub(super) fn sign_demo_zone(&self, t: &Topology, daemon: &Bg) -> anyhow::Result<()> {
        eprintln!("==> signed zone: PUT dnssec=true on the demo zone");
        let url = "http://127.0.0.1:8080/api/v1/zones/edge.lagran.net";
        let auth = std::env::var("ADMIN_TOKEN").map(|t| format!("Authorization: Bearer {t}")).unwrap_or_default();
        let mut args = vec!["curl", "-s", "-m", "10", "-o", "/dev/null", "-w", "%{http_code}", "-X", "PUT"];
        args.extend(["-H", "Content-Type: application/json", "-d", SIGN_BODY, url]);
        if !auth.is_empty() {
            args.extend(["-H", &auth]);
        }
        let code = util::output(&mut t.exec(&t.srv, &args)).context("PUT the zone with dnssec")?;
        if code.trim() != "200" {
            bail!("PUT {url} with dnssec answered HTTP {}", code.trim());
        }
        self.wait_rrsigs(daemon)
    }

    /// The rate of `gun --dnssec-ok` against the signed demo zone.
    pub(super) fn signed_qps(&self, t: &Topology, m: &mut Measured) -> anyhow::Result<()> {
        eprintln!("==> signed zone: QPS with DO set [gun]");
        let best = find_best("lagran XDP, signed (DO) / gun", 25_000, self.opts.max_rate, |rate| {
            self.load_run(t, Server::LagranXdp, GUN_DO, rate)
        })?;
        eprintln!("==> lagran XDP, signed (DO) / gun: {}", best.describe());
        if best.qps > 0.0 {
            eprintln!("==> lagran XDP, signed (DO) / gun: the program's own cost per packet (bpf_stats)");
            match self.live_cost(t, GUN_DO, best.qps as u64)? {
                Some(cost) => _ = m.live.insert(GUN_DO.to_string(), cost),
                None => m.notes.push("XDP per packet under load, signed: no bpf_stats accounting".into()),
            }
        }
        m.qps.insert((Server::LagranXdp, GUN_DO.to_string()), best);
        Ok(())
    }

    /// Until the pinned `lagran_rrsig` (in the daemon's mount namespace) holds entries, 30 s at most.
    fn wait_rrsigs(&self, daemon: &Bg) -> anyhow::Result<()> {
        let pid = daemon.pid().to_string();
        let map = format!("{PIN_DIR}/lagran_rrsig");
        let deadline = Instant::now() + Duration::from_secs(30);
        loop {
            let mut cmd = std::process::Command::new("nsenter");
            cmd.args(["-t", &pid, "-m", "-n", "bpftool", "-j", "map", "dump", "pinned", &map]);
            let entries = util::output(&mut cmd).map(|o| o.matches("\"key\"").count()).unwrap_or(0);
            if entries > 0 {
                eprintln!("==> signed zone: {entries} RRSIGs in lagran_rrsig");
                return Ok(());
            }
            if Instant::now() >= deadline {
                bail!("no RRSIG reached {map} within 30 s of signing the zone");
            }
            std::thread::sleep(Duration::from_millis(250));
        }
    }
}
