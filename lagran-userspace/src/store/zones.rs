//! Zones with their SOA data and NS hosts, and the scheduled domains in them.
//!
//! A zone owns its NS hosts (replaced as a whole by [`Store::upsert_zone`]) and
//! its domains (deleted with it, together with the rules about them).

use std::collections::{BTreeMap, HashSet};

use sqlx::any::AnyRow;
use sqlx::error::ErrorKind;

use super::validate;
use super::{Cols, DbContext, Store, StoreError, names};
use crate::model::{AnswerMode, Domain, NsHost, Steering, Strategy, Zone};

const ZONE_COLUMNS: &str =
    "name, soa_mname, soa_rname, soa_serial, soa_refresh, soa_retry, soa_expire, soa_minimum, ns_ttl, dnssec";
const DOMAIN_COLUMNS: &str = "name, zone, pool, ttl, origin_ip, answer_mode, ecs, steering, strategy";

/// Whether `name` is `zone` itself or a name below it.
pub fn in_zone(name: &str, zone: &str) -> bool {
    name == zone
        || (name.len() > zone.len() && name.ends_with(zone) && name.as_bytes()[name.len() - zone.len() - 1] == b'.')
}

/// Checks a zone's names and NS hosts: DNS names in canonical form, no NS host
/// twice, and glue for every NS host inside the zone (nothing else can resolve it).
pub fn validate_zone(zone: &Zone) -> Result<(), StoreError> {
    validate::dns_name("name", &zone.name)?;
    validate::dns_name("soa_mname", &zone.soa_mname)?;
    validate::dns_name("soa_rname", &zone.soa_rname)?;
    let mut seen = HashSet::new();
    for ns in &zone.ns_hosts {
        validate::dns_name("ns_hosts", &ns.name)?;
        if !seen.insert(ns.name.as_str()) {
            return Err(StoreError::invalid("ns_hosts", format!("{:?} is listed twice", ns.name)));
        }
        if in_zone(&ns.name, &zone.name) && ns.ipv4.is_none() && ns.ipv6.is_none() {
            return Err(StoreError::invalid(
                "ns_hosts",
                format!("{:?} is inside zone {:?} and needs a glue address (ipv4 or ipv6)", ns.name, zone.name),
            ));
        }
    }
    if let Some(policy) = &zone.dnssec {
        policy.check().map_err(|reason| StoreError::invalid("dnssec", reason))?;
    }
    Ok(())
}

/// Checks a domain's names: canonical DNS names, the domain inside its zone, a valid pool.
pub fn validate_domain(d: &Domain) -> Result<(), StoreError> {
    validate::dns_name("name", &d.name)?;
    validate::dns_name("zone", &d.zone)?;
    validate::ident("pool", &d.pool)?;
    if !in_zone(&d.name, &d.zone) {
        return Err(StoreError::invalid("name", format!("{:?} is not inside zone {:?}", d.name, d.zone)));
    }
    // RFC 1034 §3.6.2: "If a CNAME RR is present at a node, no other data should be
    // present" — and a zone apex always holds SOA and NS.
    if d.answer_mode == AnswerMode::Cname && d.name == d.zone {
        return Err(StoreError::invalid(
            "answer_mode",
            format!("{:?} is the zone apex, which holds SOA and NS: a CNAME cannot live there", d.name),
        ));
    }
    Ok(())
}

fn zone_from_row(row: &AnyRow) -> Result<Zone, StoreError> {
    let c = Cols::keyed(row, "zone", "name")?;
    Ok(Zone {
        name: c.key().to_string(),
        soa_mname: c.get("soa_mname")?,
        soa_rname: c.get("soa_rname")?,
        soa_serial: c.int("soa_serial")?,
        soa_refresh: c.int("soa_refresh")?,
        soa_retry: c.int("soa_retry")?,
        soa_expire: c.int("soa_expire")?,
        soa_minimum: c.int("soa_minimum")?,
        ns_ttl: c.int("ns_ttl")?,
        ns_hosts: Vec::new(),
        dnssec: match c.get::<Option<String>>("dnssec")? {
            Some(json) => Some(serde_json::from_str(&json).map_err(|e| c.corrupt("dnssec", e.to_string()))?),
            None => None,
        },
    })
}

