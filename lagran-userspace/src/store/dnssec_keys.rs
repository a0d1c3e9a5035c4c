//! The signed zones' DNSSEC keys: several per zone and role, each with its
//! rollover state and the time it entered each state. The private key is
//! stored sealed (the caller seals and opens it; the store never sees the
//! key file); the DNSKEY and DS are kept in the clear for status pages.

use serde::{Deserialize, Serialize};
use sqlx::any::AnyRow;

use super::{Cols, DbContext, Store, StoreError};
use crate::model::{KeyRole, KeyState};

/// One key as stored.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct StoredKey {
    /// Random, unique: also the associated data its sealing is bound to.
    pub id: String,
    pub zone: String,
    pub role: KeyRole,
    /// The algorithm number (13 or 15).
    pub algorithm: u8,
    pub tag: u16,
    pub state: KeyState,
    /// The DNSKEY record's data in presentation format.
    pub dnskey: String,
    /// The DS record's data (SHA-256) in presentation format.
    pub ds: String,
    /// The private key, sealed (hex; see `dnssec::sealing`).
    #[serde(skip)]
    pub sealed: String,
    pub created_at_ms: i64,
    pub published_at_ms: Option<i64>,
    pub active_at_ms: Option<i64>,
    pub retired_at_ms: Option<i64>,
    pub withdrawing_at_ms: Option<i64>,
    pub removed_at_ms: Option<i64>,
}

impl StoredKey {
    /// The key moved to `state` at `at_ms` (its time for that state set).
    pub fn moved(&self, state: KeyState, at_ms: i64) -> StoredKey {
        let mut k = self.clone();
        k.state = state;
        let slot = match state {
            KeyState::Generated => None,
            KeyState::Published => Some(&mut k.published_at_ms),
            KeyState::Active => Some(&mut k.active_at_ms),
            KeyState::Retired => Some(&mut k.retired_at_ms),
            KeyState::Withdrawing => Some(&mut k.withdrawing_at_ms),
            KeyState::Removed => Some(&mut k.removed_at_ms),
        };
        if let Some(slot) = slot {
            *slot = Some(at_ms);
        }
        if state == KeyState::Active && k.published_at_ms.is_none() {
            k.published_at_ms = Some(at_ms);
        }
        k
    }
}

const COLUMNS: &str = "id, zone, role, algorithm, tag, state, dnskey, ds, sealed, created_at_ms, published_at_ms, \
                       active_at_ms, retired_at_ms, withdrawing_at_ms, removed_at_ms";

fn from_row(row: &AnyRow) -> Result<StoredKey, StoreError> {
    let c = Cols::keyed(row, "DNSSEC key", "id")?;
    let role: String = c.get("role")?;
    let state: String = c.get("state")?;
    Ok(StoredKey {
        id: c.key().to_string(),
        zone: c.get("zone")?,
        role: KeyRole::parse(&role).ok_or_else(|| c.corrupt("role", format!("{role:?} is not ksk or zsk")))?,
        algorithm: c.int("algorithm")?,
        tag: c.int("tag")?,
        state: KeyState::parse(&state).ok_or_else(|| c.corrupt("state", format!("{state:?} is not a key state")))?,
        dnskey: c.get("dnskey")?,
        ds: c.get("ds")?,
        sealed: c.get("sealed")?,
        created_at_ms: c.get("created_at_ms")?,
        published_at_ms: c.get("published_at_ms")?,
        active_at_ms: c.get("active_at_ms")?,
        retired_at_ms: c.get("retired_at_ms")?,
        withdrawing_at_ms: c.get("withdrawing_at_ms")?,
        removed_at_ms: c.get("removed_at_ms")?,
    })
}

