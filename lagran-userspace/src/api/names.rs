//! One owner per answerable name: a node's hostname must not be a name the
//! zones already answer otherwise. The route table classifies a query name in
//! a fixed order (scheduled name, NS host, node hostname, `whoami`,
//! `_version`; [`crate::route_table::RouteTable::lookup`]), so a colliding
//! hostname would be shadowed, or shadow, silently. The API refuses the
//! collision instead, from whichever side it is written (node, domain, zone),
//! with 409 and the name it collides with.

use axum::http::StatusCode;

use super::error::ApiError;
use crate::model::{Domain, Node, Zone};

fn normal(name: &str) -> String {
    name.trim_end_matches('.').to_ascii_lowercase()
}

/// What `hostname` (for node `node`) would collide with, if anything.
pub fn hostname_collision(
    hostname: &str,
    node: &str,
    zones: &[Zone],
    domains: &[Domain],
    nodes: &[Node],
) -> Option<String> {
    let h = normal(hostname);
    if let Some(z) = zones.iter().find(|z| z.name == h) {
        return Some(format!("the apex of zone {} (it has SOA and NS records)", z.name));
    }
    if let Some(d) = domains.iter().find(|d| d.name == h) {
        return Some(format!("the scheduled name {} (zone {})", d.name, d.zone));
    }
    for z in zones {
        if z.ns_hosts.iter().any(|ns| normal(&ns.name) == h) {
            return Some(format!("an NS host of zone {} (answered with its glue)", z.name));
        }
        if h == format!("whoami.{}", z.name) || h == format!("_version.{}", z.name) {
            return Some(format!("the reserved name {h} (a TXT diagnostic of zone {})", z.name));
        }
    }
    nodes
        .iter()
        .find(|n| n.name != node && n.hostname.as_deref().is_some_and(|o| normal(o) == h))
        .map(|n| format!("the hostname of node {}", n.name))
}

/// Checks `hostname` for node `node` against the store's zones, domains and nodes.
pub async fn check_hostname(store: &crate::store::Store, node: &str, hostname: &str) -> Result<(), ApiError> {
    let (zones, domains, nodes) = (store.list_zones().await?, store.list_domains().await?, store.list_nodes().await?);
    match hostname_collision(hostname, node, &zones, &domains, &nodes) {
        Some(what) => Err(ApiError::field(
            StatusCode::CONFLICT,
            "hostname",
            format!("hostname {} is already {what}: a node hostname needs a name of its own", normal(hostname)),
        )),
        None => Ok(()),
    }
}

/// The node whose hostname is `name`, if any.
pub fn node_with_hostname<'a>(name: &str, nodes: &'a [Node]) -> Option<&'a Node> {
    let name = normal(name);
    nodes.iter().find(|n| n.hostname.as_deref().is_some_and(|h| normal(h) == name))
}

/// A scheduled name, zone apex or NS host name (`field`) that is a node's hostname.
pub async fn check_not_a_hostname(
    store: &crate::store::Store,
    field: &'static str,
    names: impl IntoIterator<Item = &str>,
) -> Result<(), ApiError> {
    let nodes = store.list_nodes().await?;
    for name in names {
        if let Some(n) = node_with_hostname(name, &nodes) {
            return Err(ApiError::field(
                StatusCode::CONFLICT,
                field,
                format!("{} is the hostname of node {}: change the node's hostname first", normal(name), n.name),
            ));
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::NsHost;

    fn fixture() -> (Vec<Zone>, Vec<Domain>, Vec<Node>) {
        let mut z = Zone::new("edge.lagran.net");
        z.ns_hosts = vec![NsHost { name: "ns1.edge.lagran.net".into(), ipv4: None, ipv6: None }];
        let d = Domain {
            name: "cdn.edge.lagran.net".into(),
            zone: "edge.lagran.net".into(),
            pool: "default".into(),
            ttl: None,
            origin_ip: None,
            answer_mode: Default::default(),
            ecs: true,
            steering: Default::default(),
            strategy: Default::default(),
        };
        let mut gz = Node::new("gz-01".to_string());
        gz.hostname = Some("gz-01.edge.lagran.net".into());
        (vec![z], vec![d], vec![gz, Node::new("hk-01".to_string())])
    }

    #[test]
    fn a_hostname_may_not_take_a_name_answered_otherwise() {
        let (z, d, n) = fixture();
        let c = |h: &str, node: &str| hostname_collision(h, node, &z, &d, &n);
        assert!(c("edge.lagran.net", "hk-01").unwrap().contains("apex"));
        assert!(c("CDN.edge.lagran.net.", "hk-01").unwrap().contains("scheduled name"), "any case, trailing dot");
        assert!(c("ns1.edge.lagran.net", "hk-01").unwrap().contains("NS host"));
        assert!(c("whoami.edge.lagran.net", "hk-01").unwrap().contains("reserved"));
        assert!(c("gz-01.edge.lagran.net", "hk-01").unwrap().contains("node gz-01"), "another node's hostname");
        assert_eq!(c("gz-01.edge.lagran.net", "gz-01"), None, "a node keeps its own hostname");
        assert_eq!(c("hk-01.edge.lagran.net", "hk-01"), None);
        assert_eq!(node_with_hostname("GZ-01.edge.lagran.net.", &n).map(|n| n.name.as_str()), Some("gz-01"));
    }
}
