//! End-to-end tests: the real `lagran` binary, real `dig`, real HTTP, real
//! SQLite and PostgreSQL. Each test starts its own daemon on free ports.

mod api;
mod cli;
mod dns;
mod geo;
mod hostile;
mod nshost;
mod postgres;
mod real_geo;
mod scheduling;
mod support;
mod xdp;
