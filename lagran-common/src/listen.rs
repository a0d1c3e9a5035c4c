//! `lagran_listen`: hash set of the (address, UDP port) pairs the DNS server
//! listens on. The program answers only packets addressed to one of them;
//! everything else is passed (`not_listen_address`). Written by userspace (the
//! loader) at attach time.
//!
//! Addresses are IPv6 or IPv4-mapped IPv6 (`::ffff:a.b.c.d`). The unspecified
//! address of a family (`::ffff:0.0.0.0` for IPv4, `::` for IPv6) is a wildcard:
//! it matches every destination address of that family. The loader expands a
//! configured wildcard into the attached interface's addresses, so a wildcard
//! entry only remains where no interface is known (`BPF_PROG_TEST_RUN`).

/// Map name as `bpftool` shows it.
pub const MAP_NAME: &str = "lagran_listen";
pub const MAX_ENTRIES: u32 = 256;

/// One listen address.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub struct ListenKey {
    /// IPv6 address, or IPv4-mapped IPv6 address, network order.
    pub addr: [u8; 16],
    /// UDP port, network order (as it sits in the packet).
    pub port: [u8; 2],
    pub _pad: [u8; 2],
}

impl ListenKey {
    /// The key of an IPv4 address (network order) and port (network order).
    #[inline(always)]
    pub const fn v4(addr: [u8; 4], port: [u8; 2]) -> ListenKey {
        let [a, b, c, d] = addr;
        ListenKey { addr: [0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff, a, b, c, d], port, _pad: [0; 2] }
    }

    /// The key of an IPv6 address (network order) and port (network order).
    #[inline(always)]
    pub const fn v6(addr: [u8; 16], port: [u8; 2]) -> ListenKey {
        ListenKey { addr, port, _pad: [0; 2] }
    }
}

/// The value of a listen entry.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct ListenValue {
    /// 1 (present). A `u32`, not a `bool`.
    pub on: u32,
}

/// `lagran_listen4`: the IPv4 part of the listen set as one array element the
/// program scans (a few compares) instead of hashing a 20-byte key once or
/// twice per packet. Written by userspace with `lagran_listen`, after it.
pub const MAP_NAME_V4: &str = "lagran_listen4";
/// IPv4 (address, port) pairs the scan holds; a larger set leaves `exact` 0 and
/// the program uses `lagran_listen`.
pub const V4_SLOTS: usize = 8;
/// A slot no packet matches (bit 16 is never set in an entry).
pub const V4_EMPTY: u64 = 1 << 16;

/// The IPv4 listen set, scanned.
#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ListenV4 {
    /// 1: `entries` is the whole IPv4 listen set; 0: ask `lagran_listen`
    /// (not written yet, or more pairs than `V4_SLOTS`).
    pub exact: u32,
    pub _pad: u32,
    /// [`ListenV4::entry`] of each pair (the wildcard address is 0), then
    /// [`V4_EMPTY`].
    pub entries: [u64; V4_SLOTS],
}

impl ListenV4 {
    /// The entry of an address and a port as they sit in the packet (network
    /// order), read as native-endian integers.
    #[inline(always)]
    pub const fn entry(addr: [u8; 4], port: [u8; 2]) -> u64 {
        (u32::from_ne_bytes(addr) as u64) << 32 | u16::from_ne_bytes(port) as u64
    }
}

impl Default for ListenV4 {
    fn default() -> Self {
        ListenV4 { exact: 0, _pad: 0, entries: [V4_EMPTY; V4_SLOTS] }
    }
}

/// `lagran_listen6`: the IPv6 part of the listen set (addresses that are not
/// IPv4-mapped), scanned like `lagran_listen4`. Written by userspace with
/// `lagran_listen`, after it.
pub const MAP_NAME_V6: &str = "lagran_listen6";
/// IPv6 (address, port) pairs the scan holds; a larger set leaves `exact` 0 and
/// the program uses `lagran_listen`.
pub const V6_SLOTS: usize = 4;
/// A port no packet's matches (bit 16 is never set in a port).
pub const V6_EMPTY: u64 = 1 << 16;

/// One IPv6 pair of [`ListenV6`].
#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ListenV6Entry {
    /// The address's two halves as they sit in the packet, read as
    /// native-endian words (the wildcard `::` is `[0, 0]`).
    pub addr: [u64; 2],
    /// The port as it sits in the packet, read as a native-endian `u16`; [`V6_EMPTY`]
    /// in an unused slot.
    pub port: u64,
}

impl ListenV6Entry {
    pub const EMPTY: ListenV6Entry = ListenV6Entry { addr: [0; 2], port: V6_EMPTY };

    /// The entry of an address and a port in network order.
    pub const fn new(addr: [u8; 16], port: [u8; 2]) -> ListenV6Entry {
        let a = addr;
        ListenV6Entry {
            addr: [
                u64::from_ne_bytes([a[0], a[1], a[2], a[3], a[4], a[5], a[6], a[7]]),
                u64::from_ne_bytes([a[8], a[9], a[10], a[11], a[12], a[13], a[14], a[15]]),
            ],
            port: u16::from_ne_bytes(port) as u64,
        }
    }
}

/// The IPv6 listen set, scanned.
#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ListenV6 {
    /// 1: `entries` is the whole IPv6 listen set; 0: ask `lagran_listen`
    /// (not written yet, or more pairs than `V6_SLOTS`).
    pub exact: u32,
    pub _pad: u32,
    /// The pairs, then [`ListenV6Entry::EMPTY`].
    pub entries: [ListenV6Entry; V6_SLOTS],
}

impl Default for ListenV6 {
    fn default() -> Self {
        ListenV6 { exact: 0, _pad: 0, entries: [ListenV6Entry::EMPTY; V6_SLOTS] }
    }
}

const _: () = assert!(size_of::<ListenV4>() == 8 + 8 * V4_SLOTS);
const _: () = assert!(size_of::<ListenV6>() == 8 + 24 * V6_SLOTS);
const _: () = assert!(size_of::<ListenKey>() == 20);
const _: () = assert!(size_of::<ListenValue>() == 4);

crate::impl_pod!(ListenKey, ListenValue, ListenV4, ListenV6);
