//! The decide/explain query: the full ranked decision for one client and name,
//! with the answer the NS hosts actually serve put first (`/api/v1/schedule`,
//! `lagran explain`).

use std::net::IpAddr;

use serde::Serialize;

use super::build::pin;
use super::{Scheduler, SchedulerError};
use crate::clock::now_ms;
use crate::config::DnsSettings;
use crate::engine::{self, Candidate, Family, NodeView, Ranking};
use crate::location::Location;
use crate::model::DEFAULT_POOL;
use crate::route_table::AnswerState;

/// The client a decision is asked for (`/api/v1/schedule`, `lagran explain`).
#[derive(Clone, Debug, Default)]
pub struct ClientQuery {
    /// The address looked up (ECS address or resolver address); `None` when only a tuple is given.
    pub address: Option<IpAddr>,
    /// Explicit location fields; any that are set replace the looked-up ones (seed 000 §3 step 7).
    pub country: Option<String>,
    pub province: Option<String>,
    pub city: Option<String>,
    pub isp: Option<String>,
}

impl ClientQuery {
    /// Whether explicit location fields are given.
    pub fn has_tuple(&self) -> bool {
        self.country.is_some() || self.province.is_some() || self.city.is_some() || self.isp.is_some()
    }
}

/// A fully explained decision.
#[derive(Clone, Debug, Serialize)]
pub struct Decision {
    pub domain: String,
    /// The TTL the responders serve (`min(route TTL, DNS_TTL)`, never below the floor).
    pub ttl: u32,
    /// The route's own TTL (steady, failover or canary), before the responders' cap.
    pub route_ttl: u32,
    pub client: Location,
    /// The raw region string of the geo file, if the address was found there.
    pub region: Option<String>,
    /// The partition prefix the client fell in, as CIDR blocks' range text.
    pub partition: Option<String>,
    pub pool: String,
    pub ranking: Ranking,
    pub note: String,
    /// The ECS scope the served answer is valid for.
    pub scope: Option<u8>,
    /// The served answer's state (steady, failover, canary, empty).
    pub state: Option<AnswerState>,
}

impl Decision {
    pub fn primary(&self) -> Option<&Candidate> {
        self.ranking.primary()
    }
}

impl Scheduler {
    /// The full ranked decision for one client and domain. `dns` is the responders'
    /// settings, so the TTL reported is the one `dig` sees ([`DnsSettings::served_ttl`]).
    pub async fn decide(
        &self,
        domain: &str,
        client: &ClientQuery,
        dns: &DnsSettings,
    ) -> Result<Decision, SchedulerError> {
        let nodes = self.store.list_nodes().await?;
        let domains = self.store.list_domains().await?;
        let domain = domain.trim_end_matches('.').to_ascii_lowercase();
        let row = domains.iter().find(|d| d.name == domain);
        let pool = row.map_or(DEFAULT_POOL.to_string(), |d| d.pool.clone());
        let ttl = row.and_then(|d| d.ttl).unwrap_or(self.settings.ttl);
        let partitions = self.partitions.load();
        let geo = self.geo.load();
        let (mut location, region, partition) = match client.address {
            Some(addr) => {
                let hit = partitions.lookup(addr);
                let region = geo.lookup(addr).map(|h| h.region);
                (hit.location.clone(), region, Some(format_range(addr, hit.start, hit.end)))
            }
            None => (Location::default(), None, None),
        };
        if client.has_tuple() {
            location = Location::new(
                client.country.as_deref().unwrap_or(&location.country),
                client.province.as_deref().unwrap_or(&location.province),
                client.city.as_deref().unwrap_or(&location.city),
                client.isp.as_deref().unwrap_or(&location.isp),
            );
        }
        let views = NodeView::prepare_live(nodes, &self.health.liveness(), now_ms());
        let mut ranking = engine::rank(&views, &location, Family::V4, &pool, &self.policy);
        // What the NS hosts actually serve (rules, lines, hysteresis applied) goes first.
        let table = self.table.load();
        let served = match (client.address, table.scheduled(&domain)) {
            (Some(addr), Some(name)) if !client.has_tuple() => {
                let (a, scope) = name.answer_for(addr);
                Some((a.clone(), scope))
            }
            _ => None,
        };
        if let Some((a, _)) = &served
            && let Some(node) = &a.node
        {
            pin(&mut ranking, node, &a.reason);
        }
        let note = if ranking.candidates.is_empty() {
            "no eligible online node".to_string()
        } else {
            format!("{} candidate node(s)", ranking.candidates.len())
        };
        let route_ttl = served.as_ref().map_or(ttl, |(a, _)| a.ttl);
        let ttl = dns.served_ttl(route_ttl);
        let scope = served.as_ref().map(|(_, s)| *s);
        let state = served.map(|(a, _)| a.state);
        Ok(Decision { domain, ttl, route_ttl, client: location, region, partition, pool, ranking, note, scope, state })
    }
}

fn format_range(addr: IpAddr, start: u128, end: u128) -> String {
    match addr {
        IpAddr::V4(_) => format!("{}-{}", std::net::Ipv4Addr::from(start as u32), std::net::Ipv4Addr::from(end as u32)),
        IpAddr::V6(a) if a.to_ipv4_mapped().is_some() => {
            format!("{}-{}", std::net::Ipv4Addr::from(start as u32), std::net::Ipv4Addr::from(end as u32))
        }
        IpAddr::V6(_) => format!("{}-{}", std::net::Ipv6Addr::from(start), std::net::Ipv6Addr::from(end)),
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use super::*;
    use crate::config::ScheduleSettings;
    use crate::geo::GeoDb;
    use crate::health::HealthMonitor;
    use crate::route_table::empty_shared;
    use crate::store::Store;

    async fn demo_scheduler(settings: ScheduleSettings) -> Arc<Scheduler> {
        let store = Store::connect("sqlite::memory:").await.unwrap();
        crate::demo::install(&store).await.unwrap();
        let s = Arc::new(Scheduler::new(
            store,
            settings,
            HealthMonitor::new(Default::default()),
            GeoDb::empty(),
            empty_shared(),
        ));
        s.recompute().await.unwrap();
        s
    }

    #[tokio::test]
    async fn the_reported_ttl_is_the_one_the_responders_serve() {
        // schedule.ttl above dns.ttl: dig sees DNS_TTL, so explain must say DNS_TTL too.
        let s = demo_scheduler(ScheduleSettings { ttl: 300, ..Default::default() }).await;
        let dns = DnsSettings { ttl: 30, ..Default::default() };
        let client = ClientQuery { address: Some("58.60.1.1".parse().unwrap()), ..Default::default() };
        let d = s.decide("edge.lagran.net", &client, &dns).await.unwrap();
        assert_eq!(d.route_ttl, 300, "the route keeps its own TTL");
        assert_eq!(d.ttl, 30, "the served TTL is capped by DNS_TTL, as the responder caps it");
        // And never below the floor.
        let s = demo_scheduler(ScheduleSettings { ttl: 1, ..Default::default() }).await;
        let d = s.decide("edge.lagran.net", &client, &dns).await.unwrap();
        assert_eq!(d.ttl, dns.min_ttl, "a route TTL under the floor is served at the floor");
    }
}
