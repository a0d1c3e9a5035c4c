//! The scheduler: turns the control plane's state into immutable, versioned
//! route tables.
//!
//! - [`build`]: the pure compiler ([`build_route_table`]: state in, table out).
//! - this module: the running service. [`Scheduler`] reads the store, keeps the
//!   compiled partitions of the current geo data, recomputes on events (node, rule
//!   or health changes call [`Scheduler::recompute`] or [`Scheduler::trigger`]) and
//!   every `recompute_secs`, publishes each table that serves something new
//!   through the shared handle (a recompute that changes nothing publishes
//!   nothing), confirms the current table while it runs
//!   ([`Scheduler::confirmation`]), and keeps the previous table for rollback.
//!   The build itself runs on its own thread, off the async runtime and below
//!   the responder's priority ([`crate::background`]). What it read last is
//!   kept for the recomputes after node and liveness changes: the nodes
//!   ([`node_cache`]) and the zones, domains, rules and lines ([`list_cache`]).
//! - [`decide`]: the decide/explain query ([`Scheduler::decide`]).
//! - [`changes`]: the change log, computed from the partition diff after each
//!   publish (on a blocking thread).
//! - [`geo_reload`]: replacing the geo data without a restart.

mod build;
mod changes;
mod decide;
mod forward;
pub mod geo_reload;
mod list_cache;
mod node_cache;
pub mod settings;

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use arc_swap::ArcSwap;
use tokio::sync::{Mutex, Notify};
use tokio_util::sync::CancellationToken;

pub use build::{BuildState, Change, Inputs, NameIds, build_route_table, build_route_table_after};
pub use changes::{ChangeEvent, ChangeLog};
pub use decide::{ClientQuery, Decision, ServedAnswer};

use crate::background::Background;
use crate::clock::now_ms;
use crate::confirmation::Confirmation;
use crate::engine::Policy;
use crate::geo::GeoDb;
use crate::health::HealthMonitor;
use crate::partition::{Override, PartitionTable};
use crate::route_table::{RouteTable, SharedRouteTable};
use crate::store::{Store, StoreError};
use crate::table_stream::TableHistory;
use settings::ScheduleSettings;

/// How long heartbeats' load reports are folded together after a recompute
/// before the next one (status, weight and every other change go at once).
pub const LOAD_SETTLE: Duration = Duration::from_millis(500);

