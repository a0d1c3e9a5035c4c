//! Fail static: a fault of the control plane's own store never takes nodes
//! out of the answers.
//!
//! - Every heartbeat an agent sends is noted here, in memory, before the
//!   store is asked to write it ([`FailStatic::heard`]); liveness takes the
//!   newer of this record and the stored `last_heartbeat_ms`.
//! - Whether the store accepts writes ([`StoreWrites`]): heartbeats and a
//!   periodic probe write say so. While writes fail, heartbeat timeouts are
//!   suspended (the stored times stand still, so they say nothing of the
//!   nodes) and the fault is loud: `/healthz`, `/metrics`, the console.
//! - The nodes the scheduler holds in the answers although their heartbeats
//!   timed out ([`FailStatic::set_held`]), because too many of their pool
//!   went silent at once.
//! - When silence starts to count ([`FailStatic::silence_counts_from`]): no
//!   earlier than the moment the store accepted writes again, or this process
//!   took the lead. Heartbeats sent while the store refused them, or to
//!   another control process, were not lost to the nodes' fault: a node is
//!   given a whole timeout from then to be heard.

use std::collections::HashMap;
use std::sync::Mutex;
use std::sync::atomic::{AtomicBool, AtomicI64, AtomicU64, Ordering};

use serde::Serialize;

/// Whether the store accepts writes, and since when it does not.
#[derive(Debug)]
pub struct StoreWrites {
    writable: AtomicBool,
    errors_total: AtomicU64,
    failing: Mutex<Option<WriteFault>>,
    /// When writes last came back after failing (wall-clock ms; 0: never failed).
    resumed_ms: AtomicI64,
}

/// The store's writes fail: since when, and the last error. The error's
/// text stays in the log and in memory: `/healthz` is public, and the
/// database's words are not for its callers.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct WriteFault {
    pub since_ms: i64,
    #[serde(skip)]
    pub error: String,
}

impl Default for StoreWrites {
    fn default() -> StoreWrites {
        StoreWrites {
            writable: AtomicBool::new(true),
            errors_total: AtomicU64::new(0),
            failing: Mutex::new(None),
            resumed_ms: AtomicI64::new(0),
        }
    }
}

impl StoreWrites {
    /// A write succeeded; true when writes were failing until now.
    pub fn succeeded(&self) -> bool {
        let was_failing = !self.writable.swap(true, Ordering::SeqCst);
        if was_failing {
            self.resumed_ms.fetch_max(crate::clock::now_ms(), Ordering::SeqCst);
            let fault = self.failing.lock().expect("store-write lock poisoned").take();
            tracing::warn!(
                since_ms = fault.map(|f| f.since_ms),
                "the store accepts writes again: heartbeat timeouts apply again"
            );
        }
        was_failing
    }

    /// A write failed with `error` at `now_ms`; true when writes were
    /// succeeding until now.
    pub fn failed(&self, error: &str, now_ms: i64) -> bool {
        self.errors_total.fetch_add(1, Ordering::Relaxed);
        let was_writable = self.writable.swap(false, Ordering::SeqCst);
        let mut failing = self.failing.lock().expect("store-write lock poisoned");
        match failing.as_mut() {
            Some(f) => f.error = error.to_string(),
            None => *failing = Some(WriteFault { since_ms: now_ms, error: error.to_string() }),
        }
        if was_writable {
            tracing::error!(
                error,
                "the store refuses writes: heartbeat timeouts are suspended, liveness comes from what this process hears"
            );
        }
        was_writable
    }

    pub fn writable(&self) -> bool {
        self.writable.load(Ordering::SeqCst)
    }

    /// When writes last came back after failing (0: never).
    pub fn resumed_ms(&self) -> i64 {
        self.resumed_ms.load(Ordering::SeqCst)
    }

    /// Failed writes since start.
    pub fn errors_total(&self) -> u64 {
        self.errors_total.load(Ordering::Relaxed)
    }

    /// Since when and why writes fail (`None`: they do not).
    pub fn fault(&self) -> Option<WriteFault> {
        self.failing.lock().expect("store-write lock poisoned").clone()
    }
}

/// The in-memory side of liveness, shared by the API (heartbeats), the
/// scheduler (the guard) and the reports (`/healthz`, `/metrics`, console).
#[derive(Debug, Default)]
pub struct FailStatic {
    pub writes: StoreWrites,
    /// When each node was last heard from (wall-clock ms), whatever the store did with it.
    heard: Mutex<HashMap<String, i64>>,
    /// Nodes whose heartbeats timed out but which the scheduler keeps in the
    /// answers until a probe confirms them down (sorted).
    held: Mutex<Vec<String>>,
    /// When this process took the lead (wall-clock ms; 0: never).
    lead_from_ms: AtomicI64,
}

impl FailStatic {
    /// Node `name` was heard from at `at_ms` (a heartbeat, here or passed on by a standby).
    pub fn heard(&self, name: &str, at_ms: i64) {
        let mut heard = self.heard.lock().expect("heard lock poisoned");
        match heard.get_mut(name) {
            Some(t) => *t = (*t).max(at_ms),
            None => {
                heard.insert(name.to_string(), at_ms);
            }
        }
    }

