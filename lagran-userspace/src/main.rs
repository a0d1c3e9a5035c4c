//! The `lagran` binary: clap subcommands and tracing setup, then the library.

use std::path::PathBuf;

use anyhow::{Context, Result, bail};
use clap::{Parser, Subcommand};
use tokio_util::sync::CancellationToken;

use lagran::cli::explain;
use lagran::config::Config;
use lagran::daemon::{self, ServeOptions};

#[derive(Parser)]
#[command(name = "lagran", version, about = "Lagran: authoritative GeoDNS for CDNs")]
struct Cli {
    /// TOML configuration file; environment variables (DNS_TTL, DATABASE_URL, …) win over it.
    #[arg(long, short, global = true, env = "LAGRAN_CONFIG")]
    config: Option<PathBuf>,
    /// The control API the operator commands talk to, e.g. https://control.example:8443
    /// (default: <api_listen> on this machine, https:// when [api.tls] is set).
    #[arg(long, global = true, env = "LAGRAN_API")]
    api: Option<String>,
    /// Accept http:// control URLs to non-loopback addresses (tokens, route tables and keys
    /// then cross the network in cleartext; warned at every start). TOML `insecure_control`.
    #[arg(long, global = true)]
    insecure_control: bool,
    /// PEM CA bundle trusted for https:// control URLs (operator commands, `lagran dns`);
    /// default: the system store. TOML `ca`.
    #[arg(long, global = true, env = "LAGRAN_CA")]
    ca: Option<PathBuf>,
    /// Log format.
    #[arg(long, global = true, default_value = "text", value_parser = ["text", "json"])]
    log_format: String,
    #[command(subcommand)]
    command: Command,
}

/// The entry points beside plain DNS (`lagran serve` and `lagran dns`).
#[derive(clap::Args, Debug)]
struct EntryArgs {
    /// DNS over TLS (RFC 7858) listen address, e.g. 0.0.0.0:853; repeat for several. Needs
    /// --tls-cert/--tls-key. Env DOT_LISTEN (comma-separated).
    #[arg(long)]
    dot_listen: Vec<std::net::SocketAddr>,
    /// DNS over QUIC (RFC 9250) listen address (UDP), e.g. 0.0.0.0:853; repeat for several.
    /// Needs --tls-cert/--tls-key. Env DOQ_LISTEN (comma-separated).
    #[arg(long)]
    doq_listen: Vec<std::net::SocketAddr>,
    /// PEM certificate chain of DoT and DoQ (reloaded on SIGHUP). Env TLS_CERT.
    #[arg(long)]
    tls_cert: Option<PathBuf>,
    /// PEM private key of --tls-cert. Env TLS_KEY.
    #[arg(long)]
    tls_key: Option<PathBuf>,
    /// HTTP listen address answering 302 to the node chosen for the client; repeat for
    /// several. Env HTTP_LISTEN (comma-separated).
    #[arg(long)]
    http_listen: Vec<std::net::SocketAddr>,
}

impl EntryArgs {
    /// Flags win over the environment and the TOML file (as --dns-listen does).
    fn apply(self, config: &mut Config) -> Result<()> {
        if !self.dot_listen.is_empty() {
            config.dns.dot_listen = self.dot_listen;
        }
        if !self.doq_listen.is_empty() {
            config.dns.doq_listen = self.doq_listen;
        }
        config.tls.cert = self.tls_cert.or(config.tls.cert.take());
        config.tls.key = self.tls_key.or(config.tls.key.take());
        if !self.http_listen.is_empty() {
            config.http_redirect.listen = self.http_listen;
        }
        config.validate().context("--dot-listen/--doq-listen/--tls-cert/--tls-key/--http-listen")?;
        Ok(())
    }
}

/// The control API's TLS (`lagran serve` and `lagran control`).
#[derive(clap::Args, Debug)]
struct ApiTlsArgs {
    /// PEM certificate chain of the control API: it then serves HTTPS only. TOML `[api.tls] cert`.
    #[arg(long)]
    api_tls_cert: Option<PathBuf>,
    /// PEM private key of --api-tls-cert. TOML `[api.tls] key`.
    #[arg(long)]
    api_tls_key: Option<PathBuf>,
    /// PEM CA: every API client must present a certificate it signed. TOML `[api.tls] client_ca`.
    #[arg(long)]
    api_tls_client_ca: Option<PathBuf>,
}

impl ApiTlsArgs {
    /// Flags win over the TOML file.
    fn apply(self, config: &mut Config) -> Result<()> {
        let t = &mut config.api.tls;
        t.cert = self.api_tls_cert.or(t.cert.take());
        t.key = self.api_tls_key.or(t.key.take());
        t.client_ca = self.api_tls_client_ca.or(t.client_ca.take());
        config.validate().context("--api-tls-cert/--api-tls-key/--api-tls-client-ca")?;
        Ok(())
    }
}

