//! `lagran_route_v4`: LPM trie from (name id, IPv4 client prefix) to an answer id.
//! Written by userspace (the map writer) with diffed inserts and deletes.
//!
//! The name leads the key, so one trie holds every scheduled name: a
//! lookup for name `n` and client `a` uses prefix length 64 and data `n ‖ a`.
//! An entry for a CIDR block `p/len` of name `n` has prefix length
//! `NAME_BITS + len`. The blocks of one name never nest, so the matched length
//! minus `NAME_BITS` is the ECS SCOPE PREFIX-LENGTH.

/// Map name as `bpftool` shows it.
pub const MAP_NAME: &str = "lagran_route_v4";
/// Upper bound of (name, block) entries; the trie allocates per entry.
pub const MAX_ENTRIES: u32 = 1 << 22;
/// Bits of the key taken by the name id.
pub const NAME_BITS: u32 = 32;
/// Prefix length of a full lookup key (name id and a whole address).
pub const FULL_PREFIX: u32 = NAME_BITS + 32;

/// The data part of the trie key (aya's `lpm_trie::Key<RouteV4Data>` on both sides).
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub struct RouteV4Data {
    /// The name id, big-endian.
    pub name_id: [u8; 4],
    /// The client IPv4 address or block start, big-endian (network order).
    pub addr: [u8; 4],
}

impl RouteV4Data {
    pub const fn new(name_id: u32, addr: u32) -> Self {
        RouteV4Data { name_id: name_id.to_be_bytes(), addr: addr.to_be_bytes() }
    }
}

/// The trie's value.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct RouteValue {
    /// Index into `lagran_answers` (host order).
    pub answer_id: u32,
    /// The block's CIDR length, 0–32 (host order): the ECS SCOPE PREFIX-LENGTH.
    /// An LPM lookup returns only the value, so the matched length is stored here.
    pub scope: u32,
}

const _: () = assert!(size_of::<RouteV4Data>() == 8);
const _: () = assert!(size_of::<RouteValue>() == 8);

crate::impl_pod!(RouteV4Data, RouteValue);
