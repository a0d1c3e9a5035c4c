//! The operator commands: thin clients of the control API, and file tools.
//!
//! - [`geo`]: `lagran geo …` (file tools: lookup, build, diff, partitions; API
//!   commands: override, reload) and [`geo_client`], its view of the API;
//!   [`geo_carriers`]: the API's ASN → carrier entries for `geo lookup`.
//! - [`explain`]: `lagran explain`, the full ranked decision, readable.
//! - [`monitor`]: `lagran monitor`, each NS host's table version and lag;
//!   [`monitor_service`]: the same as a service exporting `lagran_monitor_*`.
//! - [`ops`]: `lagran node|rule|line|routes …`.
//! - [`dnssec`]: `lagran dnssec status`, from the control plane's key directory.

pub mod dnssec;
pub mod explain;
pub mod geo;
pub mod geo_carriers;
pub mod geo_client;
pub mod monitor;
pub mod monitor_service;
pub mod ops;