/// The control API's listener and how the control plane starts (`lagran serve` and
/// `lagran control`).
#[derive(clap::Args, Debug)]
struct ControlArgs {
    /// Control API listen address.
    #[arg(long)]
    api_listen: Option<std::net::SocketAddr>,
    /// Create zone edge.lagran.net and the three demo nodes (gz-01, hk-01, kr-01) when missing.
    #[arg(long)]
    demo: bool,
    /// Allow a token-less API on a non-loopback address.
    #[arg(long)]
    insecure_open_api: bool,
    #[command(flatten)]
    api_tls: ApiTlsArgs,
}

impl ControlArgs {
    /// Flags win over the TOML file; returns the daemon's options with the caller's `xdp`.
    fn apply(self, config: &mut Config, xdp: Option<String>) -> Result<ServeOptions> {
        self.api_tls.apply(config)?;
        if let Some(a) = self.api_listen {
            config.api_listen = a;
        }
        Ok(ServeOptions { demo: self.demo, insecure_open_api: self.insecure_open_api, xdp })
    }
}

#[derive(Subcommand)]
enum Command {
    /// Run everything in one process: store, scheduler, DNS responder, control API.
    Serve {
        /// DNS listen address (UDP and TCP); repeat for several (IPv4 and IPv6). The XDP
        /// fast path answers only packets addressed to these.
        #[arg(long)]
        dns_listen: Vec<std::net::SocketAddr>,
        /// Attach the XDP fast path to this interface (native mode, else generic).
        #[arg(long)]
        xdp: Option<String>,
        #[command(flatten)]
        entry: EntryArgs,
        #[command(flatten)]
        control: ControlArgs,
    },
    /// The control plane only (store, scheduler, probes, API); NS hosts run `lagran dns`.
    /// On PostgreSQL any number of them share the database and one leads.
    Control {
        #[command(flatten)]
        control: ControlArgs,
    },
    /// An NS host: answers DNS from the route tables a control plane streams.
    Dns {
        /// A control process's API, e.g. https://10.0.0.1:8443 (with --ca); repeat for each
        /// process of the cluster (LAGRAN_CONTROL: comma-separated). The NS host fails over
        /// between them. http:// only to a loopback address, or with --insecure-control.
        #[arg(long, env = "LAGRAN_CONTROL", value_delimiter = ',', required = true)]
        control: Vec<String>,
        /// This NS host's name in its reports (GET /api/v1/nshosts); default: host name and DNS address.
        #[arg(long)]
        name: Option<String>,
        /// PEM client certificate presented to an https:// control API. TOML `client_cert`.
        #[arg(long)]
        client_cert: Option<PathBuf>,
        /// PEM private key of --client-cert. TOML `client_key`.
        #[arg(long)]
        client_key: Option<PathBuf>,
        /// DNS listen address (UDP and TCP); repeat for several (IPv4 and IPv6).
        #[arg(long)]
        dns_listen: Vec<std::net::SocketAddr>,
        /// Address for /metrics and /healthz.
        #[arg(long)]
        api_listen: Option<std::net::SocketAddr>,
        /// Where the last route table is saved (served after a restart while the control plane is away).
        #[arg(long, default_value = "lagran-data/routes.json")]
        state_file: PathBuf,
        /// Attach the XDP fast path to this interface (native mode, else generic).
        #[arg(long)]
        xdp: Option<String>,
        #[command(flatten)]
        entry: EntryArgs,
    },
    /// The XDP fast path's pinned maps (names, routes, answers, counters), readable.
    Maps {
        #[command(subcommand)]
        command: MapsCommand,
    },
    /// How far each NS host lags behind the control plane (`_version.<zone>` TXT).
    Monitor {
        /// NS host DNS addresses (repeat), e.g. 10.0.0.2:53.
        #[arg(long = "ns", required = true)]
        ns: Vec<std::net::SocketAddr>,
        #[arg(long, default_value = "edge.lagran.net")]
        zone: String,
        /// Repeat every N seconds until interrupted.
        #[arg(long)]
        watch: Option<u64>,
        /// With --watch: run as a service exporting lagran_monitor_* on GET /metrics here
        /// (NS hosts asked over UDP and TCP) instead of printing.
        #[arg(long, requires = "watch")]
        listen: Option<std::net::SocketAddr>,
        /// An answer checked on every NS host against the control plane's, as NAME@SUBNET
        /// (an A query with that ECS subnet); repeat for several. With --listen.
        #[arg(long, requires = "listen")]
        expect: Vec<lagran::cli::monitor_service::Expectation>,
        /// With --listen: an NS host's DNS-over-TLS address, [NAME@]ADDR:PORT, asked over TLS
        /// too (its certificate checked for NAME, default the address, against --ca or the
        /// system's store); repeat for each host that enables DoT.
        #[arg(long, requires = "listen")]
        dot: Vec<lagran::cli::monitor_service::DotTarget>,
    },
    /// Show the full ranked decision for a client, with scores and reasons.
    Explain {
        /// The client address (resolver or ECS address).
        #[arg(long, conflicts_with = "subnet")]
        ip: Option<String>,
        /// The client subnet (ECS), e.g. 58.60.0.0/24.
        #[arg(long)]
        subnet: Option<String>,
        /// The resolver sending --subnet: its location decides when the subnet cannot be located.
        #[arg(long, requires = "subnet")]
        resolver: Option<String>,
        /// The scheduled name; defaults to the first zone's apex.
        #[arg(long)]
        domain: Option<String>,
        /// Print the decision as JSON (the /api/v1/schedule shape).
        #[arg(long)]
        json: bool,
        /// Compute the decision in this process from the database and geo files instead of
        /// asking the daemon (the default only when no --api / LAGRAN_API is given and no daemon
        /// answers at the configured api_listen).
        #[arg(long)]
        local: bool,
    },
    /// Geo database tools: lookup, build, diff, partitions.
    Geo {
        #[command(subcommand)]
        command: lagran::cli::geo::GeoCommand,
    },
    /// Edge nodes.
    Node {
        #[command(subcommand)]
        command: NodeCommand,
    },
    /// Scheduling rules: manual pins and canary splits (through the API).
    Rule {
        #[command(subcommand)]
        command: lagran::cli::ops::RuleCommand,
    },
    /// Lines: prefix lists that override the geo partition (through the API).
    Line {
        #[command(subcommand)]
        command: lagran::cli::ops::LineCommand,
    },
    /// Route tables: show, rollback, resume (through the API).
    Routes {
        #[command(subcommand)]
        command: lagran::cli::ops::RoutesCommand,
    },
    /// DNSSEC keys, their states and next events, the DS for the parent zone;
    /// rollovers by hand (through the API).
    Dnssec {
        #[command(subcommand)]
        command: lagran::cli::dnssec::DnssecCommand,
    },
}

