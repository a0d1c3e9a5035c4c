//! The world beside ip2region: MaxMind DB City data ([`mmdb`]), ASN data ([`asn`],
//! or an ASN MMDB) and the ASN → carrier mapping ([`carriers`]), merged with the
//! ip2region file into one range list per family, built into an in-memory xdb. So the
//! partitions, their ECS scopes, the route tables, the reload's change gate and
//! `lagran geo diff` all see one seamless data set: an address gets one answer
//! whichever source located it, and a scope never spans two sources' verdicts.
//!
//! Precedence per address (overrides are laid on later, by the partitions):
//! 1. ip2region, where it places the address in mainland China, Hong Kong, Macao or
//!    Taiwan with a carrier (its carrier-level data is the better one there): its
//!    region string as is.
//! 2. Otherwise the MaxMind City data (country, region, city, coordinates), with the
//!    carrier from the ASN data (the mapping's carrier, else the organisation name);
//!    where the City data has no record, ip2region's place with the ASN carrier.
//! 3. Otherwise ip2region's region string as is; otherwise no data.
//!
//! Merged rows are written in the 7-field layout `Country|Province|City|ISP|ISO|
//! lat,lon|sources` (see [`Location::from_region`] and [`sources`]).
//!
//! [`sources`]: crate::location::sources
//! [`Location::from_region`]: crate::location::Location::from_region

pub mod asn;
pub mod carriers;
pub mod mmdb;
pub mod table;

use std::collections::HashMap;
use std::path::PathBuf;

pub use carriers::{AsnCarriers, parse_asn};
pub use table::RangeTable;

use super::{GeoError, Xdb};
use crate::location::{Coords, Location, sources};

/// A place as a City database gives it (names as in the file, trimmed).
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct CityRecord {
    /// ISO country code (or as given).
    pub country: String,
    pub province: String,
    pub city: String,
    pub coords: Option<Coords>,
}

impl CityRecord {
    pub fn new(country: &str, province: &str, city: &str, coords: Option<Coords>) -> CityRecord {
        let clean = |s: &str| s.trim().replace(['|', ','], " ");
        CityRecord { country: clean(country), province: clean(province), city: clean(city), coords }
    }
}

/// An autonomous system as the ASN data gives it.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct AsnRecord {
    pub asn: u32,
    pub organisation: String,
}

/// The MaxMind City and ASN data a daemon runs with.
#[derive(Debug, Default)]
pub struct WorldData {
    pub city: RangeTable<CityRecord>,
    pub asn: RangeTable<AsnRecord>,
}

impl WorldData {
    /// Reads every file; a later file of a kind wins where it overlaps an earlier one.
    /// `mmdb` files are City or ASN MaxMind DBs (told apart by their records);
    /// `asn` files are ASN MaxMind DBs or CSV ranges (told apart by content).
    pub fn load(mmdb_paths: &[PathBuf], asn_paths: &[PathBuf]) -> Result<WorldData, GeoError> {
        let mut w = WorldData::default();
        for p in mmdb_paths.iter().chain(asn_paths) {
            let bytes = std::fs::read(p).map_err(|source| GeoError::Io { path: p.clone(), source })?;
            let in_file = |e: GeoError| GeoError::InFile { path: p.clone(), source: Box::new(e) };
            if mmdb::is_mmdb(&bytes) {
                match mmdb::from_bytes(bytes).map_err(in_file)? {
                    mmdb::MmdbData::City(t) => w.city.extend(t),
                    mmdb::MmdbData::Asn(t) => w.asn.extend(t),
                }
            } else if asn_paths.contains(p) {
                let text = String::from_utf8(bytes).map_err(|e| {
                    in_file(GeoError::Mmdb { reason: format!("neither a MaxMind DB nor UTF-8 CSV text: {e}") })
                })?;
                w.asn.extend(asn::parse(&text).map_err(in_file)?);
            } else {
                return Err(in_file(GeoError::Mmdb { reason: "no MaxMind DB metadata marker".into() }));
            }
        }
        Ok(w)
    }

