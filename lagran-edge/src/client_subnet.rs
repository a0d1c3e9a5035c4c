//! The client subnet a measurement is kept under: an IPv4 client by its /24, an
//! IPv6 client by its /48 (a v4-mapped address is its v4 client). The value is the
//! network address itself, `Copy` and hashable, so keying a table by it allocates
//! nothing.

use std::fmt;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};

pub const V4_PREFIX: u8 = 24;
pub const V6_PREFIX: u8 = 48;

#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct ClientSubnet(IpAddr);

impl ClientSubnet {
    /// The /24 (IPv4) or /48 (IPv6) holding `ip`.
    pub fn of(ip: IpAddr) -> ClientSubnet {
        match ip.to_canonical() {
            IpAddr::V4(a) => ClientSubnet(IpAddr::V4(Ipv4Addr::from_bits(a.to_bits() & !0xff))),
            IpAddr::V6(a) => {
                let host_bits = 128 - u32::from(V6_PREFIX);
                ClientSubnet(IpAddr::V6(Ipv6Addr::from_bits(a.to_bits() & !((1u128 << host_bits) - 1))))
            }
        }
    }

    /// The network address (host bits zero).
    pub fn network(self) -> IpAddr {
        self.0
    }

    pub fn prefix_len(self) -> u8 {
        if self.0.is_ipv4() { V4_PREFIX } else { V6_PREFIX }
    }
}

/// `58.60.0.0/24`, `2001:db8:1::/48`: the API's `client_subnet`.
impl fmt::Display for ClientSubnet {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}/{}", self.0, self.prefix_len())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn subnet(ip: &str) -> String {
        ClientSubnet::of(ip.parse().unwrap()).to_string()
    }

    #[test]
    fn v4_by_24_and_v6_by_48() {
        assert_eq!(subnet("58.60.1.77"), "58.60.1.0/24");
        assert_eq!(subnet("127.0.0.1"), "127.0.0.0/24");
        assert_eq!(subnet("::ffff:58.60.1.77"), "58.60.1.0/24", "a v4-mapped client is its v4 client");
        assert_eq!(subnet("2001:db8:1:2:3::9"), "2001:db8:1::/48");
        assert_eq!(
            ClientSubnet::of("2001:db8:1:ffff::1".parse().unwrap()),
            ClientSubnet::of("2001:db8:1::".parse().unwrap())
        );
    }
}
