//! Ethernet: an untagged frame or one 802.1Q tag, carrying IPv4 or IPv6.

use lagran_common::counters::Counter;
use network_types::{eth::EthHdr, vlan::VlanHdr};

use crate::packet::Frame;

const ETH_P_IP: u16 = 0x0800;
const ETH_P_8021Q: u16 = 0x8100;
const ETH_P_IPV6: u16 = 0x86dd;

/// The parsed layer 2 header.
#[derive(Clone, Copy)]
pub struct Eth {
    /// Offset of the IP header: 14, or 18 behind one VLAN tag.
    pub l3: usize,
    /// 1 for IPv6, 0 for IPv4.
    pub ipv6: u32,
}

#[inline(always)]
pub fn parse(f: &Frame) -> Result<Eth, Counter> {
    let eth: EthHdr = f.header(0)?;
    let mut l3 = EthHdr::LEN;
    let mut proto = u16::from_be(eth.ether_type);
    if proto == ETH_P_8021Q {
        let vlan: VlanHdr = f.header(EthHdr::LEN)?;
        l3 += VlanHdr::LEN;
        proto = u16::from_be(vlan.ether_type);
    }
    // A second tag (QinQ), ARP, …: not ours.
    match proto {
        ETH_P_IP => Ok(Eth { l3, ipv6: 0 }),
        ETH_P_IPV6 => Ok(Eth { l3, ipv6: 1 }),
        _ => Err(Counter::NotIp),
    }
}
