//! Zones (SOA + NS set + glue) and scheduled domains (name -> pool).

use std::net::Ipv4Addr;

use axum::Json;
use axum::body::Bytes;
use axum::extract::{Path, State};
use axum::http::StatusCode;
use serde::Deserialize;

use super::AppState;
use super::error::{ApiError, parse_json};
use crate::model::{
    AnswerMode, DEFAULT_POOL, Denial, DnssecAlgorithm, Domain, MAX_NSEC3_ITERATIONS, NsHost, Nsec3Salt, Steering,
    Strategy, Zone, ZoneDnssec,
};

/// `PUT /api/v1/zones/{name}` body; absent fields keep their defaults.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ZoneBody {
    pub soa_mname: Option<String>,
    pub soa_rname: Option<String>,
    pub soa_serial: Option<u32>,
    pub soa_refresh: Option<u32>,
    pub soa_retry: Option<u32>,
    pub soa_expire: Option<u32>,
    pub soa_minimum: Option<u32>,
    pub ns_ttl: Option<u32>,
    #[serde(default)]
    pub ns_hosts: Vec<NsHost>,
    /// Sign the zone with DNSSEC (default `false`).
    pub dnssec: Option<bool>,
    /// `"ecdsap256sha256"` (13, default) or `"ed25519"` (15).
    pub dnssec_algorithm: Option<String>,
    /// How long a signature is valid (default 21 days).
    pub dnssec_validity_secs: Option<u32>,
    /// A signature with fewer seconds left is renewed (default 10 days).
    pub dnssec_refresh_secs: Option<u32>,
    /// `"nsec"` (default) or `"nsec3"`.
    pub dnssec_denial: Option<String>,
    /// Additional NSEC3 hash iterations (default 0, at most 50).
    pub dnssec_nsec3_iterations: Option<u16>,
    /// The NSEC3 salt in hex (default none).
    pub dnssec_nsec3_salt: Option<String>,
    /// A ZSK rolls this long after it started signing (0: never by itself).
    pub dnssec_zsk_lifetime_secs: Option<u32>,
    /// A KSK rolls this long after it started signing (0: never by itself).
    pub dnssec_ksk_lifetime_secs: Option<u32>,
    /// The parent's time to act on a CDS change plus its DS TTL.
    pub dnssec_ds_wait_secs: Option<u32>,
    /// How long a table takes to reach every NS host.
    pub dnssec_propagation_secs: Option<u32>,
}

/// `PUT /api/v1/domains/{name}` body.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct DomainBody {
    pub zone: String,
    pub pool: Option<String>,
    pub ttl: Option<u32>,
    pub origin_ip: Option<Ipv4Addr>,
    /// `"a"` (default) or `"cname"`; a zone apex cannot be `"cname"` (422).
    #[serde(default)]
    pub answer_mode: AnswerMode,
    /// ECS decides (default `true`); `false`: the resolver's address decides.
    pub ecs: Option<bool>,
    /// `"geo"` (default) or `"latency"`.
    #[serde(default)]
    pub steering: Steering,
    /// `"best"` (default), `"weighted"` or `"hash"`.
    #[serde(default)]
    pub strategy: Strategy,
}

fn normalise(name: &str) -> String {
    name.trim().trim_end_matches('.').to_ascii_lowercase()
}

