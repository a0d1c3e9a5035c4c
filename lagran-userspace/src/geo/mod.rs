//! Geo data: where a client address is and which carrier it uses.
//!
//! - [`xdb`]: reader for ip2region `.xdb` files (IPv4 and IPv6), [`xdb_writer`]: the
//!   project's own writer (test data, `lagran geo build`).
//! - [`formats`]: every other geo file format (V2Ray `geoip.dat`, CIDR CSV
//!   and JSON, ip2region source text), converted to ranges and built into xdb, so
//!   the daemon only ever looks up xdb.
//! - [`world`]: MaxMind DB City and ASN data and the ASN → carrier mapping, merged
//!   with the ip2region file per address (ip2region for Chinese carriers' networks,
//!   MaxMind elsewhere) into the same in-memory xdb.
//! - [`reserved`]: special-purpose ranges (private, loopback, CGNAT, documentation,
//!   …) that are never looked up: they fall into the "unknown" partition.
//! - [`diff`]: what changes between two geo data sets (`lagran geo diff`, reload).
//! - [`reload`]: replacing the serving data without a restart, refused above a change
//!   ratio of sampled addresses that change partition; SIGHUP and
//!   `POST /api/v1/geo/reload`.
//! - [`bench`]: the lookup timing helper for `cargo xtask bench`.
//! - [`settings`]: the `[geo]` table of the configuration.
//! - [`cli`]: `lagran geo …`; [`client`]: its tiny HTTP client for the daemon's API.
//! - [`GeoDb`]: the optional IPv4 and IPv6 databases a daemon runs with. A missing or
//!   unreadable file is not fatal (it is logged): that family is scheduled by weight
//!   and load.

pub mod bench;
mod error;
pub mod formats;
pub mod reserved;
pub mod settings;
pub mod world;
pub mod xdb;
pub mod xdb_writer;

use std::collections::BTreeMap;
use std::net::IpAddr;
use std::path::{Path, PathBuf};

use crate::location::Location;
pub use error::{GeoError, Position};
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

/// The geo databases in use: an optional IPv4 and an optional IPv6 xdb, and the
/// files they were configured from (a reload reads the same paths again).
#[derive(Debug, Default)]
pub struct GeoDb {
    v4: Option<Xdb>,
    v6: Option<Xdb>,
    sources: Sources,
}

/// The configured geo file paths (GEOIP_PATH, GEOIP_IPV6_PATH, GEOIP_MMDB_PATH,
/// GEOIP_ASN_PATH) and the operator's ASN → carrier entries, whether or not the
/// files could be read.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Sources {
    /// GEOIP_PATH.
    pub v4: Option<PathBuf>,
    /// GEOIP_IPV6_PATH.
    pub v6: Option<PathBuf>,
    /// GEOIP_MMDB_PATH: MaxMind DB files (City, or ASN).
    pub mmdb: Vec<PathBuf>,
    /// GEOIP_ASN_PATH: ASN MaxMind DBs or CSV ranges.
    pub asn: Vec<PathBuf>,
    /// `[geo.asn_carriers]`: laid over the built-in table.
    pub asn_carriers: BTreeMap<u32, String>,
    /// The entries written through the API (`/api/v1/geo/asn-carriers`), read
    /// from the store at each load: laid over `asn_carriers`.
    pub asn_carriers_api: BTreeMap<u32, String>,
}

impl Sources {
    /// The paths and mapping of the `[geo]` settings.
    pub fn of_settings(s: &settings::GeoSettings) -> Sources {
        Sources {
            v4: s.ipv4_path.clone(),
            v6: s.ipv6_path.clone(),
            mmdb: s.mmdb_path.clone(),
            asn: s.asn_path.clone(),
            asn_carriers: s.asn_carriers(),
            asn_carriers_api: BTreeMap::new(),
        }
    }

    /// The operator's carrier entries in force: the API's over `[geo.asn_carriers]`
    /// (both over the built-in table, see [`world::AsnCarriers::new`]).
    pub fn operator_carriers(&self) -> BTreeMap<u32, String> {
        let mut m = self.asn_carriers.clone();
        m.extend(self.asn_carriers_api.iter().map(|(a, c)| (*a, c.clone())));
        m
    }

