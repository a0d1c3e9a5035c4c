//! `lagran explain`: the full ranked decision for a client, readable.
//!
//! The running daemon computes it (`GET /api/v1/explain`): its table, node
//! liveness, measurements and geo data, already loaded. With `--local` (or
//! when neither `--api` nor `LAGRAN_API` names a daemon and none answers at
//! the configured `api_listen`) this process computes it instead, from the
//! database and the configured geo files, which it loads and merges itself
//! (with MaxMind and ASN data, minutes on the real files). The output says
//! which of the two answered.

use serde_json::Value;

use super::geo_client::encode_segment;
use crate::api::explain::render;
use crate::api::schedule::{ScheduleJson, client_address, resolver_address};
use crate::api_client::{ApiClient, ClientError};
use crate::config::Config;
use crate::geo::GeoDb;
use crate::route_table::empty_shared;
use crate::scheduler::{ClientQuery, Scheduler};
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
    #[error("asking the daemon: {0} (or pass --local to compute it here from the database and geo files)")]
    Api(#[from] ClientError),
}

/// Who asks: `--ip`, or `--subnet` (ECS) sent by `--resolver`.
#[derive(Clone, Copy, Debug, Default)]
pub struct Asker<'a> {
    pub ip: Option<&'a str>,
    pub subnet: Option<&'a str>,
    pub resolver: Option<&'a str>,
}

/// Who computes the decision.
#[derive(Clone, Copy, Debug)]
pub enum Via<'a> {
    /// The daemon behind `client`. `named`: its URL was given (`--api`,
    /// `LAGRAN_API`), so failing to reach it is an error; otherwise (the
    /// configured `api_listen` on this machine) no daemon there means local.
    Daemon { client: &'a ApiClient, named: bool },
    /// This process (`--local`).
    Local,
}

/// The decision as `lagran explain` prints it (the JSON form with `json`),
/// computed by the daemon or here (see [`Via`]); the text ends with a `via`
/// line naming which, and the JSON form's note goes to stderr.
pub async fn run(
    config: &Config,
    asker: Asker<'_>,
    domain: Option<&str>,
    json: bool,
    via: Via<'_>,
) -> Result<String, ExplainError> {
    // Bad input is said before anything is asked or loaded.
    client_address(asker.subnet, asker.ip).map_err(|e| ExplainError::Input(e.message))?;
    resolver_address(asker.resolver, asker.subnet).map_err(|e| ExplainError::Input(e.message))?;
    let (out, note) = match via {
        Via::Local => (
            local(config, asker, domain, json).await?,
            "this command (--local): the database and geo files loaded here".to_string(),
        ),
        Via::Daemon { client, named } => match daemon(client, asker, domain).await {
            Ok(v) => {
                let out = if json {
                    serde_json::to_string_pretty(&v["schedule"]).unwrap_or_default() + "\n"
                } else {
                    v["text"].as_str().unwrap_or_default().to_string()
                };
                (out, format!("the daemon at {} (GET /api/v1/explain: its serving data)", client.base))
            }
            Err(ClientError::Connect { url, reason }) if !named => (
                local(config, asker, domain, json).await?,
                format!("this command: no daemon at {url} ({reason}), so the database and geo files loaded here"),
            ),
            Err(e) => return Err(e.into()),
        },
    };
    if json {
        eprintln!("explain: computed by {note}");
        return Ok(out);
    }
    Ok(format!("{out}via       {note}\n"))
}

/// `GET /api/v1/explain` for `asker` and `domain`.
async fn daemon(client: &ApiClient, asker: Asker<'_>, domain: Option<&str>) -> Result<Value, ClientError> {
    let params = [("name", domain), ("subnet", asker.subnet), ("ip", asker.ip), ("resolver", asker.resolver)];
    let query: Vec<String> =
        params.iter().filter_map(|(k, v)| v.map(|v| format!("{k}={}", encode_segment(v.trim())))).collect();
    client.call("GET", &format!("/api/v1/explain?{}", query.join("&")), None).await
}

/// Computes the decision here from the configured database and geo files.
async fn local(config: &Config, asker: Asker<'_>, domain: Option<&str>, json: bool) -> Result<String, ExplainError> {
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
