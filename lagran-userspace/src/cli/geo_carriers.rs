//! The operator's ASN → carrier entries written through the API, for
//! `lagran geo lookup` on the configured files: asked from the daemon
//! (`GET /api/v1/geo/asn-carriers`), as `explain` asks it for decisions; read
//! from the database when no daemon answers at the configured `api_listen`
//! (and none was named with `--api` / `LAGRAN_API`). They are laid over
//! `[geo.asn_carriers]` as the daemon's next load of the geo data lays them.

use std::collections::BTreeMap;

use hyper::Method;
use serde_json::Value;

use super::geo_client::ApiClient;
use crate::config::Config;
use crate::geo::GeoError;

/// The entries and where they came from (for a note on stderr).
pub struct Carriers {
    pub entries: BTreeMap<u32, String>,
    pub from: String,
}

/// The entries from the daemon behind `client` (`named`: its URL was given, so
/// not reaching it is an error), else from the database at `DATABASE_URL`.
pub async fn api_carriers(config: &Config, client: &ApiClient, named: bool) -> Result<Carriers, GeoError> {
    let answer = client.request(Method::GET, "/api/v1/geo/asn-carriers", None).await;
    let unreachable = match answer {
        Ok(r) if r.ok() => {
            let entries = entries_of(&r.body).ok_or_else(|| {
                GeoError::Usage(format!("GET /api/v1/geo/asn-carriers: not a list of entries: {}", r.body))
            })?;
            return Ok(Carriers { entries, from: format!("the daemon at {}", client.base()) });
        }
        Ok(r) => {
            return Err(GeoError::Usage(format!("GET /api/v1/geo/asn-carriers: {}: {}", r.status, r.error_text())));
        }
        Err(e) if named => return Err(e),
        Err(e) => e,
    };
    let store = crate::store::Store::connect(&config.database_url)
        .await
        .map_err(|e| GeoError::Usage(format!("{unreachable}; and the database: {e}")))?;
    let entries = store.asn_carrier_map().await.map_err(|e| GeoError::Usage(format!("the database: {e}")))?;
    Ok(Carriers { entries, from: format!("the database (no daemon: {unreachable})") })
}

/// ASN → carrier of the endpoint's `[{"asn": 3320, "carrier": "…", …}]`.
fn entries_of(body: &Value) -> Option<BTreeMap<u32, String>> {
    body.as_array()?
        .iter()
        .map(|e| Some((u32::try_from(e["asn"].as_u64()?).ok()?, e["carrier"].as_str()?.to_string())))
        .collect()
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::entries_of;

    #[test]
    fn the_endpoint_list_becomes_the_map_the_merge_takes() {
        let body = json!([
            {"asn": 3320, "carrier": "Deutsche Telekom", "note": "", "updated_by": "alice"},
            {"asn": 4134, "carrier": ""}
        ]);
        let m = entries_of(&body).unwrap();
        assert_eq!(m.get(&3320).map(String::as_str), Some("Deutsche Telekom"));
        assert_eq!(m.get(&4134).map(String::as_str), Some(""), "an empty carrier is kept: it removes an entry");
        assert_eq!(entries_of(&json!({"error": "x"})), None);
        assert_eq!(entries_of(&json!([{"asn": "x", "carrier": "y"}])), None);
    }
}
