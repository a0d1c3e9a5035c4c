//! Seed 001 §3.4: an ECS address the geo files cannot locate is answered for
//! the resolver's address, with the unlocated block's width as SCOPE.

use super::*;

/// `edge.lagran.net`: 10.0.0.0/8 (private) → the unknown answer, 11.0.0.0/8
/// (public, unlocated) → the unknown answer flagged `Resolver`, 58.60.0.0/15
/// → gz-01, the rest → us-01.
fn unlocated_table(ecs_on: bool) -> RouteTable {
    let unknown = ans(30, &["203.0.113.10"], &[], Some("default-01"));
    let flagged = Answer { state: AnswerState::Resolver, ..unknown.clone() };
    let name = ScheduledName {
        ecs: ecs_on,
        name: ZONE.into(),
        id: 1,
        answers: vec![
            ans(30, &["203.0.113.30"], &[], Some("us-01")),
            unknown,
            flagged,
            ans(30, &["203.0.113.21"], &[], Some("gz-01")),
        ],
        v4: PrefixMapV4::from_ranges(
            [
                r4("10.0.0.0", "10.255.255.255", 1),
                r4("11.0.0.0", "11.255.255.255", 2),
                r4("58.60.0.0", "58.61.255.255", 3),
            ],
            0,
        ),
        v6: PrefixMapV6::uniform(0),
    };
    RouteTable::new(7, NOW - 1000, vec![ZoneRoutes { zone: zone(), names: vec![name] }])
}

fn ask_unlocated(ecs_addr: &str, source_len: u8, resolver: &str, ecs_on: bool) -> (Vec<Ipv4Addr>, u8) {
    let m = ecs(msg(ZONE, RecordType::A), ecs_addr, source_len);
    let (_, m) = ask_with(&m, resolver, &unlocated_table(ecs_on), &settings());
    (a_addrs(&m), ecs_of(&m).expect("ECS echoed").scope_prefix())
}

#[test]
fn an_unlocated_public_ecs_address_is_answered_for_the_resolver_with_the_blocks_width() {
    assert_eq!(
        ask_unlocated("11.1.2.0", 24, "58.60.1.1", true),
        (vec![v4("203.0.113.21")], 8),
        "the Shenzhen resolver's answer (gz-01), SCOPE = the unlocated /8"
    );
    assert_eq!(ask_unlocated("11.1.2.0", 24, "8.8.8.8", true), (vec![v4("203.0.113.30")], 8), "another resolver");
}

#[test]
fn an_unlocated_resolver_too_gets_the_unknown_answer() {
    assert_eq!(ask_unlocated("11.1.2.0", 24, "11.9.9.9", true), (vec![v4("203.0.113.10")], 8));
}

#[test]
fn a_private_ecs_address_stays_in_the_unknown_partition() {
    assert_eq!(
        ask_unlocated("10.1.2.0", 24, "58.60.1.1", true),
        (vec![v4("203.0.113.10")], 8),
        "RFC 1918 is not looked up and not sent to the resolver's answer (SPEC §3)"
    );
}

#[test]
fn without_a_usable_ecs_address_the_rule_has_nothing_to_do() {
    // SOURCE PREFIX-LENGTH 0: the packet's source decides, scope 0.
    assert_eq!(ask_unlocated("0.0.0.0", 0, "11.9.9.9", true), (vec![v4("203.0.113.10")], 0));
    // ECS off for the name: the resolver decides, scope 0.
    assert_eq!(ask_unlocated("58.60.0.0", 24, "11.9.9.9", false), (vec![v4("203.0.113.10")], 0));
    // A located ECS address is answered for itself.
    assert_eq!(ask_unlocated("58.60.0.0", 24, "11.9.9.9", true), (vec![v4("203.0.113.21")], 15));
}
