//! Operator commands that go through the running daemon's API:
//! `lagran rule …`, `lagran line …`, `lagran routes …`, `lagran node set …`.

use std::fmt::Write;

use serde_json::{Value, json};

use crate::api_client::{ApiClient, ClientError};

/// `lagran rule …`
#[derive(Debug, clap::Subcommand)]
#[expect(clippy::large_enum_variant, reason = "parsed once per command line")]
pub enum RuleCommand {
    /// List rules (manual first, then canary; by priority).
    List,
    /// Add a manual pin or a canary split.
    Add {
        /// manual | canary
        #[arg(long)]
        kind: String,
        /// The node answered.
        #[arg(long)]
        node: String,
        /// Share of the matching client subnets (canary rules).
        #[arg(long)]
        percent: Option<u8>,
        #[arg(long)]
        domain: Option<String>,
        #[arg(long)]
        country: Option<String>,
        #[arg(long)]
        province: Option<String>,
        #[arg(long)]
        city: Option<String>,
        #[arg(long)]
        isp: Option<String>,
        /// Client prefix, e.g. 58.60.7.0/24.
        #[arg(long)]
        prefix: Option<String>,
        #[arg(long, default_value_t = 0)]
        priority: i64,
        /// The rule stops applying after this many seconds.
        #[arg(long)]
        expires_in: Option<i64>,
        #[arg(long, default_value = "")]
        note: String,
    },
    /// Delete a rule by id.
    Rm { id: i64 },
}

/// `lagran line …`
#[derive(Debug, clap::Subcommand)]
pub enum LineCommand {
    List,
    /// Create or replace a line.
    Set {
        name: String,
        /// Client prefixes on the line (repeat).
        #[arg(long = "prefix", required = true)]
        prefixes: Vec<String>,
        /// schedule | node | origin
        #[arg(long, default_value = "schedule")]
        answer: String,
        #[arg(long)]
        node: Option<String>,
        /// Scheduled names it applies to (repeat; none = all).
        #[arg(long = "domain")]
        domains: Vec<String>,
        /// Accept prefixes that overlap a public resolver.
        #[arg(long)]
        force: bool,
        #[arg(long, default_value = "")]
        note: String,
    },
    Rm {
        name: String,
    },
}

/// `lagran routes …`
#[derive(Debug, clap::Subcommand)]
pub enum RoutesCommand {
    /// The current route table: version, names, answers.
    Show,
    /// Put the previous table back and hold it until `resume`.
    Rollback,
    /// Let recomputes publish again.
    Resume,
}

fn pretty(v: &Value) -> String {
    let mut s = serde_json::to_string_pretty(v).unwrap_or_default();
    s.push('\n');
    s
}

pub async fn rule(client: &ApiClient, cmd: RuleCommand) -> Result<String, ClientError> {
    match cmd {
        RuleCommand::List => {
            let v = client.call("GET", "/api/v1/rules", None).await?;
            let mut out = String::new();
            let _ = writeln!(out, "{:>4}  {:<7} {:<10} {:>4}  {:<28} filters", "ID", "KIND", "NODE", "PCT", "DOMAIN");
            for r in v.as_array().into_iter().flatten() {
                let filters: Vec<String> = ["country", "province", "city", "isp", "prefix"]
                    .iter()
                    .filter_map(|k| r[*k].as_str().map(|v| format!("{k}={v}")))
                    .collect();
                let _ = writeln!(
                    out,
                    "{:>4}  {:<7} {:<10} {:>4}  {:<28} {}",
                    r["id"],
                    r["kind"].as_str().unwrap_or(""),
                    r["node"].as_str().unwrap_or(""),
                    r["percent"],
                    r["domain"].as_str().unwrap_or("*"),
                    filters.join(" ")
                );
            }
            Ok(out)
        }
        RuleCommand::Add {
            kind,
            node,
            percent,
            domain,
            country,
            province,
            city,
            isp,
            prefix,
            priority,
            expires_in,
            note,
        } => {
            let expires_at_ms = expires_in.map(|s| crate::clock::now_ms() + s * 1000);
            let body = json!({
                "kind": kind, "node": node, "percent": percent, "domain": domain, "country": country,
                "province": province, "city": city, "isp": isp, "prefix": prefix, "priority": priority,
                "expires_at_ms": expires_at_ms, "note": note,
            });
            Ok(pretty(&client.call("POST", "/api/v1/rules", Some(&body)).await?))
        }
        RuleCommand::Rm { id } => {
            client.call("DELETE", &format!("/api/v1/rules/{id}"), None).await?;
            Ok(format!("rule {id} deleted\n"))
        }
    }
}

pub async fn line(client: &ApiClient, cmd: LineCommand) -> Result<String, ClientError> {
    match cmd {
        LineCommand::List => Ok(pretty(&client.call("GET", "/api/v1/lines", None).await?)),
        LineCommand::Set { name, prefixes, answer, node, domains, force, note } => {
            let body = json!({ "name": name, "prefixes": prefixes, "answer": answer, "node": node, "domains": domains, "note": note });
            let path = format!("/api/v1/lines/{name}{}", if force { "?force=true" } else { "" });
            Ok(pretty(&client.call("PUT", &path, Some(&body)).await?))
        }
        LineCommand::Rm { name } => {
            client.call("DELETE", &format!("/api/v1/lines/{name}"), None).await?;
            Ok(format!("line {name} deleted\n"))
        }
    }
}

pub async fn routes(client: &ApiClient, cmd: RoutesCommand) -> Result<String, ClientError> {
    let v = match cmd {
        RoutesCommand::Show => client.call("GET", "/api/v1/routes", None).await?,
        RoutesCommand::Rollback => client.call("POST", "/api/v1/routes/rollback", None).await?,
        RoutesCommand::Resume => client.call("POST", "/api/v1/routes/resume", None).await?,
    };
    Ok(pretty(&v))
}

/// `lagran node set NAME FIELD=VALUE…`: a PATCH with JSON-typed values
/// (`weight=90`, `status=offline`, `public_ip=null`).
pub async fn node_set(client: &ApiClient, name: &str, assignments: &[String]) -> Result<String, ClientError> {
    let mut body = serde_json::Map::new();
    for a in assignments {
        let (k, v) = a
            .split_once('=')
            .ok_or_else(|| ClientError::Url { url: a.clone(), reason: "expected FIELD=VALUE".into() })?;
        let value = serde_json::from_str(v).unwrap_or_else(|_| Value::String(v.to_string()));
        body.insert(k.to_string(), value);
    }
    Ok(pretty(&client.call("PATCH", &format!("/api/v1/nodes/{name}"), Some(&Value::Object(body))).await?))
}
