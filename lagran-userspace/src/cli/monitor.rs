//! `lagran monitor`: how far each NS host lags behind the control plane (the
//! route-table version it serves against the control plane's) and how long ago
//! the control plane last confirmed each one's table (`confirmed_ms_ago`: a table
//! goes stale when its leader has not confirmed it for DNS_STALE_SECS). Each NS host is asked `_version.<zone> TXT` over UDP; the
//! control plane's own version comes from `GET /api/v1/routes`.

use std::fmt::Write;
use std::net::SocketAddr;
use std::str::FromStr;
use std::time::Duration;

use hickory_proto::op::{Message, MessageType, OpCode, Query};
use hickory_proto::rr::{Name, RData, RecordType};

use crate::api_client::ApiClient;

/// One NS host's answer.
#[derive(Clone, Debug, PartialEq)]
pub struct NsVersion {
    pub ns: SocketAddr,
    pub version: Option<u64>,
    pub age_ms: Option<i64>,
    /// Milliseconds since the control plane last confirmed the NS host's table
    /// (its own clock); -1 when it never did; `None` from an older NS host.
    pub confirmed_ms_ago: Option<i64>,
    pub error: Option<String>,
}

/// Parses `version=N generated_at=T age_ms=A`.
pub fn parse_version_txt(txt: &str) -> (Option<u64>, Option<i64>) {
    let field = |k: &str| txt.split_whitespace().find_map(|w| w.strip_prefix(k)).map(str::to_string);
    (field("version=").and_then(|v| v.parse().ok()), field("age_ms=").and_then(|v| v.parse().ok()))
}

/// Reads `confirmed_ms_ago=C` from the same TXT (absent from older NS hosts).
pub fn parse_confirmed_ms_ago(txt: &str) -> Option<i64> {
    txt.split_whitespace().find_map(|w| w.strip_prefix("confirmed_ms_ago=")).and_then(|v| v.parse().ok())
}

/// Asks one NS host for its route-table version.
pub async fn query_ns(ns: SocketAddr, zone: &str, timeout: Duration) -> NsVersion {
    let fail = |e: String| NsVersion { ns, version: None, age_ms: None, confirmed_ms_ago: None, error: Some(e) };
    let name = match Name::from_str(&format!("_version.{}.", zone.trim_end_matches('.'))) {
        Ok(n) => n,
        Err(e) => return fail(format!("bad zone {zone:?}: {e}")),
    };
    let mut msg = Message::new();
    msg.set_id(rand::random())
        .set_message_type(MessageType::Query)
        .set_op_code(OpCode::Query)
        .add_query(Query::query(name, RecordType::TXT));
    let bytes = match msg.to_vec() {
        Ok(b) => b,
        Err(e) => return fail(e.to_string()),
    };
    let bind: SocketAddr =
        if ns.is_ipv4() { ([0, 0, 0, 0], 0).into() } else { (std::net::Ipv6Addr::UNSPECIFIED, 0).into() };
    let exchange = async {
        let sock = tokio::net::UdpSocket::bind(bind).await.map_err(|e| e.to_string())?;
        sock.send_to(&bytes, ns).await.map_err(|e| e.to_string())?;
        let mut buf = vec![0u8; 4096];
        let (n, _) = sock.recv_from(&mut buf).await.map_err(|e| e.to_string())?;
        Message::from_vec(&buf[..n]).map_err(|e| e.to_string())
    };
    let reply = match tokio::time::timeout(timeout, exchange).await {
        Ok(Ok(m)) => m,
        Ok(Err(e)) => return fail(e),
        Err(_) => return fail(format!("no answer within {} ms", timeout.as_millis())),
    };
    let txt: String = reply
        .answers()
        .iter()
        .filter_map(|r| match r.data() {
            RData::TXT(t) => Some(t.to_string()),
            _ => None,
        })
        .collect::<Vec<_>>()
        .join(" ");
    let (version, age_ms) = parse_version_txt(&txt);
    if version.is_none() {
        return fail(format!("no version in the answer ({})", reply.response_code()));
    }
    NsVersion { ns, version, age_ms, confirmed_ms_ago: parse_confirmed_ms_ago(&txt), error: None }
}

/// One report: the control plane's version and every NS host's lag.
pub async fn report(client: Option<&ApiClient>, ns: &[SocketAddr], zone: &str) -> String {
    let control = match client {
        Some(c) => c.call("GET", "/api/v1/routes", None).await.ok().and_then(|v| v["version"].as_u64()),
        None => None,
    };
    let mut out = String::new();
    let _ = writeln!(out, "control plane version: {}", control.map_or("unknown".to_string(), |v| v.to_string()));
    let _ =
        writeln!(out, "{:<24} {:>16} {:>10} {:>10} {:>12}  status", "NS", "VERSION", "BEHIND", "AGE_S", "CONFIRMED_S");
    let answers = futures_join(ns, zone).await;
    for a in answers {
        let behind = match (control, a.version) {
            (Some(c), Some(v)) => c.saturating_sub(v).to_string(),
            _ => "-".into(),
        };
        let _ = writeln!(
            out,
            "{:<24} {:>16} {:>10} {:>10} {:>12}  {}",
            a.ns,
            a.version.map_or("-".to_string(), |v| v.to_string()),
            behind,
            a.age_ms.map_or("-".to_string(), |v| format!("{:.1}", v as f64 / 1e3)),
            match a.confirmed_ms_ago {
                None => "-".to_string(),
                Some(v) if v < 0 => "never".to_string(),
                Some(v) => format!("{:.1}", v as f64 / 1e3),
            },
            a.error.as_deref().unwrap_or("ok")
        );
    }
    out
}

async fn futures_join(ns: &[SocketAddr], zone: &str) -> Vec<NsVersion> {
    let tasks: Vec<_> = ns
        .iter()
        .map(|&a| {
            let zone = zone.to_string();
            tokio::spawn(async move { query_ns(a, &zone, Duration::from_secs(2)).await })
        })
        .collect();
    let mut out = Vec::with_capacity(tasks.len());
    for (t, &a) in tasks.into_iter().zip(ns) {
        out.push(t.await.unwrap_or_else(|e| NsVersion {
            ns: a,
            version: None,
            age_ms: None,
            confirmed_ms_ago: None,
            error: Some(e.to_string()),
        }));
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn version_txt_parses() {
        assert_eq!(parse_version_txt("version=17 generated_at=5 age_ms=1200"), (Some(17), Some(1200)));
        assert_eq!(parse_version_txt("nonsense"), (None, None));
        let txt = "version=17 generated_at=5 age_ms=1200 confirmed_ms_ago=300";
        assert_eq!(parse_version_txt(txt), (Some(17), Some(1200)));
        assert_eq!(parse_confirmed_ms_ago(txt), Some(300));
        assert_eq!(parse_confirmed_ms_ago("version=17 generated_at=5 age_ms=1200"), None, "an older NS host");
    }

    #[tokio::test]
    async fn an_unreachable_ns_is_reported_not_fatal() {
        // A bound but silent UDP socket: the query times out.
        let silent = std::net::UdpSocket::bind("127.0.0.1:0").unwrap();
        let v = query_ns(silent.local_addr().unwrap(), "edge.lagran.net", Duration::from_millis(200)).await;
        assert!(v.version.is_none());
        assert!(v.error.is_some());
    }
}
