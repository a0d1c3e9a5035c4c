//! `lagran geo …`: operator commands on geo files and on the running daemon's geo data.
//!
//! | command | what it does |
//! | --- | --- |
//! | `lookup IP… [--raw] [--file F] [--api URL]` | look addresses up in the configured files (or `F`), with the API's ASN → carrier entries |
//! | `build --from FILE --out OUT.xdb [--out-v6 OUT6.xdb]` | convert ip2region source text / CIDR CSV (or any readable format) to xdb with the project's writer |
//! | `diff OLD NEW [--sample N] [--json]` | ranges and sampled addresses that change tuple, by province and ISP |
//! | `partitions [--top N] [--no-overrides]` | how the address space is cut: partitions with range and prefix counts |
//! | `override list\|add\|rm` | the override table, through the daemon's API |
//! | `reload [--force]` | make the daemon re-read its geo files (same as SIGHUP, but can force) |
//! | `bench [--file F] [-n N]` | mean lookup time |
//!
//! `override` and `reload` talk to `--api` (env `LAGRAN_API`; default: the configured
//! `api_listen`) with `Authorization: Bearer $ADMIN_TOKEN` (and the agent token
//! header when `AGENT_TOKEN` is set).

use std::fmt::Write as _;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};
use std::path::{Path, PathBuf};

use hyper::Method;
use serde_json::{Value, json};

use super::geo_client::{ApiClient, ApiResponse, encode_segment};
use crate::config::Config;
use crate::geo::formats::{self, Format};
use crate::geo::{GeoDb, GeoError, IpVersion, Xdb, write_xdb};
use crate::partition::diff::{DEFAULT_SAMPLE, DEFAULT_SEED, DiffOptions, diff_geo, tuple_text};
use crate::partition::{Override, PartitionTable};
pub use crate::partition::{PartitionRow, partition_rows, prefix_count};

/// The `lagran geo` subcommands.
#[derive(Debug, clap::Subcommand)]
pub enum GeoCommand {
    /// Look addresses up in the configured geo files (GEOIP_PATH, GEOIP_IPV6_PATH,
    /// GEOIP_MMDB_PATH, GEOIP_ASN_PATH), with the ASN → carrier entries written
    /// through the API (asked from the daemon, else read from the database).
    Lookup {
        ips: Vec<IpAddr>,
        /// One line per address: the address, a tab, the region string exactly as stored.
        #[arg(long)]
        raw: bool,
        /// Look up in this file (any format) instead of the configured ones.
        #[arg(long)]
        file: Option<PathBuf>,
        /// The daemon asked for the API's ASN → carrier entries (default: the configured
        /// api_listen on this machine; when none answers there, the database).
        #[arg(long, env = "LAGRAN_API")]
        api: Option<String>,
    },
    /// Build an xdb with the project's writer from ip2region source text
    /// (`start_ip|end_ip|region`, one range a line) or a CIDR CSV (any readable
    /// format is accepted).
    Build {
        /// Input file.
        #[arg(long)]
        from: PathBuf,
        /// Output xdb: the IPv4 ranges (the IPv6 ones when the input has only IPv6).
        #[arg(long)]
        out: PathBuf,
        /// Output xdb for the IPv6 ranges of an input that has both families.
        #[arg(long)]
        out_v6: Option<PathBuf>,
        /// Input format, when the extension and content do not say.
        #[arg(long, value_enum)]
        format: Option<FormatArg>,
    },
    /// Compare two geo files (any format): changed ranges and how many of N sampled
    /// addresses per family change tuple, by province and ISP.
    Diff {
        old: PathBuf,
        new: PathBuf,
        /// Sampled addresses per family (fixed seed).
        #[arg(long, default_value_t = DEFAULT_SAMPLE)]
        sample: usize,
        /// RNG seed of the sample.
        #[arg(long, default_value_t = DEFAULT_SEED)]
        seed: u64,
        /// Entries shown per breakdown; changed ranges listed.
        #[arg(long, default_value_t = 20)]
        top: usize,
        /// The report as JSON.
        #[arg(long)]
        json: bool,
    },
    /// List the partitions the configured files and overrides cut the address space
    /// into, with their range and CIDR prefix counts, largest first.
    Partitions {
        /// How many partitions to list (0 = all).
        #[arg(long, default_value_t = 50)]
        top: usize,
        /// Do not read the overrides from the database.
        #[arg(long)]
        no_overrides: bool,
    },
    /// The override table (CIDR → tuple, wins over the files) of the running daemon.
    Override {
        #[command(subcommand)]
        command: OverrideCommand,
        /// The daemon's API, e.g. https://control.example:8443 (default: the configured api_listen on this machine).
        #[arg(long, env = "LAGRAN_API", global = true)]
        api: Option<String>,
    },
    /// Make the running daemon re-read its geo files (refused above
    /// geo.max_change_ratio / GEO_MAX_CHANGE_RATIO unless --force).
    Reload {
        /// Replace the data even when more than the allowed ratio of addresses change.
        #[arg(long)]
        force: bool,
        /// The daemon's API (default: the configured api_listen).
        #[arg(long, env = "LAGRAN_API")]
        api: Option<String>,
    },
    /// Mean lookup time on the configured files (or FILE); build with --release.
    Bench {
        /// Measure this file instead of the configured ones.
        #[arg(long)]
        file: Option<PathBuf>,
        /// Lookups per family.
        #[arg(short, long, default_value_t = 1_000_000)]
        n: usize,
    },
}

