//! The authoritative DNS responder.
//!
//! - [`answer()`]: the pure function query bytes and an [`AnswerContext`] →
//!   response bytes, shared by the listeners, the fuzz targets, the
//!   simulator example and the XDP parity tests;
//! - [`ecs`]: EDNS Client Subnet parsing, validation and echo;
//! - [`server`]: UDP and TCP listeners on the same port;
//! - [`tls`]: DNS over TLS (RFC 7858), [`quic`]: DNS over QUIC (RFC 9250),
//!   both with the SIGHUP-reloaded certificate of [`cert`];
//! - [`counters`]: atomic counters rendered as Prometheus text;
//! - [`rrl`]: response rate limiting of UDP responses (BIND/Knot semantics);
//! - [`cookie`]: server cookies (RFC 7873 in the RFC 9018 layout).
//! - [`settings`]: the `[dns]` and `[tls]` tables of the configuration.
//!
//! # What a response looks like (the XDP fast path mirrors this)
//!
//! For the query the fast path takes — one question, `A`, class IN, a
//! scheduled name, no answer/authority records, at most one OPT carrying at
//! most an ECS option and a COOKIE option besides Padding options (which are
//! ignored) — the userspace response is, octet by octet:
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
//! are not echoed; a COOKIE option gets ours after the ECS option (see [`cookie`]). A response larger than 512 octets (no OPT) or
//! max(512, min(client size, max_udp_payload)) is sent with TC=1 and only the
//! question and OPT.
//!
//! SCOPE is [`ScheduledName::served`]'s prefix length (the matched
//! partition block; at least /24 under a canary split; +96 for an
//! IPv4-mapped IPv6 ECS address). The TTL and addresses come from the
//! partition's [`Answer`]; at most [`answer::MAX_ANSWERS`] addresses.
//!
//! # Everything else
//!
//! | query | response |
//! |---|---|
//! | < 17 octets (header + root question), QR=1, QDCOUNT=0, unreadable first question | dropped, counted by reason (junk is never answered: that would reflect it at a spoofed source) |
//! | bad records after the question, 2 OPTs, OPT outside additional / non-root | FORMERR (AA=0), question echoed, no OPT |
//! | OPT VERSION > 0 | BADVERS (RCODE 16: OPT TTL high octet 1), OPT without ECS |
//! | malformed or repeated ECS, truncated option list | FORMERR with OPT, no ECS |
//! | COOKIE of 1–7, 9–15 or over 40 octets, or two COOKIE options | FORMERR with OPT, no cookie (RFC 7873 §5.2.2) |
//! | a client cookie (with or without a server cookie) | answered, our server cookie in the OPT after ECS; over UDP subject to RRL unless the server cookie was valid |
//! | OPCODE ≠ QUERY | NOTIMP (opcode echoed) |
//! | QDCOUNT > 1 | FORMERR, no question |
//! | class ≠ IN, ANY, AXFR, IXFR, name outside every zone | REFUSED (AA=0) |
//! | apex SOA / NS | SOA (TTL ns_ttl) / NS set + in-zone glue (A then AAAA per host) in additional |
//! | NS host A/AAAA | glue (TTL ns_ttl); other types NODATA |
//! | `whoami.Z` / `_version.Z` TXT | one TXT, TTL 0 |
//! | missing name / existing name, other type | NXDOMAIN / NODATA (AA=1), SOA in authority, TTL min(ns_ttl, soa_minimum) |
//! | scheduled A, empty answer | DNS_FALLBACK_IP (same TTL rule and scope), else SERVFAIL |
//! | scheduled AAAA, no IPv6 | NODATA + SOA, SCOPE of the partition |
//! | name in CNAME mode, any type (the client's node has a hostname) | `CNAME <hostname>` (the route's TTL, SCOPE as for A); for A/AAAA then the hostname's address when the hostname is a node hostname in a served zone (else nothing more), SOA of its zone when it has none; QTYPE CNAME: the CNAME alone (RFC 1034 §4.3.2). A node without hostname: its addresses, as in address mode |
//! | node hostname (inside a served zone) A/AAAA | the node's address, TTL as a scheduled answer of DNS_TTL, SCOPE 0; other types NODATA; its parents are empty non-terminals |
//! | ECS address in a public block the geo files cannot locate | answered for the resolver's address, SCOPE = the block's width; a resolver that cannot be located either, or a private/reserved ECS address: the unknown partition's answer |
//! | table not confirmed by the control plane for DNS_STALE_SECS (this host's clock) | fallback set: A → fallback (SCOPE 0), AAAA → NODATA; else the stale answer (counted) |
//! | no table (version 0) | A → fallback with TTL max(DNS_TTL, min_ttl), SCOPE 0; else SERVFAIL |
//!
//! RA=0, AD=0 and Z=0 always; RD, CD and the ID are copied; the question is
//! echoed as received. Every response to a query with OPT has an OPT (our
//! payload size, version 0, DO copied) as its last record, with the ECS
//! option echoed when the query had a valid one (SCOPE 0 unless the answer
//! was tailored), then the COOKIE option when the query had a client cookie
//! (checked only when the [`AnswerContext`] carries the cookie secrets, as
//! the listeners' does; ignored otherwise). Other options
//! are not echoed. Over DoT and DoQ
//! that OPT also carries a Padding option making the message a multiple of
//! 468 octets (RFC 8467 §4.1); UDP and TCP responses are never padded.
//!
//! [`ScheduledName::answer_for`]: crate::route_table::ScheduledName::answer_for
//! [`Answer`]: crate::route_table::Answer

pub mod answer;
pub mod cert;
pub mod cookie;
pub mod counters;
pub mod ecs;
pub mod quic;
pub mod rrl;
pub mod server;
pub mod settings;
pub mod tls;

pub use answer::{AnswerContext, ClientInfo, DropReason, Outcome, Reply, Transport, answer, lookup_key, scheduled_ttl};
pub use counters::DnsCounters;
pub use server::{DnsServer, bind};

#[cfg(test)]
mod tests;
