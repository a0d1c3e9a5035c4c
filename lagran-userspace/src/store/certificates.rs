//! TLS certificates the edge serves, one per SNI name.
//!
//! The store keeps the PEM text as given; it only checks that both parts look
//! like PEM of the right kind. `Debug` never prints the private key.

use std::fmt;

use serde::{Deserialize, Serialize};
use sqlx::any::AnyRow;

use super::validate;
use super::{Cols, DbContext, ReturningOne, Store, StoreError, now_ms};

/// A certificate chain and its private key for one SNI name.
#[derive(Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Certificate {
    /// The SNI name: a DNS name, or a wildcard `*.example.com`.
    pub domain: String,
    /// PEM, leaf certificate first.
    pub cert_pem: String,
    /// PEM private key.
    pub key_pem: String,
    /// Set by the store; ignored on input.
    #[serde(default)]
    pub updated_at_ms: i64,
}

impl fmt::Debug for Certificate {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Certificate")
            .field("domain", &self.domain)
            .field("cert_pem", &format_args!("<{} bytes>", self.cert_pem.len()))
            .field("key_pem", &"<redacted>")
            .field("updated_at_ms", &self.updated_at_ms)
            .finish()
    }
}

impl Certificate {
    pub fn validate(&self) -> Result<(), StoreError> {
        let name = self.domain.strip_prefix("*.").unwrap_or(&self.domain);
        validate::dns_name("domain", name)?;
        if !self.cert_pem.contains("-----BEGIN CERTIFICATE-----") {
            return Err(StoreError::invalid(
                "cert_pem",
                "is not a PEM certificate (no \"-----BEGIN CERTIFICATE-----\")",
            ));
        }
        let key_ok = self.key_pem.contains("-----BEGIN") && self.key_pem.contains("PRIVATE KEY-----");
        if !key_ok {
            return Err(StoreError::invalid(
                "key_pem",
                "is not a PEM private key (no \"-----BEGIN … PRIVATE KEY-----\")",
            ));
        }
        Ok(())
    }
}

const CERT_COLUMNS: &str = "domain, cert_pem, key_pem, updated_at_ms";

fn certificate_from_row(row: &AnyRow) -> Result<Certificate, StoreError> {
    let c = Cols::keyed(row, "certificate", "domain")?;
    Ok(Certificate {
        domain: c.key().to_string(),
        cert_pem: c.get("cert_pem")?,
        key_pem: c.get("key_pem")?,
        updated_at_ms: c.get("updated_at_ms")?,
    })
}

impl Store {
    /// Every certificate, ordered by domain.
    pub async fn list_certificates(&self) -> Result<Vec<Certificate>, StoreError> {
        let rows = sqlx::query(&format!("SELECT {CERT_COLUMNS} FROM certificates"))
            .fetch_all(self.pool())
            .await
            .ctx(|| "listing certificates".to_string())?;
        let mut out = rows.iter().map(certificate_from_row).collect::<Result<Vec<_>, _>>()?;
        out.sort_by(|a, b| a.domain.cmp(&b.domain));
        Ok(out)
    }

    /// The certificate for exactly `domain`, `None` when there is none.
    pub async fn get_certificate(&self, domain: &str) -> Result<Option<Certificate>, StoreError> {
        let row = sqlx::query(&format!("SELECT {CERT_COLUMNS} FROM certificates WHERE domain = $1"))
            .bind(domain)
            .fetch_optional(self.pool())
            .await
            .ctx(|| format!("reading the certificate for {domain:?}"))?;
        row.as_ref().map(certificate_from_row).transpose()
    }

    /// Creates or replaces the certificate for its domain; returns it as stored.
    pub async fn upsert_certificate(&self, cert: &Certificate) -> Result<Certificate, StoreError> {
        cert.validate()?;
        let row = sqlx::query(&format!(
            "INSERT INTO certificates ({CERT_COLUMNS}) VALUES ($1, $2, $3, $4) \
             ON CONFLICT (domain) DO UPDATE SET cert_pem = excluded.cert_pem, \
             key_pem = excluded.key_pem, updated_at_ms = excluded.updated_at_ms \
             RETURNING {CERT_COLUMNS}"
        ))
        .bind(&cert.domain)
        .bind(&cert.cert_pem)
        .bind(&cert.key_pem)
        .bind(now_ms())
        .returning_one(self.pool())
        .await
        .ctx(|| format!("writing the certificate for {:?}", cert.domain))?;
        certificate_from_row(&row)
    }

    /// Deletes the certificate for `domain`; `false` if there was none.
    pub async fn delete_certificate(&self, domain: &str) -> Result<bool, StoreError> {
        let done = sqlx::query("DELETE FROM certificates WHERE domain = $1")
            .bind(domain)
            .execute(self.pool())
            .await
            .ctx(|| format!("deleting the certificate for {domain:?}"))?;
        Ok(done.rows_affected() > 0)
    }
}
