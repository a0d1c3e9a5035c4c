//! The DNS query: header, one question, at most one OPT carrying at most one ECS
//! option besides options that do not change the answer (COOKIE, padding).
//!
//! Anything else is handed to userspace, which answers it in full (RFC 1035,
//! RFC 6891, RFC 7871); the counters say why.

use lagran_common::{
    counters::Counter,
    names::{NAME_MAX, NameValue, WORDS, hash_finish, hash_seed, hash_step, lowercase_word},
};

use crate::{ipv6::Addr6, maps::Scratch, packet::Frame, query::Query};

pub const HDR_LEN: usize = 12;
const QTYPE_A: u16 = 1;
/// RFC 3596 §2.1: "The AAAA resource record type is a record specific to the
/// Internet class that stores a single IPv6 address. The IANA assigned value
/// of the type is 28 (decimal)."
const QTYPE_AAAA: u16 = 28;
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
pub const FLAG_TC: u16 = 0x0200;
pub const FLAG_RD: u16 = 0x0100;
pub const FLAG_CD: u16 = 0x0010;

/// A value as read from map memory, volatile: the compiler cannot carry over
/// what it knows from the store, so the verifier sees an unknown scalar (see
/// `Scratch::query`). Every field of the query that a later branch or length
/// depends on is read this way.
#[inline(always)]
pub fn opaque<T: Copy>(v: &T) -> T {
    // SAFETY: a reference is valid for reads.
    unsafe { core::ptr::read_volatile(v) }
}

/// Parses the message at `dns` (frame offset) of `len` bytes into
/// `scratch.query`; the lowercased name goes into `scratch.words`.
#[inline(always)]
pub fn parse(
    ctx: &aya_ebpf::programs::XdpContext,
    f: &Frame,
    dns: usize,
    len: usize,
    scratch: *mut Scratch,
) -> Result<(), Counter> {
    // The header as one 8-octet and one 4-octet word (machine order): each
    // field is a shift and a swap, not two byte loads.
    let p = f.at::<HDR_LEN>(dns)?;
    // SAFETY: `at` checked `[p, p + 12)` against the frame end.
    let (w0, w1) =
        unsafe { (core::ptr::read_unaligned(p as *const u64), core::ptr::read_unaligned((p + 8) as *const u32)) };
    let id = (w0 as u16).to_ne_bytes();
    let flags = u16::from_be((w0 >> 16) as u16);
    let qdcount = u16::from_be((w0 >> 32) as u16);
    let ancount = (w0 >> 48) as u16;
    let nscount = w1 as u16;
    let arcount = u16::from_be((w1 >> 16) as u16);
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

    let (off, end) = (dns + HDR_LEN, dns + len);
    // Where the name starts and the message ends, for `unknown_name_reason`.
    // SAFETY: plain per-CPU map memory.
    unsafe {
        core::ptr::write_volatile(&mut (*scratch).name_off, off as u32);
        core::ptr::write_volatile(&mut (*scratch).name_end, end as u32);
    }
    let name = parse_name(ctx, f, off, end, scratch)?;
    let (qlen, qsum, qhash) = (name.len, name.sum, name.hash);
    let f = &Frame::reload(ctx);

    // QTYPE, QCLASS
    let q_end = HDR_LEN + qlen + 4;
    // The name as read leaves no room for QTYPE and QCLASS: a truncated
    // question, or a name that is not one (`unknown_name_reason` tells which).
    if q_end > len {
        return Err(Counter::NameUnknown);
    }
    let tc = f.bytes::<4>(dns + HDR_LEN + qlen)?;
    let qtype = u16::from_be_bytes([tc[0], tc[1]]);
    if qtype != QTYPE_A && qtype != QTYPE_AAAA {
        return Err(Counter::Qtype);
    }
    if u16::from_be_bytes([tc[2], tc[3]]) != QCLASS_IN {
        return Err(Counter::Qclass);
    }

    // SAFETY: plain per-CPU map memory, this packet's.
    let q = unsafe { &mut (*scratch).query };
    q.id = id;
    q.aaaa = (qtype == QTYPE_AAAA) as u32;
    q.flags = flags;
    q.arcount = arcount;
    q.qlen = qlen;
    q.qsum = qsum;
    q.qhash = qhash;
    // Nothing in `Scratch` is zeroed: what says which of the other fields this
    // packet filled (the ECS address, the cookie words) is reset here, one
    // volatile store each, so no `memset` enters the section.
    for flag in [&mut q.has_opt, &mut q.has_ecs, &mut q.ecs_v6, &mut q.cookie] {
        // SAFETY: a field of the query above.
        unsafe { core::ptr::write_volatile(flag, 0) };
    }
    // SAFETY: likewise.
    unsafe {
        core::ptr::write_volatile(&mut q.do_bit, 0);
        core::ptr::write_volatile(&mut q.ecs_source, 0);
    }
    if arcount == 0 {
        if q_end != len {
            return Err(Counter::TrailingData);
        }
        return Ok(());
    }
    parse_opt(f, dns + q_end, len - q_end, q)
}

