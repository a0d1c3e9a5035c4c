//! What the next recompute must do: the changes queued since the last one
//! (folded together), the store reads they call for (the nodes written
//! since, [`node_cache`](super::node_cache); the zones, domains, rules and lines unless only
//! nodes changed, [`list_cache`](super::list_cache)), and when it may or must run (load
//! reports settle for [`LOAD_SETTLE`]; a node alive by its heartbeats times
//! out).

use std::sync::Mutex;
use std::sync::atomic::{AtomicI64, Ordering};
use std::time::{Duration, Instant};

use tokio::sync::Notify;

use super::forward::Heard;
use super::list_cache::{ListCache, Lists};
use super::node_cache::{NodeCache, NodeRead};
use super::{Change, LOAD_SETTLE, SchedulerError};
use crate::clock::now_ms;
use crate::model::Node;
use crate::store::Store;

/// The change the next recompute follows, and whether it is load reports
/// alone (those may wait for [`LOAD_SETTLE`]); one lock for both.
#[derive(Debug, Default)]
struct Queue {
    change: Option<Change>,
    loads_only: bool,
}

/// The next recompute's work: see the module doc.
pub struct Pending {
    queue: Mutex<Queue>,
    /// Woken when `queue` gains a change.
    wake: Notify,
    /// When the last recompute started (for folding load reports together).
    last_build: Mutex<Option<Instant>>,
    /// When the next node alive by its heartbeats times out (wall-clock ms;
    /// `i64::MAX`: none): the run loop builds again then.
    next_timeout_ms: AtomicI64,
    /// The nodes the last recompute read, and which were written since.
    nodes: Mutex<NodeCache>,
    /// The zones, domains, rules and lines the last full read found.
    lists: Mutex<ListCache>,
}

impl Default for Pending {
    fn default() -> Pending {
        Pending {
            queue: Mutex::default(),
            wake: Notify::new(),
            last_build: Mutex::new(None),
            next_timeout_ms: AtomicI64::new(i64::MAX),
            nodes: Mutex::default(),
            lists: Mutex::default(),
        }
    }
}

impl Pending {
    /// Adds `change` to what the loop will recompute after (`load`: it is a
    /// load report) and wakes the loop.
    pub fn enqueue(&self, change: Change, load: bool) {
        let mut queue = self.queue.lock().expect("pending-change lock poisoned");
        queue.loads_only = load && (queue.change.is_none() || queue.loads_only);
        queue.change = Some(match queue.change.take() {
            Some(p) => p.merge(change),
            None => change,
        });
        drop(queue);
        self.wake.notify_one();
    }

    /// The queued change, taken (`None`: an earlier pass took it).
    pub fn take(&self) -> Option<Change> {
        let mut queue = self.queue.lock().expect("pending-change lock poisoned");
        queue.loads_only = false;
        queue.change.take()
    }

    /// The queued change, left queued.
    #[cfg(test)]
    pub fn peek(&self) -> Option<Change> {
        self.queue.lock().expect("pending-change lock poisoned").change.clone()
    }

    /// Ends when a change is queued.
    pub async fn woken(&self) {
        self.wake.notified().await;
    }

    /// A recompute starts now.
    pub fn build_started(&self, at: Instant) {
        *self.last_build.lock().expect("last-build lock poisoned") = Some(at);
    }

    /// How long the pending change may still wait: only load reports wait,
    /// until [`LOAD_SETTLE`] after the last recompute started.
    pub fn load_wait(&self) -> Option<Duration> {
        if !self.queue.lock().expect("pending-change lock poisoned").loads_only {
            return None;
        }
        let last = (*self.last_build.lock().expect("last-build lock poisoned"))?;
        LOAD_SETTLE.checked_sub(last.elapsed()).filter(|d| !d.is_zero())
    }

    /// The next heartbeat timeout, as the last recompute's inputs found it.
    pub fn set_next_timeout(&self, at_ms: Option<i64>) {
        self.next_timeout_ms.store(at_ms.unwrap_or(i64::MAX), Ordering::SeqCst);
    }

