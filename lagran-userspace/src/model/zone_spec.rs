//! A zone as the operator declares it, over the API or in the configuration
//! file, and the checks that turn it into a [`Zone`].

use serde::Deserialize;

use super::{Denial, DnssecAlgorithm, MAX_NSEC3_ITERATIONS, NsHost, Nsec3Salt, Zone, ZoneDnssec};

/// A zone spec that cannot be used: the field at fault and why.
#[derive(Debug, thiserror::Error)]
#[error("{field}: {reason}")]
pub struct InvalidZone {
    pub field: &'static str,
    pub reason: String,
}

impl InvalidZone {
    fn new(field: &'static str, reason: impl Into<String>) -> InvalidZone {
        InvalidZone { field, reason: reason.into() }
    }
}

/// A zone as the operator declares it: the body of `PUT /api/v1/zones/{name}`
/// and a `[zones."name"]` table of the configuration file. Absent fields
/// keep their defaults.
#[derive(Clone, Debug, Default, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ZoneSpec {
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

impl ZoneSpec {
    /// The zone `name` declared by this spec, checking what only makes sense together.
    pub fn into_zone(self, name: &str) -> Result<Zone, InvalidZone> {
        let spec = self;
        let mut z = Zone::new(normalise_name(name));
        z.dnssec = dnssec_policy(&spec)?;
        if z.name.is_empty() || !z.name.contains('.') {
            return Err(InvalidZone::new("name", format!("{name:?} is not a zone name like edge.example.net")));
        }
        if spec.ns_hosts.is_empty() {
            return Err(InvalidZone::new("ns_hosts", "a zone needs at least one NS host"));
        }
        z.ns_hosts = spec.ns_hosts.into_iter().map(|h| NsHost { name: normalise_name(&h.name), ..h }).collect();
        for h in &z.ns_hosts {
            let in_zone = h.name.ends_with(&format!(".{}", z.name));
            if in_zone && h.ipv4.is_none() && h.ipv6.is_none() {
                return Err(InvalidZone::new(
                    "ns_hosts",
                    format!("in-zone NS host {} needs glue (ipv4 or ipv6)", h.name),
                ));
            }
        }
        z.soa_mname = spec.soa_mname.map(|s| normalise_name(&s)).unwrap_or_else(|| z.ns_hosts[0].name.clone());
        if let Some(r) = spec.soa_rname {
            z.soa_rname = normalise_name(&r);
        }
        z.soa_serial = spec.soa_serial.unwrap_or(z.soa_serial);
        z.soa_refresh = spec.soa_refresh.unwrap_or(z.soa_refresh);
        z.soa_retry = spec.soa_retry.unwrap_or(z.soa_retry);
        z.soa_expire = spec.soa_expire.unwrap_or(z.soa_expire);
        z.soa_minimum = spec.soa_minimum.unwrap_or(z.soa_minimum);
        z.ns_ttl = spec.ns_ttl.unwrap_or(z.ns_ttl);
        Ok(z)
    }
}

/// The zone's DNSSEC policy from the spec's `dnssec*` fields.
fn dnssec_policy(spec: &ZoneSpec) -> Result<Option<ZoneDnssec>, InvalidZone> {
    let tuned = spec.dnssec_algorithm.is_some()
        || spec.dnssec_validity_secs.is_some()
        || spec.dnssec_refresh_secs.is_some()
        || spec.dnssec_denial.is_some()
        || spec.dnssec_nsec3_iterations.is_some()
        || spec.dnssec_nsec3_salt.is_some()
        || spec.dnssec_zsk_lifetime_secs.is_some()
        || spec.dnssec_ksk_lifetime_secs.is_some()
        || spec.dnssec_ds_wait_secs.is_some()
        || spec.dnssec_propagation_secs.is_some();
    if spec.dnssec != Some(true) {
        if tuned {
            return Err(InvalidZone::new("dnssec", "the dnssec_* fields need \"dnssec\": true"));
        }
        return Ok(None);
    }
    let mut policy = ZoneDnssec::default();
    if let Some(a) = &spec.dnssec_algorithm {
        policy.algorithm = DnssecAlgorithm::parse(a).ok_or_else(|| {
            InvalidZone::new("dnssec_algorithm", format!("{a:?} is neither \"ecdsap256sha256\" nor \"ed25519\""))
        })?;
    }
    denial_of(spec, &mut policy)?;
    policy.validity_secs = spec.dnssec_validity_secs.unwrap_or(policy.validity_secs);
    policy.refresh_secs = spec.dnssec_refresh_secs.unwrap_or(policy.refresh_secs);
    policy.zsk_lifetime_secs = spec.dnssec_zsk_lifetime_secs.unwrap_or(policy.zsk_lifetime_secs);
    policy.ksk_lifetime_secs = spec.dnssec_ksk_lifetime_secs.unwrap_or(policy.ksk_lifetime_secs);
    policy.ds_wait_secs = spec.dnssec_ds_wait_secs.unwrap_or(policy.ds_wait_secs);
    policy.propagation_secs = spec.dnssec_propagation_secs.unwrap_or(policy.propagation_secs);
    policy.check().map_err(|reason| InvalidZone::new("dnssec_refresh_secs", reason))?;
    Ok(Some(policy))
}

