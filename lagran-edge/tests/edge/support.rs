//! An origin server, an edge in front of it, and an HTTP client.

use std::collections::HashMap;
use std::convert::Infallible;
use std::net::SocketAddr;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use bytes::Bytes;
use http_body_util::{BodyExt, Empty, Full};
use hyper::body::Incoming;
use hyper::header::HeaderMap;
use hyper::service::service_fn;
use hyper::{Method, Request, Response, StatusCode};
use hyper_util::client::legacy::Client;
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::rt::{TokioExecutor, TokioIo};
use lagran_edge::Edge;
use lagran_edge::config::Config;
use tokio::net::TcpListener;
use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;

pub const TIMEOUT: Duration = Duration::from_secs(10);

pub const STATIC_BODY: &str = "0123456789abcdefghij";

/// A test origin that counts requests per path.
pub struct Origin {
    pub addr: SocketAddr,
    hits: Arc<Mutex<HashMap<String, usize>>>,
}

impl Origin {
    pub fn hits(&self, path: &str) -> usize {
        self.hits.lock().unwrap().get(path).copied().unwrap_or(0)
    }
}

fn origin_response(req: &Request<Incoming>) -> Response<Full<Bytes>> {
    let h = |name: &str| req.headers().get(name).and_then(|v| v.to_str().ok()).unwrap_or("-").to_owned();
    let (cache_control, body) = match req.uri().path() {
        "/static.txt" => ("max-age=60", STATIC_BODY.to_owned()),
        "/nostore" => ("no-store", "fresh every time".to_owned()),
        "/big" => {
            let body = "0123456789".repeat(100);
            // Ranges as an origin answers them (a single `bytes=a-b`).
            if let Some((a, b)) = h("range").strip_prefix("bytes=").and_then(|r| r.split_once('-')) {
                let (a, b): (usize, usize) = (a.parse().unwrap(), b.parse().unwrap());
                return Response::builder()
                    .status(StatusCode::PARTIAL_CONTENT)
                    .header("content-range", format!("bytes {a}-{b}/1000"))
                    .header("cache-control", "max-age=60")
                    .body(Full::from(body[a..=b].to_owned()))
                    .unwrap();
            }
            ("max-age=60", body)
        }
        "/me" => ("max-age=60", format!("hello {}", h("cookie"))),
        "/echo" => (
            "no-store",
            format!(
                "method={} pq={} host={} xff={} xfh={} range={} conn={}",
                req.method(),
                req.uri().path_and_query().map_or("", |p| p.as_str()),
                h("host"),
                h("x-forwarded-for"),
                h("x-forwarded-host"),
                h("range"),
                h("x-private-hop"),
            ),
        ),
        _ => {
            let mut r = Response::new(Full::from("not found"));
            *r.status_mut() = StatusCode::NOT_FOUND;
            return r;
        }
    };
    Response::builder()
        .header("cache-control", cache_control)
        .header("content-type", "text/plain")
        .header("etag", "\"v1\"")
        .body(Full::from(body))
        .unwrap()
}

pub async fn start_origin() -> Origin {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let hits: Arc<Mutex<HashMap<String, usize>>> = Arc::default();
    let counted = hits.clone();
    tokio::spawn(async move {
        loop {
            let Ok((stream, _)) = listener.accept().await else {
                return;
            };
            let hits = counted.clone();
            tokio::spawn(async move {
                let svc = service_fn(move |req: Request<Incoming>| {
                    *hits.lock().unwrap().entry(req.uri().path().to_owned()).or_default() += 1;
                    if let Some(r) = req.headers().get("range").and_then(|v| v.to_str().ok()) {
                        *hits.lock().unwrap().entry(format!("{} {r}", req.uri().path())).or_default() += 1;
                    }
                    async move { Ok::<_, Infallible>(origin_response(&req)) }
                });
                let _ = hyper::server::conn::http1::Builder::new().serve_connection(TokioIo::new(stream), svc).await;
            });
        }
    });
    Origin { addr, hits }
}

/// An edge serving plain HTTP on a port-0 listener.
pub struct TestEdge {
    pub addr: SocketAddr,
    pub edge: Arc<Edge>,
    pub shutdown: CancellationToken,
    pub task: JoinHandle<std::io::Result<()>>,
}

pub async fn start_edge(config: &str) -> TestEdge {
    let config = Config::parse(config, "test config").expect("the test config is valid");
    let edge = Arc::new(Edge::new(&config).expect("the test edge starts"));
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let shutdown = CancellationToken::new();
    let task = tokio::spawn(lagran_edge::server::run(listener, edge.clone(), shutdown.clone()));
    TestEdge { addr, edge, shutdown, task }
}

/// A config with one site per behaviour, all on `origin`.
pub fn sites(origin: SocketAddr) -> String {
    format!(
        r#"
        [[site]]
        host = "cdn.test"
        origin = "http://{origin}"
        deny_paths = ["/admin"]
        deny_user_agents = ["BadBot"]
        referer_allow = ["*.good.test"]

        [[site]]
        host = "blocked.test"
        origin = "http://{origin}"
        deny_cidrs = ["127.0.0.0/8"]

        [[site]]
        host = "limited.test"
        origin = "http://{origin}"
        rate_limit_rps = 0.01
        rate_limit_burst = 3

        [[site]]
        host = "*.wild.test"
        origin = "http://{origin}"
        "#
    )
}

pub struct Reply {
    pub status: StatusCode,
    pub headers: HeaderMap,
    pub body: Bytes,
}

impl Reply {
    pub fn header(&self, name: &str) -> &str {
        self.headers.get(name).map_or("", |v| v.to_str().unwrap())
    }
    pub fn text(&self) -> &str {
        std::str::from_utf8(&self.body).unwrap()
    }
}

pub async fn request(addr: SocketAddr, method: Method, host: &str, path: &str, headers: &[(&str, &str)]) -> Reply {
    let client: Client<HttpConnector, Empty<Bytes>> = Client::builder(TokioExecutor::new()).build(HttpConnector::new());
    let mut req = Request::builder().method(method).uri(format!("http://{addr}{path}")).header("host", host);
    for (k, v) in headers {
        req = req.header(*k, *v);
    }
    let exchange = async {
        let resp = client.request(req.body(Empty::new()).unwrap()).await.expect("the edge answers");
        let (parts, body) = resp.into_parts();
        Reply { status: parts.status, headers: parts.headers, body: body.collect().await.unwrap().to_bytes() }
    };
    tokio::time::timeout(TIMEOUT, exchange).await.expect("the edge answers within the timeout")
}

pub async fn get(addr: SocketAddr, host: &str, path: &str, headers: &[(&str, &str)]) -> Reply {
    request(addr, Method::GET, host, path, headers).await
}