    /// Ends when the next node alive by its heartbeats times out (never, if
    /// none); the timeout is then queued as a liveness change.
    pub async fn heartbeat_timeout(&self) {
        let at = self.next_timeout_ms.load(Ordering::SeqCst);
        if at == i64::MAX {
            return std::future::pending().await;
        }
        tokio::time::sleep(Duration::from_millis(at.saturating_sub(now_ms()).max(0) as u64)).await;
        self.next_timeout_ms.store(i64::MAX, Ordering::SeqCst);
    }

    /// Loads heard (here or by a standby) laid over the cached nodes (`None`:
    /// read the node again); whether there were any.
    pub fn hear(&self, heard: impl IntoIterator<Item = Heard>) -> bool {
        let mut any = false;
        let mut cache = self.nodes.lock().expect("node cache lock poisoned");
        for (name, load) in heard {
            match load {
                Some(load) => cache.heard(&name, load),
                None => cache.written(&name),
            }
            any = true;
        }
        any
    }

    /// Tells the node cache what `change` wrote: one node by name; the nodes
    /// as a whole for anything but a rule or liveness change (a merged node
    /// change is [`Change::Liveness`], its names told as each was queued).
    pub fn note_written(&self, change: &Change) {
        let mut cache = self.nodes.lock().expect("node cache lock poisoned");
        match change {
            Change::Node(name) => cache.written(name),
            Change::Liveness | Change::Rules => {}
            Change::Everything => cache.invalidate(),
        }
    }

    /// The next recompute reads every node (a read failed half-way, or this
    /// process may have missed writes).
    pub fn forget_nodes(&self) {
        self.nodes.lock().expect("node cache lock poisoned").invalidate();
    }

    /// The next recompute reads everything again.
    pub fn forget_reads(&self) {
        self.forget_nodes();
        self.lists.lock().expect("list cache lock poisoned").invalidate();
    }

    /// The zones, domains, rules and lines to build from: as the last read
    /// found them after a node or liveness change, unless a rule has expired
    /// since (see [`list_cache`](super::list_cache)); else read again, after the expired rules
    /// are purged.
    pub async fn lists(&self, store: &Store, change: &Change, now: i64) -> Result<Lists, SchedulerError> {
        let cached = self.lists.lock().expect("list cache lock poisoned").get(change.allows_incremental(), now);
        if let Some(lists) = cached {
            return Ok(lists);
        }
        // Expired rules never apply (`Rule::is_active`); they are also purged, so the
        // store and `GET /api/v1/rules` do not keep them forever.
        match store.purge_expired_rules(now).await {
            Ok(0) => {}
            Ok(n) => tracing::info!(rules = n, "expired rules purged"),
            Err(e) => tracing::warn!(error = %e, "purging expired rules failed; they are ignored meanwhile"),
        }
        self.lists.lock().expect("list cache lock poisoned").invalidate();
        let lists = Lists {
            zones: store.list_zones().await?,
            domains: store.list_domains().await?,
            rules: store.list_rules().await?,
            lines: store.list_lines().await?,
        };
        self.lists.lock().expect("list cache lock poisoned").put(&lists);
        Ok(lists)
    }

    /// The nodes to build from: those written since the last recompute read
    /// again one by one, or every node (see [`node_cache`](super::node_cache)).
    pub async fn nodes(&self, store: &Store) -> Result<Vec<Node>, SchedulerError> {
        let plan = self.nodes.lock().expect("node cache lock poisoned").plan();
        let names = match plan {
            NodeRead::Some(names) => names,
            NodeRead::All => {
                let nodes = store.list_nodes().await.inspect_err(|_| self.forget_nodes())?;
                let mut cache = self.nodes.lock().expect("node cache lock poisoned");
                cache.put_all(nodes);
                return Ok(cache.nodes());
            }
        };
        let mut read = Vec::with_capacity(names.len());
        for name in names {
            let node = store.get_node(&name).await.inspect_err(|_| self.forget_nodes())?;
            read.push((name, node));
        }
        let mut cache = self.nodes.lock().expect("node cache lock poisoned");
        for (name, node) in read {
            cache.put(&name, node);
        }
        Ok(cache.nodes())
    }
}
