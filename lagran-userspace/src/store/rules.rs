//! Scheduling rules: manual pins and canary splits.
//!
//! Priority between kinds is manual > canary > automatic; among rules of one
//! kind, higher `priority` first, then lower `id`. Every filter that is `null`
//! matches everything. A rule goes with its domain; its node cannot be deleted
//! while the rule exists. Expired rules stay stored until purged; the engine
//! ignores them.

use ipnet::IpNet;
use serde::{Deserialize, Serialize};
use sqlx::Row;
use sqlx::any::AnyRow;

use super::validate;
use super::{Cols, DbContext, Store, StoreError, now_ms};
use crate::model::{Rule, RuleKind};

/// A rule as submitted (`POST /api/v1/rules`); the store assigns `id` and
/// `created_at_ms`.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct NewRule {
    pub kind: RuleKind,
    #[serde(default)]
    pub domain: Option<String>,
    #[serde(default)]
    pub country: Option<String>,
    #[serde(default)]
    pub province: Option<String>,
    #[serde(default)]
    pub city: Option<String>,
    #[serde(default)]
    pub isp: Option<String>,
    #[serde(default)]
    pub prefix: Option<IpNet>,
    pub node: String,
    /// Required for canary rules (1–100); manual rules take 100 or nothing.
    #[serde(default)]
    pub percent: Option<u8>,
    #[serde(default)]
    pub priority: i64,
    #[serde(default)]
    pub expires_at_ms: Option<i64>,
    #[serde(default)]
    pub note: String,
}

impl NewRule {
    /// A manual pin of everything matching the (so far empty) filters to `node`.
    pub fn manual(node: impl Into<String>) -> Self {
        NewRule {
            kind: RuleKind::Manual,
            domain: None,
            country: None,
            province: None,
            city: None,
            isp: None,
            prefix: None,
            node: node.into(),
            percent: None,
            priority: 0,
            expires_at_ms: None,
            note: String::new(),
        }
    }

    /// A canary sending `percent` % of the matching subnets to `node`.
    pub fn canary(node: impl Into<String>, percent: u8) -> Self {
        NewRule { kind: RuleKind::Canary, percent: Some(percent), ..NewRule::manual(node) }
    }

    /// Checks the values (not the references) and returns the effective percent.
    pub fn validate(&self, now_ms: i64) -> Result<u8, StoreError> {
        if let Some(domain) = &self.domain {
            validate::dns_name("domain", domain)?;
        }
        validate::non_empty_opt("country", self.country.as_deref())?;
        validate::non_empty_opt("province", self.province.as_deref())?;
        validate::non_empty_opt("city", self.city.as_deref())?;
        validate::non_empty_opt("isp", self.isp.as_deref())?;
        if let Some(prefix) = &self.prefix {
            validate::prefix("prefix", prefix)?;
        }
        validate::ident("node", &self.node)?;
        if let Some(t) = self.expires_at_ms
            && t <= now_ms
        {
            return Err(StoreError::invalid("expires_at_ms", format!("{t} is not in the future (now is {now_ms})")));
        }
        match (self.kind, self.percent) {
            (RuleKind::Manual, None | Some(100)) => Ok(100),
            (RuleKind::Manual, Some(p)) => Err(StoreError::invalid(
                "percent",
                format!("a manual rule pins 100 %, not {p} %; use a canary rule for a split"),
            )),
            (RuleKind::Canary, Some(p @ 1..=100)) => Ok(p),
            (RuleKind::Canary, Some(p)) => Err(StoreError::invalid("percent", format!("{p} is outside 1..=100"))),
            (RuleKind::Canary, None) => {
                Err(StoreError::invalid("percent", "a canary rule needs a percentage (1..=100)"))
            }
        }
    }
}

const RULE_COLUMNS: &str = "id, kind, domain, country, province, city, isp, prefix, node, \
     percent, priority, expires_at_ms, note, created_at_ms";

fn rule_from_row(row: &AnyRow) -> Result<Rule, StoreError> {
    let id: i64 = row.try_get("id").ctx(|| "reading a rule id".to_string())?;
    let c = Cols::with_key(row, "rule", id.to_string());
    let kind: String = c.get("kind")?;
    let kind = RuleKind::parse(&kind).ok_or_else(|| c.corrupt("kind", format!("unknown kind {kind:?}")))?;
    Ok(Rule {
        id,
        kind,
        domain: c.get("domain")?,
        country: c.get("country")?,
        province: c.get("province")?,
        city: c.get("city")?,
        isp: c.get("isp")?,
        prefix: c.parse_opt("prefix")?,
        node: c.get("node")?,
        percent: c.int("percent")?,
        priority: c.get("priority")?,
        expires_at_ms: c.get("expires_at_ms")?,
        note: c.get("note")?,
        created_at_ms: c.get("created_at_ms")?,
    })
}