/// A scheduling failure.
#[derive(Debug, thiserror::Error)]
pub enum SchedulerError {
    #[error("reading the control-plane state for a recompute: {0}")]
    Store(#[from] StoreError),
    #[error("no previous route table to roll back to")]
    NoPrevious,
    #[error("the held route table stored by a rollback is unusable: {0}")]
    BadFreeze(String),
    #[error("the route-table build stopped: {0}")]
    Build(String),
    /// A standby control process does not build or roll back tables.
    #[error("this control process is a standby; the leader ({leader}) does this")]
    NotLeader { leader: String },
    /// Another control process took over: this one may no longer publish.
    #[error("leadership term {epoch} has ended: another control process leads now")]
    Fenced { epoch: u64 },
}

/// The event-driven recompute loop around [`build_route_table`].
pub struct Scheduler {
    store: Store,
    settings: ScheduleSettings,
    policy: Policy,
    geo: ArcSwap<GeoDb>,
    overrides: ArcSwap<Vec<Override>>,
    partitions: ArcSwap<PartitionTable>,
    table: SharedRouteTable,
    previous: std::sync::Mutex<Option<Arc<RouteTable>>>,
    build: Mutex<BuildState>,
    health: Arc<HealthMonitor>,
    version: AtomicU64,
    wake: Notify,
    last_duration_us: AtomicU64,
    recomputes: AtomicU64,
    /// Set by a rollback (and kept in the store): recomputes are held until
    /// [`Scheduler::resume`]. Changed only under the build lock.
    frozen: std::sync::atomic::AtomicBool,
    /// Stamped while the scheduler runs and its recomputes succeed (SPEC §7).
    confirmation: Arc<Confirmation>,
    /// Whether the last recompute succeeded (the run loop confirms only then).
    healthy: std::sync::atomic::AtomicBool,
    /// The version of every table published, for followers (map writer, NS-host stream).
    versions: tokio::sync::watch::Sender<u64>,
    /// What changed since the last recompute, as [`Scheduler::notify`] was told.
    pending: std::sync::Mutex<Option<Change>>,
    /// Whether everything pending is load reports ([`Scheduler::notify_load`]).
    pending_loads_only: std::sync::atomic::AtomicBool,
    /// When the last recompute started (for folding load reports together).
    last_build: std::sync::Mutex<Option<Instant>>,
    /// The partitions changed: the next build starts over.
    partitions_changed: std::sync::atomic::AtomicBool,
    /// The last answer changes, for the console's timeline.
    change_log: Arc<ChangeLog>,
    /// The recent tables and the encoded stream answers (route-table stream).
    history: TableHistory,
    /// Several control processes share the database (`crate::cluster`): every
    /// table is stored, fenced by `epoch`, before it is published.
    clustered: std::sync::atomic::AtomicBool,
    /// Whether this process builds and publishes (always, outside a cluster).
    leading: std::sync::atomic::AtomicBool,
    /// Where builds run.
    builder: Background,
    /// Where the change log's diffs run (beside builds, not ahead of the next one).
    change_logger: Background,
    /// The leadership term stamped on every table published (0 outside a cluster).
    epoch: AtomicU64,
    /// The next recompute publishes even when nothing changed (a new leader's first table).
    force_publish: std::sync::atomic::AtomicBool,
    /// Set when storing a table found the term ended.
    fenced: std::sync::atomic::AtomicBool,
    /// The leader's API URL, for a standby's refusals.
    leader_hint: std::sync::Mutex<String>,
    /// The nodes the last recompute read, and which were written since.
    node_cache: std::sync::Mutex<node_cache::NodeCache>,
    /// The zones, domains, rules and lines the last full read found.
    list_cache: std::sync::Mutex<list_cache::ListCache>,
    /// A standby's heartbeats not yet passed on to the leader ([`forward`]).
    outbox: std::sync::Mutex<forward::Outbox>,
    /// Woken when `outbox` gains a heartbeat.
    outbox_wake: Notify,
    /// When the next node alive by its heartbeats times out (wall-clock ms;
    /// `i64::MAX`: none): the run loop builds again then.
    next_timeout_ms: std::sync::atomic::AtomicI64,
}

impl Scheduler {
    pub fn new(
        store: Store,
        settings: ScheduleSettings,
        health: Arc<HealthMonitor>,
        geo: GeoDb,
        table: SharedRouteTable,
    ) -> Self {
        let partitions = PartitionTable::build(&geo, &[]);
        // Versions start at the wall clock so they keep increasing across restarts.
        let start = (now_ms().max(0) as u64).max(table.load().version);
        Scheduler {
            store,
            policy: settings.policy(),
            settings,
            geo: ArcSwap::from_pointee(geo),
            overrides: ArcSwap::from_pointee(Vec::new()),
            partitions: ArcSwap::from_pointee(partitions),
            table,
            previous: std::sync::Mutex::new(None),
            build: Mutex::new(BuildState::default()),
            health,
            version: AtomicU64::new(start),
            wake: Notify::new(),
            last_duration_us: AtomicU64::new(0),
            recomputes: AtomicU64::new(0),
            frozen: std::sync::atomic::AtomicBool::new(false),
            confirmation: Arc::new(Confirmation::new()),
            healthy: std::sync::atomic::AtomicBool::new(true),
            versions: tokio::sync::watch::Sender::new(0),
            pending: std::sync::Mutex::new(None),
            pending_loads_only: std::sync::atomic::AtomicBool::new(false),
            last_build: std::sync::Mutex::new(None),
            partitions_changed: std::sync::atomic::AtomicBool::new(true),
            change_log: Arc::new(ChangeLog::default()),
            history: TableHistory::default(),
            clustered: std::sync::atomic::AtomicBool::new(false),
            leading: std::sync::atomic::AtomicBool::new(true),
            epoch: AtomicU64::new(0),
            force_publish: std::sync::atomic::AtomicBool::new(false),
            builder: Background::start("lagran-build").expect("starting the route-table build thread"),
            change_logger: Background::start_nicer("lagran-changes", crate::background::REPORT_NICE)
                .expect("starting the change-log thread"),
            fenced: std::sync::atomic::AtomicBool::new(false),
            leader_hint: std::sync::Mutex::new(String::new()),
            node_cache: std::sync::Mutex::new(node_cache::NodeCache::default()),
            list_cache: std::sync::Mutex::new(list_cache::ListCache::default()),
            outbox: std::sync::Mutex::new(forward::Outbox::default()),
            outbox_wake: Notify::new(),
            next_timeout_ms: std::sync::atomic::AtomicI64::new(i64::MAX),
        }
    }

