//! Turns the query frame into the response in place: swap addresses and ports,
//! rewrite the DNS header, append the answers after the question, re-emit the OPT
//! record, fix lengths and checksums.
//!
//! The response (RFC 1035 §4.1, RFC 6891 §6.1.3, RFC 7871 §7.2):
//! - header: ID kept; QR, AA, RD and CD copied from the query; RCODE 0;
//!   QDCOUNT 1, ANCOUNT = addresses (and the RRSIG), NSCOUNT 0, ARCOUNT as
//!   in the query;
//! - question as received (the client's letter case);
//! - answers `C0 0C | 0001 | 0001 | TTL | 0004 | address` (A) or
//!   `C0 0C | 001C | 0001 | TTL | 0010 | address` (AAAA, RFC 3596 §2.2);
//! - for a query with DO in a signed zone, the RRset's RRSIG from
//!   `lagran_rrsig` (RFC 4035 §3.1.1), ready as the map writer made it;
//! - OPT when the query had one: root, TYPE 41, CLASS = our UDP payload size,
//!   TTL 0 but the DO bit copied, and the ECS option echoed with SCOPE
//!   PREFIX-LENGTH set to the matched block's length (0 when SOURCE was 0).
//!
//! Over IPv6 the addresses are swapped the same way and the payload length and
//! hop limit set; there is no header checksum, and the UDP checksum, mandatory
//! there (RFC 8200 §8.1), covers the IPv6 pseudo-header.
//!
//! Sizes: the frame grows by 16 (A) or 28 (AAAA) bytes per address, by the
//! RRSIG's length, and by 16
//! where our server cookie answers a client cookie alone, less the padding
//! option (not echoed) and any Ethernet padding the query carried. Where the
//! frame's end cannot grow that much, its front does (`grow_at_head`).

use aya_ebpf::{
    bindings::xdp_action,
    helpers::generated::{bpf_xdp_adjust_head, bpf_xdp_adjust_tail},
    programs::XdpContext,
};
use lagran_common::{
    answers::{AnswerV4, AnswerV6, RR_LEN, RR6_LEN},
    counters::Counter,
    rrsig::RECORD_MAX,
};

use crate::{
    csum::Sum,
    dns::{self, ECS_FIXED_LEN, FLAG_AA, FLAG_CD, FLAG_QR, FLAG_RD, FLAG_TC, OPT_FIXED_LEN, opaque},
    eth::Eth,
    ipv4::{self, Ipv4},
    ipv6,
    maps::{RRSIG_WORDS, Scratch, launder},
    packet::{Frame, MAX_OFF},
    query::Query,
    udp::{self, Udp},
};

/// RFC 7873 §8: the extended RCODE BADCOOKIE.
const RCODE_BADCOOKIE: u16 = 23;
/// IPv4 TTL and IPv6 hop limit of our responses.
const IP_TTL: u8 = 64;
const IPPROTO_UDP: u8 = 17;
const QTYPE_AAAA: u16 = 28;

/// The records to append: an `A` or an `AAAA` answer. `build` is instantiated
/// once per type, so the verifier never has to learn that the record type and
/// the map the answer came from agree.
pub trait Records: Copy {
    /// QTYPE of the question (and TYPE of the records).
    const QTYPE: u16;
    /// Octets of one record.
    const RR: usize;
    /// Their share of the UDP checksum (from the map writer).
    fn sum(&self) -> u32;
    /// Appends `count` records at frame offset `off`; returns the offset after them.
    fn write(&self, f: &Frame, off: usize, count: usize) -> Result<usize, Counter>;
}

impl Records for &AnswerV4 {
    const QTYPE: u16 = 1;
    const RR: usize = RR_LEN;
    #[inline(always)]
    fn sum(&self) -> u32 {
        self.records_sum
    }
    #[inline(always)]
    fn write(&self, f: &Frame, off: usize, count: usize) -> Result<usize, Counter> {
        write_a(f, off, self, count)
    }
}