    /// Whether no file gave any range.
    pub fn is_empty(&self) -> bool {
        self.city.v4.is_empty() && self.city.v6.is_empty() && self.asn.v4.is_empty() && self.asn.v6.is_empty()
    }
}

/// The kind of a world data file.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum WorldFile {
    /// A MaxMind DB (City or ASN): belongs in GEOIP_MMDB_PATH.
    Mmdb,
    /// ASN CSV ranges: belongs in GEOIP_ASN_PATH.
    AsnCsv,
}

/// Whether `bytes` are a world data file, and which: a MaxMind DB by its metadata
/// marker, ASN CSV by a first data line `start,end,asn,…` whose start is an address
/// or integer (a CIDR CSV geo file starts with a prefix, `a.b.c.d/n`).
pub fn world_file_kind(bytes: &[u8]) -> Option<WorldFile> {
    if mmdb::is_mmdb(bytes) {
        return Some(WorldFile::Mmdb);
    }
    let head = std::str::from_utf8(&bytes[..bytes.len().min(4096)]).ok().or_else(|| {
        let cut = std::str::from_utf8(&bytes[..bytes.len().min(4096)]).err()?.valid_up_to();
        std::str::from_utf8(&bytes[..cut]).ok()
    })?;
    let line =
        head.lines().map(str::trim).filter(|l| !l.is_empty() && !l.starts_with('#')).find(|l| {
            l.split(',').nth(2).is_some_and(|asn| asn.trim().trim_start_matches("AS").parse::<u32>().is_ok())
        })?;
    let start = line.split(',').next()?.trim();
    let is_addr = start.parse::<u128>().is_ok() || start.parse::<std::net::IpAddr>().is_ok();
    is_addr.then_some(WorldFile::AsnCsv)
}

/// A cursor over one sorted, non-overlapping range list.
struct Cursor<'a> {
    ranges: &'a [(u128, u128, u32)],
    i: usize,
}

impl Cursor<'_> {
    /// The value covering `pos` and the first address after `pos` where that can
    /// change (`None`: the end of the space).
    fn at(&mut self, pos: u128) -> (Option<u32>, Option<u128>) {
        while self.i < self.ranges.len() && self.ranges[self.i].1 < pos {
            self.i += 1;
        }
        match self.ranges.get(self.i) {
            None => (None, None),
            Some(&(s, _, _)) if s > pos => (None, Some(s)),
            Some(&(_, e, v)) => (Some(v), e.checked_add(1)),
        }
    }
}

/// The merged ranges of one family (module docs), adjacent equal regions joined.
pub fn merge(
    ip2region: Option<&Xdb>,
    world: &WorldData,
    carriers: &AsnCarriers,
    v6: bool,
) -> Vec<(u128, u128, String)> {
    let mut regions: Vec<&str> = Vec::new();
    let mut region_ids: HashMap<&str, u32> = HashMap::new();
    let base: Vec<(u128, u128, u32)> = ip2region
        .map(|x| {
            x.segments()
                .map(|s| {
                    let id = *region_ids.entry(s.region).or_insert_with(|| {
                        regions.push(s.region);
                        (regions.len() - 1) as u32
                    });
                    (s.start, s.end, id)
                })
                .collect()
        })
        .unwrap_or_default();
    let max = if v6 { u128::MAX } else { u128::from(u32::MAX) };
    let mut cursors = [
        Cursor { ranges: &base, i: 0 },
        Cursor { ranges: world.city.family(v6), i: 0 },
        Cursor { ranges: world.asn.family(v6), i: 0 },
    ];
    let mut decided: HashMap<[Option<u32>; 3], Option<u32>> = HashMap::new();
    let mut out_strings: Vec<String> = Vec::new();
    let mut out: Vec<(u128, u128, u32)> = Vec::new();
    let mut pos: u128 = 0;
    loop {
        let mut key = [None; 3];
        let mut next: Option<u128> = None;
        for (k, c) in key.iter_mut().zip(cursors.iter_mut()) {
            let (v, n) = c.at(pos);
            *k = v;
            next = match (next, n) {
                (Some(a), Some(b)) => Some(a.min(b)),
                (a, b) => a.or(b),
            };
        }
        let end = next.map_or(max, |n| n - 1).min(max);
        let id = *decided.entry(key).or_insert_with(|| {
            let ip2r = key[0].map(|i| regions[i as usize]);
            let city = key[1].map(|i| &world.city.values[i as usize]);
            let asn = key[2].map(|i| &world.asn.values[i as usize]);
            decide(ip2r, city, asn, carriers).map(|r| {
                out_strings.push(r);
                (out_strings.len() - 1) as u32
            })
        });
        if let Some(id) = id {
            match out.last_mut() {
                Some(last) if last.2 == id && last.1 + 1 == pos => last.1 = end,
                _ => out.push((pos, end, id)),
            }
        }
        match next {
            Some(n) if n <= max && end < max => pos = n,
            _ => break,
        }
    }
    out.into_iter().map(|(s, e, id)| (s, e, out_strings[id as usize].clone())).collect()
}

