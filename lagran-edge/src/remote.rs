//! Sites and certificates from the control plane.
//!
//! Every `config_poll_secs` the edge reads `GET {control_url}/api/v1/sites?node={node_name}` and
//! `GET {control_url}/api/v1/certificates?node={node_name}` (header
//! `x-lagran-agent-token`). When either answer differs from the last one applied,
//! the sites and the HTTPS certificates are swapped whole: requests and handshakes
//! under way finish with what they started with, the next ones see the new set. No
//! restart, no dropped connection.
//!
//! What is served is the TOML's own `[[site]]`s (and their certificate files) with
//! the control plane's laid over them: a host (or SNI name) the control plane has
//! replaces the file's entry of the same name. When the control plane cannot be
//! reached or sends something unusable, the last set applied stays and the error is
//! logged; one bad certificate is skipped (logged), the others are served.
//!
//! Both are read with the heartbeats' client ([`crate::control`]): over TLS only
//! for an `https://` `control_url`, trusting `ca`.
//!
//! The control plane shows private keys only to a node's own token (or the admin
//! token), and only over TLS or to loopback; otherwise the certificates arrive
//! without `key_pem` and are skipped with a warning saying so.

use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use http_body_util::{BodyExt, Full};
use hyper::{Request, StatusCode};
use lagran_site::Site;
use rustls::sign::CertifiedKey;
use serde::Deserialize;
use tokio_util::sync::CancellationToken;
use tracing::{info, warn};

use crate::Edge;
use crate::agent::TOKEN_HEADER;
use crate::config::{Config, SiteConfig};
use crate::control::{self, ControlClient};
use crate::purge::Purger;
use crate::tls::{self, CertMap};

const REQUEST_TIMEOUT: Duration = Duration::from_secs(10);