impl Records for &AnswerV6 {
    const QTYPE: u16 = QTYPE_AAAA;
    const RR: usize = RR6_LEN;
    #[inline(always)]
    fn sum(&self) -> u32 {
        self.records_sum
    }
    #[inline(always)]
    fn write(&self, f: &Frame, off: usize, count: usize) -> Result<usize, Counter> {
        write_aaaa(f, off, self, count)
    }
}

/// The network header of the query.
#[derive(Clone, Copy)]
pub enum Ip {
    V4(Ipv4),
    V6,
}

/// What goes into the response besides the query itself.
pub struct Reply<R: Records> {
    pub records: R,
    /// Number of addresses, 1–4 (checked by the caller).
    pub count: usize,
    /// ECS SCOPE PREFIX-LENGTH to echo.
    pub scope: u8,
    /// Our UDP payload size for the OPT CLASS.
    pub udp_payload: u16,
    /// The server cookie, when the query had a COOKIE option (`q.cookie != 0`).
    pub cookie: crate::cookie::ServerCookie,
    /// 1: rate limiting slips this answer — no records, TC=1, or BADCOOKIE
    /// (RCODE 23, AA=0) when the query had a client cookie, exactly as
    /// userspace's `dns::rrl::slipped` makes of the full response.
    pub slip: u32,
    /// Length of the answer's RRSIG record, copied into `Scratch::rrsig`
    /// for a query with DO in a signed zone (0: none; not sent when slipped).
    pub sig_len: u32,
}

/// The COOKIE option we write: code, length, client cookie, server cookie.
const COOKIE_OPTION_LEN: usize = 4 + 8 + 16;

