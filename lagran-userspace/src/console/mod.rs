//! The operator console served at `/ui`: who answers whom, at a glance.
//!
//! - [`matrix`]: the (province × carrier) answer matrix of a scheduled name (pure).
//! - [`world`]: the world beside it: continents, then countries with nodes or clients (pure).
//! - [`traffic`]: queries per second over the last 15 minutes (a ring buffer
//!   the daemon samples).
//! - [`nshosts`]: each NS host's table version and lag.
//! - [`certificates`]: the certificates that expire within 14 days.
//! - [`dnssec`]: signatures near expiry and key rollovers that do not advance.
//! - [`page`]: the page itself (HTML, CSS and script, embedded).
//! - this module: what the API handlers call — the live matrix and the
//!   what-if, computed with the scheduler's own compiler
//!   ([`build_route_table`]) on copies of its inputs; nothing is published.

pub mod certificates;
pub mod dnssec;
pub mod matrix;
pub mod nshosts;
pub mod page;
pub mod traffic;
pub mod world;

use std::sync::{Arc, Mutex, OnceLock};

use serde::Serialize;
use tokio_util::sync::CancellationToken;

use crate::clock::now_ms;
use crate::metrics::Metrics;
use crate::model::Node;
use crate::partition::PartitionTable;
use crate::route_table::RouteTable;
use crate::scheduler::{BuildState, Change, Inputs, Scheduler, SchedulerError, build_route_table};
use matrix::{Cell, Move};
use nshosts::NsHostSource;
use traffic::{Sample, TrafficHistory};

/// What the console keeps beside the control plane.
pub struct Console {
    pub traffic: Arc<TrafficHistory>,
    pub ns_hosts: Arc<dyn NsHostSource>,
    province_partitions: OnceLock<Arc<PartitionTable>>,
    /// The last live [`matrix::AddressCells`], by (table version, partitions, name):
    /// the walk over every partition is done once per published table.
    address_cache: AddressCache,
}

/// What the address half of a live matrix depends on.
type CacheKey = (u64, usize, String);

/// The last live address cells and their key.
type AddressCache = Arc<Mutex<Option<(CacheKey, Arc<matrix::AddressCells>)>>>;

impl Console {
    pub fn new(ns_hosts: Arc<dyn NsHostSource>) -> Self {
        Console {
            traffic: Arc::new(TrafficHistory::default()),
            ns_hosts,
            province_partitions: OnceLock::new(),
            address_cache: Arc::new(Mutex::new(None)),
        }
    }

    fn province_partitions(&self) -> Arc<PartitionTable> {
        self.province_partitions.get_or_init(|| Arc::new(matrix::province_level_partitions())).clone()
    }

    /// Samples the responder's and the fast path's counters every
    /// [`traffic::SAMPLE_EVERY_MS`] until `shutdown`.
    pub fn spawn_sampler(&self, metrics: Arc<Metrics>, shutdown: CancellationToken) -> tokio::task::JoinHandle<()> {
        let history = self.traffic.clone();
        tokio::spawn(async move {
            let mut tick = tokio::time::interval(std::time::Duration::from_millis(traffic::SAMPLE_EVERY_MS));
            tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
            loop {
                tokio::select! {
                    _ = shutdown.cancelled() => return,
                    _ = tick.tick() => {}
                }
                let d = &metrics.dns;
                let l = |c: &std::sync::atomic::AtomicU64| c.load(std::sync::atomic::Ordering::Relaxed);
                let userspace = l(&d.queries_udp) + l(&d.queries_tcp) + l(&d.queries_dot) + l(&d.queries_doq);
                history.sample(Sample::new(now_ms(), userspace, &metrics.counters()));
            }
        })
    }

    /// The live matrix of `domain`: the published table over the scheduler's
    /// partitions, cells without addresses at province level. `None` when
    /// `domain` is not a scheduled name.
    pub async fn matrix(&self, scheduler: &Scheduler, domain: &str) -> Result<Option<MatrixView>, SchedulerError> {
        let table = scheduler.table().load_full();
        if table.scheduled(domain).is_none() {
            return Ok(None);
        }
        let inputs = scheduler.inputs_at(now_ms()).await?;
        let mut job = MatrixJob::new(self, scheduler, domain);
        job.cache = Some(self.address_cache.clone());
        let view = tokio::task::spawn_blocking(move || job.live(&table, &inputs))
            .await
            .map_err(|e| SchedulerError::Build(e.to_string()))?;
        Ok(view)
    }