    /// These sources with `file` (a world data file of `kind`) in place of the
    /// configured file of the same name, or added: the data a new version of one
    /// file gives (`lagran geo diff`).
    pub fn with_world_file(&self, file: &Path, kind: world::WorldFile) -> Sources {
        let mut s = self.clone();
        let list = match kind {
            world::WorldFile::Mmdb => &mut s.mmdb,
            world::WorldFile::AsnCsv => &mut s.asn,
        };
        match list.iter_mut().find(|p| p.file_name() == file.file_name()) {
            Some(p) => *p = file.to_path_buf(),
            None => list.push(file.to_path_buf()),
        }
        s
    }

    /// Whether MaxMind or ASN data is configured beside the ip2region files.
    pub fn has_world(&self) -> bool {
        !self.mmdb.is_empty() || !self.asn.is_empty()
    }
}

impl GeoDb {
    /// No databases: every lookup misses.
    pub fn empty() -> GeoDb {
        GeoDb::default()
    }

    /// Loads the given files, any format (the reader is picked by extension, else by
    /// content: see [`formats`]). A missing or unreadable file, or a file without data
    /// of the family, is logged with `tracing::warn!` (naming the path and the error)
    /// and leaves that family without a database; it never fails the caller.
    ///
    /// Families: the IPv4 database is the IPv4 part of `v4`; the IPv6 database is the
    /// IPv6 part of `v6`, or, when `v6` is not given, the IPv6 part of `v4` (so one
    /// `geoip.dat` or CIDR file serves both families).
    pub fn load(v4: Option<&Path>, v6: Option<&Path>) -> GeoDb {
        let read = |p: &Path| match formats::read_file(p) {
            Ok(f) => {
                log_skipped(p, &f);
                Some(f)
            }
            Err(err) => {
                tracing::warn!(
                    path = %p.display(),
                    error = %err,
                    "geo database not loaded; scheduling its clients by weight and load"
                );
                None
            }
        };
        let mut f4 = v4.and_then(read);
        let mut f6 = v6.and_then(read);
        let v4_db = f4.as_mut().and_then(|f| f.take(IpVersion::V4));
        let v6_db = match (&mut f6, &mut f4) {
            (Some(f), _) => f.take(IpVersion::V6),
            (None, Some(f)) if v6.is_none() => f.take(IpVersion::V6),
            _ => None,
        };
        if let (Some(p), Some(_), None) = (v4, &f4, &v4_db) {
            tracing::warn!(path = %p.display(), "geo file has no IPv4 ranges; scheduling IPv4 clients by weight and load");
        }
        if let (Some(p), Some(_), None) = (v6, &f6, &v6_db) {
            tracing::warn!(path = %p.display(), "geo file has no IPv6 ranges; scheduling IPv6 clients by weight and load");
        }
        let db = GeoDb {
            v4: v4_db,
            v6: v6_db,
            sources: Sources { v4: v4.map(Path::to_path_buf), v6: v6.map(Path::to_path_buf), ..Sources::default() },
        };
        db.log_loaded();
        db
    }

    /// Like [`load`](Self::load), but every problem is an error: a given file that
    /// cannot be read or parsed, or that has no range of its family (the v6 file may
    /// be absent, see the family rule of `load`). For reloads, where a bad file must
    /// not replace the serving data.
    pub fn try_load(v4: Option<&Path>, v6: Option<&Path>) -> Result<GeoDb, GeoError> {
        let read = |p: &Path| {
            let f = formats::read_file(p)?;
            log_skipped(p, &f);
            Ok::<_, GeoError>(f)
        };
        let mut f4 = v4.map(read).transpose()?;
        let mut f6 = v6.map(read).transpose()?;
        let v4_db = match (v4, f4.as_mut()) {
            (Some(p), Some(f)) => Some(
                f.take(IpVersion::V4)
                    .ok_or_else(|| GeoError::NoData { path: p.to_path_buf(), family: IpVersion::V4 })?,
            ),
            _ => None,
        };
        let v6_db = match (v6, f6.as_mut(), f4.as_mut()) {
            (Some(p), Some(f), _) => Some(
                f.take(IpVersion::V6)
                    .ok_or_else(|| GeoError::NoData { path: p.to_path_buf(), family: IpVersion::V6 })?,
            ),
            (None, _, Some(f)) => f.take(IpVersion::V6),
            _ => None,
        };
        let db = GeoDb {
            v4: v4_db,
            v6: v6_db,
            sources: Sources { v4: v4.map(Path::to_path_buf), v6: v6.map(Path::to_path_buf), ..Sources::default() },
        };
        db.log_loaded();
        Ok(db)
    }