/// Most labels in a name of at most 255 octets: 127 one-octet labels and the root.
const MAX_LABELS: usize = 128;

/// The question name as parsed.
pub struct Name {
    /// Wire length, root label included, 1–255.
    pub len: usize,
    /// `names::hash_words` of the lowercased name: where `lagran_names` holds it.
    pub hash: u64,
    /// One's-complement partial sum of the name octets as received, as a
    /// big-endian 16-bit value (the name starts at an even offset of the message).
    pub sum: u32,
}

/// Each octet's high bit set where `w` holds a zero octet. Only the lowest set
/// bit is exact (a borrow may mark octets above a zero one), and only the
/// lowest is used.
#[inline(always)]
const fn zero_octets(w: u64) -> u64 {
    w.wrapping_sub(0x0101_0101_0101_0101) & !w & 0x8080_8080_8080_8080
}

/// Index (0–7) of the octet whose high bit is the lowest set bit of `z` (≠ 0):
/// the isolated bit, moved to the octet's low bit, multiplied so the index
/// lands in the top octet (BPF has no count-trailing-zeros instruction).
#[inline(always)]
const fn first_octet(z: u64) -> u64 {
    ((z & z.wrapping_neg()) >> 7).wrapping_mul(0x0001_0203_0405_0607) >> 56
}

/// Reads the question name at frame offset `off`; the message ends at frame
/// offset `end`.
///
/// One bounded loop over 8-byte words, not over octets or labels: each word is
/// lowercased (SWAR), hashed, summed for the UDP checksum and kept in
/// `scratch.words` for the exact comparison after the lookup, and the first
/// zero octet ends the name. That octet is the root label when the name is one
/// the fast path serves (a served name has no zero octet inside a label, and the
/// map writer stores no other): the exact comparison then proves the whole
/// label structure, since a stored length octet (1–63) is matched only by
/// itself. Anything else — a zero octet inside a label, a compression pointer
/// (RFC 1035 §4.1.4), a reserved label type — finds no stored name and is
/// passed as `NameUnknown`, which `unknown_name_reason` refines by walking the
/// labels on that path alone. A word the frame cannot hold whole is read as the
/// 8 octets *ending* at the message's end and shifted (the DNS header lies
/// before the name, so that load never starts before the frame).
#[inline(always)]
pub fn parse_name(
    ctx: &aya_ebpf::programs::XdpContext,
    f: &Frame,
    off: usize,
    end: usize,
    scratch: *mut Scratch,
) -> Result<Name, Counter> {
    let mut h = hash_seed();
    let mut sum: u64 = 0;
    let mut i = 0;
    let len = loop {
        if i >= WORDS {
            return Err(Counter::NameUnknown);
        }
        let at = off + 8 * i;
        let (w, last) = match f.load::<u64>(at) {
            Ok(w) => (w, false),
            Err(_) => {
                // The frame ends inside this word: its octets up to the message's end.
                if at >= end || end - at >= 8 {
                    return Err(Counter::NameUnknown);
                }
                let f = &Frame::reload(ctx);
                // Opaque to LLVM, which would otherwise derive this load from the
                // failed one: the verifier accepts no load below a checked pointer.
                let tail = core::hint::black_box(end - 8);
                (f.load::<u64>(tail)? >> (8 * (8 - (end - at))), true)
            }
        };
        let z = zero_octets(w);
        if z == 0 {
            // No root in the message's last octets: the name runs past it.
            if last {
                return Err(Counter::NameUnknown);
            }
            sum += (w & 0xffff_ffff) + (w >> 32);
            let lw = lowercase_word(w);
            h = hash_step(h, lw);
            // SAFETY: plain per-CPU map memory; `i` < WORDS.
            unsafe { (*scratch).words[i] = lw };
            i += 1;
            continue;
        }
        // The root ends the word: nothing after it belongs to the name. Every
        // path through this branch leaves the loop, so the verifier never walks
        // on from a word it cannot tell ended the name.
        let k = first_octet(z) & 7;
        let w = w & (u64::MAX >> (8 * (7 - k)));
        sum += (w & 0xffff_ffff) + (w >> 32);
        let lw = lowercase_word(w);
        h = hash_step(h, lw);
        // SAFETY: plain per-CPU map memory; `i` < WORDS.
        unsafe { (*scratch).words[i] = lw };
        break 8 * i + k as usize + 1;
    };
    // Store and reload the length: the loop leaves the verifier one exact value per
    // exit, and everything after it would be verified once per value. The reload
    // is an unknown scalar to the verifier; the check below bounds it to 1–255.
    // SAFETY: plain per-CPU map memory.
    let qlen = unsafe {
        core::ptr::write_volatile(&mut (*scratch).qlen, len as u32);
        core::ptr::read_volatile(&(*scratch).qlen)
    } as usize;
    // 256: the 32nd word ended in a zero octet, one past the longest name.
    if qlen > NAME_MAX {
        return Err(Counter::NameUnknown);
    }
    // A bound on this very register, which old verifiers need before it becomes
    // part of a packet offset or a `words` index (`qlen / 8` < WORDS).
    let qlen = qlen & 0xff;
    // The words were loaded little-endian: fold, then swap to network order
    // (RFC 1071 §2(B): the sum is byte-order independent up to that swap).
    sum = (sum & 0xffff_ffff) + (sum >> 32);
    sum = (sum & 0xffff) + (sum >> 16);
    sum = (sum & 0xffff) + (sum >> 16);
    sum = (sum & 0xffff) + (sum >> 16);
    Ok(Name { len: qlen, hash: hash_finish(h, qlen), sum: (sum as u16).swap_bytes() as u32 })
}

