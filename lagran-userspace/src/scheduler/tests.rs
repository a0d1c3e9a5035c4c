//! The running scheduler: what it publishes, rollback and freeze, confirmation.

use std::sync::Arc;

use std::time::Instant;

use tokio_util::sync::CancellationToken;

use super::*;
use crate::clock::now_ms;
use crate::dns::settings::DnsSettings;
use crate::model::NodeStatus;
use crate::route_table::RouteTable;
use crate::route_table::empty_shared;
use crate::store::{Heartbeat, NodePatch};

const APEX: &str = "edge.lagran.net";

async fn demo_store(url: &str) -> Store {
    let store = Store::connect(url).await.unwrap();
    crate::demo::install(&store).await.unwrap();
    store
}

fn scheduler(store: Store) -> Arc<Scheduler> {
    Arc::new(Scheduler::new(
        store,
        ScheduleSettings::default(),
        HealthMonitor::new(Default::default()),
        GeoDb::empty(),
        empty_shared(),
    ))
}

/// The node the apex answers for a client (the geo data is empty: one partition).
fn primary(t: &RouteTable) -> String {
    let name = t.scheduled(APEX).expect("the demo apex is scheduled");
    name.answer_for("8.8.8.8".parse().unwrap()).0.node.clone().expect("a node answers")
}

/// Disables the apex's current primary, so the next recompute serves something new.
async fn disable_primary(s: &Scheduler) -> String {
    let node = primary(&s.table().load());
    let patch = NodePatch { status: Some(NodeStatus::Disabled), ..Default::default() };
    s.store.update_node(&node, &patch).await.unwrap();
    node
}

/// Records a heartbeat of `node` in the store, as the API does; the row its statement returned.
async fn heartbeat_of(s: &Scheduler, node: &str, cpu_usage: f64, at_ms: i64) -> crate::model::Node {
    let hb = Heartbeat { cpu_usage, memory_usage: 5.0, bandwidth_mbps: 1.0, conns: 3 };
    s.store.record_heartbeat(node, &hb, at_ms).await.unwrap()
}

async fn heartbeat(s: &Scheduler, node: &str) -> crate::model::Node {
    heartbeat_of(s, node, 10.0, now_ms()).await
}

#[tokio::test]
async fn a_recompute_that_changes_nothing_publishes_nothing() {
    let s = scheduler(demo_store("sqlite::memory:").await);
    let mut versions = s.subscribe();
    let first = s.recompute().await.unwrap();
    versions.borrow_and_update();
    let hb = Heartbeat { cpu_usage: 20.0, memory_usage: 30.0, bandwidth_mbps: 10.0, conns: 5 };
    for node in ["gz-01", "hk-01", "kr-01"] {
        s.store.record_heartbeat(node, &hb, now_ms()).await.unwrap();
    }
    let after_first_heartbeats = s.recompute().await.unwrap();
    for _ in 0..20 {
        for node in ["gz-01", "hk-01", "kr-01"] {
            s.store.record_heartbeat(node, &hb, now_ms()).await.unwrap();
        }
        let t = s.recompute().await.unwrap();
        assert_eq!(t.version, after_first_heartbeats.version, "identical heartbeats publish no version");
    }
    assert!(after_first_heartbeats.version >= first.version);
    assert_eq!(s.table().load().version, after_first_heartbeats.version);
    let (_, recomputes) = s.stats();
    assert_eq!(recomputes, 22, "every recompute ran; none published");

    // A real change publishes, under a higher version.
    disable_primary(&s).await;
    let changed = s.recompute().await.unwrap();
    assert!(changed.version > after_first_heartbeats.version, "a change publishes a newer version");
    assert_eq!(*versions.borrow_and_update(), changed.version, "followers hear of the new version");
}

