//! What the response needs to know about the query: written by `dns::parse`
//! into the per-CPU scratch (`maps::Scratch::query`), read by `cookie` and
//! `response`.

use crate::ipv6::Addr6;

/// What the response needs to know about the query.
///
/// `repr(C)`, widest fields first: the build allows misaligned memory access,
/// and LLVM then merges neighbouring stores of a Rust-ordered struct into 8-byte
/// stores at 4-aligned stack offsets, which the verifier refuses.
#[repr(C)]
#[derive(Clone, Copy)]
pub struct Query {
    /// The `lagran_names` key of the name.
    pub qhash: u64,
    /// COOKIE option: the client cookie, and the server cookie's first and
    /// last 8 octets, as loaded from the packet (little-endian words).
    pub cookie_client: u64,
    pub cookie_head: u64,
    pub cookie_hash: u64,
    /// Length of the question name in wire format, 1–255.
    pub qlen: usize,
    /// IPv6 ECS ADDRESS, zero-extended to 16 bytes.
    pub ecs_addr6: Addr6,
    /// IPv6 ECS: the 16 octets ending at the end of ADDRESS as loaded from the
    /// query (machine-order words), written back to end the echoed option.
    pub ecs_window: [u64; 2],
    /// One's-complement partial sum of the name bytes, as they sit in the packet
    /// (the question starts at an even offset of the DNS message).
    pub qsum: u32,
    /// 1 when QTYPE is AAAA, 0 when it is A.
    pub aaaa: u32,
    /// 1 when the query carried an OPT record.
    pub has_opt: u32,
    /// 1 when the OPT carried an ECS option.
    pub has_ecs: u32,
    /// 1 when that option's FAMILY is IPv6 (2), 0 for IPv4 (1).
    pub ecs_v6: u32,
    /// COOKIE option: 0 none, 1 a client cookie alone, 2 with a 16-octet server cookie.
    pub cookie: u32,
    /// IPv4 ECS: the 4 octets ending at the end of ADDRESS as loaded from the
    /// query (a machine-order word), written back to end the echoed option.
    pub ecs_window4: u32,
    /// The requestor's UDP payload size (the OPT CLASS), when `has_opt`.
    pub udp_size: u32,
    /// IPv4 ECS ADDRESS, zero-extended to four bytes (bits beyond SOURCE are zero).
    pub ecs_addr: [u8; 4],
    /// Header flags as received (host order).
    pub flags: u16,
    pub arcount: u16,
    pub id: [u8; 2],
    /// The DO bit as it sits in the OPT TTL's third byte (0x80 or 0).
    pub do_bit: u8,
    /// ECS SOURCE PREFIX-LENGTH, 0–32 (IPv4) or 0–128 (IPv6).
    pub ecs_source: u8,
}
