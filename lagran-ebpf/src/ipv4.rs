//! IPv4 without options, not fragmented, carrying UDP.

use lagran_common::counters::Counter;
use network_types::ip::Ipv4Hdr;

use crate::packet::Frame;

const IPPROTO_UDP: u8 = 17;
/// Header length: IHL = 5, no options.
pub const HDR_LEN: usize = Ipv4Hdr::LEN;

#[derive(Clone, Copy)]
pub struct Ipv4 {
    pub src: [u8; 4],
    pub dst: [u8; 4],
    pub tos: u8,
    pub id: [u8; 2],
    /// Flags and fragment offset as received (DF may be set; MF and offset are 0).
    pub frags: [u8; 2],
    /// Total length from the header (header + UDP datagram).
    pub tot_len: usize,
}

#[inline(always)]
pub fn parse(f: &Frame, l3: usize) -> Result<Ipv4, Counter> {
    let ip: Ipv4Hdr = f.header(l3)?;
    if ip.vihl >> 4 != 4 {
        return Err(Counter::NotIpv4);
    }
    if ip.vihl & 0x0f != 5 {
        return Err(Counter::IpOptions);
    }
    let frags = u16::from_be_bytes(ip.frags);
    // MF set or a non-zero offset.
    if frags & 0x3fff != 0 {
        return Err(Counter::Fragment);
    }
    if ip.proto != IPPROTO_UDP {
        return Err(Counter::NotUdp);
    }
    let tot_len = u16::from_be_bytes(ip.tot_len) as usize;
    // The frame may carry Ethernet padding after the datagram, never less than it.
    if tot_len < HDR_LEN + 8 || l3 + tot_len > f.len() {
        return Err(Counter::Malformed);
    }
    Ok(Ipv4 { src: ip.src_addr, dst: ip.dst_addr, tos: ip.tos, id: ip.id, frags: ip.frags, tot_len })
}
