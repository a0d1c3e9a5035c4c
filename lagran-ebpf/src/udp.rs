//! UDP (the caller checks the destination against the listen set).

use lagran_common::counters::Counter;
use network_types::udp::UdpHdr;

use crate::packet::Frame;

pub const HDR_LEN: usize = UdpHdr::LEN;

#[derive(Clone, Copy)]
pub struct Udp {
    pub src: [u8; 2],
    pub dst: [u8; 2],
    /// Length of the DNS message (UDP length minus the header).
    pub payload_len: usize,
    /// The checksum field as received (0: none, which IPv6 forbids).
    pub check: [u8; 2],
}

/// The query's UDP checksum is not verified: XDP runs before the stack would
/// check it, so a corrupted query may be answered; its DNS ID and question
/// still have to match on the client side.
#[inline(always)]
pub fn parse(f: &Frame, l4: usize, ip_payload_len: usize) -> Result<Udp, Counter> {
    let udp: UdpHdr = f.header(l4)?;
    let len = u16::from_be_bytes(udp.len) as usize;
    if len != ip_payload_len {
        return Err(Counter::Malformed);
    }
    if len < HDR_LEN + crate::dns::HDR_LEN {
        return Err(Counter::TooShort);
    }
    Ok(Udp { src: udp.src, dst: udp.dst, payload_len: len - HDR_LEN, check: udp.check })
}
