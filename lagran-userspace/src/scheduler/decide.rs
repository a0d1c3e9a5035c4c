//! The decide/explain query: the full ranked decision for one client and name,
//! with the answer the NS hosts actually serve put first (`/api/v1/schedule`,
//! `lagran explain`).

use std::fmt::Write as _;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};

use serde::Serialize;

use super::build::pin;
use super::{Scheduler, SchedulerError};
use crate::clock::now_ms;
use crate::dns::settings::DnsSettings;
use crate::engine::{self, Candidate, Family, NodeView, Ranking};
use crate::location::Location;
use crate::model::DEFAULT_POOL;
use crate::route_table::{AnswerState, NameLookup, RouteTable, Served};

/// The client a decision is asked for (`/api/v1/schedule`, `lagran explain`).
#[derive(Clone, Debug, Default)]
pub struct ClientQuery {
    /// The address looked up: an ECS subnet's address (`ecs`) or the asking
    /// address itself (a resolver without ECS, an HTTP client); `None` when
    /// only a tuple is given.
    pub address: Option<IpAddr>,
    /// `address` is an ECS subnet, carried in a query that `resolver` sends.
    pub ecs: bool,
    /// The resolver sending the ECS query (the packet's source). It decides
    /// when the ECS block cannot be located (the resolver fallback); unknown, the
    /// block's own answer is reported, as DNS answers an unlocatable resolver.
    pub resolver: Option<IpAddr>,
    /// Explicit location fields; any that are set replace the looked-up ones.
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
    /// What DNS answers this client (`None` for a tuple, or a name the table does not schedule).
    pub served: Option<ServedAnswer>,
    /// What decided the served answer: `geo`, `latency`, `weighted`, `hash`, `rule` or `line`.
    pub decided_by: &'static str,
    /// The measurement matrix's fresh estimates for the client's partition:
    /// node -> (RTT ms, samples).
    pub measured: std::collections::HashMap<String, (f64, u32)>,
}

/// What the NS hosts answer a client, as `dig` sees it: the decision is
/// [`crate::route_table::ScheduledName::served`], the responder's own.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct ServedAnswer {
    /// The chosen node (for the record: DNS answers its addresses or hostname).
    pub node: Option<String>,
    /// The state of the answer sent (steady, failover, canary, empty); the
    /// unlocated block's `resolver` when the answer is the resolver's.
    pub state: AnswerState,
    /// The ECS SCOPE PREFIX-LENGTH echoed to an ECS query (the partition's
    /// prefix; the unlocated block's width when the resolver decided).
    pub scope: u8,
    /// `CNAME <hostname>` for a name in CNAME mode.
    pub cname: Option<String>,
    /// The `A` records: the scheduled addresses, or the CNAME target's own
    /// when this server answers for it (empty when it does not).
    pub a: Vec<Ipv4Addr>,
    /// The `AAAA` records, likewise.
    pub aaaa: Vec<Ipv6Addr>,
    /// The resolver whose answer this is, when the ECS block could not be
    /// located (a client that cannot be located falls back to its resolver).
    pub decided_for: Option<IpAddr>,
}

