//! Edge sites: what one `[[site]]` of `lagran-edge`'s TOML holds (host,
//! origin, cache TTL, WAF lists, rate limit, hotlink rule), kept centrally so
//! every edge node picks them up from `/api/v1/sites` without a restart. The
//! site's certificate is the `certificates` row whose domain is the site's host.
//!
//! The JSON shape is the edge's `[[site]]` keys (minus the certificate paths)
//! plus the store's timestamps, so an edge reads it with the same rules as its
//! own file.

use ipnet::IpNet;
use serde::{Deserialize, Serialize};
use sqlx::any::AnyRow;

use super::validate;
use super::{Cols, DbContext, Store, StoreError, now_ms};

fn default_cache_ttl_secs() -> u64 {
    60
}

/// One customer host served by the edge nodes.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Site {
    /// `cdn.example.com` or `*.example.com` (one label), lowercase.
    pub host: String,
    /// `http://host[:port][/base]`.
    pub origin: String,
    /// TTL of responses without `max-age`; 0 disables caching for the site.
    #[serde(default = "default_cache_ttl_secs")]
    pub cache_ttl_secs: u64,
    #[serde(default)]
    pub allow_cidrs: Vec<IpNet>,
    #[serde(default)]
    pub deny_cidrs: Vec<IpNet>,
    #[serde(default)]
    pub deny_paths: Vec<String>,
    #[serde(default)]
    pub deny_user_agents: Vec<String>,
    /// Requests per second per client address; absent = unlimited.
    #[serde(default)]
    pub rate_limit_rps: Option<f64>,
    #[serde(default)]
    pub rate_limit_burst: Option<u32>,
    #[serde(default)]
    pub referer_allow: Vec<String>,
    /// Set by the store; ignored on input.
    #[serde(default)]
    pub created_at_ms: i64,
    /// Set by the store; ignored on input.
    #[serde(default)]
    pub updated_at_ms: i64,
}

/// `name` or `*.suffix`, checked as a DNS name.
fn host_pattern(field: &'static str, value: &str) -> Result<(), StoreError> {
    validate::dns_name(field, value.strip_prefix("*.").unwrap_or(value))
}

impl Site {
    /// Checks the values with the edge's own rules, so whatever the store
    /// accepts the edge accepts too.
    pub fn validate(&self) -> Result<(), StoreError> {
        host_pattern("host", &self.host)?;
        let uri: hyper::Uri = self
            .origin
            .parse()
            .map_err(|_| StoreError::invalid("origin", format!("{:?} is not a URL", self.origin)))?;
        if uri.scheme_str() != Some("http") {
            return Err(StoreError::invalid("origin", "only http:// origins are supported"));
        }
        match uri.authority() {
            None => return Err(StoreError::invalid("origin", "has no host")),
            Some(a) if a.as_str().contains('@') => {
                return Err(StoreError::invalid("origin", "user info is not allowed"));
            }
            Some(_) => {}
        }
        if uri.query().is_some() {
            return Err(StoreError::invalid("origin", "a query is not allowed"));
        }
        match (self.rate_limit_rps, self.rate_limit_burst) {
            (Some(rps), _) if !(rps.is_finite() && rps > 0.0) => {
                return Err(StoreError::invalid("rate_limit_rps", "must be a positive number"));
            }
            (None, Some(_)) => return Err(StoreError::invalid("rate_limit_burst", "needs rate_limit_rps")),
            (_, Some(0)) => return Err(StoreError::invalid("rate_limit_burst", "must be at least 1")),
            _ => {}
        }
        if i64::try_from(self.cache_ttl_secs).is_err() {
            return Err(StoreError::invalid("cache_ttl_secs", "is too large"));
        }
        if let Some(p) = self.deny_paths.iter().find(|p| !p.starts_with('/')) {
            return Err(StoreError::invalid("deny_paths", format!("{p:?} must start with '/'")));
        }
        if self.deny_user_agents.iter().any(String::is_empty) {
            return Err(StoreError::invalid("deny_user_agents", "an empty pattern would match every client"));
        }
        for p in &self.referer_allow {
            host_pattern("referer_allow", p)?;
        }
        Ok(())
    }
}

