//! Keeps the XDP fast path in step with the route table: attaches the program
//! (`--xdp IFACE`), syncs the maps on every published table (diffed writes, on a
//! background thread: [`crate::background`]),
//! tracks staleness, exports the per-CPU counters, and detaches on shutdown.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::sync::watch;
use tokio_util::sync::CancellationToken;

use crate::clock::now_ms;
use crate::confirmation::Confirmation;
use crate::dns::settings::DnsSettings;
use crate::metrics::Metrics;
use crate::route_table::SharedRouteTable;
use crate::xdp::{XdpError, XdpHandle, XdpOptions, object_bytes};

/// What the maps follow: the table, its published versions, and when the
/// control plane last confirmed it (the staleness switch).
pub struct Follow {
    pub table: SharedRouteTable,
    pub versions: watch::Receiver<u64>,
    pub confirmation: Arc<Confirmation>,
    /// The responder's server cookie secrets, published to the program with
    /// its clock every second (`None`: the program passes COOKIE queries).
    pub cookies: Option<Arc<crate::dns::cookie::CookieJar>>,
    /// `[rrl]` for the program, and where its limited/slipped counts go for `/metrics`.
    pub rrl: (crate::dns::rrl::RrlSettings, Arc<crate::dns::rrl::XdpCounts>),
    /// The query log and `[dnstap] xdp_sample`'s N (`None`, or N 0: the
    /// program's answers are not logged).
    pub dnstap: Option<(Arc<crate::dnstap::Tap>, u32)>,
}

/// Attaches to `iface`, answering only DNS addressed to `listen` (the responder's
/// bound addresses; an unspecified address means every address of the interface),
/// and spawns the sync loop.
pub fn start(
    iface: &str,
    listen: &[std::net::SocketAddr],
    settings: DnsSettings,
    follow: Follow,
    metrics: &Metrics,
    shutdown: CancellationToken,
) -> Result<tokio::task::JoinHandle<()>, XdpError> {
    let Follow { table, mut versions, confirmation, cookies, rrl, dnstap } = follow;
    let obj = object_bytes()?;
    let pin_dir = crate::xdp::pin_dir_override();
    let mut opts =
        XdpOptions { udp_payload: settings.max_udp_payload, listen: listen.to_vec(), ..XdpOptions::default() };
    let dns_port = listen.first().map_or(53, std::net::SocketAddr::port);
    if pin_dir.is_some() {
        opts.pin_dir = pin_dir;
    }
    let mut attached = XdpHandle::attach_with(iface, dns_port, &obj, &opts)?;
    // An object built with `xdp-debug-log` reports every packet's outcome; forward them.
    if let Some(logger) = attached.take_debug_logger(log::logger()) {
        tracing::warn!(iface, "the XDP object carries debug events (xdp-debug-log): not for production");
        tokio::spawn(forward_debug_log(logger, shutdown.clone()));
    }
    attached.writer().set_rrl(&rrl.0)?;
    if let Some((tap, every)) = dnstap.filter(|(_, every)| *every != 0) {
        crate::xdp::tap::start(&mut attached, tap, every, shutdown.clone());
    }
    let rrl_counts = rrl.1;
    let handle = Arc::new(Mutex::new(attached));
    sync(&handle, &table, &settings);
    publish_cookie(&handle, cookies.as_deref());
    let for_metrics = handle.clone();
    metrics.add_source(Box::new(move |out| {
        let mut h = for_metrics.lock().expect("xdp handle lock poisoned");
        h.render_attached(out);
        if let Ok(c) = h.writer().counters() {
            c.render_prometheus(out);
        }
        // Only while kernel.bpf_stats_enabled=1: the kernel's own time per packet.
        if let Some(r) = h.run_stats() {
            r.render_prometheus(out);
        }
    }));
    let for_counters = handle.clone();
    metrics.add_counter_source(Box::new(move || {
        let mut h = for_counters.lock().expect("xdp handle lock poisoned");
        let Ok(c) = h.writer().counters() else { return Vec::new() };
        c.iter()
            .map(|(k, v)| match k {
                lagran_common::counters::Counter::Answered => ("xdp_answered".to_string(), v),
                other => (format!("xdp_passed:{}", other.name()), v),
            })
            .collect()
    }));
    let writer = crate::background::Background::start("lagran-xdp-sync")?;
    Ok(tokio::spawn(async move {
        let mut tick = tokio::time::interval(Duration::from_secs(1));
        loop {
            tokio::select! {
                _ = shutdown.cancelled() => break,
                r = versions.changed() => {
                    if r.is_err() {
                        break;
                    }
                    // Off the async runtime and below the responder's priority: a large
                    // name's maps take milliseconds to write, and the responder may share
                    // this runtime's one thread and core.
                    let (h, t, s) = (handle.clone(), table.clone(), settings.clone());
                    if let Err(e) = writer.run(move || sync(&h, &t, &s)).await {
                        tracing::error!(error = %e, "the XDP map sync ended abnormally; the next table resyncs");
                    }
                }
                _ = tick.tick() => {
                    let mut h = handle.lock().expect("xdp handle lock poisoned");
                    if let Err(e) = h.writer().update_staleness(confirmation.last_ms(), &settings, now_ms()) {
                        tracing::error!(error = %e, "updating the XDP staleness switch failed");
                    }
                    if let Ok(c) = h.writer().counters() {
                        use std::sync::atomic::Ordering::Relaxed;
                        rrl_counts.limited.store(c.get(lagran_common::counters::Counter::RrlLimited), Relaxed);
                        rrl_counts.slipped.store(c.get(lagran_common::counters::Counter::RrlSlipped), Relaxed);
                    }
                    drop(h);
                    publish_cookie(&handle, cookies.as_deref());
                }
            }
        }
        let mut h = handle.lock().expect("xdp handle lock poisoned");
        if let Err(e) = h.detach() {
            tracing::error!(error = %e, "detaching XDP failed");
        }
    }))
}

