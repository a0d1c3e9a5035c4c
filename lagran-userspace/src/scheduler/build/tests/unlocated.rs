//! The resolver fallback in the compiler: public blocks the geo files cannot locate
//! get the unknown answer flagged `Resolver`; special-purpose ranges do not.

use super::*;
use crate::geo::{IpVersion, Xdb, write_xdb};

/// 11.0.0.0/8 and 10.0.0.0/8 unlocated ("0|0|0|0|0"), 58.60.0.0/15 Shenzhen
/// Telecom, the rest the US.
fn partitions_with_a_hole() -> PartitionTable {
    let ip = |s: &str| u32::from(s.parse::<Ipv4Addr>().unwrap()) as u128;
    let us = "美国|0|0|0|0".to_string();
    let ranges = vec![
        (0, ip("9.255.255.255"), us.clone()),
        (ip("10.0.0.0"), ip("11.255.255.255"), "0|0|0|0|0".to_string()),
        (ip("12.0.0.0"), ip("58.59.255.255"), us.clone()),
        (ip("58.60.0.0"), ip("58.61.255.255"), "中国|0|广东省|深圳市|电信".to_string()),
        (ip("58.62.0.0"), u32::MAX as u128, us),
    ];
    let xdb = Xdb::from_bytes(write_xdb(IpVersion::V4, &ranges).unwrap()).unwrap();
    PartitionTable::build(&GeoDb::from_xdbs(Some(xdb), None), &[])
}

#[test]
fn unlocated_public_blocks_are_flagged_and_reserved_ones_are_not() {
    let s = ScheduleSettings::default();
    let t = build_route_table(
        1,
        &seed_inputs(),
        &partitions_with_a_hole(),
        &s,
        &s.policy(),
        &mut BuildState::default(),
        &Change::Everything,
    );
    let (a, scope) = answer(&t, APEX, "11.1.2.3");
    assert_eq!(a.state, AnswerState::Resolver, "public and unlocated: the resolver decides");
    assert_eq!(scope, 8, "the block's own width, not merged with 10/8");
    let (u, scope) = answer(&t, APEX, "10.1.2.3");
    assert_ne!(u.state, AnswerState::Resolver, "RFC 1918 stays unknown");
    assert_eq!(scope, 8);
    assert_eq!((&u.ipv4, &u.node), (&a.ipv4, &a.node), "the flagged answer is the unknown one");
    let (g, _) = answer(&t, APEX, "58.60.1.1");
    assert_eq!(g.node.as_deref(), Some("gz-01"));
    assert_ne!(g.state, AnswerState::Resolver);
}

#[test]
fn a_prefix_rule_beats_the_resolver_fallback() {
    let mut inputs = seed_inputs();
    let mut r = rule(RuleKind::Manual, "kr-01", 100);
    r.prefix = Some("11.1.0.0/16".parse().unwrap());
    inputs.rules.push(r);
    let s = ScheduleSettings::default();
    let t = build_route_table(
        1,
        &inputs,
        &partitions_with_a_hole(),
        &s,
        &s.policy(),
        &mut BuildState::default(),
        &Change::Everything,
    );
    let (a, _) = answer(&t, APEX, "11.1.2.3");
    assert_eq!(a.node.as_deref(), Some("kr-01"));
    assert_ne!(a.state, AnswerState::Resolver, "the operator named this prefix");
    let (a, _) = answer(&t, APEX, "11.2.0.1");
    assert_eq!(a.state, AnswerState::Resolver);
}

#[test]
fn nothing_is_flagged_when_every_client_gets_the_same_answer() {
    let s = ScheduleSettings::default();
    let none = PartitionTable::default();
    let t =
        build_route_table(1, &seed_inputs(), &none, &s, &s.policy(), &mut BuildState::default(), &Change::Everything);
    let (a, scope) = answer(&t, APEX, "11.1.2.3");
    assert_ne!(a.state, AnswerState::Resolver, "no geo file: the resolver would get the same answer");
    assert_eq!(scope, 0, "one answer for all");
}
