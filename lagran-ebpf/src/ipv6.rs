//! IPv6: the fixed header (RFC 8200 §3) directly followed by UDP. A packet with
//! extension headers is passed: the stack handles them, and so does userspace.

use lagran_common::counters::Counter;

use crate::packet::{Frame, MAX_OFF};

const NEXT_UDP: u8 = 17;
/// RFC 8200 §4.5: the Fragment header.
const NEXT_FRAGMENT: u8 = 44;
/// The fixed header.
pub const HDR_LEN: usize = 40;

/// An IPv6 address as two big-endian halves (`hi` holds octets 0–7).
#[derive(Clone, Copy)]
pub struct Addr6 {
    pub hi: u64,
    pub lo: u64,
}

#[derive(Clone, Copy)]
pub struct Ipv6 {
    pub src: Addr6,
    /// The destination as loaded (machine order words): the listen key.
    pub dst_raw: [u64; 2],
    /// Payload length from the header (the UDP datagram).
    pub payload_len: usize,
}

#[inline(always)]
pub fn parse(f: &Frame, l3: usize) -> Result<Ipv6, Counter> {
    // One check for the whole fixed header (five words).
    let p = f.at::<HDR_LEN>(l3)?;
    // SAFETY: `at` checked `[p, p + 40)` against the frame end.
    let (w0, s0, s1, d0, d1) = unsafe {
        (
            core::ptr::read_unaligned(p as *const u64),
            core::ptr::read_unaligned((p + 8) as *const u64),
            core::ptr::read_unaligned((p + 16) as *const u64),
            core::ptr::read_unaligned((p + 24) as *const u64),
            core::ptr::read_unaligned((p + 32) as *const u64),
        )
    };
    let h = u64::from_be(w0);
    if h >> 60 != 6 {
        return Err(Counter::NotIp);
    }
    let payload_len = ((h >> 16) & 0xffff) as usize;
    let next = ((h >> 8) & 0xff) as u8;
    if next == NEXT_FRAGMENT {
        return Err(Counter::Fragment);
    }
    if next != NEXT_UDP {
        return Err(Counter::NotUdp);
    }
    // As for IPv4: bound the length before any use (see `ipv4::parse`). A
    // payload length of 0 is a jumbogram (RFC 2675), which needs a hop-by-hop
    // header: not UDP directly after the fixed header.
    if payload_len > MAX_OFF - l3 - HDR_LEN {
        return Err(Counter::Malformed);
    }
    // The frame length is opaque to LLVM here: from this comparison it would
    // drop the check before the UDP header load, which the verifier needs.
    if payload_len < 8 || l3 + HDR_LEN + payload_len > core::hint::black_box(f.len()) {
        return Err(Counter::Malformed);
    }
    Ok(Ipv6 { src: Addr6 { hi: u64::from_be(s0), lo: u64::from_be(s1) }, dst_raw: [d0, d1], payload_len })
}
