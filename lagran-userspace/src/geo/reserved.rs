//! Special-purpose address ranges that are never looked up in the geo database.
//!
//! A query whose client address (ECS or packet source) falls in one of these ranges
//! belongs to the "unknown" partition: private and reserved sources (RFC 1918,
//! loopback, link-local, CGNAT 100.64/10, ULA, documentation ranges) are filtered
//! out before the geo lookup. The ip2region file has rows such as `0|0|0|内网IP|内网IP` for them, and scheduling on
//! such a row would send the client to an arbitrary node.
//!
//! The lists follow the IANA IPv4 / IPv6 Special-Purpose Address Registries (RFC 6890
//! and its updates), restricted to ranges that cannot carry a real client. Both lists
//! are inclusive `(first, last)` pairs, sorted and non-overlapping (a unit test checks
//! it). IPv4-mapped IPv6 addresses (`::ffff:0:0/96`) are not in the IPv6 list: the
//! caller maps them to IPv4 first ([`is_special`] does it too).

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};

/// Inclusive range of an IPv4 CIDR block given as four octets and a prefix length.
const fn v4(a: u8, b: u8, c: u8, d: u8, len: u32) -> (u32, u32) {
    let start = u32::from_be_bytes([a, b, c, d]);
    let host = if len >= 32 { 0 } else { u32::MAX >> len };
    (start, start | host)
}

/// Inclusive range of an IPv6 CIDR block given as its eight 16-bit groups and a prefix length.
const fn v6(groups: [u16; 8], len: u32) -> (u128, u128) {
    let mut start: u128 = 0;
    let mut i = 0;
    while i < 8 {
        start = (start << 16) | groups[i] as u128;
        i += 1;
    }
    let host = if len >= 128 { 0 } else { u128::MAX >> len };
    (start, start | host)
}

/// IPv4 special-purpose ranges, inclusive, sorted, non-overlapping.
static SPECIAL_V4: [(u32, u32); 15] = [
    v4(0, 0, 0, 0, 8),       // "this network" (RFC 791)
    v4(10, 0, 0, 0, 8),      // private (RFC 1918)
    v4(100, 64, 0, 0, 10),   // shared address space / CGNAT (RFC 6598)
    v4(127, 0, 0, 0, 8),     // loopback (RFC 1122)
    v4(169, 254, 0, 0, 16),  // link-local (RFC 3927)
    v4(172, 16, 0, 0, 12),   // private (RFC 1918)
    v4(192, 0, 0, 0, 24),    // IETF protocol assignments (RFC 6890)
    v4(192, 0, 2, 0, 24),    // documentation TEST-NET-1 (RFC 5737)
    v4(192, 88, 99, 0, 24),  // deprecated 6to4 relay anycast (RFC 7526)
    v4(192, 168, 0, 0, 16),  // private (RFC 1918)
    v4(198, 18, 0, 0, 15),   // benchmarking (RFC 2544)
    v4(198, 51, 100, 0, 24), // documentation TEST-NET-2 (RFC 5737)
    v4(203, 0, 113, 0, 24),  // documentation TEST-NET-3 (RFC 5737)
    v4(224, 0, 0, 0, 4),     // multicast (RFC 5771)
    v4(240, 0, 0, 0, 4),     // reserved (RFC 1112), includes the 255.255.255.255 broadcast
];

/// IPv6 special-purpose ranges, inclusive, sorted, non-overlapping.
/// `::ffff:0:0/96` (IPv4-mapped) is deliberately absent: map to IPv4 and check that.
static SPECIAL_V6: [(u128, u128); 11] = [
    v6([0, 0, 0, 0, 0, 0, 0, 0], 128),         // unspecified :: (RFC 4291)
    v6([0, 0, 0, 0, 0, 0, 0, 1], 128),         // loopback ::1 (RFC 4291)
    v6([0x64, 0xff9b, 1, 0, 0, 0, 0, 0], 48),  // local-use IPv4/IPv6 translation (RFC 8215)
    v6([0x100, 0, 0, 0, 0, 0, 0, 0], 64),      // discard-only 100::/64 (RFC 6666)
    v6([0x2001, 0x2, 0, 0, 0, 0, 0, 0], 48),   // benchmarking 2001:2::/48 (RFC 5180)
    v6([0x2001, 0xdb8, 0, 0, 0, 0, 0, 0], 32), // documentation 2001:db8::/32 (RFC 3849)
    v6([0x3fff, 0, 0, 0, 0, 0, 0, 0], 20),     // documentation 3fff::/20 (RFC 9637)
    v6([0xfc00, 0, 0, 0, 0, 0, 0, 0], 7),      // unique local fc00::/7 (RFC 4193)
    v6([0xfe80, 0, 0, 0, 0, 0, 0, 0], 10),     // link-local fe80::/10 (RFC 4291)
    v6([0xfec0, 0, 0, 0, 0, 0, 0, 0], 10),     // deprecated site-local fec0::/10 (RFC 3879)
    v6([0xff00, 0, 0, 0, 0, 0, 0, 0], 8),      // multicast ff00::/8 (RFC 4291)
];

