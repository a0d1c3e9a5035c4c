//! Edge sites kept centrally, so every edge node picks them up from
//! `/api/v1/sites` without a restart: one row per [`Site`] (the record shared
//! with `lagran-edge`, whose `[[site]]` tables have the same keys), stamped
//! with when it was created and last written. The site's certificate is the
//! `certificates` row whose domain is the site's host.

use lagran_site::Site;
use serde::Serialize;
use sqlx::any::AnyRow;

use super::validate;
use super::{Cols, DbContext, ReturningOne, Store, StoreError, now_ms};

/// A site as the store keeps it: the shared record plus when it was written.
/// Serializes as the site's keys followed by the two timestamps.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct StoredSite {
    #[serde(flatten)]
    pub site: Site,
    pub created_at_ms: i64,
    pub updated_at_ms: i64,
}

/// `name` or `*.suffix`, checked as a DNS name.
fn host_pattern(field: &'static str, value: &str) -> Result<(), StoreError> {
    validate::dns_name(field, value.strip_prefix("*.").unwrap_or(value))
}

/// The site's rules ([`Site::validate`], the edge's too) after the store's
/// own: host patterns in canonical form (lowercase, DNS label lengths) and a
/// TTL that fits the database's signed column.
fn validate_site(site: &Site) -> Result<(), StoreError> {
    host_pattern("host", &site.host)?;
    for p in &site.referer_allow {
        host_pattern("referer_allow", p)?;
    }
    if i64::try_from(site.cache_ttl_secs).is_err() {
        return Err(StoreError::invalid("cache_ttl_secs", "is too large"));
    }
    site.validate().map_err(|e| StoreError::invalid(e.field, e.reason))
}

const SITE_COLUMNS: &str = "host, origin, cache_ttl_secs, allow_cidrs, deny_cidrs, deny_paths, deny_user_agents, \
                            rate_limit_rps, rate_limit_burst, referer_allow, acme, waf_case_insensitive, pools, \
                            origins, origin_host, origin_weights, origin_health_path, origin_ca_pem, \
                            created_at_ms, updated_at_ms";

fn site_from_row(row: &AnyRow) -> Result<StoredSite, StoreError> {
    let c = Cols::keyed(row, "site", "host")?;
    fn list<T: serde::de::DeserializeOwned>(c: &Cols<'_>, col: &str) -> Result<Vec<T>, StoreError> {
        let text: String = c.get(col)?;
        serde_json::from_str(&text).map_err(|e| c.corrupt(col, format!("{text:?} is not a JSON list: {e}")))
    }
    fn list_opt<T: serde::de::DeserializeOwned>(c: &Cols<'_>, col: &str) -> Result<Option<Vec<T>>, StoreError> {
        let Some(text) = c.get::<Option<String>>(col)? else { return Ok(None) };
        let list = serde_json::from_str(&text).map_err(|e| c.corrupt(col, format!("{text:?} is not a JSON list: {e}")));
        list.map(Some)
    }
    let site = Site {
        host: c.key().to_string(),
        origin: c.get("origin")?,
        cache_ttl_secs: c.int("cache_ttl_secs")?,
        allow_cidrs: list(&c, "allow_cidrs")?,
        deny_cidrs: list(&c, "deny_cidrs")?,
        deny_paths: list(&c, "deny_paths")?,
        deny_user_agents: list(&c, "deny_user_agents")?,
        rate_limit_rps: c.get("rate_limit_rps")?,
        rate_limit_burst: c.int_opt("rate_limit_burst")?,
        referer_allow: list(&c, "referer_allow")?,
        acme: c.get::<i64>("acme")? != 0,
        waf_case_insensitive: c.get::<i64>("waf_case_insensitive")? != 0,
        pools: list_opt(&c, "pools")?,
        origins: list_opt(&c, "origins")?.unwrap_or_default(),
        origin_host: c.get("origin_host")?,
        origin_weights: list_opt(&c, "origin_weights")?.unwrap_or_default(),
        origin_health_path: c.get("origin_health_path")?,
        origin_ca_pem: c.get("origin_ca_pem")?,
    };
    Ok(StoredSite { site, created_at_ms: c.get("created_at_ms")?, updated_at_ms: c.get("updated_at_ms")? })
}

