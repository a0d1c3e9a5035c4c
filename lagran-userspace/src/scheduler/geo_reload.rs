//! Replacing the serving geo data without a restart, safely: a reload that
//! would move more clients than an operator allows is refused unless forced.
//!
//! 1. The new files are read with [`GeoDb::try_load_sources`] (the ip2region files,
//!    and the MaxMind and ASN data merged over them): any unreadable, corrupt or
//!    truncated file is an error naming the file and the position, and the serving
//!    data stays.
//! 2. The new data (with the overrides in force) is compared with the serving
//!    partitions on a fixed-seed sample ([`diff`](crate::partition::diff), the same code as
//!    `lagran geo diff`). "The geo reload's `max_change_ratio` is judged on a sample
//!    of the client prefixes the responders actually answered (weighted by queries;
//!    random public addresses only before there is traffic)": the sample is drawn
//!    from [`Scheduler::answered`] (see [`crate::answered`]), per family once it has
//!    seen enough queries. A family the serving data did not have is not compared:
//!    its first load has nothing to be checked against.
//! 3. Above `max_change_ratio` the reload is refused unless forced; the serving data
//!    stays. Otherwise `Scheduler::set_geo` + `Scheduler::recompute` publish it: the
//!    next DNS answer and the XDP maps use it.
//!
//! Triggers: SIGHUP ([`sighup_loop`], spawned by the daemon; never forced) and
//! `POST /api/v1/geo/reload` (`{"force": true}` to override the check), both
//! reading the configured paths again ([`reload_configured`]).
//!
//! The threshold is `geo.max_change_ratio` in the configuration (environment
//! `GEO_MAX_CHANGE_RATIO`; a fraction: `0.01` = 1 %, the default).

use std::path::{Path, PathBuf};
use std::sync::Arc;

use serde::Serialize;
use tokio_util::sync::CancellationToken;

use super::Scheduler;
use crate::answered::AnsweredTraffic;
use crate::geo::{GeoDb, GeoError, Sources};
use crate::partition::PartitionTable;
use crate::partition::diff::{DiffOptions, DiffReport, SampledFrom, diff_partitions_on};

pub use crate::geo::settings::DEFAULT_MAX_CHANGE_RATIO;

/// The outcome of a reload: the comparison and whether the new data serves.
#[derive(Clone, Debug, Serialize)]
pub struct ReloadReport {
    /// Whether the new data replaced the serving data.
    pub accepted: bool,
    /// Whether the check was overridden.
    pub forced: bool,
    /// The threshold in force.
    pub max_change_ratio: f64,
    /// The comparison (sampled, changed, ratio, by_province, by_isp, …).
    #[serde(flatten)]
    pub diff: DiffReport,
    /// IPv4 file read.
    pub v4_file: Option<PathBuf>,
    /// IPv6 file read.
    pub v6_file: Option<PathBuf>,
    /// MaxMind DB files read (GEOIP_MMDB_PATH).
    pub mmdb_files: Vec<PathBuf>,
    /// ASN files read (GEOIP_ASN_PATH).
    pub asn_files: Vec<PathBuf>,
    /// Segments of the new IPv4 data.
    pub v4_segments: usize,
    /// Segments of the new IPv6 data.
    pub v6_segments: usize,
    /// The route table published with the new data (accepted reloads).
    pub route_table_version: Option<u64>,
    /// One line for humans.
    pub message: String,
}

/// Serialises reloads: two at once would compare against the same serving data.
static RELOAD: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());

/// Loads `v4` / `v6` (any format, see [`GeoDb::try_load`]) with the serving data's
/// MaxMind and ASN sources, compares them with the serving data and, unless
/// refused, makes them serve (see [`reload_sources`]).
pub async fn reload(
    scheduler: &Scheduler,
    v4: Option<&Path>,
    v6: Option<&Path>,
    force: bool,
    max_change_ratio: f64,
) -> Result<ReloadReport, GeoError> {
    let sources =
        Sources { v4: v4.map(Path::to_path_buf), v6: v6.map(Path::to_path_buf), ..scheduler.geo().sources().clone() };
    reload_sources(scheduler, sources, force, max_change_ratio).await
}