impl Store {
    /// Every key not removed, by zone, then creation.
    pub async fn list_dnssec_keys(&self) -> Result<Vec<StoredKey>, StoreError> {
        let rows = sqlx::query(&format!(
            "SELECT {COLUMNS} FROM dnssec_keys WHERE state <> 'removed' ORDER BY zone, created_at_ms, id"
        ))
        .fetch_all(self.pool())
        .await
        .ctx(|| "listing DNSSEC keys".to_string())?;
        let mut keys = rows.iter().map(from_row).collect::<Result<Vec<_>, _>>()?;
        keys.sort_by(|a, b| a.zone.cmp(&b.zone).then(a.created_at_ms.cmp(&b.created_at_ms)).then(a.id.cmp(&b.id)));
        Ok(keys)
    }

    /// Whether any key was ever stored (removed ones included): the key file
    /// may be made afresh only while this is `false`.
    pub async fn any_dnssec_key(&self) -> Result<bool, StoreError> {
        let row = sqlx::query("SELECT COUNT(*) AS n FROM dnssec_keys")
            .fetch_one(self.pool())
            .await
            .ctx(|| "counting DNSSEC keys".to_string())?;
        let n: i64 = sqlx::Row::try_get(&row, "n").ctx(|| "counting DNSSEC keys".to_string())?;
        Ok(n > 0)
    }

    /// Stores a new key; an id already stored is a conflict.
    pub async fn insert_dnssec_key(&self, k: &StoredKey) -> Result<(), StoreError> {
        let done = sqlx::query(&format!(
            "INSERT INTO dnssec_keys ({COLUMNS}) VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12, $13, $14, \
             $15) ON CONFLICT (id) DO NOTHING"
        ))
        .bind(&k.id)
        .bind(&k.zone)
        .bind(k.role.as_str())
        .bind(i64::from(k.algorithm))
        .bind(i64::from(k.tag))
        .bind(k.state.as_str())
        .bind(&k.dnskey)
        .bind(&k.ds)
        .bind(&k.sealed)
        .bind(k.created_at_ms)
        .bind(k.published_at_ms)
        .bind(k.active_at_ms)
        .bind(k.retired_at_ms)
        .bind(k.withdrawing_at_ms)
        .bind(k.removed_at_ms)
        .execute(self.pool())
        .await
        .ctx(|| format!("storing DNSSEC key {} of {}", k.tag, k.zone))?;
        if done.rows_affected() == 0 {
            return Err(StoreError::Conflict { what: "DNSSEC key", key: k.id.clone() });
        }
        Ok(())
    }

    /// Writes the states and times of `keys` in one transaction; a key whose
    /// stored state is not the one it had in `from` is left alone and makes
    /// the whole write fail (two leaders must not both move a key).
    pub async fn move_dnssec_keys(&self, moves: &[(KeyState, StoredKey)]) -> Result<(), StoreError> {
        let mut tx = self.pool().begin().await.ctx(|| "starting a DNSSEC key update".to_string())?;
        for (from, k) in moves {
            let done = sqlx::query(
                "UPDATE dnssec_keys SET state = $1, published_at_ms = $2, active_at_ms = $3, retired_at_ms = $4, \
                 withdrawing_at_ms = $5, removed_at_ms = $6 WHERE id = $7 AND state = $8",
            )
            .bind(k.state.as_str())
            .bind(k.published_at_ms)
            .bind(k.active_at_ms)
            .bind(k.retired_at_ms)
            .bind(k.withdrawing_at_ms)
            .bind(k.removed_at_ms)
            .bind(&k.id)
            .bind(from.as_str())
            .execute(&mut *tx)
            .await
            .ctx(|| format!("moving DNSSEC key {} of {} to {}", k.tag, k.zone, k.state.as_str()))?;
            if done.rows_affected() == 0 {
                return Err(StoreError::Conflict {
                    what: "DNSSEC key state",
                    key: format!("{} of {} is no longer {}", k.tag, k.zone, from.as_str()),
                });
            }
        }
        tx.commit().await.ctx(|| "committing a DNSSEC key update".to_string())
    }
}
