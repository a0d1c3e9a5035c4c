//! Geo overrides: operator corrections, CIDR → geo tuple, for blocks the geo file
//! places wrongly; they win over the geo database file. One override per prefix; nested prefixes are
//! allowed (the longest match wins when the geo layer applies them).

use ipnet::IpNet;
use sqlx::any::AnyRow;

use super::validate;
use super::{Cols, DbContext, ReturningOne, Store, StoreError, now_ms};
use crate::model::GeoOverride;

impl GeoOverride {
    pub fn validate(&self) -> Result<(), StoreError> {
        validate::prefix("prefix", &self.prefix)
    }
}

const OVERRIDE_COLUMNS: &str = "prefix, country, province, city, isp, note, created_by, created_at_ms";

fn override_from_row(row: &AnyRow) -> Result<GeoOverride, StoreError> {
    let c = Cols::keyed(row, "geo override", "prefix")?;
    Ok(GeoOverride {
        prefix: c.parse("prefix")?,
        country: c.get("country")?,
        province: c.get("province")?,
        city: c.get("city")?,
        isp: c.get("isp")?,
        note: c.get("note")?,
        created_by: c.get("created_by")?,
        created_at_ms: c.get("created_at_ms")?,
    })
}

impl Store {
    /// Every override, in address order (IPv4 first, shorter prefixes first).
    pub async fn list_geo_overrides(&self) -> Result<Vec<GeoOverride>, StoreError> {
        let rows = sqlx::query(&format!("SELECT {OVERRIDE_COLUMNS} FROM geo_overrides"))
            .fetch_all(self.pool())
            .await
            .ctx(|| "listing geo overrides".to_string())?;
        let mut out = rows.iter().map(override_from_row).collect::<Result<Vec<_>, _>>()?;
        out.sort_by_key(|o| (o.prefix.addr(), o.prefix.prefix_len()));
        Ok(out)
    }

    /// The override for exactly `prefix`, `None` when there is none.
    pub async fn get_geo_override(&self, prefix: &IpNet) -> Result<Option<GeoOverride>, StoreError> {
        let row = sqlx::query(&format!("SELECT {OVERRIDE_COLUMNS} FROM geo_overrides WHERE prefix = $1"))
            .bind(prefix.to_string())
            .fetch_optional(self.pool())
            .await
            .ctx(|| format!("reading the geo override for {prefix}"))?;
        row.as_ref().map(override_from_row).transpose()
    }

    /// Creates or replaces the override for its prefix and returns it as
    /// stored; a replaced override keeps its original `created_at_ms`.
    pub async fn upsert_geo_override(&self, o: &GeoOverride) -> Result<GeoOverride, StoreError> {
        o.validate()?;
        let row = sqlx::query(&format!(
            "INSERT INTO geo_overrides ({OVERRIDE_COLUMNS}) VALUES ($1, $2, $3, $4, $5, $6, $7, $8) \
             ON CONFLICT (prefix) DO UPDATE SET country = excluded.country, \
             province = excluded.province, city = excluded.city, isp = excluded.isp, \
             note = excluded.note, created_by = excluded.created_by \
             RETURNING {OVERRIDE_COLUMNS}"
        ))
        .bind(o.prefix.to_string())
        .bind(&o.country)
        .bind(&o.province)
        .bind(&o.city)
        .bind(&o.isp)
        .bind(&o.note)
        .bind(&o.created_by)
        .bind(now_ms())
        .returning_one(self.pool())
        .await
        .ctx(|| format!("writing the geo override for {}", o.prefix))?;
        override_from_row(&row)
    }

    /// Deletes the override for exactly `prefix`; `false` if there was none.
    pub async fn delete_geo_override(&self, prefix: &IpNet) -> Result<bool, StoreError> {
        let done = sqlx::query("DELETE FROM geo_overrides WHERE prefix = $1")
            .bind(prefix.to_string())
            .execute(self.pool())
            .await
            .ctx(|| format!("deleting the geo override for {prefix}"))?;
        Ok(done.rows_affected() > 0)
    }
}