#[tokio::test]
async fn a_rollback_republishes_the_old_content_under_a_higher_version() {
    let s = scheduler(demo_store("sqlite::memory:").await);
    let before = s.recompute().await.unwrap();
    let disabled = disable_primary(&s).await;
    let after = s.recompute().await.unwrap();
    assert!(after.version > before.version);
    assert_ne!(primary(&after), disabled);

    let rolled = s.rollback().await.unwrap();
    assert!(
        rolled.version > after.version,
        "the rollback is the newest version: {} vs {}",
        rolled.version,
        after.version
    );
    assert!(rolled.serves_same_as(&before), "the rollback serves the old content");
    assert_eq!(primary(&rolled), disabled);
    assert_eq!(*s.subscribe().borrow(), rolled.version, "followers are told about the rollback's version");
    assert!(s.frozen());
    // Held: recomputes change nothing until resumed.
    assert_eq!(s.recompute().await.unwrap().version, rolled.version, "a frozen table is not recomputed");
    s.resume().await.unwrap();
    let resumed = s.recompute().await.unwrap();
    assert!(resumed.version > rolled.version);
    assert_eq!(primary(&resumed), primary(&after), "after resume the recompute publishes the current state again");
}

#[tokio::test]
async fn a_recompute_in_flight_cannot_publish_over_a_rollback() {
    let s = scheduler(demo_store("sqlite::memory:").await);
    let before = s.recompute().await.unwrap();
    disable_primary(&s).await;
    s.recompute().await.unwrap();
    let held_content = before.clone();
    // A change the in-flight recompute would publish.
    let second = disable_primary(&s).await;

    // Hold the build lock as a recompute in flight does, queue a recompute and
    // a rollback behind it, then let them go in order.
    let guard = s.build.lock().await;
    let recompute = tokio::spawn({
        let s = s.clone();
        async move { s.recompute().await.unwrap() }
    });
    tokio::time::sleep(Duration::from_millis(50)).await;
    let rollback = tokio::spawn({
        let s = s.clone();
        async move { s.rollback().await.unwrap() }
    });
    tokio::time::sleep(Duration::from_millis(50)).await;
    assert!(!rollback.is_finished(), "the rollback waits for the build lock");
    // And a recompute queued after the rollback.
    let late = tokio::spawn({
        let s = s.clone();
        async move { s.recompute().await.unwrap() }
    });
    tokio::time::sleep(Duration::from_millis(50)).await;
    drop(guard);
    let in_flight = recompute.await.unwrap();
    let rolled = rollback.await.unwrap();
    let late = late.await.unwrap();
    assert!(primary(&in_flight) != second, "the in-flight recompute published the change first");
    assert!(rolled.version > in_flight.version, "the rollback comes after the recompute it waited for");
    assert_eq!(late.version, rolled.version, "a recompute after the rollback publishes nothing over it");
    assert_eq!(s.table().load().version, rolled.version, "the rollback's table is the one served");
    assert!(!rolled.serves_same_as(&in_flight), "the rollback undid the in-flight recompute's table");
    let _ = held_content;
}

#[tokio::test]
async fn the_freeze_survives_a_restart() {
    let dir = tempfile::tempdir().unwrap();
    let url = format!("sqlite://{}", dir.path().join("lagran.db").display());
    let s = scheduler(demo_store(&url).await);
    let before = s.recompute().await.unwrap();
    disable_primary(&s).await;
    s.recompute().await.unwrap();
    let rolled = s.rollback().await.unwrap();
    drop(s);

    // A new control process on the same database.
    let s = scheduler(Store::connect(&url).await.unwrap());
    assert!(s.restore_freeze().await.unwrap(), "the freeze is found in the store");
    assert!(s.frozen());
    let t = s.recompute().await.unwrap();
    assert!(t.serves_same_as(&before), "the held content is served after the restart");
    assert!(t.version > rolled.version, "and republished under a newer version");
    assert_eq!(s.table().load().version, t.version);
    s.resume().await.unwrap();
    assert!(!s.frozen());
    drop(s);
    let s = scheduler(Store::connect(&url).await.unwrap());
    assert!(!s.restore_freeze().await.unwrap(), "resume ends the freeze in the store too");
}

#[tokio::test]
async fn a_quiet_table_is_confirmed_not_stale() {
    let s = scheduler(demo_store("sqlite::memory:").await);
    let settings = DnsSettings { stale_secs: 1, ..DnsSettings::default() };
    assert!(s.confirmation().is_stale(settings.stale_secs, now_ms()), "nothing confirmed before the first recompute");
    let t = s.recompute().await.unwrap();
    assert!(!s.confirmation().is_stale(settings.stale_secs, now_ms()));
    // The run loop keeps confirming an unchanged table, long past its age limit.
    let shutdown = CancellationToken::new();
    let running = tokio::spawn(s.clone().run(shutdown.clone()));
    tokio::time::sleep(Duration::from_millis(2_500)).await;
    assert_eq!(s.table().load().version, t.version, "a quiet cluster publishes nothing");
    assert!(now_ms() - t.generated_at_ms > 2_000, "the table is older than DNS_STALE_SECS");
    assert!(!s.confirmation().is_stale(settings.stale_secs, now_ms()), "but confirmed, so not stale");
    assert!(s.confirmation().ms_ago(now_ms()).unwrap() < 1_500);
    shutdown.cancel();
    running.await.unwrap();
}

