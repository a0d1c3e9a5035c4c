//! Turns the query frame into the response in place: swap addresses and ports,
//! rewrite the DNS header, append the answers after the question, re-emit the OPT
//! record, fix lengths and both checksums.
//!
//! The response (RFC 1035 §4.1, RFC 6891 §6.1.3, RFC 7871 §7.2):
//! - header: ID kept; QR, AA, RD and CD copied from the query; RCODE 0;
//!   QDCOUNT 1, ANCOUNT = addresses, NSCOUNT 0, ARCOUNT as in the query;
//! - question as received (the client's letter case);
//! - answers `C0 0C | 0001 | 0001 | TTL | 0004 | address`;
//! - OPT when the query had one: root, TYPE 41, CLASS = our UDP payload size,
//!   TTL 0 but the DO bit copied, and the ECS option echoed with SCOPE
//!   PREFIX-LENGTH set to the matched block's length (0 when SOURCE was 0).
//!
//! Sizes: the frame grows by 16 bytes per address, less the query's options that
//! are not echoed (COOKIE, padding) and any Ethernet padding it carried.

use aya_ebpf::{bindings::xdp_action, helpers::generated::bpf_xdp_adjust_tail, programs::XdpContext};
use lagran_common::{answers::AnswerV4, counters::Counter};

use crate::{
    csum::Sum,
    dns::{self, ECS_FIXED_LEN, FLAG_AA, FLAG_CD, FLAG_QR, FLAG_RD, OPT_FIXED_LEN, Query},
    eth::Eth,
    ipv4::{self, Ipv4},
    packet::Frame,
    udp::{self, Udp},
};

/// IPv4 TTL of our responses.
const IP_TTL: u8 = 64;
const IPPROTO_UDP: u8 = 17;
/// Bytes per answer record.
const RR_LEN: usize = 16;

/// What goes into the response besides the query itself.
pub struct Reply<'a> {
    pub answer: &'a AnswerV4,
    /// Number of addresses, 1–4 (checked by the caller).
    pub count: usize,
    /// ECS SCOPE PREFIX-LENGTH to echo.
    pub scope: u8,
    /// Our UDP payload size for the OPT CLASS.
    pub udp_payload: u16,
}