/// Builds a zone from its name and body, checking what only makes sense together.
pub fn zone_from_body(name: &str, body: ZoneBody) -> Result<Zone, ApiError> {
    let mut z = Zone::new(normalise(name));
    z.dnssec = dnssec_from_body(&body)?;
    if z.name.is_empty() || !z.name.contains('.') {
        return Err(ApiError::bad_field("name", format!("{name:?} is not a zone name like edge.example.net")));
    }
    if body.ns_hosts.is_empty() {
        return Err(ApiError::bad_field("ns_hosts", "a zone needs at least one NS host"));
    }
    z.ns_hosts = body.ns_hosts.into_iter().map(|h| NsHost { name: normalise(&h.name), ..h }).collect();
    for h in &z.ns_hosts {
        let in_zone = h.name.ends_with(&format!(".{}", z.name));
        if in_zone && h.ipv4.is_none() && h.ipv6.is_none() {
            return Err(ApiError::bad_field(
                "ns_hosts",
                format!("in-zone NS host {} needs glue (ipv4 or ipv6)", h.name),
            ));
        }
    }
    z.soa_mname = body.soa_mname.map(|s| normalise(&s)).unwrap_or_else(|| z.ns_hosts[0].name.clone());
    if let Some(r) = body.soa_rname {
        z.soa_rname = normalise(&r);
    }
    z.soa_serial = body.soa_serial.unwrap_or(z.soa_serial);
    z.soa_refresh = body.soa_refresh.unwrap_or(z.soa_refresh);
    z.soa_retry = body.soa_retry.unwrap_or(z.soa_retry);
    z.soa_expire = body.soa_expire.unwrap_or(z.soa_expire);
    z.soa_minimum = body.soa_minimum.unwrap_or(z.soa_minimum);
    z.ns_ttl = body.ns_ttl.unwrap_or(z.ns_ttl);
    Ok(z)
}

/// The zone's DNSSEC policy from the body's `dnssec*` fields.
fn dnssec_from_body(body: &ZoneBody) -> Result<Option<ZoneDnssec>, ApiError> {
    let tuned = body.dnssec_algorithm.is_some()
        || body.dnssec_validity_secs.is_some()
        || body.dnssec_refresh_secs.is_some()
        || body.dnssec_denial.is_some()
        || body.dnssec_nsec3_iterations.is_some()
        || body.dnssec_nsec3_salt.is_some()
        || body.dnssec_zsk_lifetime_secs.is_some()
        || body.dnssec_ksk_lifetime_secs.is_some()
        || body.dnssec_ds_wait_secs.is_some()
        || body.dnssec_propagation_secs.is_some();
    if body.dnssec != Some(true) {
        if tuned {
            return Err(ApiError::bad_field("dnssec", "the dnssec_* fields need \"dnssec\": true"));
        }
        return Ok(None);
    }
    let mut policy = ZoneDnssec::default();
    if let Some(a) = &body.dnssec_algorithm {
        policy.algorithm = DnssecAlgorithm::parse(a).ok_or_else(|| {
            ApiError::bad_field("dnssec_algorithm", format!("{a:?} is neither \"ecdsap256sha256\" nor \"ed25519\""))
        })?;
    }
    denial_from_body(body, &mut policy)?;
    policy.validity_secs = body.dnssec_validity_secs.unwrap_or(policy.validity_secs);
    policy.refresh_secs = body.dnssec_refresh_secs.unwrap_or(policy.refresh_secs);
    policy.zsk_lifetime_secs = body.dnssec_zsk_lifetime_secs.unwrap_or(policy.zsk_lifetime_secs);
    policy.ksk_lifetime_secs = body.dnssec_ksk_lifetime_secs.unwrap_or(policy.ksk_lifetime_secs);
    policy.ds_wait_secs = body.dnssec_ds_wait_secs.unwrap_or(policy.ds_wait_secs);
    policy.propagation_secs = body.dnssec_propagation_secs.unwrap_or(policy.propagation_secs);
    policy.check().map_err(|reason| ApiError::bad_field("dnssec_refresh_secs", reason))?;
    Ok(Some(policy))
}

