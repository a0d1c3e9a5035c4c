//! The DNS query: header, one question, at most one OPT carrying at most one ECS
//! option besides options that do not change the answer (COOKIE, padding).
//!
//! Anything else is handed to userspace, which answers it in full (RFC 1035,
//! RFC 6891, RFC 7871); the counters say why.

use lagran_common::{counters::Counter, names::NAME_MAX};

use crate::{csum::Sum, maps::Scratch, packet::Frame};

pub const HDR_LEN: usize = 12;
const QTYPE_A: u16 = 1;
const QCLASS_IN: u16 = 1;
const TYPE_OPT: u16 = 41;
/// RFC 7871 §6: OPTION-CODE of EDNS Client Subnet.
const OPT_ECS: u16 = 8;
/// RFC 7873 §4: OPTION-CODE of COOKIE.
const OPT_COOKIE: u16 = 10;
/// RFC 7830 §3: OPTION-CODE of Padding.
const OPT_PADDING: u16 = 12;
const FAMILY_IPV4: u16 = 1;
const FAMILY_IPV6: u16 = 2;
/// Size of the OPT record without options: root name, TYPE, CLASS, TTL, RDLEN.
pub const OPT_FIXED_LEN: usize = 11;
/// ECS option header: OPTION-CODE, OPTION-LENGTH, FAMILY, SOURCE, SCOPE.
pub const ECS_FIXED_LEN: usize = 8;

pub const FLAG_QR: u16 = 0x8000;
const OPCODE_MASK: u16 = 0x7800;
pub const FLAG_AA: u16 = 0x0400;
pub const FLAG_RD: u16 = 0x0100;
pub const FLAG_CD: u16 = 0x0010;

/// What the response needs to know about the query.
#[derive(Clone, Copy)]
pub struct Query {
    pub id: [u8; 2],
    /// Header flags as received (host order).
    pub flags: u16,
    pub arcount: u16,
    /// Length of the question name in wire format, 1–255.
    pub qlen: usize,
    /// One's-complement partial sum of the name bytes, as they sit in the packet
    /// (the question starts at an even offset of the DNS message).
    pub qsum: u32,
    /// 1 when the query carried an OPT record.
    pub has_opt: u32,
    /// The DO bit as it sits in the OPT TTL's third byte (0x80 or 0).
    pub do_bit: u8,
    /// 1 when the OPT carried an IPv4 ECS option.
    pub has_ecs: u32,
    /// ECS SOURCE PREFIX-LENGTH, 0–32.
    pub ecs_source: u8,
    /// ECS ADDRESS, zero-extended to four bytes (bits beyond SOURCE are zero).
    pub ecs_addr: [u8; 4],
}

/// Parses the message at `dns` (frame offset) of `len` bytes; the name goes into
/// `scratch.key`, lowercased.
#[inline(always)]
pub fn parse(
    ctx: &aya_ebpf::programs::XdpContext,
    f: &Frame,
    dns: usize,
    len: usize,
    scratch: *mut Scratch,
) -> Result<Query, Counter> {
    let hdr = f.bytes::<HDR_LEN>(dns)?;
    let id = [hdr[0], hdr[1]];
    let flags = u16::from_be_bytes([hdr[2], hdr[3]]);
    let qdcount = u16::from_be_bytes([hdr[4], hdr[5]]);
    let ancount = u16::from_be_bytes([hdr[6], hdr[7]]);
    let nscount = u16::from_be_bytes([hdr[8], hdr[9]]);
    let arcount = u16::from_be_bytes([hdr[10], hdr[11]]);
    if flags & FLAG_QR != 0 {
        return Err(Counter::IsResponse);
    }
    if flags & OPCODE_MASK != 0 {
        return Err(Counter::Opcode);
    }
    if qdcount != 1 {
        return Err(Counter::Qdcount);
    }
    if ancount != 0 || nscount != 0 || arcount > 1 {
        return Err(Counter::OtherSections);
    }

    let (qlen, qsum) = parse_name(f, dns + HDR_LEN, scratch)?;
    let f = &Frame::reload(ctx);

    // QTYPE, QCLASS
    let q_end = HDR_LEN + qlen + 4;
    if q_end > len {
        return Err(Counter::TooShort);
    }
    let tc = f.bytes::<4>(dns + HDR_LEN + qlen)?;
    if u16::from_be_bytes([tc[0], tc[1]]) != QTYPE_A {
        return Err(Counter::Qtype);
    }
    if u16::from_be_bytes([tc[2], tc[3]]) != QCLASS_IN {
        return Err(Counter::Qclass);
    }

    let mut q =
        Query { id, flags, arcount, qlen, qsum, has_opt: 0, do_bit: 0, has_ecs: 0, ecs_source: 0, ecs_addr: [0; 4] };
    if arcount == 0 {
        if q_end != len {
            return Err(Counter::TrailingData);
        }
        return Ok(q);
    }
    parse_opt(f, dns + q_end, len - q_end, &mut q)?;
    Ok(q)
}