#[tokio::test]
async fn a_recompute_purges_expired_rules_from_the_store() {
    let s = scheduler(demo_store("sqlite::memory:").await);
    let mut rule = crate::store::NewRule::manual("kr-01");
    rule.expires_at_ms = Some(now_ms() + 50);
    s.store.create_rule(&rule).await.unwrap();
    let lasting = s.store.create_rule(&crate::store::NewRule::manual("hk-01")).await.unwrap();
    tokio::time::sleep(std::time::Duration::from_millis(80)).await;
    s.recompute().await.unwrap();
    let left: Vec<i64> = s.store.list_rules().await.unwrap().iter().map(|r| r.id).collect();
    assert_eq!(left, vec![lasting.id], "the expired rule is deleted, the lasting one stays");
}

/// A demo node other than `node`.
fn other_than(node: &str) -> &'static str {
    ["gz-01", "hk-01", "kr-01"].into_iter().find(|n| *n != node).expect("three demo nodes")
}

#[tokio::test]
async fn node_changes_reuse_the_lists_and_a_change_of_rules_reads_them() {
    let s = scheduler(demo_store("sqlite::memory:").await);
    let before = primary(&s.recompute().await.unwrap());
    let other = other_than(&before);
    // A rule written behind the scheduler's back (no change told): a node
    // change builds from the lists as last read.
    s.store.create_rule(&crate::store::NewRule::manual(other)).await.unwrap();
    let t = s.recompute_after(Change::Node(before.clone())).await.unwrap();
    assert_eq!(primary(&t), before, "a node change does not read the rules again");
    let t = s.recompute_after(Change::Liveness).await.unwrap();
    assert_eq!(primary(&t), before, "nor does a liveness change");
    // Told of rules (as a standby's notification tells), the lists are read again.
    let t = s.recompute_after(Change::Rules).await.unwrap();
    assert_eq!(primary(&t), other, "the manual rule pins the apex");
}

#[tokio::test]
async fn a_new_term_and_a_full_recompute_read_the_lists_again() {
    let s = scheduler(demo_store("sqlite::memory:").await);
    let before = primary(&s.recompute().await.unwrap());
    let other = other_than(&before);
    s.store.create_rule(&crate::store::NewRule::manual(other)).await.unwrap();
    s.lead(1, 0).await;
    let t = s.recompute_after(Change::Liveness).await.unwrap();
    assert_eq!(primary(&t), other, "a new term forgets the lists: the rule is read");
    let rule = s.store.list_rules().await.unwrap()[0].id;
    s.store.delete_rule(rule).await.unwrap();
    let t = s.recompute().await.unwrap();
    assert_eq!(primary(&t), before, "a full recompute reads the lists: the rule is gone");
}

#[tokio::test]
async fn a_cached_rule_that_expires_ends_the_reuse_and_is_purged() {
    let s = scheduler(demo_store("sqlite::memory:").await);
    let before = primary(&s.recompute().await.unwrap());
    let other = other_than(&before);
    let mut rule = crate::store::NewRule::manual(other);
    rule.expires_at_ms = Some(now_ms() + 300);
    s.store.create_rule(&rule).await.unwrap();
    let t = s.recompute_after(Change::Rules).await.unwrap();
    assert_eq!(primary(&t), other, "the rule pins the apex while it lasts");
    tokio::time::sleep(std::time::Duration::from_millis(400)).await;
    let t = s.recompute_after(Change::Liveness).await.unwrap();
    assert_eq!(primary(&t), before, "expired, the cached rule no longer pins");
    assert!(s.store.list_rules().await.unwrap().is_empty(), "and the recompute purged it from the store");
}

