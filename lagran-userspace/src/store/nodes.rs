//! Edge nodes: CRUD, partial updates, agent tokens and heartbeats.
//!
//! A node's own agent token is never stored: only the lowercase hex SHA-256 of
//! it ([`hash_token`]), compared in constant time by [`verify_token`], or in
//! the database where a statement looks a node up by it (heartbeats, agents
//! finding their node): a comparison of hashes times nothing about the token.

use std::net::{Ipv4Addr, Ipv6Addr};

use serde::Deserialize;
use sha2::{Digest, Sha256};
use sqlx::any::{AnyArguments, AnyRow};
use sqlx::error::ErrorKind;
use sqlx::query::Query;
use sqlx::{Any, Row};
use subtle::ConstantTimeEq;

use super::validate::{self, double_option};
use super::{Cols, DbContext, Store, StoreError, names, now_ms};
use crate::model::{Node, NodeStatus};

/// Every column of `nodes` that makes up a [`Node`], in `SELECT` order.
const NODE_COLUMNS: &str = "name, status, public_ip, public_ipv6, hostname, country, province, city, isp, \
     weight, cpu_usage, memory_usage, bandwidth_mbps, max_bandwidth_mbps, conns, max_conns, \
     agent_url, probe_port, pool, lat, lon, last_heartbeat_ms, created_at_ms, updated_at_ms";

/// Longest accepted agent token, in bytes.
const MAX_TOKEN_LEN: usize = 4096;

/// Lowercase hex SHA-256 of an agent token: what `nodes.auth_token_hash` holds.
pub fn hash_token(token: &str) -> String {
    hex::encode(Sha256::digest(token.as_bytes()))
}

/// Whether `presented` is the token whose hash is `stored_hash`, compared in
/// constant time (the hashes are, so the token's length does not leak either).
pub fn verify_token(stored_hash: &str, presented: &str) -> bool {
    let presented = hash_token(presented);
    stored_hash.len() == presented.len() && bool::from(stored_hash.as_bytes().ct_eq(presented.as_bytes()))
}

fn validate_token(token: &str) -> Result<(), StoreError> {
    if token.is_empty() {
        return Err(StoreError::invalid("auth_token", "must not be empty"));
    }
    if token.len() > MAX_TOKEN_LEN {
        return Err(StoreError::invalid("auth_token", format!("is longer than {MAX_TOKEN_LEN} bytes")));
    }
    if token.chars().any(|c| c.is_whitespace() || c.is_control()) {
        return Err(StoreError::invalid(
            "auth_token",
            "must not contain whitespace or control characters (it travels in an HTTP header)",
        ));
    }
    Ok(())
}

fn validate_agent_url(url: &str) -> Result<(), StoreError> {
    if url.is_empty() || url.starts_with("http://") || url.starts_with("https://") {
        Ok(())
    } else {
        Err(StoreError::invalid("agent_url", format!("{url:?} must be empty or start with http:// or https://")))
    }
}

fn validate_probe_port(port: Option<u16>) -> Result<(), StoreError> {
    if port == Some(0) {
        return Err(StoreError::invalid("probe_port", "must be 1..=65535 or null"));
    }
    Ok(())
}

fn validate_lat(lat: Option<f64>) -> Result<(), StoreError> {
    lat.map_or(Ok(()), |v| validate::range_f64("lat", v, -90.0, 90.0))
}

fn validate_lon(lon: Option<f64>) -> Result<(), StoreError> {
    lon.map_or(Ok(()), |v| validate::range_f64("lon", v, -180.0, 180.0))
}