/// Rewrites the query in place into the response (frame size, Ethernet and IP
/// headers, DNS header, records, OPT with ECS and COOKIE, UDP checksum) and
/// returns `XDP_TX`.
///
/// Longer than the crate's other functions (about 210 lines), on purpose. Like
/// every function here it is `#[inline(always)]`: the program is one BPF
/// function with no BPF-to-BPF call. Its steps share about a dozen values (the
/// frame, the UDP/DNS header window `l4w`, the checksum `tail`, `off`, `qlen`,
/// `count`, `flags`, `n`, `ecs_len`, `cookie_len` and the query's four shape
/// flags), and splitting it costs:
/// - as real calls (BPF subprograms): a call and an exit per step, and the
///   shared values moved around each call: a BPF call passes at most five
///   arguments in registers (R1–R5) and keeps only R6–R9 across it, so the
///   rest is spilled to the stack and filled again — instructions on every
///   answered query. The verifier walks a static subprogram again at each call
///   with the caller's state, so verification gets no cheaper either;
/// - as `#[inline(always)]` helpers: the shared values would travel as a
///   struct on the stack or as six to ten arguments each. Such a struct is
///   what LLVM copies or zeroes with `memcpy`/`memset` (which `cargo xtask
///   build-ebpf` refuses in the XDP section) or writes with 8-byte stores at
///   4-aligned stack offsets (which the verifier refuses, see `Query`); and
///   the `launder` stores, which make the paths (cookie or not, slipped or
///   not, ECS or not) meet in the verifier, must stay before the bounds
///   checks that follow them, which one body keeps in view.
#[inline(always)]
pub fn build<R: Records>(
    ctx: &XdpContext,
    eth: &Eth,
    ip: &Ip,
    udp: &Udp,
    q: &Query,
    r: &Reply<R>,
    scratch: *mut Scratch,
) -> Result<u32, Counter> {
    // What shapes the response is read from the query in map memory (see
    // `Scratch::query`), and the lengths derived from it are laundered through
    // `scratch` (see `maps::launder`): every path that reaches here (cookie or
    // not, slipped or not, ECS or not) then continues as one.
    let (has_opt, has_ecs, ecs_v6, cookie) =
        (opaque(&q.has_opt), opaque(&q.has_ecs), opaque(&q.ecs_v6), opaque(&q.cookie));
    let ecs_source = opaque(&q.ecs_source);
    // SAFETY (all `launder` slots): fields of this CPU's `SCRATCH` value.
    let slip = launder(unsafe { &raw mut (*scratch).slip }, r.slip);
    let count = launder(unsafe { &raw mut (*scratch).count }, if r.slip != 0 { 0 } else { r.count as u32 }) as usize;
    if count > answers_max() {
        return Err(Counter::NoAnswer);
    }
    let sig_len = if r.slip != 0 { 0 } else { r.sig_len };
    let sig_len = launder(unsafe { &raw mut (*scratch).sig_len }, sig_len) as usize;
    // One range, 0 included: a lower bound on a present record would split
    // the paths again.
    if sig_len > RECORD_MAX {
        return Err(Counter::RrsigMissing);
    }
    // Plus one with a record, without a branch (`sig_len` ≤ 255).
    let signed = (sig_len + 255) >> 8;
    let ancount = (count + signed) as u16;
    // A signed answer's frame is first made `RECORD_MAX - sig_len` octets
    // longer, so the record is copied in one fixed-size window, and cut back
    // to its length at the end (no branch: 0 when unsigned).
    let slack = (RECORD_MAX - sig_len) * signed;
    let badcookie = slip != 0 && cookie != 0;
    // The response's OPT carries the echoed ECS option and our COOKIE: the
    // query's other options (padding) are not echoed, so it may be shorter
    // than the query's OPT and the frame may shrink.
    let n = (ecs_source as usize).div_ceil(8);
    if n > 16 {
        return Err(Counter::Malformed);
    }
    let ecs_len = if has_ecs == 0 { 0 } else { ECS_FIXED_LEN + n };
    let ecs_len = launder(unsafe { &raw mut (*scratch).ecs_len }, ecs_len as u32) as usize;
    if ecs_len > ECS_FIXED_LEN + 16 {
        return Err(Counter::Malformed);
    }
    let cookie_len = if cookie == 0 { 0 } else { COOKIE_OPTION_LEN };
    let opt_len = if has_opt == 0 { 0 } else { OPT_FIXED_LEN + ecs_len + cookie_len };
    let opt_len = launder(unsafe { &raw mut (*scratch).opt_len }, opt_len as u32) as usize;
    if opt_len > OPT_FIXED_LEN + ECS_FIXED_LEN + 16 + COOKIE_OPTION_LEN {
        return Err(Counter::Malformed);
    }
    let rr_len = R::RR;
    let ip_hdr = match ip {
        Ip::V4(_) => ipv4::HDR_LEN,
        Ip::V6 => ipv6::HDR_LEN,
    };
    let qlen = opaque(&q.qlen) & 0xff;
    let dns_len = dns::HDR_LEN + qlen + 4 + rr_len * count + sig_len + opt_len;
    let udp_len = udp::HDR_LEN + dns_len;
    let ip_len = ip_hdr + udp_len;
    let new_len = eth.l3 + ip_len;
    let old_len = Frame::reload(ctx).len();
    let delta = (new_len + slack) as i32 - old_len as i32;
    // SAFETY: the helper only resizes the frame; every packet pointer is derived
    // again from the context below.
    if unsafe { bpf_xdp_adjust_tail(ctx.ctx, delta) } != 0 {
        grow_at_head(ctx, delta, eth.l3 + ip_hdr + udp::HDR_LEN + dns::HDR_LEN + qlen + 4)?;
    }
    let f = Frame::new(ctx);
    let l3 = eth.l3;
    let l4 = l3 + ip_hdr;
    let dns = l4 + udp::HDR_LEN;

    // Ethernet: back to where it came from. The 12 MAC octets are one 8-byte and
    // one 4-byte word; swapping the two 6-octet halves is shifts.
    let macs = f.window::<12>(0).map_err(|_| Counter::Malformed)?;
    let w0: u64 = macs.load::<u64, 0>();
    let w1: u32 = macs.load::<u32, 8>();
    let old_dst = w0 & 0xffff_ffff_ffff;
    let old_src = (w0 >> 48) | ((w1 as u64) << 16);
    macs.store::<u64, 0>(old_src | (old_dst << 48));
    macs.store::<u32, 8>((old_dst >> 16) as u32);

    // The addresses' share of the UDP pseudo-header.
    let addr_sum = match ip {
        Ip::V4(ip) => rewrite_ipv4(&f, l3, ip, ip_len)?,
        Ip::V6 => rewrite_ipv6(&f, l3, udp_len)?,
    };

    // DNS header: ID, QDCOUNT (1), NSCOUNT (0) and ARCOUNT stay as received.
    let copied = q.flags & (FLAG_RD | FLAG_CD);
    let flags = if badcookie {
        // RFC 7873 §8: BADCOOKIE is 23: 7 in the header, 1 in the OPT's extended RCODE.
        FLAG_QR | copied | (RCODE_BADCOOKIE & 0x0f)
    } else if slip != 0 {
        FLAG_QR | FLAG_AA | FLAG_TC | copied
    } else {
        FLAG_QR | FLAG_AA | copied
    };
    // The UDP and DNS headers: one window for the fields written here and below.
    let l4w = f.window::<{ udp::HDR_LEN + dns::HDR_LEN }>(l4).map_err(|_| Counter::Malformed)?;
    l4w.store::<u16, { udp::HDR_LEN + 2 }>(flags.to_be());
    l4w.store::<u16, { udp::HDR_LEN + 6 }>(ancount.to_be());

    // Everything after the name: QTYPE/QCLASS (kept), answers, OPT. It starts at
    // DNS offset 12 + qlen; its sum is taken as if that were even and swapped below.
    let mut tail = Sum::new();
    tail.word(R::QTYPE);
    tail.word(1); // QCLASS IN
    // The records and their sum come ready from the map writer.
    let off = dns + dns::HDR_LEN + qlen + 4;
    if count != 0 {
        tail.add(r.records.sum());
    }
    let off = r.records.write(&f, off, count)?;
    // The RRSIG after the RRset it covers (RFC 4035 §3.1.1), at an even
    // distance from the tail start; the OPT after it is at an odd one when
    // the RRSIG's length is odd.
    if sig_len != 0 {
        write_rrsig(&f, off, scratch)?;
    }
    // 0 without a record (`main` stores it).
    // SAFETY: this CPU's scratch, written for this packet.
    tail.add(unsafe { core::ptr::read_volatile(&(*scratch).rrsig_sum) });
    let off = off + sig_len;
    // The frame's pointers loaded again: none of the ranges the copy checked lives on.
    let f = Frame::reload(ctx);
    // One state after the records, whatever their number.
    let off = launder(unsafe { &raw mut (*scratch).records_end }, off as u32) as usize & MAX_OFF;
    // The OPT's sum as if it started at an even offset; swapped below when it does not.
    let mut opt_sum = Sum::new();
    if has_opt != 0 {
        // Summed into `opt_sum` as if the OPT started at an even distance from
        // the tail start (4 + 16·count or 4 + 28·count, plus the RRSIG's length).
        if has_ecs != 0 && ecs_v6 == 0 && n > 0 {
            // The same for an IPv4 address: the 4 octets ending at its end, as in
            // the query; the ECS header below overwrites the octets before it.
            let at = off + OPT_FIXED_LEN + ECS_FIXED_LEN + n - 4;
            f.store::<u32>(at, q.ecs_window4)?;
            // The address, left-aligned and zero-padded, as big-endian words at
            // an odd position of the tail (19 octets after the OPT start).
            let w = u32::from_be_bytes(q.ecs_addr);
            opt_sum.add(fold((w >> 16) + (w & 0xffff)).swap_bytes() as u32);
        }
        if has_ecs != 0 && ecs_v6 != 0 && n > 0 {
            // The 16 octets ending at the end of the address, as in the query:
            // written first, the OPT and ECS headers below overwrite the octets
            // before the address (the window starts at most 15 octets before it,
            // the headers are 19).
            let at = off + OPT_FIXED_LEN + ECS_FIXED_LEN + n - 16;
            let p = f.at::<16>(at).map_err(|_| Counter::Malformed)?;
            // SAFETY: `at` checked `[p, p + 16)` against the frame end.
            unsafe {
                core::ptr::write_unaligned(p as *mut u64, q.ecs_window[0]);
                core::ptr::write_unaligned((p + 8) as *mut u64, q.ecs_window[1]);
            }
            // The address, left-aligned and zero-padded, as big-endian words at
            // an odd position of the tail (19 octets after the OPT start).
            let a = q.ecs_addr6;
            let s = fold64(a.hi) as u32 + fold64(a.lo) as u32;
            opt_sum.add(fold(s).swap_bytes() as u32);
        }
        let rdlen = (ecs_len + cookie_len) as u16;
        let pl = r.udp_payload.to_be_bytes();
        let rd = rdlen.to_be_bytes();
        let ext_rcode = if badcookie { (RCODE_BADCOOKIE >> 4) as u8 } else { 0 };
        let opt = [0, 0, 41, pl[0], pl[1], ext_rcode, 0, q.do_bit, 0, rd[0], rd[1]];
        f.write::<OPT_FIXED_LEN>(off, opt)?;
        let mut j = 0;
        while j < OPT_FIXED_LEN {
            opt_sum.byte_at(opt[j], j);
            j += 1;
        }
        if has_ecs != 0 {
            let scope = if ecs_source == 0 { 0 } else { r.scope };
            let family = if ecs_v6 != 0 { 2 } else { 1 };
            let ecs = [0, 8, 0, (4 + n) as u8, 0, family, ecs_source, scope];
            f.write::<ECS_FIXED_LEN>(off + OPT_FIXED_LEN, ecs)?;
            let mut j = 0;
            while j < ECS_FIXED_LEN {
                opt_sum.byte_at(ecs[j], OPT_FIXED_LEN + j);
                j += 1;
            }
        }
    }

    if has_opt != 0 && cookie != 0 {
        // RFC 7873 §5.2.3: the client cookie and our server cookie, after the ECS option.
        let at = off + OPT_FIXED_LEN + ecs_len;
        let p = f.at::<COOKIE_OPTION_LEN>(at).map_err(|_| Counter::Malformed)?;
        let c = &r.cookie;
        // SAFETY: `at` checked `[p, p + 28)` against the frame end.
        unsafe {
            core::ptr::write_unaligned(p as *mut u32, u32::from_ne_bytes([0, 10, 0, 24]));
            core::ptr::write_unaligned((p + 4) as *mut u64, q.cookie_client);
            core::ptr::write_unaligned((p + 12) as *mut u64, c.head);
            core::ptr::write_unaligned((p + 20) as *mut u64, c.hash);
        }
        // The words as loaded are little-endian: their folded sum is byte-swapped.
        let le = fold64(q.cookie_client) as u32 + fold64(c.head) as u32 + fold64(c.hash) as u32;
        let be = fold(fold(le).swap_bytes() as u32 + 10 + 24);
        // The option starts 11 + ecs_len octets after the OPT, which is at an even tail offset.
        opt_sum.add(if (OPT_FIXED_LEN + ecs_len) & 1 == 1 { be.swap_bytes() } else { be } as u32);
    }
    // Swapped when the OPT starts at an odd offset, without a branch.
    let o = fold(opt_sum.value()) as u32;
    // The length read again: the copy's comparisons split the ranges of the
    // copy they were made on, not of this one.
    // SAFETY: this CPU's scratch.
    let shift = 8 * (unsafe { core::ptr::read_volatile(&(*scratch).sig_len) } & 1);
    tail.add(((o << shift) | (o >> (16 - shift))) & 0xffff);

    // UDP checksum over the pseudo-header (RFC 768; RFC 8200 §8.1: the same
    // words, the length as 32 bits and the next header 17), the UDP header and
    // the whole message.
    let mut sum = Sum::new();
    sum.add(addr_sum);
    sum.word(IPPROTO_UDP as u16);
    sum.word(udp_len as u16);
    sum.word(u16::from_be_bytes(udp.dst)); // new source port
    sum.word(u16::from_be_bytes(udp.src)); // new destination port
    sum.word(udp_len as u16);
    sum.word(u16::from_be_bytes(q.id));
    sum.word(flags);
    sum.word(1); // QDCOUNT
    sum.word(ancount);
    sum.word(q.arcount);
    sum.add(q.qsum);
    let t = fold(tail.value());
    // The tail starts at DNS offset 12 + qlen: odd when qlen is odd.
    sum.word(if qlen & 1 == 1 { t.swap_bytes() } else { t });
    let mut c = sum.finish();
    if c == 0 {
        // RFC 768: a computed zero is sent as all ones (0 means "no checksum").
        c = 0xffff;
    }
    // Ports swapped: one 4-octet word rotated.
    // The header window made again, for the same reason.
    let l4w = f.window::<{ udp::HDR_LEN + dns::HDR_LEN }>(l4).map_err(|_| Counter::Malformed)?;
    let ports: u32 = l4w.load::<u32, 0>();
    l4w.store::<u32, 0>(ports.rotate_left(16));
    l4w.store::<u16, 4>((udp_len as u16).to_be());
    l4w.store::<u16, 6>(c.to_be());
    if slack != 0 {
        // Shrinking always succeeds; were it refused, the octets after the
        // IP datagram would be ignored by the receiver, as Ethernet padding is.
        // SAFETY: the helper only resizes the frame; nothing reads it after.
        unsafe { bpf_xdp_adjust_tail(ctx.ctx, -(slack as i32)) };
    }
    Ok(xdp_action::XDP_TX)
}

