//! What the ACME client keeps between runs and shares with every control
//! process: the account of each ACME directory (its private key and URL, as
//! the client serializes them) and the HTTP-01 challenges pending while an
//! order is being validated, which any control process answers to the edges,
//! and the renewals an operator asked for, which the leader orders next.
//! The certificates it obtains are ordinary rows of `certificates`.

use super::{DbContext, Store, StoreError, now_ms};

/// One pending HTTP-01 challenge: what `GET /.well-known/acme-challenge/{token}` answers.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Challenge {
    pub token: String,
    pub key_authorization: String,
    /// The name being validated (for logs and cleanup).
    pub domain: String,
}

impl Store {
    /// The account credentials (JSON) kept for `directory_url`, if any.
    pub async fn acme_account(&self, directory_url: &str) -> Result<Option<String>, StoreError> {
        sqlx::query_scalar("SELECT credentials FROM acme_accounts WHERE directory_url = $1")
            .bind(directory_url)
            .fetch_optional(self.pool())
            .await
            .ctx(|| format!("reading the ACME account of {directory_url}"))
    }

    /// Keeps the account credentials (JSON) for `directory_url`, replacing any.
    pub async fn put_acme_account(&self, directory_url: &str, credentials: &str) -> Result<(), StoreError> {
        sqlx::query(
            "INSERT INTO acme_accounts (directory_url, credentials, created_at_ms) VALUES ($1, $2, $3) \
             ON CONFLICT (directory_url) DO UPDATE SET credentials = excluded.credentials",
        )
        .bind(directory_url)
        .bind(credentials)
        .bind(now_ms())
        .execute(self.pool())
        .await
        .ctx(|| format!("writing the ACME account of {directory_url}"))?;
        Ok(())
    }

    /// Publishes a challenge answer (replacing one with the same token).
    pub async fn put_acme_challenge(&self, c: &Challenge) -> Result<(), StoreError> {
        sqlx::query(
            "INSERT INTO acme_challenges (token, key_authorization, domain, created_at_ms) VALUES ($1, $2, $3, $4) \
             ON CONFLICT (token) DO UPDATE SET key_authorization = excluded.key_authorization, \
             domain = excluded.domain, created_at_ms = excluded.created_at_ms",
        )
        .bind(&c.token)
        .bind(&c.key_authorization)
        .bind(&c.domain)
        .bind(now_ms())
        .execute(self.pool())
        .await
        .ctx(|| format!("writing the ACME challenge for {}", c.domain))?;
        Ok(())
    }

    /// The key authorization for `token`, if that challenge is pending.
    pub async fn acme_challenge(&self, token: &str) -> Result<Option<String>, StoreError> {
        sqlx::query_scalar("SELECT key_authorization FROM acme_challenges WHERE token = $1")
            .bind(token)
            .fetch_optional(self.pool())
            .await
            .ctx(|| "reading an ACME challenge".to_string())
    }

    /// Withdraws the challenge for `token` (its order is done, one way or the other).
    pub async fn delete_acme_challenge(&self, token: &str) -> Result<(), StoreError> {
        sqlx::query("DELETE FROM acme_challenges WHERE token = $1")
            .bind(token)
            .execute(self.pool())
            .await
            .ctx(|| "deleting an ACME challenge".to_string())?;
        Ok(())
    }

    /// Withdraws every challenge older than `before_ms` (left by a process that stopped mid-order).
    pub async fn delete_acme_challenges_before(&self, before_ms: i64) -> Result<u64, StoreError> {
        let done = sqlx::query("DELETE FROM acme_challenges WHERE created_at_ms < $1")
            .bind(before_ms)
            .execute(self.pool())
            .await
            .ctx(|| "deleting old ACME challenges".to_string())?;
        Ok(done.rows_affected())
    }

    /// Asks for `domain`'s certificate to be renewed at the leader's next look
    /// (a second request before then replaces the first); returns when it was asked.
    pub async fn request_acme_renewal(&self, domain: &str) -> Result<i64, StoreError> {
        let at = now_ms();
        sqlx::query(
            "INSERT INTO acme_renewals (domain, requested_at_ms) VALUES ($1, $2) \
             ON CONFLICT (domain) DO UPDATE SET requested_at_ms = excluded.requested_at_ms",
        )
        .bind(domain)
        .bind(at)
        .execute(self.pool())
        .await
        .ctx(|| format!("asking for the renewal of {domain}'s certificate"))?;
        Ok(at)
    }

    /// The renewals asked for and not done yet: domain and when it was asked.
    pub async fn acme_renewals(&self) -> Result<Vec<(String, i64)>, StoreError> {
        let rows: Vec<(String, i64)> =
            sqlx::query_as("SELECT domain, requested_at_ms FROM acme_renewals ORDER BY requested_at_ms, domain")
                .fetch_all(self.pool())
                .await
                .ctx(|| "reading the ACME renewals asked for".to_string())?;
        Ok(rows)
    }

    /// Marks the renewal of `domain` asked at `requested_at_ms` done; a request
    /// made since stays.
    pub async fn clear_acme_renewal(&self, domain: &str, requested_at_ms: i64) -> Result<(), StoreError> {
        sqlx::query("DELETE FROM acme_renewals WHERE domain = $1 AND requested_at_ms <= $2")
            .bind(domain)
            .bind(requested_at_ms)
            .execute(self.pool())
            .await
            .ctx(|| format!("marking the renewal of {domain}'s certificate done"))?;
        Ok(())
    }
}
