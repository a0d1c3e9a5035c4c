//! Arbitrary bytes as a route table from the control plane (the JSON of
//! `/api/v1/routes/table`): a table that deserializes is checked on the way in,
//! so answering any query against it never panics and always yields a
//! parseable response.
#![no_main]

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};

use hickory_proto::op::{Message, MessageType, OpCode, Query as HQuery};
use hickory_proto::rr::{Name, RecordType};
use lagran::config::DnsSettings;
use lagran::dns::{AnswerContext, Transport, answer};
use lagran::route_table::RouteTable;
use libfuzzer_sys::fuzz_target;

const NOW: i64 = 1_700_000_000_000;

/// Queries every kind of name of every zone in `table` and checks each reply.
fn ask_everything(table: &RouteTable) {
    let settings = DnsSettings::default();
    let mut names: Vec<String> = Vec::new();
    for z in table.zones.iter().take(4) {
        names.push(z.zone.name.clone());
        names.push(format!("whoami.{}", z.zone.name));
        names.push(format!("_version.{}", z.zone.name));
        names.extend(z.zone.ns_hosts.iter().take(4).map(|h| h.name.clone()));
        names.extend(z.names.iter().take(8).map(|n| n.name.clone()));
    }
    let sources: [IpAddr; 3] =
        [Ipv4Addr::new(1, 2, 3, 4).into(), Ipv6Addr::new(0x2400, 0xcb00, 0, 0, 0, 0, 0, 1).into(), Ipv4Addr::LOCALHOST.into()];
    for name in &names {
        let Ok(name) = Name::from_ascii(name) else { continue };
        for t in [RecordType::A, RecordType::AAAA, RecordType::NS, RecordType::SOA, RecordType::TXT] {
            let mut m = Message::new();
            m.set_id(0x4242).set_message_type(MessageType::Query).set_op_code(OpCode::Query);
            m.add_query(HQuery::query(name.clone(), t));
            let Ok(q) = m.to_vec() else { continue };
            for source in sources {
                let reply = answer(&q, &AnswerContext::new(table, &settings, source, Transport::Udp, NOW));
                let bytes = reply.bytes.expect("a well-formed query is answered");
                assert!(bytes.len() <= 512);
                let r = Message::from_vec(&bytes).expect("our response parses");
                assert_eq!(r.id(), 0x4242);
                assert_eq!(r.message_type(), MessageType::Response);
            }
        }
    }
}

fuzz_target!(|data: &[u8]| {
    let Ok(table) = serde_json::from_slice::<RouteTable>(data) else { return };
    ask_everything(&table);
});
