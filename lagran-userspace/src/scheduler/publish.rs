//! Publishing: the table in force, the version counter, the rollback freeze
//! and the previous table, and the steps that put a table in force
//! (rollback, resume, a freeze restored after a restart, a standby's
//! adoption of the leader's table).

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};

use super::build_lock::BuildGuard;
use super::changes::{self, ChangeLog};
use super::{Scheduler, SchedulerError};
use crate::background::Background;
use crate::clock::now_ms;
use crate::partition::PartitionTable;
use crate::route_table::{RouteTable, SharedRouteTable};
use crate::table_stream::TableHistory;

/// Owns what publishing changes together: the table, its version counter,
/// the previous table (for rollback), the freeze a rollback sets, and the
/// followers told of each table. Every change of the table, the freeze or
/// the counter asks for the build lock ([`BuildGuard`]).
pub struct Publisher {
    table: SharedRouteTable,
    /// The highest version published, by this process or (the counter
    /// starts at the wall clock) an earlier one.
    version: AtomicU64,
    previous: std::sync::Mutex<Option<Arc<RouteTable>>>,
    /// Set by a rollback (and kept in the store): recomputes are held until
    /// resumed.
    frozen: AtomicBool,
    /// The next recompute publishes even when nothing changed (a new
    /// leader's first table).
    force_next: AtomicBool,
    /// The version of every table published, for followers (map writer, NS-host stream).
    versions: tokio::sync::watch::Sender<u64>,
    /// The recent tables and the encoded stream answers (route-table stream).
    history: TableHistory,
    /// The last answer changes, for the console's timeline.
    change_log: Arc<ChangeLog>,
    /// Where the change log's diffs run (beside builds, not ahead of the next one).
    change_logger: Background,
}

impl Publisher {
    pub fn new(table: SharedRouteTable) -> Publisher {
        // Versions start at the wall clock so they keep increasing across restarts.
        let start = (now_ms().max(0) as u64).max(table.load().version);
        Publisher {
            table,
            version: AtomicU64::new(start),
            previous: std::sync::Mutex::new(None),
            frozen: AtomicBool::new(false),
            force_next: AtomicBool::new(false),
            versions: tokio::sync::watch::Sender::new(0),
            history: TableHistory::default(),
            change_log: Arc::new(ChangeLog::default()),
            change_logger: Background::start_nicer("lagran-changes", crate::background::REPORT_NICE)
                .expect("starting the change-log thread"),
        }
    }

    pub fn table(&self) -> &SharedRouteTable {
        &self.table
    }

    pub fn history(&self) -> &TableHistory {
        &self.history
    }

    pub fn change_log(&self) -> &ChangeLog {
        &self.change_log
    }

    /// Wakes on every published table (its version).
    pub fn subscribe(&self) -> tokio::sync::watch::Receiver<u64> {
        self.versions.subscribe()
    }

    /// Whether a rollback holds the table.
    pub fn frozen(&self) -> bool {
        self.frozen.load(Ordering::SeqCst)
    }

    /// Whether the next recompute publishes even when nothing changed.
    pub fn forced(&self) -> bool {
        self.force_next.load(Ordering::SeqCst)
    }

    /// The next version: above every one published.
    pub fn next_version(&self) -> u64 {
        self.version.load(Ordering::SeqCst).max(self.table.load().version) + 1
    }

    /// The table a rollback puts back.
    fn previous(&self) -> Option<Arc<RouteTable>> {
        self.previous.lock().expect("previous-table lock poisoned").clone()
    }

    /// A new leadership term: versions go above `stored_max`, the next
    /// recompute publishes, and a freeze of the last term no longer holds.
    pub fn begin_term(&self, _: &BuildGuard, stored_max: u64) {
        self.version.fetch_max(stored_max, Ordering::SeqCst);
        self.force_next.store(true, Ordering::SeqCst);
        self.frozen.store(false, Ordering::SeqCst);
    }

    /// Publishes a recomputed table, ending a forced publish.
    pub fn publish_recomputed(&self, guard: &BuildGuard, table: Arc<RouteTable>, partitions: Arc<PartitionTable>) {
        self.force_next.store(false, Ordering::SeqCst);
        self.publish(guard, table, partitions);
    }

    /// Publishes a table and holds it until resumed.
    fn publish_frozen(&self, guard: &BuildGuard, table: Arc<RouteTable>, partitions: Arc<PartitionTable>) {
        self.frozen.store(true, Ordering::SeqCst);
        self.publish(guard, table, partitions);
    }