#[inline(always)]
pub fn build(ctx: &XdpContext, eth: &Eth, ip: &Ipv4, udp: &Udp, q: &Query, r: &Reply) -> Result<u32, Counter> {
    let count = r.count;
    // The response's OPT carries only the echoed ECS option: the query's other
    // options (COOKIE, padding) are not echoed, so it may be shorter than the
    // query's OPT and the frame may shrink.
    let opt_len = if q.has_opt == 0 {
        0
    } else if q.has_ecs == 0 {
        OPT_FIXED_LEN
    } else {
        OPT_FIXED_LEN + ECS_FIXED_LEN + (q.ecs_source as usize).div_ceil(8)
    };
    let dns_len = dns::HDR_LEN + q.qlen + 4 + RR_LEN * count + opt_len;
    let udp_len = udp::HDR_LEN + dns_len;
    let ip_len = ipv4::HDR_LEN + udp_len;
    let new_len = eth.l3 + ip_len;
    let old_len = Frame::reload(ctx).len();
    let delta = new_len as i32 - old_len as i32;
    // SAFETY: the helper only resizes the frame; every packet pointer is derived
    // again from the context below.
    if unsafe { bpf_xdp_adjust_tail(ctx.ctx, delta) } != 0 {
        return Err(Counter::TailGrowFailed);
    }
    let f = Frame::new(ctx);
    let l3 = eth.l3;
    let l4 = l3 + ipv4::HDR_LEN;
    let dns = l4 + udp::HDR_LEN;

    // Ethernet: back to where it came from.
    let (s, d) = (eth.src, eth.dst);
    f.write::<12>(0, [s[0], s[1], s[2], s[3], s[4], s[5], d[0], d[1], d[2], d[3], d[4], d[5]])?;

    // IPv4: addresses swapped, new length and TTL, header checksum recomputed.
    let (src, dst) = (ip.dst, ip.src);
    let mut ipsum = Sum::new();
    ipsum.word(u16::from_be_bytes([0x45, ip.tos]));
    ipsum.word(ip_len as u16);
    ipsum.word(u16::from_be_bytes(ip.id));
    ipsum.word(u16::from_be_bytes(ip.frags));
    ipsum.word(u16::from_be_bytes([IP_TTL, IPPROTO_UDP]));
    let mut addrs = Sum::new();
    addrs.word(u16::from_be_bytes([src[0], src[1]]));
    addrs.word(u16::from_be_bytes([src[2], src[3]]));
    addrs.word(u16::from_be_bytes([dst[0], dst[1]]));
    addrs.word(u16::from_be_bytes([dst[2], dst[3]]));
    ipsum.add(addrs.value());
    let ipc = ipsum.finish().to_be_bytes();
    let il = (ip_len as u16).to_be_bytes();
    f.write::<20>(
        l3,
        [
            0x45,
            ip.tos,
            il[0],
            il[1],
            ip.id[0],
            ip.id[1],
            ip.frags[0],
            ip.frags[1],
            IP_TTL,
            IPPROTO_UDP,
            ipc[0],
            ipc[1],
            src[0],
            src[1],
            src[2],
            src[3],
            dst[0],
            dst[1],
            dst[2],
            dst[3],
        ],
    )?;

    // DNS header: ID, QDCOUNT (1), NSCOUNT (0) and ARCOUNT stay as received.
    let flags = FLAG_QR | FLAG_AA | (q.flags & (FLAG_RD | FLAG_CD));
    let fl = flags.to_be_bytes();
    f.write::<6>(dns + 2, [fl[0], fl[1], 0, 1, 0, count as u8])?;

    // Everything after the name: QTYPE/QCLASS (kept), answers, OPT. It starts at
    // DNS offset 12 + qlen; its sum is taken as if that were even and swapped below.
    let mut tail = Sum::new();
    tail.word(1); // QTYPE A
    tail.word(1); // QCLASS IN
    let a = r.answer;
    let ttl = a.ttl.to_be_bytes();
    let mut off = dns + dns::HDR_LEN + q.qlen + 4;
    let mut k = 0;
    while k < answers_max() {
        if k >= count {
            break;
        }
        let ad = a.addrs[k];
        f.write::<RR_LEN>(
            off,
            [0xc0, 0x0c, 0, 1, 0, 1, ttl[0], ttl[1], ttl[2], ttl[3], 0, 4, ad[0], ad[1], ad[2], ad[3]],
        )?;
        tail.word(0xc00c);
        tail.word(1);
        tail.word(1);
        tail.word(u16::from_be_bytes([ttl[0], ttl[1]]));
        tail.word(u16::from_be_bytes([ttl[2], ttl[3]]));
        tail.word(4);
        tail.word(u16::from_be_bytes([ad[0], ad[1]]));
        tail.word(u16::from_be_bytes([ad[2], ad[3]]));
        off += RR_LEN;
        k += 1;
    }
    if q.has_opt != 0 {
        let n = (q.ecs_source as usize).div_ceil(8);
        let rdlen: u16 = if q.has_ecs != 0 { (ECS_FIXED_LEN + n) as u16 } else { 0 };
        let pl = r.udp_payload.to_be_bytes();
        let rd = rdlen.to_be_bytes();
        let opt = [0, 0, 41, pl[0], pl[1], 0, 0, q.do_bit, 0, rd[0], rd[1]];
        f.write::<OPT_FIXED_LEN>(off, opt)?;
        // The OPT starts at an even distance from the tail start (4 + 16·count).
        let mut j = 0;
        while j < OPT_FIXED_LEN {
            tail.byte_at(opt[j], j);
            j += 1;
        }
        if q.has_ecs != 0 {
            let scope = if q.ecs_source == 0 { 0 } else { r.scope };
            let ecs = [0, 8, 0, (4 + n) as u8, 0, 1, q.ecs_source, scope];
            f.write::<ECS_FIXED_LEN>(off + OPT_FIXED_LEN, ecs)?;
            let mut j = 0;
            while j < ECS_FIXED_LEN {
                tail.byte_at(ecs[j], OPT_FIXED_LEN + j);
                j += 1;
            }
            let at = off + OPT_FIXED_LEN + ECS_FIXED_LEN;
            let ea = q.ecs_addr;
            let base = OPT_FIXED_LEN + ECS_FIXED_LEN;
            if n > 0 {
                f.write::<1>(at, [ea[0]])?;
                tail.byte_at(ea[0], base);
            }
            if n > 1 {
                f.write::<1>(at + 1, [ea[1]])?;
                tail.byte_at(ea[1], base + 1);
            }
            if n > 2 {
                f.write::<1>(at + 2, [ea[2]])?;
                tail.byte_at(ea[2], base + 2);
            }
            if n > 3 {
                f.write::<1>(at + 3, [ea[3]])?;
                tail.byte_at(ea[3], base + 3);
            }
        }
    }

    // UDP checksum over pseudo-header, UDP header and the whole message.
    let mut sum = Sum::new();
    sum.add(addrs.value());
    sum.word(IPPROTO_UDP as u16);
    sum.word(udp_len as u16);
    sum.word(u16::from_be_bytes(udp.dst)); // new source port
    sum.word(u16::from_be_bytes(udp.src)); // new destination port
    sum.word(udp_len as u16);
    sum.word(u16::from_be_bytes(q.id));
    sum.word(flags);
    sum.word(1); // QDCOUNT
    sum.word(count as u16);
    sum.word(q.arcount);
    sum.add(q.qsum);
    let t = fold(tail.value());
    // The tail starts at DNS offset 12 + qlen: odd when qlen is odd.
    sum.word(if q.qlen & 1 == 1 { t.swap_bytes() } else { t });
    let mut c = sum.finish();
    if c == 0 {
        // RFC 768: a computed zero is sent as all ones (0 means "no checksum").
        c = 0xffff;
    }
    let ul = (udp_len as u16).to_be_bytes();
    let cs = c.to_be_bytes();
    f.write::<8>(l4, [udp.dst[0], udp.dst[1], udp.src[0], udp.src[1], ul[0], ul[1], cs[0], cs[1]])?;
    Ok(xdp_action::XDP_TX)
}

#[inline(always)]
const fn answers_max() -> usize {
    lagran_common::answers::MAX_ADDRS
}

/// Folds a sum to 16 bits without complementing it.
#[inline(always)]
fn fold(mut s: u32) -> u16 {
    s = (s & 0xffff) + (s >> 16);
    s = (s & 0xffff) + (s >> 16);
    s as u16
}
