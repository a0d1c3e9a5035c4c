//! `signing`: what signing a route table costs the control plane. The
//! recompute benchmark's fleet and partitions (1 000 nodes, 5 000
//! partitions, 10 names) in one zone with DNSSEC on, a KSK and a ZSK made
//! for the run, for each algorithm:
//!
//! - **full table**: `TableSigner::sign` from nothing (every RRset the
//!   responder can answer: each name's distinct answers, SOA, NS, DNSKEY,
//!   CDS/CDNSKEY, the NSEC chain), its signatures and their rate;
//! - **one node down**: the next table after a node went offline, signed
//!   by the same signer, which keeps every signature whose RRset did not
//!   change (what the leader does at each recompute).

use std::time::Instant;

use anyhow::Context as _;
use lagran::config::ScheduleSettings;
use lagran::dnssec::{KeySnapshot, TableSigner};
use lagran::model::{DEFAULT_POOL, DnssecAlgorithm, NodeStatus, Zone, ZoneDnssec};
use lagran::route_table::RouteTable;
use lagran::scheduler::{BuildState, Change, Inputs, build_route_table};

use crate::result;
use crate::tables::{FleetSize, bench_domains, bench_fleet, now_ms};

#[derive(clap::Args)]
pub struct Args {
    #[command(flatten)]
    size: FleetSize,
}

/// One KSK and one ZSK of `algorithm` for `zone`, made for the run.
fn keys(zone: &str, algorithm: DnssecAlgorithm) -> anyhow::Result<KeySnapshot> {
    Ok(KeySnapshot::single(zone, ZoneDnssec { algorithm, ..ZoneDnssec::default() })?)
}

/// The RRSIG records a signed table carries.
fn signatures_in(table: &RouteTable) -> usize {
    table.signatures.values().map(|z| z.rrsigs().values().map(Vec::len).sum::<usize>()).sum()
}

pub fn run(a: Args) -> anyhow::Result<()> {
    let (nodes, partitions) = bench_fleet(a.size.partitions, a.size.nodes, 39)?;
    let schedule = ScheduleSettings::default();
    let policy = schedule.policy();
    let now = now_ms();
    let now_secs = (now / 1_000) as u32;
    for (label, algorithm) in [("ecdsa", DnssecAlgorithm::Ecdsap256sha256), ("ed25519", DnssecAlgorithm::Ed25519)] {
        let mut zone = Zone::new("bench.lagran.net");
        zone.dnssec = Some(ZoneDnssec { algorithm, ..ZoneDnssec::default() });
        let domains = bench_domains(&zone, a.size.names, |_| DEFAULT_POOL.to_string());
        let mut inputs =
            Inputs { nodes: nodes.clone(), zones: vec![zone.clone()], domains, now_ms: now, ..Inputs::default() };
        let mut state = BuildState::default();
        let table = build_route_table(1, &inputs, &partitions, &schedule, &policy, &mut state, &Change::Everything);
        let answers: usize = table.zones.iter().flat_map(|z| &z.names).map(|n| n.answers.len()).sum();
        let keys = keys(&zone.name, algorithm)?;
        let mut signer = TableSigner::new();

        let t = Instant::now();
        let signatures = signer.sign(&table, &keys, now_secs).context("signing the full table")?;
        let full_ms = t.elapsed().as_secs_f64() * 1e3;
        let made = signer.made();
        let table = table.with_signatures(signatures);
        result(&format!("signing_{label}_answers"), answers);
        result(&format!("signing_{label}_signatures"), signatures_in(&table));
        result(&format!("signing_{label}_full_table_ms"), format!("{full_ms:.1}"));
        result(&format!("signing_{label}_per_s"), format!("{:.0}", made as f64 / (full_ms / 1e3)));

        // One node down: the scheduler's next table, signed by the same signer.
        let busiest = table.zones[0].names[0].answers[0].node.clone().context("the apex's first answer has a node")?;
        let down = inputs.nodes.iter_mut().find(|n| n.name == busiest).context("the answer's node")?;
        down.status = NodeStatus::Offline;
        let next = build_route_table(2, &inputs, &partitions, &schedule, &policy, &mut state, &Change::Everything);
        let t = Instant::now();
        signer.sign(&next, &keys, now_secs).context("signing the next table")?;
        let again_ms = t.elapsed().as_secs_f64() * 1e3;
        result(&format!("signing_{label}_node_down_ms"), format!("{again_ms:.1}"));
        result(&format!("signing_{label}_node_down_signatures"), signer.made() - made);
        eprintln!(
            "signing ({label}): {answers} answers, {} signatures in {full_ms:.1} ms; {busiest} down: {} new in {again_ms:.1} ms",
            signatures_in(&table),
            signer.made() - made
        );
    }
    Ok(())
}
