//! MaxMind DB files (read with the `maxminddb` crate), in the schemas found in the
//! wild, told apart by the content of their records:
//!
//! - MaxMind's own GeoIP2 / GeoLite2 City: `country.iso_code`, `subdivisions[0]
//!   .names.en`, `city.names.en`, `location.latitude` / `longitude`;
//! - the flat schema of the `@ip-location-db` packages: `country_code`, `state1`,
//!   `city`, `latitude`, `longitude`;
//! - ASN databases (GeoLite2 ASN, `@ip-location-db/asn-mmdb`):
//!   `autonomous_system_number`, `autonomous_system_organization`.
//!
//! A database's IPv4 part (an IPv4 tree, or the `::/96` of an IPv6 tree) and its
//! IPv6 part are read into a [`RangeTable`]; the IPv6 tree's aliases of the IPv4
//! space are skipped by the crate.

use std::collections::HashMap;
use std::net::IpAddr;
use std::path::Path;

use ipnetwork::IpNetwork;
use maxminddb::Reader;
use serde::Deserialize;
use serde::de::IgnoredAny;

use super::table::RangeTable;
use super::{AsnRecord, CityRecord};
use crate::geo::GeoError;
use crate::location::Coords;

/// What a MaxMind DB holds.
#[derive(Debug)]
pub enum MmdbData {
    City(RangeTable<CityRecord>),
    Asn(RangeTable<AsnRecord>),
}

/// The fields that tell the schemas apart.
#[derive(Deserialize)]
struct Probe {
    country_code: Option<IgnoredAny>,
    country: Option<IgnoredAny>,
    location: Option<IgnoredAny>,
    continent: Option<IgnoredAny>,
    autonomous_system_number: Option<IgnoredAny>,
}

#[derive(Deserialize)]
struct Names<'a> {
    #[serde(borrow)]
    en: Option<&'a str>,
}

#[derive(Deserialize)]
struct Named<'a> {
    #[serde(borrow)]
    iso_code: Option<&'a str>,
    #[serde(borrow)]
    names: Option<Names<'a>>,
}

#[derive(Deserialize)]
struct LatLon {
    latitude: Option<f64>,
    longitude: Option<f64>,
}

/// MaxMind's GeoIP2 / GeoLite2 City record (the fields used).
#[derive(Deserialize)]
struct GeoIp2City<'a> {
    #[serde(borrow)]
    country: Option<Named<'a>>,
    #[serde(borrow)]
    registered_country: Option<Named<'a>>,
    #[serde(borrow)]
    subdivisions: Option<Vec<Named<'a>>>,
    #[serde(borrow)]
    city: Option<Named<'a>>,
    location: Option<LatLon>,
}

/// The `@ip-location-db` flat City record.
#[derive(Deserialize)]
struct FlatCity<'a> {
    #[serde(borrow)]
    country_code: Option<&'a str>,
    #[serde(borrow)]
    state1: Option<&'a str>,
    #[serde(borrow)]
    city: Option<&'a str>,
    latitude: Option<f64>,
    longitude: Option<f64>,
}

#[derive(Deserialize)]
struct AsnMmdb<'a> {
    autonomous_system_number: Option<u32>,
    #[serde(borrow)]
    autonomous_system_organization: Option<&'a str>,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Schema {
    GeoIp2City,
    FlatCity,
    Asn,
}

/// Whether `bytes` hold a MaxMind DB: its metadata starts with a marker within the
/// last 128 KiB of the file.
pub fn is_mmdb(bytes: &[u8]) -> bool {
    const MARKER: &[u8] = b"\xab\xcd\xefMaxMind.com";
    let tail = &bytes[bytes.len().saturating_sub(128 * 1024)..];
    tail.windows(MARKER.len()).any(|w| w == MARKER)
}

/// Reads a MaxMind DB file.
pub fn read(path: &Path) -> Result<MmdbData, GeoError> {
    let bytes = std::fs::read(path).map_err(|source| GeoError::Io { path: path.to_path_buf(), source })?;
    from_bytes(bytes).map_err(|e| GeoError::InFile { path: path.to_path_buf(), source: Box::new(e) })
}