/// Most a response outgrows its query: four AAAA records, their RRSIG, an
/// ECS option the query's OPT carried and our COOKIE where the query had a
/// client cookie alone.
const MAX_GROWTH: usize = 4 * RR6_LEN + RECORD_MAX + COOKIE_OPTION_LEN;
/// Most octets before the answers: Ethernet with one VLAN tag, IPv6, UDP, the
/// DNS header, a 255-octet name, QTYPE and QCLASS.
const MAX_KEPT: usize = 18 + ipv6::HDR_LEN + udp::HDR_LEN + dns::HDR_LEN + 255 + 4;

/// Grows the frame by `delta` octets at its front, for when its end cannot grow:
/// a veth hands XDP the sender's own buffer, whose tailroom is what its
/// allocation rounded up to, while every XDP frame has headroom
/// (`XDP_PACKET_HEADROOM`, 256 octets). The first `keep` octets (headers and
/// question, all the response keeps of the query) move to the new front; the
/// rest is rewritten by `build`.
///
/// In 32-octet chunks, front to back: a chunk is read whole before it is
/// written, and a write ends before the next chunk's start, so the overlap
/// (`delta` may be small) is safe. The last 32 octets ending at `keep`
/// (`keep` ≥ 32: the headers alone are more) are read before anything moves and
/// written last.
#[inline(always)]
fn grow_at_head(ctx: &XdpContext, delta: i32, keep: usize) -> Result<(), Counter> {
    if !(1..=MAX_GROWTH as i32).contains(&delta) || !(CHUNK..=MAX_KEPT).contains(&keep) {
        return Err(Counter::TailGrowFailed);
    }
    let last = read_chunk(&Frame::new(ctx), keep - CHUNK)?;
    // SAFETY: the helper only moves the frame's start; every packet pointer is
    // derived again from the context below.
    if unsafe { bpf_xdp_adjust_head(ctx.ctx, -delta) } != 0 {
        return Err(Counter::TailGrowFailed);
    }
    let d = delta as usize;
    let chunks = keep / CHUNK;
    let mut i = 0;
    while i < MAX_KEPT / CHUNK {
        if i >= chunks {
            break;
        }
        let c = read_chunk(&Frame::reload(ctx), d + CHUNK * i)?;
        write_chunk(&Frame::reload(ctx), CHUNK * i, c)?;
        i += 1;
    }
    write_chunk(&Frame::reload(ctx), keep - CHUNK, last)
}

