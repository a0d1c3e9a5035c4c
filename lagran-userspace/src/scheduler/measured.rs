//! The scheduler's side of the measurement matrix: reports in (stored, then
//! held in memory, then a recompute queued), and the matrix loaded from the
//! store when this process starts, takes the lead, or hears that a standby
//! took reports.

use std::collections::HashMap;
use std::sync::Arc;
use std::sync::atomic::Ordering;

use super::build::steer::{BY_HASH, BY_LATENCY, BY_WEIGHT};
use super::{Change, Scheduler, SchedulerError};
use crate::location::Location;
use crate::route_table::{Answer, AnswerState};
use crate::steering::Measurements;
use crate::steering::estimate::Report;

/// The notification a standby sends after it stored reports.
pub const MEASURED: &str = "measurements";

impl Scheduler {
    /// The measurement matrix.
    pub fn measurements(&self) -> &Arc<Measurements> {
        &self.measurements
    }

    /// Adds reports (partition location, node, report): into their stored
    /// cells first, then into the matrix; queues a recompute (on a standby,
    /// tells the leader instead). Cells older than the window are dropped
    /// from the store on the way.
    pub async fn add_measurements(
        &self,
        reports: &[(Location, String, Report)],
        now_ms: i64,
    ) -> Result<(), SchedulerError> {
        let window = self.measurements.settings().window_ms();
        let cells = self.store.add_measurements(reports, now_ms - window).await?;
        self.measurements.restore(cells.into_iter().map(|c| (c.location, c.node, c.cell)));
        if self.leading() {
            self.notify(Change::Liveness);
        } else {
            self.store.notify_change(MEASURED).await?;
        }
        Ok(())
    }

    /// The matrix changed in the store behind this process: it is loaded
    /// again before the next build.
    pub(super) fn measurements_changed_elsewhere(&self) {
        self.measurements_due.store(true, Ordering::SeqCst);
    }

    /// Loads the matrix from the store when it is due.
    pub(super) async fn load_measurements_if_due(&self, now_ms: i64) -> Result<(), SchedulerError> {
        if !self.measurements_due.swap(false, Ordering::SeqCst) {
            return Ok(());
        }
        let window = self.measurements.settings().window_ms();
        match self.store.list_measurements(now_ms - window).await {
            Ok(cells) => {
                tracing::debug!(cells = cells.len(), "measurement matrix loaded from the store");
                self.measurements.replace(cells.into_iter().map(|c| (c.location, c.node, c.cell)));
                Ok(())
            }
            Err(e) => {
                self.measurements_due.store(true, Ordering::SeqCst);
                Err(e.into())
            }
        }
    }
}

impl Scheduler {
    /// The matrix's fresh estimates for `location`: node -> (RTT ms, samples).
    pub(super) fn measured_for(&self, location: &Location, now_ms: i64) -> HashMap<String, (f64, u32)> {
        self.measurements.row(location, now_ms).into_iter().map(|(n, e)| (n, (e.rtt_ms, e.samples))).collect()
    }
}

/// What decided `answer`, by the reason the build gave it.
pub(super) fn decided_by(answer: &Answer) -> &'static str {
    let r = answer.reason.as_str();
    if answer.state == AnswerState::Canary
        || answer.canary.is_some()
        || r.starts_with("manual rule")
        || r.starts_with("canary rule")
    {
        "rule"
    } else if r.starts_with("line ") {
        "line"
    } else if r == BY_LATENCY {
        "latency"
    } else if r == BY_WEIGHT {
        "weighted"
    } else if r == BY_HASH {
        "hash"
    } else {
        "geo"
    }
}
