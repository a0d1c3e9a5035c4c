//! A short `simulate --latency` on a made-up geo database (ten provinces ×
//! three carriers, one /16 each), held to the latency policy's targets:
//! within 5 % of the optimum mean RTT and 10 % of its p95, ≥ 90 % of
//! clients within 10 % of their optimum, no answer change under ±10 %
//! measurement noise, and a congested link's clients moved within one
//! window.

#[path = "../examples/simulate_latency/mod.rs"]
mod latency;

use std::net::Ipv4Addr;

use lagran::config::ScheduleSettings;
use lagran::engine::DistancePolicy;
use lagran::geo::{GeoDb, IpVersion, Xdb, write_xdb};
use lagran::model::Node;
use lagran::partition::PartitionTable;

const CARRIERS: [&str; 3] = ["电信", "联通", "移动"];
/// The clients' provinces and cities (the nodes sit in the first six).
const PLACES: [(&str, &str); 10] = [
    ("广东省", "广州市"),
    ("浙江省", "杭州市"),
    ("江苏省", "南京市"),
    ("四川省", "成都市"),
    ("湖北省", "武汉市"),
    ("陕西省", "西安市"),
    ("湖南省", "长沙市"),
    ("福建省", "福州市"),
    ("河南省", "郑州市"),
    ("山东省", "济南市"),
];
/// The first address of the made-up /16s.
const BASE: u32 = 36 << 24;

fn geo() -> GeoDb {
    let mut ranges = vec![(0u128, BASE as u128 - 1, "美国|0|0|0|0".to_string())];
    for (i, (province, city)) in PLACES.iter().enumerate() {
        for (j, isp) in CARRIERS.iter().enumerate() {
            let start = BASE + (((i * 3 + j) as u32) << 16);
            ranges.push((start as u128, (start + 0xffff) as u128, format!("中国|0|{province}|{city}|{isp}")));
        }
    }
    let end = BASE + ((PLACES.len() as u32 * 3) << 16);
    ranges.push((end as u128, u32::MAX as u128, "美国|0|0|0|0".to_string()));
    let xdb = Xdb::from_bytes(write_xdb(IpVersion::V4, &ranges).expect("xdb")).expect("xdb");
    GeoDb::from_xdbs(Some(xdb), None)
}

fn fleet() -> Vec<Node> {
    let mut nodes = Vec::new();
    for (i, (province, city)) in PLACES[..6].iter().enumerate() {
        for (j, isp) in CARRIERS.iter().enumerate() {
            let k = nodes.len() as u32;
            let mut n = Node::new(format!("{}-{isp}", city.trim_end_matches('市')));
            (n.country, n.province, n.city, n.isp) =
                ("CN".into(), province.to_string(), city.to_string(), isp.to_string());
            n.weight = 100;
            n.cpu_usage = 10.0 + ((i * 7 + j * 13) % 50) as f64;
            n.memory_usage = 30.0;
            n.public_ip = Some(Ipv4Addr::from(0xC612_0000 + k));
            nodes.push(n);
        }
    }
    nodes
}

/// One to four client /24s per partition.
fn clients() -> Vec<Ipv4Addr> {
    (0..PLACES.len() as u32 * 3)
        .flat_map(|p| (0..1 + p % 4).map(move |k| Ipv4Addr::from(BASE + (p << 16) + (k << 8) + 1)))
        .collect()
}

#[test]
fn latency_steering_meets_its_targets_beside_geo() {
    let partitions = PartitionTable::build(&geo(), &[]);
    let params = latency::Params {
        seed: 7,
        period_secs: 30,
        noise_rounds: 20,
        settings: ScheduleSettings { distance: Some(DistancePolicy::default()), ..ScheduleSettings::default() },
        steering: Default::default(),
    };
    let rows = latency::run(&fleet(), &clients(), &partitions, &params);
    print!("{}", latency::table(&rows));
    let (geo, steered) = (&rows[0], &rows[1]);
    assert_eq!((geo.policy, steered.policy), ("geo", "latency"));
    assert_eq!(steered.clients, clients().len());
    let window = params.steering.window_secs as i64;
    assert_eq!(steered.misses(window), Vec::<String>::new(), "\n{}", latency::table(&rows));
    assert!(steered.mean_ms <= geo.mean_ms, "latency is no slower than geo on average");
    assert!(steered.congested_clients > 0, "the congested link had clients to move");
    assert_eq!(geo.congested_moved_secs, None, "geo does not see a congested link");
    if steered.degraded_clients > 0 {
        assert!(steered.degraded_moved_secs.is_some_and(|s| s <= window), "{:?}", steered.degraded_moved_secs);
    }
    assert!(latency::csv(&rows).lines().count() == 3);
}