/// `lagran geo override …`.
#[derive(Debug, clap::Subcommand)]
pub enum OverrideCommand {
    /// List the overrides.
    List,
    /// Create or replace the override of a prefix.
    Add {
        /// The prefix, without host bits (1.2.3.0/24).
        prefix: String,
        #[arg(long, default_value = "")]
        country: String,
        #[arg(long, default_value = "")]
        province: String,
        #[arg(long, default_value = "")]
        city: String,
        #[arg(long, default_value = "")]
        isp: String,
        /// Why (ticket, report).
        #[arg(long, default_value = "")]
        note: String,
        /// Who (default: $USER).
        #[arg(long)]
        by: Option<String>,
    },
    /// Remove the override of exactly this prefix.
    Rm { prefix: String },
}

/// `--format` values.
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum FormatArg {
    Xdb,
    Dat,
    Csv,
    Json,
    Source,
}

impl From<FormatArg> for Format {
    fn from(f: FormatArg) -> Format {
        match f {
            FormatArg::Xdb => Format::Xdb,
            FormatArg::Dat => Format::GeoipDat,
            FormatArg::Csv => Format::CidrCsv,
            FormatArg::Json => Format::CidrJson,
            FormatArg::Source => Format::Source,
        }
    }
}

/// Runs a geo subcommand and returns what to print.
pub async fn run(cmd: GeoCommand, config: &Config) -> Result<String, GeoError> {
    match cmd {
        GeoCommand::Lookup { ips, raw, file, api } => {
            let geo = match &file {
                Some(f) => GeoDb::try_load(Some(f), None)?,
                None => {
                    let mut sources = crate::geo::Sources::of_settings(&config.geo);
                    if sources.has_world() {
                        let client = api_client(config, api.as_deref());
                        let c = super::geo_carriers::api_carriers(config, &client, api.is_some()).await?;
                        eprintln!("geo lookup: {} ASN → carrier entries of the API, from {}", c.entries.len(), c.from);
                        sources.asn_carriers_api = c.entries;
                    }
                    GeoDb::load_sources(&sources)
                }
            };
            Ok(lookup(&geo, &ips, raw))
        }
        GeoCommand::Build { from, out, out_v6, format } => {
            build(&from, &out, out_v6.as_deref(), format.map(Format::from))
        }
        GeoCommand::Diff { old, new, sample, seed, top, json } => {
            let sources = crate::geo::Sources::of_settings(&config.geo);
            let (a, b) = tokio::task::spawn_blocking(move || {
                Ok::<_, GeoError>((diff_side(&sources, &old)?, diff_side(&sources, &new)?))
            })
            .await
            .map_err(|e| GeoError::Usage(e.to_string()))??;
            let opts = DiffOptions { sample, seed, top, list_ranges: top, ..DiffOptions::default() };
            let report = diff_geo(&a, &b, &opts);
            Ok(if json { serde_json::to_string_pretty(&report).unwrap_or_default() + "\n" } else { report.render() })
        }
        GeoCommand::Partitions { top, no_overrides } => partitions(config, top, no_overrides).await,
        GeoCommand::Override { command, api } => {
            let client = api_client(config, api.as_deref());
            override_cmd(&client, command).await
        }
        GeoCommand::Reload { force, api } => {
            let client = api_client(config, api.as_deref());
            reload_cmd(&client, force).await
        }
        GeoCommand::Bench { file, n } => {
            let geo = match &file {
                Some(f) => GeoDb::try_load(Some(f), None)?,
                None => GeoDb::try_load_sources(&crate::geo::Sources::of_settings(&config.geo))?,
            };
            let mut out = String::new();
            for x in [geo.v4(), geo.v6()].into_iter().flatten() {
                let t = crate::geo::bench::bench_lookup(x, n);
                let _ = writeln!(
                    out,
                    "{}: {} segments, {} lookups, {} ns per lookup{}",
                    x.ip_version(),
                    x.len(),
                    n,
                    t.as_nanos(),
                    if cfg!(debug_assertions) { " (debug build)" } else { "" }
                );
            }
            if out.is_empty() {
                return Err(GeoError::Usage("no geo file to measure: set GEOIP_PATH or pass --file".into()));
            }
            Ok(out)
        }
    }
}

