//! Arbitrary bytes into `lagran::dns::answer`: it must never panic, and every
//! response it produces must be a parseable DNS response to that query that
//! fits the transport.
//!
//! Input layout: byte 0 picks the transport (bit 0: TCP), the fallback
//! (bit 1), a stale table (bit 2) and an IPv6 source (bit 3); the rest is the
//! DNS message.
#![no_main]

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};
use std::sync::OnceLock;

use lagran::config::DnsSettings;
use lagran::dns::{AnswerContext, Transport, answer};
use lagran::model::{NsHost, Zone};
use lagran::prefix_map::{PrefixMapV4, PrefixMapV6};
use lagran::route_table::{Answer, RouteTable, ScheduledName, ZoneRoutes};
use libfuzzer_sys::fuzz_target;

const NOW: i64 = 1_700_000_000_000;

fn table() -> &'static RouteTable {
    static TABLE: OnceLock<RouteTable> = OnceLock::new();
    TABLE.get_or_init(|| {
        let mut zone = Zone::new("edge.lagran.net");
        zone.ns_hosts = vec![
            NsHost { name: "ns1.edge.lagran.net".into(), ipv4: Some(Ipv4Addr::new(192, 0, 2, 53)), ipv6: None },
            NsHost {
                name: "ns2.edge.lagran.net".into(),
                ipv4: Some(Ipv4Addr::new(192, 0, 2, 54)),
                ipv6: Some(Ipv6Addr::new(0x2001, 0xdb8, 0, 0, 0, 0, 0, 0x53)),
            },
        ];
        let answer = |ttl, v4: &[Ipv4Addr], v6: &[Ipv6Addr]| Answer {
            ttl,
            ipv4: v4.to_vec(),
            ipv6: v6.to_vec(),
            node: Some("n".into()),
            ..Answer::default()
        };
        let apex = ScheduledName { ecs: true,
            name: "edge.lagran.net".into(),
            id: 1,
            answers: vec![
                answer(30, &[Ipv4Addr::new(203, 0, 113, 1)], &[Ipv6Addr::LOCALHOST]),
                answer(
                    1,
                    &[Ipv4Addr::new(203, 0, 113, 2), Ipv4Addr::new(203, 0, 113, 3), Ipv4Addr::new(203, 0, 113, 4)],
                    &[],
                ),
                answer(10, &[], &[]),
            ]
            .into(),
            v4: PrefixMapV4::from_ranges([(0x0102_0300, 0x0102_03ff, 1), (0x0400_0000, 0x04ff_ffff, 2)], 0),
            v6: PrefixMapV6::from_ranges([(0x2400_cb00 << 96, (0x2400_cb01 << 96) - 1, 1)], 0),
        };
        RouteTable::new(3, NOW - 1000, vec![ZoneRoutes { zone, names: vec![apex] }])
    })
}

fuzz_target!(|data: &[u8]| {
    let Some((&mode, msg)) = data.split_first() else { return };
    let transport = if mode & 1 != 0 { Transport::Tcp } else { Transport::Udp };
    let settings = DnsSettings {
        fallback_ip: (mode & 2 != 0).then_some(Ipv4Addr::new(198, 51, 100, 1)),
        stale_secs: if mode & 4 != 0 { 0 } else { 600 },
        ..DnsSettings::default()
    };
    let source = if mode & 8 != 0 {
        IpAddr::V6(Ipv6Addr::new(0x2400, 0xcb00, 0, 0, 0, 0, 0, 1))
    } else {
        IpAddr::V4(Ipv4Addr::new(1, 2, 3, 4))
    };
    let reply = answer(msg, &AnswerContext::new(table(), &settings, source, transport, NOW));
    if let Some(bytes) = reply.bytes {
        assert!(bytes.len() >= 12);
        assert_eq!(&bytes[..2], &msg[..2]);
        assert_ne!(bytes[2] & 0x80, 0);
        if transport == Transport::Udp {
            assert!(bytes.len() <= settings.max_udp_payload as usize);
        }
        hickory_proto::op::Message::from_vec(&bytes).expect("our response parses");
    }
});