/// Checks every field of a node as submitted for creation. Timestamps are set
/// by the store and not checked; `weight` may be any value (the engine clamps).
pub fn validate_node(node: &Node) -> Result<(), StoreError> {
    validate::ident("name", &node.name)?;
    validate::ident("pool", &node.pool)?;
    validate::range_f64("cpu_usage", node.cpu_usage, 0.0, 100.0)?;
    validate::range_f64("memory_usage", node.memory_usage, 0.0, 100.0)?;
    validate::non_negative_f64("bandwidth_mbps", node.bandwidth_mbps)?;
    validate::non_negative_f64("max_bandwidth_mbps", node.max_bandwidth_mbps)?;
    validate::non_negative_i64("conns", node.conns)?;
    validate::non_negative_i64("max_conns", node.max_conns)?;
    validate_agent_url(&node.agent_url)?;
    validate_probe_port(node.probe_port)?;
    validate_lat(node.lat)?;
    validate_lon(node.lon)?;
    if let Some(h) = &node.hostname {
        validate::dns_name("hostname", h)?;
    }
    Ok(())
}

/// A partial update of a node: absent fields are left alone; for nullable
/// fields `null` clears the value (`Some(None)`).
///
/// The name, the timestamps and the heartbeat fields are not patchable; unknown
/// JSON fields are refused. `auth_token` replaces the node's own agent token.
#[derive(Clone, Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct NodePatch {
    pub status: Option<NodeStatus>,
    #[serde(default, deserialize_with = "double_option")]
    pub public_ip: Option<Option<Ipv4Addr>>,
    #[serde(default, deserialize_with = "double_option")]
    pub public_ipv6: Option<Option<Ipv6Addr>>,
    #[serde(default, deserialize_with = "double_option")]
    pub hostname: Option<Option<String>>,
    pub country: Option<String>,
    pub province: Option<String>,
    pub city: Option<String>,
    pub isp: Option<String>,
    pub weight: Option<i64>,
    pub cpu_usage: Option<f64>,
    pub memory_usage: Option<f64>,
    pub bandwidth_mbps: Option<f64>,
    pub max_bandwidth_mbps: Option<f64>,
    pub conns: Option<i64>,
    pub max_conns: Option<i64>,
    pub agent_url: Option<String>,
    #[serde(default, deserialize_with = "double_option")]
    pub probe_port: Option<Option<u16>>,
    pub pool: Option<String>,
    #[serde(default, deserialize_with = "double_option")]
    pub lat: Option<Option<f64>>,
    #[serde(default, deserialize_with = "double_option")]
    pub lon: Option<Option<f64>>,
    /// A new agent token for this node (stored hashed).
    pub auth_token: Option<String>,
}

impl NodePatch {
    /// Checks the fields that are present, with the same rules as [`validate_node`].
    pub fn validate(&self) -> Result<(), StoreError> {
        if let Some(pool) = &self.pool {
            validate::ident("pool", pool)?;
        }
        if let Some(v) = self.cpu_usage {
            validate::range_f64("cpu_usage", v, 0.0, 100.0)?;
        }
        if let Some(v) = self.memory_usage {
            validate::range_f64("memory_usage", v, 0.0, 100.0)?;
        }
        if let Some(v) = self.bandwidth_mbps {
            validate::non_negative_f64("bandwidth_mbps", v)?;
        }
        if let Some(v) = self.max_bandwidth_mbps {
            validate::non_negative_f64("max_bandwidth_mbps", v)?;
        }
        if let Some(v) = self.conns {
            validate::non_negative_i64("conns", v)?;
        }
        if let Some(v) = self.max_conns {
            validate::non_negative_i64("max_conns", v)?;
        }
        if let Some(url) = &self.agent_url {
            validate_agent_url(url)?;
        }
        if let Some(port) = self.probe_port {
            validate_probe_port(port)?;
        }
        if let Some(lat) = self.lat {
            validate_lat(lat)?;
        }
        if let Some(lon) = self.lon {
            validate_lon(lon)?;
        }
        if let Some(token) = &self.auth_token {
            validate_token(token)?;
        }
        if let Some(Some(h)) = &self.hostname {
            validate::dns_name("hostname", h)?;
        }
        Ok(())
    }

    /// Whether the patch changes nothing.
    pub fn is_empty(&self) -> bool {
        self.assignments().is_empty()
    }

