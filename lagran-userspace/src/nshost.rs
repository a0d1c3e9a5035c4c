//! The NS-host side of the route-table stream (`lagran dns --control URL`).
//!
//! An NS host long-polls the control plane for newer tables, checks each one,
//! publishes it to its responders and saves it to disk. When the control plane
//! is unreachable it keeps answering from the last table it has — also across
//! its own restarts, from the saved copy — and never withdraws itself: an
//! authoritative server that takes itself out when it loses its control
//! plane turns a control-plane fault into an outage of every name it serves.
//!
//! Several control processes (`--control URL`, repeatable): the follower
//! sticks to one while it answers and moves to the next when it fails or is
//! behind. Tables are taken only from the current epoch moving forward, as
//! deltas when the control process still has this host's table; the wire
//! format is [`crate::table_stream`]. Each request carries this host's
//! report (version, epoch, queries, confirmation age). A table whose epoch
//! jumps further than the control plane can have gone since the last
//! confirmation is refused ([`crate::table_stream::max_epoch`]), so one forged
//! table cannot fence out the real control plane.
//!
//! Every answer of the stream — a new table, or 304 "yours is still current" —
//! is a confirmation, recorded on this host's own clock
//! ([`Confirmation`]); the saved file's modification time carries the last
//! one across restarts. How long ago the table was confirmed shows in
//! `_version.<zone>` (`confirmed_ms_ago=`) and in `/metrics`; once it is more
//! than DNS_STALE_SECS the responder answers DNS_FALLBACK_IP when one is set.

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicI64, AtomicU64, Ordering};
use std::time::Duration;

use tokio_util::sync::CancellationToken;

use crate::api_client::ApiClient;
use crate::clock::now_ms;
use crate::confirmation::Confirmation;
use crate::route_table::{RouteTable, SharedRouteTable};
use crate::table_stream::{TableUpdate, accepts, max_epoch};

/// What the follower has seen, for `/metrics`.
#[derive(Debug, Default)]
pub struct FollowerStats {
    /// Unix ms of the last successful exchange with the control plane (0 = never).
    pub last_contact_ms: AtomicI64,
    pub tables_received: AtomicU64,
    /// Tables refused: an older epoch, an epoch beyond [`max_epoch`], or a
    /// version that does not move forward.
    pub tables_rejected: AtomicU64,
    pub failures: AtomicU64,
    /// The highest leadership epoch seen (tables of older epochs are refused).
    pub epoch: AtomicU64,
}

impl FollowerStats {
    pub fn render_prometheus(&self, out: &mut String) {
        use std::fmt::Write;
        let last = self.last_contact_ms.load(Ordering::Relaxed);
        let since = if last == 0 { -1.0 } else { (now_ms() - last).max(0) as f64 / 1e3 };
        let _ = writeln!(
            out,
            "# HELP lagran_control_plane_last_contact_seconds Seconds since the control plane last answered (-1: never)."
        );
        let _ = writeln!(out, "# TYPE lagran_control_plane_last_contact_seconds gauge");
        let _ = writeln!(out, "lagran_control_plane_last_contact_seconds {since}");
        let _ = writeln!(out, "# TYPE lagran_route_tables_received_total counter");
        let _ = writeln!(out, "lagran_route_tables_received_total {}", self.tables_received.load(Ordering::Relaxed));
        let _ = writeln!(out, "# TYPE lagran_route_tables_rejected_total counter");
        let _ = writeln!(out, "lagran_route_tables_rejected_total {}", self.tables_rejected.load(Ordering::Relaxed));
        let _ = writeln!(out, "# TYPE lagran_route_table_epoch gauge");
        let _ = writeln!(out, "lagran_route_table_epoch {}", self.epoch.load(Ordering::Relaxed));
        let _ = writeln!(out, "# TYPE lagran_control_plane_failures_total counter");
        let _ = writeln!(out, "lagran_control_plane_failures_total {}", self.failures.load(Ordering::Relaxed));
    }
}