/// Whether ip2region's verdict wins (precedence rule 1).
fn ip2region_wins(loc: &Location) -> bool {
    matches!(loc.country.as_str(), "CN" | "HK" | "MO" | "TW") && !loc.isp.is_empty()
}

/// The region string of one elementary range (module docs).
fn decide(
    ip2r: Option<&str>,
    city: Option<&CityRecord>,
    asn: Option<&AsnRecord>,
    carriers: &AsnCarriers,
) -> Option<String> {
    let ip2r_loc = ip2r.map(Location::from_region);
    if let (Some(raw), Some(loc)) = (ip2r, &ip2r_loc)
        && (ip2region_wins(loc) || (city.is_none() && asn.is_none()))
    {
        return Some(raw.to_string());
    }
    let (place, place_src) = match (city, &ip2r_loc) {
        (Some(c), _) => ((c.country.clone(), c.province.clone(), c.city.clone(), c.coords), sources::MMDB),
        (None, Some(l)) => ((l.country.clone(), l.province.clone(), l.city.clone(), l.coords), sources::IP2REGION),
        (None, None) => ((String::new(), String::new(), String::new(), None), ""),
    };
    let (isp, isp_src) = match asn {
        Some(a) => match carriers.get(a.asn) {
            Some(c) => (c.to_string(), sources::ASN_CARRIERS),
            None if !a.organisation.is_empty() => (a.organisation.replace(['|', ','], " "), sources::ASN),
            None => (format!("AS{}", a.asn), sources::ASN),
        },
        None => match &ip2r_loc {
            Some(l) if !l.isp.is_empty() => (l.isp.clone(), sources::IP2REGION),
            _ => (String::new(), ""),
        },
    };
    let (country, province, city_name, coords) = place;
    if country.is_empty() && province.is_empty() && city_name.is_empty() && isp.is_empty() {
        return None;
    }
    let mut named = Vec::with_capacity(5);
    for (key, value) in [("country", &country), ("province", &province), ("city", &city_name)] {
        if !value.is_empty() {
            named.push(format!("{key}={place_src}"));
        }
    }
    if coords.is_some() {
        named.push(format!("coords={place_src}"));
    }
    if !isp.is_empty() {
        named.push(format!("isp={isp_src}"));
    }
    let coords = coords.map(|c| c.to_string()).unwrap_or_default();
    Some(format!("{country}|{province}|{city_name}|{isp}|{country}|{coords}|{}", named.join(",")))
}

/// The merged xdb of one family (see [`merge`]); `None` when nothing covers it.
pub fn merged_xdb(
    ip2region: Option<&Xdb>,
    world: &WorldData,
    carriers: &AsnCarriers,
    v6: bool,
) -> Result<Option<Xdb>, GeoError> {
    let ranges = merge(ip2region, world, carriers, v6);
    if ranges.is_empty() {
        return Ok(None);
    }
    let version = if v6 { super::IpVersion::V6 } else { super::IpVersion::V4 };
    let created_at = ip2region.map_or(0, Xdb::created_at);
    let bytes = super::write_xdb_at(version, &ranges, created_at)?;
    Xdb::from_bytes(bytes).map(Some)
}

#[cfg(test)]
mod tests;
