//! End-to-end tests: the real `lagran` binary, real `dig`, real HTTP, real
//! SQLite and PostgreSQL. Each test starts its own daemon on free ports.

mod aaaa;
mod acme;
mod api;
mod asn_carriers;
mod chaos;
mod cleartext;
mod cli;
mod cname;
mod console;
mod delay_line;
mod dns;
mod dnssec;
mod dnssec_rollover;
mod dnstap;
mod edge_config;
mod entry;
mod fail_static;
mod geo;
mod hostile;
mod monitor;
mod nshost;
mod postgres;
mod privileges;
mod publish;
mod purge;
mod real_geo;
mod rum;
mod scheduling;
mod steering;
mod steering_netem;
mod support;
mod topology;
mod unlocated;
mod world_geo;
mod xdp;