    /// Ends the freeze; whether there was one.
    fn unfreeze(&self, _: &BuildGuard) -> bool {
        self.frozen.swap(false, Ordering::SeqCst)
    }

    /// Publishes `table` (its version becomes the newest), keeps the old one
    /// for rollback and logs the answers that moved, off the async runtime.
    fn publish(&self, _: &BuildGuard, table: Arc<RouteTable>, partitions: Arc<PartitionTable>) {
        self.version.fetch_max(table.version, Ordering::SeqCst);
        let old = self.table.swap(table.clone());
        self.history.record(table.clone());
        self.versions.send_replace(table.version);
        if old.version != 0 {
            *self.previous.lock().expect("previous-table lock poisoned") = Some(old.clone());
            let log = self.change_log.clone();
            self.change_logger.spawn(move || log.record(changes::log_changes(&partitions, &old, &table)));
        }
    }
}

impl Scheduler {
    /// Puts the previous table back (instant rollback) and holds it, across
    /// restarts too, until [`Scheduler::resume`]. The old content is
    /// republished under a new, higher version, so every follower (NS hosts,
    /// the XDP maps) takes it as the newest table. Takes the build lock: a
    /// recompute in flight finishes first and cannot publish over the rollback.
    pub async fn rollback(&self) -> Result<Arc<RouteTable>, SchedulerError> {
        self.leadership.check_leading()?;
        let guard = self.build.lock().await;
        let prev = self.publisher.previous().ok_or(SchedulerError::NoPrevious)?;
        let version = self.publisher.next_version();
        let table = Arc::new(prev.republished(version, now_ms()).with_epoch(self.leadership.epoch()));
        let json = serde_json::to_string(&*table).map_err(|e| SchedulerError::BadFreeze(e.to_string()))?;
        // Stored first: a rollback the store did not record does not happen.
        self.store.save_freeze(table.version, &json).await?;
        self.store_clustered(&table).await?;
        self.publisher.publish_frozen(&guard, table.clone(), self.partitions());
        self.confirmation.confirm(now_ms());
        tracing::warn!(
            version = table.version,
            content_of = prev.version,
            "route table rolled back and frozen until resumed"
        );
        Ok(table)
    }

    /// Restores a freeze recorded by a rollback before a restart: the held
    /// table is published again (under a new version) and recomputes stay
    /// held until [`Scheduler::resume`]. Returns whether a freeze was found.
    pub async fn restore_freeze(&self) -> Result<bool, SchedulerError> {
        let guard = self.build.lock().await;
        let Some(f) = self.store.load_freeze().await? else { return Ok(false) };
        let held: RouteTable =
            serde_json::from_str(&f.table_json).map_err(|e| SchedulerError::BadFreeze(e.to_string()))?;
        let version = self.publisher.next_version().max(f.version + 1);
        let table = Arc::new(held.republished(version, now_ms()).with_epoch(self.leadership.epoch()));
        self.store_clustered(&table).await?;
        self.publisher.publish_frozen(&guard, table.clone(), self.partitions());
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
        self.leadership.check_leading()?;
        let guard = self.build.lock().await;
        self.store.clear_freeze().await?;
        if self.publisher.unfreeze(&guard) {
            tracing::info!("route table unfrozen; recomputes publish again");
        }
        Ok(())
    }

    /// A standby takes a table the leader stored: published here (for the
    /// stream and reads) when it is newer than the one it has.
    pub async fn adopt(&self, table: RouteTable) -> bool {
        let guard = self.build.lock().await;
        if self.leadership.leading() || table.position() <= self.publisher.table().load().position() {
            return false;
        }
        self.publisher.publish(&guard, Arc::new(table), self.partitions());
        true
    }

    /// Stores `table` before it is published, when clustered; a fenced store
    /// ends this process's lead.
    pub(super) async fn store_clustered(&self, table: &Arc<RouteTable>) -> Result<(), SchedulerError> {
        if !self.leadership.clustered() {
            return Ok(());
        }
        let t = table.clone();
        let json = tokio::task::spawn_blocking(move || serde_json::to_string(&*t))
            .await
            .map_err(|e| SchedulerError::Build(e.to_string()))?
            .map_err(|e| SchedulerError::Build(e.to_string()))?;
        if !self.store.store_route_table(table.epoch, table.version, &json).await? {
            self.leadership.fence();
            return Err(SchedulerError::Fenced { epoch: table.epoch });
        }
        Ok(())
    }
}
