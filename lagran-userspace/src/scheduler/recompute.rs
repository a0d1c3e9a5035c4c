//! Recomputing: the changes the scheduler is told of, the recompute itself
//! (read, build on the build thread, compare, store, publish) and the loop
//! that runs it.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};

use tokio_util::sync::CancellationToken;

use super::build_lock::BuildGuard;
use super::list_cache::Lists;
use super::node_cache::Load;
use super::{BuildState, Change, Inputs, Scheduler, SchedulerError, build_route_table, forward};
use crate::clock::now_ms;
use crate::engine::Policy;
use crate::model::Node;
use crate::partition::PartitionTable;
use crate::route_table::RouteTable;
use crate::scheduler::settings::ScheduleSettings;

/// How the recomputes went: the last one's duration, their count, and
/// whether the last one succeeded (the run loop confirms only then).
pub struct RecomputeStats {
    last_duration_us: AtomicU64,
    recomputes: AtomicU64,
    healthy: AtomicBool,
}

impl Default for RecomputeStats {
    fn default() -> RecomputeStats {
        RecomputeStats {
            last_duration_us: AtomicU64::new(0),
            recomputes: AtomicU64::new(0),
            healthy: AtomicBool::new(true),
        }
    }
}

impl RecomputeStats {
    /// Duration of the last recompute, in microseconds, and how many ran.
    pub fn get(&self) -> (u64, u64) {
        (self.last_duration_us.load(Ordering::Relaxed), self.recomputes.load(Ordering::Relaxed))
    }

    fn built(&self, took: Duration) {
        self.last_duration_us.store(took.as_micros() as u64, Ordering::Relaxed);
        self.recomputes.fetch_add(1, Ordering::Relaxed);
    }
}

impl Scheduler {
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
    /// are folded together for up to [`super::LOAD_SETTLE`] after the last
    /// recompute started, so a fleet's heartbeats cost a few builds a second,
    /// not one each. Any other change ends the wait.
    /// `node` is the row the heartbeat's statement returned: its figures go
    /// to the node cache, so the recompute does not read the node again.
    /// On a standby they go to the leader instead ([`forward`]).
    pub fn notify_load(&self, node: &Node) {
        let load = Load::of(node);
        if !self.leadership.leading() {
            self.forwarder.put(&node.name, load);
            return;
        }
        self.hear(std::iter::once((node.name.clone(), load)));
    }

    /// Loads heard (here or by a standby) into the node cache, then queued.
    /// Queued as [`Change::Liveness`], not by name: the figures are in the
    /// cache already (or the node is marked to be read again), and a node
    /// change by name would make the build read that node once more.
    fn hear(&self, heard: impl IntoIterator<Item = forward::Heard>) {
        let fail_static = self.health.fail_static();
        let heard = heard.into_iter().inspect(|(name, load)| {
            if let Some(load) = load {
                fail_static.heard(name, load.at_ms());
            }
        });
        if self.pending.hear(heard) {
            self.pending.enqueue(Change::Liveness, true);
        }
    }

    /// A standby's notification, on the leader: heartbeats it took are laid
    /// over the cached nodes like this process's own; a change it made is
    /// recomputed after. A standby's [`Change::Liveness`] names no node (it
    /// merged several writes): every node is read again.
    pub fn notify_from_standby(&self, payload: &str) {
        if payload == super::MEASURED {
            self.measurements_changed_elsewhere();
            self.notify(Change::Liveness);
            return;
        }
        match forward::decode(payload) {
            Some(Ok(heard)) => self.hear(heard),
            Some(Err(e)) => {
                tracing::warn!(error = %e, "a standby's heartbeats could not be read; recomputing in full");
                self.notify(Change::Everything);
            }
            None => {
                let change = Change::from_notification(payload);
                if change == Change::Liveness {
                    self.pending.forget_nodes();
                }
                self.notify(change);
            }
        }
    }

    pub(super) fn queue(&self, change: Change, load: bool) {
        self.pending.note_written(&change);
        self.pending.enqueue(change, load);
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
        if !self.leadership.leading() {
            // A standby: the write is in the database; the leader recomputes what it touched.
            self.store.notify_change(&change.to_notification()).await?;
            return Ok(self.table().load_full());
        }
        let result = self.recompute_locked(change).await;
        self.stats.healthy.store(result.is_ok(), Ordering::SeqCst);
        if result.is_ok() {
            self.confirmation.confirm(now_ms());
        }
        result
    }