    /// What the matrix of `domain` would become with `edit` applied to the
    /// nodes: the scheduler's compiler run on a copy of its inputs and of its
    /// build state (hysteresis included). Nothing is published or stored.
    pub async fn what_if(
        &self,
        scheduler: &Scheduler,
        domain: &str,
        edit: impl FnOnce(&mut Vec<Node>),
    ) -> Result<Option<WhatIf>, SchedulerError> {
        let table = scheduler.table().load_full();
        if table.scheduled(domain).is_none() {
            return Ok(None);
        }
        let inputs = scheduler.inputs_at(now_ms()).await?;
        let mut changed = inputs.clone();
        edit(&mut changed.nodes);
        let state = scheduler.build_state().await;
        let partitions = scheduler.partitions();
        let job = MatrixJob::new(self, scheduler, domain);
        tokio::task::spawn_blocking(move || {
            let before = job.live(&table, &inputs)?;
            let mut state = state;
            let after_table = build_route_table(
                table.version + 1,
                &changed,
                &partitions,
                &job.settings,
                &job.policy,
                &mut state,
                &Change::Everything,
            );
            let after = job.live(&after_table, &changed)?;
            let moves = matrix::moves(&before.cells, &after.cells);
            Some(WhatIf { domain: job.domain.clone(), version: table.version, moves, published: false })
        })
        .await
        .map_err(|e| SchedulerError::Build(e.to_string()))
    }
}

/// One matrix computation, moved onto a blocking thread.
struct MatrixJob {
    domain: String,
    partitions: Arc<PartitionTable>,
    province_partitions: Arc<PartitionTable>,
    settings: crate::scheduler::settings::ScheduleSettings,
    policy: crate::engine::Policy,
    /// Set for the published table only (a what-if's table must not be cached).
    cache: Option<AddressCache>,
}

impl MatrixJob {
    fn new(console: &Console, scheduler: &Scheduler, domain: &str) -> Self {
        MatrixJob {
            domain: domain.trim_end_matches('.').to_ascii_lowercase(),
            partitions: scheduler.partitions(),
            province_partitions: console.province_partitions(),
            settings: scheduler.settings().clone(),
            policy: scheduler.policy().clone(),
            cache: None,
        }
    }

    /// The address half of the matrix, from the cache when it holds this table's.
    fn address_cells(&self, table: &RouteTable, name: &crate::route_table::ScheduledName) -> Arc<matrix::AddressCells> {
        let Some(cache) = &self.cache else { return Arc::new(matrix::address_cells(name, &self.partitions)) };
        let key = (table.version, Arc::as_ptr(&self.partitions) as usize, self.domain.clone());
        if let Some((k, cells)) = &*cache.lock().expect("matrix cache lock poisoned")
            && *k == key
        {
            return cells.clone();
        }
        let cells = Arc::new(matrix::address_cells(name, &self.partitions));
        *cache.lock().expect("matrix cache lock poisoned") = Some((key, cells.clone()));
        cells
    }

    /// The matrix of `table` (built from `inputs`) for the job's name.
    fn live(&self, table: &RouteTable, inputs: &Inputs) -> Option<MatrixView> {
        let name = table.scheduled(&self.domain)?;
        let province_table = build_route_table(
            1,
            inputs,
            &self.province_partitions,
            &self.settings,
            &self.policy,
            &mut BuildState::default(),
            &Change::Everything,
        );
        let address = self.address_cells(table, name);
        let cells = matrix::matrix_with(&address, province_table.scheduled(&self.domain));
        Some(MatrixView {
            domain: self.domain.clone(),
            names: table.scheduled_names().map(|n| n.name.clone()).collect(),
            version: table.version,
            generated_at_ms: table.generated_at_ms,
            rows: matrix::rows(),
            columns: matrix::CARRIERS.to_vec(),
            cells,
            world: world::world_rows(name, &self.partitions, &inputs.nodes),
        })
    }
}

/// `GET /api/v1/console/matrix`.
#[derive(Clone, Debug, Serialize)]
pub struct MatrixView {
    pub domain: String,
    /// Every scheduled name (the page's selector).
    pub names: Vec<String>,
    pub version: u64,
    pub generated_at_ms: i64,
    pub rows: Vec<&'static str>,
    pub columns: Vec<&'static str>,
    /// `cells[row][column]`.
    pub cells: Vec<Vec<Cell>>,
    /// The world: continents, then countries with nodes or clients.
    pub world: Vec<world::WorldRow>,
}

/// `POST /api/v1/schedule/what-if`.
#[derive(Clone, Debug, Serialize)]
pub struct WhatIf {
    pub domain: String,
    /// The published table the change is weighed against.
    pub version: u64,
    /// The cells whose node would change.
    pub moves: Vec<Move>,
    /// Always false: a what-if publishes nothing.
    pub published: bool,
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::geo::{GeoDb, IpVersion, write_xdb};
    use crate::health::HealthMonitor;
    use crate::model::NodeStatus;
    use crate::route_table::empty_shared;
    use crate::scheduler::settings::ScheduleSettings;
    use crate::store::Store;

