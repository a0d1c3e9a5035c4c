//! `GET /api/v1/schedule`: the decision for one client.
//! Readable with the agent token, the admin token, or any node's own token (an
//! edge node asks for the decision with its own credentials).

use std::net::IpAddr;

use axum::Json;
use axum::extract::{Query, State};
use serde::{Deserialize, Serialize};

use super::AppState;
use super::error::ApiError;
use crate::engine::Candidate;
use crate::scheduler::{ClientQuery, Decision, ServedAnswer};

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ScheduleParams {
    pub domain: Option<String>,
    pub subnet: Option<String>,
    pub ip: Option<String>,
    /// The resolver sending `subnet` as ECS (decides when the subnet cannot be located).
    pub resolver: Option<String>,
    pub country: Option<String>,
    pub province: Option<String>,
    pub city: Option<String>,
    pub isp: Option<String>,
}

#[derive(Debug, Serialize)]
pub struct ClientJson {
    pub country: String,
    pub province: String,
    pub city: String,
    pub isp: String,
}

/// The response body (`primary`/`backup` are null when no node is eligible).
/// Each node is a [`Candidate`] as it serializes: name, public_ip,
/// public_ipv6, province, city, isp, weight, score, reason, terms; and its
/// measured `rtt_ms` and `rtt_samples` for the client's partition (null
/// when the matrix has no fresh report).
#[derive(Debug, Serialize)]
pub struct ScheduleJson {
    pub domain: String,
    pub ttl: u32,
    pub client: ClientJson,
    pub primary: Option<CandidateJson>,
    pub backup: Option<CandidateJson>,
    pub candidates: Vec<CandidateJson>,
    /// What decided the served answer: `geo`, `latency`, `weighted`, `hash`, `rule` or `line`.
    pub decided_by: &'static str,
    pub excluded: Vec<ExcludedJson>,
    pub region: Option<String>,
    pub partition: Option<String>,
    pub pool: String,
    pub note: String,
    /// What DNS answers this client (what `dig` shows): CNAME target and
    /// records, ECS scope, and the resolver when the subnet could not be located.
    pub served: Option<ServedAnswer>,
}

/// A candidate with its measured RTT.
#[derive(Debug, Serialize)]
pub struct CandidateJson {
    #[serde(flatten)]
    pub candidate: Candidate,
    pub rtt_ms: Option<f64>,
    pub rtt_samples: Option<u32>,
}

impl CandidateJson {
    fn of(c: &Candidate, d: &Decision) -> CandidateJson {
        let m = d.measured.get(&c.name);
        CandidateJson { candidate: c.clone(), rtt_ms: m.map(|m| m.0), rtt_samples: m.map(|m| m.1) }
    }
}

#[derive(Debug, Serialize)]
pub struct ExcludedJson {
    pub name: String,
    pub why: &'static str,
}

impl From<&Decision> for ScheduleJson {
    fn from(d: &Decision) -> Self {
        ScheduleJson {
            domain: d.domain.clone(),
            ttl: d.ttl,
            client: ClientJson {
                country: d.client.country.clone(),
                province: d.client.province.clone(),
                city: d.client.city.clone(),
                isp: d.client.isp.clone(),
            },
            primary: d.ranking.primary().map(|c| CandidateJson::of(c, d)),
            backup: d.ranking.backup().map(|c| CandidateJson::of(c, d)),
            candidates: d.ranking.candidates.iter().map(|c| CandidateJson::of(c, d)).collect(),
            decided_by: d.decided_by,
            excluded: d
                .ranking
                .excluded
                .iter()
                .map(|(n, w)| ExcludedJson { name: n.clone(), why: w.as_str() })
                .collect(),
            region: d.region.clone(),
            partition: d.partition.clone(),
            pool: d.pool.clone(),
            note: d.note.clone(),
            served: d.served.clone(),
        }
    }
}

/// Turns `subnet=` / `ip=` into the address to look up.
pub fn client_address(subnet: Option<&str>, ip: Option<&str>) -> Result<Option<IpAddr>, ApiError> {
    match (subnet, ip) {
        (Some(_), Some(_)) => Err(ApiError::bad_field("subnet", "give either subnet or ip, not both")),
        (Some(s), None) => {
            let net: ipnet::IpNet =
                s.trim().parse().or_else(|_| s.trim().parse::<IpAddr>().map(ipnet::IpNet::from)).map_err(|_| {
                    ApiError::bad_field("subnet", format!("{s:?} is not a CIDR subnet like 1.2.3.0/24"))
                })?;
            Ok(Some(net.trunc().network()))
        }
        (None, Some(i)) => {
            i.trim().parse().map(Some).map_err(|_| ApiError::bad_field("ip", format!("{i:?} is not an IP address")))
        }
        (None, None) => Ok(None),
    }
}