/// Reads a MaxMind DB held in memory.
pub fn from_bytes(bytes: Vec<u8>) -> Result<MmdbData, GeoError> {
    let err = |e: maxminddb::MaxMindDbError| GeoError::Mmdb { reason: e.to_string() };
    let reader = Reader::from_source(bytes).map_err(err)?;
    let root: IpNetwork = if reader.metadata.ip_version == 6 {
        IpNetwork::V6("::/0".parse().expect("literal"))
    } else {
        IpNetwork::V4("0.0.0.0/0".parse().expect("literal"))
    };
    let schema = schema(&reader, root)?;
    match schema {
        Schema::Asn => Ok(MmdbData::Asn(collect(&reader, root, |r: AsnMmdb<'_>| {
            r.autonomous_system_number.map(|asn| AsnRecord {
                asn,
                organisation: r.autonomous_system_organization.unwrap_or("").trim().to_string(),
            })
        })?)),
        Schema::GeoIp2City => Ok(MmdbData::City(collect(&reader, root, |r: GeoIp2City<'_>| {
            let country = r.country.as_ref().or(r.registered_country.as_ref()).and_then(|c| c.iso_code).unwrap_or("");
            let province = english(r.subdivisions.as_ref().and_then(|s| s.first()));
            let coords = r.location.as_ref().and_then(|l| Some(Coords::new(l.latitude?, l.longitude?)));
            Some(CityRecord::new(country, province, english(r.city.as_ref()), coords))
        })?)),
        Schema::FlatCity => Ok(MmdbData::City(collect(&reader, root, |r: FlatCity<'_>| {
            let coords = match (r.latitude, r.longitude) {
                (Some(lat), Some(lon)) => Some(Coords::new(lat, lon)),
                _ => None,
            };
            let (country, province, city) =
                (r.country_code.unwrap_or(""), r.state1.unwrap_or(""), r.city.unwrap_or(""));
            Some(CityRecord::new(country, province, city, coords))
        })?)),
    }
}

/// The English name of a GeoIP2 place, `""` when it has none.
fn english<'a>(n: Option<&Named<'a>>) -> &'a str {
    n.and_then(|n| n.names.as_ref()).and_then(|n| n.en).unwrap_or("")
}

/// The schema of the first record that names one.
fn schema(reader: &Reader<Vec<u8>>, root: IpNetwork) -> Result<Schema, GeoError> {
    let err = |e: maxminddb::MaxMindDbError| GeoError::Mmdb { reason: e.to_string() };
    for item in reader.within::<Probe>(root).map_err(err)?.take(1000) {
        let p = item.map_err(err)?.info;
        if p.autonomous_system_number.is_some() {
            return Ok(Schema::Asn);
        }
        if p.country_code.is_some() {
            return Ok(Schema::FlatCity);
        }
        if p.country.is_some() || p.location.is_some() || p.continent.is_some() {
            return Ok(Schema::GeoIp2City);
        }
    }
    Err(GeoError::Mmdb {
        reason: format!(
            "database type {:?}: its records are neither a City schema (country.iso_code or country_code) \
             nor an ASN schema (autonomous_system_number)",
            reader.metadata.database_type
        ),
    })
}

/// Every network of the tree as ranges, records decoded with `T` and turned into
/// values by `value` (`None`: no value, a gap), equal values stored once.
fn collect<'de, T, V>(
    reader: &'de Reader<Vec<u8>>,
    root: IpNetwork,
    value: impl Fn(T) -> Option<V>,
) -> Result<RangeTable<V>, GeoError>
where
    T: Deserialize<'de> + 'de,
    V: Clone + Eq + std::hash::Hash,
{
    let err = |e: maxminddb::MaxMindDbError| GeoError::Mmdb { reason: e.to_string() };
    let mut table = RangeTable::default();
    let mut ids: HashMap<V, u32> = HashMap::new();
    for item in reader.within::<T>(root).map_err(err)? {
        let item = item.map_err(err)?;
        let Some(v) = value(item.info) else { continue };
        let id = *ids.entry(v.clone()).or_insert_with(|| {
            table.values.push(v);
            (table.values.len() - 1) as u32
        });
        let (v6, start, end) = bounds(item.ip_net);
        let ranges = if v6 { &mut table.v6 } else { &mut table.v4 };
        match ranges.last_mut() {
            Some(last) if last.2 == id && last.1.checked_add(1) == Some(start) => last.1 = end,
            _ => ranges.push((start, end, id)),
        }
    }
    table.normalise();
    Ok(table)
}

/// The family and inclusive bounds of a network; `::a.b.c.d/n` of an IPv6 tree
/// (n ≥ 96) is the IPv4 network `a.b.c.d/(n − 96)`.
fn bounds(net: IpNetwork) -> (bool, u128, u128) {
    match net {
        IpNetwork::V4(n) => (false, u128::from(u32::from(n.network())), u128::from(u32::from(n.broadcast()))),
        IpNetwork::V6(n) => {
            let start = u128::from(n.network());
            let end = u128::from(n.broadcast());
            if end <= u128::from(u32::MAX) && n.prefix() >= 96 { (false, start, end) } else { (true, start, end) }
        }
    }
}

/// The address of an [`IpAddr`] as the ranges store it.
pub fn addr_key(ip: IpAddr) -> (bool, u128) {
    match ip {
        IpAddr::V4(a) => (false, u128::from(u32::from(a))),
        IpAddr::V6(a) => (true, u128::from(a)),
    }
}