/// Octets `grow_at_head` moves at a time.
const CHUNK: usize = 32;

/// The `CHUNK` octets at `off`, one packet check for the four loads.
#[inline(always)]
fn read_chunk(f: &Frame, off: usize) -> Result<[u64; 4], Counter> {
    let p = f.at::<CHUNK>(off)?;
    // SAFETY: `at` checked `[p, p + 32)` against the frame end.
    unsafe {
        Ok([
            core::ptr::read_unaligned(p as *const u64),
            core::ptr::read_unaligned((p + 8) as *const u64),
            core::ptr::read_unaligned((p + 16) as *const u64),
            core::ptr::read_unaligned((p + 24) as *const u64),
        ])
    }
}

/// Writes a chunk read by `read_chunk` at `off`.
#[inline(always)]
fn write_chunk(f: &Frame, off: usize, c: [u64; 4]) -> Result<(), Counter> {
    let p = f.at::<CHUNK>(off).map_err(|_| Counter::Malformed)?;
    // SAFETY: `at` checked `[p, p + 32)` against the frame end.
    unsafe {
        core::ptr::write_unaligned(p as *mut u64, c[0]);
        core::ptr::write_unaligned((p + 8) as *mut u64, c[1]);
        core::ptr::write_unaligned((p + 16) as *mut u64, c[2]);
        core::ptr::write_unaligned((p + 24) as *mut u64, c[3]);
    }
    Ok(())
}

