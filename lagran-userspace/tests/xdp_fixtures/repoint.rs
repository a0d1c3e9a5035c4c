//! A node going down in a signed zone: the scheduled name's answer for a
//! block is re-pointed at a new answer set, and the program answers that
//! block signed at every step of the sync — the new answer's RRSIG is in
//! `lagran_rrsig` before (never after) the route that points at it, so no
//! packet finds the new answer without its signature and falls back to
//! userspace.

use std::net::Ipv4Addr;

use hickory_proto::op::Message;
use hickory_proto::rr::RecordType;
use lagran::dnssec::{KeySnapshot, TableSigner};
use lagran::model::ZoneDnssec;
use lagran::xdp::SyncStep;

use super::*;

/// What the program did with a DO query for `edge.lagran.net`: its A
/// addresses and the type each RRSIG covers, or `None` when it passed it.
fn outcome(prog: &LoadedXdp, frame: &[u8]) -> Option<(Vec<Ipv4Addr>, Vec<RecordType>)> {
    let out = prog.test_run(frame).expect("BPF_PROG_TEST_RUN");
    if out.action != XDP_TX {
        return None;
    }
    let msg = Message::from_vec(check_tx_headers(frame, &out.frame)).expect("a DNS message");
    let addrs = msg.answers().iter().filter_map(|r| r.data().as_a()).map(|a| a.0).collect();
    let covered =
        msg.answers().iter().filter_map(|r| r.data().as_dnssec()?.as_rrsig()).map(|s| s.type_covered()).collect();
    Some((addrs, covered))
}

/// The fixture table signed, with 192.0.2.20 down: 10/8's answer becomes
/// 192.0.2.21 alone, an answer set no table had before.
fn after_the_node_went_down() -> RouteTable {
    let mut t = table();
    let zone = &mut t.zones[0];
    zone.zone.dnssec = Some(ZoneDnssec::default());
    std::sync::Arc::make_mut(&mut zone.names[0].answers)[1] = answer(10, &["192.0.2.21"]);
    let t = RouteTable::new(9, now_ms(), t.zones);
    let signatures = TableSigner::new()
        .sign(&t, &KeySnapshot::single(&t.zones[0].zone.name, ZoneDnssec::default()).expect("test keys"), COOKIE_NOW)
        .expect("signing the table");
    t.with_signatures(signatures)
}

#[test]
fn a_re_pointed_answer_is_answered_signed_at_every_step_of_the_sync() {
    let mut fx = Fixture::signed();
    let query = Frame::new().from("10.1.2.3").build(&Dns::a("edge.lagran.net").opt(1232, 0, true, &[]).bytes());
    let (old, new) = (vec![ip("192.0.2.20"), ip("192.0.2.21")], vec![ip("192.0.2.21")]);
    assert_eq!(outcome(&fx.prog, &query), Some((old.clone(), vec![RecordType::A])), "before: both nodes, signed");

    let t = after_the_node_went_down();
    let mut seen = Vec::new();
    let prog = &fx.prog;
    let stats = fx
        .writer
        .sync_observed(&t, &settings(), &mut |step| seen.push((step, outcome(prog, &query))))
        .expect("the sync");
    assert!(stats.answers_written >= 1 && stats.rrsigs_written >= 1 && stats.routes_upserted >= 1, "{stats:?}");
    let steps: Vec<SyncStep> = seen.iter().map(|s| s.0).collect();
    assert_eq!(
        steps,
        [SyncStep::Answers, SyncStep::Routes, SyncStep::Names, SyncStep::Removed, SyncStep::Freed],
        "every step observed"
    );
    for (step, got) in &seen {
        let Some((addrs, covered)) = got else {
            panic!("after {step:?} the program passed the DO query: a route points at an answer without its RRSIG")
        };
        assert_eq!(covered, &vec![RecordType::A], "after {step:?}: answered with one RRSIG over the A RRset");
        assert!(addrs == &old || addrs == &new, "after {step:?}: the old answer or the new one, got {addrs:?}");
    }
    assert_eq!(seen[0].1.as_ref().map(|o| &o.0), Some(&old), "the new answer waits for its route");
    assert_eq!(seen[1].1.as_ref().map(|o| &o.0), Some(&new), "re-pointed by the route step, and signed already");
    // Once synced the signed answer is userspace's, byte for byte.
    fx.table = t;
    fx.answered(&query);
}