impl ServedAnswer {
    /// What DNS sends for `served` from `table`: a CNAME and its target's
    /// records (the target looked up as the responder looks it up), or the
    /// scheduled addresses (at most [`crate::dns::answer::MAX_ANSWERS`]).
    pub fn of(served: Served<'_>, table: &RouteTable, resolver: IpAddr) -> ServedAnswer {
        let a = served.answer;
        let (cname, ipv4, ipv6) = match a.hostname.as_deref() {
            Some(host) => match table.lookup(host) {
                NameLookup::NodeHost { host: h, .. } => {
                    (Some(host.to_string()), h.ipv4.into_iter().collect(), h.ipv6.into_iter().collect())
                }
                _ => (Some(host.to_string()), Vec::new(), Vec::new()),
            },
            None => {
                let max = crate::dns::answer::MAX_ANSWERS;
                (None, a.ipv4.iter().take(max).copied().collect(), a.ipv6.iter().take(max).copied().collect())
            }
        };
        ServedAnswer {
            node: a.node.clone(),
            state: if served.by_resolver { AnswerState::Resolver } else { a.state },
            scope: served.scope,
            cname,
            a: ipv4,
            aaaa: ipv6,
            decided_for: served.by_resolver.then_some(resolver),
        }
    }
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
        let partitions = self.partitions();
        let geo = self.geo();
        // What the NS hosts actually serve (rules, lines, hysteresis applied)
        // for this client, decided as the responder decides it.
        let table = self.table().load();
        let served = match (client.address, table.scheduled(&domain)) {
            (Some(addr), Some(name)) if !client.has_tuple() => {
                let (resolver, ecs) =
                    if client.ecs { (client.resolver.unwrap_or(addr), Some(addr)) } else { (addr, None) };
                name.served(resolver, ecs).map(|s| (s.answer.clone(), ServedAnswer::of(s, &table, resolver)))
            }
            _ => None,
        };
        // A client that cannot be located falls back to its resolver: the resolver's location ranks when it decided.
        let ranked_for = served.as_ref().and_then(|(_, s)| s.decided_for).or(client.address);
        let (mut location, region, partition) = match client.address {
            Some(addr) => {
                let hit = partitions.lookup(addr);
                let region = geo.lookup(addr).map(|h| h.region);
                let ranked = ranked_for.map_or(hit.location.clone(), |r| partitions.lookup(r).location.clone());
                (ranked, region, Some(format_range(addr, hit.start, hit.end)))
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
        // The served answer goes first.
        if let Some((a, _)) = &served
            && let Some(node) = &a.node
        {
            pin(&mut ranking, node, &a.reason);
        }
        let mut note = if ranking.candidates.is_empty() {
            "no eligible online node".to_string()
        } else {
            format!("{} candidate node(s)", ranking.candidates.len())
        };
        match served.as_ref().map(|(_, s)| s) {
            Some(s) if s.decided_for.is_some() => {
                let r = s.decided_for.map(|r| r.to_string()).unwrap_or_default();
                let _ = write!(note, "; the ECS block cannot be located: answered for resolver {r}");
            }
            Some(s) if s.state == AnswerState::Resolver && client.ecs => {
                note.push_str(
                    "; the ECS block cannot be located: DNS answers it for the resolver's address \
                     (give the resolver to see that answer)",
                );
            }
            _ => {}
        }
        let decided_by = served.as_ref().map_or("geo", |(a, _)| super::measured::decided_by(a));
        let measured = self.measured_for(&location, now_ms());
        let route_ttl = served.as_ref().map_or(ttl, |(a, _)| a.ttl);
        let ttl = dns.served_ttl(route_ttl);
        let served = served.map(|(_, s)| s);
        Ok(Decision {
            domain,
            ttl,
            route_ttl,
            client: location,
            region,
            partition,
            pool,
            ranking,
            note,
            served,
            decided_by,
            measured,
        })
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
    use crate::geo::GeoDb;
    use crate::health::HealthMonitor;
    use crate::route_table::empty_shared;
    use crate::scheduler::settings::ScheduleSettings;
    use crate::store::Store;

    async fn demo_scheduler(settings: ScheduleSettings) -> Arc<Scheduler> {
        demo_scheduler_with(settings, GeoDb::empty()).await
    }

    async fn demo_scheduler_with(settings: ScheduleSettings, geo: GeoDb) -> Arc<Scheduler> {
        let store = Store::connect("sqlite::memory:").await.unwrap();
        crate::demo::install(&store).await.unwrap();
        let s = Arc::new(Scheduler::new(store, settings, HealthMonitor::new(Default::default()), geo, empty_shared()));
        s.recompute().await.unwrap();
        s
    }

    /// IPv4: 11.0.0.0/8 unlocated ("0|0|0|0|0"), 58.60.0.0/15 Shenzhen
    /// Telecom, the rest the US. IPv6: 2a0a::/16 (public) unlocated, 240e::/20
    /// Shenzhen Telecom, the rest the US.
    fn geo_with_holes() -> GeoDb {
        use crate::geo::{IpVersion, Xdb, write_xdb};
        let v4 = |s: &str| u32::from(s.parse::<std::net::Ipv4Addr>().unwrap()) as u128;
        let v6 = |s: &str| u128::from(s.parse::<std::net::Ipv6Addr>().unwrap());
        let (us, sz, hole) =
            ("美国|0|0|0|0".to_string(), "中国|0|广东省|深圳市|电信".to_string(), "0|0|0|0|0".to_string());
        let ranges4 = vec![
            (0, v4("10.255.255.255"), us.clone()),
            (v4("11.0.0.0"), v4("11.255.255.255"), hole.clone()),
            (v4("12.0.0.0"), v4("58.59.255.255"), us.clone()),
            (v4("58.60.0.0"), v4("58.61.255.255"), sz.clone()),
            (v4("58.62.0.0"), u32::MAX as u128, us.clone()),
        ];
        let ranges6 = vec![
            (0, v6("240d:ffff:ffff:ffff:ffff:ffff:ffff:ffff"), us.clone()),
            (v6("240e::"), v6("240e:fff:ffff:ffff:ffff:ffff:ffff:ffff"), sz),
            (v6("240e:1000::"), v6("2a09:ffff:ffff:ffff:ffff:ffff:ffff:ffff"), us.clone()),
            (v6("2a0a::"), v6("2a0a:ffff:ffff:ffff:ffff:ffff:ffff:ffff"), hole),
            (v6("2a0b::"), u128::MAX, us),
        ];
        let x4 = Xdb::from_bytes(write_xdb(IpVersion::V4, &ranges4).unwrap()).unwrap();
        let x6 = Xdb::from_bytes(write_xdb(IpVersion::V6, &ranges6).unwrap()).unwrap();
        GeoDb::from_xdbs(Some(x4), Some(x6))
    }

    /// What the DNS responder answers `name` A for ECS `subnet` sent by `resolver`.
    fn dig(s: &Scheduler, name: &str, subnet: (&str, u8), resolver: &str) -> hickory_proto::op::Message {
        use hickory_proto::op::{Edns, Message, MessageType, OpCode, Query as HQuery};
        use hickory_proto::rr::rdata::opt::{ClientSubnet, EdnsOption};
        use hickory_proto::rr::{Name, RecordType};
        let mut m = Message::new();
        m.set_id(7).set_message_type(MessageType::Query).set_op_code(OpCode::Query);
        m.add_query(HQuery::query(Name::from_ascii(name).unwrap(), RecordType::A));
        let mut e = Edns::new();
        e.set_max_payload(1232);
        e.options_mut().insert(EdnsOption::Subnet(ClientSubnet::new(subnet.0.parse().unwrap(), subnet.1, 0)));
        m.set_edns(e);
        let bytes = m.to_vec().unwrap();
        let (table, settings) = (s.table().load(), DnsSettings::default());
        let udp = crate::dns::answer::Transport::Udp;
        let ctx = crate::dns::answer::AnswerContext::new(&table, &settings, resolver.parse().unwrap(), udp, now_ms());
        let reply = crate::dns::answer::answer(&bytes, &ctx);
        Message::from_vec(&reply.bytes.expect("answered")).unwrap()
    }

    /// (CNAME targets, A addresses, ECS scope) of a response.
    fn records(m: &hickory_proto::op::Message) -> (Vec<String>, Vec<std::net::Ipv4Addr>, u8) {
        use hickory_proto::rr::RData;
        use hickory_proto::rr::rdata::opt::{EdnsCode, EdnsOption};
        let cname = m
            .answers()
            .iter()
            .filter_map(|r| match r.data() {
                RData::CNAME(c) => Some(c.0.to_ascii().trim_end_matches('.').to_string()),
                _ => None,
            })
            .collect();
        let a = m
            .answers()
            .iter()
            .filter_map(|r| match r.data() {
                RData::A(a) => Some(a.0),
                _ => None,
            })
            .collect();
        let scope = match m.extensions().as_ref().and_then(|e| e.option(EdnsCode::Subnet)) {
            Some(EdnsOption::Subnet(cs)) => cs.scope_prefix(),
            _ => panic!("no ECS echoed"),
        };
        (cname, a, scope)
    }

    async fn explain(s: &Scheduler, name: &str, subnet: &str, resolver: Option<&str>) -> Decision {
        let client = ClientQuery {
            address: Some(subnet.parse().unwrap()),
            ecs: true,
            resolver: resolver.map(|r| r.parse().unwrap()),
            ..Default::default()
        };
        s.decide(name, &client, &DnsSettings::default()).await.unwrap()
    }

    fn agrees_with_dns(d: &Decision, m: &hickory_proto::op::Message) {
        let served = d.served.as_ref().expect("a served answer");
        let (cname, a, scope) = records(m);
        assert_eq!(served.cname.iter().cloned().collect::<Vec<_>>(), cname, "CNAME as DNS answers it");
        assert_eq!(served.a, a, "A records as DNS answers them");
        assert_eq!(served.scope, scope, "ECS scope as DNS echoes it");
        assert_eq!(d.primary().map(|c| c.name.clone()), served.node, "the served node ranks first");
    }

    #[tokio::test]
    async fn explain_reports_the_resolver_fallback_for_an_unlocated_ecs_block() {
        let s = demo_scheduler_with(ScheduleSettings::default(), geo_with_holes()).await;
        for (subnet, len) in [("11.1.2.0", 24u8), ("2a0a:1::", 48)] {
            let d = explain(&s, "edge.lagran.net", subnet, Some("58.60.1.1")).await;
            let served = d.served.clone().unwrap();
            assert_eq!(served.node.as_deref(), Some("gz-01"), "{subnet}: the Shenzhen resolver's answer");
            assert_eq!(served.state, AnswerState::Resolver, "{subnet}");
            assert_eq!(served.decided_for, Some("58.60.1.1".parse().unwrap()), "{subnet}");
            assert_eq!(served.scope, if len == 24 { 8 } else { 16 }, "{subnet}: SCOPE = the unlocated block");
            assert!(d.note.contains("answered for resolver 58.60.1.1"), "{}", d.note);
            agrees_with_dns(&d, &dig(&s, "edge.lagran.net.", (subnet, len), "58.60.1.1"));

            // Without the resolver: the block's own (unknown) answer, as an unlocatable resolver gets.
            let d = explain(&s, "edge.lagran.net", subnet, None).await;
            let served = d.served.clone().unwrap();
            assert_eq!((served.state, served.decided_for), (AnswerState::Resolver, None), "{subnet}");
            assert!(d.note.contains("give the resolver"), "{}", d.note);
            agrees_with_dns(&d, &dig(&s, "edge.lagran.net.", (subnet, len), "11.9.9.9"));
        }
        // A located ECS address is answered for itself, whatever the resolver.
        let d = explain(&s, "edge.lagran.net", "8.8.8.0", Some("58.60.1.1")).await;
        assert_eq!(d.served.as_ref().unwrap().decided_for, None);
        agrees_with_dns(&d, &dig(&s, "edge.lagran.net.", ("8.8.8.0", 24), "58.60.1.1"));
    }

    #[tokio::test]
    async fn explain_reports_the_cname_and_its_records() {
        let s = demo_scheduler_with(ScheduleSettings::default(), geo_with_holes()).await;
        for node in ["gz-01", "hk-01", "kr-01"] {
            let patch = crate::store::NodePatch {
                hostname: Some(Some(format!("{node}.edge.lagran.net"))),
                ..Default::default()
            };
            s.store.update_node(node, &patch).await.unwrap();
        }
        let cdn = crate::model::Domain {
            name: "cdn.edge.lagran.net".into(),
            zone: "edge.lagran.net".into(),
            pool: DEFAULT_POOL.into(),
            ttl: None,
            origin_ip: None,
            answer_mode: crate::model::AnswerMode::Cname,
            ecs: true,
            steering: Default::default(),
            strategy: Default::default(),
        };
        s.store.upsert_domain(&cdn).await.unwrap();
        s.recompute().await.unwrap();
        let d = explain(&s, "cdn.edge.lagran.net", "58.60.0.0", None).await;
        let served = d.served.clone().unwrap();
        assert_eq!(served.cname.as_deref(), Some("gz-01.edge.lagran.net"), "Shenzhen Telecom → gz-01's hostname");
        assert_eq!(served.a, vec!["203.0.113.21".parse::<std::net::Ipv4Addr>().unwrap()], "then its A record");
        agrees_with_dns(&d, &dig(&s, "cdn.edge.lagran.net.", ("58.60.0.0", 24), "127.0.0.1"));
        // And through the resolver fallback: the CNAME the Shenzhen resolver gets.
        let d = explain(&s, "cdn.edge.lagran.net", "11.1.2.0", Some("58.60.1.1")).await;
        assert_eq!(d.served.as_ref().unwrap().cname.as_deref(), Some("gz-01.edge.lagran.net"));
        agrees_with_dns(&d, &dig(&s, "cdn.edge.lagran.net.", ("11.1.2.0", 24), "58.60.1.1"));
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
