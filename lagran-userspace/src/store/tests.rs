//! The same test bodies against SQLite (a temporary file) and PostgreSQL (a
//! throwaway server from [`crate::testkit`]; skipped with a note when it is
//! not installed, unless `CI`/`LAGRAN_REQUIRE_PG=1` demand it).

use std::fmt::Debug;
use std::net::{Ipv4Addr, Ipv6Addr};

use ipnet::IpNet;
use lagran_site::Site;
use sqlx::Row;

use super::*;
use crate::model::{Domain, GeoOverride, Line, LineAnswer, Node, NodeStatus, NsHost, RuleKind, Zone};

/// Runs each named `async fn(Store)` once per backend, as `<name>::sqlite` and
/// `<name>::postgres`.
macro_rules! on_both_backends {
    ($($name:ident),* $(,)?) => { $(
        mod $name {
            #[tokio::test]
            async fn sqlite() {
                let dir = tempfile::tempdir().expect("creating a temp dir");
                let url = crate::testkit::temp_sqlite_url(dir.path());
                let store = super::Store::connect(&url).await.expect("opening the SQLite store");
                assert_eq!(store.backend(), super::Backend::Sqlite);
                super::$name(store).await;
            }

            #[tokio::test]
            async fn postgres() {
                let test = concat!("store::", stringify!($name), "::postgres");
                let Some(pg) = crate::testkit::TempPostgres::shared_or_skip(test) else {
                    return;
                };
                let url = pg.fresh_database().await;
                let store = super::Store::connect(&url).await.expect("opening the PostgreSQL store");
                assert_eq!(store.backend(), super::Backend::Postgres);
                super::$name(store).await;
            }
        }
    )* };
}

on_both_backends!(
    nodes_crud,
    node_patch_clears_and_keeps,
    node_tokens_are_hashed,
    heartbeats,
    heartbeats_arriving_together_share_commits,
    zones_replace_ns_hosts,
    zone_upsert_is_atomic,
    domains_need_their_zone,
    delete_zone_takes_domains_and_rules,
    rules_crud,
    nodes_in_use_cannot_be_deleted,
    lines_crud,
    geo_overrides_crud,
    certificates_crud,
    sites_crud,
);

#[track_caller]
fn assert_invalid<T: Debug>(result: Result<T, StoreError>, field: &str) {
    match result {
        Err(StoreError::Invalid { field: f, reason }) => {
            assert_eq!(f, field, "expected Invalid on {field:?}, got it on {f:?}: {reason}")
        }
        other => panic!("expected Invalid {{ field: {field:?} }}, got {other:?}"),
    }
}

fn full_node(name: &str) -> Node {
    Node {
        status: NodeStatus::Online,
        public_ip: Some(Ipv4Addr::new(203, 0, 113, 10)),
        public_ipv6: Some("2001:db8::10".parse().unwrap()),
        hostname: Some(format!("{name}.edge.lagran.net")),
        country: "中国".into(),
        province: "广东".into(),
        city: "广州".into(),
        isp: "电信".into(),
        weight: 120,
        cpu_usage: 12.5,
        memory_usage: 40.0,
        bandwidth_mbps: 300.0,
        max_bandwidth_mbps: 1000.0,
        conns: 10,
        max_conns: 5000,
        agent_url: "https://gz-01.example:8443".into(),
        probe_port: Some(443),
        pool: "pool-a".into(),
        lat: Some(23.13),
        lon: Some(113.26),
        last_heartbeat_ms: Some(1_700_000_000_000),
        ..Node::new(name)
    }
}

fn zone(name: &str, hosts: &[(&str, Option<Ipv4Addr>)]) -> Zone {
    Zone {
        ns_hosts: hosts.iter().map(|(n, ip)| NsHost { name: n.to_string(), ipv4: *ip, ipv6: None }).collect(),
        ..Zone::new(name)
    }
}

fn domain(name: &str, zone: &str) -> Domain {
    Domain {
        name: name.into(),
        zone: zone.into(),
        pool: "default".into(),
        ttl: None,
        origin_ip: None,
        answer_mode: Default::default(),
        ecs: true,
        steering: Default::default(),
        strategy: Default::default(),
    }
}

fn net(s: &str) -> IpNet {
    s.parse().unwrap()
}

const EDGE: &str = "edge.lagran.net";

/// A zone `edge.lagran.net` with the apex as a domain, and node `gz-01`.
async fn basic_setup(store: &Store) {
    store
        .upsert_zone(&zone(EDGE, &[("ns1.edge.lagran.net", Some(Ipv4Addr::new(192, 0, 2, 1)))]))
        .await
        .expect("creating the zone");
    store.upsert_domain(&domain(EDGE, EDGE)).await.expect("creating the apex domain");
    store.create_node(&Node::new("gz-01"), None).await.expect("creating gz-01");
}