/// Writes the cookie secret (it may have rotated) and the clock offset (NTP
/// may have stepped the clock) to the program.
fn publish_cookie(handle: &Mutex<XdpHandle>, jar: Option<&crate::dns::cookie::CookieJar>) {
    let Some(jar) = jar else { return };
    let now = crate::dns::cookie::unix_now();
    let c = crate::xdp::maps::cookie_config(&jar.secrets(), now, None);
    let mut h = handle.lock().expect("xdp handle lock poisoned");
    if let Err(e) = h.writer().set_cookie(&c) {
        tracing::error!(error = %e, "publishing the cookie secret to XDP failed; the fast path passes COOKIE queries");
    }
}

fn sync(handle: &Mutex<XdpHandle>, table: &SharedRouteTable, settings: &DnsSettings) {
    let t = table.load_full();
    let mut h = handle.lock().expect("xdp handle lock poisoned");
    match h.writer().sync(&t, settings) {
        Ok(stats) => tracing::debug!(
            version = t.version,
            writes = stats.writes(),
            took_us = stats.elapsed.as_micros() as u64,
            diff_us = stats.diff.as_micros() as u64,
            flat_us = stats.flat.as_micros() as u64,
            visible_us = stats.visible.as_micros() as u64,
            spliced = stats.names_spliced,
            flat_groups = h.writer().maps().flat_groups().unwrap_or(0),
            "XDP maps synced"
        ),
        Err(e) => {
            tracing::error!(version = t.version, error = %e, "XDP map sync failed; the fast path passes queries up until the next sync")
        }
    }
}

/// Reads the program's aya-log ring buffer as it fills and hands the records to `log`
/// (bridged into `tracing`, target `lagran`, level debug), until `shutdown`.
async fn forward_debug_log(logger: aya_log::EbpfLogger<&'static dyn log::Log>, shutdown: CancellationToken) {
    use tokio::io::Interest;
    use tokio::io::unix::AsyncFd;
    // SAFETY: the fd is the logger's ring buffer map, owned by `logger` and open for as
    // long as it lives; the AsyncFd owns the logger and never hands it out.
    let mut fd = match unsafe { AsyncFd::register_with_interest(logger, Interest::READABLE) } {
        Ok(fd) => fd,
        Err(e) => {
            let (_, e) = e.into_parts();
            tracing::error!(error = %e, "cannot poll the XDP debug log; its events are lost");
            return;
        }
    };
    loop {
        tokio::select! {
            _ = shutdown.cancelled() => return,
            ready = fd.readable_mut() => {
                let Ok(mut guard) = ready else { return };
                guard.get_inner_mut().flush();
                guard.clear_ready();
            }
        }
    }
}