/// IPv4: addresses swapped (which leaves the header sum as it is); the total
/// length and TTL change, and the checksum follows them incrementally
/// (RFC 1624 eqn. 3: HC' = ~(~HC + ~m + m')). A query whose header checksum was
/// wrong gets a response whose checksum is wrong: the client's stack drops it,
/// as ours would have dropped the query. Returns the addresses' pseudo-header sum.
#[inline(always)]
fn rewrite_ipv4(f: &Frame, l3: usize, ip: &Ipv4, ip_len: usize) -> Result<u32, Counter> {
    let w = f.window::<{ ipv4::HDR_LEN }>(l3).map_err(|_| Counter::Malformed)?;
    let addrs: u64 = w.load::<u64, 12>();
    w.store::<u64, 12>(addrs.rotate_left(32));
    let mut ipsum = Sum::new();
    ipsum.word(!u16::from_be_bytes(ip.check));
    ipsum.word(!(ip.tot_len as u16));
    ipsum.word(ip_len as u16);
    ipsum.word(!u16::from_be_bytes([ip.ttl, IPPROTO_UDP]));
    ipsum.word(u16::from_be_bytes([IP_TTL, IPPROTO_UDP]));
    w.store::<u16, 2>((ip_len as u16).to_be());
    w.store::<u8, 8>(IP_TTL);
    w.store::<u16, 10>(ipsum.finish().to_be());
    // From the little-endian word: fold, then swap to network order.
    Ok(fold64(addrs).swap_bytes() as u32)
}