    /// This process took the lead at `at_ms`: what it heard before as a
    /// standby was only what the leader passed on.
    pub fn took_lead(&self, at_ms: i64) {
        self.lead_from_ms.fetch_max(at_ms, Ordering::SeqCst);
    }

    /// The earliest moment a node's silence counts from (see the module doc).
    pub fn silence_counts_from(&self) -> i64 {
        self.writes.resumed_ms().max(self.lead_from_ms.load(Ordering::SeqCst))
    }

    /// Every node heard from, and when last.
    pub fn heard_times(&self) -> HashMap<String, i64> {
        self.heard.lock().expect("heard lock poisoned").clone()
    }

    /// Forgets nodes that no longer exist.
    pub fn retain_heard(&self, keep: impl Fn(&str) -> bool) {
        self.heard.lock().expect("heard lock poisoned").retain(|k, _| keep(k));
    }

    /// The nodes the scheduler holds in the answers (see the module doc).
    pub fn set_held(&self, held: Vec<String>) {
        *self.held.lock().expect("held lock poisoned") = held;
    }

    pub fn held(&self) -> Vec<String> {
        self.held.lock().expect("held lock poisoned").clone()
    }

    /// What `/healthz` and the console say of it; `None`: nothing to say.
    pub fn report(&self) -> Option<FailStaticReport> {
        let fault = self.writes.fault();
        let held = self.held();
        if fault.is_none() && held.is_empty() {
            return None;
        }
        let mut reasons = Vec::new();
        if let Some(f) = &fault {
            reasons.push(format!(
                "the store refuses writes since {} ms (its error is in the control process's log): \
                 heartbeat timeouts are suspended, no node is withdrawn for silence",
                f.since_ms
            ));
        }
        if !held.is_empty() {
            reasons.push(format!(
                "{} node(s) whose heartbeats timed out together are held in the answers until probes confirm them down",
                held.len()
            ));
        }
        Some(FailStaticReport { store_write_fault: fault, held_nodes: held, reasons })
    }

    /// The Prometheus lines of the fault.
    pub fn render_metrics(&self, out: &mut String) {
        use std::fmt::Write as _;
        let _ = writeln!(out, "# HELP lagran_store_writable Whether the store accepts writes (1) or refuses them (0).");
        let _ = writeln!(out, "# TYPE lagran_store_writable gauge");
        let _ = writeln!(out, "lagran_store_writable {}", u8::from(self.writes.writable()));
        let _ = writeln!(out, "# HELP lagran_store_write_errors_total Store writes that failed since start.");
        let _ = writeln!(out, "# TYPE lagran_store_write_errors_total counter");
        let _ = writeln!(out, "lagran_store_write_errors_total {}", self.writes.errors_total());
        let _ = writeln!(
            out,
            "# HELP lagran_withdrawals_held Nodes timed out by heartbeat but held in the answers until probes confirm them."
        );
        let _ = writeln!(out, "# TYPE lagran_withdrawals_held gauge");
        let _ = writeln!(out, "lagran_withdrawals_held {}", self.held.lock().expect("held lock poisoned").len());
    }
}

/// The fault as `/healthz` and the console show it.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct FailStaticReport {
    pub store_write_fault: Option<WriteFault>,
    pub held_nodes: Vec<String>,
    /// One sentence per fault, for people.
    pub reasons: Vec<String>,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_failing_store_is_reported_until_a_write_succeeds() {
        let f = FailStatic::default();
        assert_eq!(f.report(), None);
        assert!(f.writes.failed("disk I/O error", 1_000), "the first failure flips");
        assert!(!f.writes.failed("still read-only", 2_000), "later ones do not");
        let r = f.report().expect("a fault to report");
        assert_eq!(r.store_write_fault, Some(WriteFault { since_ms: 1_000, error: "still read-only".into() }));
        assert!(r.reasons[0].contains("suspended"), "{:?}", r.reasons);
        let public = serde_json::to_string(&r).unwrap();
        assert!(!public.contains("read-only") && public.contains("\"since_ms\":1000"), "{public}");
        let mut m = String::new();
        f.render_metrics(&mut m);
        assert!(m.contains("lagran_store_writable 0\n") && m.contains("lagran_store_write_errors_total 2\n"), "{m}");
        assert!(f.writes.succeeded(), "the first success flips back");
        assert!(!f.writes.succeeded());
        assert_eq!(f.report(), None);
        let mut m = String::new();
        f.render_metrics(&mut m);
        assert!(m.contains("lagran_store_writable 1\n") && m.contains("lagran_store_write_errors_total 2\n"), "{m}");
    }

    #[test]
    fn the_record_keeps_the_newest_time_heard() {
        let f = FailStatic::default();
        f.heard("a", 2_000);
        f.heard("a", 1_000);
        f.heard("b", 500);
        assert_eq!(f.heard_times().get("a"), Some(&2_000), "a late report does not move time back");
        f.retain_heard(|n| n == "a");
        assert_eq!(f.heard_times().len(), 1);
        f.set_held(vec!["a".into()]);
        let r = f.report().expect("held nodes are reported");
        assert_eq!(r.held_nodes, vec!["a".to_string()]);
        assert_eq!(r.store_write_fault, None);
    }
}