/// The denial (`dnssec_denial`) and its NSEC3 parameters.
fn denial_of(spec: &ZoneSpec, policy: &mut ZoneDnssec) -> Result<(), InvalidZone> {
    if let Some(d) = &spec.dnssec_denial {
        policy.denial = Denial::parse(d)
            .ok_or_else(|| InvalidZone::new("dnssec_denial", format!("{d:?} is neither \"nsec\" nor \"nsec3\"")))?;
    }
    let nsec3 = policy.denial == Denial::Nsec3;
    if let Some(iterations) = spec.dnssec_nsec3_iterations {
        if !nsec3 {
            return Err(InvalidZone::new("dnssec_nsec3_iterations", "needs \"dnssec_denial\": \"nsec3\""));
        }
        if iterations > MAX_NSEC3_ITERATIONS {
            return Err(InvalidZone::new(
                "dnssec_nsec3_iterations",
                format!(
                    "{iterations} is above {MAX_NSEC3_ITERATIONS}: validators treat many iterations as insecure \
                     (RFC 9276 advises 0)"
                ),
            ));
        }
        policy.nsec3_iterations = iterations;
    }
    if let Some(salt) = &spec.dnssec_nsec3_salt {
        if !nsec3 {
            return Err(InvalidZone::new("dnssec_nsec3_salt", "needs \"dnssec_denial\": \"nsec3\""));
        }
        policy.nsec3_salt = Nsec3Salt::parse(salt).map_err(|reason| InvalidZone::new("dnssec_nsec3_salt", reason))?;
    }
    Ok(())
}

/// A name as it is stored: trimmed, lowercase, no trailing dot.
pub fn normalise_name(name: &str) -> String {
    name.trim().trim_end_matches('.').to_ascii_lowercase()
}

#[cfg(test)]
mod tests {
    use super::ZoneSpec;
    use crate::model::{Denial, Nsec3Salt};

    fn body(json: serde_json::Value) -> ZoneSpec {
        let mut full =
            serde_json::json!({"ns_hosts": [{"name": "ns1.example.net", "ipv4": "192.0.2.53"}], "dnssec": true});
        full.as_object_mut().unwrap().extend(json.as_object().unwrap().clone());
        serde_json::from_value(full).unwrap()
    }

    fn refused(json: serde_json::Value) -> (String, String) {
        let e = body(json).into_zone("edge.example.net").unwrap_err();
        (e.field.to_string(), e.reason)
    }

    #[test]
    fn nsec3_is_chosen_with_its_parameters_and_nsec_stays_the_default() {
        let zone = body(serde_json::json!({})).into_zone("edge.example.net").unwrap();
        let policy = zone.dnssec.unwrap();
        assert_eq!(
            (policy.denial, policy.nsec3_iterations, policy.nsec3_salt),
            (Denial::Nsec, 0, Nsec3Salt::default())
        );
        let json = serde_json::json!({"dnssec_denial": "NSEC3", "dnssec_nsec3_iterations": 5, "dnssec_nsec3_salt": "AABBccdd"});
        let policy = body(json).into_zone("edge.example.net").unwrap().dnssec.unwrap();
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
        assert!(body(ok).into_zone("edge.example.net").is_ok(), "the caps themselves are accepted");
    }
}
