//! The authoritative DNS responder (SPEC §3, §7).
//!
//! - [`answer()`]: the pure function query bytes → response bytes, shared by
//!   the listeners, `lagran explain` and the XDP parity tests;
//! - [`ecs`]: EDNS Client Subnet parsing, validation and echo;
//! - [`server`]: UDP and TCP listeners on the same port;
//! - [`counters`]: atomic counters rendered as Prometheus text.
//!
//! # What a response looks like (the XDP fast path mirrors this)
//!
//! For the query the fast path takes — one question, `A`, class IN, a
//! scheduled name, no answer/authority records, at most one OPT carrying at
//! most an ECS option — the userspace response is, octet by octet:
//!
//! ```text
//! header   ID copied | QR=1 OPCODE=0 AA=1 TC=0 RD=copied | RA=0 Z=0 AD=0 CD=copied RCODE=0
//!          QDCOUNT=1 ANCOUNT=n NSCOUNT=0 ARCOUNT=1 if the query had OPT else 0
//! question the query's question, octets as received (case preserved)
//! answer   n × [C0 0C | 00 01 | 00 01 | TTL | 00 04 | address]   n = 1..=4, route order
//!          TTL = max(min(route TTL, DNS_TTL), min_ttl)
//! OPT      00 | 00 29 | max_udp_payload (1232) | 00 00 DO<<15 | RDLEN |
//!          [00 08 | len | FAMILY | SOURCE | SCOPE | ADDRESS as received]
//! ```
//!
//! SCOPE is the matched prefix length of the client's partition when SOURCE
//! is > 0, and 0 when SOURCE is 0 (then the packet's source address is looked
//! up); RDLEN is 0 when the query's OPT had no ECS. Other options in the query
//! (cookies, …) are not echoed. A response larger than 512 octets (no OPT) or
//! max(512, min(client size, max_udp_payload)) is sent with TC=1 and only the
//! question and OPT.
//!
//! Fallback: an empty answer (no eligible node) is answered with
//! DNS_FALLBACK_IP as one `A` record, same TTL rule and scope; without a
//! fallback it is SERVFAIL (AA=0, no records). A table older than
//! DNS_STALE_SECS with a fallback set answers the fallback with SCOPE 0.

pub mod answer;
pub mod counters;
pub mod ecs;
pub mod server;

pub use answer::{ClientInfo, Outcome, Query, Reply, Transport, answer, lookup_key, scheduled_ttl};
pub use counters::DnsCounters;
pub use server::{DnsServer, bind};

/// Unix milliseconds now (the `now_ms` argument of [`answer()`]).
pub fn now_ms() -> i64 {
    std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map(|d| d.as_millis() as i64).unwrap_or(0)
}

#[cfg(test)]
mod tests;
