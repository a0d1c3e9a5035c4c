//! Keeps the daemon's long-running background tasks (the recompute loop, the
//! probes, the SIGHUP reloads, an NS host's table follower) alive.
//!
//! Each task runs in its own tokio task; when it panics, the panic is logged
//! with the task's name, the daemon's `/healthz` answers `503` naming it, and
//! the task is started again after a short pause (doubling up to
//! [`MAX_RESTART_DELAY`] while it keeps panicking). `/healthz` stays `503` for
//! [`UNHEALTHY_AFTER_PANIC`] after the last panic, so a monitor polling every
//! few seconds sees it, and a task that panics in a loop keeps it there. A task
//! that returns normally (shutdown) is not restarted.

use std::collections::BTreeMap;
use std::future::Future;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;

/// How long `/healthz` reports a task's panic.
pub const UNHEALTHY_AFTER_PANIC: Duration = Duration::from_secs(60);
/// The first pause before a restart.
pub const FIRST_RESTART_DELAY: Duration = Duration::from_millis(200);
/// The longest pause before a restart.
pub const MAX_RESTART_DELAY: Duration = Duration::from_secs(10);

/// What is known of one task's panics.
#[derive(Clone, Debug)]
struct Panics {
    count: u64,
    last: Instant,
    message: String,
}

/// The daemon's supervised tasks.
#[derive(Debug, Default)]
pub struct Supervisor {
    panics: Mutex<BTreeMap<&'static str, Panics>>,
}

/// A task that panicked recently, for `/healthz`.
#[derive(Clone, Debug, PartialEq, Eq, serde::Serialize)]
pub struct Panicked {
    pub task: &'static str,
    pub panics: u64,
    pub seconds_ago: u64,
    pub message: String,
}

fn panic_message(e: tokio::task::JoinError) -> String {
    match e.try_into_panic() {
        Ok(p) => p
            .downcast_ref::<&str>()
            .map(|s| s.to_string())
            .or_else(|| p.downcast_ref::<String>().cloned())
            .unwrap_or_else(|| "a panic without a message".to_string()),
        Err(e) => e.to_string(),
    }
}

impl Supervisor {
    pub fn new() -> Arc<Self> {
        Arc::default()
    }

    /// Runs `make()` as task `name` until it returns or `shutdown`, starting it
    /// again whenever it panics.
    pub fn spawn<F, Fut>(self: &Arc<Self>, name: &'static str, shutdown: CancellationToken, make: F) -> JoinHandle<()>
    where
        F: Fn() -> Fut + Send + 'static,
        Fut: Future<Output = ()> + Send + 'static,
    {
        let this = self.clone();
        tokio::spawn(async move {
            let mut delay = FIRST_RESTART_DELAY;
            loop {
                let started = Instant::now();
                let err = match tokio::spawn(make()).await {
                    Ok(()) => return,
                    Err(e) if e.is_panic() => e,
                    Err(_) => return, // cancelled: the runtime is going down
                };
                let message = panic_message(err);
                let count = this.record(name, &message);
                if shutdown.is_cancelled() {
                    return;
                }
                if started.elapsed() > MAX_RESTART_DELAY * 6 {
                    delay = FIRST_RESTART_DELAY; // it ran well for a while: not a crash loop
                }
                tracing::error!(task = name, panics = count, restart_in = ?delay, error = %message, "background task panicked; restarting it");
                tokio::select! {
                    () = shutdown.cancelled() => return,
                    () = tokio::time::sleep(delay) => {}
                }
                delay = (delay * 2).min(MAX_RESTART_DELAY);
                tracing::info!(task = name, "background task restarted");
            }
        })
    }

    fn record(&self, name: &'static str, message: &str) -> u64 {
        let mut panics = self.panics.lock().unwrap_or_else(|e| e.into_inner());
        let p = panics.entry(name).or_insert(Panics { count: 0, last: Instant::now(), message: String::new() });
        p.count += 1;
        p.last = Instant::now();
        p.message = message.to_string();
        p.count
    }

    /// Tasks that panicked within [`UNHEALTHY_AFTER_PANIC`]; empty = healthy.
    pub fn recent_panics(&self) -> Vec<Panicked> {
        let panics = self.panics.lock().unwrap_or_else(|e| e.into_inner());
        panics
            .iter()
            .filter(|(_, p)| p.last.elapsed() < UNHEALTHY_AFTER_PANIC)
            .map(|(task, p)| Panicked {
                task,
                panics: p.count,
                seconds_ago: p.last.elapsed().as_secs(),
                message: p.message.clone(),
            })
            .collect()
    }

    /// `/metrics` lines: panics per task since start.
    pub fn render_prometheus(&self, out: &mut String) {
        use std::fmt::Write;
        let panics = self.panics.lock().unwrap_or_else(|e| e.into_inner());
        let _ =
            writeln!(out, "# HELP lagran_task_panics_total Panics of the daemon's background tasks (each restarted).");
        let _ = writeln!(out, "# TYPE lagran_task_panics_total counter");
        for (task, p) in panics.iter() {
            let _ = writeln!(out, "lagran_task_panics_total{{task=\"{task}\"}} {}", p.count);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::{AtomicU32, Ordering};

    #[tokio::test]
    async fn a_panicked_task_is_reported_and_restarted() {
        let sup = Supervisor::new();
        let shutdown = CancellationToken::new();
        let runs = Arc::new(AtomicU32::new(0));
        let counted = runs.clone();
        let token = shutdown.clone();
        let handle = sup.spawn("follower", shutdown.clone(), move || {
            let (runs, token) = (counted.clone(), token.clone());
            async move {
                if runs.fetch_add(1, Ordering::SeqCst) < 2 {
                    panic!("boom {}", runs.load(Ordering::SeqCst));
                }
                token.cancelled().await; // the third run lives until shutdown
            }
        });
        let deadline = Instant::now() + Duration::from_secs(5);
        while runs.load(Ordering::SeqCst) < 3 {
            assert!(Instant::now() < deadline, "the task was not restarted");
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        let recent = sup.recent_panics();
        assert_eq!(recent.len(), 1, "{recent:?}");
        assert_eq!((recent[0].task, recent[0].panics), ("follower", 2));
        assert!(recent[0].message.starts_with("boom"), "{recent:?}");
        let mut m = String::new();
        sup.render_prometheus(&mut m);
        assert!(m.contains("lagran_task_panics_total{task=\"follower\"} 2"), "{m}");
        shutdown.cancel();
        tokio::time::timeout(Duration::from_secs(5), handle).await.unwrap().unwrap();
        assert_eq!(runs.load(Ordering::SeqCst), 3, "a normal end is not restarted");
    }

    #[tokio::test]
    async fn a_healthy_task_leaves_no_trace() {
        let sup = Supervisor::new();
        sup.spawn("quiet", CancellationToken::new(), || async {}).await.unwrap();
        assert!(sup.recent_panics().is_empty());
    }
}