/// Reads a table saved by an earlier run; `None` (logged) when there is none or it is unusable.
pub fn load_saved(path: &Path) -> Option<RouteTable> {
    let bytes = match std::fs::read(path) {
        Ok(b) => b,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return None,
        Err(e) => {
            tracing::warn!(path = %path.display(), error = %e, "cannot read the saved route table");
            return None;
        }
    };
    match serde_json::from_slice::<RouteTable>(&bytes) {
        Ok(t) => Some(t),
        Err(e) => {
            tracing::warn!(path = %path.display(), error = %e, "the saved route table is not usable; ignored");
            None
        }
    }
}

/// When the saved table was last confirmed: its file's modification time
/// (unix ms; 0 when unknown).
pub fn saved_confirmed_at(path: &Path) -> i64 {
    let modified = std::fs::metadata(path).and_then(|m| m.modified());
    modified
        .ok()
        .and_then(|t| t.duration_since(std::time::UNIX_EPOCH).ok())
        .map_or(0, |d| i64::try_from(d.as_millis()).unwrap_or(i64::MAX))
}

/// Records a confirmation of the saved table (its modification time).
fn touch(path: &Path) -> std::io::Result<()> {
    std::fs::File::options().append(true).open(path)?.set_modified(std::time::SystemTime::now())
}

/// Saves a table atomically and durably: write a temporary file, fsync it,
/// rename it over the old one, fsync the directory. A crash or power loss at
/// any point leaves either the old table or the new one, never a torn or
/// empty file (rename alone is atomic but not durable: without the fsyncs the
/// rename may reach the disk before the data does).
pub fn save(path: &Path, bytes: &[u8]) -> std::io::Result<()> {
    use std::io::Write;
    let dir = match path.parent() {
        Some(d) if !d.as_os_str().is_empty() => d,
        _ => Path::new("."),
    };
    std::fs::create_dir_all(dir)?;
    let tmp = path.with_extension("tmp");
    let mut file = std::fs::File::create(&tmp)?;
    file.write_all(bytes)?;
    file.sync_all()?;
    drop(file);
    std::fs::rename(&tmp, path)?;
    std::fs::File::open(dir)?.sync_all()
}

/// The follower loop: follows the first control process that answers, and
/// the next one in the list when it fails (`--control URL`, repeatable).
pub struct Follower {
    /// One client per control process, in the operator's order.
    pub clients: Vec<ApiClient>,
    /// This NS host's name in its reports (`GET /api/v1/nshosts` on the control plane).
    pub host_name: String,
    /// The responder's counters: the report carries the queries answered.
    pub counters: Arc<crate::dns::counters::DnsCounters>,
    pub table: SharedRouteTable,
    pub versions: tokio::sync::watch::Sender<u64>,
    pub state_file: Option<PathBuf>,
    pub stats: Arc<FollowerStats>,
    /// Stamped on every answer of the stream: a table is stale when the leader has
    /// not confirmed it for DNS_STALE_SECS, measured on this host's clock.
    pub confirmation: Arc<Confirmation>,
    /// How long one long poll waits for a newer table; keep it well under
    /// DNS_STALE_SECS ([`Follower::poll_wait`]), since each answer is a confirmation.
    pub poll_wait: Duration,
}

/// What one exchange with a control process gave.
enum Exchange {
    /// The table is current (304) or a newer one was installed.
    Confirmed,
    /// A delta for another base: ask again for a full table, at once.
    WantFull,
    /// This control process failed or is behind: try the next one.
    Failed(String),
}

/// Percent-encodes a query-string value (RFC 3986 unreserved characters pass).
fn query_value(v: &str) -> String {
    let mut out = String::with_capacity(v.len());
    for b in v.bytes() {
        if b.is_ascii_alphanumeric() || matches!(b, b'-' | b'.' | b'_' | b'~') {
            out.push(b as char);
        } else {
            out.push_str(&format!("%{b:02X}"));
        }
    }
    out
}