fn json<T: Serialize>(v: &T) -> String {
    serde_json::to_string(v).expect("lists of strings serialize")
}

impl Store {
    /// Every site, ordered by host.
    pub async fn list_sites(&self) -> Result<Vec<StoredSite>, StoreError> {
        let rows = sqlx::query(&format!("SELECT {SITE_COLUMNS} FROM sites"))
            .fetch_all(self.pool())
            .await
            .ctx(|| "listing sites".to_string())?;
        let mut out = rows.iter().map(site_from_row).collect::<Result<Vec<_>, _>>()?;
        out.sort_by(|a, b| a.site.host.cmp(&b.site.host));
        Ok(out)
    }

    /// The site for exactly `host`, `None` when there is none.
    pub async fn get_site(&self, host: &str) -> Result<Option<StoredSite>, StoreError> {
        let row = sqlx::query(&format!("SELECT {SITE_COLUMNS} FROM sites WHERE host = $1"))
            .bind(host)
            .fetch_optional(self.pool())
            .await
            .ctx(|| format!("reading site {host:?}"))?;
        row.as_ref().map(site_from_row).transpose()
    }

    /// Creates or replaces the site for its host; returns it as stored.
    pub async fn upsert_site(&self, site: &Site) -> Result<StoredSite, StoreError> {
        validate_site(site)?;
        let now = now_ms();
        let rate_limit_burst = site.rate_limit_burst.map(i64::from);
        let cache_ttl_secs = i64::try_from(site.cache_ttl_secs).unwrap_or(i64::MAX);
        let row = sqlx::query(&format!(
            "INSERT INTO sites ({SITE_COLUMNS}) VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12, $13, $14, $15, \
             $16, $17, $18, $19, $20) \
             ON CONFLICT (host) DO UPDATE SET origin = excluded.origin, cache_ttl_secs = excluded.cache_ttl_secs, \
             allow_cidrs = excluded.allow_cidrs, deny_cidrs = excluded.deny_cidrs, \
             deny_paths = excluded.deny_paths, deny_user_agents = excluded.deny_user_agents, \
             rate_limit_rps = excluded.rate_limit_rps, rate_limit_burst = excluded.rate_limit_burst, \
             referer_allow = excluded.referer_allow, acme = excluded.acme, \
             waf_case_insensitive = excluded.waf_case_insensitive, pools = excluded.pools, \
             origins = excluded.origins, origin_host = excluded.origin_host, \
             origin_weights = excluded.origin_weights, origin_health_path = excluded.origin_health_path, \
             origin_ca_pem = excluded.origin_ca_pem, updated_at_ms = excluded.updated_at_ms \
             RETURNING {SITE_COLUMNS}"
        ))
        .bind(&site.host)
        .bind(site.primary_origin())
        .bind(cache_ttl_secs)
        .bind(json(&site.allow_cidrs))
        .bind(json(&site.deny_cidrs))
        .bind(json(&site.deny_paths))
        .bind(json(&site.deny_user_agents))
        .bind(site.rate_limit_rps)
        .bind(rate_limit_burst)
        .bind(json(&site.referer_allow))
        .bind(i64::from(site.acme))
        .bind(i64::from(site.waf_case_insensitive))
        .bind(site.pools.as_ref().map(json))
        // One origin lives in `origin` alone; several keep their list.
        .bind((site.origin_urls().count() > 1).then(|| json(&site.origins)))
        .bind(&site.origin_host)
        .bind((!site.origin_weights.is_empty()).then(|| json(&site.origin_weights)))
        .bind(&site.origin_health_path)
        .bind(&site.origin_ca_pem)
        .bind(now)
        .bind(now)
        .returning_one(self.pool())
        .await
        .ctx(|| format!("writing site {:?}", site.host))?;
        site_from_row(&row)
    }

    /// Deletes the site for `host`; `false` if there was none.
    pub async fn delete_site(&self, host: &str) -> Result<bool, StoreError> {
        let done = sqlx::query("DELETE FROM sites WHERE host = $1")
            .bind(host)
            .execute(self.pool())
            .await
            .ctx(|| format!("deleting site {host:?}"))?;
        Ok(done.rows_affected() > 0)
    }
}
