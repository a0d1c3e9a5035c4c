//! Lagran: an authoritative GeoDNS for CDNs.
//!
//! Modules import only downward, from the binaries' wiring to plain values
//! (`cargo xtask house` fails on an import cycle). From the top:
//! - [`daemon`], [`cli`], [`nshost`], [`entry`]: the roles and commands, wired together.
//! - [`api`], [`console`], [`cluster`], [`xdp`], [`config`]: the control API,
//!   the operator console, leadership, the kernel side and the composed configuration.
//! - [`scheduler`], [`redirect`], [`metrics`]: the route-table service, the HTTP 302
//!   entry point, Prometheus text.
//! - [`dns`], [`engine`], [`partition`], [`table_stream`]: the responder, the pure
//!   ranking, the partition cut, the route-table stream's wire form.
//! - [`store`], [`geo`], [`health`], [`fail_static`], [`route_table`], [`control_tls`]: persistence,
//!   geo file readers, probes and liveness, what keeps nodes in the answers when the
//!   store fails, immutable versioned answers, TLS settings.
//! - [`model`], [`location`], [`settings`], [`prefix_map`], [`clock`], [`answered`]: plain values
//!   (the last: the client prefixes answered, counted and sampled).
//!
//! `docs/architecture.md` walks a query, a PATCH and a heartbeat through these files.

pub mod acme;
pub mod answered;
pub mod api;
pub mod api_client;
pub mod background;
pub mod cli;
pub mod clock;
pub mod cluster;
pub mod config;
pub mod confirmation;
pub mod console;
pub mod control_tls;
pub mod control_url;
pub mod daemon;
pub mod declared_zones;
pub mod demo;
pub mod dns;
pub mod dnssec;
pub mod dnstap;
pub mod engine;
pub mod entry;
pub mod fail_static;
pub mod geo;
pub mod geo_age;
pub mod health;
pub mod listener;
pub mod location;
pub mod metrics;
pub mod model;
pub mod ns_reports;
pub mod nshost;
pub mod nshost_reload;
pub mod partition;
pub mod prefix_map;
pub mod redirect;
pub mod route_table;
pub mod scheduler;
pub mod settings;
pub mod signature_expiry;
pub mod steering;
pub mod store;
pub mod supervisor;
pub mod table_stream;
/// Test helpers (a throwaway PostgreSQL); only in test builds and behind the
/// `testkit` feature, so production binaries do not carry them.
#[cfg(any(test, feature = "testkit"))]
pub mod testkit;
pub mod wakeup_slice;
pub mod world_fleet;
pub mod xdp;
pub mod zone_signatures;

#[cfg(test)]
mod real_data_tests;
#[cfg(test)]
mod real_data_world_tests;
