//! The operator's ASN → carrier entries written through the API. They are laid
//! over `[geo.asn_carriers]`, which is laid over the built-in table, when the geo
//! data is next loaded (a reload or a restart); an empty carrier removes the
//! entry of the layers below.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};
use sqlx::any::AnyRow;

use super::{Cols, DbContext, ReturningOne, Store, StoreError, now_ms};

/// One entry.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct AsnCarrier {
    pub asn: u32,
    /// The carrier's name (`电信`, `Deutsche Telekom`, …); empty removes the
    /// entry of `[geo.asn_carriers]` or the built-in table.
    pub carrier: String,
    #[serde(default)]
    pub note: String,
    /// Who wrote it (operator name or token label), for the audit trail.
    #[serde(default)]
    pub updated_by: String,
    #[serde(default)]
    pub updated_at_ms: i64,
}

/// The longest carrier name accepted (a location field, not a document).
const MAX_CARRIER_LEN: usize = 128;

impl AsnCarrier {
    pub fn validate(&self) -> Result<(), StoreError> {
        if self.carrier.len() > MAX_CARRIER_LEN {
            return Err(StoreError::invalid("carrier", format!("longer than {MAX_CARRIER_LEN} bytes")));
        }
        // The carrier is a field of the location's region text (`|`-separated).
        if self.carrier.contains(['|', '\n', '\r']) {
            return Err(StoreError::invalid("carrier", "must not contain `|` or line breaks"));
        }
        Ok(())
    }
}

const COLUMNS: &str = "asn, carrier, note, updated_by, updated_at_ms";

fn from_row(row: &AnyRow) -> Result<AsnCarrier, StoreError> {
    let asn: i64 = sqlx::Row::try_get(row, "asn").ctx(|| "reading the asn of an ASN carrier entry".to_string())?;
    let c = Cols::with_key(row, "ASN carrier entry", format!("AS{asn}"));
    Ok(AsnCarrier {
        asn: c.int("asn")?,
        carrier: c.get("carrier")?,
        note: c.get("note")?,
        updated_by: c.get("updated_by")?,
        updated_at_ms: c.get("updated_at_ms")?,
    })
}

impl Store {
    /// Every entry, by ASN.
    pub async fn list_asn_carriers(&self) -> Result<Vec<AsnCarrier>, StoreError> {
        let rows = sqlx::query(&format!("SELECT {COLUMNS} FROM asn_carriers ORDER BY asn"))
            .fetch_all(self.pool())
            .await
            .ctx(|| "listing ASN carrier entries".to_string())?;
        rows.iter().map(from_row).collect()
    }

    /// The entries as the geo merge takes them: ASN → carrier.
    pub async fn asn_carrier_map(&self) -> Result<BTreeMap<u32, String>, StoreError> {
        Ok(self.list_asn_carriers().await?.into_iter().map(|e| (e.asn, e.carrier)).collect())
    }

    /// The entry of `asn`, `None` when there is none.
    pub async fn get_asn_carrier(&self, asn: u32) -> Result<Option<AsnCarrier>, StoreError> {
        let row = sqlx::query(&format!("SELECT {COLUMNS} FROM asn_carriers WHERE asn = $1"))
            .bind(i64::from(asn))
            .fetch_optional(self.pool())
            .await
            .ctx(|| format!("reading the carrier of AS{asn}"))?;
        row.as_ref().map(from_row).transpose()
    }

    /// Creates or replaces the entry of its ASN and returns it as stored.
    pub async fn upsert_asn_carrier(&self, e: &AsnCarrier) -> Result<AsnCarrier, StoreError> {
        e.validate()?;
        let row = sqlx::query(&format!(
            "INSERT INTO asn_carriers ({COLUMNS}) VALUES ($1, $2, $3, $4, $5) \
             ON CONFLICT (asn) DO UPDATE SET carrier = excluded.carrier, note = excluded.note, \
             updated_by = excluded.updated_by, updated_at_ms = excluded.updated_at_ms \
             RETURNING {COLUMNS}"
        ))
        .bind(i64::from(e.asn))
        .bind(&e.carrier)
        .bind(&e.note)
        .bind(&e.updated_by)
        .bind(now_ms())
        .returning_one(self.pool())
        .await
        .ctx(|| format!("writing the carrier of AS{}", e.asn))?;
        from_row(&row)
    }

    /// Deletes the entry of `asn`; `false` if there was none.
    pub async fn delete_asn_carrier(&self, asn: u32) -> Result<bool, StoreError> {
        let done = sqlx::query("DELETE FROM asn_carriers WHERE asn = $1")
            .bind(i64::from(asn))
            .execute(self.pool())
            .await
            .ctx(|| format!("deleting the carrier of AS{asn}"))?;
        Ok(done.rows_affected() > 0)
    }
}
