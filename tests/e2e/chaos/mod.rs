//! Fault injection: the production topology under continuous queries and
//! heartbeats, one fault at a time, with a row per fault of what clients saw.
//!
//! The topology ([`cluster`]): a private PostgreSQL; two `lagran control`
//! processes on it (one leads, one stands by); two NS hosts — `ns1` in a
//! network namespace of its own with the XDP program on its veth, `ns2` on
//! loopback with DNS over TLS and over QUIC, following the control plane
//! through a man in the middle ([`mitm`]) and with its wall clock under
//! libfaketime; a `lagran-edge` serving a site from a local origin; an agent
//! sending every node's heartbeat each second.
//!
//! The load ([`traffic`]): UDP and TCP queries with ECS to both NS hosts every
//! 20 ms, DoT to `ns2` every 250 ms, each answer checked against the oracle —
//! the answers the table gave each probe subnet before the first fault (no
//! fault may change them: none removes a node or writes a rule). A monitor
//! reads the leader's table twice a second and counts nodes missing from it.
//!
//! The faults ([`faults`]), one at a time, each healed before the next:
//! PostgreSQL read-only, PostgreSQL killed and restarted, the leader
//! SIGSTOPped (paused, not dead), `ns1` cut from the control plane by iptables
//! inside its namespace, `ns2`'s wall clock stepped by +1 h then −1 h, a
//! forged table with a huge epoch from the man in the middle, thousands of
//! idle HTTP/2 connections on the edge, and a flood of spoofed DoQ Initials.
//! After each, recovery is the time until a leader confirms both NS hosts on
//! its current table with every node in it.
//!
//! `cargo xtask chaos` runs the full profile ([`Profile::full`], the
//! ignored test `chaos_full`) and writes `target/chaos/latest.md`; the short
//! profile runs with the other end-to-end tests.

mod cluster;
mod faults;
mod flood;
mod mitm;
mod report;
mod traffic;

use std::time::Duration;

use crate::support::have_tool;

/// How hard and how long each fault is.
#[derive(Debug, Clone, Copy)]
pub struct Profile {
    /// How long each fault lasts (the leader's pause has its own).
    pub fault: Duration,
    /// How long the leader stays SIGSTOPped.
    pub pause: Duration,
    /// Idle HTTP/2 connections opened on the edge.
    pub idle_conns: usize,
    /// Spoofed QUIC Initials sent to `ns2`'s DoQ listener.
    pub initials: usize,
    /// How long a fault may take to recover from before it counts as not recovered.
    pub recovery_limit: Duration,
}

impl Profile {
    /// What `cargo xtask chaos` runs.
    pub fn full() -> Profile {
        Profile {
            fault: Duration::from_secs(60),
            pause: Duration::from_secs(30),
            idle_conns: 10_000,
            initials: 20_000,
            recovery_limit: Duration::from_secs(120),
        }
    }

    /// What runs with the end-to-end tests: every fault, each for a few
    /// heartbeat timeouts (the topology's timeout is 3 s).
    pub fn short() -> Profile {
        Profile {
            fault: Duration::from_secs(10),
            pause: Duration::from_secs(10),
            idle_conns: 2_000,
            initials: 2_000,
            recovery_limit: Duration::from_secs(60),
        }
    }
}

fn tools_present(test: &str) -> bool {
    ["dig", "kdig", "ip", "iptables", "faketime", "curl", "psql"].into_iter().all(|t| have_tool(t, test))
}

fn run(profile: Profile, test: &str) {
    if !tools_present(test) {
        return;
    }
    let Some(python) = crate::support::doq_python(test) else { return };
    let rows = faults::run_all(profile, &python);
    let table = report::render(&rows);
    eprintln!("\n{table}");
    report::save(&table);
    let failures = report::failures(&rows);
    assert!(failures.is_empty(), "chaos: {}\n{table}", failures.join("\n"));
}

#[test]
fn chaos_short() {
    run(Profile::short(), "chaos_short");
}

/// The full profile (several minutes): `cargo xtask chaos`.
#[test]
#[ignore = "long: run by `cargo xtask chaos`"]
fn chaos_full() {
    run(Profile::full(), "chaos_full");
}
