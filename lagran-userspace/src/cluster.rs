//! Control-plane high availability on PostgreSQL: any number of
//! `lagran control` processes on one database, exactly one of which leads.
//!
//! - **Election.** Each process keeps a dedicated connection (outside the
//!   pool) and tries `pg_try_advisory_lock` on it every second. The holder
//!   leads; PostgreSQL releases the lock when its session ends (a killed
//!   process's socket closes at once; a silent network loss is noticed by TCP
//!   keepalives set on that session, about 11 s).
//! - **Epoch (fencing).** A new leader starts a term (one above
//!   `control_leader.epoch`) and stamps it on every table it publishes.
//!   Tables are stored with the term's row locked
//!   ([`Store::store_route_table`]): a deposed leader's store fails, it stops
//!   publishing, and NS hosts refuse tables from an epoch older than the
//!   newest they have seen ([`crate::table_stream`]).
//! - **The leader** runs the scheduler and the probes, publishes once under
//!   its new epoch even when nothing changed, stores every table, and stamps
//!   `control_leader.confirmed_at_ms` every second through the lock's
//!   connection while its recomputes succeed (the confirmation standbys pass
//!   on). A failed stamp (the session is gone, or the term is someone
//!   else's) ends its lead within seconds. It listens (`LISTEN
//!   lagran_changes`, dedicated connection) for the writes standbys take,
//!   from before its first table; when that connection comes back after a
//!   failure, it recomputes in full (what was notified meanwhile is lost).
//! - **A standby** serves reads and the route-table stream, loading each new
//!   table from the database (`LISTEN lagran_tables`, and every second), and
//!   confirms it only while the leader's stamp moves. Writes go to the
//!   database and wake the leader (`NOTIFY lagran_changes`); the figures of
//!   the heartbeats it takes go with the notification
//!   ([`crate::scheduler`]'s `forward`), so the leader does not read them back.
//!
//! On SQLite there is no cluster: a second control process on the same file
//! is refused ([`lock_sqlite`]).

use std::sync::Arc;
use std::time::Duration;

use sqlx::Connection;
use sqlx::postgres::{PgConnection, PgListener};
use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;

use crate::clock::now_ms;
use crate::route_table::RouteTable;
use crate::scheduler::Scheduler;
use crate::store::Store;

/// The advisory lock's key ("lagran" in ASCII).
const LOCK_KEY: i64 = 0x6c61_6772_616e;
/// How often the election and the leader's stamp run.
const TICK: Duration = Duration::from_secs(1);
/// A stamp or lock query slower than this ends the lead (or the attempt).
const QUERY_TIMEOUT: Duration = Duration::from_secs(5);
/// How long a standby gathers heartbeats before passing them on in one
/// notification (the leader folds load reports for `LOAD_SETTLE` anyway).
const FORWARD_FOLD: Duration = Duration::from_millis(50);

/// Starts the leader's own loops (scheduler, probes) under a term's token.
pub type LeaderLoops = Box<dyn Fn(CancellationToken) -> Vec<JoinHandle<()>> + Send + Sync>;

/// One control process of a cluster.
pub struct Cluster {
    pub store: Store,
    pub scheduler: Arc<Scheduler>,
    /// The PostgreSQL URL (for the dedicated connections).
    pub database_url: String,
    /// This process's control API URL, as the others and the operators see it.
    pub advertise: String,
}

/// Why a step of the election failed (logged; the loop goes on).
fn brief(e: &dyn std::fmt::Display) -> String {
    e.to_string()
}

async fn next_notification(l: &mut Option<PgListener>) -> Result<String, sqlx::Error> {
    match l {
        Some(l) => l.recv().await.map(|n| n.payload().to_string()),
        None => std::future::pending().await,
    }
}

async fn listen(url: &str, channel: &str) -> Option<PgListener> {
    let attempt = async {
        let mut l = PgListener::connect(url).await?;
        l.listen(channel).await?;
        Ok::<_, sqlx::Error>(l)
    };
    match tokio::time::timeout(QUERY_TIMEOUT, attempt).await {
        Ok(Ok(l)) => Some(l),
        Ok(Err(e)) => {
            tracing::warn!(channel, error = %brief(&e), "cannot LISTEN; polling every second meanwhile");
            None
        }
        Err(_) => None,
    }
}

impl Cluster {
    /// Runs until `shutdown`: a standby until this process takes the lock,
    /// then the leader until its term ends, then a standby again.
    pub async fn run(self, leader_loops: LeaderLoops, shutdown: CancellationToken) {
        self.scheduler.join_cluster();
        loop {
            let Some(lock) = self.stand_by(&shutdown).await else { return };
            self.lead(lock, &leader_loops, &shutdown).await;
            if shutdown.is_cancelled() {
                return;
            }
        }
    }