    /// Loads everything `sources` names, leniently as [`load`](Self::load): the
    /// ip2region files, then the MaxMind and ASN data merged over them (see
    /// [`world`]). World data that cannot be read is logged and left out.
    pub fn load_sources(sources: &Sources) -> GeoDb {
        let base = GeoDb::load(sources.v4.as_deref(), sources.v6.as_deref());
        if !sources.has_world() {
            return base.with_sources(sources.clone());
        }
        match base.merged_with(sources) {
            Ok(db) => db,
            Err(err) => {
                tracing::warn!(error = %err, "MaxMind / ASN data not loaded; locating clients with the ip2region data alone");
                base.with_sources(sources.clone())
            }
        }
    }

    /// Loads everything `sources` names, strictly as [`try_load`](Self::try_load):
    /// any file that cannot be read or parsed is an error.
    pub fn try_load_sources(sources: &Sources) -> Result<GeoDb, GeoError> {
        let base = GeoDb::try_load(sources.v4.as_deref(), sources.v6.as_deref())?;
        if !sources.has_world() {
            return Ok(base.with_sources(sources.clone()));
        }
        base.merged_with(sources)
    }

    /// This (ip2region) data with the world data of `sources` merged over it.
    fn merged_with(&self, sources: &Sources) -> Result<GeoDb, GeoError> {
        let world = world::WorldData::load(&sources.mmdb, &sources.asn)?;
        let carriers = world::AsnCarriers::new(&sources.operator_carriers());
        let v4 = world::merged_xdb(self.v4.as_ref(), &world, &carriers, false)?;
        let v6 = world::merged_xdb(self.v6.as_ref(), &world, &carriers, true)?;
        let db = GeoDb { v4, v6, sources: sources.clone() };
        tracing::info!(
            mmdb = ?sources.mmdb,
            asn = ?sources.asn,
            v4_segments = db.v4.as_ref().map_or(0, Xdb::len),
            v6_segments = db.v6.as_ref().map_or(0, Xdb::len),
            "MaxMind / ASN data merged with the ip2region data"
        );
        Ok(db)
    }

    fn log_loaded(&self) {
        let v6_path = self.sources.v6.as_ref().or(self.sources.v4.as_ref());
        for (x, path) in [(self.v4.as_ref(), self.sources.v4.as_ref()), (self.v6.as_ref(), v6_path)] {
            let Some(x) = x else { continue };
            tracing::info!(
                path = %path.map_or_else(|| "-".to_string(), |p| p.display().to_string()),
                family = %x.ip_version(),
                segments = x.len(),
                created_at = x.created_at(),
                "geo database loaded"
            );
        }
    }

    /// The configured paths this data was loaded from (empty for [`from_xdbs`](Self::from_xdbs)).
    pub fn sources(&self) -> &Sources {
        &self.sources
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
        GeoDb { v4: check(v4, IpVersion::V4), v6: check(v6, IpVersion::V6), sources: Sources::default() }
    }

    /// The same data, recorded as loaded from `sources` (so a reload reads them).
    pub fn with_sources(mut self, sources: Sources) -> GeoDb {
        self.sources = sources;
        self
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
        self.stored(ip)
    }

    /// What the file stores for `ip`, special-purpose ranges included (the real
    /// file stores e.g. `0|0|0|内网IP|内网IP` for them): for `geo lookup --raw`,
    /// never for scheduling. IPv4-mapped IPv6 addresses are looked up as IPv4.
    pub fn stored(&self, ip: IpAddr) -> Option<GeoHit> {
        let ip = match ip {
            IpAddr::V6(v6) => v6.to_ipv4_mapped().map_or(ip, IpAddr::V4),
            v4 => v4,
        };
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

/// Logs what a reader left out (e.g. the non-country lists of a `geoip.dat`).
fn log_skipped(path: &Path, f: &formats::GeoFile) {
    if !f.stats.skipped.is_empty() {
        tracing::info!(
            path = %path.display(),
            format = %f.format,
            lists = f.stats.skipped.len(),
            skipped = ?f.stats.skipped,
            "geo file: records not used"
        );
    }
}

#[cfg(test)]
mod tests;
