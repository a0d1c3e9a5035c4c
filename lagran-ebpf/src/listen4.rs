//! Whether an IPv4 packet is addressed to us, from `lagran_listen4`: one array
//! read and a fixed scan of a few compares; `lagran_listen` (two hash lookups of
//! a 20-byte key) only when the set is larger than the scan holds.

use lagran_common::listen::{ListenV4, V4_SLOTS};

use crate::maps::{self, LISTEN4};

/// Whether we serve `addr:port` (both as in the packet): the address itself, or
/// the IPv4 wildcard.
#[inline(always)]
pub fn listening(addr: [u8; 4], port: [u8; 2]) -> bool {
    let Some(set) = LISTEN4.get(0) else { return maps::listening_v4(addr, port) };
    if set.exact != 1 {
        return maps::listening_v4(addr, port);
    }
    let exact = ListenV4::entry(addr, port);
    let any = ListenV4::entry([0; 4], port);
    let mut i = 0;
    while i < V4_SLOTS {
        let e = set.entries[i];
        if e == exact || e == any {
            return true;
        }
        i += 1;
    }
    false
}
