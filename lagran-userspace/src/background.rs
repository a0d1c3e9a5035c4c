//! Background threads: where route tables are compiled, the change log is
//! diffed and the XDP maps are written, off the async runtime and at a lower
//! CPU priority than the responder.
//!
//! A busy NS host may run the daemon on one core (or a cgroup of one). There
//! work that took a runtime thread would hold DNS answers behind it, and even
//! work on a blocking thread of normal priority takes turns with the
//! responder's thread. At `nice` [`BACKGROUND_NICE`] the kernel runs a woken
//! responder first, yet still gives the background work a share of the core
//! under a flood, so a node going down is never starved out of the table.

use std::panic::AssertUnwindSafe;
use std::sync::mpsc;

/// How much nicer a background thread is than the process (the runtime's
/// threads keep the process's own value).
pub const BACKGROUND_NICE: libc::c_int = 10;

/// How much nicer a thread is whose work nothing waits for (the change log,
/// read by people): it takes its turns after builds and map writes, which a
/// node going down waits for, as well as after the responder.
pub const REPORT_NICE: libc::c_int = 19;

type Job = Box<dyn FnOnce() + Send>;

/// One background thread's job queue; the thread ends when this is dropped.
pub struct Background {
    jobs: mpsc::Sender<Job>,
}

/// A job the thread could not finish.
#[derive(Debug, thiserror::Error)]
pub enum BackgroundError {
    #[error("a background thread could not be started: {0}")]
    Spawn(std::io::Error),
    #[error("the background job panicked (see the log)")]
    Panicked,
}

impl Background {
    /// Starts the thread, named `name`, [`BACKGROUND_NICE`] nicer than the process.
    pub fn start(name: &str) -> Result<Background, BackgroundError> {
        Background::start_nicer(name, BACKGROUND_NICE)
    }

    /// Starts the thread, named `name`, `nicer` nicer than the process (at most 19).
    pub fn start_nicer(name: &str, nicer: libc::c_int) -> Result<Background, BackgroundError> {
        let (jobs, queue) = mpsc::channel::<Job>();
        std::thread::Builder::new()
            .name(name.into())
            .spawn(move || {
                lower_priority(nicer);
                while let Ok(job) = queue.recv() {
                    // A panicking job loses its own result only: the thread
                    // stays for the next one.
                    let _ = std::panic::catch_unwind(AssertUnwindSafe(job));
                }
            })
            .map_err(BackgroundError::Spawn)?;
        Ok(Background { jobs })
    }

    /// Runs `f` on the thread and waits for its result without holding a
    /// runtime thread. Jobs run one at a time, in the order given.
    pub async fn run<T: Send + 'static>(&self, f: impl FnOnce() -> T + Send + 'static) -> Result<T, BackgroundError> {
        let (tx, rx) = tokio::sync::oneshot::channel();
        self.jobs
            .send(Box::new(move || {
                let _ = tx.send(f());
            }))
            .map_err(|_| BackgroundError::Panicked)?;
        rx.await.map_err(|_| BackgroundError::Panicked)
    }

    /// Queues `f` on the thread without waiting for it.
    pub fn spawn(&self, f: impl FnOnce() + Send + 'static) {
        if self.jobs.send(Box::new(f)).is_err() {
            tracing::error!("a background thread has stopped; a job was dropped");
        }
    }
}

/// Makes the calling thread `nicer` nicer than it is (at most 19).
/// Linux applies `setpriority(PRIO_PROCESS, tid)` to that one thread.
fn lower_priority(nicer: libc::c_int) {
    // SAFETY: gettid(2), getpriority(2) and setpriority(2) on this thread; no
    // memory is passed.
    let rc = unsafe {
        let tid = libc::gettid() as libc::id_t;
        let now = libc::getpriority(libc::PRIO_PROCESS, tid);
        libc::setpriority(libc::PRIO_PROCESS, tid, (now + nicer).min(19))
    };
    if rc != 0 {
        tracing::warn!(
            error = %std::io::Error::last_os_error(),
            nice = nicer,
            "could not lower a background thread's priority; its work shares the CPU with DNS equally"
        );
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn runs_jobs_in_order_at_the_lower_priority_and_survives_a_panic() {
        let t = Background::start("lagran-test").unwrap();
        let nice = t
            .run(|| {
                // SAFETY: getpriority(2) on this thread.
                unsafe { libc::getpriority(libc::PRIO_PROCESS, libc::gettid() as libc::id_t) }
            })
            .await
            .unwrap();
        // SAFETY: as above, on the test's thread.
        let ours = unsafe { libc::getpriority(libc::PRIO_PROCESS, libc::gettid() as libc::id_t) };
        assert_eq!(nice, (ours + BACKGROUND_NICE).min(19));
        assert!(matches!(t.run(|| -> u32 { panic!("a bug") }).await, Err(BackgroundError::Panicked)));
        assert_eq!(t.run(|| 7).await.unwrap(), 7);
        let report = Background::start_nicer("lagran-test-report", REPORT_NICE).unwrap();
        // SAFETY: getpriority(2) on the background thread.
        let nice = report.run(|| unsafe { libc::getpriority(libc::PRIO_PROCESS, libc::gettid() as libc::id_t) });
        assert_eq!(nice.await.unwrap(), (ours + REPORT_NICE).min(19));
    }
}
