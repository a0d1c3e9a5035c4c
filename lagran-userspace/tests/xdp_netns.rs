//! The fast path end to end: the real object attached to a veth in a network
//! namespace, `dig` in a second namespace asking it. Nothing listens on port 53
//! in the server namespace, so an answer can only come from XDP.
//!
//! Also checks pinning (`bpftool` prints the maps with their field names),
//! `Maps::open_pinned` + dump, and that dropping the handle detaches and unpins.
//!
//! Needs root, `ip`, `dig` and `bpftool` (`cargo xtask setup`) and the object
//! (`cargo xtask build-ebpf --release`); fails with a message saying so.

use std::net::Ipv4Addr;
use std::path::PathBuf;
use std::process::Command;

use lagran::config::DnsSettings;
use lagran::model::Zone;
use lagran::prefix_map::{PrefixMapV4, PrefixMapV6};
use lagran::route_table::{Answer, RouteTable, ScheduledName, ZoneRoutes};
use lagran::xdp::netns::VethPair;
use lagran::xdp::{AttachMode, Maps, XdpHandle, XdpOptions};
use lagran_common::counters::Counter;

fn table() -> RouteTable {
    let ans = |ttl, ips: &[&str]| Answer {
        ttl,
        ipv4: ips.iter().map(|s| s.parse().unwrap()).collect(),
        reason: "netns test".into(),
        ..Answer::default()
    };
    let name = ScheduledName {
        ecs: true,
        name: "edge.lagran.net".into(),
        id: 1,
        answers: std::sync::Arc::new(vec![ans(60, &["192.0.2.10"]), ans(20, &["192.0.2.20", "192.0.2.21"])]),
        v4: PrefixMapV4::from_ranges(
            [(u32::from(Ipv4Addr::new(10, 0, 0, 0)), u32::from(Ipv4Addr::new(10, 255, 255, 255)), 1)],
            0,
        ),
        v6: PrefixMapV6::uniform(0),
    };
    let now = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap().as_millis() as i64;
    RouteTable::new(1, now, vec![ZoneRoutes { zone: Zone::new("edge.lagran.net"), names: vec![name] }])
}

fn require_tool(tool: &str) {
    let ok = Command::new("sh").args(["-c", &format!("command -v {tool}")]).output().is_ok_and(|o| o.status.success());
    assert!(ok, "this test needs `{tool}`: run `cargo xtask setup`");
}

fn dig(pair: &VethPair, args: &[&str]) -> String {
    let server = format!("@{}", pair.server_addr);
    // dig sends a COOKIE option by default; the fast path leaves those to userspace.
    let mut all = vec![server.as_str(), "+tries=1", "+timeout=2", "+norec", "+nocookie"];
    all.extend_from_slice(args);
    let out = pair.client_run("dig", &all).expect("running dig in the client namespace");
    String::from_utf8_lossy(&out.stdout).into_owned()
}

#[test]
fn dig_in_a_namespace_is_answered_by_xdp() {
    for tool in ["ip", "dig", "bpftool"] {
        require_tool(tool);
    }
    let obj = lagran::xdp::object_bytes()
        .unwrap_or_else(|e| panic!("this test needs the BPF object: {e} (`cargo xtask test` builds it first)"));
    let pair = VethPair::create().expect("creating two network namespaces and a veth pair (root needed)");
    let pin_dir = PathBuf::from(format!("/sys/fs/bpf/lagran-test-{}", std::process::id()));

    let opts = XdpOptions { pin_dir: Some(pin_dir.clone()), ..XdpOptions::default() };
    let mut server = pair
        .server
        .enter(|| XdpHandle::attach_with(pair.server_if, 53, &obj, &opts))
        .expect("entering the server namespace")
        .expect("attaching the fast path to the server veth");
    assert_eq!(server.mode(), AttachMode::Native, "veth supports native XDP");
    // XDP_TX on a veth reaches the peer only when the peer runs XDP too: our
    // program, never synced, passes everything.
    let client_opts = XdpOptions { pin_dir: None, ..XdpOptions::default() };
    let _client = pair
        .client
        .enter(|| XdpHandle::attach_with(pair.client_if, 53, &obj, &client_opts))
        .expect("entering the client namespace")
        .expect("attaching a pass-through program to the client veth");

    let stats = server.writer().sync(&table(), &DnsSettings::default()).expect("sync");
    assert!(stats.routes_total >= 2, "{stats:?}");

    // ECS inside 10/8: the two-address answer, scope /8, TTL min(20, DNS_TTL 30).
    let out = dig(&pair, &["edge.lagran.net", "A", "+subnet=10.1.0.0/16"]);
    assert!(
        out.contains("status: NOERROR"),
        "dig got an answer from XDP:\n{out}\ncounters: {:?}",
        server.writer().counters().unwrap()
    );
    assert!(out.contains("flags: qr aa;"), "QR and AA, no RD (+norec):\n{out}");
    assert!(out.contains("20\tIN\tA\t192.0.2.20") && out.contains("20\tIN\tA\t192.0.2.21"), "{out}");
    assert!(out.contains("CLIENT-SUBNET: 10.1.0.0/16/8"), "ECS echoed with scope /8:\n{out}");
    // Without ECS the client address (198.18.0.2, outside 10/8) decides.
    let out = dig(&pair, &["EDGE.lagran.net", "A", "+noedns"]);
    assert!(out.contains("30\tIN\tA\t192.0.2.10"), "{out}");
    assert!(out.contains("EDGE.lagran.net."), "question case kept:\n{out}");

    let counters = server.writer().counters().unwrap();
    assert_eq!(counters.get(Counter::Answered), 2, "both answers came from XDP");

    // Pinned with BTF: bpftool prints field names.
    let cfg = Command::new("bpftool")
        .args(["map", "dump", "pinned"])
        .arg(pin_dir.join("lagran_config"))
        .output()
        .expect("bpftool");
    let cfg = String::from_utf8_lossy(&cfg.stdout);
    assert!(cfg.contains("\"dns_port\": 53") && cfg.contains("\"enabled\": 1"), "bpftool shows named fields:\n{cfg}");
    // The flat arrays the IPv4 routes are answered from, and the listen scan, are pinned too.
    for name in lagran::xdp::maps::OPTIONAL_MAP_NAMES {
        assert!(pin_dir.join(name).exists(), "{name} is pinned beside the other maps");
    }
    let dump = Maps::open_pinned(&pin_dir).expect("opening the pinned maps").dump(100).unwrap();
    assert!(dump.contains("edge.lagran.net") && dump.contains("10.0.0.0/8"), "{dump}");
    assert!(dump.contains("answered           2"), "{dump}");
    assert!(dump.contains("lagran_cookie: enabled=") && dump.contains("rrl_rate=0"), "cookie and RRL state: {dump}");
    assert!(!dump.contains("k0") && !dump.contains("k1"), "the dump never shows the secret: {dump}");

    drop(server);
    assert!(!pin_dir.exists(), "dropping the handle removes the pins");
    let link = pair.server.command("ip").args(["link", "show", pair.server_if]).output().unwrap();
    assert!(!String::from_utf8_lossy(&link.stdout).contains("xdp"), "and detaches the program");
}
