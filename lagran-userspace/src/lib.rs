//! Lagran: an authoritative GeoDNS for CDNs.
//!
//! Layers, each depending only on the ones above it:
//! - [`model`], [`settings`]: plain data.
//! - [`geo`]: ip2region xdb and other geo files, name canonicalisation.
//! - [`prefix_map`], [`engine`]: the pure parts (CIDR maps, node ranking).
//! - [`route_table`]: immutable, versioned answers per (name, client prefix).
//! - [`store`]: persistence (SQLite or PostgreSQL through sqlx).
//! - [`dns`]: the authoritative responder.
//! - [`config`]: the configuration, put together from each subsystem's settings.

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
pub mod daemon;
pub mod demo;
pub mod dns;
pub mod engine;
pub mod entry;
pub mod geo;
pub mod health;
pub mod listener;
pub mod location;
pub mod metrics;
pub mod model;
pub mod nshost;
pub mod nshost_reload;
pub mod partition;
pub mod prefix_map;
pub mod redirect;
pub mod route_table;
pub mod scheduler;
pub mod settings;
pub mod store;
pub mod supervisor;
pub mod table_stream;
/// Test helpers (a throwaway PostgreSQL); only in test builds and behind the
/// `testkit` feature, so production binaries do not carry them.
#[cfg(any(test, feature = "testkit"))]
pub mod testkit;
pub mod wakeup_slice;
pub mod xdp;

#[cfg(test)]
mod real_data_tests;
