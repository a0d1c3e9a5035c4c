//! One owner per answerable name: a node's hostname must not be a name the
//! zones already answer otherwise. The route table classifies a query name in
//! a fixed order (scheduled name, NS host, node hostname, `whoami`,
//! `_version`; [`crate::route_table::RouteTable::lookup`]), so a colliding
//! hostname would be shadowed, or shadow, silently. The store refuses the
//! collision instead, from whichever side it is written (node, domain, zone),
//! with [`StoreError::NameTaken`] naming what it collides with.
//!
//! The check runs in the write's own transaction, after [`lock_names`]: two
//! writes that would collide (a node's hostname and a domain of that name,
//! written at once) queue on the lock, and the second one sees the first.
//! SQLite needs no lock: its write transactions (`BEGIN IMMEDIATE`) already
//! run one at a time.

use sqlx::{Any, Row, Transaction};

use super::{Backend, DbContext, StoreError};

/// The PostgreSQL transaction-level advisory lock every name-owning write
/// takes ("names" in ASCII; the cluster's leader lock is another key).
const NAMES_LOCK: i64 = 0x6e_616d_6573;

/// DNS compares names case-insensitively, without the trailing dot.
pub fn normal(name: &str) -> String {
    name.trim_end_matches('.').to_ascii_lowercase()
}

/// Every name the zones answer, and every node hostname.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct NameOwners {
    pub zones: Vec<String>,
    /// `(zone, NS host name)`.
    pub ns_hosts: Vec<(String, String)>,
    /// `(domain, zone)`.
    pub domains: Vec<(String, String)>,
    /// `(node, hostname)`.
    pub hostnames: Vec<(String, String)>,
}

impl NameOwners {
    /// What `hostname` (for node `node`) would collide with, if anything.
    pub fn hostname_collision(&self, hostname: &str, node: &str) -> Option<String> {
        let h = normal(hostname);
        if self.zones.iter().any(|z| normal(z) == h) {
            return Some(format!("the apex of zone {h} (it has SOA and NS records)"));
        }
        if let Some((d, z)) = self.domains.iter().find(|(d, _)| normal(d) == h) {
            return Some(format!("the scheduled name {d} (zone {z})"));
        }
        if let Some((z, _)) = self.ns_hosts.iter().find(|(_, ns)| normal(ns) == h) {
            return Some(format!("an NS host of zone {z} (answered with its glue)"));
        }
        if let Some(z) = self.zones.iter().find(|z| h == format!("whoami.{z}") || h == format!("_version.{z}")) {
            return Some(format!("the reserved name {h} (a TXT diagnostic of zone {z})"));
        }
        self.hostnames
            .iter()
            .find(|(n, o)| n != node && normal(o) == h)
            .map(|(n, _)| format!("the hostname of node {n}"))
    }

    /// The node whose hostname is `name`, if any.
    pub fn node_with_hostname(&self, name: &str) -> Option<&str> {
        let name = normal(name);
        self.hostnames.iter().find(|(_, h)| normal(h) == name).map(|(n, _)| n.as_str())
    }

    /// Refuses `hostname` for node `node` when another owner holds it.
    pub fn check_hostname(&self, node: &str, hostname: &str) -> Result<(), StoreError> {
        match self.hostname_collision(hostname, node) {
            Some(what) => Err(StoreError::NameTaken {
                field: "hostname",
                message: format!(
                    "hostname {} is already {what}: a node hostname needs a name of its own",
                    normal(hostname)
                ),
            }),
            None => Ok(()),
        }
    }

    /// Refuses a scheduled name, zone apex or NS host name (`field`) that is a node's hostname.
    pub fn check_not_a_hostname<'a>(
        &self,
        field: &'static str,
        names: impl IntoIterator<Item = &'a str>,
    ) -> Result<(), StoreError> {
        for name in names {
            if let Some(node) = self.node_with_hostname(name) {
                return Err(StoreError::NameTaken {
                    field,
                    message: format!(
                        "{} is the hostname of node {node}: change the node's hostname first",
                        normal(name)
                    ),
                });
            }
        }
        Ok(())
    }
}