/// Why a query passed as `NameUnknown` was passed: its question name could not
/// be read, was read but is not served, or left no room for QTYPE and QCLASS
/// (`NameUnknown` is raised only after `parse` stored where the name starts and
/// the message ends, so these offsets are this packet's).
///
/// `parse_name` ends a name at its first zero octet and leaves the label
/// structure to the exact comparison, so a malformed name surfaces as an
/// unknown one. Here the labels are walked by their length octets, as RFC 1035
/// §4.1.4 reads them, so the counters tell a compression pointer, a reserved
/// label type, an overlong name and a truncated question from a name we do not
/// serve. Only a passed query pays for the walk. (A malformed name whose
/// misread continuation fails a later check, QTYPE for one, is counted under
/// that check: the walk is kept off every other reason's path.)
#[inline(always)]
pub fn unknown_name_reason(ctx: &aya_ebpf::programs::XdpContext, scratch: *const Scratch) -> Counter {
    // SAFETY: plain per-CPU map memory, written by `parse` for this packet.
    let (off, end) = unsafe {
        (
            core::ptr::read_volatile(&(*scratch).name_off) as usize,
            core::ptr::read_volatile(&(*scratch).name_end) as usize,
        )
    };
    let f = &Frame::reload(ctx);
    let mut pos = 0usize;
    let mut n = 0;
    while n < MAX_LABELS {
        let Ok(l) = f.u8(off + pos) else { return Counter::TooShort };
        let l = l as usize;
        if l == 0 {
            // A well-formed name; the message must still hold QTYPE and QCLASS.
            return if off + pos + 1 + 4 > end { Counter::TooShort } else { Counter::NameUnknown };
        }
        // Compression pointers and the reserved label types have no place in a
        // question we answer.
        if l & 0xc0 != 0 {
            return Counter::NameCompressed;
        }
        pos += l + 1;
        // The root octet would sit at `pos`: the name would exceed 255 octets.
        if pos >= NAME_MAX {
            return Counter::NameTooLong;
        }
        n += 1;
    }
    Counter::NameTooLong
}

