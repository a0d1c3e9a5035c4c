//! Whether an IPv6 packet is addressed to us, from `lagran_listen6`: one array
//! read and a fixed scan of a few compares; `lagran_listen` (two hash lookups of
//! a 20-byte key) only when the set is larger than the scan holds.

use lagran_common::listen::V6_SLOTS;

use crate::maps::{self, LISTEN6};

/// Whether we serve `[addr]:port` (both as in the packet, the address as two
/// native-endian words): the address itself, or the IPv6 wildcard `::`.
#[inline(always)]
pub fn listening(addr: [u64; 2], port: [u8; 2]) -> bool {
    // RFC 4291 §2.5.5.2: an IPv4-mapped address names an IPv4 node and is not
    // a destination on the wire; `lagran_listen` holds our IPv4 pairs in that
    // form, so its lookup would take such a packet for ours.
    if addr[0] == 0 && addr[1] as u32 == u32::from_ne_bytes([0, 0, 0xff, 0xff]) {
        return false;
    }
    let Some(set) = LISTEN6.get(0) else { return maps::listening_v6(addr, port) };
    if set.exact != 1 {
        return maps::listening_v6(addr, port);
    }
    let port = u16::from_ne_bytes(port) as u64;
    let mut i = 0;
    while i < V6_SLOTS {
        let e = &set.entries[i];
        if e.port == port && ((e.addr[0] == addr[0] && e.addr[1] == addr[1]) || (e.addr[0] | e.addr[1]) == 0) {
            return true;
        }
        i += 1;
    }
    false
}