/// One side of `lagran geo diff`: a geo file alone, or, for a MaxMind DB or ASN
/// file, the configured data with that file in place of its namesake (so a new
/// version of either world file is compared as it would serve).
fn diff_side(configured: &crate::geo::Sources, file: &Path) -> Result<GeoDb, GeoError> {
    let bytes = std::fs::read(file).map_err(|source| GeoError::Io { path: file.to_path_buf(), source })?;
    match crate::geo::world::world_file_kind(&bytes) {
        Some(kind) => GeoDb::try_load_sources(&configured.with_world_file(file, kind)),
        None => GeoDb::try_load(Some(file), None),
    }
}

fn lookup(geo: &GeoDb, ips: &[IpAddr], raw: bool) -> String {
    let mut out = String::new();
    for ip in ips {
        if raw {
            // Exactly what the file stores, special-purpose ranges included.
            let stored = geo.stored(*ip);
            let _ = writeln!(out, "{ip}\t{}", stored.as_ref().map_or("", |h| h.region.as_str()));
            continue;
        }
        let hit = geo.lookup(*ip);
        match hit {
            Some(h) => {
                let l = &h.location;
                let coords = crate::location::coords::coordinates(l)
                    .map_or(String::new(), |(a, b)| format!(" coords={a:.2},{b:.2}"));
                let sources = crate::location::sources::FieldSources::of_region(&h.region, l).summary();
                let _ = writeln!(
                    out,
                    "{ip}\tcountry={} province={} city={} isp={} continent={}{coords}\tsources: {sources}\t({})",
                    l.country,
                    l.province,
                    l.city,
                    l.isp,
                    l.continent(),
                    h.region
                );
            }
            None => {
                let _ = writeln!(out, "{ip}\tunknown");
            }
        }
    }
    out
}

/// `lagran geo build`: reads `from` (any format; `format` forces one), writes the IPv4
/// ranges to `out` and the IPv6 ones to `out_v6` (or to `out` when there is no IPv4),
/// reads each written file back, and reports what was written.
pub fn build(from: &Path, out: &Path, out_v6: Option<&Path>, format: Option<Format>) -> Result<String, GeoError> {
    let bytes = std::fs::read(from).map_err(|source| GeoError::Io { path: from.to_path_buf(), source })?;
    let format = match format {
        Some(f) => f,
        None => formats::detect(from, &bytes).map_err(|e| e.in_file(from))?,
    };
    let ranges = formats::parse_ranges(&bytes, format).map_err(|e| e.in_file(from))?;
    let mut report = format!("read {} ({}): {} records\n", from.display(), format, ranges.stats.records);
    for s in &ranges.stats.skipped {
        let _ = writeln!(report, "  skipped: {s}");
    }
    // (family, its ranges, where they go)
    type Target<'a> = (IpVersion, &'a [(u128, u128, String)], &'a Path);
    let mut targets: Vec<Target> = Vec::new();
    match (ranges.v4.is_empty(), ranges.v6.is_empty(), out_v6) {
        (true, true, _) => {
            return Err(GeoError::Usage(format!("{} holds no ranges", from.display())));
        }
        (false, _, _) => {
            targets.push((IpVersion::V4, &ranges.v4, out));
            match (ranges.v6.is_empty(), out_v6) {
                (false, Some(p)) => targets.push((IpVersion::V6, &ranges.v6, p)),
                (false, None) => {
                    let _ =
                        writeln!(report, "  note: {} IPv6 ranges not written (give --out-v6 FILE)", ranges.v6.len());
                }
                _ => {}
            }
        }
        (true, false, p) => targets.push((IpVersion::V6, &ranges.v6, p.unwrap_or(out))),
    }
    for (version, list, path) in targets {
        let bytes = write_xdb(version, list)?;
        // Read back what was written: the file must be valid for our reader.
        let check = Xdb::from_bytes(bytes.clone())
            .map_err(|e| GeoError::Usage(format!("the written xdb does not read back: {e}")))?;
        std::fs::write(path, &bytes).map_err(|source| GeoError::Io { path: path.to_path_buf(), source })?;
        let _ = writeln!(
            report,
            "wrote {}: {version}, {} ranges ({} segments after the /16 split), {} bytes",
            path.display(),
            list.len(),
            check.len(),
            bytes.len()
        );
    }
    Ok(report)
}

