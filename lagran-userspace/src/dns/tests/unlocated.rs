//! An ECS address the geo files cannot locate is answered for
//! the resolver's address, with the unlocated block's width as SCOPE.

use super::*;

/// `edge.lagran.net`: 10.0.0.0/8 (private) → the unknown answer, 11.0.0.0/8
/// (public, unlocated) → the unknown answer flagged `Resolver`, 58.60.0.0/15
/// → gz-01, the rest → us-01. IPv6: fc00::/7 (private) → unknown, 2a0a::/16
/// (public, unlocated) → flagged, 240e::/20 → gz-01, the rest → us-01.
fn unlocated_table(ecs_on: bool) -> RouteTable {
    let unknown = ans(30, &["203.0.113.10"], &[], Some("default-01"));
    let flagged = Answer { state: AnswerState::Resolver, ..unknown.clone() };
    let name = ScheduledName {
        ecs: ecs_on,
        name: ZONE.into(),
        id: 1,
        answers: std::sync::Arc::new(vec![
            ans(30, &["203.0.113.30"], &[], Some("us-01")),
            unknown,
            flagged,
            ans(30, &["203.0.113.21"], &[], Some("gz-01")),
        ]),
        v4: PrefixMapV4::from_ranges(
            [
                r4("10.0.0.0", "10.255.255.255", 1),
                r4("11.0.0.0", "11.255.255.255", 2),
                r4("58.60.0.0", "58.61.255.255", 3),
            ],
            0,
        ),
        v6: PrefixMapV6::from_ranges(
            [
                (u128::from(v6("240e::")), u128::from(v6("240e:fff:ffff:ffff:ffff:ffff:ffff:ffff")), 3),
                (u128::from(v6("2a0a::")), u128::from(v6("2a0a:ffff:ffff:ffff:ffff:ffff:ffff:ffff")), 2),
                (u128::from(v6("fc00::")), u128::from(v6("fdff:ffff:ffff:ffff:ffff:ffff:ffff:ffff")), 1),
            ],
            0,
        ),
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
        "RFC 1918 is not looked up and not sent to the resolver's answer"
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

#[test]
fn the_rule_holds_for_ipv6_ecs_addresses() {
    assert_eq!(
        ask_unlocated("2a0a:1:2::", 48, "58.60.1.1", true),
        (vec![v4("203.0.113.21")], 16),
        "an unlocated public IPv6 block: the Shenzhen resolver's answer, SCOPE = the block's /16"
    );
    assert_eq!(ask_unlocated("2a0a:1:2::", 48, "2a0a:9::53", true), (vec![v4("203.0.113.10")], 16), "unlocated too");
    assert_eq!(
        ask_unlocated("2a0a:1:2::", 48, "240e::53", true),
        (vec![v4("203.0.113.21")], 16),
        "an IPv6 resolver decides as well"
    );
    assert_eq!(ask_unlocated("fd00:1::", 48, "58.60.1.1", true), (vec![v4("203.0.113.10")], 7), "ULA stays unknown");
    assert_eq!(ask_unlocated("240e:1::", 48, "11.9.9.9", true), (vec![v4("203.0.113.21")], 20), "located: itself");
}
