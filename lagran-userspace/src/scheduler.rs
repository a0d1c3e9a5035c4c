//! The scheduler: turns the control plane's state into immutable, versioned
//! route tables.
//!
//! [`build_route_table`] is pure (state in, table out). [`Scheduler`] wraps it:
//! it reads the store, keeps the compiled partitions of the current geo data,
//! recomputes on events (node, rule or health changes call [`Scheduler::recompute`]
//! or [`Scheduler::trigger`]) and every `recompute_secs`, publishes each table
//! through the shared handle, and keeps the previous one for rollback.

use std::collections::HashMap;
use std::net::IpAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use arc_swap::ArcSwap;
use serde::Serialize;
use tokio::sync::{Mutex, Notify};
use tokio_util::sync::CancellationToken;

use crate::config::ScheduleSettings;
use crate::engine::{self, Candidate, Family, NodeView, Policy, Ranking};
use crate::geo::{GeoDb, Location};
use crate::model::{DEFAULT_POOL, Domain, Node, Zone};
use crate::partition::{Override, PartitionTable};
use crate::prefix_map::{PrefixMapV4, PrefixMapV6};
use crate::route_table::{Answer, AnswerState, RouteTable, ScheduledName, SharedRouteTable, ZoneRoutes};
use crate::store::{Store, StoreError};

/// The control plane's state a route table is computed from.
#[derive(Clone, Debug, Default)]
pub struct Inputs {
    pub nodes: Vec<Node>,
    pub zones: Vec<Zone>,
    pub domains: Vec<Domain>,
}

/// Stable small integers for scheduled names, kept across recomputes so the
/// data-plane keys of a name never change while it exists.
#[derive(Clone, Debug, Default)]
pub struct NameIds {
    ids: HashMap<String, u32>,
    next: u32,
}

impl NameIds {
    pub fn id(&mut self, name: &str) -> u32 {
        if let Some(&id) = self.ids.get(name) {
            return id;
        }
        self.next += 1;
        self.ids.insert(name.to_string(), self.next);
        self.next
    }
}