/// IPv6: source and destination swapped (two 16-octet halves of four words),
/// payload length and hop limit set. Returns the addresses' pseudo-header sum.
#[inline(always)]
fn rewrite_ipv6(f: &Frame, l3: usize, udp_len: usize) -> Result<u32, Counter> {
    let p = f.at::<{ ipv6::HDR_LEN }>(l3).map_err(|_| Counter::Malformed)?;
    // SAFETY: `at` checked `[p, p + 40)` against the frame end.
    let sum = unsafe {
        let s0 = core::ptr::read_unaligned((p + 8) as *const u64);
        let s1 = core::ptr::read_unaligned((p + 16) as *const u64);
        let d0 = core::ptr::read_unaligned((p + 24) as *const u64);
        let d1 = core::ptr::read_unaligned((p + 32) as *const u64);
        core::ptr::write_unaligned((p + 8) as *mut u64, d0);
        core::ptr::write_unaligned((p + 16) as *mut u64, d1);
        core::ptr::write_unaligned((p + 24) as *mut u64, s0);
        core::ptr::write_unaligned((p + 32) as *mut u64, s1);
        // Payload length (octets 4–5) and hop limit (7); next header (6) stays UDP.
        core::ptr::write_unaligned((p + 4) as *mut u16, (udp_len as u16).to_be());
        core::ptr::write_unaligned((p + 7) as *mut u8, IP_TTL);
        fold64(s0) as u32 + fold64(s1) as u32 + fold64(d0) as u32 + fold64(d1) as u32
    };
    // From little-endian words: fold, then swap to network order.
    Ok(fold(sum).swap_bytes() as u32)
}