/// The denial (`dnssec_denial`) and its NSEC3 parameters.
fn denial_from_body(body: &ZoneBody, policy: &mut ZoneDnssec) -> Result<(), ApiError> {
    if let Some(d) = &body.dnssec_denial {
        policy.denial = Denial::parse(d)
            .ok_or_else(|| ApiError::bad_field("dnssec_denial", format!("{d:?} is neither \"nsec\" nor \"nsec3\"")))?;
    }
    let nsec3 = policy.denial == Denial::Nsec3;
    if let Some(iterations) = body.dnssec_nsec3_iterations {
        if !nsec3 {
            return Err(ApiError::bad_field("dnssec_nsec3_iterations", "needs \"dnssec_denial\": \"nsec3\""));
        }
        if iterations > MAX_NSEC3_ITERATIONS {
            return Err(ApiError::bad_field(
                "dnssec_nsec3_iterations",
                format!(
                    "{iterations} is above {MAX_NSEC3_ITERATIONS}: validators treat many iterations as insecure \
                     (RFC 9276 advises 0)"
                ),
            ));
        }
        policy.nsec3_iterations = iterations;
    }
    if let Some(salt) = &body.dnssec_nsec3_salt {
        if !nsec3 {
            return Err(ApiError::bad_field("dnssec_nsec3_salt", "needs \"dnssec_denial\": \"nsec3\""));
        }
        policy.nsec3_salt =
            Nsec3Salt::parse(salt).map_err(|reason| ApiError::bad_field("dnssec_nsec3_salt", reason))?;
    }
    Ok(())
}

pub async fn list_zones(State(state): State<AppState>) -> Result<Json<Vec<Zone>>, ApiError> {
    Ok(Json(state.store.list_zones().await?))
}

pub async fn get_zone(State(state): State<AppState>, Path(name): Path<String>) -> Result<Json<Zone>, ApiError> {
    let name = normalise(&name);
    let zones = state.store.list_zones().await?;
    zones.into_iter().find(|z| z.name == name).map(Json).ok_or_else(|| ApiError::not_found(format!("no zone {name}")))
}

pub async fn put_zone(
    State(state): State<AppState>,
    Path(name): Path<String>,
    body: Bytes,
) -> Result<Json<Zone>, ApiError> {
    let zone = zone_from_body(&name, parse_json(&body)?)?;
    state.store.upsert_zone(&zone).await?;
    state.after_write().await;
    Ok(Json(zone))
}

pub async fn delete_zone(State(state): State<AppState>, Path(name): Path<String>) -> Result<StatusCode, ApiError> {
    let name = normalise(&name);
    if !state.store.delete_zone(&name).await? {
        return Err(ApiError::not_found(format!("no zone {name}")));
    }
    state.after_write().await;
    Ok(StatusCode::NO_CONTENT)
}

pub async fn list_domains(State(state): State<AppState>) -> Result<Json<Vec<Domain>>, ApiError> {
    Ok(Json(state.store.list_domains().await?))
}

pub async fn put_domain(
    State(state): State<AppState>,
    Path(name): Path<String>,
    body: Bytes,
) -> Result<Json<Domain>, ApiError> {
    let body: DomainBody = parse_json(&body)?;
    let domain = Domain {
        name: normalise(&name),
        zone: normalise(&body.zone),
        pool: body.pool.unwrap_or_else(|| DEFAULT_POOL.to_string()),
        ttl: body.ttl,
        origin_ip: body.origin_ip,
        answer_mode: body.answer_mode,
        ecs: body.ecs.unwrap_or(true),
        steering: body.steering,
        strategy: body.strategy,
    };
    if domain.name != domain.zone && !domain.name.ends_with(&format!(".{}", domain.zone)) {
        return Err(ApiError::bad_field("zone", format!("{} is not inside zone {}", domain.name, domain.zone)));
    }
    if domain.ttl == Some(0) {
        return Err(ApiError::bad_field("ttl", "ttl must be at least 1 (answers never go below 5 s anyway)"));
    }
    state.store.upsert_domain(&domain).await?;
    state.after_write().await;
    Ok(Json(domain))
}

pub async fn delete_domain(State(state): State<AppState>, Path(name): Path<String>) -> Result<StatusCode, ApiError> {
    let name = normalise(&name);
    if !state.store.delete_domain(&name).await? {
        return Err(ApiError::not_found(format!("no domain {name}")));
    }
    state.after_write().await;
    Ok(StatusCode::NO_CONTENT)
}

#[cfg(test)]
mod tests {
    use axum::http::StatusCode;