/// Turns `resolver=` into the resolver sending the ECS `subnet=`.
pub fn resolver_address(resolver: Option<&str>, subnet: Option<&str>) -> Result<Option<IpAddr>, ApiError> {
    let Some(r) = resolver.map(str::trim) else { return Ok(None) };
    if subnet.is_none() {
        return Err(ApiError::bad_field(
            "resolver",
            "resolver is the sender of an ECS subnet: give it with subnet (ip is the asking address itself)",
        ));
    }
    r.parse().map(Some).map_err(|_| ApiError::bad_field("resolver", format!("{r:?} is not an IP address")))
}

pub async fn get_schedule(
    State(state): State<AppState>,
    params: Result<Query<ScheduleParams>, axum::extract::rejection::QueryRejection>,
) -> Result<Json<ScheduleJson>, ApiError> {
    let Query(p) = params.map_err(|e| ApiError::new(axum::http::StatusCode::BAD_REQUEST, e.body_text()))?;
    let domain = p.domain.as_deref().map(str::trim).filter(|d| !d.is_empty());
    let Some(domain) = domain else { return Err(ApiError::bad_field("domain", "domain is required")) };
    let client = ClientQuery {
        address: client_address(p.subnet.as_deref(), p.ip.as_deref())?,
        ecs: p.subnet.is_some(),
        resolver: resolver_address(p.resolver.as_deref(), p.subnet.as_deref())?,
        country: p.country,
        province: p.province,
        city: p.city,
        isp: p.isp,
    };
    let decision = state.scheduler.decide(domain, &client, &state.dns).await?;
    tracing::info!(
        domain = %decision.domain,
        client = ?client.address,
        partition = decision.partition.as_deref().unwrap_or("-"),
        primary = decision.primary().map_or("-", |c| c.name.as_str()),
        reason = decision.primary().map_or("no eligible node", |c| c.reason.as_str()),
        "schedule decision"
    );
    Ok(Json(ScheduleJson::from(&decision)))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn subnet_and_ip_parse() {
        assert_eq!(client_address(Some("58.60.0.0/24"), None).unwrap(), Some("58.60.0.0".parse().unwrap()));
        assert_eq!(client_address(Some("58.60.0.7/24"), None).unwrap(), Some("58.60.0.0".parse().unwrap()));
        assert_eq!(client_address(None, Some("1.2.3.4")).unwrap(), Some("1.2.3.4".parse().unwrap()));
        assert_eq!(client_address(None, None).unwrap(), None);
        let e = client_address(Some("nope"), None).unwrap_err();
        assert_eq!(e.field.as_deref(), Some("subnet"));
        let e = client_address(None, Some("1.2.3")).unwrap_err();
        assert_eq!(e.field.as_deref(), Some("ip"));
        assert_eq!(resolver_address(Some("9.9.9.9"), Some("11.0.0.0/24")).unwrap(), Some("9.9.9.9".parse().unwrap()));
        assert_eq!(resolver_address(None, Some("11.0.0.0/24")).unwrap(), None);
        let e = resolver_address(Some("9.9.9.9"), None).unwrap_err();
        assert_eq!(e.field.as_deref(), Some("resolver"), "a resolver without an ECS subnet means nothing");
        let e = resolver_address(Some("nope"), Some("11.0.0.0/24")).unwrap_err();
        assert_eq!(e.field.as_deref(), Some("resolver"));
    }

    #[test]
    fn a_node_serializes_with_the_api_fields_in_order() {
        let c = Candidate {
            name: "gz-01".into(),
            public_ip: Some("203.0.113.1".parse().unwrap()),
            public_ipv6: None,
            country: "China".into(),
            province: "Guangdong".into(),
            city: "Guangzhou".into(),
            isp: "China Telecom".into(),
            weight: 100,
            score: 180,
            reason: "same-province".into(),
            terms: vec![("weight".into(), 100), ("same-province".into(), 80)],
        };
        assert_eq!(
            serde_json::to_string(&c).unwrap(),
            r#"{"name":"gz-01","public_ip":"203.0.113.1","public_ipv6":null,"province":"Guangdong","city":"Guangzhou","isp":"China Telecom","weight":100,"score":180,"reason":"same-province","terms":[["weight",100],["same-province",80]]}"#
        );
    }
}