/// Appends `count` `A` records from the map value at frame offset `off`.
#[inline(always)]
fn write_a(f: &Frame, mut off: usize, a: &AnswerV4, count: usize) -> Result<usize, Counter> {
    let mut k = 0;
    while k < answers_max() {
        if k >= count {
            break;
        }
        let rr = &a.records[k];
        // SAFETY: `rr` is 16 octets of map memory.
        let (r0, r1) = unsafe {
            (
                core::ptr::read_unaligned(rr.as_ptr() as *const u64),
                core::ptr::read_unaligned(rr.as_ptr().add(8) as *const u64),
            )
        };
        // One check for both words: with two, LLVM turns the second into a
        // comparison with `data_end - 8`, arithmetic on `pkt_end` that verifiers
        // before 6.x refuse.
        let p = f.at::<RR_LEN>(off).map_err(|_| Counter::Malformed)?;
        // SAFETY: `at` checked `[p, p + 16)` against the frame end.
        unsafe {
            core::ptr::write_unaligned(p as *mut u64, r0);
            core::ptr::write_unaligned((p + 8) as *mut u64, r1);
        }
        off += RR_LEN;
        k += 1;
    }
    Ok(off)
}

/// Appends `count` `AAAA` records (28 octets each: three words and a half) from
/// the map value at frame offset `off`, one check per record.
#[inline(always)]
fn write_aaaa(f: &Frame, mut off: usize, a: &AnswerV6, count: usize) -> Result<usize, Counter> {
    let mut k = 0;
    while k < answers_max() {
        if k >= count {
            break;
        }
        let rr = &a.records[k];
        // SAFETY: `rr` is 28 octets of map memory.
        let (r0, r1, r2, r3) = unsafe {
            (
                core::ptr::read_unaligned(rr.as_ptr() as *const u64),
                core::ptr::read_unaligned(rr.as_ptr().add(8) as *const u64),
                core::ptr::read_unaligned(rr.as_ptr().add(16) as *const u64),
                core::ptr::read_unaligned(rr.as_ptr().add(24) as *const u32),
            )
        };
        let p = f.at::<RR6_LEN>(off).map_err(|_| Counter::Malformed)?;
        // SAFETY: `at` checked `[p, p + 28)` against the frame end.
        unsafe {
            core::ptr::write_unaligned(p as *mut u64, r0);
            core::ptr::write_unaligned((p + 8) as *mut u64, r1);
            core::ptr::write_unaligned((p + 16) as *mut u64, r2);
            core::ptr::write_unaligned((p + 24) as *mut u32, r3);
        }
        off += RR6_LEN;
        k += 1;
    }
    Ok(off)
}

/// Copies the RRSIG record in `scratch` (`Scratch::rrsig`) to frame offset
/// `off`, all `RECORD_MAX` octets in one checked window: the frame was made
/// that much longer (`slack`), the OPT record is written over the octets
/// after the record, and the frame is cut back after the last write. One
/// path for every length, no loop exit per length for the verifier to follow.
#[inline(always)]
fn write_rrsig(f: &Frame, off: usize, scratch: *const Scratch) -> Result<(), Counter> {
    let p = f.at::<RECORD_MAX>(off).map_err(|_| Counter::Malformed)?;
    let mut i = 0;
    while i < RRSIG_WORDS {
        // SAFETY: `at` checked `[p, p + RECORD_MAX)` against the frame end;
        // the word is this CPU's scratch, `i` < RRSIG_WORDS.
        unsafe {
            let w = core::ptr::read_volatile(&(*scratch).rrsig[i]);
            core::ptr::write_unaligned((p + 8 * i) as *mut u64, w);
        }
        i += 1;
    }
    Ok(())
}

#[inline(always)]
const fn answers_max() -> usize {
    lagran_common::answers::MAX_ADDRS
}

/// The four 16-bit words of `w` summed and folded (any byte order: the result
/// is in the same order as the words).
#[inline(always)]
fn fold64(w: u64) -> u16 {
    let s = (w & 0xffff_ffff) + (w >> 32);
    fold(((s & 0xffff_ffff) + (s >> 32)) as u32)
}

/// Folds a sum to 16 bits without complementing it.
#[inline(always)]
fn fold(mut s: u32) -> u16 {
    s = (s & 0xffff) + (s >> 16);
    s = (s & 0xffff) + (s >> 16);
    s as u16
}