    /// Follows the leader's tables until this process holds the lock; returns
    /// the connection holding it (`None` on shutdown).
    async fn stand_by(&self, shutdown: &CancellationToken) -> Option<PgConnection> {
        let mut tables: Option<PgListener> = None;
        let mut lock: Option<PgConnection> = None;
        let mut last_stamp: Option<i64> = None;
        let mut tick = tokio::time::interval(TICK);
        tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            self.follow(&mut last_stamp).await;
            if lock.is_none() {
                lock = self.lock_connection().await;
            }
            if let Some(conn) = lock.as_mut() {
                let attempt = sqlx::query_scalar::<_, bool>("SELECT pg_try_advisory_lock($1)").bind(LOCK_KEY);
                match tokio::time::timeout(QUERY_TIMEOUT, attempt.fetch_one(&mut *conn)).await {
                    Ok(Ok(true)) => return lock,
                    Ok(Ok(false)) => {}
                    Ok(Err(e)) => {
                        tracing::warn!(error = %brief(&e), "the election's connection failed; reconnecting");
                        lock = None;
                    }
                    Err(_) => lock = None,
                }
            }
            if tables.is_none() {
                tables = listen(&self.database_url, "lagran_tables").await;
            }
            // Until the next look at the term and the tables, heartbeats taken here go to the leader.
            loop {
                tokio::select! {
                    _ = shutdown.cancelled() => return None,
                    _ = tick.tick() => break,
                    n = next_notification(&mut tables) => {
                        if n.is_err() {
                            tables = None;
                        }
                        break;
                    }
                    _ = self.scheduler.forwarder().heard() => self.forward_heartbeats().await,
                }
            }
        }
    }

    /// Passes the heartbeats this standby took on to the leader
    /// (`NOTIFY lagran_changes`), after [`FORWARD_FOLD`] to gather a burst.
    async fn forward_heartbeats(&self) {
        tokio::time::sleep(FORWARD_FOLD).await;
        for payload in self.scheduler.forwarder().take_payloads() {
            if let Err(e) = self.store.notify_change(&payload).await {
                tracing::warn!(
                    error = %e,
                    "cannot pass heartbeats on to the leader; its periodic full recompute reads them"
                );
                return;
            }
        }
    }

    /// A dedicated connection for the lock, with TCP keepalives so the server
    /// notices a vanished leader within seconds.
    async fn lock_connection(&self) -> Option<PgConnection> {
        let attempt = async {
            let mut c = PgConnection::connect(&self.database_url).await?;
            for set in
                ["SET tcp_keepalives_idle = 5", "SET tcp_keepalives_interval = 2", "SET tcp_keepalives_count = 3"]
            {
                sqlx::query(set).execute(&mut c).await?;
            }
            Ok::<_, sqlx::Error>(c)
        };
        match tokio::time::timeout(QUERY_TIMEOUT, attempt).await {
            Ok(Ok(c)) => Some(c),
            Ok(Err(e)) => {
                tracing::warn!(error = %brief(&e), "cannot open the election's connection");
                None
            }
            Err(_) => None,
        }
    }

    /// A standby's step: passes the leader's confirmation on and loads a newer table.
    async fn follow(&self, last_stamp: &mut Option<i64>) {
        match self.store.leader_term().await {
            Ok(Some(term)) => {
                self.scheduler.leadership().set_leader_hint(&term.holder);
                // Confirm only when the leader's stamp moved since the last look.
                if last_stamp.is_some_and(|s| s != term.confirmed_at_ms) && term.confirmed_at_ms != 0 {
                    self.scheduler.confirmation().confirm(now_ms());
                }
                *last_stamp = Some(term.confirmed_at_ms);
            }
            Ok(None) => {}
            Err(e) => tracing::warn!(error = %e, "cannot read the leadership term"),
        }
        let stored = match self.store.latest_route_table().await {
            Ok(Some(s)) => s,
            Ok(None) => return,
            Err(e) => {
                tracing::warn!(error = %e, "cannot read the newest route table");
                return;
            }
        };
        if (stored.epoch, stored.version) <= self.scheduler.table().load().position() {
            return;
        }
        let parsed = tokio::task::spawn_blocking(move || serde_json::from_str::<RouteTable>(&stored.table_json)).await;
        match parsed {
            Ok(Ok(t)) => {
                let (epoch, version) = t.position();
                if self.scheduler.adopt(t).await {
                    tracing::info!(epoch, version, "route table loaded from the leader");
                }
            }
            Ok(Err(e)) => tracing::error!(error = %e, "the newest stored route table is unusable"),
            Err(e) => tracing::error!(error = %e, "loading the newest route table stopped"),
        }
    }

    /// Leads until the term ends or `shutdown`; then releases the lock.
    async fn lead(&self, mut lock: PgConnection, leader_loops: &LeaderLoops, shutdown: &CancellationToken) {
        let started = async {
            let epoch = self.store.begin_leader_term(&self.advertise, now_ms()).await?;
            let stored_max = self.store.max_route_table_version().await?;
            Ok::<_, crate::store::StoreError>((epoch, stored_max))
        };
        let (epoch, stored_max) = match started.await {
            Ok(v) => v,
            Err(e) => {
                tracing::error!(error = %e, "cannot start a leadership term; standing by");
                let _ = lock.close().await;
                return;
            }
        };
        self.scheduler.lead(epoch, stored_max).await;
        self.scheduler.leadership().set_leader_hint(&self.advertise);
        tracing::warn!(epoch, api = %self.advertise, "this control process leads the cluster");
        // Listening before the first table reads the store: a standby's write after that read is heard.
        let mut changes = listen(&self.database_url, "lagran_changes").await;
        // The first table of the term: the held rollback, or a fresh build, published even if unchanged.
        let first = match self.scheduler.restore_freeze().await {
            Ok(true) => Ok(()),
            Ok(false) => self.scheduler.recompute().await.map(|_| ()),
            Err(e) => Err(e),
        };
        if let Err(e) = first {
            tracing::error!(error = %e, "the new leader's first table failed; the periodic recompute retries");
        }
        let term = shutdown.child_token();
        let loops = leader_loops(term.clone());
        let mut tick = tokio::time::interval(TICK);
        tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        let ended = loop {
            tokio::select! {
                _ = shutdown.cancelled() => break "shutdown",
                _ = tick.tick() => {
                    if self.scheduler.leadership().fenced() {
                        break "a table could not be stored under this term";
                    }
                    // The stamp through the lock's own session: it proves the lock is still held.
                    let stamp = sqlx::query("UPDATE control_leader SET confirmed_at_ms = $1 WHERE id = 1 AND epoch = $2")
                        .bind(self.scheduler.confirmation().last_ms())
                        .bind(i64::try_from(epoch).unwrap_or(i64::MAX));
                    match tokio::time::timeout(QUERY_TIMEOUT, stamp.execute(&mut lock)).await {
                        Ok(Ok(r)) if r.rows_affected() == 1 => {}
                        Ok(Ok(_)) => break "another control process started a newer term",
                        Ok(Err(_)) | Err(_) => break "the election's connection failed",
                    }
                    if changes.is_none() {
                        changes = listen(&self.database_url, "lagran_changes").await;
                        if changes.is_some() {
                            // What standbys notified while nobody listened is lost: the
                            // caches (nodes, lists) may be behind, so read everything.
                            self.scheduler.trigger();
                        }
                    }
                }
                n = next_notification(&mut changes) => match n {
                    Ok(what) => {
                        if what == "overrides"
                            && let Err(e) = self.scheduler.reload_overrides().await
                        {
                            tracing::error!(error = %e, "reloading the geo overrides a standby wrote failed");
                        }
                        self.scheduler.notify_from_standby(&what);
                    }
                    Err(_) => changes = None,
                },
            }
        };
        self.scheduler.leadership().step_down();
        term.cancel();
        for l in loops {
            let _ = l.await;
        }
        let _ = tokio::time::timeout(QUERY_TIMEOUT, lock.close()).await;
        if ended != "shutdown" {
            tracing::error!(epoch, reason = ended, "this control process no longer leads; standing by");
        }
    }
}

