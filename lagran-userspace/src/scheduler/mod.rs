//! The scheduler: turns the control plane's state into immutable, versioned
//! route tables. A tour, one job per type and file:
//!
//! - [`build`]: the pure compiler ([`build_route_table`]: state in, table
//!   out), in stages (decide partitions, apply rules and lines, build prefix
//!   maps, splice), its reuse of the last build behind one type.
//! - this file: [`Scheduler`], the running service, made of the parts below,
//!   and its read accessors.
//! - [`recompute`]: the changes it is told of ([`Scheduler::notify`],
//!   [`Scheduler::trigger`]), the recompute (read, build on its own thread
//!   below the responder's priority, compare, store, publish; a recompute
//!   that changes nothing publishes nothing) and the loop running it on
//!   events and every `recompute_secs` while confirming the current table
//!   ([`Scheduler::confirmation`]).
//! - [`build_lock`]: the state carried from build to build under one lock,
//!   and the guard that proves it is held.
//! - [`publish`]: the [`publish::Publisher`] (the table in force, versions,
//!   the previous table, the rollback freeze) and rollback, resume, adoption.
//! - [`leadership`]: [`leadership::Leadership`], the role in a cluster of
//!   control processes and the term (epoch) that fences its tables.
//! - [`pending`]: what the next recompute must do: the queued changes and the
//!   store reads they call for ([`node_cache`], [`list_cache`]).
//! - [`forward`]: a standby's heartbeats on their way to the leader.
//! - [`withdraw_guard`]: no pool loses most of its nodes at once to heartbeat
//!   timeouts alone; [`store_writes`]: whether the store accepts writes.
//! - [`geography`]: the geo data, overrides and their partitions.
//! - [`decide`]: the decide/explain query ([`Scheduler::decide`]).
//! - [`changes`]: the change log, computed from the partition diff after each
//!   publish (on a blocking thread).
//! - [`decision_log`]: one structured line per partition whose answer a
//!   published table changed, with every candidate's score terms.
//! - [`geo_reload`]: replacing the geo data without a restart.

mod build;
mod build_lock;
mod changes;
mod decide;
pub mod decision_log;
mod forward;
pub mod geo_reload;
mod geography;
mod leadership;
mod list_cache;
mod measured;
mod node_cache;
mod pending;
mod publish;
mod recompute;
pub mod settings;
mod store_writes;
mod withdraw_guard;

use std::sync::Arc;
use std::time::Duration;

pub use build::{BuildState, Change, Inputs, NameIds, build_route_table};
pub use changes::{ChangeEvent, ChangeLog};
pub use decide::{ClientQuery, Decision, ServedAnswer};
pub use forward::Forwarder;
pub use leadership::Leadership;
pub use measured::MEASURED;

use crate::background::Background;
use crate::confirmation::Confirmation;
use crate::engine::Policy;
use crate::geo::GeoDb;
use crate::health::HealthMonitor;
use crate::partition::{Override, PartitionTable};
use crate::route_table::SharedRouteTable;
use crate::scheduler::settings::ScheduleSettings;
use crate::store::{Store, StoreError};
use crate::table_stream::TableHistory;

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

/// The event-driven recompute service around [`build_route_table`].
pub struct Scheduler {
    store: Store,
    settings: ScheduleSettings,
    policy: Policy,
    health: Arc<HealthMonitor>,
    geography: geography::Geography,
    build: build_lock::BuildLock,
    publisher: publish::Publisher,
    leadership: Leadership,
    pending: pending::Pending,
    forwarder: Forwarder,
    stats: recompute::RecomputeStats,
    /// Holds heartbeat timeouts of too much of a pool at once.
    guard: withdraw_guard::WithdrawGuard,
    /// Stamped while the scheduler runs and its recomputes succeed: the DNS
    /// responder and the NS hosts stop answering from a table nobody confirms.
    confirmation: Arc<Confirmation>,
    /// Where builds run.
    builder: Background,
    /// Signs the signed zones of every table built (set once at start).
    dnssec: std::sync::OnceLock<Arc<crate::dnssec::Signing>>,
    /// The measurement matrix ([`measured`]).
    measurements: Arc<crate::steering::Measurements>,
    /// The matrix is to be loaded from the store before the next build.
    measurements_due: std::sync::atomic::AtomicBool,
    /// The client prefixes the responders answered ([`geo_reload`]'s sample).
    answered: Arc<crate::answered::AnsweredTraffic>,
}

