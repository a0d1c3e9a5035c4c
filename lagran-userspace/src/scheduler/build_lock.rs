//! The build's state under one lock, and the proof of holding it.

use std::ops::{Deref, DerefMut};

use tokio::sync::{Mutex, MutexGuard};

use super::BuildState;

/// What a recompute carries to the next one ([`BuildState`]), behind the
/// lock that serialises every step which publishes a table or changes the
/// freeze: recomputes (their reads included), rollbacks, resumes, a new
/// leadership term and a standby's adoption of the leader's table.
#[derive(Default)]
pub struct BuildLock(Mutex<BuildState>);

/// The build lock, held. Only [`BuildLock::lock`] makes one, so a method
/// that asks for `&BuildGuard` runs under the lock.
pub struct BuildGuard<'a>(MutexGuard<'a, BuildState>);

impl BuildLock {
    /// Waits for the lock (a recompute in flight finishes first).
    pub async fn lock(&self) -> BuildGuard<'_> {
        BuildGuard(self.0.lock().await)
    }
}

impl Deref for BuildGuard<'_> {
    type Target = BuildState;

    fn deref(&self) -> &BuildState {
        &self.0
    }
}

impl DerefMut for BuildGuard<'_> {
    fn deref_mut(&mut self) -> &mut BuildState {
        &mut self.0
    }
}