/// `(zone, position, host)` of one `ns_hosts` row.
fn ns_host_from_row(row: &AnyRow) -> Result<(String, i64, NsHost), StoreError> {
    let c = Cols::keyed(row, "NS host", "name")?;
    Ok((
        c.get("zone")?,
        c.get("position")?,
        NsHost { name: c.key().to_string(), ipv4: c.parse_opt("ipv4")?, ipv6: c.parse_opt("ipv6")? },
    ))
}

fn domain_from_row(row: &AnyRow) -> Result<Domain, StoreError> {
    let c = Cols::keyed(row, "domain", "name")?;
    Ok(Domain {
        name: c.key().to_string(),
        zone: c.get("zone")?,
        pool: c.get("pool")?,
        ttl: c.int_opt("ttl")?,
        origin_ip: c.parse_opt("origin_ip")?,
        answer_mode: {
            let m: String = c.get("answer_mode")?;
            AnswerMode::parse(&m).ok_or_else(|| c.corrupt("answer_mode", format!("unknown answer mode {m:?}")))?
        },
        ecs: c.get::<i64>("ecs")? != 0,
        steering: {
            let m: String = c.get("steering")?;
            Steering::parse(&m).ok_or_else(|| c.corrupt("steering", format!("unknown steering {m:?}")))?
        },
        strategy: {
            let m: String = c.get("strategy")?;
            Strategy::parse(&m).ok_or_else(|| c.corrupt("strategy", format!("unknown strategy {m:?}")))?
        },
    })
}

impl Store {
    /// Every zone with its NS hosts (in their stored order), ordered by name.
    pub async fn list_zones(&self) -> Result<Vec<Zone>, StoreError> {
        // One snapshot for both tables, so a concurrent upsert is seen whole or not at all.
        let mut tx = self.begin_read().await?;
        let zone_rows = sqlx::query(&format!("SELECT {ZONE_COLUMNS} FROM zones"))
            .fetch_all(&mut *tx)
            .await
            .ctx(|| "listing zones".to_string())?;
        let ns_rows = sqlx::query("SELECT zone, name, position, ipv4, ipv6 FROM ns_hosts")
            .fetch_all(&mut *tx)
            .await
            .ctx(|| "listing NS hosts".to_string())?;
        tx.commit().await.ctx(|| "listing zones".to_string())?;

        let mut zones = BTreeMap::new();
        for row in &zone_rows {
            let zone = zone_from_row(row)?;
            zones.insert(zone.name.clone(), zone);
        }
        let mut hosts = ns_rows.iter().map(ns_host_from_row).collect::<Result<Vec<_>, _>>()?;
        hosts.sort_by(|a, b| (&a.0, a.1).cmp(&(&b.0, b.1)));
        for (zone, _, host) in hosts {
            if let Some(z) = zones.get_mut(&zone) {
                z.ns_hosts.push(host);
            }
        }
        Ok(zones.into_values().collect())
    }

    /// One zone with its NS hosts, `None` when it does not exist.
    pub async fn get_zone(&self, name: &str) -> Result<Option<Zone>, StoreError> {
        let mut tx = self.begin_read().await?;
        let row = sqlx::query(&format!("SELECT {ZONE_COLUMNS} FROM zones WHERE name = $1"))
            .bind(name)
            .fetch_optional(&mut *tx)
            .await
            .ctx(|| format!("reading zone {name:?}"))?;
        let Some(row) = row else {
            return Ok(None);
        };
        let ns_rows = sqlx::query("SELECT zone, name, position, ipv4, ipv6 FROM ns_hosts WHERE zone = $1")
            .bind(name)
            .fetch_all(&mut *tx)
            .await
            .ctx(|| format!("reading the NS hosts of zone {name:?}"))?;
        tx.commit().await.ctx(|| format!("reading zone {name:?}"))?;
        let mut zone = zone_from_row(&row)?;
        let mut hosts = ns_rows.iter().map(ns_host_from_row).collect::<Result<Vec<_>, _>>()?;
        hosts.sort_by_key(|h| h.1);
        zone.ns_hosts = hosts.into_iter().map(|(_, _, h)| h).collect();
        Ok(Some(zone))
    }

