//! IPv4 without options, not fragmented, carrying UDP.

use lagran_common::counters::Counter;
use network_types::ip::Ipv4Hdr;

use crate::packet::{Frame, MAX_OFF};

const IPPROTO_UDP: u8 = 17;
/// Header length: IHL = 5, no options.
pub const HDR_LEN: usize = Ipv4Hdr::LEN;

#[derive(Clone, Copy)]
pub struct Ipv4 {
    pub src: [u8; 4],
    pub dst: [u8; 4],
    /// TTL as received (the response's TTL replaces it in the checksum).
    pub ttl: u8,
    /// Header checksum as received, updated incrementally for the response.
    pub check: [u8; 2],
    /// Total length from the header (header + UDP datagram).
    pub tot_len: usize,
}

#[inline(always)]
pub fn parse(f: &Frame, l3: usize) -> Result<Ipv4, Counter> {
    // One check for the header; its fields and the checksum words are read
    // through it.
    let w = f.window::<HDR_LEN>(l3)?;
    let ip: Ipv4Hdr = w.load::<Ipv4Hdr, 0>();
    if ip.vihl >> 4 != 4 {
        return Err(Counter::NotIp);
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
    // RFC 1122 §3.2.1.2: "A host MUST verify the IP header checksum on every
    // received datagram and silently discard every datagram that has a bad
    // checksum." Our stack would; we pass it to the stack. This also makes the
    // response's incremental checksum update (RFC 1624) start from a true sum.
    // Summed as three little-endian words: an all-ones sum is all ones in either
    // byte order.
    let w0: u64 = w.load::<u64, 0>();
    let w1: u64 = w.load::<u64, 8>();
    let w2: u32 = w.load::<u32, 16>();
    let mut sum = (w0 & 0xffff_ffff) + (w0 >> 32) + (w1 & 0xffff_ffff) + (w1 >> 32) + w2 as u64;
    sum = (sum & 0xffff) + (sum >> 16);
    sum = (sum & 0xffff) + (sum >> 16);
    sum = (sum & 0xffff) + (sum >> 16);
    if sum != 0xffff {
        return Err(Counter::IpChecksum);
    }
    let tot_len = u16::from_be_bytes(ip.tot_len) as usize;
    // Before any other use of the length: verifiers before 6.x do not bound a
    // byte-swapped (`be16`) value to 16 bits. Every offset the program touches
    // lies inside the datagram (or the response, under 1 KiB): a datagram this
    // large cannot be a query we answer, and no access is masked by
    // `packet::bound`.
    if tot_len > MAX_OFF - l3 {
        return Err(Counter::Malformed);
    }
    // The frame may carry Ethernet padding after the datagram, never less than it.
    if tot_len < HDR_LEN + 8 || l3 + tot_len > f.len() {
        return Err(Counter::Malformed);
    }
    Ok(Ipv4 { src: ip.src_addr, dst: ip.dst_addr, ttl: ip.ttl, check: ip.check, tot_len })
}
