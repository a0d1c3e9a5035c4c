//! `lagran explain`: the full ranked decision for a client, readable.

use std::fmt::Write;

use crate::api::schedule::{ScheduleJson, client_address, resolver_address};
use crate::config::Config;
use crate::geo::GeoDb;
use crate::route_table::empty_shared;
use crate::scheduler::{ClientQuery, Decision, Scheduler};
use crate::store::Store;

/// Why an explanation could not be produced.
#[derive(Debug, thiserror::Error)]
pub enum ExplainError {
    #[error("opening the database: {0}")]
    Store(#[from] crate::store::StoreError),
    #[error("{0}")]
    Input(String),
    #[error("scheduling: {0}")]
    Scheduler(#[from] crate::scheduler::SchedulerError),
}

/// Who asks: `--ip`, or `--subnet` (ECS) sent by `--resolver`.
#[derive(Clone, Copy, Debug, Default)]
pub struct Asker<'a> {
    pub ip: Option<&'a str>,
    pub subnet: Option<&'a str>,
    pub resolver: Option<&'a str>,
}

/// Computes the decision from the configured database and geo files.
pub async fn run(config: &Config, asker: Asker<'_>, domain: Option<&str>, json: bool) -> Result<String, ExplainError> {
    let address = client_address(asker.subnet, asker.ip).map_err(|e| ExplainError::Input(e.message))?;
    let resolver = resolver_address(asker.resolver, asker.subnet).map_err(|e| ExplainError::Input(e.message))?;
    let store = Store::connect(&config.database_url).await?;
    let domain = match domain {
        Some(d) => d.to_string(),
        None => store
            .list_zones()
            .await?
            .first()
            .map(|z| z.name.clone())
            .ok_or_else(|| ExplainError::Input("no zone configured; pass --domain".into()))?,
    };
    let mut sources = crate::geo::Sources::of_settings(&config.geo);
    sources.asn_carriers_api = store.asn_carrier_map().await?;
    let geo = GeoDb::load_sources(&sources);
    let health = crate::health::HealthMonitor::new(config.health.clone());
    let scheduler = Scheduler::new(store, config.schedule.clone(), health, geo, empty_shared());
    scheduler.measurements().set_settings(config.steering.clone());
    // The same table the daemon serves (rules, lines, canaries applied), computed here.
    scheduler.reload_overrides().await?;
    scheduler.recompute().await?;
    let client = ClientQuery { address, ecs: asker.subnet.is_some(), resolver, ..Default::default() };
    let decision = scheduler.decide(&domain, &client, &config.dns).await?;
    if json {
        let mut s = serde_json::to_string_pretty(&ScheduleJson::from(&decision)).unwrap_or_default();
        s.push('\n');
        return Ok(s);
    }
    Ok(render(&decision, address))
}

/// The human-readable form.
pub fn render(d: &Decision, address: Option<std::net::IpAddr>) -> String {
    let mut out = String::new();
    let c = &d.client;
    let show = |s: &str| if s.is_empty() { "?".to_string() } else { s.to_string() };
    let coords = crate::location::coords::coordinates(c).map_or("?".to_string(), |(a, b)| format!("{a:.2},{b:.2}"));
    let _ = writeln!(
        out,
        "client    {}  ->  country={} province={} city={} isp={} continent={} coords={coords}",
        address.map_or("-".to_string(), |a| a.to_string()),
        show(&c.country),
        show(&c.province),
        show(&c.city),
        show(&c.isp),
        show(c.continent()),
    );
    if let Some(r) = &d.region {
        let _ = writeln!(out, "region    {r}");
    }
    let sources = crate::location::sources::FieldSources::of_decision(d.region.as_deref(), c);
    if !c.is_unknown() {
        let _ = writeln!(out, "sources   {}", sources.summary());
    }
    if let Some(p) = &d.partition {
        let _ = writeln!(out, "partition {p}");
    }
    let _ = writeln!(out, "domain    {} (pool {}, ttl {})", d.domain, d.pool, d.ttl);
    let _ = writeln!(out);
    let _ = writeln!(out, "{:>3}  {:<14} {:<16} {:>6}  {:<48} reason", "#", "node", "public_ip", "score", "terms");
    for (i, cand) in d.ranking.candidates.iter().enumerate() {
        let terms: Vec<String> = cand.terms.iter().map(|(k, v)| format!("{k} {v:+}")).collect();
        let rtt = d.measured.get(&cand.name).map_or(String::new(), |(ms, n)| format!("  rtt_ms {ms:.1} ({n} samples)"));
        let _ = writeln!(
            out,
            "{:>3}  {:<14} {:<16} {:>6}  {:<48} {}{rtt}",
            i + 1,
            cand.name,
            cand.public_ip.map_or("-".to_string(), |a| a.to_string()),
            cand.score,
            terms.join(" "),
            cand.reason
        );
    }
    for (name, why) in &d.ranking.excluded {
        let _ = writeln!(out, "  -  {name:<14} excluded: {}", why.as_str());
    }
    let _ = writeln!(out);
    match (d.ranking.primary(), d.ranking.backup()) {
        (Some(p), b) => {
            let _ = writeln!(
                out,
                "primary   {} {} ({})",
                p.name,
                p.public_ip.map_or("-".to_string(), |a| a.to_string()),
                p.reason
            );
            if let Some(b) = b {
                let _ =
                    writeln!(out, "backup    {} {}", b.name, b.public_ip.map_or("-".to_string(), |a| a.to_string()));
            }
        }
        (None, _) => {
            let _ = writeln!(out, "primary   none: {}", d.note);
        }
    }
    if let Some(s) = &d.served {
        render_served(&mut out, s, d.ttl);
    }
    let _ = writeln!(out, "decided   by {}", d.decided_by);
    out
}

/// What `dig` gets: the CNAME and its target's records, or the addresses,
/// with the ECS scope (and the resolver, when it decided).
fn render_served(out: &mut String, s: &crate::scheduler::ServedAnswer, ttl: u32) {
    let mut records: Vec<String> = Vec::new();
    if let Some(c) = &s.cname {
        records.push(format!("CNAME {c}."));
    }
    records.extend(s.a.iter().map(|a| format!("A {a}")));
    records.extend(s.aaaa.iter().map(|a| format!("AAAA {a}")));
    if records.is_empty() {
        records.push("no records (DNS_FALLBACK_IP or SERVFAIL for A, NODATA for AAAA)".into());
    }
    let state = serde_json::to_value(s.state).ok().and_then(|v| v.as_str().map(str::to_string)).unwrap_or_default();
    let _ = writeln!(out, "dns       {}  (ttl {ttl}, scope /{}, {state})", records.join(", "), s.scope);
    if let Some(r) = s.decided_for {
        let _ = writeln!(
            out,
            "          the ECS block cannot be located: answered for resolver {r}, whose location decides"
        );
    }
}