async fn nodes_crud(store: Store) {
    assert!(store.list_nodes().await.unwrap().is_empty());
    let before = now_ms();
    let created = store.create_node(&full_node("gz-01"), None).await.unwrap();
    assert!(created.created_at_ms >= before && created.updated_at_ms == created.created_at_ms);
    let expected =
        Node { created_at_ms: created.created_at_ms, updated_at_ms: created.updated_at_ms, ..full_node("gz-01") };
    assert_eq!(created, expected, "every field survives the round trip");
    assert_eq!(store.get_node("gz-01").await.unwrap(), Some(expected.clone()));
    assert_eq!(store.get_node("nope").await.unwrap(), None);

    // A minimal node: every nullable field NULL.
    store.create_node(&Node::new("bj-01"), None).await.unwrap();
    let names: Vec<String> = store.list_nodes().await.unwrap().into_iter().map(|n| n.name).collect();
    assert_eq!(names, ["bj-01", "gz-01"], "listed by name");
    let bj = store.get_node("bj-01").await.unwrap().unwrap();
    assert_eq!((bj.public_ip, bj.probe_port, bj.lat, bj.last_heartbeat_ms), (None, None, None, None));

    match store.create_node(&Node::new("gz-01"), None).await {
        Err(StoreError::Conflict { what: "node", key }) => assert_eq!(key, "gz-01"),
        other => panic!("creating gz-01 twice should be a Conflict, got {other:?}"),
    }
    assert_eq!(store.get_node("gz-01").await.unwrap(), Some(expected), "conflict changed nothing");

    assert_invalid(store.create_node(&Node::new("GZ 01"), None).await, "name");
    assert_invalid(store.create_node(&Node::new(""), None).await, "name");
    assert_invalid(store.create_node(&Node { cpu_usage: 101.0, ..Node::new("x") }, None).await, "cpu_usage");
    assert_invalid(store.create_node(&Node { memory_usage: -1.0, ..Node::new("x") }, None).await, "memory_usage");
    assert_invalid(store.create_node(&Node { probe_port: Some(0), ..Node::new("x") }, None).await, "probe_port");
    assert_invalid(store.create_node(&Node { lat: Some(91.0), ..Node::new("x") }, None).await, "lat");
    assert_eq!(store.get_node("x").await.unwrap(), None, "invalid nodes are not written");

    match store.update_node("nope", &NodePatch::default()).await {
        Err(StoreError::NotFound { what: "node", key }) => assert_eq!(key, "nope"),
        other => panic!("patching a missing node should be NotFound, got {other:?}"),
    }

    assert!(store.delete_node("bj-01").await.unwrap());
    assert!(!store.delete_node("bj-01").await.unwrap(), "second delete finds nothing");
    assert_eq!(store.get_node("bj-01").await.unwrap(), None);
}

async fn node_patch_clears_and_keeps(store: Store) {
    let created = store.create_node(&full_node("gz-01"), None).await.unwrap();
    let patch: NodePatch = serde_json::from_str(
        r#"{"public_ip": null, "probe_port": null, "lat": null, "weight": 5, "status": "disabled",
            "country": "", "lon": 100.5}"#,
    )
    .unwrap();
    let patched = store.update_node("gz-01", &patch).await.unwrap();
    assert_eq!(patched.public_ip, None, "null clears public_ip");
    assert_eq!(patched.probe_port, None, "null clears probe_port");
    assert_eq!(patched.lat, None, "null clears lat");
    assert_eq!(patched.lon, Some(100.5));
    assert_eq!(patched.weight, 5);
    assert_eq!(patched.status, NodeStatus::Disabled);
    assert_eq!(patched.country, "");
    // Absent fields are untouched.
    assert_eq!(patched.public_ipv6, created.public_ipv6);
    assert_eq!(patched.province, created.province);
    assert_eq!(patched.cpu_usage, created.cpu_usage);
    assert_eq!(patched.pool, created.pool);
    assert_eq!(patched.created_at_ms, created.created_at_ms);
    assert!(patched.updated_at_ms >= created.updated_at_ms);
    assert_eq!(store.get_node("gz-01").await.unwrap(), Some(patched.clone()));

    // Setting a cleared value again, and an empty patch.
    let patch: NodePatch = serde_json::from_str(r#"{"public_ip": "198.51.100.7"}"#).unwrap();
    let again = store.update_node("gz-01", &patch).await.unwrap();
    assert_eq!(again.public_ip, Some(Ipv4Addr::new(198, 51, 100, 7)));
    let same = store.update_node("gz-01", &NodePatch::default()).await.unwrap();
    assert_eq!(same.public_ip, again.public_ip);

    // A bad value anywhere rejects the whole patch.
    let bad = NodePatch { weight: Some(1), cpu_usage: Some(150.0), ..NodePatch::default() };
    assert_invalid(store.update_node("gz-01", &bad).await, "cpu_usage");
    assert_eq!(store.get_node("gz-01").await.unwrap().unwrap().weight, 5);
    assert_invalid(
        store.update_node("gz-01", &NodePatch { pool: Some("Bad Pool".into()), ..NodePatch::default() }).await,
        "pool",
    );
}

