//! The IPv4 route of a name from the flat arrays (`lagran_common::route_v4_flat`):
//! one `l1` read for a /16 one route covers, a second (`l2`) for a /24 inside a
//! split /16; only a /24 that holds routes longer than /24 goes to the trie.

use aya_ebpf::btf_maps::Array;
use lagran_common::route_v4::RouteValue;
use lagran_common::route_v4_flat::{
    self as flat, FLAT_NAMES, GROUP, KIND_MASK, L1_SLOTS, L2_SLOTS, LEAF, SLOTS_PER_ELEMENT as PER, TRIE,
};

use crate::maps::{ROUTE4_L1, ROUTE4_L2};

/// What the flat arrays say about an address.
pub enum Flat {
    /// The covering route: answer id and exact CIDR length.
    Route(RouteValue),
    /// No route covers the address.
    None,
    /// Ask the trie (the name has no block, or a route longer than /24 is near).
    Trie,
}

/// The route of `addr` (host order) for the name whose `NameValue::route4` is `block`.
#[inline(always)]
pub fn lookup(block: u32, addr: u32) -> Flat {
    if block == 0 || block > FLAT_NAMES {
        return Flat::Trie;
    }
    let i = (block - 1) * L1_SLOTS + (addr >> 16);
    let Some(s) = slot(&ROUTE4_L1, i) else { return Flat::Trie };
    let s = match s & KIND_MASK {
        LEAF => s,
        GROUP => {
            let j = flat::group_index(s) * L2_SLOTS + ((addr >> 8) & 0xff);
            let Some(t) = slot(&ROUTE4_L2, j) else { return Flat::Trie };
            match t & KIND_MASK {
                LEAF => t,
                TRIE => return Flat::Trie,
                _ => return Flat::None,
            }
        }
        TRIE => return Flat::Trie,
        _ => return Flat::None,
    };
    Flat::Route(RouteValue { answer_id: flat::leaf_answer(s), scope: flat::leaf_len(s) })
}

/// Slot `i` of an array of two-slot elements.
#[inline(always)]
fn slot<const N: usize, const F: usize>(a: &Array<u64, N, F>, i: u32) -> Option<u32> {
    let w = *a.get(i / PER)?;
    Some((w >> ((i % PER) * 32)) as u32)
}