/// Takes the names lock for the rest of `tx` (PostgreSQL; SQLite's write
/// transactions are serial already).
pub(crate) async fn lock_names(tx: &mut Transaction<'static, Any>, backend: Backend) -> Result<(), StoreError> {
    if backend == Backend::Postgres {
        sqlx::query("SELECT pg_advisory_xact_lock($1)")
            .bind(NAMES_LOCK)
            .execute(&mut **tx)
            .await
            .ctx(|| "taking the names lock".to_string())?;
    }
    Ok(())
}

/// Every owner of a name, as `tx` sees them.
pub(crate) async fn name_owners(tx: &mut Transaction<'static, Any>) -> Result<NameOwners, StoreError> {
    let pairs = |rows: Vec<sqlx::any::AnyRow>, what: &'static str| -> Result<Vec<(String, String)>, StoreError> {
        rows.iter()
            .map(|r| {
                Ok((r.try_get(0).ctx(|| format!("reading {what}"))?, r.try_get(1).ctx(|| format!("reading {what}"))?))
            })
            .collect()
    };
    let zones =
        sqlx::query("SELECT name, name FROM zones").fetch_all(&mut **tx).await.ctx(|| "listing zones".to_string())?;
    let ns_hosts = sqlx::query("SELECT zone, name FROM ns_hosts")
        .fetch_all(&mut **tx)
        .await
        .ctx(|| "listing NS hosts".to_string())?;
    let domains = sqlx::query("SELECT name, zone FROM domains")
        .fetch_all(&mut **tx)
        .await
        .ctx(|| "listing domains".to_string())?;
    let hostnames = sqlx::query("SELECT name, hostname FROM nodes WHERE hostname IS NOT NULL")
        .fetch_all(&mut **tx)
        .await
        .ctx(|| "listing node hostnames".to_string())?;
    Ok(NameOwners {
        zones: pairs(zones, "a zone")?.into_iter().map(|(z, _)| z).collect(),
        ns_hosts: pairs(ns_hosts, "an NS host")?,
        domains: pairs(domains, "a domain")?,
        hostnames: pairs(hostnames, "a node hostname")?,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn fixture() -> NameOwners {
        let s = |a: &str, b: &str| (a.to_string(), b.to_string());
        NameOwners {
            zones: vec!["edge.lagran.net".into()],
            ns_hosts: vec![s("edge.lagran.net", "ns1.edge.lagran.net")],
            domains: vec![s("cdn.edge.lagran.net", "edge.lagran.net")],
            hostnames: vec![s("gz-01", "gz-01.edge.lagran.net")],
        }
    }

    #[test]
    fn a_hostname_may_not_take_a_name_answered_otherwise() {
        let o = fixture();
        let c = |h: &str, node: &str| o.hostname_collision(h, node);
        assert!(c("edge.lagran.net", "hk-01").unwrap().contains("apex"));
        assert!(c("CDN.edge.lagran.net.", "hk-01").unwrap().contains("scheduled name"), "any case, trailing dot");
        assert!(c("ns1.edge.lagran.net", "hk-01").unwrap().contains("NS host"));
        assert!(c("whoami.edge.lagran.net", "hk-01").unwrap().contains("reserved"));
        assert!(c("gz-01.edge.lagran.net", "hk-01").unwrap().contains("node gz-01"), "another node's hostname");
        assert_eq!(c("gz-01.edge.lagran.net", "gz-01"), None, "a node keeps its own hostname");
        assert_eq!(c("hk-01.edge.lagran.net", "hk-01"), None);
        assert_eq!(o.node_with_hostname("GZ-01.edge.lagran.net."), Some("gz-01"));
        let taken = o.check_not_a_hostname("name", ["gz-01.edge.lagran.net"]).unwrap_err();
        assert!(matches!(taken, StoreError::NameTaken { field: "name", .. }), "{taken:?}");
        assert!(o.check_hostname("hk-01", "hk-01.edge.lagran.net").is_ok());
    }
}
