//! The dnstap protobuf schema (`dnstap.proto`, package `dnstap`, proto2, public
//! domain), the part an authoritative server writes, as prost messages written
//! by hand: the field numbers and types below are the schema's, so no `protoc`
//! is needed at build time. Unused fields (`identity`, `version`, `extra`,
//! `query_zone`, `policy`, `http_protocol`) are left out; readers skip nothing
//! they do not find.

use std::net::{IpAddr, SocketAddr};
use std::time::{SystemTime, UNIX_EPOCH};

use super::{Exchange, Protocol};

/// `message Dnstap`: the top-level frame payload.
#[derive(Clone, PartialEq, prost::Message)]
pub struct Dnstap {
    /// `Dnstap.Type`: always `MESSAGE` (1).
    #[prost(int32, required, tag = "15")]
    pub r#type: i32,
    #[prost(message, optional, tag = "14")]
    pub message: Option<Message>,
}

/// `Dnstap.Type.MESSAGE`.
pub const DNSTAP_MESSAGE: i32 = 1;

/// `message Message`: one DNS message and where and when it went.
#[derive(Clone, PartialEq, prost::Message)]
pub struct Message {
    /// `Message.Type`: [`AUTH_QUERY`] or [`AUTH_RESPONSE`] here.
    #[prost(int32, required, tag = "1")]
    pub r#type: i32,
    /// `SocketFamily`: INET 1, INET6 2.
    #[prost(int32, optional, tag = "2")]
    pub socket_family: Option<i32>,
    /// `SocketProtocol`: UDP 1, TCP 2, DOT 3, DOH 4, DOQ 7.
    #[prost(int32, optional, tag = "3")]
    pub socket_protocol: Option<i32>,
    #[prost(bytes = "vec", optional, tag = "4")]
    pub query_address: Option<Vec<u8>>,
    #[prost(bytes = "vec", optional, tag = "5")]
    pub response_address: Option<Vec<u8>>,
    #[prost(uint32, optional, tag = "6")]
    pub query_port: Option<u32>,
    #[prost(uint32, optional, tag = "7")]
    pub response_port: Option<u32>,
    #[prost(uint64, optional, tag = "8")]
    pub query_time_sec: Option<u64>,
    #[prost(fixed32, optional, tag = "9")]
    pub query_time_nsec: Option<u32>,
    #[prost(bytes = "vec", optional, tag = "10")]
    pub query_message: Option<Vec<u8>>,
    #[prost(uint64, optional, tag = "12")]
    pub response_time_sec: Option<u64>,
    #[prost(fixed32, optional, tag = "13")]
    pub response_time_nsec: Option<u32>,
    #[prost(bytes = "vec", optional, tag = "14")]
    pub response_message: Option<Vec<u8>>,
}

/// `Message.Type.AUTH_QUERY`: "a DNS query message received from a resolver by
/// an authoritative name server".
pub const AUTH_QUERY: i32 = 1;
/// `Message.Type.AUTH_RESPONSE`: "a DNS response message sent from an
/// authoritative name server to a resolver".
pub const AUTH_RESPONSE: i32 = 2;

impl Protocol {
    /// Its `SocketProtocol` value.
    fn code(self) -> i32 {
        match self {
            Protocol::Udp => 1,
            Protocol::Tcp => 2,
            Protocol::Dot => 3,
            Protocol::Doq => 7,
        }
    }
}

/// The address octets (4 for IPv4, IPv4-mapped IPv6 addresses included, else 16)
/// and the family code.
fn address(ip: IpAddr) -> (Vec<u8>, i32) {
    match ip.to_canonical() {
        IpAddr::V4(a) => (a.octets().to_vec(), 1),
        IpAddr::V6(a) => (a.octets().to_vec(), 2),
    }
}

/// Seconds and nanoseconds since the Unix epoch.
fn epoch(t: SystemTime) -> (u64, u32) {
    let d = t.duration_since(UNIX_EPOCH).unwrap_or_default();
    (d.as_secs(), d.subsec_nanos())
}