    pub fn table(&self) -> &SharedRouteTable {
        &self.table
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

    /// Replaces the geo data and recompiles the partitions with the current
    /// overrides. Call [`Scheduler::recompute`] afterwards to publish.
    pub fn set_geo(&self, geo: GeoDb) {
        let overrides = self.overrides.load();
        self.partitions.store(Arc::new(PartitionTable::build(&geo, &overrides)));
        self.partitions_changed.store(true, Ordering::SeqCst);
        self.geo.store(Arc::new(geo));
    }

    /// Replaces the overrides (CIDR -> location, they win over the files) and
    /// recompiles the partitions. Call [`Scheduler::recompute`] afterwards.
    pub fn set_overrides(&self, overrides: Vec<Override>) {
        let geo = self.geo.load();
        self.partitions.store(Arc::new(PartitionTable::build(&geo, &overrides)));
        self.partitions_changed.store(true, Ordering::SeqCst);
        self.overrides.store(Arc::new(overrides));
    }

    /// Reads the overrides from the store and applies them.
    pub async fn reload_overrides(&self) -> Result<usize, SchedulerError> {
        let list: Vec<Override> = self.store.list_geo_overrides().await?.iter().map(Override::from).collect();
        let n = list.len();
        self.set_overrides(list);
        Ok(n)
    }

    /// The overrides in force.
    pub fn overrides(&self) -> Arc<Vec<Override>> {
        self.overrides.load_full()
    }

    /// The health monitor whose verdicts every build takes.
    pub fn health(&self) -> &Arc<HealthMonitor> {
        &self.health
    }

    /// The scoring policy of every build.
    pub fn policy(&self) -> &Policy {
        &self.policy
    }

    /// What a recompute at `now` builds from: the store's records, all read
    /// now, and the health monitor's verdicts.
    pub async fn inputs_at(&self, now: i64) -> Result<Inputs, SchedulerError> {
        Ok(Inputs {
            nodes: self.store.list_nodes().await?,
            zones: self.store.list_zones().await?,
            domains: self.store.list_domains().await?,
            rules: self.store.list_rules().await?,
            lines: self.store.list_lines().await?,
            liveness: self.health.liveness(),
            now_ms: now,
        })
    }

    /// A copy of what the next recompute carries over (hysteresis choices,
    /// name ids), for a build that must not touch the real one (what-if).
    pub async fn build_state(&self) -> BuildState {
        let mut s = self.build.lock().await.clone();
        s.forget_record();
        s
    }

    /// The last answer changes, oldest first ([`changes::ChangeLog`]).
    pub fn change_log(&self) -> Vec<ChangeEvent> {
        self.change_log.events()
    }

    /// Duration of the last recompute, in microseconds, and how many ran.
    pub fn stats(&self) -> (u64, u64) {
        (self.last_duration_us.load(Ordering::Relaxed), self.recomputes.load(Ordering::Relaxed))
    }

    /// Asks the loop for a full recompute soon (coalesced).
    pub fn trigger(&self) {
        self.notify(Change::Everything);
    }

    /// Asks the loop for a recompute soon after `change` (coalesced with the
    /// changes still pending): node and liveness changes recompute only what
    /// they touch.
    pub fn notify(&self, change: Change) {
        self.queue(change, false);
    }

    /// [`Scheduler::notify`] for a node's load report (a heartbeat): reports
    /// are folded together for up to [`LOAD_SETTLE`] after the last recompute
    /// started, so a fleet's heartbeats cost a few builds a second, not one
    /// each. Any other change ends the wait.
    /// `node` is the row the heartbeat's statement returned: its figures go
    /// to the node cache, so the recompute does not read the node again.
    /// On a standby they go to the leader instead ([`forward`]).
    pub fn notify_load(&self, node: &crate::model::Node) {
        let load = node_cache::Load::of(node);
        if !self.leading() {
            self.outbox.lock().expect("outbox lock poisoned").put(&node.name, load);
            self.outbox_wake.notify_one();
            return;
        }
        self.hear(std::iter::once((node.name.clone(), load)));
    }

    /// Loads heard (here or by a standby) into the node cache, then queued.
    /// Queued as [`Change::Liveness`], not by name: the figures are in the
    /// cache already (or the node is marked to be read again), and a node
    /// change by name would make the build read that node once more.
    fn hear(&self, heard: impl IntoIterator<Item = forward::Heard>) {
        let mut any = false;
        {
            let mut cache = self.node_cache.lock().expect("node cache lock poisoned");
            for (name, load) in heard {
                match load {
                    Some(load) => cache.heard(&name, load),
                    None => cache.written(&name),
                }
                any = true;
            }
        }
        if any {
            self.enqueue(Change::Liveness, true);
        }
    }

    /// Waits until this standby holds heartbeats to pass on to the leader.
    pub async fn heard_to_forward(&self) {
        self.outbox_wake.notified().await;
    }

    /// The heartbeats this standby took since the last call, as
    /// `NOTIFY lagran_changes` payloads for the leader ([`forward::encode`]).
    pub fn take_heard(&self) -> Vec<String> {
        let heard = self.outbox.lock().expect("outbox lock poisoned").take();
        forward::encode(&heard)
    }

    /// A standby's notification, on the leader: heartbeats it took are laid
    /// over the cached nodes like this process's own; a change it made is
    /// recomputed after. A standby's [`Change::Liveness`] names no node (it
    /// merged several writes): every node is read again.
    pub fn notify_from_standby(&self, payload: &str) {
        match forward::decode(payload) {
            Some(Ok(heard)) => self.hear(heard),
            Some(Err(e)) => {
                tracing::warn!(error = %e, "a standby's heartbeats could not be read; recomputing in full");
                self.notify(Change::Everything);
            }
            None => {
                let change = Change::from_notification(payload);
                if change == Change::Liveness {
                    self.forget_nodes();
                }
                self.notify(change);
            }
        }
    }

    fn queue(&self, change: Change, load: bool) {
        self.note_nodes_written(&change);
        self.enqueue(change, load);
    }

    /// Adds `change` to what the loop will recompute after.
    fn enqueue(&self, change: Change, load: bool) {
        let mut pending = self.pending.lock().expect("pending-change lock poisoned");
        let loads_only = load && (pending.is_none() || self.pending_loads_only.load(Ordering::SeqCst));
        *pending = Some(match pending.take() {
            Some(p) => p.merge(change),
            None => change,
        });
        self.pending_loads_only.store(loads_only, Ordering::SeqCst);
        drop(pending);
        self.wake.notify_one();
    }

    /// Tells the node cache what `change` wrote: one node by name; the nodes
    /// as a whole for anything but a rule or liveness change (a merged node
    /// change is [`Change::Liveness`], its names told as each was queued).
    fn note_nodes_written(&self, change: &Change) {
        let mut cache = self.node_cache.lock().expect("node cache lock poisoned");
        match change {
            Change::Node(name) => cache.written(name),
            Change::Liveness | Change::Rules => {}
            Change::Everything => cache.invalidate(),
        }
    }

    /// The zones, domains, rules and lines to build from: as the last read
    /// found them after a node or liveness change, unless a rule has expired
    /// since (see [`list_cache`]); else read again, after the expired rules
    /// are purged.
    async fn read_lists(&self, change: &Change, now: i64) -> Result<list_cache::Lists, SchedulerError> {
        let cached = self.list_cache.lock().expect("list cache lock poisoned").get(change.allows_incremental(), now);
        if let Some(lists) = cached {
            return Ok(lists);
        }
        // Expired rules never apply (`Rule::is_active`); they are also purged, so the
        // store and `GET /api/v1/rules` do not keep them forever.
        match self.store.purge_expired_rules(now).await {
            Ok(0) => {}
            Ok(n) => tracing::info!(rules = n, "expired rules purged"),
            Err(e) => tracing::warn!(error = %e, "purging expired rules failed; they are ignored meanwhile"),
        }
        self.list_cache.lock().expect("list cache lock poisoned").invalidate();
        let lists = list_cache::Lists {
            zones: self.store.list_zones().await?,
            domains: self.store.list_domains().await?,
            rules: self.store.list_rules().await?,
            lines: self.store.list_lines().await?,
        };
        self.list_cache.lock().expect("list cache lock poisoned").put(&lists);
        Ok(lists)
    }

    /// The next recompute reads the zones, domains, rules and lines again
    /// (this process may have missed a write of them).
    fn forget_lists(&self) {
        self.list_cache.lock().expect("list cache lock poisoned").invalidate();
    }

    /// The nodes to build from: those written since the last recompute read
    /// again one by one, or every node (see [`node_cache`]).
    async fn read_nodes(&self) -> Result<Vec<crate::model::Node>, SchedulerError> {
        let plan = self.node_cache.lock().expect("node cache lock poisoned").plan();
        let names = match plan {
            node_cache::NodeRead::Some(names) => names,
            node_cache::NodeRead::All => {
                let nodes = self.store.list_nodes().await.inspect_err(|_| self.forget_nodes())?;
                let mut cache = self.node_cache.lock().expect("node cache lock poisoned");
                cache.put_all(nodes);
                return Ok(cache.nodes());
            }
        };
        let mut read = Vec::with_capacity(names.len());
        for name in names {
            let node = self.store.get_node(&name).await.inspect_err(|_| self.forget_nodes())?;
            read.push((name, node));
        }
        let mut cache = self.node_cache.lock().expect("node cache lock poisoned");
        for (name, node) in read {
            cache.put(&name, node);
        }
        Ok(cache.nodes())
    }

    /// The next recompute reads every node (a read failed half-way, or this
    /// process may have missed writes).
    fn forget_nodes(&self) {
        self.node_cache.lock().expect("node cache lock poisoned").invalidate();
    }

    /// How long the pending change may still wait: only load reports wait,
    /// until [`LOAD_SETTLE`] after the last recompute started.
    fn load_wait(&self) -> Option<Duration> {
        if !self.pending_loads_only.load(Ordering::SeqCst) {
            return None;
        }
        let last = (*self.last_build.lock().expect("last-build lock poisoned"))?;
        LOAD_SETTLE.checked_sub(last.elapsed()).filter(|d| !d.is_zero())
    }

    /// Ends when the next node alive by its heartbeats times out (never, if none).
    async fn heartbeat_timeout(&self) {
        let at = self.next_timeout_ms.load(Ordering::SeqCst);
        if at == i64::MAX {
            return std::future::pending().await;
        }
        tokio::time::sleep(Duration::from_millis(at.saturating_sub(now_ms()).max(0) as u64)).await;
    }

    /// Wakes on every published table (its version).
    pub fn subscribe(&self) -> tokio::sync::watch::Receiver<u64> {
        self.versions.subscribe()
    }

    /// Whether a rollback holds the table.
    pub fn frozen(&self) -> bool {
        self.frozen.load(Ordering::SeqCst)
    }

    /// When the control plane last confirmed its current table (this host's
    /// clock): the in-process responder, `/metrics` and the NS-host stream read it.
    pub fn confirmation(&self) -> &Arc<Confirmation> {
        &self.confirmation
    }

    /// The next version: above every one published, by this process or (the
    /// counter starts at the wall clock) an earlier one.
    fn next_version(&self) -> u64 {
        self.version.load(Ordering::SeqCst).max(self.table.load().version) + 1
    }

    /// Publishes `table` (its version becomes the newest), keeps the old one
    /// for rollback and logs the answers that moved, off the async runtime.
    /// Call with the build lock held.
    fn publish(&self, table: Arc<RouteTable>) -> Arc<RouteTable> {
        self.version.fetch_max(table.version, Ordering::SeqCst);
        let old = self.table.swap(table.clone());
        self.history.record(table.clone());
        self.versions.send_replace(table.version);
        if old.version != 0 {
            *self.previous.lock().expect("previous-table lock poisoned") = Some(old.clone());
        }
        if old.version != 0 {
            let (partitions, old, new) = (self.partitions.load_full(), old.clone(), table.clone());
            let log = self.change_log.clone();
            self.change_logger.spawn(move || log.record(changes::log_changes(&partitions, &old, &new)));
        }
        old
    }

    /// Restores a freeze recorded by a rollback before a restart: the held
    /// table is published again (under a new version) and recomputes stay
    /// held until [`Scheduler::resume`]. Returns whether a freeze was found.
    pub async fn restore_freeze(&self) -> Result<bool, SchedulerError> {
        let _guard = self.build.lock().await;
        let Some(f) = self.store.load_freeze().await? else { return Ok(false) };
        let held: RouteTable =
            serde_json::from_str(&f.table_json).map_err(|e| SchedulerError::BadFreeze(e.to_string()))?;
        let table =
            Arc::new(held.republished(self.next_version().max(f.version + 1), now_ms()).with_epoch(self.epoch()));
        self.store_clustered(&table).await?;
        self.frozen.store(true, Ordering::SeqCst);
        self.publish(table.clone());
        self.confirmation.confirm(now_ms());
        tracing::warn!(
            version = table.version,
            frozen_at_ms = f.frozen_at_ms,
            "route table still frozen by a rollback made before the restart (POST /api/v1/routes/resume)"
        );
        Ok(true)
    }

    /// Ends a rollback's freeze (in the store too); the next recompute
    /// publishes again.
    pub async fn resume(&self) -> Result<(), SchedulerError> {
        self.check_leading()?;
        let _guard = self.build.lock().await;
        self.store.clear_freeze().await?;
        if self.frozen.swap(false, Ordering::SeqCst) {
            tracing::info!("route table unfrozen; recomputes publish again");
        }
        Ok(())
    }

    /// Recomputes now and publishes the new table when it serves something
    /// new; returns the table in force. A recompute whose result serves the
    /// same as the current table ([`RouteTable::serves_same_as`]) publishes no
    /// version. While a rollback holds the table, nothing is recomputed and
    /// the held table is returned.
    pub async fn recompute(&self) -> Result<Arc<RouteTable>, SchedulerError> {
        self.recompute_after(Change::Everything).await
    }

    /// [`Scheduler::recompute`] after `change`: node and liveness changes
    /// re-rank and rebuild only what they touch (the table is the same as a
    /// full recompute's).
    pub async fn recompute_after(&self, change: Change) -> Result<Arc<RouteTable>, SchedulerError> {
        if !self.leading() {
            // A standby: the write is in the database; the leader recomputes what it touched.
            self.store.notify_change(&change.to_notification()).await?;
            return Ok(self.table.load_full());
        }
        let result = self.recompute_inner(change).await;
        self.healthy.store(result.is_ok(), Ordering::SeqCst);
        if result.is_ok() {
            self.confirmation.confirm(now_ms());
        }
        result
    }

    async fn recompute_inner(&self, change: Change) -> Result<Arc<RouteTable>, SchedulerError> {
        // Serialise whole recomputes, reads included: a recompute that read the
        // store before a write must not publish after the write's own recompute.
        // Rollbacks take the same lock, so the frozen check below cannot race one.
        let mut state = self.build.lock().await;
        if self.frozen() {
            tracing::warn!("route table frozen by a rollback: recompute skipped (POST /api/v1/routes/resume)");
            return Ok(self.table.load_full());
        }
        let now = now_ms();
        let reading = Instant::now();
        let lists = self.read_lists(&change, now).await?;
        self.note_nodes_written(&change);
        let list_cache::Lists { zones, domains, rules, lines } = lists;
        let nodes = self.read_nodes().await?;
        let inputs = Inputs { nodes, zones, domains, rules, lines, liveness: self.health.liveness(), now_ms: now };
        let next_timeout = inputs.liveness.next_timeout_ms(&inputs.nodes, now).unwrap_or(i64::MAX);
        self.next_timeout_ms.store(next_timeout, Ordering::SeqCst);
        let read = reading.elapsed();
        let started = Instant::now();
        *self.last_build.lock().expect("last-build lock poisoned") = Some(started);
        let version = self.next_version();
        let change = if self.partitions_changed.swap(false, Ordering::SeqCst) { Change::Everything } else { change };
        let current = self.table.load_full();
        // The build and the comparison run on the build thread, so DNS and API
        // tasks keep their runtime threads (and the CPU) while a large table compiles.
        let job = BuildJob {
            version,
            inputs,
            partitions: self.partitions.load_full(),
            settings: self.settings.clone(),
            policy: self.policy.clone(),
            state: std::mem::take(&mut *state),
            current: current.clone(),
            change,
        };
        let (table, next_state, same, times) =
            self.builder.run(move || job.run()).await.map_err(|e| SchedulerError::Build(e.to_string()))?;
        *state = next_state;
        let took = started.elapsed();
        self.last_duration_us.store(took.as_micros() as u64, Ordering::Relaxed);
        self.recomputes.fetch_add(1, Ordering::Relaxed);
        let forced = self.force_publish.load(Ordering::SeqCst);
        if same && !forced {
            tracing::debug!(
                version = current.version,
                read_ms = read.as_secs_f64() * 1e3,
                took_ms = took.as_secs_f64() * 1e3,
                build_ms = times.build.as_secs_f64() * 1e3,
                build_cpu_ms = times.build_cpu.as_secs_f64() * 1e3,
                compare_ms = (times.total - times.build).as_secs_f64() * 1e3,
                "recompute changed nothing; nothing published"
            );
            return Ok(current);
        }
        let table = Arc::new(table.with_epoch(self.epoch()));
        self.store_clustered(&table).await?;
        self.force_publish.store(false, Ordering::SeqCst);
        self.publish(table.clone());
        tracing::debug!(
            version,
            read_ms = read.as_secs_f64() * 1e3,
            took_ms = took.as_secs_f64() * 1e3,
            build_ms = times.build.as_secs_f64() * 1e3,
            build_cpu_ms = times.build_cpu.as_secs_f64() * 1e3,
            compare_ms = (times.total - times.build).as_secs_f64() * 1e3,
            "route table recomputed and published"
        );
        Ok(table)
    }

    /// Puts the previous table back (instant rollback) and holds it, across
    /// restarts too, until [`Scheduler::resume`]. The old content is
    /// republished under a new, higher version, so every follower (NS hosts,
    /// the XDP maps) takes it as the newest table. Takes the build lock: a
    /// recompute in flight finishes first and cannot publish over the rollback.
    pub async fn rollback(&self) -> Result<Arc<RouteTable>, SchedulerError> {
        self.check_leading()?;
        let _guard = self.build.lock().await;
        let prev =
            self.previous.lock().expect("previous-table lock poisoned").clone().ok_or(SchedulerError::NoPrevious)?;
        let table = Arc::new(prev.republished(self.next_version(), now_ms()).with_epoch(self.epoch()));
        let json = serde_json::to_string(&*table).map_err(|e| SchedulerError::BadFreeze(e.to_string()))?;
        // Stored first: a rollback the store did not record does not happen.
        self.store.save_freeze(table.version, &json).await?;
        self.store_clustered(&table).await?;
        self.frozen.store(true, Ordering::SeqCst);
        self.publish(table.clone());
        self.confirmation.confirm(now_ms());
        tracing::warn!(
            version = table.version,
            content_of = prev.version,
            "route table rolled back and frozen until resumed"
        );
        Ok(table)
    }

    /// The recent tables and encoded stream answers.
    pub fn history(&self) -> &TableHistory {
        &self.history
    }

    /// The leadership term stamped on the tables this process publishes.
    pub fn epoch(&self) -> u64 {
        self.epoch.load(Ordering::SeqCst)
    }

    /// Whether this process builds and publishes tables (always, outside a cluster).
    pub fn leading(&self) -> bool {
        self.leading.load(Ordering::SeqCst)
    }

    /// Whether storing a table found this process's term ended.
    pub fn fenced(&self) -> bool {
        self.fenced.load(Ordering::SeqCst)
    }

    fn check_leading(&self) -> Result<(), SchedulerError> {
        if self.leading() {
            return Ok(());
        }
        let leader = self.leader_hint.lock().expect("leader hint lock poisoned").clone();
        Err(SchedulerError::NotLeader { leader: if leader.is_empty() { "none yet".into() } else { leader } })
    }

    /// Joins a cluster of control processes as a standby: nothing is built or
    /// published here until [`Scheduler::lead`]; writes are passed to the
    /// leader; tables come from [`Scheduler::adopt`].
    pub fn join_cluster(&self) {
        self.clustered.store(true, Ordering::SeqCst);
        self.leading.store(false, Ordering::SeqCst);
    }

    /// The leader's API URL (for a standby's refusals).
    pub fn set_leader_hint(&self, leader: &str) {
        *self.leader_hint.lock().expect("leader hint lock poisoned") = leader.to_string();
    }

    /// Takes the lead under `epoch`: tables are numbered above `stored_max`
    /// (every version any leader stored) and the next recompute publishes
    /// even if nothing changed, so every NS host moves to the new epoch.
    pub async fn lead(&self, epoch: u64, stored_max: u64) {
        let _guard = self.build.lock().await;
        self.version.fetch_max(stored_max, Ordering::SeqCst);
        self.epoch.store(epoch, Ordering::SeqCst);
        self.fenced.store(false, Ordering::SeqCst);
        self.force_publish.store(true, Ordering::SeqCst);
        self.frozen.store(false, Ordering::SeqCst);
        // As a standby this process built nothing: the leader's writes went by.
        self.forget_nodes();
        self.forget_lists();
        self.outbox.lock().expect("outbox lock poisoned").take();
        self.leading.store(true, Ordering::SeqCst);
    }

    /// Stops leading (the term ended): back to a standby.
    pub fn step_down(&self) {
        self.leading.store(false, Ordering::SeqCst);
    }

    /// A standby takes a table the leader stored: published here (for the
    /// stream and reads) when it is newer than the one it has.
    pub async fn adopt(&self, table: RouteTable) -> bool {
        let _guard = self.build.lock().await;
        if self.leading() || table.position() <= self.table.load().position() {
            return false;
        }
        self.publish(Arc::new(table));
        true
    }

    /// Stores `table` before it is published, when clustered; a fenced store
    /// ends this process's lead.
    async fn store_clustered(&self, table: &Arc<RouteTable>) -> Result<(), SchedulerError> {
        if !self.clustered.load(Ordering::SeqCst) {
            return Ok(());
        }
        let t = table.clone();
        let json = tokio::task::spawn_blocking(move || serde_json::to_string(&*t))
            .await
            .map_err(|e| SchedulerError::Build(e.to_string()))?
            .map_err(|e| SchedulerError::Build(e.to_string()))?;
        if !self.store.store_route_table(table.epoch, table.version, &json).await? {
            self.fenced.store(true, Ordering::SeqCst);
            self.leading.store(false, Ordering::SeqCst);
            return Err(SchedulerError::Fenced { epoch: table.epoch });
        }
        Ok(())
    }

    /// Runs until `shutdown`: a recompute on every trigger and every `recompute_secs`.
    pub async fn run(self: Arc<Self>, shutdown: CancellationToken) {
        let mut tick = tokio::time::interval(Duration::from_secs(self.settings.recompute_secs));
        tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        // The scheduler confirms its table every second while it runs and its
        // last recompute succeeded, whether or not anything was published.
        let mut confirm = tokio::time::interval(Duration::from_secs(1));
        confirm.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            tokio::select! {
                _ = shutdown.cancelled() => return,
                _ = tick.tick() => {
                    // The periodic full recompute: the safety net under incremental ones.
                    if let Err(e) = self.recompute().await {
                        tracing::error!(error = %e, "recompute failed; the NS hosts keep the last table");
                    }
                    continue;
                }
                _ = self.wake.notified() => {}
                _ = self.heartbeat_timeout() => {
                    // A node alive by its heartbeats went silent for the timeout: it leaves the answers now.
                    self.next_timeout_ms.store(i64::MAX, Ordering::SeqCst);
                    self.enqueue(Change::Liveness, false);
                }
                _ = confirm.tick() => {
                    if self.healthy.load(Ordering::SeqCst) {
                        self.confirmation.confirm(now_ms());
                    }
                    continue;
                }
            }
            // Load reports settle first; a change of another kind wakes this wait.
            while let Some(wait) = self.load_wait() {
                tokio::select! {
                    _ = shutdown.cancelled() => return,
                    _ = tokio::time::sleep(wait) => break,
                    _ = self.wake.notified() => {}
                }
            }
            let change = {
                let mut pending = self.pending.lock().expect("pending-change lock poisoned");
                self.pending_loads_only.store(false, Ordering::SeqCst);
                pending.take()
            };
            // A wake-up whose change an earlier pass already took: nothing to do.
            let Some(change) = change else { continue };
            if let Err(e) = self.recompute_after(change).await {
                tracing::error!(error = %e, "recompute failed; the NS hosts keep the last table");
            }
        }
    }
}

/// One build, moved onto a blocking thread.
struct BuildJob {
    version: u64,
    inputs: Inputs,
    partitions: Arc<PartitionTable>,
    settings: ScheduleSettings,
    policy: Policy,
    state: BuildState,
    current: Arc<RouteTable>,
    change: Change,
}

impl BuildJob {
    /// The new table, the build state to keep, and whether the table serves
    /// the same as the current one.
    fn run(mut self) -> (RouteTable, BuildState, bool, BuildTimes) {
        let (wall, cpu) = (Instant::now(), thread_cpu_time());
        let table = build_route_table_after(
            self.version,
            &self.inputs,
            &self.partitions,
            &self.settings,
            &self.policy,
            &mut self.state,
            &self.change,
        );
        let built = (wall.elapsed(), thread_cpu_time().saturating_sub(cpu));
        let same = self.current.version != 0 && table.serves_same_as(&self.current);
        let times = BuildTimes { build: built.0, build_cpu: built.1, total: wall.elapsed() };
        (table, self.state, same, times)
    }
}

/// Where a recompute's time went on the build thread (logged at debug).
struct BuildTimes {
    /// Compiling the table.
    build: Duration,
    /// The build thread's CPU time while compiling: below `build` when other
    /// threads (the responder first) held the core.
    build_cpu: Duration,
    /// The build and the comparison with the current table.
    total: Duration,
}

/// This thread's CPU time so far.
fn thread_cpu_time() -> Duration {
    let mut ts = libc::timespec { tv_sec: 0, tv_nsec: 0 };
    // SAFETY: `ts` is a valid, writable timespec; the clock id is a constant.
    if unsafe { libc::clock_gettime(libc::CLOCK_THREAD_CPUTIME_ID, &mut ts) } != 0 {
        return Duration::ZERO;
    }
    Duration::new(ts.tv_sec as u64, ts.tv_nsec as u32)
}

#[cfg(test)]
mod tests;