    /// `(column, value)` for every present field.
    fn assignments(&self) -> Vec<(&'static str, Val)> {
        let mut out = Vec::new();
        let text = |v: &Option<String>| v.clone().map(|s| Val::Text(Some(s)));
        let mut push = |col: &'static str, v: Option<Val>| {
            if let Some(v) = v {
                out.push((col, v));
            }
        };
        push("status", self.status.map(|s| Val::Text(Some(s.as_str().into()))));
        push("public_ip", self.public_ip.map(|v| Val::Text(v.map(|a| a.to_string()))));
        push("public_ipv6", self.public_ipv6.map(|v| Val::Text(v.map(|a| a.to_string()))));
        push("hostname", self.hostname.clone().map(Val::Text));
        push("country", text(&self.country));
        push("province", text(&self.province));
        push("city", text(&self.city));
        push("isp", text(&self.isp));
        push("weight", self.weight.map(|v| Val::Int(Some(v))));
        push("cpu_usage", self.cpu_usage.map(|v| Val::Real(Some(v))));
        push("memory_usage", self.memory_usage.map(|v| Val::Real(Some(v))));
        push("bandwidth_mbps", self.bandwidth_mbps.map(|v| Val::Real(Some(v))));
        push("max_bandwidth_mbps", self.max_bandwidth_mbps.map(|v| Val::Real(Some(v))));
        push("conns", self.conns.map(|v| Val::Int(Some(v))));
        push("max_conns", self.max_conns.map(|v| Val::Int(Some(v))));
        push("agent_url", text(&self.agent_url));
        push("probe_port", self.probe_port.map(|v| Val::Int(v.map(i64::from))));
        push("pool", text(&self.pool));
        push("lat", self.lat.map(Val::Real));
        push("lon", self.lon.map(Val::Real));
        push("auth_token_hash", self.auth_token.as_deref().map(|t| Val::Text(Some(hash_token(t)))));
        out
    }
}

/// What a node's agent reports (CPU, memory, bandwidth, connections),
/// `POST /api/v1/nodes/{name}/heartbeat`.
#[derive(Clone, Debug, Deserialize)]
pub struct Heartbeat {
    /// Percent, 0–100.
    pub cpu_usage: f64,
    /// Percent, 0–100.
    pub memory_usage: f64,
    #[serde(default)]
    pub bandwidth_mbps: f64,
    #[serde(default)]
    pub conns: i64,
}

impl Heartbeat {
    pub fn validate(&self) -> Result<(), StoreError> {
        validate::range_f64("cpu_usage", self.cpu_usage, 0.0, 100.0)?;
        validate::range_f64("memory_usage", self.memory_usage, 0.0, 100.0)?;
        validate::non_negative_f64("bandwidth_mbps", self.bandwidth_mbps)?;
        validate::non_negative_i64("conns", self.conns)?;
        Ok(())
    }

    /// Sets the columns the heartbeat writes on `node`, in memory.
    pub fn lay_over(&self, node: &mut Node, now_ms: i64) {
        node.cpu_usage = self.cpu_usage;
        node.memory_usage = self.memory_usage;
        node.bandwidth_mbps = self.bandwidth_mbps;
        node.conns = self.conns;
        node.last_heartbeat_ms = Some(now_ms);
    }
}

/// A value for a dynamically built `UPDATE`.
enum Val {
    Text(Option<String>),
    Int(Option<i64>),
    Real(Option<f64>),
}

fn bind_val<'q>(q: Query<'q, Any, AnyArguments<'q>>, v: Val) -> Query<'q, Any, AnyArguments<'q>> {
    match v {
        Val::Text(v) => q.bind(v),
        Val::Int(v) => q.bind(v),
        Val::Real(v) => q.bind(v),
    }
}

