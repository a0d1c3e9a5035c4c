//! The XDP fast path in the real daemon: `lagran serve --xdp` in a server
//! namespace, `dig` in a client namespace across a veth pair.

use std::time::Duration;

use serde_json::json;

use lagran::xdp::netns::VethPair;

use crate::support::{Daemon, Dig, XdpNamespaces, metric_value as metric};

fn dig(pair: &VethPair, args: &[&str]) -> Dig {
    let server = format!("@{}", pair.server_addr);
    let mut all = vec![server.as_str(), "+tries=1", "+time=2"];
    all.extend_from_slice(args);
    let out = pair.client_run("dig", &all).expect("running dig in the client namespace");
    Dig::parse(&String::from_utf8_lossy(&out.stdout))
}

#[test]
fn the_daemon_answers_through_xdp_and_userspace_agrees() {
    let Some(ns) = XdpNamespaces::create("xdp_daemon") else { return };
    let pair = &ns.pair;

    let pins = format!("/sys/fs/bpf/lagran-e2e-{}", std::process::id());
    let d = Daemon::start(ns.daemon_options(&pins));
    let metrics = || ns.metrics(&d);
    // Default dig: its client cookie gets a server cookie back, 32 octets more
    // than the query, often more tailroom than a veth frame has: the program
    // grows the frame at its front then (`response::grow_at_head`).
    let shenzhen = ["edge.lagran.net", "A", "+subnet=58.60.0.0/24"];

    // Default dig sends a COOKIE, as BIND resolvers do: the fast path answers it.
    let fast = dig(pair, &shenzhen);
    assert_eq!(fast.answers("A"), vec!["203.0.113.21"], "{}\n{}", fast.text, d.log());
    let m = metrics();
    assert_eq!(metric(&m, "lagran_xdp_packets_total{result=\"answered\"}"), 1, "XDP answered the cookie query:\n{m}");
    assert_eq!(metric(&m, "lagran_dns_queries_total{transport=\"udp\"}"), 0, "userspace saw nothing:\n{m}");
    // And without a cookie too.
    let plain = dig(pair, &[&shenzhen[..], &["+nocookie"]].concat());
    assert_eq!(plain.answer, fast.answer);
    let m = metrics();
    assert_eq!(metric(&m, "lagran_xdp_packets_total{result=\"answered\"}"), 2, "XDP answered both:\n{m}");

    // The same question over TCP is userspace's: same meaning.
    let slow = dig(pair, &[&shenzhen[..], &["+tcp"]].concat());
    let m = metrics();
    assert_eq!(metric(&m, "lagran_dns_queries_total{transport=\"tcp\"}"), 1, "userspace answered it:\n{m}");
    assert_eq!(slow.status, fast.status);
    assert_eq!(slow.flags, fast.flags, "same flags");
    assert_eq!(slow.answer, fast.answer, "same records and TTL");
    assert_eq!(slow.ecs, fast.ecs, "same ECS scope");

    // What XDP must not answer is passed and answered by userspace.
    assert_eq!(dig(pair, &["edge.lagran.net", "AAAA", "+nocookie"]).status, "NOERROR");
    assert!(dig(pair, &["whoami.edge.lagran.net", "TXT", "+nocookie"]).answers("TXT").join(" ").contains("198.18.0.2"));
    assert_eq!(dig(pair, &["nope.edge.lagran.net", "A", "+nocookie"]).status, "NXDOMAIN");
    let m = metrics();
    assert_eq!(metric(&m, "lagran_xdp_packets_total{result=\"answered\"}"), 2, "still only the two:\n{m}");

    // An address of the interface that is not a --dns-listen address: not ours to answer.
    pair.server.ip(&["addr", "add", "198.18.0.9/32", "dev", pair.server_if]).expect("a second server address");
    pair.client.ip(&["route", "add", "198.18.0.9/32", "dev", pair.client_if]).expect("a route to it");
    let out = pair
        .client_run("dig", &["@198.18.0.9", "+tries=1", "+time=1", "edge.lagran.net", "A"])
        .expect("running dig in the client namespace");
    let other = Dig::parse(&String::from_utf8_lossy(&out.stdout));
    assert!(other.answers("A").is_empty(), "nothing listens on 198.18.0.9, so nothing answers:\n{}", other.text);
    let m = metrics();
    assert_eq!(metric(&m, "lagran_xdp_packets_total{result=\"answered\"}"), 2, "XDP did not answer it:\n{m}");
    assert!(
        metric(&m, "lagran_xdp_packets_total{result=\"passed\",reason=\"not_listen_address\"}") >= 1,
        "passed as not_listen_address:\n{m}\ndig said:\n{}",
        other.text
    );

    // A node going down changes the XDP answer without a restart.
    let (s, _) = pair
        .server
        .enter(|| d.http("PATCH", "/api/v1/nodes/gz-01", Some(json!({"status": "offline"})), &[]))
        .expect("entering the server namespace");
    assert_eq!(s, 200);
    let mut moved = Dig::default();
    for _ in 0..50 {
        moved = dig(pair, &[&shenzhen[..], &["+nocookie"]].concat());
        if moved.answers("A") == vec!["203.0.113.22"] {
            break;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    assert_eq!(moved.answers("A"), vec!["203.0.113.22"], "{}", moved.text);
    let m = metrics();
    assert!(metric(&m, "lagran_xdp_packets_total{result=\"answered\"}") >= 3, "answered by XDP:\n{m}");

    drop(d);
    assert!(!std::path::Path::new(&pins).exists(), "a clean shutdown removes the pins");
}

#[test]
fn a_daemon_killed_hard_is_taken_over_by_the_next_one() {
    let Some(ns) = XdpNamespaces::create("xdp_restart") else { return };
    let pair = &ns.pair;
    // `ip netns exec` gives the daemon a private /sys, whose bpffs dies with it; a bpffs
    // mounted here first is shared with the namespace, as /sys/fs/bpf is in production.
    let bpffs = BpfFs::mount();
    let pins = format!("{}/pins", bpffs.dir.path().display());
    let start = || Daemon::start(ns.daemon_options(&pins));
    let answered = |d: &Daemon| metric(&ns.metrics(d), "lagran_xdp_packets_total{result=\"answered\"}");
    // Default dig: its client cookie gets a server cookie back, 32 octets more
    // than the query, often more tailroom than a veth frame has: the program
    // grows the frame at its front then (`response::grow_at_head`).
    let shenzhen = ["edge.lagran.net", "A", "+subnet=58.60.0.0/24"];

    let mut first = start();
    assert_eq!(dig(pair, &shenzhen).answers("A"), vec!["203.0.113.21"], "{}", first.log());
    assert_eq!(answered(&first), 1, "the first daemon answers through XDP");
    first.kill_hard();
    // Nobody detached: the pinned link keeps the program answering from the pinned maps.
    let link = format!("{pins}/link_{}", pair.server_if);
    assert!(std::path::Path::new(&link).exists(), "the link stays pinned after SIGKILL");
    assert_eq!(
        dig(pair, &shenzhen).answers("A"),
        vec!["203.0.113.21"],
        "with the daemon dead, the kernel still answers from the last maps"
    );

    // The next daemon takes the interface over instead of failing with EBUSY/EEXIST.
    let second = start();
    let log = second.log();
    assert!(log.contains("took over the XDP link"), "the restart says it took over:\n{log}");
    assert_eq!(dig(pair, &shenzhen).answers("A"), vec!["203.0.113.21"], "{}", second.log());
    assert!(answered(&second) >= 1, "the new daemon's program answers through XDP:\n{}", second.log());

    drop(second);
    assert!(!std::path::Path::new(&pins).exists(), "a clean shutdown removes the link and the map pins");
    let out = pair.server.command("ip").args(["link", "show", pair.server_if]).output().expect("ip link show");
    assert!(!String::from_utf8_lossy(&out.stdout).contains("prog/xdp"), "and the program is off the interface");
}

/// A bpffs mounted on a temp dir for one test; unmounted on drop, also when the test fails.
pub(crate) struct BpfFs {
    pub(crate) dir: tempfile::TempDir,
}

impl BpfFs {
    pub(crate) fn mount() -> BpfFs {
        let dir = tempfile::tempdir().expect("temp dir");
        let ok = std::process::Command::new("mount")
            .args(["-t", "bpf", "bpf"])
            .arg(dir.path())
            .status()
            .expect("running mount")
            .success();
        assert!(ok, "mounting a bpffs on {} (root needed)", dir.path().display());
        BpfFs { dir }
    }
}

impl Drop for BpfFs {
    fn drop(&mut self) {
        let _ = std::process::Command::new("umount").arg("-l").arg(self.dir.path()).status();
    }
}

/// IPv6 transport, IPv6 ECS and AAAA are answered by XDP and mean what the
/// userspace answers (over TCP) mean: flags, records with TTLs, ECS scope.
#[test]
fn ipv6_transport_ecs_and_aaaa_are_answered_by_xdp_like_userspace() {
    let Some(ns) = XdpNamespaces::create("xdp_ipv6") else { return };
    let pair = &ns.pair;
    let pins = format!("/sys/fs/bpf/lagran-e2e6-{}", std::process::id());
    let mut options = ns.daemon_options(&pins);
    options.args.extend(["--dns-listen".into(), format!("[{}]:53", pair.server_addr6)]);
    let d = Daemon::start(options);
    let answered = || metric(&ns.metrics(&d), "lagran_xdp_packets_total{result=\"answered\"}");

    // The demo nodes get IPv6 addresses, so scheduled names have AAAA answers.
    let (s, nodes) = pair.server.enter(|| d.get("/api/v1/nodes")).expect("entering the server namespace");
    assert_eq!(s, 200, "{nodes}");
    let nodes = nodes.as_array().or_else(|| nodes["nodes"].as_array()).cloned().unwrap_or_default();
    assert!(!nodes.is_empty(), "the demo has nodes");
    for (i, n) in nodes.iter().enumerate() {
        let id = n["id"].as_str().or_else(|| n["name"].as_str()).expect("a node id");
        let body = json!({"public_ipv6": format!("2001:db8:53::{:x}", i + 1)});
        let (s, v) = pair
            .server
            .enter(|| d.http("PATCH", &format!("/api/v1/nodes/{id}"), Some(body), &[]))
            .expect("entering the server namespace");
        assert_eq!(s, 200, "PATCH {id}: {v}");
    }

    let v6_server = format!("@{}", pair.server_addr6);
    let dig6 = |args: &[&str]| -> Dig {
        let mut all = vec![v6_server.as_str(), "+tries=1", "+time=2"];
        all.extend_from_slice(args);
        let out = pair.client_run("dig", &all).expect("running dig in the client namespace");
        Dig::parse(&String::from_utf8_lossy(&out.stdout))
    };
    // Wait for the table with the IPv6 addresses (over TCP: userspace).
    let mut aaaa = Dig::default();
    for _ in 0..100 {
        aaaa = dig(pair, &["edge.lagran.net", "AAAA", "+tcp"]);
        if !aaaa.answers("AAAA").is_empty() {
            break;
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    assert!(!aaaa.answers("AAAA").is_empty(), "AAAA once the nodes have IPv6:\n{}\n{}", aaaa.text, d.log());

    // Each case with default dig (a COOKIE), once over UDP (XDP) and once over TCP
    // (userspace). A veth hands XDP the sender's skb, whose tailroom is only what
    // its allocation rounded up to; an AAAA response with a server cookie needs
    // more, and the program grows such a frame at its front.
    let cases: Vec<(&str, bool, Vec<&str>)> = vec![
        ("A over IPv6", true, vec!["edge.lagran.net", "A"]),
        ("AAAA over IPv6", true, vec!["edge.lagran.net", "AAAA"]),
        ("AAAA over IPv4", false, vec!["edge.lagran.net", "AAAA"]),
        ("AAAA, IPv4 ECS, over IPv6", true, vec!["edge.lagran.net", "AAAA", "+subnet=58.60.0.0/24"]),
        ("A, IPv6 ECS, over IPv4", false, vec!["edge.lagran.net", "A", "+subnet=2001:db8:1::/48"]),
        ("AAAA, IPv6 ECS, over IPv6", true, vec!["edge.lagran.net", "AAAA", "+subnet=2001:db8:1::/56"]),
        ("A, IPv6 ECS /0, over IPv6", true, vec!["edge.lagran.net", "A", "+subnet=::/0"]),
    ];
    for (what, over6, args) in &cases {
        let before = answered();
        let fast = if *over6 { dig6(args) } else { dig(pair, args) };
        let after = answered();
        if after <= before {
            let m = ns.metrics(&d);
            let m = m.lines().filter(|l| l.contains("xdp")).collect::<Vec<_>>().join("\n");
            panic!("{what}: answered by XDP ({before} -> {after}):\n{}\n{m}\n{}", fast.text, d.log());
        }
        assert_eq!(fast.status, "NOERROR", "{what}:\n{}", fast.text);
        assert!(!fast.answer.is_empty(), "{what}: records:\n{}", fast.text);
        let tcp: Vec<&str> = args.iter().copied().chain(["+tcp"]).collect();
        let slow = if *over6 { dig6(&tcp) } else { dig(pair, &tcp) };
        assert_eq!(answered(), after, "{what}: TCP is userspace's");
        assert_eq!(slow.flags, fast.flags, "{what}: same flags");
        assert_eq!(slow.answer, fast.answer, "{what}: same records and TTL\n{}\n{}", fast.text, slow.text);
        assert_eq!(slow.ecs, fast.ecs, "{what}: same ECS scope");
    }

    drop(d);
    assert!(!std::path::Path::new(&pins).exists(), "a clean shutdown removes the pins");
}