/// Computes a route table: one answer per (scheduled name, partition), stored as
/// the coarsest client prefixes that share an answer.
pub fn build_route_table(
    version: u64,
    now_ms: i64,
    inputs: &Inputs,
    partitions: &PartitionTable,
    settings: &ScheduleSettings,
    policy: &Policy,
    name_ids: &mut NameIds,
) -> RouteTable {
    let views = NodeView::prepare(inputs.nodes.iter().cloned());
    let per_answer = settings.answers_per_query.clamp(1, 4) as usize;
    // Rankings depend on (pool, partition) only; names sharing a pool share them.
    let mut by_pool: HashMap<String, Vec<(Vec<std::net::Ipv4Addr>, Vec<std::net::Ipv6Addr>, Option<String>, String)>> =
        HashMap::new();
    let mut zones = Vec::with_capacity(inputs.zones.len());
    for zone in &inputs.zones {
        let mut names: Vec<(String, String, Option<u32>)> = Vec::new();
        let apex_row = inputs.domains.iter().find(|d| d.name == zone.name);
        names.push((
            zone.name.clone(),
            apex_row.map_or(DEFAULT_POOL.to_string(), |d| d.pool.clone()),
            apex_row.and_then(|d| d.ttl),
        ));
        for d in inputs.domains.iter().filter(|d| d.zone == zone.name && d.name != zone.name) {
            names.push((d.name.clone(), d.pool.clone(), d.ttl));
        }
        let mut scheduled = Vec::with_capacity(names.len());
        for (name, pool, ttl) in names {
            let per_partition = by_pool.entry(pool.clone()).or_insert_with(|| {
                partitions
                    .locations()
                    .iter()
                    .map(|loc| {
                        let r4 = engine::rank(&views, loc, Family::V4, &pool, policy);
                        let r6 = engine::rank(&views, loc, Family::V6, &pool, policy);
                        let v4: Vec<_> = r4.candidates.iter().take(per_answer).filter_map(|c| c.public_ip).collect();
                        let v6: Vec<_> = r6.candidates.iter().take(per_answer).filter_map(|c| c.public_ipv6).collect();
                        let node = r4.primary().or(r6.primary()).map(|c| c.name.clone());
                        let reason = r4.primary().or(r6.primary()).map_or_else(
                            || format!("no eligible node in pool {pool}"),
                            |c| c.reason.clone(),
                        );
                        (v4, v6, node, reason)
                    })
                    .collect()
            });
            let route_ttl = ttl.unwrap_or(settings.ttl);
            let mut answers: Vec<Answer> = Vec::new();
            let mut answer_ids: HashMap<Answer, u32> = HashMap::new();
            let partition_answer: Vec<u32> = per_partition
                .iter()
                .map(|(v4, v6, node, reason)| {
                    let state = if v4.is_empty() && v6.is_empty() { AnswerState::Empty } else { AnswerState::Steady };
                    let a = Answer {
                        ttl: route_ttl,
                        ipv4: v4.clone(),
                        ipv6: v6.clone(),
                        node: node.clone(),
                        reason: reason.clone(),
                        state,
                    };
                    *answer_ids.entry(a.clone()).or_insert_with(|| {
                        answers.push(a);
                        (answers.len() - 1) as u32
                    })
                })
                .collect();
            let v4 = PrefixMapV4::from_ranges(
                partitions.v4_ranges().iter().map(|&(s, e, p)| (s, e, partition_answer[p as usize])),
                partition_answer[0],
            );
            let v6 = PrefixMapV6::from_ranges(
                partitions.v6_ranges().iter().map(|&(s, e, p)| (s, e, partition_answer[p as usize])),
                partition_answer[0],
            );
            scheduled.push(ScheduledName { id: name_ids.id(&name), name, answers, v4, v6 });
        }
        zones.push(ZoneRoutes { zone: zone.clone(), names: scheduled });
    }
    RouteTable::new(version, now_ms, zones)
}

/// A scheduling failure.
#[derive(Debug, thiserror::Error)]
pub enum SchedulerError {
    #[error("reading the control-plane state for a recompute: {0}")]
    Store(#[from] StoreError),
    #[error("no previous route table to roll back to")]
    NoPrevious,
}

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

/// A fully explained decision.
#[derive(Clone, Debug, Serialize)]
pub struct Decision {
    pub domain: String,
    pub ttl: u32,
    pub client: Location,
    /// The raw region string of the geo file, if the address was found there.
    pub region: Option<String>,
    /// The partition prefix the client fell in, as CIDR blocks' range text.
    pub partition: Option<String>,
    pub pool: String,
    pub ranking: Ranking,
    pub note: String,
}

impl Decision {
    pub fn primary(&self) -> Option<&Candidate> {
        self.ranking.primary()
    }
}

/// The event-driven recompute loop around [`build_route_table`].
pub struct Scheduler {
    store: Store,
    settings: ScheduleSettings,
    policy: Policy,
    geo: ArcSwap<GeoDb>,
    partitions: ArcSwap<PartitionTable>,
    table: SharedRouteTable,
    previous: std::sync::Mutex<Option<Arc<RouteTable>>>,
    name_ids: Mutex<NameIds>,
    version: AtomicU64,
    wake: Notify,
    last_duration_us: AtomicU64,
    recomputes: AtomicU64,
}

impl Scheduler {
    pub fn new(store: Store, settings: ScheduleSettings, geo: GeoDb, table: SharedRouteTable) -> Self {
        let partitions = PartitionTable::build(&geo, &[]);
        // Versions start at the wall clock so they keep increasing across restarts.
        let start = (now_ms().max(0) as u64).max(table.load().version);
        Scheduler {
            store,
            settings,
            policy: Policy::default(),
            geo: ArcSwap::from_pointee(geo),
            partitions: ArcSwap::from_pointee(partitions),
            table,
            previous: std::sync::Mutex::new(None),
            name_ids: Mutex::new(NameIds::default()),
            version: AtomicU64::new(start),
            wake: Notify::new(),
            last_duration_us: AtomicU64::new(0),
            recomputes: AtomicU64::new(0),
        }
    }