    /// Creates or replaces a zone: its SOA data, and its NS hosts as a whole,
    /// in one transaction (readers see the old set or the new one, never a mix).
    /// Its apex and NS host names may not be node hostnames ([`names`]).
    pub async fn upsert_zone(&self, zone: &Zone) -> Result<(), StoreError> {
        validate_zone(zone)?;
        let name = &zone.name;
        let mut tx = self.begin().await?;
        names::lock_names(&mut tx, self.backend()).await?;
        let owners = names::name_owners(&mut tx).await?;
        owners.check_not_a_hostname("name", [name.as_str()])?;
        owners.check_not_a_hostname("ns_hosts", zone.ns_hosts.iter().map(|h| h.name.as_str()))?;
        // Writing the zone row first locks it: concurrent upserts of the same
        // zone queue here instead of interleaving their NS host rewrites.
        sqlx::query(&format!(
            "INSERT INTO zones ({ZONE_COLUMNS}) VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10) \
             ON CONFLICT (name) DO UPDATE SET soa_mname = excluded.soa_mname, \
             soa_rname = excluded.soa_rname, soa_serial = excluded.soa_serial, \
             soa_refresh = excluded.soa_refresh, soa_retry = excluded.soa_retry, \
             soa_expire = excluded.soa_expire, soa_minimum = excluded.soa_minimum, \
             ns_ttl = excluded.ns_ttl, dnssec = excluded.dnssec"
        ))
        .bind(name)
        .bind(&zone.soa_mname)
        .bind(&zone.soa_rname)
        .bind(i64::from(zone.soa_serial))
        .bind(i64::from(zone.soa_refresh))
        .bind(i64::from(zone.soa_retry))
        .bind(i64::from(zone.soa_expire))
        .bind(i64::from(zone.soa_minimum))
        .bind(i64::from(zone.ns_ttl))
        .bind(zone.dnssec.as_ref().map(|d| serde_json::to_string(d).unwrap_or_default()))
        .execute(&mut *tx)
        .await
        .ctx(|| format!("writing zone {name:?}"))?;
        sqlx::query("DELETE FROM ns_hosts WHERE zone = $1")
            .bind(name)
            .execute(&mut *tx)
            .await
            .ctx(|| format!("replacing the NS hosts of zone {name:?}"))?;
        for (position, ns) in zone.ns_hosts.iter().enumerate() {
            sqlx::query("INSERT INTO ns_hosts (zone, name, position, ipv4, ipv6) VALUES ($1, $2, $3, $4, $5)")
                .bind(name)
                .bind(&ns.name)
                .bind(position as i64)
                .bind(ns.ipv4.map(|a| a.to_string()))
                .bind(ns.ipv6.map(|a| a.to_string()))
                .execute(&mut *tx)
                .await
                .ctx(|| format!("writing NS host {:?} of zone {name:?}", ns.name))?;
        }
        tx.commit().await.ctx(|| format!("writing zone {name:?}"))?;
        Ok(())
    }

    /// Deletes a zone with its NS hosts, its domains and the rules about those
    /// domains, in one transaction; `false` if the zone did not exist.
    pub async fn delete_zone(&self, name: &str) -> Result<bool, StoreError> {
        let mut tx = self.begin().await?;
        let steps = [
            (
                "DELETE FROM rules WHERE domain IN (SELECT name FROM domains WHERE zone = $1)",
                "deleting the rules of zone",
            ),
            ("DELETE FROM domains WHERE zone = $1", "deleting the domains of zone"),
            ("DELETE FROM ns_hosts WHERE zone = $1", "deleting the NS hosts of zone"),
        ];
        for (sql, what) in steps {
            sqlx::query(sql).bind(name).execute(&mut *tx).await.ctx(|| format!("{what} {name:?}"))?;
        }
        let done = sqlx::query("DELETE FROM zones WHERE name = $1")
            .bind(name)
            .execute(&mut *tx)
            .await
            .ctx(|| format!("deleting zone {name:?}"))?;
        tx.commit().await.ctx(|| format!("deleting zone {name:?}"))?;
        Ok(done.rows_affected() > 0)
    }

    /// Every scheduled domain, ordered by name.
    pub async fn list_domains(&self) -> Result<Vec<Domain>, StoreError> {
        let rows = sqlx::query(&format!("SELECT {DOMAIN_COLUMNS} FROM domains"))
            .fetch_all(self.pool())
            .await
            .ctx(|| "listing domains".to_string())?;
        let mut domains = rows.iter().map(domain_from_row).collect::<Result<Vec<_>, _>>()?;
        domains.sort_by(|a, b| a.name.cmp(&b.name));
        Ok(domains)
    }