/// Reads the question name at frame offset `off` into `scratch.key`: label length
/// bytes as they are, ASCII letters lowercased, the root label included. Returns
/// its length and the checksum partial sum of its bytes as received.
///
/// One bounded loop over at most 255 bytes. Compression pointers (RFC 1035 §4.1.4)
/// and the reserved label types have no place in a question we answer.
#[inline(always)]
fn parse_name(f: &Frame, off: usize, scratch: *mut Scratch) -> Result<(usize, u32), Counter> {
    // SAFETY: `scratch` is this CPU's slot of the scratch map, valid for the whole run.
    let key = unsafe { &mut (*scratch).key.name };
    // Zero the key: the bytes after the name are part of the hash key.
    // SAFETY: `key` is 256 bytes; the cast views it as 32 u64 words.
    let words = unsafe { &mut *(key.as_mut_ptr() as *mut [u64; 32]) };
    for w in words.iter_mut() {
        *w = 0;
    }
    let mut sum = Sum::new();
    // The offset of the next label's length byte lives in the scratch map, not in
    // a register: the verifier does not track map memory, so the paths through a
    // label byte and an ordinary byte meet at the loop head in the same state and
    // are pruned, instead of one state per possible label layout.
    // SAFETY (all raw accesses below): plain per-CPU map memory.
    let next_label = unsafe { &mut (*scratch).next_label };
    unsafe { core::ptr::write_volatile(next_label, 0) };
    let mut i = 0usize;
    let len = loop {
        if i >= NAME_MAX {
            return Err(Counter::NameTooLong);
        }
        let b = f.u8(off + i)?;
        sum.byte_at(b, i);
        let out = if i == unsafe { core::ptr::read_volatile(next_label) } as usize {
            if b == 0 {
                // The root label ends the name.
                key[i] = 0;
                break i + 1;
            }
            if b & 0xc0 != 0 {
                return Err(Counter::NameCompressed);
            }
            unsafe { core::ptr::write_volatile(next_label, (i + 1 + b as usize) as u32) };
            b
        } else {
            b.to_ascii_lowercase()
        };
        key[i] = out;
        i += 1;
    };
    // Store and reload the length: the loop leaves the verifier one exact value per
    // exit, and everything after it would be verified once per value. The reload
    // is an unknown scalar to the verifier; the check below bounds it to 1–255.
    // SAFETY: plain per-CPU map memory.
    let qlen = unsafe {
        core::ptr::write_volatile(&mut (*scratch).qlen, len as u32);
        core::ptr::read_volatile(&(*scratch).qlen)
    } as usize;
    if qlen == 0 || qlen > NAME_MAX {
        return Err(Counter::NameTooLong);
    }
    Ok((qlen, sum.value()))
}

/// Most EDNS options walked in one OPT record. `dig` sends a COOKIE, resolvers
/// add ECS and sometimes padding: four covers them; more are passed.
const MAX_OPTIONS: usize = 4;
/// Longest OPT RDATA answered here (a padded query stays far below it). Also a
/// constant bound the verifier needs on every option offset.
const MAX_OPT_RDATA: usize = 512;

