//! End-to-end tests: the real `lagran` binary, real `dig`, real HTTP, real
//! SQLite and PostgreSQL. Each test starts its own daemon on free ports.

mod aaaa;
mod api;
mod cli;
mod cname;
mod console;
mod dns;
mod edge_config;
mod entry;
mod geo;
mod hostile;
mod nshost;
mod postgres;
mod publish;
mod real_geo;
mod scheduling;
mod steering;
mod support;
mod topology;
mod unlocated;
mod xdp;