    pub fn table(&self) -> &SharedRouteTable {
        &self.table
    }

    pub fn store(&self) -> &Store {
        &self.store
    }

    pub fn settings(&self) -> &ScheduleSettings {
        &self.settings
    }

    pub fn geo(&self) -> Arc<GeoDb> {
        self.geo.load_full()
    }

    pub fn partitions(&self) -> Arc<PartitionTable> {
        self.partitions.load_full()
    }

    /// Replaces the geo data (and recompiles the partitions).
    pub fn set_geo(&self, geo: GeoDb, overrides: &[Override]) {
        self.partitions.store(Arc::new(PartitionTable::build(&geo, overrides)));
        self.geo.store(Arc::new(geo));
    }

    /// Duration of the last recompute, in microseconds, and how many ran.
    pub fn stats(&self) -> (u64, u64) {
        (self.last_duration_us.load(Ordering::Relaxed), self.recomputes.load(Ordering::Relaxed))
    }

    /// Asks the loop for a recompute soon (coalesced).
    pub fn trigger(&self) {
        self.wake.notify_one();
    }

    /// Recomputes now and publishes the new table; returns it.
    pub async fn recompute(&self) -> Result<Arc<RouteTable>, SchedulerError> {
        let inputs = Inputs {
            nodes: self.store.list_nodes().await?,
            zones: self.store.list_zones().await?,
            domains: self.store.list_domains().await?,
        };
        let mut ids = self.name_ids.lock().await;
        let started = Instant::now();
        let version = self.version.fetch_add(1, Ordering::SeqCst) + 1;
        let partitions = self.partitions.load();
        let table = Arc::new(build_route_table(
            version,
            now_ms(),
            &inputs,
            &partitions,
            &self.settings,
            &self.policy,
            &mut ids,
        ));
        let old = self.table.swap(table.clone());
        self.log_changes(&old, &table);
        if old.version != 0 {
            *self.previous.lock().expect("previous-table lock poisoned") = Some(old);
        }
        let took = started.elapsed();
        self.last_duration_us.store(took.as_micros() as u64, Ordering::Relaxed);
        self.recomputes.fetch_add(1, Ordering::Relaxed);
        tracing::debug!(version, took_ms = took.as_secs_f64() * 1e3, "route table recomputed");
        Ok(table)
    }

    /// Puts the previous table back (instant rollback).
    pub fn rollback(&self) -> Result<Arc<RouteTable>, SchedulerError> {
        let prev = self.previous.lock().expect("previous-table lock poisoned").take().ok_or(SchedulerError::NoPrevious)?;
        let current = self.table.swap(prev.clone());
        *self.previous.lock().expect("previous-table lock poisoned") = Some(current);
        tracing::warn!(version = prev.version, "route table rolled back");
        Ok(prev)
    }

    fn log_changes(&self, old: &RouteTable, new: &RouteTable) {
        for name in new.scheduled_names() {
            let Some(before) = old.scheduled(&name.name) else { continue };
            let was: Vec<_> = before.answers.iter().map(|a| (&a.node, &a.ipv4)).collect();
            for a in &name.answers {
                if !was.contains(&(&a.node, &a.ipv4)) {
                    tracing::info!(
                        name = %name.name,
                        node = a.node.as_deref().unwrap_or("-"),
                        addresses = ?a.ipv4,
                        reason = %a.reason,
                        version = new.version,
                        "answer changed"
                    );
                }
            }
        }
    }

