//! The edge's calls to the control plane's measurement API, over the heartbeat
//! agent's HTTP client (an `https://` control URL is spoken over verified TLS,
//! trusting `ca`) with the node's token in the same header:
//!
//! - `POST /api/v1/measurements` with `{"measurements":[…]}` ([`Measurement`]);
//! - `GET /api/v1/measurements/candidates?client=IP`: the nodes a browser at `IP`
//!   should time ([`Candidates`]);
//! - the purges ([`crate::purge`]): `GET /api/v1/nodes/{node}/purges` and
//!   `POST /api/v1/nodes/{node}/purges/{id}`.

use std::net::IpAddr;
use std::time::Duration;

use bytes::Bytes;
use http_body_util::{BodyExt, Full};
use hyper::{Method, Request, StatusCode};
use serde::{Deserialize, Serialize};

use crate::agent;
use crate::config::Config;
use crate::control::{self, ControlClient, ControlError};

const REQUEST_TIMEOUT: Duration = Duration::from_secs(5);
/// A candidates answer larger than this is refused (three nodes fit in far less).
const MAX_CANDIDATES_BYTES: usize = 16 << 10;

#[derive(Debug, thiserror::Error)]
pub enum ControlApiError {
    #[error("{url} failed")]
    Request { url: String, source: hyper_util::client::legacy::Error },
    #[error("{url} timed out after {REQUEST_TIMEOUT:?}")]
    Timeout { url: String },
    #[error("{url} answered {status}: {body}")]
    Status { url: String, status: StatusCode, body: String },
    #[error("{url} answered something that is not a candidates list")]
    Json { url: String, source: serde_json::Error },
    #[error("{url} is not a valid request")]
    Url { url: String, source: hyper::http::Error },
}

/// One entry of a measurements report.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Measurement {
    /// `58.60.0.0/24` or `2001:db8:1::/48`.
    pub client_subnet: String,
    pub node: String,
    pub rtt_ms: f64,
    pub samples: u32,
    /// `edge` (the edge's TCP connections) or `rum` (browser beacons).
    pub source: &'static str,
}

#[derive(Debug, Clone, PartialEq, Eq, Deserialize, Serialize)]
pub struct Candidate {
    pub node: String,
    pub hostname: String,
}

/// The nodes the control plane names for a client's partition (up to 3).
#[derive(Debug, Clone, PartialEq, Eq, Deserialize, Serialize)]
pub struct Candidates {
    #[serde(default)]
    pub partition: String,
    pub candidates: Vec<Candidate>,
}

pub struct ControlApi {
    client: ControlClient,
    base: String,
    token: String,
    /// This node's name, as reports name it.
    pub node: String,
}

impl ControlApi {
    /// `None` without a `control_url`; an error when the CA bundle is unusable.
    pub fn from_config(config: &Config) -> Option<Result<ControlApi, ControlError>> {
        let base = config.control_url.as_deref()?.trim_end_matches('/').to_owned();
        Some(control::client(config.ca.as_deref()).map(|client| ControlApi {
            client,
            base,
            token: config.agent_token.clone().unwrap_or_default(),
            node: config.node_name.clone(),
        }))
    }

    /// Sends one report.
    pub async fn post_measurements(&self, measurements: &[Measurement]) -> Result<(), ControlApiError> {
        #[derive(Serialize)]
        struct Report<'a> {
            measurements: &'a [Measurement],
        }
        let body = serde_json::to_vec(&Report { measurements }).expect("measurements serialize");
        self.exchange(Method::POST, format!("{}/api/v1/measurements", self.base), Bytes::from(body)).await?;
        Ok(())
    }

    /// The candidates for a client at `client`.
    pub async fn candidates(&self, client: IpAddr) -> Result<Candidates, ControlApiError> {
        let url = format!("{}/api/v1/measurements/candidates?client={client}", self.base);
        let body = self.exchange(Method::GET, url.clone(), Bytes::new()).await?;
        if body.len() > MAX_CANDIDATES_BYTES {
            let source = serde_json::Error::io(std::io::Error::other("the answer is too large"));
            return Err(ControlApiError::Json { url, source });
        }
        serde_json::from_slice(&body).map_err(|source| ControlApiError::Json { url, source })
    }

    /// The purges after `after` no older than `since_ms`, as the control plane answers them.
    pub async fn pending_purges(&self, after: i64, since_ms: i64) -> Result<Bytes, ControlApiError> {
        let url = format!("{}/api/v1/nodes/{}/purges?after={after}&since_ms={since_ms}", self.base, self.node);
        self.exchange(Method::GET, url, Bytes::new()).await
    }

    /// Confirms purge `id`, which removed `removed` objects here.
    pub async fn confirm_purge(&self, id: i64, removed: usize) -> Result<(), ControlApiError> {
        let url = format!("{}/api/v1/nodes/{}/purges/{id}", self.base, self.node);
        let body = serde_json::to_vec(&serde_json::json!({ "removed": removed })).expect("a number serializes");
        self.exchange(Method::POST, url, Bytes::from(body)).await?;
        Ok(())
    }

    async fn exchange(&self, method: Method, url: String, body: Bytes) -> Result<Bytes, ControlApiError> {
        let mut req = Request::builder().method(method).uri(&url).header(agent::TOKEN_HEADER, &self.token);
        if !body.is_empty() {
            req = req.header("content-type", "application/json");
        }
        let req = req.body(Full::new(body)).map_err(|source| ControlApiError::Url { url: url.clone(), source })?;
        let exchange = async {
            let resp = self
                .client
                .request(req)
                .await
                .map_err(|source| ControlApiError::Request { url: url.clone(), source })?;
            let status = resp.status();
            let body = resp.into_body().collect().await.map(|b| b.to_bytes()).unwrap_or_default();
            if status.is_success() {
                Ok(body)
            } else {
                let body = String::from_utf8_lossy(&body[..body.len().min(200)]).into_owned();
                Err(ControlApiError::Status { url: url.clone(), status, body })
            }
        };
        tokio::time::timeout(REQUEST_TIMEOUT, exchange)
            .await
            .map_err(|_| ControlApiError::Timeout { url: url.clone() })?
    }
}