impl Store {
    /// Every rule, expired ones included, in evaluation order: manual before
    /// canary, then higher priority first, then older (lower id) first.
    pub async fn list_rules(&self) -> Result<Vec<Rule>, StoreError> {
        let rows = sqlx::query(&format!("SELECT {RULE_COLUMNS} FROM rules"))
            .fetch_all(self.pool())
            .await
            .ctx(|| "listing rules".to_string())?;
        let mut rules = rows.iter().map(rule_from_row).collect::<Result<Vec<_>, _>>()?;
        rules.sort_by(|a, b| {
            let rank = |r: &Rule| (r.kind != RuleKind::Manual, -r.priority, r.id);
            rank(a).cmp(&rank(b))
        });
        Ok(rules)
    }

    /// One rule, `None` when it does not exist.
    pub async fn get_rule(&self, id: i64) -> Result<Option<Rule>, StoreError> {
        let row = sqlx::query(&format!("SELECT {RULE_COLUMNS} FROM rules WHERE id = $1"))
            .bind(id)
            .fetch_optional(self.pool())
            .await
            .ctx(|| format!("reading rule {id}"))?;
        row.as_ref().map(rule_from_row).transpose()
    }

    /// Stores a new rule and returns it with its id. [`StoreError::Invalid`]
    /// `{field: "node" | "domain"}` when the node or domain does not exist.
    pub async fn create_rule(&self, rule: &NewRule) -> Result<Rule, StoreError> {
        let now = now_ms();
        let percent = rule.validate(now)?;
        let mut tx = self.begin().await?;
        let node = sqlx::query("SELECT name FROM nodes WHERE name = $1")
            .bind(&rule.node)
            .fetch_optional(&mut *tx)
            .await
            .ctx(|| format!("looking up node {:?} of a new rule", rule.node))?;
        if node.is_none() {
            return Err(StoreError::invalid("node", format!("node {:?} does not exist", rule.node)));
        }
        if let Some(domain) = &rule.domain {
            let found = sqlx::query("SELECT name FROM domains WHERE name = $1")
                .bind(domain)
                .fetch_optional(&mut *tx)
                .await
                .ctx(|| format!("looking up domain {domain:?} of a new rule"))?;
            if found.is_none() {
                return Err(StoreError::invalid("domain", format!("domain {domain:?} does not exist")));
            }
        }
        let row = sqlx::query(&format!(
            "INSERT INTO rules (kind, domain, country, province, city, isp, prefix, node, \
             percent, priority, expires_at_ms, note, created_at_ms) \
             VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12, $13) \
             RETURNING {RULE_COLUMNS}"
        ))
        .bind(rule.kind.as_str())
        .bind(rule.domain.as_deref())
        .bind(rule.country.as_deref())
        .bind(rule.province.as_deref())
        .bind(rule.city.as_deref())
        .bind(rule.isp.as_deref())
        .bind(rule.prefix.map(|p| p.to_string()))
        .bind(&rule.node)
        .bind(i64::from(percent))
        .bind(rule.priority)
        .bind(rule.expires_at_ms)
        .bind(&rule.note)
        .bind(now)
        .fetch_one(&mut *tx)
        .await
        .ctx(|| format!("creating a {} rule for node {:?}", rule.kind.as_str(), rule.node))?;
        let stored = rule_from_row(&row)?;
        tx.commit().await.ctx(|| format!("creating rule {}", stored.id))?;
        Ok(stored)
    }

    /// Deletes a rule; `false` if it did not exist.
    pub async fn delete_rule(&self, id: i64) -> Result<bool, StoreError> {
        let done = sqlx::query("DELETE FROM rules WHERE id = $1")
            .bind(id)
            .execute(self.pool())
            .await
            .ctx(|| format!("deleting rule {id}"))?;
        Ok(done.rows_affected() > 0)
    }

    /// Deletes every rule that expired at or before `now_ms`; returns how many.
    pub async fn purge_expired_rules(&self, now_ms: i64) -> Result<u64, StoreError> {
        let done = sqlx::query("DELETE FROM rules WHERE expires_at_ms IS NOT NULL AND expires_at_ms <= $1")
            .bind(now_ms)
            .execute(self.pool())
            .await
            .ctx(|| "purging expired rules".to_string())?;
        Ok(done.rows_affected())
    }
}