/// Loads every file `sources` names, compares the result with the serving data
/// and, unless refused, makes it serve. A refused reload is `Ok(report)` with
/// `accepted: false`; a file that cannot be used is `Err`. In both cases the
/// serving data is untouched.
pub async fn reload_sources(
    scheduler: &Scheduler,
    sources: Sources,
    force: bool,
    max_change_ratio: f64,
) -> Result<ReloadReport, GeoError> {
    if !(max_change_ratio.is_finite() && max_change_ratio >= 0.0) {
        return Err(GeoError::Usage(format!("max_change_ratio {max_change_ratio} is not a fraction >= 0")));
    }
    let _one_at_a_time = RELOAD.lock().await;
    // The API's carrier entries as they are now: a reload is when they apply.
    let mut sources = sources;
    sources.asn_carriers_api = scheduler
        .store
        .asn_carrier_map()
        .await
        .map_err(|e| GeoError::Reload(format!("reading the ASN carrier entries: {e}")))?;
    let serving = scheduler.geo();
    let old_parts = scheduler.partitions();
    let overrides = scheduler.overrides();
    let opts = DiffOptions { v4: serving.v4().is_some(), v6: serving.v6().is_some(), ..DiffOptions::default() };
    let traffic = scheduler.answered.sample(crate::clock::now_ms());
    let read = sources.clone();
    // Reading, validating and comparing the real file takes a while: off the runtime.
    let (new, diff) = tokio::task::spawn_blocking(move || {
        let new = GeoDb::try_load_sources(&read)?;
        let new_parts = PartitionTable::build(&new, &overrides);
        let diff = diff_partitions_on(&old_parts, &new_parts, &opts, &traffic);
        Ok::<_, GeoError>((new, diff))
    })
    .await
    .map_err(|e| GeoError::Reload(format!("the loading task failed: {e}")))??;

    let within = diff.ratio <= max_change_ratio;
    let accepted = within || force;
    let mut report = ReloadReport {
        accepted,
        forced: force && !within,
        max_change_ratio,
        v4_file: sources.v4,
        v6_file: sources.v6,
        mmdb_files: sources.mmdb,
        asn_files: sources.asn,
        v4_segments: new.v4().map_or(0, |x| x.len()),
        v6_segments: new.v6().map_or(0, |x| x.len()),
        route_table_version: None,
        message: String::new(),
        diff,
    };
    let pct = |r: f64| r * 100.0;
    let from_traffic = report.diff.families.iter().any(|f| f.compared && f.sampled_from == SampledFrom::Traffic);
    let basis = if from_traffic { " (drawn from the answered traffic)" } else { "" };
    if !accepted {
        report.message = format!(
            "refused: {} of {} sampled addresses{basis} ({:.3} %) change tuple, above the {:.3} % limit ({}); the serving data stays. Check the diff, then force the reload if it is right",
            report.diff.changed,
            report.diff.sampled,
            pct(report.diff.ratio),
            pct(max_change_ratio),
            "geo.max_change_ratio / GEO_MAX_CHANGE_RATIO",
        );
        tracing::warn!(
            sampled = report.diff.sampled,
            changed = report.diff.changed,
            ratio = report.diff.ratio,
            max_change_ratio,
            ranges_changed = report.diff.ranges_changed,
            "geo reload refused"
        );
        return Ok(report);
    }
    scheduler.set_geo(new);
    match scheduler.recompute().await {
        Ok(table) => report.route_table_version = Some(table.version),
        Err(e) => {
            tracing::error!(error = %e, "recompute after a geo reload failed; the periodic recompute will retry")
        }
    }
    report.message = format!(
        "accepted{}: {} of {} sampled addresses{basis} ({:.3} %) change tuple, {} ranges changed",
        if report.forced { " (forced)" } else { "" },
        report.diff.changed,
        report.diff.sampled,
        pct(report.diff.ratio),
        report.diff.ranges_changed,
    );
    tracing::info!(
        sampled = report.diff.sampled,
        changed = report.diff.changed,
        ratio = report.diff.ratio,
        forced = report.forced,
        ranges_changed = report.diff.ranges_changed,
        v4_segments = report.v4_segments,
        v6_segments = report.v6_segments,
        version = report.route_table_version,
        "geo data reloaded"
    );
    Ok(report)
}

impl Scheduler {
    /// The client prefixes the responders answered: NS hosts' reports and
    /// this process's own responder ([`crate::answered`]).
    pub fn answered(&self) -> &Arc<AnsweredTraffic> {
        &self.answered
    }
}

/// [`reload_sources`] from the paths the serving data was configured with
/// (GEOIP_PATH, GEOIP_IPV6_PATH, GEOIP_MMDB_PATH, GEOIP_ASN_PATH), so an operator
/// replaces a file in place and signals.
pub async fn reload_configured(
    scheduler: &Scheduler,
    force: bool,
    max_change_ratio: f64,
) -> Result<ReloadReport, GeoError> {
    let sources = scheduler.geo().sources().clone();
    if sources.v4.is_none() && sources.v6.is_none() && !sources.has_world() {
        return Err(GeoError::Reload(
            "no geo file is configured (GEOIP_PATH / GEOIP_IPV6_PATH / GEOIP_MMDB_PATH / GEOIP_ASN_PATH)".into(),
        ));
    }
    reload_sources(scheduler, sources, force, max_change_ratio).await
}

/// Reloads the configured files on every SIGHUP until `shutdown` (never forced; the
/// threshold `max_change_ratio` is `geo.max_change_ratio`). The signal handler is installed when this
/// is called, before the returned future first runs, so the daemon can say it is
/// serving only once a SIGHUP no longer kills it. Call inside the runtime; spawn the
/// future.
pub fn sighup_loop(
    scheduler: Arc<Scheduler>,
    max_change_ratio: f64,
    shutdown: CancellationToken,
) -> impl Future<Output = ()> + Send + 'static {
    #[cfg(unix)]
    let hup = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::hangup());
    async move {
        #[cfg(unix)]
        {
            let mut hup = match hup {
                Ok(s) => s,
                Err(e) => {
                    tracing::warn!(error = %e, "cannot listen for SIGHUP; geo reload only through the API");
                    return;
                }
            };
            let ratio = max_change_ratio;
            loop {
                tokio::select! {
                    _ = shutdown.cancelled() => return,
                    got = hup.recv() => if got.is_none() { return },
                }
                tracing::info!("SIGHUP: reloading the geo files");
                match reload_configured(&scheduler, false, ratio).await {
                    Ok(r) if r.accepted => {}
                    Ok(r) => tracing::warn!(message = %r.message, "SIGHUP geo reload refused"),
                    Err(e) => {
                        tracing::error!(error = %e, "SIGHUP geo reload failed; the serving data stays")
                    }
                }
            }
        }
        #[cfg(not(unix))]
        {
            let _ = (scheduler, max_change_ratio, shutdown);
        }
    }
}

#[cfg(test)]
mod tests;