#[derive(Subcommand)]
enum MapsCommand {
    /// Print the maps pinned under /sys/fs/bpf/lagran (run as root on the NS host).
    Dump {
        /// At most this many route entries.
        #[arg(long, default_value_t = 200)]
        limit: usize,
    },
}

#[derive(Subcommand)]
enum NodeCommand {
    /// List nodes (from the database).
    List,
    /// Change fields of a node through the API: `lagran node set gz-01 status=offline weight=90`.
    Set { name: String, assignments: Vec<String> },
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
    let config_path = cli.config.clone();
    if let Some(ca) = cli.ca.clone() {
        config.ca = Some(ca);
    }
    config.insecure_control |= cli.insecure_control;
    lagran::control_url::warn_if_insecure(config.insecure_control);
    match cli.command {
        Command::Serve { dns_listen, xdp, entry, control } => {
            entry.apply(&mut config)?;
            let opts = control.apply(&mut config, xdp)?;
            if !dns_listen.is_empty() {
                config.dns_listen = dns_listen;
                config.validate().context("--dns-listen")?;
            }
            daemon::serve(config, opts, shutdown_on_signal()).await?;
        }
        Command::Control { control } => {
            let opts = control.apply(&mut config, None)?;
            daemon::control(config, opts, shutdown_on_signal()).await?;
        }
        Command::Dns { control, name, client_cert, client_key, dns_listen, api_listen, state_file, xdp, entry } => {
            entry.apply(&mut config)?;
            config.client_cert = client_cert.or(config.client_cert.take());
            config.client_key = client_key.or(config.client_key.take());
            config.validate().context("--client-cert/--client-key")?;
            for url in &control {
                lagran::control_url::check(url, config.insecure_control).context("--control")?;
            }
            if !dns_listen.is_empty() {
                config.dns_listen = dns_listen;
                config.validate().context("--dns-listen")?;
            }
            if let Some(a) = api_listen {
                config.api_listen = a;
            }
            let opts = daemon::DnsHostOptions { control, name, state_file: Some(state_file), xdp, config_path };
            daemon::dns_host(config, opts, shutdown_on_signal()).await?;
        }
        Command::Explain { ip, subnet, resolver, domain, json, local } => {
            if ip.is_none() && subnet.is_none() {
                bail!("explain needs --ip ADDRESS or --subnet CIDR");
            }
            let asker = explain::Asker { ip: ip.as_deref(), subnet: subnet.as_deref(), resolver: resolver.as_deref() };
            let api = client(&cli.api, &config);
            let via = if local {
                explain::Via::Local
            } else {
                explain::Via::Daemon { client: &api, named: cli.api.is_some() }
            };
            let out = explain::run(&config, asker, domain.as_deref(), json, via).await?;
            print!("{out}");
        }
        Command::Dnssec { command } => {
            print!("{}", lagran::cli::dnssec::run(&client(&cli.api, &config), command).await?);
        }
        Command::Geo { command } => {
            let out = lagran::cli::geo::run(command, &config).await?;
            print!("{out}");
        }
        Command::Node { command: NodeCommand::Set { name, assignments } } => {
            print!("{}", lagran::cli::ops::node_set(&client(&cli.api, &config), &name, &assignments).await?);
        }
        Command::Maps { command: MapsCommand::Dump { limit } } => {
            let dir = lagran::xdp::pin_dir_override().unwrap_or_else(|| lagran::xdp::PIN_DIR.into());
            let maps = lagran::xdp::Maps::open_pinned(&dir).with_context(|| {
                format!("opening the maps pinned in {} (is `lagran serve --xdp IFACE` running?)", dir.display())
            })?;
            print!("{}", maps.dump(limit)?);
        }
        Command::Monitor { ns, zone, watch, listen: Some(listen), expect, dot } => {
            use lagran::cli::monitor_service::{Watch, dot_client_config};
            let interval = std::time::Duration::from_secs(watch.unwrap_or(10).max(1));
            let tls = if dot.is_empty() { None } else { Some(dot_client_config(&config.client_tls())?) };
            let watch = Watch { ns, dot, tls, zone, expect, interval };
            lagran::cli::monitor_service::run(client(&cli.api, &config), watch, listen, shutdown_on_signal()).await?;
        }
        Command::Monitor { ns, zone, watch, listen: None, .. } => {
            let c = client(&cli.api, &config);
            loop {
                print!("{}", lagran::cli::monitor::report(Some(&c), &ns, &zone).await);
                let Some(secs) = watch else { break };
                tokio::time::sleep(std::time::Duration::from_secs(secs.max(1))).await;
            }
        }
        Command::Rule { command } => print!("{}", lagran::cli::ops::rule(&client(&cli.api, &config), command).await?),
        Command::Line { command } => print!("{}", lagran::cli::ops::line(&client(&cli.api, &config), command).await?),
        Command::Routes { command } => {
            print!("{}", lagran::cli::ops::routes(&client(&cli.api, &config), command).await?)
        }
        Command::Node { command: NodeCommand::List } => {
            let store = lagran::store::Store::connect(&config.database_url).await.context("opening the database")?;
            println!(
                "{:<12} {:<9} {:<16} {:<4} {:<8} {:<8} {:<8} {:>6} {:>5} {:>5}",
                "NAME", "STATUS", "PUBLIC_IP", "CC", "PROVINCE", "CITY", "ISP", "WEIGHT", "CPU", "MEM"
            );
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

fn client(api: &Option<String>, config: &Config) -> lagran::api_client::ApiClient {
    // The configured listen address, reached on this machine (0.0.0.0 and :: mean loopback here).
    let default_base = || {
        let mut addr = config.api_listen;
        if addr.ip().is_unspecified() {
            addr.set_ip(if addr.is_ipv4() {
                std::net::Ipv4Addr::LOCALHOST.into()
            } else {
                std::net::Ipv6Addr::LOCALHOST.into()
            });
        }
        let scheme = if config.api.tls.cert.is_some() { "https" } else { "http" };
        format!("{scheme}://{addr}")
    };
    lagran::api_client::ApiClient {
        base: api.clone().unwrap_or_else(default_base),
        admin_token: config.admin_token.clone(),
        agent_token: config.agent_token.clone(),
        tls: config.client_tls(),
    }
}

/// A token cancelled on SIGINT/SIGTERM.
fn shutdown_on_signal() -> CancellationToken {
    let shutdown = CancellationToken::new();
    let on_signal = shutdown.clone();
    tokio::spawn(async move {
        wait_for_signal().await;
        tracing::info!("shutting down");
        on_signal.cancel();
    });
    shutdown
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

#[cfg(test)]
mod tests {
    use clap::CommandFactory;

    use super::*;

    #[test]
    fn the_command_line_is_consistent_and_serve_and_control_share_their_flags() {
        Cli::command().debug_assert();
        let flags = ["--api-listen", "127.0.0.1:9000", "--demo", "--insecure-open-api", "--api-tls-cert", "c.pem"];
        for cmd in ["serve", "control"] {
            let cli = Cli::try_parse_from(["lagran", cmd].into_iter().chain(flags)).unwrap();
            let (Command::Serve { control, .. } | Command::Control { control }) = cli.command else {
                panic!("{cmd} parsed as another command");
            };
            assert_eq!(control.api_listen, Some("127.0.0.1:9000".parse().unwrap()));
            assert!(control.demo && control.insecure_open_api);
            assert_eq!(control.api_tls.api_tls_cert, Some(PathBuf::from("c.pem")));
        }
    }
}