    /// Runs until `shutdown`: a recompute on every trigger and every `recompute_secs`.
    pub async fn run(self: Arc<Self>, shutdown: CancellationToken) {
        let mut tick = tokio::time::interval(Duration::from_secs(self.settings.recompute_secs));
        tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            tokio::select! {
                _ = shutdown.cancelled() => return,
                _ = tick.tick() => {}
                _ = self.wake.notified() => {}
            }
            if let Err(e) = self.recompute().await {
                tracing::error!(error = %e, "recompute failed; the NS hosts keep the last table");
            }
        }
    }

    /// The full ranked decision for one client and domain.
    pub async fn decide(&self, domain: &str, client: &ClientQuery) -> Result<Decision, SchedulerError> {
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
        if client.country.is_some() || client.province.is_some() || client.city.is_some() || client.isp.is_some() {
            location = Location::new(
                client.country.as_deref().unwrap_or(&location.country),
                client.province.as_deref().unwrap_or(&location.province),
                client.city.as_deref().unwrap_or(&location.city),
                client.isp.as_deref().unwrap_or(&location.isp),
            );
        }
        let views = NodeView::prepare(nodes);
        let ranking = engine::rank(&views, &location, Family::V4, &pool, &self.policy);
        let note = if ranking.candidates.is_empty() {
            "no eligible online node".to_string()
        } else {
            format!("{} candidate node(s)", ranking.candidates.len())
        };
        Ok(Decision { domain, ttl, client: location, region, partition, pool, ranking, note })
    }
}

fn format_range(addr: IpAddr, start: u128, end: u128) -> String {
    match addr {
        IpAddr::V4(_) => format!(
            "{}-{}",
            std::net::Ipv4Addr::from(start as u32),
            std::net::Ipv4Addr::from(end as u32)
        ),
        IpAddr::V6(a) if a.to_ipv4_mapped().is_some() => format!(
            "{}-{}",
            std::net::Ipv4Addr::from(start as u32),
            std::net::Ipv4Addr::from(end as u32)
        ),
        IpAddr::V6(_) => format!("{}-{}", std::net::Ipv6Addr::from(start), std::net::Ipv6Addr::from(end)),
    }
}

