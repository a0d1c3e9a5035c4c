//! Geo data: where a client address is and which carrier it uses.
//!
//! - [`xdb`]: reader for ip2region `.xdb` files (IPv4 and IPv6), [`xdb_writer`]: the
//!   project's own writer (test data, `lagran geo build`).
//! - [`location`]: the canonical (country, province, city, ISP) tuple and the
//!   canonicalisation of names from files, node records and API overrides.
//! - [`reserved`]: special-purpose ranges that are never looked up (SPEC §3).
//! - [`GeoDb`]: the optional IPv4 and IPv6 databases a daemon runs with. A missing or
//!   unreadable file is not fatal (SPEC §5): that family is scheduled by weight and load.

mod aliases;
mod error;
pub mod location;
pub mod reserved;
pub mod xdb;
pub mod xdb_writer;

use std::net::IpAddr;
use std::path::Path;

pub use error::GeoError;
pub use location::{
    Location, canonical_city, canonical_country, canonical_isp, canonical_province,
};
pub use reserved::{is_special, special_ranges_v4, special_ranges_v6};
pub use xdb::{IpVersion, Segment, Xdb};
pub use xdb_writer::{write_xdb, write_xdb_at};

/// The result of a geo lookup.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct GeoHit {
    /// The canonical location parsed from the region string.
    pub location: Location,
    /// The raw region string from the file.
    pub region: String,
    /// First address of the matched segment, inclusive, in the family that was
    /// searched (an IPv4-mapped IPv6 query is answered from the IPv4 file, so this
    /// is then an IPv4 value below 2^32).
    pub start: u128,
    /// Last address of the matched segment, inclusive.
    pub end: u128,
}

/// The geo databases in use: an optional IPv4 and an optional IPv6 xdb.
#[derive(Debug, Default)]
pub struct GeoDb {
    v4: Option<Xdb>,
    v6: Option<Xdb>,
}

impl GeoDb {
    /// No databases: every lookup misses.
    pub fn empty() -> GeoDb {
        GeoDb::default()
    }

    /// Loads the given files. A missing or unreadable file, or a file of the other
    /// address family, is logged with `tracing::warn!` (naming the path and the error)
    /// and leaves that family without a database; it never fails the caller.
    pub fn load(v4: Option<&Path>, v6: Option<&Path>) -> GeoDb {
        GeoDb {
            v4: v4.and_then(|p| load_one(p, IpVersion::V4)),
            v6: v6.and_then(|p| load_one(p, IpVersion::V6)),
        }
    }

    /// Uses already loaded databases. An xdb of the wrong family in a slot is
    /// dropped with a warning.
    pub fn from_xdbs(v4: Option<Xdb>, v6: Option<Xdb>) -> GeoDb {
        let check = |x: Option<Xdb>, want: IpVersion| {
            x.filter(|x| {
                let ok = x.ip_version() == want;
                if !ok {
                    tracing::warn!(
                        expected = %want,
                        found = %x.ip_version(),
                        "geo database of the wrong address family ignored"
                    );
                }
                ok
            })
        };
        GeoDb {
            v4: check(v4, IpVersion::V4),
            v6: check(v6, IpVersion::V6),
        }
    }

    /// The IPv4 database, if loaded.
    pub fn v4(&self) -> Option<&Xdb> {
        self.v4.as_ref()
    }

    /// The IPv6 database, if loaded.
    pub fn v6(&self) -> Option<&Xdb> {
        self.v6.as_ref()
    }

    /// Looks up a client address. Special-purpose addresses (private, loopback,
    /// documentation, …; see [`reserved`]) give `None` without touching the files;
    /// IPv4-mapped IPv6 addresses are looked up as IPv4. `None` also when the family
    /// has no database or the address is in no segment.
    pub fn lookup(&self, ip: IpAddr) -> Option<GeoHit> {
        let ip = match ip {
            IpAddr::V6(v6) => v6.to_ipv4_mapped().map_or(ip, IpAddr::V4),
            v4 => v4,
        };
        if is_special(ip) {
            return None;
        }
        let db = match ip {
            IpAddr::V4(_) => self.v4.as_ref()?,
            IpAddr::V6(_) => self.v6.as_ref()?,
        };
        let seg = db.search(ip)?;
        Some(GeoHit {
            location: Location::from_region(seg.region),
            region: seg.region.to_string(),
            start: seg.start,
            end: seg.end,
        })
    }
}

fn load_one(path: &Path, want: IpVersion) -> Option<Xdb> {
    match Xdb::open(path) {
        Ok(x) if x.ip_version() == want => {
            tracing::info!(
                path = %path.display(),
                family = %want,
                segments = x.len(),
                created_at = x.created_at(),
                "geo database loaded"
            );
            Some(x)
        }
        Ok(x) => {
            tracing::warn!(
                path = %path.display(),
                expected = %want,
                found = %x.ip_version(),
                "geo database is of the wrong address family; scheduling {want} clients by weight and load"
            );
            None
        }
        Err(err) => {
            tracing::warn!(
                path = %path.display(),
                error = %err,
                "geo database not loaded; scheduling {want} clients by weight and load"
            );
            None
        }
    }
}

#[cfg(test)]
mod tests;
