//! The scheduler: turns the control plane's state into immutable, versioned
//! route tables.
//!
//! - [`build`]: the pure compiler ([`build_route_table`]: state in, table out).
//! - this module: the running service. [`Scheduler`] reads the store, keeps the
//!   compiled partitions of the current geo data, recomputes on events (node, rule
//!   or health changes call [`Scheduler::recompute`] or [`Scheduler::trigger`]) and
//!   every `recompute_secs`, publishes each table through the shared handle, and
//!   keeps the previous one for rollback.
//! - [`decide`]: the decide/explain query ([`Scheduler::decide`]).
//! - [`changes`]: the change log written after each publish.
//! - [`geo_reload`]: replacing the geo data without a restart.

mod build;
mod changes;
mod decide;
pub mod geo_reload;

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use arc_swap::ArcSwap;
use tokio::sync::{Mutex, Notify};
use tokio_util::sync::CancellationToken;

pub use build::{BuildState, Inputs, NameIds, build_route_table};
pub use decide::{ClientQuery, Decision};

use crate::clock::now_ms;
use crate::config::ScheduleSettings;
use crate::engine::Policy;
use crate::geo::GeoDb;
use crate::health::HealthMonitor;
use crate::partition::{Override, PartitionTable};
use crate::route_table::{RouteTable, SharedRouteTable};
use crate::store::{Store, StoreError};

/// A scheduling failure.
#[derive(Debug, thiserror::Error)]
pub enum SchedulerError {
    #[error("reading the control-plane state for a recompute: {0}")]
    Store(#[from] StoreError),
    #[error("no previous route table to roll back to")]
    NoPrevious,
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
    /// Set by a rollback: recomputes are held until [`Scheduler::resume`].
    frozen: std::sync::atomic::AtomicBool,
    /// The version of every table published, for followers (map writer, NS-host stream).
    versions: tokio::sync::watch::Sender<u64>,
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
            versions: tokio::sync::watch::Sender::new(0),
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
        self.geo.store(Arc::new(geo));
    }

    /// Replaces the overrides (CIDR -> location, they win over the files) and
    /// recompiles the partitions. Call [`Scheduler::recompute`] afterwards.
    pub fn set_overrides(&self, overrides: Vec<Override>) {
        let geo = self.geo.load();
        self.partitions.store(Arc::new(PartitionTable::build(&geo, &overrides)));
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

    /// Duration of the last recompute, in microseconds, and how many ran.
    pub fn stats(&self) -> (u64, u64) {
        (self.last_duration_us.load(Ordering::Relaxed), self.recomputes.load(Ordering::Relaxed))
    }

    /// Asks the loop for a recompute soon (coalesced).
    pub fn trigger(&self) {
        self.wake.notify_one();
    }

    /// Wakes on every published table (its version).
    pub fn subscribe(&self) -> tokio::sync::watch::Receiver<u64> {
        self.versions.subscribe()
    }

    /// Whether a rollback holds the table.
    pub fn frozen(&self) -> bool {
        self.frozen.load(Ordering::SeqCst)
    }

    /// Ends a rollback's freeze; the next recompute publishes again.
    pub fn resume(&self) {
        if self.frozen.swap(false, Ordering::SeqCst) {
            tracing::info!("route table unfrozen; recomputes publish again");
        }
    }

    /// Recomputes now and publishes the new table; returns it. While a rollback
    /// holds the table, nothing is recomputed and the held table is returned.
    pub async fn recompute(&self) -> Result<Arc<RouteTable>, SchedulerError> {
        if self.frozen() {
            tracing::warn!("route table frozen by a rollback: recompute skipped (POST /api/v1/routes/resume)");
            return Ok(self.table.load_full());
        }
        // Serialise whole recomputes, reads included: a recompute that read the
        // store before a write must not publish after the write's own recompute.
        let mut state = self.build.lock().await;
        let inputs = Inputs {
            nodes: self.store.list_nodes().await?,
            zones: self.store.list_zones().await?,
            domains: self.store.list_domains().await?,
            rules: self.store.list_rules().await?,
            lines: self.store.list_lines().await?,
            liveness: self.health.liveness(),
            now_ms: now_ms(),
        };
        let started = Instant::now();
        let version = self.version.fetch_add(1, Ordering::SeqCst) + 1;
        let partitions = self.partitions.load();
        let table =
            Arc::new(build_route_table(version, &inputs, &partitions, &self.settings, &self.policy, &mut state));
        let old = self.table.swap(table.clone());
        self.versions.send_replace(table.version);
        changes::log_changes(&self.partitions.load(), &old, &table);
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
        let prev =
            self.previous.lock().expect("previous-table lock poisoned").take().ok_or(SchedulerError::NoPrevious)?;
        let current = self.table.swap(prev.clone());
        self.versions.send_replace(prev.version);
        *self.previous.lock().expect("previous-table lock poisoned") = Some(current);
        self.frozen.store(true, Ordering::SeqCst);
        tracing::warn!(version = prev.version, "route table rolled back and frozen until resumed");
        Ok(prev)
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
}
