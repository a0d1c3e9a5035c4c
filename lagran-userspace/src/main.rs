//! The `lagran` binary: clap subcommands and tracing setup, then the library.

use std::path::PathBuf;

use anyhow::{Context, Result, bail};
use clap::{Parser, Subcommand};
use tokio_util::sync::CancellationToken;

use lagran::config::Config;
use lagran::daemon::{self, ServeOptions};
use lagran::explain;

#[derive(Parser)]
#[command(name = "lagran", version, about = "Lagran: authoritative GeoDNS for CDNs")]
struct Cli {
    /// TOML configuration file; environment variables (DNS_TTL, DATABASE_URL, …) win over it.
    #[arg(long, short, global = true, env = "LAGRAN_CONFIG")]
    config: Option<PathBuf>,
    /// Log format.
    #[arg(long, global = true, default_value = "text", value_parser = ["text", "json"])]
    log_format: String,
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Run everything in one process: store, scheduler, DNS responder, control API.
    Serve {
        /// DNS listen address (UDP and TCP).
        #[arg(long)]
        dns_listen: Option<std::net::SocketAddr>,
        /// Control API listen address.
        #[arg(long)]
        api_listen: Option<std::net::SocketAddr>,
        /// Create zone edge.lagran.net and seed 000's three nodes when missing.
        #[arg(long)]
        demo: bool,
        /// Allow a token-less API on a non-loopback address.
        #[arg(long)]
        insecure_open_api: bool,
    },
    /// Show the full ranked decision for a client, with scores and reasons.
    Explain {
        /// The client address (resolver or ECS address).
        #[arg(long, conflicts_with = "subnet")]
        ip: Option<String>,
        /// The client subnet (ECS), e.g. 58.60.0.0/24.
        #[arg(long)]
        subnet: Option<String>,
        /// The scheduled name; defaults to the first zone's apex.
        #[arg(long)]
        domain: Option<String>,
        /// Print the decision as JSON (the /api/v1/schedule shape).
        #[arg(long)]
        json: bool,
    },
    /// Geo database tools.
    Geo {
        #[command(subcommand)]
        command: GeoCommand,
    },
    /// Edge nodes in the database.
    Node {
        #[command(subcommand)]
        command: NodeCommand,
    },
}

#[derive(Subcommand)]
enum GeoCommand {
    /// Look addresses up in the configured geo files.
    Lookup {
        ips: Vec<std::net::IpAddr>,
        /// One line per address: the address, a tab, the region string exactly as stored.
        #[arg(long)]
        raw: bool,
    },
}

#[derive(Subcommand)]
enum NodeCommand {
    /// List nodes.
    List,
}

fn init_tracing(format: &str) {
    let filter = tracing_subscriber::EnvFilter::try_from_default_env()
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("info"));
    let builder = tracing_subscriber::fmt().with_env_filter(filter).with_writer(std::io::stderr);
    if format == "json" {
        builder.json().init();
    } else {
        builder.init();
    }
}

#[tokio::main]
async fn main() -> Result<()> {
    let cli = Cli::parse();
    init_tracing(&cli.log_format);
    let mut config = Config::load(cli.config.as_deref()).context("loading the configuration")?;
    match cli.command {
        Command::Serve { dns_listen, api_listen, demo, insecure_open_api } => {
            if let Some(a) = dns_listen {
                config.dns_listen = a;
            }
            if let Some(a) = api_listen {
                config.api_listen = a;
            }
            let shutdown = CancellationToken::new();
            let on_signal = shutdown.clone();
            tokio::spawn(async move {
                wait_for_signal().await;
                tracing::info!("shutting down");
                on_signal.cancel();
            });
            daemon::serve(config, ServeOptions { demo, insecure_open_api }, shutdown).await?;
        }
        Command::Explain { ip, subnet, domain, json } => {
            if ip.is_none() && subnet.is_none() {
                bail!("explain needs --ip ADDRESS or --subnet CIDR");
            }
            let out = explain::run(&config, ip.as_deref(), subnet.as_deref(), domain.as_deref(), json).await?;
            print!("{out}");
        }
        Command::Geo { command: GeoCommand::Lookup { ips, raw } } => {
            let geo = lagran::geo::GeoDb::load(config.geo.ipv4_path.as_deref(), config.geo.ipv6_path.as_deref());
            for ip in ips {
                let hit = geo.lookup(ip);
                if raw {
                    println!("{ip}\t{}", hit.as_ref().map_or("", |h| h.region.as_str()));
                } else {
                    match hit {
                        Some(h) => println!(
                            "{ip}\tcountry={} province={} city={} isp={}\t({})",
                            h.location.country, h.location.province, h.location.city, h.location.isp, h.region
                        ),
                        None => println!("{ip}\tunknown"),
                    }
                }
            }
        }
        Command::Node { command: NodeCommand::List } => {
            let store = lagran::store::Store::connect(&config.database_url).await.context("opening the database")?;
            println!("{:<12} {:<9} {:<16} {:<4} {:<8} {:<8} {:<8} {:>6} {:>5} {:>5}", "NAME", "STATUS", "PUBLIC_IP", "CC", "PROVINCE", "CITY", "ISP", "WEIGHT", "CPU", "MEM");
            for n in store.list_nodes().await? {
                println!(
                    "{:<12} {:<9} {:<16} {:<4} {:<8} {:<8} {:<8} {:>6} {:>5} {:>5}",
                    n.name,
                    n.status.as_str(),
                    n.public_ip.map_or("-".to_string(), |a| a.to_string()),
                    n.country,
                    n.province,
                    n.city,
                    n.isp,
                    n.weight,
                    n.cpu_usage,
                    n.memory_usage
                );
            }
        }
    }
    Ok(())
}

async fn wait_for_signal() {
    let ctrl_c = tokio::signal::ctrl_c();
    #[cfg(unix)]
    {
        let mut term = match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()) {
            Ok(s) => s,
            Err(_) => {
                let _ = ctrl_c.await;
                return;
            }
        };
        tokio::select! {
            _ = ctrl_c => {}
            _ = term.recv() => {}
        }
    }
    #[cfg(not(unix))]
    let _ = ctrl_c.await;
}
