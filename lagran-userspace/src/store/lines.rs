//! Lines: named client prefix lists that override the geo partition,
//! e.g. a search-engine spider line that is answered the origin address.
//!
//! A line's prefixes are stored in `line_prefixes` and replaced as a whole by
//! [`Store::upsert_line`]. The same prefix may appear in several lines (e.g. for
//! different domains); choosing between them is the engine's business.

use std::collections::{BTreeMap, HashSet};

use ipnet::IpNet;
use sqlx::any::AnyRow;

use super::validate;
use super::{Cols, DbContext, Store, StoreError, now_ms};
use crate::model::{Line, LineAnswer};

impl Line {
    /// Checks the values (not whether the node and domains exist).
    pub fn validate(&self) -> Result<(), StoreError> {
        validate::ident("name", &self.name)?;
        let mut seen = HashSet::new();
        for d in &self.domains {
            validate::dns_name("domains", d)?;
            if !seen.insert(d.as_str()) {
                return Err(StoreError::invalid("domains", format!("{d:?} is listed twice")));
            }
        }
        match (self.answer, &self.node) {
            (LineAnswer::Node, None) => {
                return Err(StoreError::invalid("node", "answer \"node\" needs a node"));
            }
            (LineAnswer::Node, Some(node)) => validate::ident("node", node)?,
            (other, Some(_)) => {
                return Err(StoreError::invalid("node", format!("must be null when answer is {:?}", other.as_str())));
            }
            (_, None) => {}
        }
        let mut seen = HashSet::new();
        for p in &self.prefixes {
            validate::prefix("prefixes", p)?;
            if !seen.insert(*p) {
                return Err(StoreError::invalid("prefixes", format!("{p} is listed twice")));
            }
        }
        Ok(())
    }
}

const LINE_COLUMNS: &str = "name, domains, answer, node, note, created_at_ms, updated_at_ms";

fn line_from_row(row: &AnyRow) -> Result<Line, StoreError> {
    let c = Cols::keyed(row, "line", "name")?;
    let answer: String = c.get("answer")?;
    let answer = LineAnswer::parse(&answer).ok_or_else(|| c.corrupt("answer", format!("unknown answer {answer:?}")))?;
    let domains: String = c.get("domains")?;
    let domains: Vec<String> = serde_json::from_str(&domains)
        .map_err(|e| c.corrupt("domains", format!("{domains:?} is not a JSON list: {e}")))?;
    Ok(Line {
        name: c.key().to_string(),
        domains,
        answer,
        node: c.get("node")?,
        prefixes: Vec::new(),
        note: c.get("note")?,
        created_at_ms: c.get("created_at_ms")?,
        updated_at_ms: c.get("updated_at_ms")?,
    })
}

/// `(line, prefix)` of one `line_prefixes` row.
fn prefix_from_row(row: &AnyRow) -> Result<(String, IpNet), StoreError> {
    let c = Cols::keyed(row, "line", "line")?;
    Ok((c.key().to_string(), c.parse("prefix")?))
}

/// Prefixes in address order: IPv4 first, then by address, then shorter first.
fn sort_prefixes(prefixes: &mut [IpNet]) {
    prefixes.sort_by_key(|p| (p.addr(), p.prefix_len()));
}

impl Store {
    /// Every line with its prefixes, ordered by name.
    pub async fn list_lines(&self) -> Result<Vec<Line>, StoreError> {
        let mut tx = self.begin_read().await?;
        let line_rows = sqlx::query(&format!("SELECT {LINE_COLUMNS} FROM lines"))
            .fetch_all(&mut *tx)
            .await
            .ctx(|| "listing lines".to_string())?;
        let prefix_rows = sqlx::query("SELECT line, prefix FROM line_prefixes")
            .fetch_all(&mut *tx)
            .await
            .ctx(|| "listing line prefixes".to_string())?;
        tx.commit().await.ctx(|| "listing lines".to_string())?;
        let mut lines = BTreeMap::new();
        for row in &line_rows {
            let line = line_from_row(row)?;
            lines.insert(line.name.clone(), line);
        }
        for row in &prefix_rows {
            let (line, prefix) = prefix_from_row(row)?;
            if let Some(l) = lines.get_mut(&line) {
                l.prefixes.push(prefix);
            }
        }
        let mut lines: Vec<Line> = lines.into_values().collect();
        for l in &mut lines {
            sort_prefixes(&mut l.prefixes);
        }
        Ok(lines)
    }