    async fn recompute_locked(&self, change: Change) -> Result<Arc<RouteTable>, SchedulerError> {
        // Serialise whole recomputes, reads included: a recompute that read the
        // store before a write must not publish after the write's own recompute.
        // Rollbacks take the same lock, so the frozen check below cannot race one.
        let mut guard = self.build.lock().await;
        if self.publisher.frozen() {
            tracing::warn!("route table frozen by a rollback: recompute skipped (POST /api/v1/routes/resume)");
            return Ok(self.table().load_full());
        }
        let reading = Instant::now();
        let inputs = self.read_inputs(&change, now_ms()).await?;
        let signer = self.dnssec_keys(&change, &inputs).await?;
        let read = reading.elapsed();
        let started = Instant::now();
        self.pending.build_started(started);
        let change = if self.geography.take_changed() { Change::Everything } else { change };
        let current = self.table().load_full();
        let job = BuildJob {
            version: self.publisher.next_version(),
            inputs,
            partitions: self.partitions(),
            settings: self.settings.clone(),
            policy: self.policy.clone(),
            state: std::mem::take(&mut *guard),
            current: current.clone(),
            change,
            signer,
        };
        // The build and the comparison run on the build thread, so DNS and API
        // tasks keep their runtime threads (and the CPU) while a large table compiles.
        let built = self.builder.run(move || job.run()).await.map_err(|e| SchedulerError::Build(e.to_string()))?;
        *guard = built.state;
        if let Some(e) = built.signing_failed {
            return Err(SchedulerError::Build(format!("signing the DNSSEC zones: {e}")));
        }
        let took = started.elapsed();
        self.stats.built(took);
        let times = Timing { read, took, build: &built.times };
        if built.same && !self.publisher.forced() {
            times.log(current.version, "recompute changed nothing; nothing published");
            return Ok(current);
        }
        let table = Arc::new(built.table.with_epoch(self.leadership.epoch()));
        self.publish_recomputed(&guard, &table).await?;
        times.log(table.version, "route table recomputed and published");
        Ok(table)
    }

    /// The signer and the keys a build signs with: the keys are moved along
    /// their rollovers and read again on a full recompute (writes, rollovers
    /// asked for, the periodic one) and on the first; other builds take the
    /// last ones.
    async fn dnssec_keys(
        &self,
        change: &Change,
        inputs: &Inputs,
    ) -> Result<
        Option<(Arc<std::sync::Mutex<crate::dnssec::TableSigner>>, Arc<crate::dnssec::KeySnapshot>)>,
        SchedulerError,
    > {
        let Some(signing) = self.dnssec.get() else { return Ok(None) };
        let keys = match signing.keeper.last() {
            Some(keys) if *change != Change::Everything => keys,
            _ => {
                let view = crate::dnssec::ZonesView {
                    zones: &inputs.zones,
                    domains: &inputs.domains,
                    default_ttl: self.settings.ttl,
                };
                signing
                    .keeper
                    .prepare(&view, inputs.now_ms, true)
                    .await
                    .map_err(|e| SchedulerError::Build(format!("the DNSSEC keys: {e}")))?
            }
        };
        Ok(Some((signing.signer.clone(), keys)))
    }

    /// What a recompute at `now` builds from: the lists and nodes as the
    /// pending changes call for, and the health monitor's verdicts.
    async fn read_inputs(&self, change: &Change, now: i64) -> Result<Inputs, SchedulerError> {
        let Lists { zones, domains, rules, lines } = self.pending.lists(&self.store, change, now).await?;
        self.pending.note_written(change);
        let nodes = self.pending.nodes(&self.store).await?;
        let fail_static = self.health.fail_static();
        fail_static.retain_heard(|name| nodes.binary_search_by(|n| n.name.as_str().cmp(name)).is_ok());
        let mut liveness = self.health.liveness();
        let ratio = self.health.settings().max_withdraw_ratio;
        fail_static.set_held(self.guard.apply(&nodes, &mut liveness, now, ratio));
        self.load_measurements_if_due(now).await?;
        let latency = self.measurements.view(now);
        let inputs = Inputs { nodes, zones, domains, rules, lines, liveness, now_ms: now, latency };
        self.pending.set_next_timeout(inputs.liveness.next_timeout_ms(&inputs.nodes, now));
        Ok(inputs)
    }

