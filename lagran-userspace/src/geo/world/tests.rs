//! The merge's precedence and sources, and the partitions at the seam between
//! sources.

use super::*;
use crate::geo::{GeoDb, IpVersion, write_xdb};
use crate::location::sources::FieldSources;
use crate::partition::PartitionTable;
use std::collections::BTreeMap;

fn ip(s: &str) -> u128 {
    u128::from(u32::from(s.parse::<std::net::Ipv4Addr>().unwrap()))
}

/// ip2region: a Shenzhen China Telecom block, a Chinese block without a carrier,
/// and a US block; MaxMind: the US block split into two cities, and the Chinese
/// blocks; ASN: Comcast over the US block, China Telecom over the Chinese ones.
fn sample() -> (Xdb, WorldData) {
    let ranges = vec![
        (ip("58.60.0.0"), ip("58.60.255.255"), "中国|0|广东省|深圳市|电信".to_string()),
        (ip("58.61.0.0"), ip("58.61.255.255"), "中国|0|广东省|0|0".to_string()),
        (ip("73.0.0.0"), ip("73.255.255.255"), "美国|0|0|0|0".to_string()),
    ];
    let xdb = Xdb::from_bytes(write_xdb(IpVersion::V4, &ranges).unwrap()).unwrap();
    let city = RangeTable {
        v4: vec![
            (ip("58.60.0.0"), ip("58.61.255.255"), 0),
            (ip("73.0.0.0"), ip("73.127.255.255"), 1),
            (ip("73.128.0.0"), ip("73.255.255.255"), 2),
            (ip("80.0.0.0"), ip("80.0.255.255"), 3),
        ],
        v6: vec![],
        values: vec![
            CityRecord::new("CN", "Guangdong", "Shenzhen", Some(Coords::new(22.54, 114.06))),
            CityRecord::new("US", "California", "San Jose", Some(Coords::new(37.34, -121.89))),
            CityRecord::new("US", "Washington", "Seattle", Some(Coords::new(47.61, -122.33))),
            CityRecord::new("DE", "", "", Some(Coords::new(51.3, 9.49))),
        ],
    };
    let asn = RangeTable {
        v4: vec![(ip("58.60.0.0"), ip("58.61.255.255"), 0), (ip("73.0.0.0"), ip("73.255.255.255"), 1)],
        v6: vec![],
        values: vec![
            AsnRecord { asn: 4134, organisation: "CHINANET-BACKBONE".into() },
            AsnRecord { asn: 7922, organisation: "Comcast Cable Communications, LLC".into() },
        ],
    };
    (xdb, WorldData { city, asn })
}

fn merged() -> GeoDb {
    let (xdb, world) = sample();
    let v4 = merged_xdb(Some(&xdb), &world, &AsnCarriers::default(), false).unwrap();
    GeoDb::from_xdbs(v4, None)
}

fn at(db: &GeoDb, addr: &str) -> (Location, String) {
    let hit = db.lookup(addr.parse().unwrap()).unwrap();
    let sources = FieldSources::of_region(&hit.region, &hit.location).summary();
    (hit.location, sources)
}

#[test]
fn ip2region_wins_for_chinese_carriers_maxmind_elsewhere() {
    let db = merged();
    let (loc, src) = at(&db, "58.60.1.1");
    assert_eq!(loc, Location::new("CN", "广东", "深圳", "电信"));
    assert_eq!(src, "country=ip2region province=ip2region city=ip2region isp=ip2region coords=table");

    // ip2region knows no carrier here: MaxMind's place, the carrier from the ASN.
    let (loc, src) = at(&db, "58.61.1.1");
    assert_eq!((loc.province.as_str(), loc.city.as_str(), loc.isp.as_str()), ("广东", "深圳", "电信"));
    assert_eq!(src, "country=mmdb province=mmdb city=mmdb isp=asn-carriers coords=mmdb");

    let (loc, src) = at(&db, "73.1.2.3");
    assert_eq!((loc.country.as_str(), loc.city.as_str()), ("US", "San Jose"));
    assert_eq!(loc.isp, "Comcast Cable Communications  LLC", "the organisation name, commas removed");
    assert_eq!(loc.coords, Some(Coords::new(37.34, -121.89)));
    assert_eq!(src, "country=mmdb province=mmdb city=mmdb isp=asn coords=mmdb");
    assert_eq!(at(&db, "73.200.0.1").0.city, "Seattle");

    // Only MaxMind covers it: a country-level record with the country's coordinates.
    let (loc, src) = at(&db, "80.0.1.1");
    assert_eq!((loc.country.as_str(), loc.coords), ("DE", Some(Coords::new(51.3, 9.49))));
    assert_eq!(src, "country=mmdb coords=mmdb");
    assert!(db.lookup("81.0.0.1".parse().unwrap()).is_none(), "no source covers it");
}

#[test]
fn the_operator_mapping_names_carriers_of_any_asn() {
    let (xdb, world) = sample();
    let carriers = AsnCarriers::new(&BTreeMap::from([(7922, "Comcast".to_string())]));
    let db = GeoDb::from_xdbs(merged_xdb(Some(&xdb), &world, &carriers, false).unwrap(), None);
    let (loc, src) = at(&db, "73.1.2.3");
    assert_eq!(loc.isp, "Comcast");
    assert!(src.contains("isp=asn-carriers"), "{src}");
}

#[test]
fn partitions_never_straddle_the_seam_between_sources() {
    let db = merged();
    let t = PartitionTable::build(&db, &[]);
    // Every partition range holds one location, the one the merged data gives
    // each address in it, whichever source that is.
    for &(s, e, id) in t.v4_ranges() {
        for a in [s, e, s + (e - s) / 2] {
            let addr = std::net::IpAddr::V4(std::net::Ipv4Addr::from(a));
            if crate::geo::is_special(addr) {
                continue;
            }
            let want = db.lookup(addr).map(|h| h.location).unwrap_or_default();
            assert_eq!(&t.locations()[id as usize], &want, "{addr} in partition range {s:#x}..={e:#x}");
        }
    }
    let seam = t.lookup("58.60.255.255".parse().unwrap());
    assert_eq!(seam.end, ip("58.60.255.255"), "the ip2region block ends where MaxMind's verdict starts");
}

#[test]
fn world_files_are_told_apart_from_geo_files() {
    assert_eq!(world_file_kind(b"1.0.0.0,1.0.0.255,13335,\"Cloudflare, Inc.\"\n"), Some(WorldFile::AsnCsv));
    assert_eq!(world_file_kind(b"start,end,asn,organisation\n16777216,16777471,13335,x\n"), Some(WorldFile::AsnCsv));
    assert_eq!(world_file_kind(b"1.0.0.0/24,CN,Guangdong,Shenzhen,Telecom\n"), None, "a CIDR CSV geo file");
    assert_eq!(world_file_kind(b"1.0.0.0|1.0.0.255|CN|0|0|0|0\n"), None);
    let mut mmdb = vec![0u8; 64];
    mmdb.extend_from_slice(b"\xab\xcd\xefMaxMind.com");
    assert_eq!(world_file_kind(&mmdb), Some(WorldFile::Mmdb));
    let s = crate::geo::Sources { asn: vec!["/a/asn-ipv4.csv".into(), "/a/asn-ipv6.csv".into()], ..Default::default() };
    let next = s.with_world_file(std::path::Path::new("/b/asn-ipv4.csv"), WorldFile::AsnCsv);
    assert_eq!(next.asn, vec![std::path::PathBuf::from("/b/asn-ipv4.csv"), "/a/asn-ipv6.csv".into()]);
}