    /// One line with its prefixes, `None` when it does not exist.
    pub async fn get_line(&self, name: &str) -> Result<Option<Line>, StoreError> {
        let mut tx = self.begin_read().await?;
        let row = sqlx::query(&format!("SELECT {LINE_COLUMNS} FROM lines WHERE name = $1"))
            .bind(name)
            .fetch_optional(&mut *tx)
            .await
            .ctx(|| format!("reading line {name:?}"))?;
        let Some(row) = row else {
            return Ok(None);
        };
        let prefix_rows = sqlx::query("SELECT line, prefix FROM line_prefixes WHERE line = $1")
            .bind(name)
            .fetch_all(&mut *tx)
            .await
            .ctx(|| format!("reading the prefixes of line {name:?}"))?;
        tx.commit().await.ctx(|| format!("reading line {name:?}"))?;
        let mut line = line_from_row(&row)?;
        line.prefixes = prefix_rows.iter().map(|r| prefix_from_row(r).map(|(_, p)| p)).collect::<Result<_, _>>()?;
        sort_prefixes(&mut line.prefixes);
        Ok(Some(line))
    }

    /// Creates or replaces a line and its whole prefix list in one transaction;
    /// returns it as stored. [`StoreError::Invalid`] `{field: "node" | "domains"}`
    /// when the node or a domain does not exist (nothing is written).
    pub async fn upsert_line(&self, line: &Line) -> Result<Line, StoreError> {
        line.validate()?;
        let name = &line.name;
        let domains =
            serde_json::to_string(&line.domains).map_err(|e| StoreError::invalid("domains", e.to_string()))?;
        let now = now_ms();
        let mut tx = self.begin().await?;
        if let Some(node) = &line.node {
            let found = sqlx::query("SELECT name FROM nodes WHERE name = $1")
                .bind(node)
                .fetch_optional(&mut *tx)
                .await
                .ctx(|| format!("looking up node {node:?} of line {name:?}"))?;
            if found.is_none() {
                return Err(StoreError::invalid("node", format!("node {node:?} does not exist")));
            }
        }
        for d in &line.domains {
            let found = sqlx::query("SELECT name FROM domains WHERE name = $1")
                .bind(d)
                .fetch_optional(&mut *tx)
                .await
                .ctx(|| format!("looking up domain {d:?} of line {name:?}"))?;
            if found.is_none() {
                return Err(StoreError::invalid("domains", format!("domain {d:?} does not exist")));
            }
        }
        let row = sqlx::query(&format!(
            "INSERT INTO lines ({LINE_COLUMNS}) VALUES ($1, $2, $3, $4, $5, $6, $6) \
             ON CONFLICT (name) DO UPDATE SET domains = excluded.domains, \
             answer = excluded.answer, node = excluded.node, note = excluded.note, \
             updated_at_ms = excluded.updated_at_ms \
             RETURNING {LINE_COLUMNS}"
        ))
        .bind(name)
        .bind(domains)
        .bind(line.answer.as_str())
        .bind(line.node.as_deref())
        .bind(&line.note)
        .bind(now)
        .fetch_one(&mut *tx)
        .await
        .ctx(|| format!("writing line {name:?}"))?;
        let mut stored = line_from_row(&row)?;
        sqlx::query("DELETE FROM line_prefixes WHERE line = $1")
            .bind(name)
            .execute(&mut *tx)
            .await
            .ctx(|| format!("replacing the prefixes of line {name:?}"))?;
        for p in &line.prefixes {
            sqlx::query("INSERT INTO line_prefixes (line, prefix) VALUES ($1, $2)")
                .bind(name)
                .bind(p.to_string())
                .execute(&mut *tx)
                .await
                .ctx(|| format!("writing prefix {p} of line {name:?}"))?;
        }
        tx.commit().await.ctx(|| format!("writing line {name:?}"))?;
        stored.prefixes = line.prefixes.clone();
        sort_prefixes(&mut stored.prefixes);
        Ok(stored)
    }

    /// Deletes a line and its prefixes; `false` if it did not exist.
    pub async fn delete_line(&self, name: &str) -> Result<bool, StoreError> {
        let mut tx = self.begin().await?;
        sqlx::query("DELETE FROM line_prefixes WHERE line = $1")
            .bind(name)
            .execute(&mut *tx)
            .await
            .ctx(|| format!("deleting the prefixes of line {name:?}"))?;
        let done = sqlx::query("DELETE FROM lines WHERE name = $1")
            .bind(name)
            .execute(&mut *tx)
            .await
            .ctx(|| format!("deleting line {name:?}"))?;
        tx.commit().await.ctx(|| format!("deleting line {name:?}"))?;
        Ok(done.rows_affected() > 0)
    }
}