/// Parses the one additional record, which must be an OPT (RFC 6891 §6.1.2) that
/// ends the message. Its options are walked exactly as `dns::ecs::find_in_opt`
/// walks them in userspace: at most one ECS option (RFC 7871 §6) is used, and
/// options that do not change the answer are skipped — userspace skips them too
/// and echoes none of them, so the kernel's response is the same:
/// - COOKIE (RFC 7873 §5.2.1: a server that does not implement cookies "MUST
///   ignore the COOKIE option"; server cookies are not implemented);
/// - Padding (RFC 7830 §3: "Responders MUST ignore the content of the Padding
///   option"; we pad nothing, as §4 allows for unencrypted transport).
///
/// Any other option is passed, so that one we later start to honour in userspace
/// cannot be answered differently here.
#[inline(always)]
fn parse_opt(f: &Frame, off: usize, left: usize, q: &mut Query) -> Result<(), Counter> {
    if left < OPT_FIXED_LEN {
        return Err(Counter::TooShort);
    }
    let opt = f.bytes::<OPT_FIXED_LEN>(off)?;
    // NAME must be 0 (root domain).
    if opt[0] != 0 || u16::from_be_bytes([opt[1], opt[2]]) != TYPE_OPT {
        return Err(Counter::OtherSections);
    }
    // CLASS is the requestor's UDP payload size: any value fits our small answers.
    // TTL: EXTENDED-RCODE, VERSION, DO|Z. Version > 0 gets BADVERS from userspace.
    if opt[5] != 0 || opt[6] != 0 {
        return Err(Counter::OptUnsupported);
    }
    q.has_opt = 1;
    q.do_bit = opt[7] & 0x80;
    let rdlen = u16::from_be_bytes([opt[9], opt[10]]) as usize;
    let rest = left - OPT_FIXED_LEN;
    if rdlen > rest {
        return Err(Counter::TooShort);
    }
    if rdlen < rest {
        return Err(Counter::TrailingData);
    }
    if rdlen > MAX_OPT_RDATA {
        return Err(Counter::OptUnsupported);
    }
    let start = off + OPT_FIXED_LEN;
    let end = start + rdlen;
    let mut o = start;
    let mut k = 0;
    while k < MAX_OPTIONS {
        if o >= end {
            return Ok(());
        }
        // RFC 6891 §6.1.2: OPTION-CODE, OPTION-LENGTH, then OPTION-DATA. An option
        // list that overruns RDATA is FORMERR in userspace.
        if end - o < 4 {
            return Err(Counter::OptMalformed);
        }
        let head = f.bytes::<4>(o)?;
        let code = u16::from_be_bytes([head[0], head[1]]);
        let len = u16::from_be_bytes([head[2], head[3]]) as usize;
        if len > end - o - 4 {
            return Err(Counter::OptMalformed);
        }
        // Implied by the check above; stated against a constant for the verifier.
        if len > MAX_OPT_RDATA {
            return Err(Counter::OptMalformed);
        }
        match code {
            OPT_ECS => {
                // RFC 7871 §7.2.1 (a second ECS option is malformed: FORMERR upstairs).
                if q.has_ecs != 0 {
                    return Err(Counter::EcsBad);
                }
                parse_ecs(f, o + 4, len, q)?;
            }
            OPT_COOKIE | OPT_PADDING => {}
            _ => return Err(Counter::OptUnsupported),
        }
        o += 4 + len;
        k += 1;
    }
    if o < end {
        return Err(Counter::OptUnsupported);
    }
    Ok(())
}

/// Reads an ECS option's data (`len` bytes at `o`) into `q`.
#[inline(always)]
fn parse_ecs(f: &Frame, o: usize, len: usize, q: &mut Query) -> Result<(), Counter> {
    if len < 4 {
        return Err(Counter::EcsBad);
    }
    let ecs = f.bytes::<4>(o)?;
    let family = u16::from_be_bytes([ecs[0], ecs[1]]);
    let source = ecs[2];
    let scope = ecs[3];
    if family == FAMILY_IPV6 {
        return Err(Counter::EcsV6);
    }
    // RFC 7871 §7.1.1: SCOPE PREFIX-LENGTH MUST be 0 in queries; ADDRESS has
    // ceil(SOURCE / 8) octets; bits beyond SOURCE MUST be zero.
    if family != FAMILY_IPV4 || source > 32 || scope != 0 {
        return Err(Counter::EcsBad);
    }
    let n = (source as usize).div_ceil(8);
    if len - 4 != n {
        return Err(Counter::EcsBad);
    }
    let a = o + 4;
    let mut addr = [0u8; 4];
    if n > 0 {
        addr[0] = f.u8(a)?;
    }
    if n > 1 {
        addr[1] = f.u8(a + 1)?;
    }
    if n > 2 {
        addr[2] = f.u8(a + 2)?;
    }
    if n > 3 {
        addr[3] = f.u8(a + 3)?;
    }
    let v = u32::from_be_bytes(addr);
    let mask = if source == 0 { 0 } else { u32::MAX << (32 - source as u32) };
    if v & !mask != 0 {
        return Err(Counter::EcsBad);
    }
    q.has_ecs = 1;
    q.ecs_source = source;
    q.ecs_addr = addr;
    Ok(())
}
