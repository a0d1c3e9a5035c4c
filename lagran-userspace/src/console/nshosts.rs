//! Each NS host's route-table version and lag, as the console shows them.
//!
//! [`NsHostSource`] is where the reports come from: in `lagran serve` the one
//! local responder ([`LocalNsHost`]); a control plane that collects the NS
//! hosts' reports from the table stream plugs in its own source.

use std::sync::Arc;

use serde::Serialize;

use crate::confirmation::Confirmation;
use crate::route_table::SharedRouteTable;

/// One NS host's state.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct NsHostStatus {
    /// The host's name or address (`local` for the in-process responder).
    pub host: String,
    /// The route-table version it answers from (0: none yet).
    pub version: u64,
    /// Versions it is behind the control plane's current one.
    pub versions_behind: u64,
    /// How old its table is behind the current one, in ms (0 when current).
    pub lag_ms: i64,
    /// When it last reported (or, locally, last had its table confirmed), unix ms.
    pub reported_at_ms: i64,
}

/// Where NS-host reports come from.
pub trait NsHostSource: Send + Sync {
    /// Every known NS host; `current` is the control plane's table (version,
    /// generated at ms), for the lag.
    fn ns_hosts(&self, current: (u64, i64)) -> Vec<NsHostStatus>;
}

/// No NS host reports (`lagran control` until the hosts report on the table stream).
pub struct NoNsHosts;

impl NsHostSource for NoNsHosts {
    fn ns_hosts(&self, _: (u64, i64)) -> Vec<NsHostStatus> {
        Vec::new()
    }
}

/// The responder inside `lagran serve`: it answers from the scheduler's table directly.
pub struct LocalNsHost {
    pub table: SharedRouteTable,
    pub confirmation: Arc<Confirmation>,
}

impl NsHostSource for LocalNsHost {
    fn ns_hosts(&self, current: (u64, i64)) -> Vec<NsHostStatus> {
        let t = self.table.load();
        vec![status("local", (t.version, t.generated_at_ms), current, self.confirmation.last_ms())]
    }
}

/// A host's status from its table (version, generated at) and the current one.
pub fn status(host: &str, has: (u64, i64), current: (u64, i64), reported_at_ms: i64) -> NsHostStatus {
    NsHostStatus {
        host: host.to_string(),
        version: has.0,
        versions_behind: current.0.saturating_sub(has.0),
        lag_ms: if has.0 >= current.0 { 0 } else { (current.1 - has.1).max(0) },
        reported_at_ms,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lag_is_measured_against_the_current_table() {
        let s = status("ns1", (10, 1_000), (12, 4_500), 5_000);
        assert_eq!((s.versions_behind, s.lag_ms), (2, 3_500));
        let s = status("ns1", (12, 4_500), (12, 4_500), 5_000);
        assert_eq!((s.versions_behind, s.lag_ms), (0, 0));
    }
}
