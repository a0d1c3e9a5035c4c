//! The API's endpoints: one table of (method, path, [`Requirement`],
//! handler). The router is built only from this table ([`Endpoints`] has no
//! other way in), so an endpoint cannot exist without a declared requirement;
//! the tests send a request without credentials to every declared endpoint
//! and check that each requirement is enforced.

use axum::Router;
use axum::handler::Handler;
use axum::http::Method;
use axum::routing::{MethodFilter, on};

use super::access::{Requirement, enforce};
use super::{ApiError, AppState};
use super::{
    acme, asn_carriers, certificates, console, dnssec, explain, geo, measurements, nodes, purge, routes, rules,
    schedule, sites, suspects, zones,
};

/// One declared endpoint.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Endpoint {
    pub method: Method,
    /// The route's path, with `{param}` placeholders.
    pub path: &'static str,
    pub requirement: Requirement,
}

/// The router under construction and what was declared to build it.
pub struct Endpoints {
    state: AppState,
    router: Router<AppState>,
    declared: Vec<Endpoint>,
}

impl Endpoints {
    pub fn new(state: AppState) -> Self {
        Endpoints { state, router: Router::new(), declared: Vec::new() }
    }

    /// Adds `handler` for `method` on `path`, reachable only by callers meeting
    /// `requirement`. A `GET` endpoint answers `HEAD` as well.
    pub fn at<H, T>(mut self, method: Method, path: &'static str, requirement: Requirement, handler: H) -> Self
    where
        H: Handler<T, AppState>,
        T: 'static,
    {
        let filter = MethodFilter::try_from(method.clone()).expect("the API uses standard methods only");
        let layer = axum::middleware::from_fn_with_state((self.state.clone(), requirement), enforce);
        self.router = self.router.route(path, on(filter, handler).route_layer(layer));
        self.declared.push(Endpoint { method, path, requirement });
        self
    }

    /// Every endpoint declared so far.
    pub fn declared(&self) -> &[Endpoint] {
        &self.declared
    }

    /// The router: the declared endpoints, and 404 for any other path.
    pub fn into_router(self) -> Router {
        self.router.fallback(|| async { ApiError::not_found("no such API route") }).with_state(self.state)
    }
}

/// Every endpoint of the API.
pub fn all(state: AppState) -> Endpoints {
    use Requirement::{Admin, PathNode, Public, Read, ReadOrAnyNode, ReadOrQueriedNode};
    const GET: Method = Method::GET;
    const POST: Method = Method::POST;
    const PUT: Method = Method::PUT;
    const PATCH: Method = Method::PATCH;
    const DELETE: Method = Method::DELETE;
    Endpoints::new(state)
        .at(GET, "/healthz", Public, super::healthz)
        .at(GET, "/metrics", Public, super::metrics)
        .at(GET, "/api/v1/schedule", ReadOrAnyNode, schedule::get_schedule)
        .at(POST, "/api/v1/schedule/what-if", Read, console::what_if)
        .at(GET, "/api/v1/explain", Read, explain::get_explain)
        .at(GET, "/ui", Public, console::page)
        .at(POST, "/ui/login", Public, console::login)
        .at(POST, "/ui/logout", Public, console::logout)
        .at(GET, "/api/v1/console/session", Public, console::session)
        .at(GET, "/api/v1/console/matrix", Read, console::matrix)
        .at(GET, "/api/v1/console/nodes", Read, console::nodes)
        .at(GET, "/api/v1/console/traffic", Read, console::traffic)
        .at(GET, "/api/v1/console/faults", Read, console::faults)
        .at(GET, "/api/v1/console/certificates", Read, console::certificates)
        .at(GET, "/api/v1/console/dnssec", Read, dnssec::console_warnings)
        .at(POST, "/api/v1/measurements", ReadOrAnyNode, measurements::post)
        .at(GET, "/api/v1/measurements", Read, measurements::get)
        .at(GET, "/api/v1/measurements/candidates", ReadOrAnyNode, measurements::candidates)
        .at(GET, "/api/v1/nodes", Read, nodes::list)
        .at(POST, "/api/v1/nodes", Admin, nodes::create)
        .at(GET, "/api/v1/nodes/{name}", Read, nodes::get_one)
        .at(PATCH, "/api/v1/nodes/{name}", Admin, nodes::patch)
        .at(DELETE, "/api/v1/nodes/{name}", Admin, nodes::delete)
        .at(POST, "/api/v1/nodes/{name}/heartbeat", PathNode, nodes::heartbeat)
        .at(GET, "/api/v1/rules", Read, rules::list_rules)
        .at(POST, "/api/v1/rules", Admin, rules::create_rule)
        .at(DELETE, "/api/v1/rules/{id}", Admin, rules::delete_rule)
        .at(GET, "/api/v1/lines", Read, rules::list_lines)
        .at(PUT, "/api/v1/lines/{name}", Admin, rules::put_line)
        .at(DELETE, "/api/v1/lines/{name}", Admin, rules::delete_line)
        .at(GET, "/api/v1/zones", Read, zones::list_zones)
        .at(PUT, "/api/v1/zones/{name}", Admin, zones::put_zone)
        .at(GET, "/api/v1/zones/{name}", Read, zones::get_zone)
        .at(DELETE, "/api/v1/zones/{name}", Admin, zones::delete_zone)
        .at(POST, "/api/v1/zones/{name}/dnssec/rollover", Admin, dnssec::rollover)
        .at(GET, "/api/v1/dnssec", Read, dnssec::status)
        .at(GET, "/api/v1/domains", Read, zones::list_domains)
        .at(PUT, "/api/v1/domains/{name}", Admin, zones::put_domain)
        .at(DELETE, "/api/v1/domains/{name}", Admin, zones::delete_domain)
        .at(GET, "/api/v1/routes", Read, routes::current)
        .at(POST, "/api/v1/routes/rollback", Admin, routes::rollback)
        .at(POST, "/api/v1/routes/resume", Admin, routes::resume)
        .at(GET, "/api/v1/routes/table", Read, routes::table)
        .at(GET, "/api/v1/nshosts", Read, routes::nshosts)
        .at(GET, "/api/v1/geo/overrides", Read, geo::list_overrides)
        .at(POST, "/api/v1/geo/overrides", Admin, geo::upsert_override)
        .at(DELETE, "/api/v1/geo/overrides/{prefix}", Admin, geo::delete_override)
        .at(POST, "/api/v1/geo/reload", Admin, geo::reload)
        .at(GET, "/api/v1/geo/partitions", Read, geo::partitions)
        .at(GET, "/api/v1/geo/asn-carriers", Read, asn_carriers::list)
        .at(GET, "/api/v1/geo/asn-carriers/{asn}", Read, asn_carriers::get_one)
        .at(PUT, "/api/v1/geo/asn-carriers/{asn}", Admin, asn_carriers::put)
        .at(DELETE, "/api/v1/geo/asn-carriers/{asn}", Admin, asn_carriers::delete)
        .at(GET, "/api/v1/geo/suspects", Read, suspects::list)
        .at(POST, "/api/v1/geo/suspects/{id}/accept", Admin, suspects::accept)
        .at(GET, "/api/v1/sites", ReadOrQueriedNode, sites::list)
        .at(GET, "/api/v1/sites/{host}", ReadOrQueriedNode, sites::get_one)
        .at(PUT, "/api/v1/sites/{host}", Admin, sites::put)
        .at(DELETE, "/api/v1/sites/{host}", Admin, sites::delete)
        .at(GET, "/api/v1/certificates", ReadOrQueriedNode, certificates::list)
        .at(GET, "/api/v1/certificates/{domain}", ReadOrQueriedNode, certificates::get_one)
        .at(GET, "/api/v1/acme/challenges/{token}", ReadOrAnyNode, acme::challenge)
        .at(POST, "/api/v1/sites/{host}/certificate/renew", Admin, acme::renew)
        .at(PUT, "/api/v1/certificates/{domain}", Admin, certificates::put)
        .at(DELETE, "/api/v1/certificates/{domain}", Admin, certificates::delete)
        .at(POST, "/api/v1/purge", Admin, purge::create)
        .at(GET, "/api/v1/purge/{id}", Read, purge::get_one)
        .at(GET, "/api/v1/nodes/{name}/purges", PathNode, purge::pending)
        .at(POST, "/api/v1/nodes/{name}/purges/{id}", PathNode, purge::confirm)
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;
    use std::time::Duration;

    use axum::body::Body;
    use axum::http::{Request, StatusCode};
    use tower::ServiceExt;

    use super::*;
    use crate::api::Auth;
    use crate::api::auth::AGENT_TOKEN_HEADER;

    const AGENT: &str = "the-agent-token";
    const ADMIN: &str = "the-admin-token";
    const NODE: &str = "edge-1";
    const NODE_TOKEN: &str = "edge-1-own-token";

    async fn state() -> AppState {
        let store = crate::store::Store::connect("sqlite::memory:").await.unwrap();
        store.create_node(&crate::model::Node::new(NODE), Some(NODE_TOKEN)).await.unwrap();
        let scheduler = Arc::new(crate::scheduler::Scheduler::new(
            store.clone(),
            Default::default(),
            crate::health::HealthMonitor::new(Default::default()),
            crate::geo::GeoDb::load(None, None),
            crate::route_table::empty_shared(),
        ));
        let counters = Arc::new(crate::dns::counters::DnsCounters::new());
        AppState {
            store,
            scheduler,
            dns: Arc::new(Default::default()),
            auth: Arc::new(Auth::new(Some(AGENT), Some(ADMIN))),
            metrics: Arc::new(crate::metrics::Metrics::new(counters)),
            public_resolvers: Arc::new(Vec::new()),
            geo_max_change_ratio: 0.5,
            console: Arc::new(crate::console::Console::new(Arc::new(crate::console::nshosts::NoNsHosts))),
            tasks: crate::supervisor::Supervisor::new(),
            api_url: "http://127.0.0.1:0".into(),
        }
    }

    /// The endpoint's path with every `{param}` filled (`{name}` with the test node).
    fn concrete(path: &str) -> String {
        concrete_for(path, NODE)
    }

    /// The endpoint's path with `{name}` as `node`.
    fn concrete_for(path: &str, node: &str) -> String {
        path.split('/')
            .map(|seg| match seg {
                "{name}" => node,
                s if s.starts_with('{') => "x.test",
                s => s,
            })
            .collect::<Vec<_>>()
            .join("/")
    }

    /// The status `router` answers `method path` with `credentials` (header, value).
    async fn status(router: &Router, method: &Method, path: &str, credentials: Option<(&str, &str)>) -> StatusCode {
        let mut request = Request::builder().method(method.clone()).uri(path).header("host", "127.0.0.1");
        if let Some((k, v)) = credentials {
            request = request.header(k, v);
        }
        let sent = router.clone().oneshot(request.body(Body::empty()).unwrap());
        let answered = tokio::time::timeout(Duration::from_secs(10), sent).await;
        answered.unwrap_or_else(|_| panic!("{method} {path} did not answer")).unwrap().status()
    }

    /// The endpoints anyone may call; declaring another one public means changing this list too.
    const PUBLIC: [(Method, &str); 6] = [
        (Method::GET, "/healthz"),
        (Method::GET, "/metrics"),
        (Method::GET, "/ui"),
        (Method::POST, "/ui/login"),
        (Method::POST, "/ui/logout"),
        (Method::GET, "/api/v1/console/session"),
    ];

    /// Walks every declared endpoint: without credentials each one that needs
    /// them answers 401 before its handler runs, and each credential reaches
    /// exactly the endpoints its requirement admits.
    #[tokio::test]
    async fn every_declared_endpoint_enforces_its_requirement() {
        let endpoints = all(state().await);
        let declared = endpoints.declared().to_vec();
        let router = endpoints.into_router();
        let admin = format!("Bearer {ADMIN}");
        let public: Vec<_> = declared
            .iter()
            .filter(|e| e.requirement == Requirement::Public)
            .map(|e| (e.method.clone(), e.path))
            .collect();
        assert_eq!(public, PUBLIC.to_vec(), "the public endpoints");
        for e in &declared {
            let path = concrete(e.path);
            let anonymous = status(&router, &e.method, &path, None).await;
            assert_eq!(
                anonymous == StatusCode::UNAUTHORIZED,
                e.requirement.needs_credentials(),
                "{} {path} ({:?}) without credentials answered {anonymous}",
                e.method,
                e.requirement
            );
            let agent = status(&router, &e.method, &path, Some((AGENT_TOKEN_HEADER, AGENT))).await;
            let admitted = e.requirement != Requirement::Admin;
            assert_eq!(
                agent != StatusCode::UNAUTHORIZED,
                admitted,
                "{} {path} with the agent token: {agent}",
                e.method
            );
            // Not on the test node: the admin's DELETE would remove it.
            let admin_path = concrete_for(e.path, "absent");
            let by_admin = status(&router, &e.method, &admin_path, Some(("authorization", &admin))).await;
            let admitted = e.requirement != Requirement::PathNode;
            assert_eq!(by_admin != StatusCode::UNAUTHORIZED, admitted, "{} {path} as admin: {by_admin}", e.method);
            let node_path = format!("{path}?node={NODE}");
            let by_node = status(&router, &e.method, &node_path, Some((AGENT_TOKEN_HEADER, NODE_TOKEN))).await;
            let admitted = matches!(
                e.requirement,
                Requirement::Public
                    | Requirement::ReadOrAnyNode
                    | Requirement::ReadOrQueriedNode
                    | Requirement::PathNode
            );
            assert_eq!(by_node != StatusCode::UNAUTHORIZED, admitted, "{} {node_path} as {NODE}: {by_node}", e.method);
        }
    }

    /// The router holds nothing beyond the table: each (method, path) is
    /// declared once, any other method on a declared path is 405 and any other
    /// path 404, so an endpoint left out of the table is unreachable.
    #[tokio::test]
    async fn the_router_serves_only_declared_endpoints() {
        let endpoints = all(state().await);
        let declared = endpoints.declared().to_vec();
        let router = endpoints.into_router();
        let mut seen = std::collections::HashSet::new();
        for e in &declared {
            assert!(seen.insert((e.method.clone(), e.path)), "{} {} declared twice", e.method, e.path);
        }
        let methods = [Method::GET, Method::POST, Method::PUT, Method::PATCH, Method::DELETE];
        for path in declared.iter().map(|e| e.path).collect::<std::collections::BTreeSet<_>>() {
            for m in &methods {
                if declared.iter().any(|e| e.path == path && e.method == *m) {
                    continue;
                }
                let s = status(
                    &router,
                    m,
                    &concrete_for(path, "absent"),
                    Some(("authorization", &format!("Bearer {ADMIN}"))),
                )
                .await;
                assert_eq!(s, StatusCode::METHOD_NOT_ALLOWED, "{m} {path} is not declared");
            }
        }
        for undeclared in ["/api/v1/undeclared", "/api/v1/nodes/a/b/c", "/admin"] {
            assert_eq!(status(&router, &Method::GET, undeclared, None).await, StatusCode::NOT_FOUND, "{undeclared}");
        }
    }
}
