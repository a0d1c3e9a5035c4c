//! The CDN site schema: what one customer host served by the edge nodes is
//! (host pattern, origin, cache TTL, WAF lists, rate limit, hotlink rule), and
//! the one set of rules a site must satisfy.
//!
//! Two programs read it. The control plane (`lagran`) stores sites and serves
//! them as JSON at `/api/v1/sites`; the edge (`lagran-edge`) reads them from
//! that API and from the `[[site]]` tables of its TOML file. Both use
//! [`Site`] for the shared keys and [`Site::validate`] for the shared rules, so
//! whatever the control plane accepts the edge accepts too. What only one side
//! needs (the store's timestamps, the edge's certificate file paths and
//! compiled matchers) wraps this type on that side.

mod origin;
mod site;
mod validate;

pub use origin::{OriginError, OriginUrl};
pub use site::{DEFAULT_CACHE_TTL_SECS, Site};
pub use validate::{SiteError, valid_host_pattern};