async fn partitions(config: &Config, top: usize, no_overrides: bool) -> Result<String, GeoError> {
    let geo = GeoDb::load_sources(&crate::geo::Sources::of_settings(&config.geo));
    let mut out = String::new();
    let mut overrides: Vec<Override> = Vec::new();
    if !no_overrides {
        match crate::store::Store::connect(&config.database_url).await {
            Ok(store) => match store.list_geo_overrides().await {
                Ok(list) => overrides = list.iter().map(Override::from).collect(),
                Err(e) => {
                    let _ = writeln!(out, "note: overrides not read: {e}");
                }
            },
            Err(e) => {
                let _ = writeln!(out, "note: overrides not read (database): {e}");
            }
        }
    }
    let t = tokio::task::spawn_blocking(move || PartitionTable::build(&geo, &overrides))
        .await
        .map_err(|e| GeoError::Usage(e.to_string()))?;
    let rows = partition_rows(&t);
    let total_prefixes: usize = rows.iter().map(|r| r.prefixes).sum();
    let _ = writeln!(
        out,
        "{} partitions; {} IPv4 ranges, {} IPv6 ranges, {} CIDR prefixes",
        rows.len(),
        t.v4_ranges().len(),
        t.v6_ranges().len(),
        total_prefixes
    );
    let _ = writeln!(out, "{:>6} {:>8} {:>9} {:>14}  LOCATION", "ID", "RANGES", "PREFIXES", "IPV4_ADDRS");
    let shown = if top == 0 { rows.len() } else { top.min(rows.len()) };
    for r in &rows[..shown] {
        let loc = &t.locations()[r.id as usize];
        let name = if r.id == crate::partition::UNKNOWN {
            "(unknown: no data, special-purpose)".to_string()
        } else {
            tuple_text(loc)
        };
        let _ = writeln!(out, "{:>6} {:>8} {:>9} {:>14}  {name}", r.id, r.ranges, r.prefixes, r.v4_addresses);
    }
    if shown < rows.len() {
        let _ = writeln!(out, "… {} more (--top 0 lists all)", rows.len() - shown);
    }
    Ok(out)
}

/// The API client for `--api` / LAGRAN_API / the configured api_listen.
fn api_client(config: &Config, api: Option<&str>) -> ApiClient {
    let base = match api {
        Some(a) => a.to_string(),
        None => {
            let mut addr = config.api_listen;
            if addr.ip().is_unspecified() {
                addr.set_ip(match addr.ip() {
                    IpAddr::V4(_) => IpAddr::V4(Ipv4Addr::LOCALHOST),
                    IpAddr::V6(_) => IpAddr::V6(Ipv6Addr::LOCALHOST),
                });
            }
            format!("http://{addr}")
        }
    };
    ApiClient::new(&base, config.admin_token.clone(), config.agent_token.clone()).with_tls(config.client_tls())
}

fn api_error(method: &'static str, client: &ApiClient, path: &str, r: &ApiResponse) -> GeoError {
    GeoError::Client {
        method,
        url: format!("{}{path}", client.base()),
        reason: format!("HTTP {}: {}", r.status, r.error_text()),
    }
}

fn override_row(o: &Value) -> String {
    let s = |k: &str| match o.get(k).and_then(Value::as_str) {
        Some("") | None => "-".to_string(),
        Some(v) => v.to_string(),
    };
    format!(
        "{:<20} {:<4} {:<8} {:<8} {:<8} {:<10} {}",
        s("prefix"),
        s("country"),
        s("province"),
        s("city"),
        s("isp"),
        s("created_by"),
        s("note")
    )
}