#[derive(Debug, thiserror::Error)]
pub enum RemoteError {
    #[error("{url}: {reason}")]
    Fetch { url: String, reason: String },
    #[error("{url} answered {status}: {body}")]
    Status { url: String, status: StatusCode, body: String },
    #[error("{url} sent unusable JSON: {source}")]
    Json { url: String, source: serde_json::Error },
    #[error("the sites from the control plane are not valid")]
    Sites(#[source] crate::config::ConfigError),
}

/// Where and how often to read.
#[derive(Debug, Clone)]
pub struct RemoteConfig {
    pub sites_url: String,
    pub certificates_url: String,
    pub token: String,
    pub interval: Duration,
    /// The CA bundle trusted for an `https://` URL (as the heartbeats').
    pub ca: Option<std::path::PathBuf>,
}

impl RemoteConfig {
    /// `None` when no `control_url` is configured.
    pub fn from_config(config: &Config) -> Option<RemoteConfig> {
        let base = config.control_url.as_deref()?.trim_end_matches('/');
        Some(RemoteConfig {
            sites_url: format!("{base}/api/v1/sites?node={}", config.node_name),
            certificates_url: format!("{base}/api/v1/certificates?node={}", config.node_name),
            token: config.agent_token.clone().unwrap_or_default(),
            interval: Duration::from_secs(config.config_poll_secs),
            ca: config.ca.clone(),
        })
    }
}

/// What the TOML file itself holds.
pub struct Local {
    pub sites: Vec<SiteConfig>,
    pub certs: Vec<(String, Arc<CertifiedKey>)>,
}

/// One certificate as `/api/v1/certificates` answers it.
#[derive(Debug, Deserialize)]
pub struct RemoteCertificate {
    pub domain: String,
    pub cert_pem: String,
    /// Absent when the token may not read keys.
    pub key_pem: Option<String>,
}

/// Parses `/api/v1/sites`: the store's timestamps are dropped, the rest must be
/// exactly the keys of a [`Site`] (a `[[site]]` without the certificate file paths).
pub fn parse_sites(body: &[u8], url: &str) -> Result<Vec<SiteConfig>, RemoteError> {
    let json = |source| RemoteError::Json { url: url.to_owned(), source };
    let mut list: Vec<serde_json::Map<String, serde_json::Value>> = serde_json::from_slice(body).map_err(json)?;
    let mut sites = Vec::with_capacity(list.len());
    for site in &mut list {
        site.remove("created_at_ms");
        site.remove("updated_at_ms");
        let cert_paths = [site.remove("cert_pem"), site.remove("key_pem")];
        if cert_paths.iter().flatten().any(|v| !v.is_null()) {
            let e = serde_json::Error::io(std::io::Error::other("cert_pem/key_pem are file paths: local only"));
            return Err(json(e));
        }
        let site: Site = serde_json::from_value(serde_json::Value::Object(std::mem::take(site))).map_err(json)?;
        let site = SiteConfig::new(site, None, None).map_err(|e| json(serde::de::Error::custom(e)))?;
        sites.push(site);
    }
    Config::validate_sites(&sites, url).map_err(RemoteError::Sites)?;
    Ok(sites)
}

/// The file's sites with the control plane's laid over them (same host: the control plane's).
pub fn merge_sites(local: &[SiteConfig], remote: &[SiteConfig]) -> Vec<SiteConfig> {
    let remote_hosts: Vec<String> = remote.iter().map(|s| crate::host::normalize(&s.site().host)).collect();
    let mut out: Vec<SiteConfig> =
        local.iter().filter(|s| !remote_hosts.contains(&crate::host::normalize(&s.site().host))).cloned().collect();
    out.extend(remote.iter().cloned());
    out
}

/// The file's certificates with the control plane's laid over them; returns the
/// map and how many remote ones were usable.
pub fn merge_certs(local: &[(String, Arc<CertifiedKey>)], remote: &[RemoteCertificate]) -> (CertMap, usize) {
    let mut map = CertMap::default();
    for (host, key) in local {
        map.insert(host, key.clone());
    }
    let mut used = 0;
    for c in remote {
        let Some(key_pem) = &c.key_pem else {
            warn!(
                domain = %c.domain,
                "the control plane sent this certificate without its private key: it sends keys only to a \
                 node's own auth_token (not the global agent token), over https:// or to loopback; skipped"
            );
            continue;
        };
        match tls::certified_key_from_pem(&c.domain, &c.cert_pem, key_pem) {
            Ok(key) => {
                map.insert(&c.domain, Arc::new(key));
                used += 1;
            }
            Err(e) => warn!(error = %crate::error_chain(&e), "certificate skipped"),
        }
    }
    (map, used)
}

async fn fetch(client: &ControlClient, url: &str, token: &str) -> Result<Bytes, RemoteError> {
    let fail = |reason: String| RemoteError::Fetch { url: url.to_owned(), reason };
    let req = Request::get(url).header(TOKEN_HEADER, token).body(Full::default()).map_err(|e| fail(e.to_string()))?;
    let exchange = async {
        let resp = client.request(req).await.map_err(|e| fail(crate::error_chain(&e)))?;
        let status = resp.status();
        let body = resp.into_body().collect().await.map_err(|e| fail(e.to_string()))?.to_bytes();
        if status != StatusCode::OK {
            let body = String::from_utf8_lossy(&body[..body.len().min(200)]).into_owned();
            return Err(RemoteError::Status { url: url.to_owned(), status, body });
        }
        Ok(body)
    };
    tokio::time::timeout(REQUEST_TIMEOUT, exchange)
        .await
        .map_err(|_| fail(format!("no answer within {REQUEST_TIMEOUT:?}")))?
}

/// Reads, and applies when changed, until `shutdown`; the first read is at
/// once. Each round also applies the purges not applied yet ([`crate::purge`]).
pub async fn run(
    cfg: RemoteConfig,
    local: Local,
    mut purger: Option<Purger>,
    edge: Arc<Edge>,
    shutdown: CancellationToken,
) {
    let client = match control::client(cfg.ca.as_deref()) {
        Ok(c) => c,
        Err(e) => {
            tracing::error!(error = %e, "cannot read sites and certificates from the control plane");
            return;
        }
    };
    let mut applied: Option<(Bytes, Bytes)> = None;
    let mut failures: u32 = 0;
    info!(url = %cfg.sites_url, interval = ?cfg.interval, "reading sites and certificates from the control plane");
    loop {
        let round = async {
            let sites = fetch(&client, &cfg.sites_url, &cfg.token).await?;
            let certs = fetch(&client, &cfg.certificates_url, &cfg.token).await?;
            Ok::<_, RemoteError>((sites, certs))
        };
        match round.await {
            Ok(bodies) if applied.as_ref() == Some(&bodies) => failures = 0,
            Ok((sites_body, certs_body)) => match apply(&local, &edge, &cfg, &sites_body, &certs_body) {
                Ok(()) => {
                    failures = 0;
                    applied = Some((sites_body, certs_body));
                }
                Err(e) => {
                    failures += 1;
                    warn!(error = %crate::error_chain(&e), "control-plane sites not applied; serving the last set");
                }
            },
            Err(e) => {
                if failures.is_multiple_of(10) {
                    warn!(error = %crate::error_chain(&e), "cannot read sites from the control plane; serving the last set");
                }
                failures += 1;
            }
        }
        if let Some(purger) = &mut purger {
            crate::purge::sync_logged(purger, &edge).await;
        }
        tokio::select! {
            () = shutdown.cancelled() => break,
            () = tokio::time::sleep(cfg.interval) => {}
        }
    }
}

fn apply(
    local: &Local,
    edge: &Edge,
    cfg: &RemoteConfig,
    sites_body: &[u8],
    certs_body: &[u8],
) -> Result<(), RemoteError> {
    let remote_sites = parse_sites(sites_body, &cfg.sites_url)?;
    let remote_certs: Vec<RemoteCertificate> = serde_json::from_slice(certs_body)
        .map_err(|source| RemoteError::Json { url: cfg.certificates_url.clone(), source })?;
    let sites = merge_sites(&local.sites, &remote_sites);
    let (certs, used) = merge_certs(&local.certs, &remote_certs);
    edge.replace_sites(&sites);
    edge.certs.replace(certs);
    info!(
        sites = sites.len(),
        from_control_plane = remote_sites.len(),
        certificates = local.certs.len() + used,
        "sites and certificates from the control plane applied"
    );
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sites_parse_without_timestamps_and_bad_ones_are_refused() {
        let body = br#"[{"host":"a.test","origin":"http://127.0.0.1:9","cache_ttl_secs":5,"allow_cidrs":[],
            "deny_cidrs":[],"deny_paths":["/x"],"deny_user_agents":[],"rate_limit_rps":null,
            "rate_limit_burst":null,"referer_allow":[],"created_at_ms":1,"updated_at_ms":2}]"#;
        let sites = parse_sites(body, "u").unwrap();
        assert_eq!(sites.len(), 1);
        assert_eq!(sites[0].site().cache_ttl_secs, 5);
        let unknown = br#"[{"host":"a.test","origin":"http://o","colour":"red"}]"#;
        assert!(crate::error_chain(&parse_sites(unknown, "u").unwrap_err()).contains("colour"));
        let bad_path = br#"[{"host":"a.test","origin":"http://o","deny_paths":["x"]}]"#;
        assert!(crate::error_chain(&parse_sites(bad_path, "u").unwrap_err()).contains("deny_paths"));
        let files = br#"[{"host":"a.test","origin":"http://o","cert_pem":"/etc/x"}]"#;
        assert!(parse_sites(files, "u").is_err(), "file paths from the network are refused");
    }

    #[test]
    fn control_plane_sites_carry_several_origins() {
        let body = br#"[{"host":"ha.test","origin":"https://o1","origins":["https://o1","http://o2:8080"],
            "origin_weights":[3,1],"origin_host":"www.ha.test","origin_health_path":"/healthz"}]"#;
        let sites = parse_sites(body, "u").unwrap();
        let origins: Vec<String> = sites[0].origins().iter().map(|o| format!("{o:?}")).collect();
        assert_eq!(origins, ["https://o1", "http://o2:8080"]);
        let site = sites[0].site();
        assert_eq!((site.origin_weights.as_slice(), site.origin_host.as_deref()), (&[3, 1][..], Some("www.ha.test")));
        assert_eq!(site.origin_health_path, "/healthz");
        let unusable_ca = br#"[{"host":"ha.test","origin":"https://o1","origin_ca_pem":"-----BEGIN CERTIFICATE-----\nnope\n-----END CERTIFICATE-----\n"}]"#;
        let e = crate::error_chain(&parse_sites(unusable_ca, "u").unwrap_err());
        assert!(e.contains("origin_ca"), "{e}");
    }

    #[test]
    fn the_control_plane_wins_per_host() {
        let site = |host: &str, origin: &str| {
            parse_sites(format!(r#"[{{"host":"{host}","origin":"{origin}"}}]"#).as_bytes(), "u").unwrap().remove(0)
        };
        let local = vec![site("a.test", "http://1.1.1.1"), site("b.test", "http://2.2.2.2")];
        let remote = vec![site("A.test", "http://3.3.3.3"), site("c.test", "http://4.4.4.4")];
        let merged = merge_sites(&local, &remote);
        let hosts: Vec<_> = merged.iter().map(|s| (s.site().host.as_str(), format!("{:?}", s.origin()))).collect();
        assert_eq!(
            hosts,
            [
                ("b.test", "http://2.2.2.2".into()),
                ("A.test", "http://3.3.3.3".into()),
                ("c.test", "http://4.4.4.4".into())
            ]
        );
    }
}