    /// The demo with the e2e tests' small geo file (Shenzhen Telecom, Beijing Unicom, the rest US).
    async fn demo() -> (Arc<Scheduler>, Console, Store) {
        let v4 = |s: &str| u32::from(s.parse::<std::net::Ipv4Addr>().unwrap()) as u128;
        let ranges = vec![
            (0, v4("58.59.255.255"), "美国|0|0|0|0".to_string()),
            (v4("58.60.0.0"), v4("58.63.255.255"), "中国|0|广东省|深圳市|电信".to_string()),
            (v4("58.64.0.0"), v4("123.111.255.255"), "美国|0|0|0|0".to_string()),
            (v4("123.112.0.0"), v4("123.127.255.255"), "中国|0|北京|北京市|联通".to_string()),
            (v4("123.128.0.0"), u32::MAX as u128, "美国|0|0|0|0".to_string()),
        ];
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("t.xdb");
        std::fs::write(&path, write_xdb(IpVersion::V4, &ranges).unwrap()).unwrap();
        let geo = GeoDb::load(Some(&path), None);
        let store = Store::connect("sqlite::memory:").await.unwrap();
        crate::demo::install(&store).await.unwrap();
        let s = Arc::new(Scheduler::new(
            store.clone(),
            ScheduleSettings::default(),
            HealthMonitor::new(Default::default()),
            geo,
            empty_shared(),
        ));
        s.recompute().await.unwrap();
        (s, Console::new(Arc::new(nshosts::NoNsHosts)), store)
    }

    fn cell<'a>(m: &'a MatrixView, province: &str, isp: &str) -> &'a Cell {
        m.cells.iter().flatten().find(|c| c.province == province && c.isp == isp).unwrap()
    }

    #[tokio::test]
    async fn the_demo_matrix_and_a_what_if_that_publishes_nothing() {
        let (s, console, store) = demo().await;
        let m = console.matrix(&s, "edge.lagran.net").await.unwrap().unwrap();
        let gd = cell(&m, "广东", "电信");
        assert_eq!((gd.node.as_deref(), gd.state), (Some("gz-01"), matrix::CellState::Steady));
        assert!(gd.addresses > 0, "decided by the geo file's Shenzhen block");
        // 广东/联通 has no address in the file: answered at province level (gz-01, same province).
        let gu = cell(&m, "广东", "联通");
        assert_eq!((gu.node.as_deref(), gu.addresses), (Some("gz-01"), 0));
        assert_eq!(cell(&m, "香港", "其他").node.as_deref(), Some("hk-01"));
        assert!(console.matrix(&s, "nope.example").await.unwrap().is_none());

        let version = s.table().load().version;
        let w = console
            .what_if(&s, "edge.lagran.net", |nodes| {
                nodes.iter_mut().filter(|n| n.name == "gz-01").for_each(|n| n.status = NodeStatus::Offline)
            })
            .await
            .unwrap()
            .unwrap();
        let gd = w.moves.iter().find(|m| m.province == "广东" && m.isp == "电信").expect("广东/电信 moves");
        assert_eq!((gd.from.as_deref(), gd.to.as_deref()), (Some("gz-01"), Some("hk-01")));
        assert!(w.moves.iter().all(|m| m.from.as_deref() == Some("gz-01")), "only gz-01's cells move: {:?}", w.moves);
        assert!(!w.published);
        assert_eq!(s.table().load().version, version, "nothing was published");
        let m = console.matrix(&s, "edge.lagran.net").await.unwrap().unwrap();
        assert_eq!(cell(&m, "广东", "电信").node.as_deref(), Some("gz-01"), "the live matrix is unchanged");

        // Draining gz-01 (weight 0) moves the same cells.
        let w2 = console
            .what_if(&s, "edge.lagran.net", |nodes| {
                nodes.iter_mut().filter(|n| n.name == "gz-01").for_each(|n| n.weight = 0)
            })
            .await
            .unwrap()
            .unwrap();
        assert_eq!(w2.moves.len(), w.moves.len());

        // A published change shows at once (the address cells are cached per table version).
        let patch = crate::store::NodePatch { status: Some(NodeStatus::Offline), ..Default::default() };
        store.update_node("gz-01", &patch).await.unwrap();
        s.recompute().await.unwrap();
        let m = console.matrix(&s, "edge.lagran.net").await.unwrap().unwrap();
        assert_eq!(cell(&m, "广东", "电信").node.as_deref(), Some("hk-01"));
        assert_eq!(cell(&m, "广东", "联通").node.as_deref(), Some("hk-01"), "and at province level");
    }
}