async fn override_cmd(client: &ApiClient, cmd: OverrideCommand) -> Result<String, GeoError> {
    const PATH: &str = "/api/v1/geo/overrides";
    match cmd {
        OverrideCommand::List => {
            let r = client.request(Method::GET, PATH, None).await?;
            if !r.ok() {
                return Err(api_error("GET", client, PATH, &r));
            }
            let mut out = format!(
                "{:<20} {:<4} {:<8} {:<8} {:<8} {:<10} {}\n",
                "PREFIX", "CC", "PROVINCE", "CITY", "ISP", "BY", "NOTE"
            );
            for o in r.body.as_array().into_iter().flatten() {
                out.push_str(&override_row(o));
                out.push('\n');
            }
            Ok(out)
        }
        OverrideCommand::Add { prefix, country, province, city, isp, note, by } => {
            let by = by.or_else(|| std::env::var("USER").ok()).unwrap_or_else(|| "cli".into());
            let body = json!({
                "prefix": prefix.trim(), "country": country, "province": province, "city": city,
                "isp": isp, "note": note, "created_by": by,
            });
            let r = client.request(Method::POST, PATH, Some(&body)).await?;
            if !r.ok() {
                return Err(api_error("POST", client, PATH, &r));
            }
            Ok(format!(
                "{} override:\n{}\n",
                if r.status == 201 { "created" } else { "replaced" },
                override_row(&r.body)
            ))
        }
        OverrideCommand::Rm { prefix } => {
            let path = format!("{PATH}/{}", encode_segment(prefix.trim()));
            let r = client.request(Method::DELETE, &path, None).await?;
            if !r.ok() {
                return Err(api_error("DELETE", client, &path, &r));
            }
            Ok(format!("removed the override of {}\n", prefix.trim()))
        }
    }
}

/// Renders a reload report (the API's JSON).
fn render_reload(body: &Value) -> String {
    let mut out = String::new();
    if let Some(m) = body.get("message").and_then(Value::as_str) {
        let _ = writeln!(out, "{m}");
    }
    if let Ok(diff) = serde_json::from_value::<ReportView>(body.clone()) {
        for f in diff.families {
            if f.compared {
                let _ = writeln!(
                    out,
                    "  {}: {} of {} sampled changed, {} ranges",
                    f.family, f.changed, f.sampled, f.ranges_changed
                );
            } else {
                let _ = writeln!(out, "  {}: not compared (no serving data for it)", f.family);
            }
        }
        for (title, list) in [("by province", diff.by_province), ("by ISP", diff.by_isp)] {
            if !list.is_empty() {
                let items: Vec<String> = list.iter().take(10).map(|c| format!("{} {}", c.name, c.count)).collect();
                let _ = writeln!(out, "  {title}: {}", items.join(", "));
            }
        }
    }
    out
}

#[derive(serde::Deserialize)]
struct ReportView {
    #[serde(default)]
    families: Vec<FamilyView>,
    #[serde(default)]
    by_province: Vec<CountView>,
    #[serde(default)]
    by_isp: Vec<CountView>,
}

#[derive(serde::Deserialize)]
struct FamilyView {
    family: String,
    compared: bool,
    sampled: usize,
    changed: usize,
    ranges_changed: usize,
}

#[derive(serde::Deserialize)]
struct CountView {
    name: String,
    count: usize,
}