/// The IPv4 special-purpose ranges as inclusive `(first, last)` pairs, sorted and
/// non-overlapping (adjacent ranges are allowed).
pub fn special_ranges_v4() -> &'static [(u32, u32)] {
    &SPECIAL_V4
}

/// The IPv6 special-purpose ranges as inclusive `(first, last)` pairs, sorted and
/// non-overlapping. IPv4-mapped addresses are not included (see the module docs).
pub fn special_ranges_v6() -> &'static [(u128, u128)] {
    &SPECIAL_V6
}

fn in_sorted<T: Ord + Copy>(ranges: &[(T, T)], x: T) -> bool {
    // Index of the first range that starts after x; the candidate is the one before.
    let i = ranges.partition_point(|&(start, _)| start <= x);
    i > 0 && x <= ranges[i - 1].1
}

/// Whether an IPv4 address is in a special-purpose range.
pub fn is_special_v4(ip: Ipv4Addr) -> bool {
    in_sorted(special_ranges_v4(), u32::from(ip))
}

/// Whether an IPv6 address is in a special-purpose range; IPv4-mapped addresses
/// (`::ffff:a.b.c.d`) are judged by their IPv4 address.
pub fn is_special_v6(ip: Ipv6Addr) -> bool {
    if let Some(v4) = ip.to_ipv4_mapped() {
        return is_special_v4(v4);
    }
    in_sorted(special_ranges_v6(), u128::from(ip))
}

/// Whether the address is private, loopback, link-local, CGNAT, documentation,
/// benchmarking, multicast, reserved or otherwise not a real client location.
/// IPv4-mapped IPv6 addresses are judged by their IPv4 address.
pub fn is_special(ip: IpAddr) -> bool {
    match ip {
        IpAddr::V4(v4) => is_special_v4(v4),
        IpAddr::V6(v6) => is_special_v6(v6),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn assert_sorted_disjoint<T: Ord + Copy + std::fmt::Debug>(ranges: &[(T, T)]) {
        for (i, r) in ranges.iter().enumerate() {
            assert!(r.0 <= r.1, "range {i} {r:?} has start > end");
            if i > 0 {
                assert!(ranges[i - 1].1 < r.0, "range {i} {r:?} overlaps or precedes {:?}", ranges[i - 1]);
            }
        }
    }

    #[test]
    fn tables_are_sorted_and_disjoint() {
        assert_sorted_disjoint(special_ranges_v4());
        assert_sorted_disjoint(special_ranges_v6());
    }

    #[test]
    fn special_v4_addresses() {
        for s in [
            "0.0.0.0",
            "0.255.255.255",
            "10.0.0.1",
            "10.255.255.255",
            "100.64.0.0",
            "100.127.255.255",
            "127.0.0.1",
            "169.254.1.1",
            "172.16.0.0",
            "172.31.255.255",
            "192.0.0.8",
            "192.0.2.1",
            "192.168.1.1",
            "198.18.0.1",
            "198.19.255.255",
            "198.51.100.7",
            "203.0.113.9",
            "224.0.0.1",
            "239.255.255.255",
            "240.0.0.1",
            "255.255.255.255",
        ] {
            assert!(is_special(s.parse().unwrap()), "{s} should be special");
        }
    }

    #[test]
    fn public_v4_addresses() {
        for s in [
            "1.1.1.1",
            "8.8.8.8",
            "9.255.255.255",
            "11.0.0.0",
            "58.60.0.1",
            "100.63.255.255",
            "100.128.0.0",
            "126.255.255.255",
            "128.0.0.0",
            "169.253.255.255",
            "172.15.255.255",
            "172.32.0.0",
            "192.0.1.0",
            "192.0.3.0",
            "192.167.255.255",
            "192.169.0.0",
            "198.17.255.255",
            "198.20.0.0",
            "198.51.99.255",
            "203.0.112.255",
            "203.0.114.0",
            "223.255.255.255",
        ] {
            assert!(!is_special(s.parse().unwrap()), "{s} should not be special");
        }
    }

    #[test]
    fn special_v6_addresses() {
        for s in [
            "::",
            "::1",
            "100::1",
            "2001:2::1",
            "2001:db8::1",
            "2001:db8:ffff::",
            "3fff::1",
            "fc00::1",
            "fdff:ffff::",
            "fe80::1",
            "febf::1",
            "fec0::1",
            "ff02::1",
            "64:ff9b:1::1",
            // IPv4-mapped private / public
            "::ffff:10.0.0.1",
            "::ffff:127.0.0.1",
        ] {
            assert!(is_special(s.parse().unwrap()), "{s} should be special");
        }
        for s in [
            "::2",
            "2001:4860:4860::8888",
            "2001:db9::",
            "2400:3200::1",
            "240e:3b7::1",
            "fbff::1",
            "::ffff:8.8.8.8",
            "64:ff9b::8.8.8.8",
        ] {
            assert!(!is_special(s.parse().unwrap()), "{s} should not be special");
        }
    }
}
