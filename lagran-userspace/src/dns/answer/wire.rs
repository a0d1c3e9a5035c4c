//! The DNS wire constants the responder names: record types, classes,
//! response codes and message size limits.

pub const HEADER_LEN: usize = 12;
pub const TYPE_A: u16 = 1;
pub const TYPE_NS: u16 = 2;
pub const TYPE_CNAME: u16 = 5;
pub const TYPE_SOA: u16 = 6;
pub const TYPE_TXT: u16 = 16;
pub const TYPE_AAAA: u16 = 28;
pub const TYPE_DNSKEY: u16 = 48;
pub const TYPE_CDS: u16 = 59;
pub const TYPE_CDNSKEY: u16 = 60;
pub const TYPE_NSEC3PARAM: u16 = 51;
pub const TYPE_OPT: u16 = 41;
pub const TYPE_IXFR: u16 = 251;
pub const TYPE_AXFR: u16 = 252;
pub const TYPE_ANY: u16 = 255;
pub const CLASS_IN: u16 = 1;
pub const RCODE_NOERROR: u16 = 0;
pub const RCODE_FORMERR: u16 = 1;
pub const RCODE_SERVFAIL: u16 = 2;
pub const RCODE_NXDOMAIN: u16 = 3;
pub const RCODE_NOTIMP: u16 = 4;
pub const RCODE_REFUSED: u16 = 5;
/// Extended RCODE (12 bits: 1 in the OPT TTL's high octet, 0 in the header).
pub const RCODE_BADVERS: u16 = 16;
/// Extended RCODE BADCOOKIE (RFC 7873 §8).
pub const RCODE_BADCOOKIE: u16 = 23;
/// The largest UDP response without EDNS (RFC 1035 §2.3.4).
pub const UDP_PLAIN_LIMIT: usize = 512;
/// TCP messages carry a 2-octet length.
pub const TCP_LIMIT: usize = 65_535;
/// EDNS(0) Padding option (RFC 7830 §3).
pub const OPTION_PADDING: u16 = 12;
/// RFC 8467 §4.1: "Responders: Block-Length Padding ... 468 octets".
pub const RESPONSE_PAD_BLOCK: usize = 468;