async fn reload_cmd(client: &ApiClient, force: bool) -> Result<String, GeoError> {
    const PATH: &str = "/api/v1/geo/reload";
    let r = client.request(Method::POST, PATH, Some(&json!({ "force": force }))).await?;
    if r.ok() {
        return Ok(render_reload(&r.body));
    }
    if r.status == 409 && r.body.get("accepted").is_some() {
        // Refused: show the report, fail the command.
        return Err(GeoError::Reload(render_reload(&r.body).trim_end().to_string()));
    }
    Err(api_error("POST", client, PATH, &r))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn prefix_counts() {
        assert_eq!(prefix_count(IpVersion::V4, 0, u32::MAX as u128), 1);
        assert_eq!(prefix_count(IpVersion::V4, 0x0a00_0000, 0x0aff_ffff), 1);
        // 10.0.0.1 - 10.0.0.6: .1/32 .2/31 .4/31 .6/32
        assert_eq!(prefix_count(IpVersion::V4, 0x0a00_0001, 0x0a00_0006), 4);
        assert_eq!(prefix_count(IpVersion::V6, 0, u128::MAX), 1);
        assert_eq!(prefix_count(IpVersion::V6, 1, u128::MAX), 128);
    }

    #[test]
    fn build_writes_source_text_and_csv_and_reports() {
        let dir = tempfile::tempdir().unwrap();
        let src = dir.path().join("ip.merge.txt");
        std::fs::write(
            &src,
            "0.0.0.0|58.59.255.255|美国|0|0|0|0\n58.60.0.0|58.61.255.255|中国|0|广东省|深圳市|电信\n58.62.0.0|255.255.255.255|美国|0|0|0|0\n",
        )
        .unwrap();
        let out = dir.path().join("a.xdb");
        let report = build(&src, &out, None, None).unwrap();
        assert!(report.contains("3 ranges") && report.contains("ip2region source"), "{report}");
        let db = GeoDb::try_load(Some(&out), None).unwrap();
        assert_eq!(
            db.lookup("58.60.0.1".parse().unwrap()).unwrap().location,
            crate::location::Location::new("CN", "广东", "深圳", "电信")
        );
        // raw lookup prints the region exactly as stored
        assert_eq!(lookup(&db, &["58.60.0.1".parse().unwrap()], true), "58.60.0.1\t中国|0|广东省|深圳市|电信\n");
        assert_eq!(
            lookup(&db, &["58.60.0.1".parse().unwrap()], false),
            "58.60.0.1\tcountry=CN province=广东 city=深圳 isp=电信 continent=AS coords=22.54,114.06\t\
             sources: country=ip2region province=ip2region city=ip2region isp=ip2region coords=table\t\
             (中国|0|广东省|深圳市|电信)\n"
        );
        // reserved ranges too: --raw shows the file, not the scheduling view
        assert_eq!(lookup(&db, &["244.210.111.72".parse().unwrap()], true), "244.210.111.72\t美国|0|0|0|0\n");
        assert_eq!(lookup(&db, &["244.210.111.72".parse().unwrap()], false), "244.210.111.72\tunknown\n");

        let csv = dir.path().join("mixed.csv");
        std::fs::write(
            &csv,
            "cidr,country,province,city,isp\n1.0.1.0/24,CN,福建,福州,电信\n240e::/20,CN,广东,深圳,电信\n",
        )
        .unwrap();
        let (o4, o6) = (dir.path().join("c4.xdb"), dir.path().join("c6.xdb"));
        let report = build(&csv, &o4, None, None).unwrap();
        assert!(report.contains("IPv6 ranges not written"), "{report}");
        build(&csv, &o4, Some(&o6), None).unwrap();
        assert_eq!(Xdb::open(&o6).unwrap().ip_version(), IpVersion::V6);

        let empty = dir.path().join("empty.csv");
        std::fs::write(&empty, "# nothing\n").unwrap();
        assert!(build(&empty, &o4, None, None).unwrap_err().to_string().contains("holds no ranges"));
        let bad = dir.path().join("bad.txt");
        std::fs::write(&bad, "1.0.0.0|1.0.0.255|a\n1.0.0.9|x|b\n").unwrap();
        let e = build(&bad, &o4, None, None).unwrap_err().to_string();
        assert!(e.contains("bad.txt") && e.contains("line 2"), "{e}");
    }

    #[test]
    fn partition_rows_count_ranges_and_prefixes() {
        let ip = |s: &str| u128::from(u32::from(s.parse::<Ipv4Addr>().unwrap()));
        let ranges = vec![
            (ip("1.0.0.0"), ip("1.0.0.255"), "中国|0|广东省|深圳市|电信".to_string()),
            (ip("2.0.0.0"), ip("2.0.0.2"), "中国|0|广东省|深圳市|电信".to_string()),
        ];
        let geo = GeoDb::from_xdbs(Some(Xdb::from_bytes(write_xdb(IpVersion::V4, &ranges).unwrap()).unwrap()), None);
        let t = PartitionTable::build(&geo, &[]);
        let rows = partition_rows(&t);
        let sz = rows.iter().find(|r| t.locations()[r.id as usize].city == "深圳").unwrap();
        assert_eq!((sz.ranges, sz.prefixes, sz.v4_addresses), (2, 3, 259));
        assert_eq!(rows.iter().map(|r| r.ranges).sum::<usize>(), t.v4_ranges().len() + t.v6_ranges().len());
    }
}
