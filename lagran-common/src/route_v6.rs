//! `lagran_route_v6`: LPM trie from (name id, IPv6 client prefix) to an answer id.
//! Written by userspace (the map writer) from the same route table as
//! `lagran_route_v4`, with diffed inserts and deletes.
//!
//! The layout mirrors `route_v4`: the name leads the key, a lookup for name `n`
//! and client `a` uses prefix length 160 and data `n ‖ a`, and an entry for a
//! block `p/len` of name `n` has prefix length `NAME_BITS + len`. The blocks of
//! one name never nest, so the value's `scope` is the ECS SCOPE PREFIX-LENGTH.
//!
//! IPv4-mapped clients (`::ffff:a.b.c.d`) are looked up in `lagran_route_v4`,
//! as the userspace responder does; the writer still copies every IPv6 block,
//! so the program never needs to know which blocks userspace skips.
//!
//! Size: the trie allocates one node per entry (and at most one intermediate
//! node per entry), about 100–130 bytes each with this 20-byte key, so
//! `MAX_ENTRIES` (4 Mi) bounds the map at roughly 0.5 GiB; a table from a full
//! ip2region IPv6 file has a few hundred thousand blocks per name that the
//! scheduler tells apart, far fewer when neighbouring blocks share an answer.

pub use crate::route_v4::{NAME_BITS, RouteValue};

/// Map name as `bpftool` shows it.
pub const MAP_NAME: &str = "lagran_route_v6";
/// Upper bound of (name, block) entries; the trie allocates per entry.
pub const MAX_ENTRIES: u32 = 1 << 22;
/// Prefix length of a full lookup key (name id and a whole address).
pub const FULL_PREFIX: u32 = NAME_BITS + 128;

/// The data part of the trie key (aya's `lpm_trie::Key<RouteV6Data>` on both sides).
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub struct RouteV6Data {
    /// The name id, big-endian.
    pub name_id: [u8; 4],
    /// The client IPv6 address or block start, network order.
    pub addr: [u8; 16],
}

impl RouteV6Data {
    pub const fn new(name_id: u32, addr: u128) -> Self {
        RouteV6Data { name_id: name_id.to_be_bytes(), addr: addr.to_be_bytes() }
    }
}

const _: () = assert!(size_of::<RouteV6Data>() == 20);

crate::impl_pod!(RouteV6Data);
