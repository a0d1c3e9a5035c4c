//! SIGHUP on an NS host (`lagran dns`): re-read the configuration, never die.
//!
//! The default action of SIGHUP is to end the process; an NS host installs its
//! handler before anything else, so a `kill -HUP` (or a log rotation tool, or a
//! closed terminal) never takes DNS down. On each SIGHUP:
//! - the `--config` file is read again (with the environment over it, as at
//!   start). A file that does not read or parse is logged and ignored: the
//!   running configuration stays;
//! - a changed `agent_token` (the token of the route-table stream) is taken at
//!   once: the follower reconnects with it, keeping the table it serves;
//! - the DoT/DoQ certificate (`tls.cert`, `tls.key`) is re-read by its own
//!   listener ([`crate::dns::cert`]), on the same signal.
//!
//! Everything else (listen addresses, `[dns]` settings) takes effect at the next
//! restart; the log line says so.

use std::path::PathBuf;
use std::sync::{Arc, Mutex};

use tokio::sync::Notify;
use tokio_util::sync::CancellationToken;

use crate::config::Config;
use crate::nshost::Follower;

/// Handles SIGHUP until `shutdown`: re-reads `config_path`, stores a changed
/// agent token in `agent_token` and wakes `reload`.
pub async fn sighup_loop(
    config_path: Option<PathBuf>,
    agent_token: Arc<Mutex<Option<String>>>,
    reload: Arc<Notify>,
    shutdown: CancellationToken,
) {
    use tokio::signal::unix::{SignalKind, signal};
    let mut hup = match signal(SignalKind::hangup()) {
        Ok(s) => s,
        Err(e) => {
            tracing::warn!(error = %e, "cannot listen for SIGHUP: it would end the NS host");
            return;
        }
    };
    loop {
        tokio::select! {
            () = shutdown.cancelled() => return,
            got = hup.recv() => if got.is_none() { return },
        }
        let Some(path) = &config_path else {
            tracing::info!("SIGHUP: no --config file to re-read; the DoT/DoQ certificate, if any, is re-read");
            continue;
        };
        match Config::load(Some(path)) {
            Err(e) => tracing::error!(
                path = %path.display(),
                error = %e,
                "SIGHUP: the configuration is not usable; the running one stays"
            ),
            Ok(new) => {
                let changed = {
                    let mut current = agent_token.lock().unwrap_or_else(|e| e.into_inner());
                    let changed = *current != new.agent_token;
                    *current = new.agent_token;
                    changed
                };
                if changed {
                    reload.notify_one();
                }
                tracing::info!(
                    path = %path.display(),
                    agent_token_changed = changed,
                    "SIGHUP: configuration re-read (agent_token taken now, the DoT/DoQ certificate re-read; \
                     listen addresses and [dns] settings at the next restart)"
                );
            }
        }
    }
}

/// Runs followers made by `make` until `shutdown`; each `reload` ends the
/// running one and starts a new one (with the reloaded settings).
pub async fn follow_until_reload<F>(make: Arc<F>, reload: Arc<Notify>, shutdown: CancellationToken)
where
    F: Fn() -> Follower + Send + Sync + 'static,
{
    loop {
        let run = shutdown.child_token();
        let follower = make().run(run.clone());
        tokio::pin!(follower);
        tokio::select! {
            () = &mut follower => return,
            () = reload.notified() => {
                run.cancel();
                follower.await;
                tracing::info!("route-table follower restarted with the reloaded configuration");
            }
        }
    }
}