const SITE_COLUMNS: &str = "host, origin, cache_ttl_secs, allow_cidrs, deny_cidrs, deny_paths, deny_user_agents, \
                            rate_limit_rps, rate_limit_burst, referer_allow, created_at_ms, updated_at_ms";

fn site_from_row(row: &AnyRow) -> Result<Site, StoreError> {
    let c = Cols::keyed(row, "site", "host")?;
    fn list<T: serde::de::DeserializeOwned>(c: &Cols<'_>, col: &str) -> Result<Vec<T>, StoreError> {
        let text: String = c.get(col)?;
        serde_json::from_str(&text).map_err(|e| c.corrupt(col, format!("{text:?} is not a JSON list: {e}")))
    }
    Ok(Site {
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
        created_at_ms: c.get("created_at_ms")?,
        updated_at_ms: c.get("updated_at_ms")?,
    })
}

fn json<T: Serialize>(v: &T) -> String {
    serde_json::to_string(v).expect("lists of strings serialize")
}

impl Store {
    /// Every site, ordered by host.
    pub async fn list_sites(&self) -> Result<Vec<Site>, StoreError> {
        let rows = sqlx::query(&format!("SELECT {SITE_COLUMNS} FROM sites"))
            .fetch_all(self.pool())
            .await
            .ctx(|| "listing sites".to_string())?;
        let mut out = rows.iter().map(site_from_row).collect::<Result<Vec<_>, _>>()?;
        out.sort_by(|a, b| a.host.cmp(&b.host));
        Ok(out)
    }

    /// The site for exactly `host`, `None` when there is none.
    pub async fn get_site(&self, host: &str) -> Result<Option<Site>, StoreError> {
        let row = sqlx::query(&format!("SELECT {SITE_COLUMNS} FROM sites WHERE host = $1"))
            .bind(host)
            .fetch_optional(self.pool())
            .await
            .ctx(|| format!("reading site {host:?}"))?;
        row.as_ref().map(site_from_row).transpose()
    }

    /// Creates or replaces the site for its host; returns it as stored.
    pub async fn upsert_site(&self, site: &Site) -> Result<Site, StoreError> {
        site.validate()?;
        let now = now_ms();
        let rate_limit_burst = site.rate_limit_burst.map(i64::from);
        let cache_ttl_secs = i64::try_from(site.cache_ttl_secs).unwrap_or(i64::MAX);
        let row = sqlx::query(&format!(
            "INSERT INTO sites ({SITE_COLUMNS}) VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12) \
             ON CONFLICT (host) DO UPDATE SET origin = excluded.origin, cache_ttl_secs = excluded.cache_ttl_secs, \
             allow_cidrs = excluded.allow_cidrs, deny_cidrs = excluded.deny_cidrs, \
             deny_paths = excluded.deny_paths, deny_user_agents = excluded.deny_user_agents, \
             rate_limit_rps = excluded.rate_limit_rps, rate_limit_burst = excluded.rate_limit_burst, \
             referer_allow = excluded.referer_allow, updated_at_ms = excluded.updated_at_ms \
             RETURNING {SITE_COLUMNS}"
        ))
        .bind(&site.host)
        .bind(&site.origin)
        .bind(cache_ttl_secs)
        .bind(json(&site.allow_cidrs))
        .bind(json(&site.deny_cidrs))
        .bind(json(&site.deny_paths))
        .bind(json(&site.deny_user_agents))
        .bind(site.rate_limit_rps)
        .bind(rate_limit_burst)
        .bind(json(&site.referer_allow))
        .bind(now)
        .bind(now)
        .fetch_one(self.pool())
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
