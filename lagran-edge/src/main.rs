//! `lagran-edge`: the CDN edge node. Reads a TOML config, serves until SIGTERM/ctrl-c.

use std::path::PathBuf;

use anyhow::Context;
use clap::Parser;
use lagran_edge::config::Config;
use tokio_util::sync::CancellationToken;
use tracing_subscriber::EnvFilter;

/// Lagran CDN edge node: TLS, WAF, rate limit, cache and origin fetch per site.
#[derive(Debug, Parser)]
#[command(version)]
struct Args {
    /// TOML configuration file.
    #[arg(short, long, env = "LAGRAN_EDGE_CONFIG", default_value = "edge.toml")]
    config: PathBuf,
    /// Validate the configuration (and load certificates), then exit.
    #[arg(long)]
    check: bool,
    /// PEM CA bundle trusted for an https:// control_url (TOML `ca`).
    #[arg(long, env = "LAGRAN_CA")]
    ca: Option<PathBuf>,
    /// Accept an http:// control_url to a non-loopback address: the agent token and the
    /// sites' private keys then cross the network in cleartext (TOML `insecure_control`).
    #[arg(long)]
    insecure_control: bool,
}

fn main() -> anyhow::Result<()> {
    runtime()?.block_on(run())
}

/// The scheduler for the CPUs this process may run on. With one (a pinned
/// process, a one-CPU machine or container) the current-thread scheduler: a
/// multi-thread one would run a single worker anyway and pay for work stealing,
/// cross-thread wake-ups and parking on every request. Otherwise one worker per
/// CPU.
fn runtime() -> std::io::Result<tokio::runtime::Runtime> {
    let cpus = std::thread::available_parallelism().map_or(1, usize::from);
    let mut builder = match cpus {
        1 => tokio::runtime::Builder::new_current_thread(),
        _ => tokio::runtime::Builder::new_multi_thread(),
    };
    builder.enable_all().build()
}

async fn run() -> anyhow::Result<()> {
    tracing_subscriber::fmt()
        .with_env_filter(EnvFilter::try_from_default_env().unwrap_or_else(|_| EnvFilter::new("info")))
        .init();
    let args = Args::parse();
    let mut config = Config::load(&args.config)?;
    // The seed's environment name wins over the file.
    if let Ok(token) = std::env::var("AGENT_TOKEN") {
        config.agent_token = Some(token);
    }
    if let Some(ca) = args.ca.clone() {
        config.ca = Some(ca);
    }
    config.insecure_control |= args.insecure_control;
    if let Some(url) = &config.control_url {
        lagran_edge::control::check_url(url, config.insecure_control)
            .with_context(|| format!("{}", args.config.display()))?;
    }
    if config.insecure_control {
        tracing::warn!(
            "insecure_control is on: an http:// control_url to another machine is accepted, and the agent token \
             and the sites' private keys may cross the network in cleartext"
        );
    }
    if args.check {
        if config.listen_https.is_some() {
            lagran_edge::tls::server_config(&config.sites)?;
        }
        println!("{}: {} site(s), configuration ok", args.config.display(), config.sites.len());
        return Ok(());
    }

    let shutdown = CancellationToken::new();
    tokio::spawn(cancel_on_signal(shutdown.clone()));
    lagran_edge::serve(config, shutdown).await.context("lagran-edge stopped")
}

async fn cancel_on_signal(shutdown: CancellationToken) {
    let ctrl_c = tokio::signal::ctrl_c();
    #[cfg(unix)]
    {
        use tokio::signal::unix::{SignalKind, signal};
        match signal(SignalKind::terminate()) {
            Ok(mut term) => tokio::select! {
                _ = ctrl_c => {}
                _ = term.recv() => {}
            },
            Err(_) => {
                let _ = ctrl_c.await;
            }
        }
    }
    #[cfg(not(unix))]
    let _ = ctrl_c.await;
    tracing::info!("shutting down");
    shutdown.cancel();
}
