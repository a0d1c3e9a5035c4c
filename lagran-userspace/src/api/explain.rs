//! `GET /api/v1/explain?name=&subnet=|ip=[&resolver=]`: what `lagran
//! explain` prints, computed by the running daemon from its own scheduler (its
//! table, liveness, measurements and geo data), so the command does not load
//! the geo files itself. `name` defaults to the first zone's apex. The body is
//! `{"domain", "text", "schedule"}`: `text` the readable decision, `schedule`
//! the `/api/v1/schedule` object. Readable with the agent or the admin token.

use std::fmt::Write;
use std::net::IpAddr;

use axum::Json;
use axum::extract::{Query, State};
use serde::{Deserialize, Serialize};

use super::AppState;
use super::error::ApiError;
use super::schedule::{ScheduleJson, client_address, resolver_address};
use crate::scheduler::{ClientQuery, Decision};

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ExplainParams {
    /// The scheduled name (default: the first zone's apex).
    pub name: Option<String>,
    pub subnet: Option<String>,
    pub ip: Option<String>,
    /// The resolver sending `subnet` as ECS (decides when the subnet cannot be located).
    pub resolver: Option<String>,
}

/// The response body.
#[derive(Debug, Serialize)]
pub struct ExplainJson {
    pub domain: String,
    /// What `lagran explain` prints.
    pub text: String,
    /// What `lagran explain --json` prints (the `/api/v1/schedule` object).
    pub schedule: ScheduleJson,
}

pub async fn get_explain(
    State(state): State<AppState>,
    params: Result<Query<ExplainParams>, axum::extract::rejection::QueryRejection>,
) -> Result<Json<ExplainJson>, ApiError> {
    let Query(p) = params.map_err(|e| ApiError::new(axum::http::StatusCode::BAD_REQUEST, e.body_text()))?;
    let address = client_address(p.subnet.as_deref(), p.ip.as_deref())?;
    if address.is_none() {
        return Err(ApiError::bad_field("subnet", "give the client: subnet (ECS) or ip"));
    }
    let resolver = resolver_address(p.resolver.as_deref(), p.subnet.as_deref())?;
    let domain = match p.name.as_deref().map(str::trim).filter(|n| !n.is_empty()) {
        Some(n) => n.to_string(),
        None => state
            .store
            .list_zones()
            .await?
            .first()
            .map(|z| z.name.clone())
            .ok_or_else(|| ApiError::bad_field("name", "no zone configured; give name"))?,
    };
    let client = ClientQuery { address, ecs: p.subnet.is_some(), resolver, ..Default::default() };
    let decision = state.scheduler.decide(&domain, &client, &state.dns).await?;
    Ok(Json(ExplainJson { domain, text: render(&decision, address), schedule: ScheduleJson::from(&decision) }))
}

/// The human-readable form.
pub fn render(d: &Decision, address: Option<IpAddr>) -> String {
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

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use axum::http::{Method, StatusCode};

    use crate::api::auth::AGENT_TOKEN_HEADER;
    use crate::api::testing::{AGENT, call, router, state};
    use crate::geo::{GeoDb, IpVersion, Xdb, write_xdb};
    use crate::model::{Node, Zone};

    /// Shenzhen Telecom at 58.60.0.0/15, the US elsewhere.
    fn geo() -> GeoDb {
        let ip = |s: &str| u32::from(s.parse::<std::net::Ipv4Addr>().unwrap()) as u128;
        let ranges = vec![
            (0, ip("58.59.255.255"), "美国|0|0|0|0".to_string()),
            (ip("58.60.0.0"), ip("58.61.255.255"), "中国|0|广东省|深圳市|电信".to_string()),
            (ip("58.62.0.0"), u32::MAX as u128, "美国|0|0|0|0".to_string()),
        ];
        GeoDb::from_xdbs(Some(Xdb::from_bytes(write_xdb(IpVersion::V4, &ranges).unwrap()).unwrap()), None)
    }

    fn node(name: &str, province: &str, city: &str, ip: &str) -> Node {
        let mut n = Node::new(name);
        (n.country, n.province, n.city, n.isp) = ("CN".into(), province.into(), city.into(), "电信".into());
        n.public_ip = Some(ip.parse().unwrap());
        n
    }

    #[tokio::test]
    async fn the_daemon_explains_with_its_own_data_and_the_first_zone_by_default() {
        let store = crate::store::Store::connect("sqlite::memory:").await.unwrap();
        store.upsert_zone(&Zone::new("edge.example")).await.unwrap();
        store.create_node(&node("sz-01", "广东", "深圳", "192.0.2.1"), None).await.unwrap();
        store.create_node(&node("bj-01", "北京", "北京", "192.0.2.2"), None).await.unwrap();
        let mut s = state(store.clone());
        s.scheduler = Arc::new(crate::scheduler::Scheduler::new(
            store,
            Default::default(),
            crate::health::HealthMonitor::new(Default::default()),
            geo(),
            crate::route_table::empty_shared(),
        ));
        s.scheduler.recompute().await.unwrap();
        let r = router(s);
        let agent = [(AGENT_TOKEN_HEADER, AGENT)];
        let (status, v) = call(&r, Method::GET, "/api/v1/explain?subnet=58.60.3.0%2F24", &agent, None).await;
        assert_eq!(status, StatusCode::OK, "{v}");
        assert_eq!(v["domain"], "edge.example", "the first zone's apex: {v}");
        assert_eq!(v["schedule"]["primary"]["name"], "sz-01", "{v}");
        let text = v["text"].as_str().unwrap();
        let first = text.lines().find(|l| l.contains("192.0.2.")).unwrap_or_default();
        assert!(first.contains("sz-01") && first.contains("same-city"), "the Shenzhen node ranks first:\n{text}");
        assert!(text.contains("client    58.60.3.0") && text.contains("city=深圳"), "{text}");
        assert!(text.contains("dns       A 192.0.2.1"), "what DNS answers:\n{text}");

        let (status, v) = call(&r, Method::GET, "/api/v1/explain?name=edge.example", &agent, None).await;
        assert_eq!((status, v["field"].as_str()), (StatusCode::UNPROCESSABLE_ENTITY, Some("subnet")), "no client: {v}");
        let (status, v) = call(&r, Method::GET, "/api/v1/explain?ip=1.2.3.4&subnet=1.2.3.0/24", &agent, None).await;
        assert_eq!(status, StatusCode::UNPROCESSABLE_ENTITY, "both ip and subnet: {v}");
        let (status, _) = call(&r, Method::GET, "/api/v1/explain?subnet=58.60.3.0/24", &[], None).await;
        assert_eq!(status, StatusCode::UNAUTHORIZED, "a read needs a token");
    }
}