pub(super) fn node_from_row(row: &AnyRow) -> Result<Node, StoreError> {
    let c = Cols::keyed(row, "node", "name")?;
    let status: String = c.get("status")?;
    let status = NodeStatus::parse(&status).ok_or_else(|| c.corrupt("status", format!("unknown status {status:?}")))?;
    Ok(Node {
        name: c.key().to_string(),
        status,
        public_ip: c.parse_opt("public_ip")?,
        public_ipv6: c.parse_opt("public_ipv6")?,
        hostname: c.get("hostname")?,
        country: c.get("country")?,
        province: c.get("province")?,
        city: c.get("city")?,
        isp: c.get("isp")?,
        weight: c.get("weight")?,
        cpu_usage: c.get("cpu_usage")?,
        memory_usage: c.get("memory_usage")?,
        bandwidth_mbps: c.get("bandwidth_mbps")?,
        max_bandwidth_mbps: c.get("max_bandwidth_mbps")?,
        conns: c.get("conns")?,
        max_conns: c.get("max_conns")?,
        agent_url: c.get("agent_url")?,
        probe_port: c.int_opt("probe_port")?,
        pool: c.get("pool")?,
        lat: c.get("lat")?,
        lon: c.get("lon")?,
        last_heartbeat_ms: c.get("last_heartbeat_ms")?,
        created_at_ms: c.get("created_at_ms")?,
        updated_at_ms: c.get("updated_at_ms")?,
    })
}

/// Whether a write failed on the unique index of node hostnames (another
/// node holds the name): the index decides, so two concurrent writes of one
/// hostname cannot both succeed.
fn hostname_taken(e: &StoreError) -> bool {
    e.db_kind() == Some(ErrorKind::UniqueViolation) && e.to_string().contains("nodes_hostname_normal")
}

impl Store {
    /// Every node, ordered by name.
    pub async fn list_nodes(&self) -> Result<Vec<Node>, StoreError> {
        let rows = sqlx::query(&format!("SELECT {NODE_COLUMNS} FROM nodes"))
            .fetch_all(self.pool())
            .await
            .ctx(|| "listing nodes".to_string())?;
        let mut nodes = rows.iter().map(node_from_row).collect::<Result<Vec<_>, _>>()?;
        nodes.sort_by(|a, b| a.name.cmp(&b.name));
        Ok(nodes)
    }

    /// One node, `None` when it does not exist.
    pub async fn get_node(&self, name: &str) -> Result<Option<Node>, StoreError> {
        let row = sqlx::query(&format!("SELECT {NODE_COLUMNS} FROM nodes WHERE name = $1"))
            .bind(name)
            .fetch_optional(self.pool())
            .await
            .ctx(|| format!("reading node {name:?}"))?;
        row.as_ref().map(node_from_row).transpose()
    }

    /// Creates a node ([`StoreError::Conflict`] if the name is taken), with an
    /// optional agent token of its own (stored hashed). `created_at_ms` and
    /// `updated_at_ms` are set to now; the stored node is returned.
    pub async fn create_node(&self, node: &Node, auth_token: Option<&str>) -> Result<Node, StoreError> {
        validate_node(node)?;
        if let Some(token) = auth_token {
            validate_token(token)?;
        }
        let now = now_ms();
        let mut tx = self.begin().await?;
        if let Some(h) = &node.hostname {
            names::lock_names(&mut tx, self.backend()).await?;
            names::name_owners(&mut tx).await?.check_hostname(&node.name, h)?;
        }
        let row = sqlx::query(&format!(
            "INSERT INTO nodes ({NODE_COLUMNS}, auth_token_hash) VALUES \
             ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12, $13, $14, $15, $16, \
              $17, $18, $19, $20, $21, $22, $23, $24, $25) RETURNING {NODE_COLUMNS}"
        ))
        .bind(&node.name)
        .bind(node.status.as_str())
        .bind(node.public_ip.map(|a| a.to_string()))
        .bind(node.public_ipv6.map(|a| a.to_string()))
        .bind(&node.hostname)
        .bind(&node.country)
        .bind(&node.province)
        .bind(&node.city)
        .bind(&node.isp)
        .bind(node.weight)
        .bind(node.cpu_usage)
        .bind(node.memory_usage)
        .bind(node.bandwidth_mbps)
        .bind(node.max_bandwidth_mbps)
        .bind(node.conns)
        .bind(node.max_conns)
        .bind(&node.agent_url)
        .bind(node.probe_port.map(i64::from))
        .bind(&node.pool)
        .bind(node.lat)
        .bind(node.lon)
        .bind(node.last_heartbeat_ms)
        .bind(now)
        .bind(now)
        .bind(auth_token.map(hash_token))
        .fetch_one(&mut *tx)
        .await
        .ctx(|| format!("creating node {:?}", node.name));
        match row {
            Ok(row) => {
                let node = node_from_row(&row)?;
                tx.commit().await.ctx(|| format!("creating node {:?}", node.name))?;
                Ok(node)
            }
            Err(e) if hostname_taken(&e) => {
                Err(StoreError::conflict("node hostname", node.hostname.as_deref().unwrap_or_default()))
            }
            Err(e) if e.db_kind() == Some(ErrorKind::UniqueViolation) => Err(StoreError::conflict("node", &node.name)),
            Err(e) => Err(e),
        }
    }