/// Why a second control process on one SQLite file is refused.
#[derive(Debug, thiserror::Error)]
pub enum SqliteLockError {
    #[error(
        "another lagran process already runs the control plane on the SQLite database {path}: only one may; \
         run several control processes on PostgreSQL (DATABASE_URL=postgres://…)"
    )]
    Held { path: String },
    #[error("locking the SQLite database {path}: {source}")]
    Io { path: String, source: std::io::Error },
}

/// Takes an exclusive lock on the SQLite database file for this process's
/// lifetime (kept while the returned file is open).
pub fn lock_sqlite(path: &std::path::Path) -> Result<std::fs::File, SqliteLockError> {
    use std::os::fd::AsRawFd;
    let shown = path.display().to_string();
    let file = std::fs::File::options()
        .read(true)
        .open(path)
        .map_err(|source| SqliteLockError::Io { path: shown.clone(), source })?;
    // SAFETY: flock on a descriptor this function owns; no memory is passed.
    let rc = unsafe { libc::flock(file.as_raw_fd(), libc::LOCK_EX | libc::LOCK_NB) };
    if rc == 0 {
        return Ok(file);
    }
    let err = std::io::Error::last_os_error();
    if err.raw_os_error() == Some(libc::EWOULDBLOCK) {
        return Err(SqliteLockError::Held { path: shown });
    }
    Err(SqliteLockError::Io { path: shown, source: err })
}

#[cfg(test)]
mod tests {
    use crate::scheduler::Change;

    #[test]
    fn a_standbys_change_reaches_the_leader_as_it_was() {
        for c in [Change::Node("gz-01".into()), Change::Liveness, Change::Rules, Change::Everything] {
            assert_eq!(Change::from_notification(&c.to_notification()), c);
        }
        assert_eq!(Change::from_notification("overrides"), Change::Everything, "anything else: a full recompute");
    }

    #[test]
    fn a_second_holder_of_the_sqlite_file_is_refused() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("lagran.db");
        std::fs::write(&path, b"").unwrap();
        let first = super::lock_sqlite(&path).unwrap();
        let second = super::lock_sqlite(&path).unwrap_err();
        assert!(second.to_string().contains("PostgreSQL"), "{second}");
        drop(first);
        super::lock_sqlite(&path).expect("free again once the first holder is gone");
    }
}