#[tokio::test]
async fn load_reports_wait_for_the_settle_time_and_other_changes_do_not() {
    let s = scheduler(demo_store("sqlite::memory:").await);
    assert_eq!(s.pending.load_wait(), None, "nothing pending");
    s.recompute().await.unwrap();
    s.notify_load(&heartbeat(&s, "gz-01").await);
    s.notify_load(&heartbeat(&s, "hk-01").await);
    let wait = s.pending.load_wait().expect("heartbeats right after a recompute wait");
    assert!(wait <= LOAD_SETTLE, "{wait:?}");
    assert_eq!(s.pending.peek(), Some(Change::Liveness), "two nodes' loads, folded together");
    // A status change goes at once, and takes the folded loads with it.
    s.notify(Change::Node("kr-01".into()));
    assert_eq!(s.pending.load_wait(), None);
    // A load report after it does not make the status change wait.
    s.notify_load(&heartbeat(&s, "gz-01").await);
    assert_eq!(s.pending.load_wait(), None);
}

#[tokio::test]
async fn a_node_change_reads_that_node_again_and_a_full_recompute_reads_them_all() {
    let s = scheduler(demo_store("sqlite::memory:").await);
    let first = s.recompute().await.unwrap();
    let before = primary(&first);
    // A write the scheduler is told of by name moves the answer (the cache reads that node again).
    let node = disable_primary(&s).await;
    let t = s.recompute_after(Change::Node(node.clone())).await.unwrap();
    let moved = primary(&t);
    assert_ne!(moved, before, "{node} was disabled and told by name: the answer must move");
    // Told of a node change through the loop's queue, merged with another (Liveness),
    // the written names are read again too.
    let patch = NodePatch { status: Some(NodeStatus::Online), ..Default::default() };
    s.store.update_node(&node, &patch).await.unwrap();
    s.queue(Change::Node(node.clone()), false);
    s.queue(Change::Node("kr-01".into()), false);
    let merged = s.pending.take().unwrap();
    assert_eq!(merged, Change::Liveness);
    let t = s.recompute_after(merged).await.unwrap();
    assert_eq!(primary(&t), before, "{node} is back online: the answer returns");
    // A write told to nobody is read by the next full recompute (the periodic safety net).
    let node = disable_primary(&s).await;
    let t = s.recompute_after(Change::Liveness).await.unwrap();
    assert_eq!(primary(&t), before, "a write the scheduler was not told of is not read by a liveness recompute");
    let t = s.recompute().await.unwrap();
    assert_ne!(primary(&t), before, "a full recompute reads {node} again");
}

#[tokio::test]
async fn a_standby_passes_its_heartbeats_to_the_leader_which_reads_no_node() {
    let store = demo_store("sqlite::memory:").await;
    let leader = scheduler(store.clone());
    let standby = scheduler(store);
    standby.join_cluster();
    leader.recompute().await.unwrap();
    let t = now_ms();
    standby.notify_load(&heartbeat_of(&standby, "gz-01", 77.0, t).await);
    standby.notify_load(&heartbeat_of(&standby, "hk-01", 66.0, t).await);
    assert!(standby.pending.peek().is_none(), "a standby builds nothing: the reports are for the leader");
    // Written to the store but told to nobody: only a read of the node would see it.
    heartbeat_of(&standby, "gz-01", 11.0, t + 1).await;
    tokio::time::timeout(Duration::from_secs(1), standby.forwarder().heard()).await.expect("the standby is woken");
    let payloads = standby.forwarder().take_payloads();
    assert_eq!(payloads.len(), 1, "{payloads:?}");
    assert!(standby.forwarder().take_payloads().is_empty(), "passed on once");
    for p in &payloads {
        leader.notify_from_standby(p);
    }
    assert!(leader.pending.load_wait().is_some(), "a standby's load reports fold like the leader's own");
    let merged = leader.pending.take().unwrap();
    leader.pending.note_written(&merged);
    let nodes = leader.pending.nodes(&leader.store).await.unwrap();
    let cpu = |nodes: &[crate::model::Node], name: &str| nodes.iter().find(|n| n.name == name).unwrap().cpu_usage;
    assert_eq!((cpu(&nodes, "gz-01"), cpu(&nodes, "hk-01")), (77.0, 66.0), "the standby's figures, no node read");
    // A standby's change that names no node (merged writes): every node is read again.
    leader.notify_from_standby("liveness");
    let merged = leader.pending.take().unwrap();
    leader.pending.note_written(&merged);
    let nodes = leader.pending.nodes(&leader.store).await.unwrap();
    assert_eq!(cpu(&nodes, "gz-01"), 11.0, "the heartbeat nobody was told of, read");
    // A payload that cannot be read: a full recompute, nothing guessed.
    leader.notify_from_standby("loads:[[\"gz-01\"");
    assert_eq!(leader.pending.take(), Some(Change::Everything));
}

