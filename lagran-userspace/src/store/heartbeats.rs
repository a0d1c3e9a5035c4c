//! Group commit of heartbeats: a fleet's agents each report every few
//! seconds, and 1 000 nodes make about a thousand writes a second. Written one
//! transaction each, every heartbeat waits for its own commit (on SQLite, a
//! WAL sync), and the store's threads took a third of the daemon's one core
//! in the bench's fleet step.
//!
//! [`Store::record_heartbeat`] hands each heartbeat to one writer task. The
//! writer takes every heartbeat waiting (up to [`MAX_BATCH`]), writes them in
//! one transaction, commits once and answers each caller with its own node.
//! A lone heartbeat is written at once, so nothing waits for a batch to fill:
//! batches form only while a commit is in progress, which is when they help.
//! A batch whose transaction fails is written again one heartbeat at a time,
//! so each caller gets its own error (a deleted node, say) and the others are
//! still recorded.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, OnceLock};

use tokio::sync::{mpsc, oneshot};

use super::nodes::{Heartbeat, heartbeat_update, node_from_row};
use super::{DbContext as _, Store, StoreError};
use crate::model::Node;

/// Most heartbeats written in one transaction.
pub const MAX_BATCH: usize = 512;
/// Heartbeats that may wait for the writer; callers beyond that wait to queue.
const QUEUE: usize = 4 * MAX_BATCH;

/// One heartbeat waiting for the writer, and where its node goes.
struct Pending {
    name: String,
    hb: Heartbeat,
    now_ms: i64,
    /// The agent's token hash the node must hold; `None`: verified by the caller.
    token_hash: Option<String>,
    /// The node written; `None`: no such node (with that token).
    reply: oneshot::Sender<Result<Option<Node>, StoreError>>,
}

/// The writer's queue, shared by every clone of a [`Store`]. The writer task
/// starts with the first heartbeat (on that caller's runtime) and ends when
/// the last clone of the store is dropped.
#[derive(Default)]
pub(super) struct HeartbeatQueue {
    tx: OnceLock<mpsc::Sender<Pending>>,
    /// Transactions the writer committed.
    commits: Arc<AtomicU64>,
}

impl HeartbeatQueue {
    pub(super) fn new() -> Arc<HeartbeatQueue> {
        Arc::new(HeartbeatQueue::default())
    }
}

impl Store {
    /// Records an agent's report: load figures and `last_heartbeat_ms = now_ms`;
    /// returns the updated node. Does not touch `status` (health decides that)
    /// nor `updated_at_ms`. For an agent the caller has verified (the global
    /// agent token); [`Store::record_heartbeat_of_token`] checks the node's own.
    /// Heartbeats arriving together share one transaction (see the module doc).
    pub async fn record_heartbeat(&self, name: &str, hb: &Heartbeat, now_ms: i64) -> Result<Node, StoreError> {
        self.queue_heartbeat(name, hb, now_ms, None).await?.ok_or_else(|| StoreError::not_found("node", name))
    }

    /// [`Store::record_heartbeat`] for an agent that presented `token`: the
    /// node is written only if it holds that token, in the same statement.
    /// `None`: no node of that name holds it (whether the node exists is not
    /// told apart, so agents cannot probe for node names).
    pub async fn record_heartbeat_of_token(
        &self,
        name: &str,
        hb: &Heartbeat,
        now_ms: i64,
        token: &str,
    ) -> Result<Option<Node>, StoreError> {
        self.queue_heartbeat(name, hb, now_ms, Some(super::nodes::hash_token(token))).await
    }

    async fn queue_heartbeat(
        &self,
        name: &str,
        hb: &Heartbeat,
        now_ms: i64,
        token_hash: Option<String>,
    ) -> Result<Option<Node>, StoreError> {
        hb.validate()?;
        let tx = self.heartbeats.tx.get_or_init(|| {
            let (tx, rx) = mpsc::channel(QUEUE);
            // The writer holds a store without the queue, so it cannot keep itself alive.
            let writer = Store { heartbeats: HeartbeatQueue::new(), ..self.clone() };
            tokio::spawn(writer.write_heartbeats(rx, self.heartbeats.commits.clone()));
            tx
        });
        let (reply, answer) = oneshot::channel();
        let pending = Pending { name: name.to_string(), hb: hb.clone(), now_ms, token_hash: token_hash.clone(), reply };
        if tx.send(pending).await.is_ok()
            && let Ok(result) = answer.await
        {
            return result;
        }
        // The writer is gone (its runtime shut down): write this one directly.
        self.record_heartbeat_alone(name, hb, now_ms, token_hash.as_deref()).await
    }

    /// A heartbeat the store could not write: the node as read, with the
    /// heartbeat laid over it in memory (nothing is written). With `token`,
    /// only a node holding it (`None` otherwise, as for a node that does not exist).
    pub async fn heartbeat_unwritten(
        &self,
        name: &str,
        hb: &Heartbeat,
        now_ms: i64,
        token: Option<&str>,
    ) -> Result<Option<Node>, StoreError> {
        hb.validate()?;
        if let Some(token) = token {
            let held = self.node_token_hash(name).await?;
            if !held.is_some_and(|h| super::nodes::verify_token(&h, token)) {
                return Ok(None);
            }
        }
        Ok(self.get_node(name).await?.map(|mut node| {
            hb.lay_over(&mut node, now_ms);
            node
        }))
    }

    /// Transactions the heartbeat writer has committed (each holds one or more heartbeats).
    pub fn heartbeat_commits(&self) -> u64 {
        self.heartbeats.commits.load(Ordering::Relaxed)
    }

    /// The writer: every waiting heartbeat in one transaction, until the
    /// queue closes.
    async fn write_heartbeats(self, mut rx: mpsc::Receiver<Pending>, commits: Arc<AtomicU64>) {
        let mut batch = Vec::with_capacity(MAX_BATCH);
        while rx.recv_many(&mut batch, MAX_BATCH).await > 0 {
            match self.write_batch(&batch).await {
                Ok(nodes) => {
                    commits.fetch_add(1, Ordering::Relaxed);
                    for (p, node) in batch.drain(..).zip(nodes) {
                        let _ = p.reply.send(Ok(node));
                    }
                }
                Err(e) => {
                    tracing::warn!(error = %e, heartbeats = batch.len(), "writing heartbeats together failed; writing them one at a time");
                    for p in batch.drain(..) {
                        let answer =
                            self.record_heartbeat_alone(&p.name, &p.hb, p.now_ms, p.token_hash.as_deref()).await;
                        let _ = p.reply.send(answer);
                    }
                }
            }
        }
    }

    /// Writes `batch` in one transaction; each heartbeat's node, `None` for
    /// a node that does not exist (or does not hold the heartbeat's token).
    async fn write_batch(&self, batch: &[Pending]) -> Result<Vec<Option<Node>>, StoreError> {
        let mut tx = self.begin().await?;
        let mut nodes = Vec::with_capacity(batch.len());
        for p in batch {
            let row = heartbeat_update(&p.name, &p.hb, p.now_ms, p.token_hash.as_deref())
                .fetch_optional(&mut *tx)
                .await
                .ctx(|| format!("recording a heartbeat of node {:?}", p.name))?;
            nodes.push(row.as_ref().map(node_from_row).transpose()?);
        }
        tx.commit().await.ctx(|| format!("committing {} heartbeats", batch.len()))?;
        Ok(nodes)
    }
}