    /// One domain, `None` when it does not exist.
    pub async fn get_domain(&self, name: &str) -> Result<Option<Domain>, StoreError> {
        let row = sqlx::query(&format!("SELECT {DOMAIN_COLUMNS} FROM domains WHERE name = $1"))
            .bind(name)
            .fetch_optional(self.pool())
            .await
            .ctx(|| format!("reading domain {name:?}"))?;
        row.as_ref().map(domain_from_row).transpose()
    }

    /// Creates or replaces a domain. [`StoreError::Invalid`] `{field: "zone"}`
    /// when its zone does not exist (nothing is written);
    /// [`StoreError::NameTaken`] when its name is a node's hostname ([`names`]).
    pub async fn upsert_domain(&self, d: &Domain) -> Result<(), StoreError> {
        validate_domain(d)?;
        let name = &d.name;
        let mut tx = self.begin().await?;
        names::lock_names(&mut tx, self.backend()).await?;
        names::name_owners(&mut tx).await?.check_not_a_hostname("name", [name.as_str()])?;
        let zone = sqlx::query("SELECT name FROM zones WHERE name = $1")
            .bind(&d.zone)
            .fetch_optional(&mut *tx)
            .await
            .ctx(|| format!("looking up zone {:?} of domain {name:?}", d.zone))?;
        if zone.is_none() {
            return Err(missing_zone(d));
        }
        let written = sqlx::query(&format!(
            "INSERT INTO domains ({DOMAIN_COLUMNS}) VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9) \
             ON CONFLICT (name) DO UPDATE SET zone = excluded.zone, pool = excluded.pool, \
             ttl = excluded.ttl, origin_ip = excluded.origin_ip, answer_mode = excluded.answer_mode, \
             ecs = excluded.ecs, steering = excluded.steering, strategy = excluded.strategy"
        ))
        .bind(name)
        .bind(&d.zone)
        .bind(&d.pool)
        .bind(d.ttl.map(i64::from))
        .bind(d.origin_ip.map(|a| a.to_string()))
        .bind(d.answer_mode.as_str())
        .bind(i64::from(d.ecs))
        .bind(d.steering.as_str())
        .bind(d.strategy.as_str())
        .execute(&mut *tx)
        .await
        .ctx(|| format!("writing domain {name:?}"));
        match written {
            // The zone vanished between the check and the insert (PostgreSQL).
            Err(e) if e.db_kind() == Some(ErrorKind::ForeignKeyViolation) => {
                return Err(missing_zone(d));
            }
            other => other?,
        };
        tx.commit().await.ctx(|| format!("writing domain {name:?}"))?;
        Ok(())
    }

    /// Deletes a domain and the rules about it; `false` if it did not exist.
    pub async fn delete_domain(&self, name: &str) -> Result<bool, StoreError> {
        let mut tx = self.begin().await?;
        sqlx::query("DELETE FROM rules WHERE domain = $1")
            .bind(name)
            .execute(&mut *tx)
            .await
            .ctx(|| format!("deleting the rules of domain {name:?}"))?;
        let done = sqlx::query("DELETE FROM domains WHERE name = $1")
            .bind(name)
            .execute(&mut *tx)
            .await
            .ctx(|| format!("deleting domain {name:?}"))?;
        tx.commit().await.ctx(|| format!("deleting domain {name:?}"))?;
        Ok(done.rows_affected() > 0)
    }
}

fn missing_zone(d: &Domain) -> StoreError {
    StoreError::invalid("zone", format!("zone {:?} of domain {:?} does not exist", d.zone, d.name))
}

#[cfg(test)]
mod tests {
    use super::in_zone;

    #[test]
    fn names_inside_zones() {
        assert!(in_zone("edge.lagran.net", "edge.lagran.net"));
        assert!(in_zone("pool-a.edge.lagran.net", "edge.lagran.net"));
        assert!(!in_zone("xedge.lagran.net", "edge.lagran.net"));
        assert!(!in_zone("lagran.net", "edge.lagran.net"));
    }
}