/// Whether the name in `scratch` (of `len` octets) is exactly the stored one.
#[inline(always)]
pub fn name_matches(scratch: *const Scratch, len: usize, v: &NameValue) -> bool {
    if v.len as usize != len {
        return false;
    }
    let n = len.div_ceil(8);
    let mut i = 0;
    while i < WORDS {
        if i >= n {
            return true;
        }
        // SAFETY: plain per-CPU map memory; the first `n` words were written by
        // `parse_name` for this packet.
        if unsafe { (*scratch).words[i] } != v.name[i] {
            return false;
        }
        i += 1;
    }
    true
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
/// - COOKIE (RFC 7873): kept in `q` for `cookie::respond`; a malformed or
///   repeated one, or a server cookie of other than 16 octets, is passed;
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
    // CLASS is the requestor's UDP payload size: any unsigned answer fits it
    // (`main::signed` checks a signed one).
    // TTL: EXTENDED-RCODE, VERSION, DO|Z. Version > 0 gets BADVERS from userspace.
    if opt[5] != 0 || opt[6] != 0 {
        return Err(Counter::OptUnsupported);
    }
    q.has_opt = 1;
    q.udp_size = u16::from_be_bytes([opt[3], opt[4]]) as u32;
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
                if opaque(&q.has_ecs) != 0 {
                    return Err(Counter::EcsBad);
                }
                parse_ecs(f, o + 4, len, q)?;
            }
            OPT_COOKIE => {
                if opaque(&q.cookie) != 0 {
                    return Err(Counter::Cookie);
                }
                // One check per option, the words read through its pointer:
                // separate loads let LLVM compare with `data_end - 8`, pointer
                // arithmetic on pkt_end that the verifier refuses.
                if len == 8 {
                    let p = f.at::<8>(core::hint::black_box(o + 4))?;
                    // SAFETY: `at` checked `[p, p + 8)` against the frame end.
                    q.cookie_client = unsafe { core::ptr::read_unaligned(p as *const u64) };
                    q.cookie = 1;
                } else if len == 24 {
                    let p = f.at::<24>(core::hint::black_box(o + 4))?;
                    // SAFETY: `at` checked `[p, p + 24)` against the frame end.
                    unsafe {
                        q.cookie_client = core::ptr::read_unaligned(p as *const u64);
                        q.cookie_head = core::ptr::read_unaligned((p + 8) as *const u64);
                        q.cookie_hash = core::ptr::read_unaligned((p + 16) as *const u64);
                    }
                    q.cookie = 2;
                } else {
                    return Err(Counter::Cookie);
                }
            }
            OPT_PADDING => {}
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
        return parse_ecs6(f, o, len, source, scope, q);
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
    // The address (0–4 octets) is read as the 4 octets *ending* at its end (FAMILY,
    // SOURCE and SCOPE lie before it, inside the frame) and shifted into place:
    // one load instead of four one-byte branches.
    let mut v = 0u32;
    let mut window = 0u32;
    if n > 0 {
        window = f.load::<u32>(o + 4 + n - 4)?;
        v = u32::from_be(window) << (8 * (4 - n) as u32);
    }
    let mask = if source == 0 { 0 } else { u32::MAX << (32 - source as u32) };
    if v & !mask != 0 {
        return Err(Counter::EcsBad);
    }
    q.has_ecs = 1;
    q.ecs_source = source;
    q.ecs_addr = v.to_be_bytes();
    q.ecs_window4 = window;
    Ok(())
}

/// Reads an IPv6 ECS option's data (`len` bytes at `o`; FAMILY, SOURCE and SCOPE
/// already read) into `q`, with the checks `dns::ecs::Ecs::parse` makes.
///
/// The address (0–16 octets) is read as the 16 octets *ending* at its end (the
/// option and OPT headers lie before it, inside the frame) and shifted into
/// place: one load pair instead of sixteen one-byte branches.
#[inline(always)]
fn parse_ecs6(f: &Frame, o: usize, len: usize, source: u8, scope: u8, q: &mut Query) -> Result<(), Counter> {
    // RFC 7871 §7.1.1: SCOPE PREFIX-LENGTH MUST be 0 in queries; ADDRESS has
    // ceil(SOURCE / 8) octets; bits beyond SOURCE MUST be zero.
    if source > 128 || scope != 0 {
        return Err(Counter::EcsBad);
    }
    let n = (source as usize).div_ceil(8);
    if len - 4 != n {
        return Err(Counter::EcsBad);
    }
    let mut a = Addr6 { hi: 0, lo: 0 };
    let mut window = [0u64; 2];
    if n > 0 {
        let p = f.at::<16>(o + 4 + n - 16)?;
        // SAFETY: `at` checked `[p, p + 16)` against the frame end.
        window =
            unsafe { [core::ptr::read_unaligned(p as *const u64), core::ptr::read_unaligned((p + 8) as *const u64)] };
        let (hi, lo) = (u64::from_be(window[0]), u64::from_be(window[1]));
        // The address is the low `8n` bits of hi:lo; move it to the top.
        let s = (128 - 8 * n) as u32;
        a = if s == 0 {
            Addr6 { hi, lo }
        } else if s < 64 {
            Addr6 { hi: (hi << s) | (lo >> (64 - s)), lo: lo << s }
        } else {
            Addr6 { hi: lo << (s - 64), lo: 0 }
        };
        let src = source as u32;
        let (mhi, mlo) = if src >= 64 {
            (u64::MAX, if src == 64 { 0 } else { u64::MAX << (128 - src) })
        } else {
            (u64::MAX << (64 - src), 0)
        };
        if a.hi & !mhi != 0 || a.lo & !mlo != 0 {
            return Err(Counter::EcsBad);
        }
    }
    q.has_ecs = 1;
    q.ecs_v6 = 1;
    q.ecs_source = source;
    q.ecs_addr6 = a;
    q.ecs_window = window;
    Ok(())
}