impl Scheduler {
    pub fn new(
        store: Store,
        settings: ScheduleSettings,
        health: Arc<HealthMonitor>,
        geo: GeoDb,
        table: SharedRouteTable,
    ) -> Self {
        Scheduler {
            store,
            policy: settings.policy(),
            settings,
            health,
            geography: geography::Geography::new(geo),
            build: build_lock::BuildLock::default(),
            publisher: publish::Publisher::new(table),
            leadership: Leadership::default(),
            pending: pending::Pending::default(),
            forwarder: Forwarder::default(),
            stats: recompute::RecomputeStats::default(),
            guard: withdraw_guard::WithdrawGuard::default(),
            confirmation: Arc::new(Confirmation::new()),
            builder: Background::start("lagran-build").expect("starting the route-table build thread"),
            dnssec: std::sync::OnceLock::new(),
            measurements: Arc::default(),
            measurements_due: std::sync::atomic::AtomicBool::new(true),
            answered: Arc::default(),
        }
    }

    /// Signs every table built from now on with the keys `signing` keeps
    /// (the zones with a DNSSEC policy, and those being withdrawn; the others
    /// stay unsigned). Once only.
    pub fn set_dnssec(&self, signing: Arc<crate::dnssec::Signing>) {
        let _ = self.dnssec.set(signing);
    }

    /// The DNSSEC keys and signer, when set.
    pub fn dnssec(&self) -> Option<&Arc<crate::dnssec::Signing>> {
        self.dnssec.get()
    }

    pub fn table(&self) -> &SharedRouteTable {
        self.publisher.table()
    }

    pub fn settings(&self) -> &ScheduleSettings {
        &self.settings
    }

    pub fn geo(&self) -> Arc<GeoDb> {
        self.geography.geo()
    }

    pub fn partitions(&self) -> Arc<PartitionTable> {
        self.geography.partitions()
    }

    /// Replaces the geo data and recompiles the partitions with the current
    /// overrides. Call [`Scheduler::recompute`] afterwards to publish.
    pub fn set_geo(&self, geo: GeoDb) {
        self.geography.set_geo(geo);
    }

    /// Replaces the overrides (CIDR -> location, they win over the files) and
    /// recompiles the partitions. Call [`Scheduler::recompute`] afterwards.
    pub fn set_overrides(&self, overrides: Vec<Override>) {
        self.geography.set_overrides(overrides);
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
        self.geography.overrides()
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
            latency: self.measurements.view(now),
        })
    }

    /// A copy of what the next recompute carries over (hysteresis choices,
    /// name ids), for a build that must not touch the real one (what-if).
    pub async fn build_state(&self) -> BuildState {
        let guard = self.build.lock().await;
        let mut s = (*guard).clone();
        s.forget_record();
        s
    }

    /// The last answer changes, oldest first ([`changes::ChangeLog`]).
    pub fn change_log(&self) -> Vec<ChangeEvent> {
        self.publisher.change_log().events()
    }

    /// Duration of the last recompute, in microseconds, and how many ran.
    pub fn stats(&self) -> (u64, u64) {
        self.stats.get()
    }

    /// Wakes on every published table (its version).
    pub fn subscribe(&self) -> tokio::sync::watch::Receiver<u64> {
        self.publisher.subscribe()
    }

    /// Whether a rollback holds the table.
    pub fn frozen(&self) -> bool {
        self.publisher.frozen()
    }

    /// When the control plane last confirmed its current table (this host's
    /// clock): the in-process responder, `/metrics` and the NS-host stream read it.
    pub fn confirmation(&self) -> &Arc<Confirmation> {
        &self.confirmation
    }

    /// The recent tables and encoded stream answers.
    pub fn history(&self) -> &TableHistory {
        self.publisher.history()
    }

    /// This process's role in a cluster and its term.
    pub fn leadership(&self) -> &Leadership {
        &self.leadership
    }

    /// Whether this process builds and publishes tables (always, outside a cluster).
    pub fn leading(&self) -> bool {
        self.leadership.leading()
    }

    /// Joins a cluster of control processes as a standby: nothing is built or
    /// published here until [`Scheduler::lead`]; writes are passed to the
    /// leader; tables come from [`Scheduler::adopt`].
    pub fn join_cluster(&self) {
        self.leadership.join_cluster();
    }

    /// A standby's heartbeats held for the leader.
    pub fn forwarder(&self) -> &Forwarder {
        &self.forwarder
    }
}

#[cfg(test)]
mod tests;