impl Follower {
    /// The long-poll wait for a given DNS_STALE_SECS: at most 25 s and at most a
    /// third of DNS_STALE_SECS, so a healthy control plane confirms the table
    /// several times before it could go stale.
    pub fn poll_wait(stale_secs: u64) -> Duration {
        Duration::from_millis(stale_secs.saturating_mul(1000).div_euclid(3).clamp(100, 25_000))
    }

    /// `&prefixes=…`: the busiest client prefixes answered ([`crate::answered::wire`]);
    /// empty before any.
    fn answered_prefixes(&self) -> String {
        let top = self.counters.answered_prefixes.top(crate::answered::wire::MAX_REPORTED);
        if top.is_empty() { String::new() } else { format!("&prefixes={}", crate::answered::wire::encode(&top)) }
    }

    fn queries(&self) -> u64 {
        let c = &self.counters;
        [&c.queries_udp, &c.queries_tcp, &c.queries_dot, &c.queries_doq].iter().map(|a| a.load(Ordering::Relaxed)).sum()
    }

    /// Publishes a saved table first (if any), then follows the control plane until shutdown.
    pub async fn run(self, shutdown: CancellationToken) {
        // Only at start: a follower restarted (reload, panic) keeps the table it has.
        if self.table.load().version == 0
            && let Some(path) = &self.state_file
            && let Some(t) = load_saved(path)
        {
            tracing::info!(version = t.version, epoch = t.epoch, path = %path.display(), "serving the saved route table until the control plane answers");
            let v = t.version;
            self.confirmation.confirm(saved_confirmed_at(path));
            self.stats.epoch.store(t.epoch, Ordering::Relaxed);
            self.table.store(Arc::new(t));
            self.versions.send_replace(v);
        }
        if self.clients.is_empty() {
            tracing::error!("no control process to follow (--control URL)");
            return;
        }
        let mut backoff = Duration::from_millis(500);
        let mut at = 0usize;
        let mut failed_in_a_row = 0usize;
        let mut want_full = false;
        loop {
            let exchange = tokio::select! {
                _ = shutdown.cancelled() => return,
                e = self.exchange(&self.clients[at], want_full) => e,
            };
            want_full = false;
            match exchange {
                Exchange::Confirmed => {
                    let now = now_ms();
                    self.stats.last_contact_ms.store(now, Ordering::Relaxed);
                    self.confirmation.confirm(now);
                    if let Some(p) = &self.state_file
                        && self.table.load().version != 0
                        && let Err(e) = touch(p)
                    {
                        tracing::debug!(path = %p.display(), error = %e, "cannot record the confirmation on the saved table");
                    }
                    backoff = Duration::from_millis(500);
                    failed_in_a_row = 0;
                }
                Exchange::WantFull => want_full = true,
                Exchange::Failed(e) => {
                    let n = self.stats.failures.fetch_add(1, Ordering::Relaxed);
                    let control = &self.clients[at].base;
                    if n.is_multiple_of(10) || self.clients.len() > 1 {
                        tracing::warn!(error = %e, control = %control, version = self.table.load().version, "control process failed; still serving the last table");
                    }
                    at = (at + 1) % self.clients.len();
                    failed_in_a_row += 1;
                    // Every control process failed once in a row: wait before the next round.
                    if failed_in_a_row.is_multiple_of(self.clients.len()) {
                        tokio::select! {
                            _ = shutdown.cancelled() => return,
                            _ = tokio::time::sleep(backoff) => {}
                        }
                        backoff = (backoff * 2).min(Duration::from_secs(10));
                    }
                }
            }
        }
    }

