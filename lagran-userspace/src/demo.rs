//! `lagran serve --demo`: zone `edge.lagran.net` and the reference design's three
//! example nodes (gz-01 in Shenzhen on China Telecom, hk-01 in Hong Kong, kr-01 in
//! Korea), whose scores for a Shenzhen China Telecom client are 233, 115 and 93.

use crate::model::{Node, NsHost, Zone};
use crate::store::{Store, StoreError};

pub const DEMO_ZONE: &str = "edge.lagran.net";

/// The demo zone: ns1/ns2 with glue in the documentation range.
pub fn demo_zone() -> Zone {
    let mut z = Zone::new(DEMO_ZONE);
    z.ns_hosts = vec![
        NsHost { name: format!("ns1.{DEMO_ZONE}"), ipv4: Some([198, 51, 100, 53].into()), ipv6: None },
        NsHost { name: format!("ns2.{DEMO_ZONE}"), ipv4: Some([198, 51, 100, 54].into()), ipv6: None },
    ];
    z
}

/// A node at a place with a carrier, weight, CPU and memory usage and
/// address: one row of a node table, in its column order.
#[expect(clippy::too_many_arguments, reason = "one call per row of the example table, in its column order")]
pub fn node(
    name: &str,
    country: &str,
    province: &str,
    city: &str,
    isp: &str,
    weight: i64,
    cpu: f64,
    mem: f64,
    ip: [u8; 4],
) -> Node {
    let mut n = Node::new(name);
    n.country = country.into();
    n.province = province.into();
    n.city = city.into();
    n.isp = isp.into();
    n.weight = weight;
    n.cpu_usage = cpu;
    n.memory_usage = mem;
    n.public_ip = Some(ip.into());
    n
}

/// The reference design's example table, exactly: name, location, carrier,
/// weight, CPU and memory usage, address.
pub fn demo_nodes() -> Vec<Node> {
    vec![
        node("gz-01", "CN", "广东", "深圳", "电信", 100, 20.0, 30.0, [203, 0, 113, 21]),
        node("hk-01", "HK", "香港", "", "BGP", 120, 10.0, 10.0, [203, 0, 113, 22]),
        node("kr-01", "KR", "", "", "BGP", 100, 10.0, 20.0, [203, 0, 113, 23]),
    ]
}

/// Creates what is missing of the demo; leaves existing records as they are.
/// On a database that already holds the demo it writes nothing, so every
/// control process of a cluster can be started with `--demo` (a record
/// another process created meanwhile counts as there).
pub async fn install(store: &Store) -> Result<(), StoreError> {
    let zones = store.list_zones().await?;
    if !zones.iter().any(|z| z.name == DEMO_ZONE) {
        store.upsert_zone(&demo_zone()).await?;
        tracing::info!(zone = DEMO_ZONE, "demo zone created");
    }
    for node in demo_nodes() {
        if store.get_node(&node.name).await?.is_none() {
            match store.create_node(&node, None).await {
                Ok(_) => tracing::info!(node = %node.name, "demo node created"),
                Err(StoreError::Conflict { .. }) => {}
                Err(e) => return Err(e),
            }
        }
    }
    Ok(())
}
