//! The zones the configuration file declares (`[zones."name"]`), written at
//! each start of a control process as `PUT /api/v1/zones/{name}` with the
//! same fields would write them. A zone already stored as declared is not
//! written again, so every control process of a cluster can start with the
//! same file and a restart changes nothing.

use crate::config::Config;
use crate::settings::InvalidSetting;
use crate::store::{Store, StoreError, redact_url};

/// Why the declared zones could not be written.
#[derive(Debug, thiserror::Error)]
pub enum DeclaredZoneError {
    #[error(transparent)]
    Invalid(#[from] InvalidSetting),
    #[error("writing zone {zone} to {url}: {source}")]
    Store { zone: String, url: String, source: StoreError },
}

/// Writes each zone of `config.zones` whose stored record differs from it.
pub async fn install(config: &Config, store: &Store) -> Result<(), DeclaredZoneError> {
    for zone in config.declared_zones()? {
        let stored = store.get_zone(&zone.name).await;
        let written = match stored {
            Ok(Some(same)) if same == zone => continue,
            Ok(_) => store.upsert_zone(&zone).await,
            Err(e) => Err(e),
        };
        written.map_err(|source| DeclaredZoneError::Store {
            zone: zone.name.clone(),
            url: redact_url(&config.database_url),
            source,
        })?;
        tracing::info!(zone = %zone.name, dnssec = zone.dnssec.is_some(), "zone written as the configuration declares it");
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn config(toml: &str) -> Config {
        toml::from_str(toml).expect("a configuration")
    }

    const SIGNED: &str = r#"
[zones."cdn.example.net"]
ns_hosts = [{ name = "ns1.cdn.example.net", ipv4 = "192.0.2.53" }]
dnssec = true
dnssec_algorithm = "ed25519"
dnssec_denial = "nsec3"
"#;

    #[tokio::test]
    async fn a_declared_zone_is_written_once_and_rewritten_when_the_file_changes() {
        let store = Store::connect("sqlite::memory:").await.unwrap();
        install(&config(SIGNED), &store).await.unwrap();
        let zone = store.get_zone("cdn.example.net").await.unwrap().expect("the declared zone");
        let policy = zone.dnssec.clone().expect("signed");
        assert_eq!(policy.algorithm, crate::model::DnssecAlgorithm::Ed25519);
        assert_eq!(policy.denial, crate::model::Denial::Nsec3);
        assert_eq!(zone.ns_hosts[0].ipv4, Some("192.0.2.53".parse().unwrap()));

        // The same file again: the stored record stays as it is.
        install(&config(SIGNED), &store).await.unwrap();
        assert_eq!(store.get_zone("cdn.example.net").await.unwrap(), Some(zone));

        // Signing turned off in the file: the stored zone follows at the next start.
        let unsigned = SIGNED.replace("dnssec = true\ndnssec_algorithm = \"ed25519\"\ndnssec_denial = \"nsec3\"\n", "");
        install(&config(&unsigned), &store).await.unwrap();
        assert!(store.get_zone("cdn.example.net").await.unwrap().unwrap().dnssec.is_none());
    }

    #[test]
    fn a_bad_declared_zone_is_refused_naming_the_zone_and_the_field() {
        let bad = SIGNED.replace("dnssec_denial = \"nsec3\"", "dnssec_nsec3_iterations = 5");
        let e = config(&bad).validate().unwrap_err().to_string();
        assert!(e.contains("cdn.example.net") && e.contains("dnssec_nsec3_iterations"), "{e}");
        let unknown = SIGNED.replace("dnssec = true", "dnssec = true\nsigned = true");
        let e = toml::from_str::<Config>(&unknown).unwrap_err().to_string();
        assert!(e.contains("unknown field `signed`"), "{e}");
    }
}