    /// Stores (in a cluster) and publishes a recomputed table.
    async fn publish_recomputed(&self, guard: &BuildGuard<'_>, table: &Arc<RouteTable>) -> Result<(), SchedulerError> {
        self.store_clustered(table).await?;
        let old = self.table().load_full();
        self.publisher.publish_recomputed(guard, table.clone(), self.partitions());
        if super::decision_log::enabled() {
            let (nodes, liveness) = (self.pending.nodes(&self.store).await?, self.health.liveness());
            let inputs = super::decision_log::Inputs { nodes, liveness, now_ms: now_ms(), policy: self.policy.clone() };
            super::decision_log::spawn(self.partitions(), old, table.clone(), inputs);
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
        let mut write_probe = tokio::time::interval(Duration::from_secs(self.health.settings().interval_secs.max(1)));
        write_probe.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            tokio::select! {
                _ = shutdown.cancelled() => return,
                _ = write_probe.tick() => {
                    self.probe_store_writes().await;
                    continue;
                }
                _ = tick.tick() => {
                    // The periodic full recompute: the safety net under incremental ones.
                    if let Err(e) = self.recompute().await {
                        tracing::error!(error = %e, "recompute failed; the NS hosts keep the last table");
                    }
                    continue;
                }
                _ = self.pending.woken() => {}
                _ = self.pending.heartbeat_timeout() => {
                    // A node alive by its heartbeats went silent for the timeout: it leaves the answers now.
                    self.pending.enqueue(Change::Liveness, false);
                }
                _ = confirm.tick() => {
                    if self.stats.healthy.load(Ordering::SeqCst) {
                        self.confirmation.confirm(now_ms());
                    }
                    continue;
                }
            }
            // Load reports settle first; a change of another kind wakes this wait.
            while let Some(wait) = self.pending.load_wait() {
                tokio::select! {
                    _ = shutdown.cancelled() => return,
                    _ = tokio::time::sleep(wait) => break,
                    _ = self.pending.woken() => {}
                }
            }
            // A wake-up whose change an earlier pass already took: nothing to do.
            let Some(change) = self.pending.take() else { continue };
            if let Err(e) = self.recompute_after(change).await {
                tracing::error!(error = %e, "recompute failed; the NS hosts keep the last table");
            }
        }
    }
}

/// One build, moved onto the build thread.
struct BuildJob {
    version: u64,
    inputs: Inputs,
    partitions: Arc<PartitionTable>,
    settings: ScheduleSettings,
    policy: Policy,
    state: BuildState,
    current: Arc<RouteTable>,
    change: Change,
    /// Signs the signed zones of the table built.
    signer: Option<(Arc<std::sync::Mutex<crate::dnssec::TableSigner>>, Arc<crate::dnssec::KeySnapshot>)>,
}

/// What the build thread hands back.
struct Built {
    table: RouteTable,
    /// The build state to keep.
    state: BuildState,
    /// Whether the table serves the same as the current one.
    same: bool,
    times: BuildTimes,
    /// The table could not be signed: it must not be published.
    signing_failed: Option<String>,
}

impl BuildJob {
    fn run(mut self) -> Built {
        let (wall, cpu) = (Instant::now(), thread_cpu_time());
        let table = build_route_table(
            self.version,
            &self.inputs,
            &self.partitions,
            &self.settings,
            &self.policy,
            &mut self.state,
            &self.change,
        );
        let (table, signing_failed) = match &self.signer {
            None => (table, None),
            Some((signer, keys)) => {
                let now = u32::try_from(self.inputs.now_ms / 1000).unwrap_or(u32::MAX);
                let mut signer = signer.lock().unwrap_or_else(|e| e.into_inner());
                match signer.sign(&table, keys, now) {
                    Ok(signatures) => (table.with_signatures(signatures), None),
                    Err(e) => (table, Some(e.to_string())),
                }
            }
        };
        let built = (wall.elapsed(), thread_cpu_time().saturating_sub(cpu));
        let same = self.current.version != 0 && table.serves_same_as(&self.current);
        let times = BuildTimes { build: built.0, build_cpu: built.1, total: wall.elapsed() };
        Built { table, state: self.state, same, times, signing_failed }
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

/// A recompute's times, for its debug line.
struct Timing<'a> {
    read: Duration,
    took: Duration,
    build: &'a BuildTimes,
}

impl Timing<'_> {
    fn log(&self, version: u64, what: &str) {
        tracing::debug!(
            version,
            read_ms = self.read.as_secs_f64() * 1e3,
            took_ms = self.took.as_secs_f64() * 1e3,
            build_ms = self.build.build.as_secs_f64() * 1e3,
            build_cpu_ms = self.build.build_cpu.as_secs_f64() * 1e3,
            compare_ms = (self.build.total - self.build.build).as_secs_f64() * 1e3,
            "{what}"
        );
    }
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