/// The `AUTH_QUERY` and, when one was sent, the `AUTH_RESPONSE` of `exchange`,
/// each with the fields the schema recommends for its type (and both
/// addresses and ports).
pub fn messages(exchange: Exchange) -> impl Iterator<Item = Dnstap> {
    let (query_address, family) = address(exchange.client.ip());
    // Both ends in one family: an IPv4 client reached an IPv4 (or mapped) address.
    let server = exchange.server.map(|s| SocketAddr::new(s.ip().to_canonical(), s.port()));
    let (query_time_sec, query_time_nsec) = epoch(exchange.query_time);
    let base = Message {
        r#type: AUTH_QUERY,
        socket_family: Some(family),
        socket_protocol: Some(exchange.protocol.code()),
        query_address: Some(query_address),
        response_address: server.map(|s| address(s.ip()).0),
        query_port: Some(exchange.client.port().into()),
        response_port: server.map(|s| s.port().into()),
        query_time_sec: Some(query_time_sec),
        query_time_nsec: Some(query_time_nsec),
        query_message: None,
        response_time_sec: None,
        response_time_nsec: None,
        response_message: None,
    };
    let response = exchange.response.map(|(at, bytes)| {
        let (sec, nsec) = epoch(at);
        Message {
            r#type: AUTH_RESPONSE,
            response_time_sec: Some(sec),
            response_time_nsec: Some(nsec),
            response_message: Some(bytes),
            ..base.clone()
        }
    });
    let query = Message { query_message: Some(exchange.query), ..base };
    [Some(query), response].into_iter().flatten().map(|m| Dnstap { r#type: DNSTAP_MESSAGE, message: Some(m) })
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use prost::Message as _;

    use super::*;

    fn exchange(response: bool) -> Exchange {
        let at = UNIX_EPOCH + Duration::new(1_700_000_000, 123_456_789);
        Exchange {
            protocol: Protocol::Tcp,
            client: "[::ffff:192.0.2.7]:40000".parse().unwrap(),
            server: Some("127.0.0.1:53".parse().unwrap()),
            query_time: at,
            query: vec![1, 2, 3],
            response: response.then(|| (at + Duration::from_millis(2), vec![4, 5])),
        }
    }

    #[test]
    fn a_query_and_its_response_become_two_messages() {
        let out: Vec<Dnstap> = messages(exchange(true)).collect();
        assert_eq!(out.len(), 2);
        let (q, r) = (out[0].message.as_ref().unwrap(), out[1].message.as_ref().unwrap());
        assert_eq!((q.r#type, r.r#type), (AUTH_QUERY, AUTH_RESPONSE));
        // The mapped client is logged as the IPv4 address it is.
        assert_eq!(q.socket_family, Some(1));
        assert_eq!(q.query_address.as_deref(), Some(&[192, 0, 2, 7][..]));
        assert_eq!((q.query_port, q.response_port), (Some(40000), Some(53)));
        assert_eq!(q.socket_protocol, Some(2));
        assert_eq!((q.query_time_sec, q.query_time_nsec), (Some(1_700_000_000), Some(123_456_789)));
        assert_eq!(q.query_message.as_deref(), Some(&[1, 2, 3][..]));
        assert_eq!(q.response_message, None);
        assert_eq!(r.query_message, None);
        assert_eq!(r.response_message.as_deref(), Some(&[4, 5][..]));
        assert_eq!((r.response_time_sec, r.response_time_nsec), (Some(1_700_000_000), Some(125_456_789)));
        // What a reader decodes is what was meant.
        let wire = out[1].encode_to_vec();
        assert_eq!(Dnstap::decode(&wire[..]).unwrap(), out[1]);
    }

    #[test]
    fn a_query_without_response_is_one_message() {
        let out: Vec<Dnstap> = messages(exchange(false)).collect();
        assert_eq!(out.len(), 1);
        assert_eq!(out[0].message.as_ref().unwrap().r#type, AUTH_QUERY);
    }

    #[test]
    fn the_encoding_has_the_schema_field_numbers() {
        let m = Dnstap {
            r#type: DNSTAP_MESSAGE,
            message: Some(Message { r#type: AUTH_RESPONSE, query_port: Some(53), ..Message::default() }),
        };
        // field 14 (message, length-delimited) { field 1 = 2, field 6 = 53 }, field 15 = 1
        assert_eq!(m.encode_to_vec(), vec![0x72, 4, 0x08, 2, 0x30, 53, 0x78, 1]);
    }
}