    /// Applies the present fields of `patch` in one statement and returns the
    /// node as stored. A new hostname is checked against every other owner
    /// of a name in the same transaction ([`names`]). [`StoreError::NotFound`] if there is no such node.
    pub async fn update_node(&self, name: &str, patch: &NodePatch) -> Result<Node, StoreError> {
        patch.validate()?;
        let assignments = patch.assignments();
        let mut sql = String::from("UPDATE nodes SET ");
        for (i, (col, _)) in assignments.iter().enumerate() {
            sql.push_str(&format!("{col} = ${}, ", i + 1));
        }
        let n = assignments.len();
        sql.push_str(&format!("updated_at_ms = ${} WHERE name = ${} RETURNING {NODE_COLUMNS}", n + 1, n + 2));
        let mut query = sqlx::query(&sql);
        for (_, v) in assignments {
            query = bind_val(query, v);
        }
        let mut tx = self.begin().await?;
        if let Some(Some(h)) = &patch.hostname {
            names::lock_names(&mut tx, self.backend()).await?;
            names::name_owners(&mut tx).await?.check_hostname(name, h)?;
        }
        let row =
            query.bind(now_ms()).bind(name).fetch_optional(&mut *tx).await.ctx(|| format!("updating node {name:?}"));
        let row = match row {
            Err(e) if hostname_taken(&e) => {
                let hostname = patch.hostname.clone().flatten().unwrap_or_default();
                return Err(StoreError::conflict("node hostname", hostname));
            }
            row => row?,
        };
        let Some(row) = row else { return Err(StoreError::not_found("node", name)) };
        let node = node_from_row(&row)?;
        tx.commit().await.ctx(|| format!("updating node {name:?}"))?;
        Ok(node)
    }

    /// Deletes a node; `false` if it did not exist. [`StoreError::InUse`] while a
    /// rule or a line still points at it (delete or change those first).
    pub async fn delete_node(&self, name: &str) -> Result<bool, StoreError> {
        let mut tx = self.begin().await?;
        let rule_ids = sqlx::query("SELECT id FROM rules WHERE node = $1 ORDER BY id")
            .bind(name)
            .fetch_all(&mut *tx)
            .await
            .ctx(|| format!("finding rules that use node {name:?}"))?;
        let lines = sqlx::query("SELECT name FROM lines WHERE node = $1")
            .bind(name)
            .fetch_all(&mut *tx)
            .await
            .ctx(|| format!("finding lines that use node {name:?}"))?;
        let mut users = Vec::new();
        for row in &rule_ids {
            let id: i64 = row.try_get("id").ctx(|| "reading a rule id".to_string())?;
            users.push(format!("rule {id}"));
        }
        for row in &lines {
            let line: String = row.try_get("name").ctx(|| "reading a line name".to_string())?;
            users.push(format!("line {line:?}"));
        }
        if !users.is_empty() {
            return Err(StoreError::InUse { what: "node", key: name.to_string(), by: users.join(", ") });
        }
        let done = sqlx::query("DELETE FROM nodes WHERE name = $1")
            .bind(name)
            .execute(&mut *tx)
            .await
            .ctx(|| format!("deleting node {name:?}"))?;
        tx.commit().await.ctx(|| format!("deleting node {name:?}"))?;
        Ok(done.rows_affected() > 0)
    }