#[tokio::test]
async fn a_silent_node_leaves_the_answers_when_its_heartbeat_timeout_ends() {
    let health = HealthMonitor::new(crate::health::HealthSettings { heartbeat_timeout_secs: 1, ..Default::default() });
    let s = Arc::new(Scheduler::new(
        demo_store("sqlite::memory:").await,
        ScheduleSettings::default(),
        health,
        GeoDb::empty(),
        empty_shared(),
    ));
    let first = s.recompute().await.unwrap();
    let before = primary(&first);
    s.notify_load(&heartbeat(&s, &before).await);
    let token = CancellationToken::new();
    let running = tokio::spawn(s.clone().run(token.clone()));
    // Nothing else happens: no write, no probe, the periodic recompute 30 s away.
    let deadline = Instant::now() + Duration::from_secs(10);
    while primary(&s.table().load()) == before && Instant::now() < deadline {
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let moved = Instant::now() + Duration::from_secs(10) - deadline;
    token.cancel();
    running.await.unwrap();
    assert_ne!(primary(&s.table().load()), before, "{before} went silent for its 1 s timeout: it must leave");
    assert!(moved < Duration::from_secs(10), "left after {moved:?}, at the timeout, not at the 30 s recompute");
}

#[tokio::test]
async fn heartbeats_reach_the_build_from_their_own_statements_not_from_a_read() {
    let s = scheduler(demo_store("sqlite::memory:").await);
    s.recompute().await.unwrap();
    let t = now_ms();
    // A lone report is queued without its node's name, so nothing reads that node.
    s.notify_load(&heartbeat_of(&s, "kr-01", 44.0, t - 1).await);
    assert_eq!(s.pending.peek(), Some(Change::Liveness), "a load report names no node");
    s.notify_load(&heartbeat_of(&s, "gz-01", 77.0, t).await);
    s.notify_load(&heartbeat_of(&s, "hk-01", 66.0, t).await);
    // Written to the store but told to nobody: only a read of the node would see it.
    heartbeat_of(&s, "gz-01", 11.0, t + 1).await;
    heartbeat_of(&s, "kr-01", 12.0, t).await;
    let merged = s.pending.take().unwrap();
    assert_eq!(merged, Change::Liveness, "three nodes' reports, folded together");
    s.pending.note_written(&merged);
    let nodes = s.pending.nodes(&s.store).await.unwrap();
    let cpu = |name: &str| nodes.iter().find(|n| n.name == name).unwrap().cpu_usage;
    assert_eq!(
        (cpu("gz-01"), cpu("hk-01"), cpu("kr-01")),
        (77.0, 66.0, 44.0),
        "the reported figures, and no node read again"
    );
    // A status written after the heartbeat is read again and kept: the figures heard do not undo it.
    let patch = NodePatch { status: Some(NodeStatus::Disabled), ..Default::default() };
    s.store.update_node("hk-01", &patch).await.unwrap();
    s.notify_load(&heartbeat_of(&s, "kr-01", 55.0, t).await);
    s.queue(Change::Node("hk-01".into()), false);
    let merged = s.pending.take().unwrap();
    s.pending.note_written(&merged);
    let nodes = s.pending.nodes(&s.store).await.unwrap();
    let hk = nodes.iter().find(|n| n.name == "hk-01").unwrap();
    assert_eq!((hk.status, hk.cpu_usage), (NodeStatus::Disabled, 66.0));
    assert_eq!(nodes.iter().find(|n| n.name == "kr-01").unwrap().cpu_usage, 55.0);
    // A full recompute reads the store: the heartbeat nobody was told of is there.
    s.recompute().await.unwrap();
    s.pending.note_written(&Change::Everything);
    let nodes = s.pending.nodes(&s.store).await.unwrap();
    assert_eq!(nodes.iter().find(|n| n.name == "gz-01").unwrap().cpu_usage, 11.0);
}