/// Unix milliseconds now.
pub fn now_ms() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_millis() as i64)
        .unwrap_or(0)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::NsHost;

    fn seed_inputs() -> Inputs {
        let mut zone = Zone::new("edge.lagran.net");
        zone.ns_hosts = vec![NsHost { name: "ns1.edge.lagran.net".into(), ipv4: Some([192, 0, 2, 53].into()), ipv6: None }];
        let mk = |name: &str, country: &str, province: &str, city: &str, isp: &str, w, cpu, mem, ip: &str| {
            let mut n = Node::new(name);
            n.country = country.into();
            n.province = province.into();
            n.city = city.into();
            n.isp = isp.into();
            n.weight = w;
            n.cpu_usage = cpu;
            n.memory_usage = mem;
            n.public_ip = Some(ip.parse().unwrap());
            n
        };
        Inputs {
            nodes: vec![
                mk("gz-01", "CN", "广东", "深圳", "电信", 100, 20.0, 30.0, "203.0.113.21"),
                mk("hk-01", "HK", "香港", "", "BGP", 120, 10.0, 10.0, "203.0.113.22"),
                mk("kr-01", "KR", "韩国", "", "BGP", 100, 10.0, 20.0, "203.0.113.23"),
            ],
            zones: vec![zone],
            domains: vec![],
        }
    }

    fn partitions() -> PartitionTable {
        use crate::geo::{IpVersion, Xdb, write_xdb};
        let ip = |s: &str| u32::from(s.parse::<std::net::Ipv4Addr>().unwrap()) as u128;
        let ranges = vec![
            (0, ip("58.59.255.255"), "美国|0|0|0|0".to_string()),
            (ip("58.60.0.0"), ip("58.61.255.255"), "中国|0|广东省|深圳市|电信".to_string()),
            (ip("58.62.0.0"), u32::MAX as u128, "美国|0|0|0|0".to_string()),
        ];
        let xdb = Xdb::from_bytes(write_xdb(IpVersion::V4, &ranges).unwrap()).unwrap();
        PartitionTable::build(&GeoDb::from_xdbs(Some(xdb), None), &[])
    }

    #[test]
    fn shenzhen_gets_gz01_with_a_wide_scope_and_the_rest_hk01() {
        let t = build_route_table(
            7,
            1000,
            &seed_inputs(),
            &partitions(),
            &ScheduleSettings::default(),
            &Policy::default(),
            &mut NameIds::default(),
        );
        let apex = t.scheduled("edge.lagran.net").expect("the apex is scheduled");
        let (a, scope) = apex.answer_for("58.60.1.1".parse().unwrap());
        assert_eq!(a.ipv4, vec![std::net::Ipv4Addr::new(203, 0, 113, 21)]);
        assert_eq!(scope, 15, "58.60.0.0/15 is one partition");
        let (a, _) = apex.answer_for("8.8.8.8".parse().unwrap());
        assert_eq!(a.node.as_deref(), Some("hk-01"));
        // private addresses fall into "unknown": weight and load, hk-01 wins too
        let (a, scope) = apex.answer_for("10.1.1.1".parse().unwrap());
        assert_eq!(a.node.as_deref(), Some("hk-01"));
        assert!(scope <= 8, "unknown and US merge into wide blocks, got /{scope}");
        // every address inside a returned scope gets the same answer
        for p in apex.v4.iter() {
            let host = 32 - p.len as u32;
            let last = (p.addr as u64 + (1u64 << host) - 1) as u32;
            assert_eq!(apex.v4.lookup(last).0, p.value);
        }
    }

    #[test]
    fn answers_per_query_adds_backups() {
        let settings = ScheduleSettings { answers_per_query: 2, ..Default::default() };
        let t = build_route_table(1, 0, &seed_inputs(), &partitions(), &settings, &Policy::default(), &mut NameIds::default());
        let (a, _) = t.scheduled("edge.lagran.net").unwrap().answer_for("58.60.1.1".parse().unwrap());
        assert_eq!(a.ipv4, vec![std::net::Ipv4Addr::new(203, 0, 113, 21), std::net::Ipv4Addr::new(203, 0, 113, 22)]);
    }

    #[test]
    fn no_eligible_node_gives_empty_answers() {
        let mut inputs = seed_inputs();
        inputs.nodes.iter_mut().for_each(|n| n.status = crate::model::NodeStatus::Offline);
        let t = build_route_table(1, 0, &inputs, &partitions(), &ScheduleSettings::default(), &Policy::default(), &mut NameIds::default());
        let (a, scope) = t.scheduled("edge.lagran.net").unwrap().answer_for("58.60.1.1".parse().unwrap());
        assert!(a.ipv4.is_empty());
        assert_eq!(a.state, AnswerState::Empty);
        assert_eq!(scope, 0, "one empty answer everywhere");
    }

    #[test]
    fn pool_names_answer_from_their_pool_and_keep_their_ids() {
        let mut inputs = seed_inputs();
        inputs.nodes[2].pool = "pool-a".into();
        inputs.domains.push(Domain {
            name: "pool-a.edge.lagran.net".into(),
            zone: "edge.lagran.net".into(),
            pool: "pool-a".into(),
            ttl: Some(10),
            origin_ip: None,
        });
        let mut ids = NameIds::default();
        let t = build_route_table(1, 0, &inputs, &partitions(), &ScheduleSettings::default(), &Policy::default(), &mut ids);
        let n = t.scheduled("pool-a.edge.lagran.net").unwrap();
        let (a, _) = n.answer_for("58.60.1.1".parse().unwrap());
        assert_eq!(a.node.as_deref(), Some("kr-01"));
        assert_eq!(a.ttl, 10);
        let id = n.id;
        let t2 = build_route_table(2, 0, &inputs, &partitions(), &ScheduleSettings::default(), &Policy::default(), &mut ids);
        assert_eq!(t2.scheduled("pool-a.edge.lagran.net").unwrap().id, id);
    }
}
