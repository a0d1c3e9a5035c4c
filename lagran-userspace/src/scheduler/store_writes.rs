//! Whether the store accepts writes, as this process sees it: every
//! heartbeat it writes tells, and so does a probe write every
//! `[health] interval_secs` (a process may write nothing else for a while).
//! A change either way is a liveness change: heartbeat timeouts are
//! suspended while writes fail ([`crate::fail_static`]) and apply again after.

use super::{Change, Scheduler};
use crate::clock::now_ms;
use crate::store::StoreError;

impl Scheduler {
    /// A store write this process made went through (`Ok`) or failed.
    /// Failures of the request itself (a missing node, a bad field) say
    /// nothing of the store and are not counted.
    pub fn store_write_outcome(&self, result: Result<(), &StoreError>) {
        let writes = &self.health.fail_static().writes;
        let flipped = match result {
            Ok(()) => writes.succeeded(),
            Err(e) if e.is_database_fault() => writes.failed(&e.to_string(), now_ms()),
            Err(_) => false,
        };
        if flipped {
            self.notify(Change::Liveness);
        }
    }

    /// One probe write (see the module doc).
    pub(super) async fn probe_store_writes(&self) {
        let result = self.store.probe_write(now_ms()).await;
        self.store_write_outcome(result.as_ref().map(|_| ()));
    }
}
