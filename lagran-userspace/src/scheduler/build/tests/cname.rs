//! CNAME mode in the compiler: answers carry the chosen node's hostname, and
//! node hostnames inside the served zones travel with the table.

use super::*;

fn cname_inputs() -> Inputs {
    let mut inputs = seed_inputs();
    inputs.nodes[0].hostname = Some("GZ-01.edge.lagran.net.".into());
    inputs.nodes[1].hostname = Some("hk-01.nodes.example.org".into());
    // kr-01 has none.
    for (name, mode) in [("cdn.edge.lagran.net", AnswerMode::Cname), ("www.edge.lagran.net", AnswerMode::A)] {
        inputs.domains.push(Domain {
            name: name.into(),
            zone: APEX.into(),
            pool: DEFAULT_POOL.into(),
            ttl: None,
            origin_ip: None,
            answer_mode: mode,
            ecs: true,
            steering: Default::default(),
            strategy: Default::default(),
        });
    }
    inputs
}

#[test]
fn cname_mode_answers_carry_the_primarys_hostname_and_a_mode_answers_none() {
    let t = build(&cname_inputs(), &ScheduleSettings::default());
    let (a, scope) = answer(&t, "cdn.edge.lagran.net", "58.60.1.1");
    assert_eq!(a.node.as_deref(), Some("gz-01"));
    assert_eq!(a.hostname.as_deref(), Some("gz-01.edge.lagran.net"), "as configured, without the dot");
    assert!(scope > 0, "the partition's scope, as for A");
    let (a, _) = answer(&t, "cdn.edge.lagran.net", "8.8.8.8");
    assert_eq!(a.node.as_deref(), Some("hk-01"));
    assert_eq!(a.hostname.as_deref(), Some("hk-01.nodes.example.org"), "a hostname in another server's zone");
    for name in ["www.edge.lagran.net", APEX] {
        let n = t.scheduled(name).unwrap();
        assert!(n.answers.iter().all(|a| a.hostname.is_none()), "{name} is in address mode");
    }
}

#[test]
fn a_primary_without_hostname_keeps_its_addresses() {
    let mut inputs = cname_inputs();
    inputs.nodes[0].hostname = None;
    let t = build(&inputs, &ScheduleSettings::default());
    let (a, _) = answer(&t, "cdn.edge.lagran.net", "58.60.1.1");
    assert_eq!(a.node.as_deref(), Some("gz-01"));
    assert_eq!(a.hostname, None, "answered as in address mode");
    assert_eq!(a.ipv4, vec![Ipv4Addr::new(203, 0, 113, 21)]);
}

#[test]
fn node_hostnames_inside_served_zones_are_in_the_table() {
    let t = build(&cname_inputs(), &ScheduleSettings::default());
    let names: Vec<&str> = t.hosts.iter().map(|h| h.name.as_str()).collect();
    assert_eq!(names, vec!["gz-01.edge.lagran.net"], "lowercase, no dot; example.org is not served");
    assert_eq!(t.hosts[0].node, "gz-01");
    assert_eq!(t.hosts[0].ipv4, Some(Ipv4Addr::new(203, 0, 113, 21)));
    assert!(matches!(t.lookup("gz-01.EDGE.lagran.net."), crate::route_table::NameLookup::NodeHost { .. }));
}