    /// The stored hash of the node's own agent token; `None` when the node has
    /// no token of its own or does not exist (both mean: refuse it).
    pub async fn node_token_hash(&self, name: &str) -> Result<Option<String>, StoreError> {
        let row = sqlx::query("SELECT auth_token_hash FROM nodes WHERE name = $1")
            .bind(name)
            .fetch_optional(self.pool())
            .await
            .ctx(|| format!("reading the token hash of node {name:?}"))?;
        match row {
            Some(row) => row
                .try_get::<Option<String>, _>("auth_token_hash")
                .ctx(|| format!("reading the token hash of node {name:?}")),
            None => Ok(None),
        }
    }

    /// The node whose own agent token is `presented`, if any. The lookup is by the
    /// token's SHA-256, so its timing says nothing about the token itself.
    pub async fn node_of_token(&self, presented: &str) -> Result<Option<String>, StoreError> {
        let row = sqlx::query("SELECT name FROM nodes WHERE auth_token_hash = $1")
            .bind(hash_token(presented))
            .fetch_optional(self.pool())
            .await
            .ctx(|| "looking a node up by its token".to_string())?;
        match row {
            Some(row) => row.try_get::<String, _>("name").map(Some).ctx(|| "reading a node name".to_string()),
            None => Ok(None),
        }
    }

    /// Records one heartbeat in a statement of its own (see
    /// [`Store::record_heartbeat`], which writes them together); `None`: no
    /// node of that name (and, with `token_hash`, that token).
    pub(super) async fn record_heartbeat_alone(
        &self,
        name: &str,
        hb: &Heartbeat,
        now_ms: i64,
        token_hash: Option<&str>,
    ) -> Result<Option<Node>, StoreError> {
        // `fetch_all`, not `fetch_optional`: the statement runs to its end,
        // where SQLite commits an autocommit `UPDATE … RETURNING`. Stopped at
        // its first row, a failed commit (the disk gone read-only) would be
        // lost and the heartbeat would look written.
        let rows = heartbeat_update(name, hb, now_ms, token_hash)
            .fetch_all(self.pool())
            .await
            .ctx(|| format!("recording a heartbeat of node {name:?}"))?;
        rows.first().map(node_from_row).transpose()
    }
}

/// The `UPDATE` of one heartbeat, returning the node. With `token_hash`
/// (the SHA-256 of the agent's token, [`hash_token`]) only a node holding that
/// token is written, so checking the token and recording the heartbeat take
/// one statement; the comparison is of hashes, so its timing says nothing
/// about the token (as in [`Store::node_of_token`]). `None`: the caller has
/// verified the agent (the global agent token).
pub(super) fn heartbeat_update<'q>(
    name: &'q str,
    hb: &Heartbeat,
    now_ms: i64,
    token_hash: Option<&'q str>,
) -> Query<'q, Any, AnyArguments<'q>> {
    // The statement text is the same every time, so the connection's statement cache reuses it.
    static SQL: std::sync::LazyLock<String> = std::sync::LazyLock::new(|| {
        format!(
            "UPDATE nodes SET cpu_usage = $1, memory_usage = $2, bandwidth_mbps = $3, \
             conns = $4, last_heartbeat_ms = $5 WHERE name = $6 AND ($7 = 0 OR auth_token_hash = $8) \
             RETURNING {NODE_COLUMNS}"
        )
    });
    sqlx::query(SQL.as_str())
        .bind(hb.cpu_usage)
        .bind(hb.memory_usage)
        .bind(hb.bandwidth_mbps)
        .bind(hb.conns)
        .bind(now_ms)
        .bind(name)
        .bind(i32::from(token_hash.is_some()))
        .bind(token_hash.unwrap_or(""))
}