#[test]
fn node_patch_json() {
    let p: NodePatch = serde_json::from_str(r#"{"public_ip": null, "lat": 1.5}"#).unwrap();
    assert_eq!(p.public_ip, Some(None), "null means clear");
    assert_eq!(p.lat, Some(Some(1.5)));
    assert_eq!(p.public_ipv6, None, "absent means keep");
    assert!(p.status.is_none() && p.auth_token.is_none());
    assert!(!p.is_empty());
    assert!(NodePatch::default().is_empty());
    assert!(serde_json::from_str::<NodePatch>(r#"{"name": "other"}"#).is_err(), "no renames");
    assert!(serde_json::from_str::<NodePatch>(r#"{"status": "sleepy"}"#).is_err());
    assert!(serde_json::from_str::<NodePatch>(r#"{"public_ip": "300.1.1.1"}"#).is_err());
}

async fn node_tokens_are_hashed(store: Store) {
    let token = "s3cret-token-of-gz-01";
    store.create_node(&Node::new("gz-01"), Some(token)).await.unwrap();
    store.create_node(&Node::new("bj-01"), None).await.unwrap();

    let hash = store.node_token_hash("gz-01").await.unwrap().expect("gz-01 has a token");
    assert_eq!(hash, hash_token(token));
    assert_eq!(hash.len(), 64, "hex SHA-256");
    assert!(verify_token(&hash, token));
    assert!(!verify_token(&hash, "s3cret-token-of-gz-02"));
    assert!(!verify_token(&hash, ""));
    assert_eq!(store.node_token_hash("bj-01").await.unwrap(), None);
    assert_eq!(store.node_token_hash("nope").await.unwrap(), None);

    // Nothing in the row is the token itself.
    let row =
        sqlx::query("SELECT auth_token_hash FROM nodes WHERE name = 'gz-01'").fetch_one(store.pool()).await.unwrap();
    let stored: Option<String> = row.try_get("auth_token_hash").unwrap();
    assert_ne!(stored.as_deref(), Some(token));

    // Rotating through a patch.
    let patch = NodePatch { auth_token: Some("rotated-token".into()), ..NodePatch::default() };
    store.update_node("gz-01", &patch).await.unwrap();
    let hash = store.node_token_hash("gz-01").await.unwrap().unwrap();
    assert!(verify_token(&hash, "rotated-token") && !verify_token(&hash, token));

    assert_invalid(store.create_node(&Node::new("x"), Some("")).await, "auth_token");
    assert_invalid(store.create_node(&Node::new("x"), Some("a b")).await, "auth_token");
}

async fn heartbeats(store: Store) {
    let created = store.create_node(&full_node("gz-01"), None).await.unwrap();
    let hb: Heartbeat = serde_json::from_str(r#"{"cpu_usage": 55.5, "memory_usage": 20}"#).unwrap();
    let node = store.record_heartbeat("gz-01", &hb, 1_800_000_000_000).await.unwrap();
    assert_eq!(node.cpu_usage, 55.5);
    assert_eq!(node.memory_usage, 20.0);
    assert_eq!(node.bandwidth_mbps, 0.0, "defaults to 0 when not reported");
    assert_eq!(node.conns, 0);
    assert_eq!(node.last_heartbeat_ms, Some(1_800_000_000_000));
    assert_eq!(node.status, created.status, "a heartbeat does not change status");
    assert_eq!(node.weight, created.weight);

    let bad = Heartbeat { cpu_usage: 101.0, memory_usage: 1.0, bandwidth_mbps: 0.0, conns: 0 };
    assert_invalid(store.record_heartbeat("gz-01", &bad, 1).await, "cpu_usage");
    match store.record_heartbeat("nope", &hb, 1).await {
        Err(StoreError::NotFound { what: "node", .. }) => {}
        other => panic!("a heartbeat of a missing node should be NotFound, got {other:?}"),
    }

    // With the agent's token: written only to the node holding it, in the same
    // statement; a wrong token, another node's token, a node without a token
    // and a missing node all look alike (`None`) and write nothing.
    let own = store.create_node(&full_node("gz-02"), Some("gz-02-token-0123")).await.unwrap();
    let hb2 = Heartbeat { cpu_usage: 12.0, memory_usage: 3.0, bandwidth_mbps: 0.0, conns: 9 };
    let t = 1_800_000_000_500;
    for (name, token) in
        [("gz-02", "wrong-token"), ("gz-02", ""), ("gz-01", "gz-02-token-0123"), ("nope", "gz-02-token-0123")]
    {
        let r = store.record_heartbeat_of_token(name, &hb2, t, token).await.unwrap();
        assert!(r.is_none(), "{name} with {token:?}: {r:?}");
    }
    assert_eq!(store.get_node("gz-02").await.unwrap().unwrap(), own, "nothing written");
    assert_eq!(store.get_node("gz-01").await.unwrap().unwrap(), node, "nothing written");
    let n = store.record_heartbeat_of_token("gz-02", &hb2, t, "gz-02-token-0123").await.unwrap().unwrap();
    assert_eq!((n.cpu_usage, n.conns, n.last_heartbeat_ms), (12.0, 9, Some(t)));
    assert_invalid(store.record_heartbeat_of_token("gz-02", &bad, t, "gz-02-token-0123").await, "cpu_usage");
}

async fn heartbeats_arriving_together_share_commits(store: Store) {
    const NODES: usize = 40;
    for i in 0..NODES {
        store.create_node(&Node::new(format!("n-{i:02}")), None).await.unwrap();
    }
    // Every node reports once with its own load, and a few reports name nodes
    // that do not exist, all at the same moment.
    let mut tasks = Vec::new();
    for i in 0..NODES + 5 {
        let store = store.clone();
        tasks.push(tokio::spawn(async move {
            let name = if i < NODES { format!("n-{i:02}") } else { format!("missing-{i}") };
            let hb = Heartbeat { cpu_usage: i as f64, memory_usage: 1.0, bandwidth_mbps: 0.0, conns: i as i64 };
            (i, store.record_heartbeat(&name, &hb, 1_800_000_000_000 + i as i64).await)
        }));
    }
    for t in tasks {
        let (i, result) = t.await.unwrap();
        match result {
            Ok(node) if i < NODES => {
                assert_eq!(node.name, format!("n-{i:02}"), "each caller gets its own node");
                assert_eq!((node.cpu_usage, node.conns), (i as f64, i as i64));
                assert_eq!(node.last_heartbeat_ms, Some(1_800_000_000_000 + i as i64));
            }
            Err(StoreError::NotFound { what: "node", .. }) if i >= NODES => {}
            other => panic!("heartbeat {i}: {other:?}"),
        }
    }
    for i in 0..NODES {
        let node = store.get_node(&format!("n-{i:02}")).await.unwrap().unwrap();
        assert_eq!(node.cpu_usage, i as f64, "stored, not only answered");
    }
    let commits = store.heartbeat_commits();
    assert!(commits >= 1 && commits < (NODES / 2) as u64, "{} heartbeats in {commits} commits", NODES + 5);
}

async fn zones_replace_ns_hosts(store: Store) {
    assert!(store.list_zones().await.unwrap().is_empty());
    let mut z = zone(
        EDGE,
        &[
            ("ns2.edge.lagran.net", Some(Ipv4Addr::new(192, 0, 2, 2))),
            ("ns1.edge.lagran.net", Some(Ipv4Addr::new(192, 0, 2, 1))),
            ("ns.other-provider.example", None),
        ],
    );
    z.ns_hosts[0].ipv6 = Some("2001:db8::53".parse::<Ipv6Addr>().unwrap());
    z.soa_serial = u32::MAX;
    store.upsert_zone(&z).await.unwrap();
    store.upsert_zone(&zone("a.example", &[])).await.unwrap();
    let zones = store.list_zones().await.unwrap();
    assert_eq!(zones.len(), 2);
    assert_eq!(zones[0].name, "a.example", "listed by name");
    assert_eq!(zones[1], z, "NS hosts keep their order and glue; u32::MAX serial fits");
    assert_eq!(store.get_zone(EDGE).await.unwrap(), Some(z.clone()));
    assert_eq!(store.get_zone("nope.example").await.unwrap(), None);

    let mut replaced = zone(EDGE, &[("ns3.edge.lagran.net", Some(Ipv4Addr::new(192, 0, 2, 3)))]);
    replaced.soa_serial = 2;
    replaced.ns_ttl = 300;
    store.upsert_zone(&replaced).await.unwrap();
    assert_eq!(store.get_zone(EDGE).await.unwrap(), Some(replaced), "old NS hosts are gone");

    assert_invalid(store.upsert_zone(&zone("Edge.example", &[])).await, "name");
    assert_invalid(store.upsert_zone(&zone("edge.example.", &[])).await, "name");
    assert_invalid(store.upsert_zone(&zone("x.example", &[("ns1.x.example", None)])).await, "ns_hosts");
    let twice = ("ns.other.example", None);
    assert_invalid(store.upsert_zone(&zone("x.example", &[twice, twice])).await, "ns_hosts");
    assert_eq!(store.get_zone("x.example").await.unwrap(), None);

    assert!(store.delete_zone("a.example").await.unwrap());
    assert!(!store.delete_zone("a.example").await.unwrap());
}

/// A failure half-way through an upsert (a trigger refusing one NS host)
/// leaves the zone exactly as it was.
async fn zone_upsert_is_atomic(store: Store) {
    let original = zone(
        EDGE,
        &[
            ("ns1.edge.lagran.net", Some(Ipv4Addr::new(192, 0, 2, 1))),
            ("ns2.edge.lagran.net", Some(Ipv4Addr::new(192, 0, 2, 2))),
        ],
    );
    store.upsert_zone(&original).await.unwrap();
    let trigger: &[&str] = match store.backend() {
        Backend::Sqlite => &["CREATE TRIGGER refuse_boom BEFORE INSERT ON ns_hosts \
             WHEN NEW.name = 'boom.example' BEGIN SELECT RAISE(ABORT, 'boom refused'); END"],
        Backend::Postgres => &[
            "CREATE FUNCTION refuse_boom() RETURNS trigger LANGUAGE plpgsql AS $$ \
             BEGIN IF NEW.name = 'boom.example' THEN RAISE EXCEPTION 'boom refused'; END IF; \
             RETURN NEW; END $$",
            "CREATE TRIGGER refuse_boom BEFORE INSERT ON ns_hosts \
             FOR EACH ROW EXECUTE FUNCTION refuse_boom()",
        ],
    };
    for sql in trigger {
        sqlx::query(sql).execute(store.pool()).await.unwrap();
    }
    let mut broken = zone(EDGE, &[("ns9.edge.lagran.net", Some(Ipv4Addr::new(192, 0, 2, 9))), ("boom.example", None)]);
    broken.soa_serial = 99;
    match store.upsert_zone(&broken).await {
        Err(StoreError::Db { context, .. }) => {
            assert!(context.contains("boom.example"), "the error names the NS host: {context}")
        }
        other => panic!("the trigger should fail the upsert, got {other:?}"),
    }
    assert_eq!(
        store.get_zone(EDGE).await.unwrap(),
        Some(original),
        "neither the SOA change nor the NS host rewrite may survive a failed upsert"
    );
}

async fn domains_need_their_zone(store: Store) {
    let d = Domain {
        ttl: Some(30),
        origin_ip: Some(Ipv4Addr::new(198, 51, 100, 1)),
        answer_mode: crate::model::AnswerMode::Cname,
        ecs: false,
        steering: Default::default(),
        strategy: Default::default(),
        pool: "pool-a".into(),
        ..domain("pool-a.edge.lagran.net", EDGE)
    };
    assert_invalid(store.upsert_domain(&d).await, "zone");
    assert!(store.list_domains().await.unwrap().is_empty(), "nothing written");

    store.upsert_zone(&zone(EDGE, &[])).await.unwrap();
    store.upsert_domain(&d).await.unwrap();
    store.upsert_domain(&domain(EDGE, EDGE)).await.unwrap();
    let cname_apex = Domain { answer_mode: crate::model::AnswerMode::Cname, ..domain(EDGE, EDGE) };
    assert_invalid(store.upsert_domain(&cname_apex).await, "answer_mode");
    assert_eq!(store.list_domains().await.unwrap(), vec![domain(EDGE, EDGE), d.clone()]);
    assert_eq!(store.get_domain(&d.name).await.unwrap(), Some(d.clone()));

    let changed = Domain { ttl: None, origin_ip: None, pool: "default".into(), ..d.clone() };
    store.upsert_domain(&changed).await.unwrap();
    assert_eq!(store.get_domain(&d.name).await.unwrap(), Some(changed));

    assert_invalid(store.upsert_domain(&domain("www.example.com", EDGE)).await, "name");
    assert_invalid(store.upsert_domain(&Domain { pool: "".into(), ..domain(EDGE, EDGE) }).await, "pool");
    // Moving a domain to a missing zone is refused and keeps the old row.
    assert_invalid(store.upsert_domain(&domain(EDGE, "lagran.net")).await, "zone");
    assert_eq!(store.get_domain(EDGE).await.unwrap(), Some(domain(EDGE, EDGE)));

    assert!(store.delete_domain(&d.name).await.unwrap());
    assert!(!store.delete_domain(&d.name).await.unwrap());
    assert_eq!(store.list_domains().await.unwrap(), vec![domain(EDGE, EDGE)]);
}

async fn delete_zone_takes_domains_and_rules(store: Store) {
    basic_setup(&store).await;
    store.upsert_zone(&zone("other.example", &[])).await.unwrap();
    store.upsert_domain(&domain("other.example", "other.example")).await.unwrap();
    let rule = store.create_rule(&NewRule { domain: Some(EDGE.into()), ..NewRule::manual("gz-01") }).await.unwrap();
    let global = store.create_rule(&NewRule::manual("gz-01")).await.unwrap();

    assert!(store.delete_zone(EDGE).await.unwrap());
    assert_eq!(store.get_zone(EDGE).await.unwrap(), None);
    assert_eq!(store.list_domains().await.unwrap(), vec![domain("other.example", "other.example")]);
    assert_eq!(store.get_rule(rule.id).await.unwrap(), None, "the domain's rule went with it");
    assert!(store.get_rule(global.id).await.unwrap().is_some(), "other rules stay");
    let ns_left =
        sqlx::query("SELECT name FROM ns_hosts WHERE zone = $1").bind(EDGE).fetch_all(store.pool()).await.unwrap();
    assert!(ns_left.is_empty(), "its NS hosts are gone");
}

async fn rules_crud(store: Store) {
    basic_setup(&store).await;
    store.create_node(&Node::new("hk-01"), None).await.unwrap();
    let now = now_ms();

    let canary = store
        .create_rule(&NewRule {
            domain: Some(EDGE.into()),
            province: Some("广东".into()),
            isp: Some("电信".into()),
            prefix: Some(net("203.0.113.0/24")),
            priority: 5,
            expires_at_ms: Some(now + 3_600_000),
            note: "new node warm-up".into(),
            ..NewRule::canary("hk-01", 5)
        })
        .await
        .unwrap();
    assert!(canary.id > 0 && canary.created_at_ms >= now);
    assert_eq!(canary.kind, RuleKind::Canary);
    assert_eq!(canary.percent, 5);
    assert_eq!(canary.prefix, Some(net("203.0.113.0/24")));
    assert_eq!((canary.country.as_deref(), canary.city.as_deref()), (None, None));
    assert!(canary.is_active(now) && !canary.is_active(now + 3_600_000));
    assert_eq!(store.get_rule(canary.id).await.unwrap(), Some(canary.clone()));

    let low = store.create_rule(&NewRule::manual("gz-01")).await.unwrap();
    assert_eq!(low.percent, 100);
    let high = store
        .create_rule(&NewRule { priority: 10, country: Some("中国".into()), ..NewRule::manual("hk-01") })
        .await
        .unwrap();
    let order: Vec<i64> = store.list_rules().await.unwrap().iter().map(|r| r.id).collect();
    assert_eq!(order, [high.id, low.id, canary.id], "manual before canary, then by priority");

    assert_invalid(store.create_rule(&NewRule::manual("nope")).await, "node");
    assert_invalid(
        store.create_rule(&NewRule { domain: Some("nope.edge.lagran.net".into()), ..NewRule::manual("gz-01") }).await,
        "domain",
    );
    assert_invalid(store.create_rule(&NewRule::canary("gz-01", 0)).await, "percent");
    assert_invalid(store.create_rule(&NewRule::canary("gz-01", 101)).await, "percent");
    assert_invalid(store.create_rule(&NewRule { percent: Some(50), ..NewRule::manual("gz-01") }).await, "percent");
    assert_invalid(store.create_rule(&NewRule { percent: None, ..NewRule::canary("gz-01", 1) }).await, "percent");
    assert_invalid(
        store.create_rule(&NewRule { prefix: Some(net("203.0.113.7/24")), ..NewRule::manual("gz-01") }).await,
        "prefix",
    );
    assert_invalid(store.create_rule(&NewRule { isp: Some("".into()), ..NewRule::manual("gz-01") }).await, "isp");
    assert_invalid(
        store.create_rule(&NewRule { expires_at_ms: Some(1), ..NewRule::manual("gz-01") }).await,
        "expires_at_ms",
    );
    assert_eq!(store.list_rules().await.unwrap().len(), 3, "refused rules are not written");

    let json: NewRule = serde_json::from_str(r#"{"kind": "canary", "node": "gz-01", "percent": 20}"#).unwrap();
    assert_eq!(json, NewRule::canary("gz-01", 20));
    assert!(serde_json::from_str::<NewRule>(r#"{"kind": "manual", "node": "a", "id": 3}"#).is_err());

    assert_eq!(store.purge_expired_rules(now + 3_600_000).await.unwrap(), 1);
    assert_eq!(store.get_rule(canary.id).await.unwrap(), None, "the expired canary was purged");
    assert!(store.delete_rule(low.id).await.unwrap());
    assert!(!store.delete_rule(low.id).await.unwrap());
    assert_eq!(store.list_rules().await.unwrap(), vec![high]);
}

async fn nodes_in_use_cannot_be_deleted(store: Store) {
    basic_setup(&store).await;
    let rule = store.create_rule(&NewRule::manual("gz-01")).await.unwrap();
    let line = Line { node: Some("gz-01".into()), ..Line::new("vip", LineAnswer::Node, vec![net("198.51.100.0/24")]) };
    store.upsert_line(&line).await.unwrap();
    match store.delete_node("gz-01").await {
        Err(StoreError::InUse { what: "node", key, by }) => {
            assert_eq!(key, "gz-01");
            assert!(by.contains(&format!("rule {}", rule.id)) && by.contains("\"vip\""), "{by}");
        }
        other => panic!("deleting a node with rules and lines should be InUse, got {other:?}"),
    }
    assert!(store.get_node("gz-01").await.unwrap().is_some(), "the node is still there");
    store.delete_rule(rule.id).await.unwrap();
    store.delete_line("vip").await.unwrap();
    assert!(store.delete_node("gz-01").await.unwrap());
}

async fn lines_crud(store: Store) {
    basic_setup(&store).await;
    store
        .upsert_domain(&Domain {
            origin_ip: Some(Ipv4Addr::new(198, 51, 100, 80)),
            answer_mode: Default::default(),
            ecs: true,
            steering: Default::default(),
            strategy: Default::default(),
            ..domain("www.edge.lagran.net", EDGE)
        })
        .await
        .unwrap();
    let spiders = Line {
        domains: vec!["www.edge.lagran.net".into()],
        note: "search engine spiders see the origin".into(),
        ..Line::new(
            "spiders",
            LineAnswer::Origin,
            vec![net("2001:db8:1::/48"), net("66.249.64.0/19"), net("40.77.167.0/24")],
        )
    };
    let stored = store.upsert_line(&spiders).await.unwrap();
    assert!(stored.created_at_ms > 0 && stored.updated_at_ms == stored.created_at_ms);
    assert_eq!(
        stored.prefixes,
        [net("40.77.167.0/24"), net("66.249.64.0/19"), net("2001:db8:1::/48")],
        "prefixes in address order, IPv4 first"
    );
    assert_eq!(stored.domains, spiders.domains);
    assert_eq!(store.get_line("spiders").await.unwrap(), Some(stored.clone()));

    // Replacing the prefix list; the same prefix may serve another line.
    let replaced = Line { prefixes: vec![net("66.249.64.0/19")], ..spiders.clone() };
    let again = store.upsert_line(&replaced).await.unwrap();
    assert_eq!(again.prefixes, [net("66.249.64.0/19")]);
    assert_eq!(again.created_at_ms, stored.created_at_ms, "creation time kept");
    let pinned = Line { node: Some("gz-01".into()), ..Line::new("vip", LineAnswer::Node, vec![net("66.249.64.0/19")]) };
    store.upsert_line(&pinned).await.unwrap();
    let names: Vec<String> = store.list_lines().await.unwrap().into_iter().map(|l| l.name).collect();
    assert_eq!(names, ["spiders", "vip"]);
    let lines = store.list_lines().await.unwrap();
    assert_eq!(lines[0], again);
    assert_eq!(lines[1].prefixes, [net("66.249.64.0/19")]);

    assert_invalid(store.upsert_line(&Line::new("x", LineAnswer::Node, vec![])).await, "node");
    assert_invalid(
        store.upsert_line(&Line { node: Some("gz-01".into()), ..Line::new("x", LineAnswer::Origin, vec![]) }).await,
        "node",
    );
    assert_invalid(
        store.upsert_line(&Line { node: Some("nope".into()), ..Line::new("x", LineAnswer::Node, vec![]) }).await,
        "node",
    );
    assert_invalid(store.upsert_line(&Line::new("x", LineAnswer::Schedule, vec![net("10.0.0.1/8")])).await, "prefixes");
    let dup = vec![net("10.0.0.0/8"), net("10.0.0.0/8")];
    assert_invalid(store.upsert_line(&Line::new("x", LineAnswer::Schedule, dup)).await, "prefixes");
    // A missing domain refuses the whole change, including the prefix rewrite.
    let bad =
        Line { domains: vec!["nope.edge.lagran.net".into()], prefixes: vec![net("192.0.2.0/24")], ..spiders.clone() };
    assert_invalid(store.upsert_line(&bad).await, "domains");
    assert_eq!(store.get_line("spiders").await.unwrap(), Some(again), "unchanged");
    assert_eq!(store.get_line("x").await.unwrap(), None);

    let json: Line =
        serde_json::from_str(r#"{"name": "j", "answer": "schedule", "prefixes": ["192.0.2.0/24"]}"#).unwrap();
    assert_eq!(json, Line::new("j", LineAnswer::Schedule, vec![net("192.0.2.0/24")]));

    assert!(store.delete_line("spiders").await.unwrap());
    assert!(!store.delete_line("spiders").await.unwrap());
    assert_eq!(store.get_line("spiders").await.unwrap(), None);
    let orphans =
        sqlx::query("SELECT prefix FROM line_prefixes WHERE line = 'spiders'").fetch_all(store.pool()).await.unwrap();
    assert!(orphans.is_empty(), "a deleted line leaves no prefixes behind");
}

async fn geo_overrides_crud(store: Store) {
    let o = GeoOverride {
        prefix: net("203.0.113.0/24"),
        country: "中国".into(),
        province: "广东".into(),
        city: "深圳".into(),
        isp: "电信".into(),
        note: "moved from 华东 (ticket 42)".into(),
        created_by: "ops".into(),
        created_at_ms: 0,
    };
    let stored = store.upsert_geo_override(&o).await.unwrap();
    assert!(stored.created_at_ms > 0);
    assert_eq!(GeoOverride { created_at_ms: 0, ..stored.clone() }, o);
    let v6 = GeoOverride {
        prefix: net("2001:db8::/32"),
        country: "中国".into(),
        province: String::new(),
        city: String::new(),
        isp: String::new(),
        note: String::new(),
        created_by: String::new(),
        created_at_ms: 0,
    };
    store.upsert_geo_override(&v6).await.unwrap();
    let wide = GeoOverride { prefix: net("203.0.0.0/16"), ..v6.clone() };
    store.upsert_geo_override(&wide).await.unwrap();
    let order: Vec<IpNet> = store.list_geo_overrides().await.unwrap().iter().map(|o| o.prefix).collect();
    assert_eq!(order, [net("203.0.0.0/16"), net("203.0.113.0/24"), net("2001:db8::/32")]);

    let updated = GeoOverride { city: "广州".into(), ..o.clone() };
    let restored = store.upsert_geo_override(&updated).await.unwrap();
    assert_eq!(restored.city, "广州");
    assert_eq!(restored.created_at_ms, stored.created_at_ms, "creation time kept");
    assert_eq!(store.get_geo_override(&o.prefix).await.unwrap(), Some(restored));

    assert_invalid(
        store.upsert_geo_override(&GeoOverride { prefix: net("203.0.113.9/24"), ..o.clone() }).await,
        "prefix",
    );
    assert!(serde_json::from_str::<GeoOverride>(r#"{"prefix": "1.2.3.0/24", "cuntry": "x"}"#).is_err());

    assert!(store.delete_geo_override(&o.prefix).await.unwrap());
    assert!(!store.delete_geo_override(&o.prefix).await.unwrap());
    assert_eq!(store.get_geo_override(&o.prefix).await.unwrap(), None);
    assert_eq!(store.list_geo_overrides().await.unwrap().len(), 2);
}

async fn certificates_crud(store: Store) {
    let cert = Certificate {
        domain: "*.cdn.example.com".into(),
        cert_pem: "-----BEGIN CERTIFICATE-----\nMIIB\n-----END CERTIFICATE-----\n".into(),
        key_pem: "-----BEGIN PRIVATE KEY-----\nMIIE\n-----END PRIVATE KEY-----\n".into(),
        updated_at_ms: 0,
    };
    let stored = store.upsert_certificate(&cert).await.unwrap();
    assert!(stored.updated_at_ms > 0);
    assert_eq!(Certificate { updated_at_ms: 0, ..stored.clone() }, cert);
    assert!(!format!("{stored:?}").contains("MIIE"), "Debug must not print the key");
    let plain = Certificate { domain: "a.example.com".into(), ..cert.clone() };
    store.upsert_certificate(&plain).await.unwrap();
    let domains: Vec<String> = store.list_certificates().await.unwrap().into_iter().map(|c| c.domain).collect();
    assert_eq!(domains, ["*.cdn.example.com", "a.example.com"]);

    let renewed = Certificate {
        key_pem: "-----BEGIN EC PRIVATE KEY-----\nMHc\n-----END EC PRIVATE KEY-----\n".into(),
        ..cert.clone()
    };
    let renewed_stored = store.upsert_certificate(&renewed).await.unwrap();
    assert_eq!(renewed_stored.key_pem, renewed.key_pem);
    assert_eq!(store.get_certificate(&cert.domain).await.unwrap(), Some(renewed_stored));

    assert_invalid(
        store.upsert_certificate(&Certificate { cert_pem: "nope".into(), ..cert.clone() }).await,
        "cert_pem",
    );
    assert_invalid(store.upsert_certificate(&Certificate { key_pem: "nope".into(), ..cert.clone() }).await, "key_pem");
    assert_invalid(store.upsert_certificate(&Certificate { domain: "a..b".into(), ..cert.clone() }).await, "domain");

    assert!(store.delete_certificate(&cert.domain).await.unwrap());
    assert!(!store.delete_certificate(&cert.domain).await.unwrap());
    assert_eq!(store.get_certificate(&cert.domain).await.unwrap(), None);
}

async fn sites_crud(store: Store) {
    let site: Site = serde_json::from_str(
        r#"{"host": "*.img.example.com", "origin": "http://10.0.0.6:8000/static", "cache_ttl_secs": 300,
            "deny_cidrs": ["203.0.113.0/24"], "deny_paths": ["/admin"], "deny_user_agents": ["sqlmap"],
            "rate_limit_rps": 50.5, "rate_limit_burst": 100, "referer_allow": ["*.example.com"],
            "waf_case_insensitive": false, "pools": ["south", "north"]}"#,
    )
    .unwrap();
    let stored = store.upsert_site(&site).await.unwrap();
    assert!(stored.created_at_ms > 0 && stored.updated_at_ms == stored.created_at_ms);
    assert_eq!(stored.site, site, "every field round-trips");
    let minimal: Site = serde_json::from_str(r#"{"host": "a.example.com", "origin": "http://o"}"#).unwrap();
    let minimal = store.upsert_site(&minimal).await.unwrap();
    let minimal = &minimal.site;
    assert_eq!((minimal.cache_ttl_secs, minimal.rate_limit_rps, minimal.rate_limit_burst), (60, None, None));
    assert_eq!((minimal.waf_case_insensitive, &minimal.pools), (true, &None), "defaults: fold case, every node");
    let hosts: Vec<String> = store.list_sites().await.unwrap().into_iter().map(|s| s.site.host).collect();
    assert_eq!(hosts, ["*.img.example.com", "a.example.com"]);

    let changed =
        Site { origin: "http://10.0.0.7".into(), rate_limit_rps: None, rate_limit_burst: None, ..site.clone() };
    let changed_stored = store.upsert_site(&changed).await.unwrap();
    assert_eq!(changed_stored.created_at_ms, stored.created_at_ms, "a replace keeps the creation time");
    assert_eq!(store.get_site(&site.host).await.unwrap(), Some(changed_stored));

    assert_invalid(store.upsert_site(&Site { origin: "ftp://o".into(), ..site.clone() }).await, "origin");
    assert_invalid(store.upsert_site(&Site { host: "a..b".into(), ..site.clone() }).await, "host");
    assert_invalid(store.upsert_site(&Site { deny_paths: vec!["admin".into()], ..site.clone() }).await, "deny_paths");
    assert_invalid(store.upsert_site(&Site { rate_limit_rps: None, ..site.clone() }).await, "rate_limit_burst");
    assert_invalid(store.upsert_site(&Site { pools: Some(vec![]), ..site.clone() }).await, "pools");
    assert!(serde_json::from_str::<Site>(r#"{"host": "a.b", "origin": "http://o", "cert_pem": "/x"}"#).is_err());

    assert!(store.delete_site(&site.host).await.unwrap());
    assert!(!store.delete_site(&site.host).await.unwrap());
    assert_eq!(store.get_site(&site.host).await.unwrap(), None);
}

#[tokio::test]
async fn sqlite_creates_its_directory_and_reopens() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("nested/deeper/lagran.db");
    let url = format!("sqlite://{}", path.display());
    let store = Store::connect(&url).await.expect("opening a SQLite file in a missing directory");
    store.create_node(&Node::new("gz-01"), None).await.unwrap();
    let fk: i64 = sqlx::query("PRAGMA foreign_keys").fetch_one(store.pool()).await.unwrap().try_get(0).unwrap();
    assert_eq!(fk, 1, "SQLite must enforce foreign keys");
    store.close().await;
    assert!(path.is_file());

    let reopened = Store::connect(&url).await.expect("reopening runs no migration twice");
    assert_eq!(reopened.list_nodes().await.unwrap().len(), 1, "data persists");
    reopened.ping().await.unwrap();
}

#[tokio::test]
async fn in_memory_sqlite_works() {
    let store = Store::connect("sqlite::memory:").await.unwrap();
    store.create_node(&Node::new("gz-01"), None).await.unwrap();
    assert_eq!(store.list_nodes().await.unwrap().len(), 1);
}

#[tokio::test]
async fn unknown_url_schemes_are_refused() {
    match Store::connect("mysql://root:hunter2@db/lagran").await {
        Err(StoreError::Invalid { field: "database_url", reason }) => {
            assert!(!reason.contains("hunter2"), "the password must not leak: {reason}")
        }
        other => panic!("expected Invalid database_url, got {other:?}"),
    }
}

#[test]
fn urls_are_redacted() {
    assert_eq!(redact_url("postgres://u:pw@h:5432/db"), "postgres://u:***@h:5432/db");
    assert_eq!(redact_url("postgres://u@h/db"), "postgres://u@h/db");
    assert_eq!(redact_url("sqlite:///tmp/x.db"), "sqlite:///tmp/x.db");
}

#[test]
fn every_migration_file_is_embedded() {
    let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../migrations");
    for (dialect, embedded) in [("sqlite", SQLITE_MIGRATIONS), ("postgres", POSTGRES_MIGRATIONS)] {
        let mut files: Vec<String> = std::fs::read_dir(root.join(dialect))
            .unwrap_or_else(|e| panic!("reading migrations/{dialect}: {e}"))
            .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
            .filter(|f| f.ends_with(".sql"))
            .collect();
        files.sort();
        let listed: Vec<String> =
            embedded.0.iter().map(|(v, d, _)| format!("{v:04}_{}.sql", d.replace(' ', "_"))).collect();
        assert_eq!(files, listed, "migrations/{dialect} and the embedded list in store/mod.rs differ");
    }
    let versions = |e: Embedded| e.0.iter().map(|m| m.0).collect::<Vec<_>>();
    assert_eq!(versions(SQLITE_MIGRATIONS), versions(POSTGRES_MIGRATIONS), "same versions in both dialects");
}

#[test]
fn sqlite_urls_create_the_file() {
    let url = |u: &str| prepare_sqlite_url(u).unwrap();
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("a/b.db");
    assert_eq!(url(&format!("sqlite://{}", file.display())), (format!("sqlite://{}?mode=rwc", file.display()), false));
    assert!(file.parent().unwrap().is_dir(), "the parent directory is created");
    assert_eq!(
        url(&format!("sqlite:{}?mode=ro", file.display())),
        (format!("sqlite://{}?mode=ro", file.display()), false),
        "an explicit mode is kept"
    );
    assert_eq!(url("sqlite::memory:"), ("sqlite::memory:".to_string(), true));
    assert_eq!(url("sqlite://:memory:"), ("sqlite::memory:".to_string(), true));
}

mod acme;
mod asn_carriers;
mod dnssec_keys;
mod integrity;
mod site_origins;
