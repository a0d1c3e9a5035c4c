//! Wall-clock time as the control plane and the NS hosts record it.

use std::time::{SystemTime, UNIX_EPOCH};

/// Unix milliseconds now (0 if the clock is before 1970).
pub fn now_ms() -> i64 {
    SystemTime::now().duration_since(UNIX_EPOCH).map(|d| i64::try_from(d.as_millis()).unwrap_or(i64::MAX)).unwrap_or(0)
}
