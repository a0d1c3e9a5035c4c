//! `bench_helper`: the measurements `cargo xtask bench` cannot make from the
//! outside. Each subcommand prints `RESULT <key> <value>` lines that xtask parses
//! (and human-readable notes on stderr).
//!
//! - `tables`: needs only the real xdb and the BPF object (root for the kernel
//!   part): xdb load and compile time, geo lookup ns/op, route recompute
//!   (1 000 nodes × 5 000 partitions × 10 names), the LPM trie size after a sync
//!   and the per-packet cost through `BPF_PROG_TEST_RUN` (small vs full tables),
//!   mean ECS scope and the scope-correctness check.
//! - `gun`: an ECS load generator (AF_PACKET, a spread of real client /24s).
//!   kxdpgun 3.2 (Debian bookworm) cannot put an ECS option in its queries.
//! - `query`: one `edge.lagran.net A` query with ECS, answer and scope printed
//!   (readiness and sanity checks).
//! - `hold-pass`, `queries`: a PASS program held on the client veth, and an
//!   ECS query file in dnsperf's binary format, for the dnsperf runs.
//! - `failover`: `PATCH /api/v1/nodes/{name}` and poll the pinned maps until the
//!   answer for a client changes; run inside the daemon's namespaces.
//! - `fleet-add`, `heartbeats`: a real-size fleet over the API, and heartbeats
//!   per second against DNS p99 with and without them.
//! - `world`: the ip2region file alone and merged with MaxMind City and ASN
//!   data: load, lookup, route table, map sync and memory, side by side.
//! - `steering`: measurement ingest rate, a recompute with a populated
//!   measurement matrix, the matrix's memory (no root, no data files).
//! - `signing`: a full route table signed for 1 000 nodes, signatures per
//!   second, the re-signing after one node down (no root, no data files).
//!
//! Build with `--release`; xtask runs it as `target/release/examples/bench_helper`.

mod bpfstats;
mod cost;
mod failover;
mod fleet;
mod frames;
mod gun;
mod napi;
mod query;
mod rawxdp;
mod signing;
mod steering;
mod tables;
mod world;
mod xdpcost;
mod xdpinsns;

use clap::Parser;

#[derive(Parser)]
#[command(name = "bench_helper", about = "Measurements for `cargo xtask bench`")]
enum Cmd {
    /// Table sizes, kernel lookup cost, ECS scopes, geo and recompute timings.
    Tables(tables::Args),
    /// ECS query load at a fixed rate for a bounded time; counts replies.
    Gun(gun::Args),
    /// One query with ECS; prints the answer and the scope.
    Query(query::Args),
    /// Node-state change → updated map entry, in milliseconds.
    Failover(failover::Args),
    /// GRO and NAPI threading on a veth, its NAPI threads pinned to a CPU.
    Napi(napi::Args),
    /// Keep a PASS program on an interface for a bounded time (for dnsperf).
    HoldPass(query::HoldArgs),
    /// Write ECS queries for real client /24s in dnsperf's binary format (`-B`).
    Queries(gun::QueriesArgs),
    /// `POST /api/v1/nodes` for a fleet of nodes at real client locations.
    FleetAdd(fleet::AddArgs),
    /// Heartbeats at a target rate while DNS latency is probed, with and without them.
    Heartbeats(fleet::HeartbeatArgs),
    /// The XDP program's per-packet cost, objects compared back to back.
    XdpCost(xdpcost::Args),
    /// BPF instructions the XDP program executes per answered query (interpreted).
    XdpInsns(xdpinsns::Args),
    /// The ip2region file alone vs merged with MaxMind City and ASN data: load,
    /// lookup, route table, map sync and memory.
    World(world::Args),
    /// Latency steering: measurement ingest rate, recompute with a populated matrix, its memory.
    Steering(steering::Args),
    /// DNSSEC signing: a full route table for 1 000 nodes, signatures per second, one node down.
    Signing(signing::Args),
}

/// One machine-readable result line.
pub fn result(key: &str, value: impl std::fmt::Display) {
    println!("RESULT {key} {value}");
}

fn main() -> anyhow::Result<()> {
    match Cmd::parse() {
        Cmd::Tables(a) => tables::run(a),
        Cmd::Gun(a) => gun::run(a),
        Cmd::Query(a) => query::run(a),
        Cmd::Failover(a) => failover::run(a),
        Cmd::HoldPass(a) => query::hold(a),
        Cmd::Napi(a) => napi::run(a),
        Cmd::Queries(a) => gun::queries(a),
        Cmd::FleetAdd(a) => fleet::add(a),
        Cmd::Heartbeats(a) => fleet::heartbeats(a),
        Cmd::XdpCost(a) => xdpcost::run(a),
        Cmd::XdpInsns(a) => xdpinsns::run(a),
        Cmd::World(a) => world::run(a),
        Cmd::Steering(a) => steering::run(a),
        Cmd::Signing(a) => signing::run(a),
    }
}
