//! Ethernet: an untagged frame or one 802.1Q tag, carrying IPv4.

use lagran_common::counters::Counter;
use network_types::{eth::EthHdr, vlan::VlanHdr};

use crate::packet::Frame;

const ETH_P_IP: u16 = 0x0800;
const ETH_P_8021Q: u16 = 0x8100;

/// The parsed layer 2 header.
#[derive(Clone, Copy)]
pub struct Eth {
    /// Offset of the IPv4 header: 14, or 18 behind one VLAN tag.
    pub l3: usize,
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
    // A second tag (QinQ), IPv6, ARP, …: not ours.
    if proto != ETH_P_IP {
        return Err(Counter::NotIpv4);
    }
    Ok(Eth { l3 })
}