    use super::{ZoneBody, zone_from_body};
    use crate::model::{Denial, Nsec3Salt};

    fn body(json: serde_json::Value) -> ZoneBody {
        let mut full =
            serde_json::json!({"ns_hosts": [{"name": "ns1.example.net", "ipv4": "192.0.2.53"}], "dnssec": true});
        full.as_object_mut().unwrap().extend(json.as_object().unwrap().clone());
        serde_json::from_value(full).unwrap()
    }

    fn refused(json: serde_json::Value) -> (String, String) {
        let e = zone_from_body("edge.example.net", body(json)).unwrap_err();
        assert_eq!(e.status, StatusCode::UNPROCESSABLE_ENTITY, "{}", e.message);
        (e.field.unwrap_or_default(), e.message)
    }

    #[test]
    fn nsec3_is_chosen_with_its_parameters_and_nsec_stays_the_default() {
        let zone = zone_from_body("edge.example.net", body(serde_json::json!({}))).unwrap();
        let policy = zone.dnssec.unwrap();
        assert_eq!(
            (policy.denial, policy.nsec3_iterations, policy.nsec3_salt),
            (Denial::Nsec, 0, Nsec3Salt::default())
        );
        let json = serde_json::json!({"dnssec_denial": "NSEC3", "dnssec_nsec3_iterations": 5, "dnssec_nsec3_salt": "AABBccdd"});
        let policy = zone_from_body("edge.example.net", body(json)).unwrap().dnssec.unwrap();
        assert_eq!(policy.denial, Denial::Nsec3);
        assert_eq!((policy.nsec3_iterations, policy.nsec3_salt.0.clone()), (5, vec![0xaa, 0xbb, 0xcc, 0xdd]));
        // Stored as the policy's JSON and read back the same.
        let stored = serde_json::to_string(&policy).unwrap();
        assert!(stored.contains(r#""nsec3_salt":"aabbccdd""#), "{stored}");
        assert_eq!(serde_json::from_str::<crate::model::ZoneDnssec>(&stored).unwrap(), policy);
        let older = r#"{"algorithm":"ecdsap256sha256","validity_secs":7200,"refresh_secs":3600,"denial":"nsec"}"#;
        let policy: crate::model::ZoneDnssec = serde_json::from_str(older).unwrap();
        assert_eq!((policy.denial, policy.nsec3_iterations), (Denial::Nsec, 0), "a policy stored before NSEC3");
    }

    #[test]
    fn bad_nsec3_parameters_are_refused_naming_the_field() {
        let (field, message) = refused(serde_json::json!({"dnssec_denial": "nsec5"}));
        assert_eq!(field, "dnssec_denial");
        assert!(message.contains("nsec3"), "{message}");
        let (field, message) = refused(serde_json::json!({"dnssec_denial": "nsec3", "dnssec_nsec3_iterations": 51}));
        assert_eq!(field, "dnssec_nsec3_iterations");
        assert!(message.contains("50"), "{message}");
        let (field, _) = refused(serde_json::json!({"dnssec_denial": "nsec3", "dnssec_nsec3_salt": "xyz"}));
        assert_eq!(field, "dnssec_nsec3_salt");
        let (field, message) =
            refused(serde_json::json!({"dnssec_denial": "nsec3", "dnssec_nsec3_salt": "ab".repeat(256)}));
        assert_eq!(field, "dnssec_nsec3_salt");
        assert!(message.contains("256 octets"), "{message}");
        let (field, message) = refused(serde_json::json!({"dnssec_nsec3_iterations": 1}));
        assert_eq!(field, "dnssec_nsec3_iterations");
        assert!(message.contains("nsec3"), "{message}");
        let ok = serde_json::json!({"dnssec_denial": "nsec3", "dnssec_nsec3_iterations": 50, "dnssec_nsec3_salt": "ab".repeat(255)});
        assert!(zone_from_body("edge.example.net", body(ok)).is_ok(), "the caps themselves are accepted");
    }
}