    /// One long poll of one control process (`crate::table_stream`).
    async fn exchange(&self, client: &ApiClient, want_full: bool) -> Exchange {
        let current = self.table.load_full();
        let path = format!(
            "/api/v1/routes/table?since={}&epoch={}&deltas=1{}&wait_ms={}&host={}&queries={}&confirmed_ms_ago={}{}",
            current.version,
            current.epoch,
            if want_full { "&full=1" } else { "" },
            self.poll_wait.as_millis(),
            query_value(&self.host_name),
            self.queries(),
            self.confirmation.ms_ago(now_ms()).unwrap_or(-1),
            self.answered_prefixes(),
        );
        let body = match tokio::time::timeout(Duration::from_secs(35), client.get_raw(&path)).await {
            Err(_) => return Exchange::Failed("no answer within 35 s".into()),
            Ok(Err(e)) => return Exchange::Failed(e.to_string()),
            Ok(Ok((304, _))) => return Exchange::Confirmed,
            Ok(Ok((200, body))) => body,
            Ok(Ok((status, body))) => {
                return Exchange::Failed(format!("status {status}: {}", String::from_utf8_lossy(&body)));
            }
        };
        let table = match serde_json::from_slice::<TableUpdate>(&body) {
            Ok(TableUpdate::Full(t)) => t,
            Ok(TableUpdate::Delta(d)) => match d.apply(&current) {
                Ok(t) => t,
                Err(e) => {
                    tracing::info!(reason = %e, "route-table delta not applicable; asking for the whole table");
                    return Exchange::WantFull;
                }
            },
            Err(e) => return Exchange::Failed(format!("the control plane sent an unusable table: {e}")),
        };
        let highest = self.stats.epoch.load(Ordering::Relaxed);
        if !accepts(current.position(), highest, table.position()) {
            self.stats.tables_rejected.fetch_add(1, Ordering::Relaxed);
            return Exchange::Failed(format!(
                "offered table {}/{} (epoch/version), not newer than {}/{} (highest epoch seen {highest})",
                table.epoch, table.version, current.epoch, current.version
            ));
        }
        let confirmed_at = Some(self.confirmation.last_ms()).filter(|&ms| ms > 0);
        let bound = max_epoch(highest.max(current.epoch), confirmed_at, now_ms());
        if table.epoch > bound {
            self.stats.tables_rejected.fetch_add(1, Ordering::Relaxed);
            tracing::warn!(epoch = table.epoch, bound, control = %client.base, "route table refused: its epoch is beyond what the control plane can have issued (forged?)");
            return Exchange::Failed(format!(
                "offered table epoch {} is beyond {bound}, the most the control plane can have issued since epoch {} was confirmed",
                table.epoch,
                highest.max(current.epoch)
            ));
        }
        let (v, epoch) = (table.version, table.epoch);
        tracing::info!(version = v, epoch, control = %client.base, "route table received");
        let table = Arc::new(table);
        self.stats.epoch.fetch_max(epoch, Ordering::Relaxed);
        self.table.store(table.clone());
        self.versions.send_replace(v);
        self.stats.tables_received.fetch_add(1, Ordering::Relaxed);
        if let Some(p) = &self.state_file {
            let saved = serde_json::to_vec(&*table).map_err(std::io::Error::other).and_then(|b| save(p, &b));
            if let Err(e) = saved {
                tracing::warn!(path = %p.display(), error = %e, "cannot save the route table");
            }
        }
        Exchange::Confirmed
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn saved_tables_round_trip_and_bad_ones_are_ignored() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("routes.json");
        assert!(load_saved(&path).is_none());
        let t = RouteTable::new(42, 1000, vec![]);
        save(&path, &serde_json::to_vec(&t).unwrap()).unwrap();
        assert_eq!(load_saved(&path).unwrap().version, 42);
        assert!(!path.with_extension("tmp").exists(), "the temporary file was renamed");
        // A file name without a directory part saves in the working directory's terms.
        assert!(save(Path::new(""), b"x").is_err(), "an empty path is an error, not a panic");
        std::fs::write(&path, br#"{"version": 1, "generated_at_ms": 0, "zones": [{"zone": 5}]}"#).unwrap();
        assert!(load_saved(&path).is_none());
    }
}
