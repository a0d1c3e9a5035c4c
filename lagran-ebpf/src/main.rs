//! The Lagran XDP fast path.
//!
//! Answers `A` and `AAAA` queries for scheduled names from BPF maps and hands everything
//! else to the kernel stack (and so to the userspace responder) with `XDP_PASS`.
//! Userspace computes every answer; this program only parses, looks up and
//! rewrites:
//!
//! ```text
//! Ethernet [802.1Q] → IPv4 (no options, no fragments) or IPv6 (no extension headers)
//!   → UDP to a listen address (lagran_listen)
//!   → DNS query, one question, A or AAAA/IN, [OPT [ECS v4 or v6]]
//!   → lagran_names (qname → name id)
//!   → lagran_route_v4 / lagran_route_v6 ([name id | client] → answer id, scope)
//!   → lagran_answers / lagran_answers6 (answer id → TTL, records, canary split)
//!   → response written in place, XDP_TX
//!   [→ every Nth answer, query and response, into lagran_tap_ring (`tap`)]
//! ```
//!
//! Fail open: any query it cannot answer exactly like userspace would is passed,
//! and counted by reason in `lagran_counters`.
//!
//! Minimum kernel version: 5.10, the oldest kernel the matrix
//! (`cargo xtask integration-test vm`) passes; it needs bounded loops, BTF-defined
//! maps and `bpf_xdp_adjust_tail` growing the frame (5.8).
#![no_std]
#![no_main]

#[cfg(feature = "test-broken-verifier")]
mod broken;
mod clock;
mod cookie;
mod csum;
mod dns;
mod eth;
mod ipv4;
mod ipv6;
mod listen4;
mod listen6;
mod maps;
mod packet;
mod query;
mod response;
mod route4;
mod rrl;
mod tap;
mod udp;

use aya_ebpf::{bindings::xdp_action, macros::xdp, programs::XdpContext};
use lagran_common::{answers::AnswerV4, canary, counters::Counter};

use crate::{dns::opaque, packet::Frame, response::Ip};

#[xdp]
pub fn lagran(ctx: XdpContext) -> u32 {
    #[cfg(feature = "test-broken-verifier")]
    broken::unchecked_read(&ctx);
    match try_lagran(&ctx) {
        Ok((action, counter)) => {
            maps::count(counter);
            // Once, after either record type's `response::build`.
            if action == xdp_action::XDP_TX {
                tap::response(&ctx);
            }
            #[cfg(feature = "xdp-debug-log")]
            aya_log_ebpf::debug!(&ctx, "lagran: answered, counter {}", counter as u32);
            action
        }
        Err(reason) => {
            // A name not served: counted by what is wrong with it, if anything.
            let reason = if reason == Counter::NameUnknown { name_reason(&ctx) } else { reason };
            maps::count(reason);
            #[cfg(feature = "xdp-debug-log")]
            aya_log_ebpf::debug!(&ctx, "lagran: passed, counter {}", reason as u32);
            xdp_action::XDP_PASS
        }
    }
}

/// Why a name the fast path did not find was passed (`dns::unknown_name_reason`).
#[inline(always)]
fn name_reason(ctx: &XdpContext) -> Counter {
    let Some(scratch) = maps::SCRATCH.get_ptr(0) else { return Counter::NameUnknown };
    dns::unknown_name_reason(ctx, scratch)
}

#[inline(always)]
fn try_lagran(ctx: &XdpContext) -> Result<(u32, Counter), Counter> {
    let f = Frame::new(ctx);
    let eth = eth::parse(&f)?;
    // The network layer: where UDP starts, the packet's source, and whether we
    // serve the destination.
    let (ip, l4, udp, source, cfg) = if eth.ipv6 != 0 {
        let ip6 = ipv6::parse(&f, eth.l3)?;
        let cfg = maps::config().ok_or(Counter::Disabled)?;
        if cfg.enabled == 0 {
            return Err(Counter::Disabled);
        }
        let l4 = eth.l3 + ipv6::HDR_LEN;
        let udp = udp::parse(&f, l4, ip6.payload_len)?;
        // RFC 8200 §8.1: "IPv6 receivers must discard UDP packets containing a
        // zero checksum" — the stack does; we leave it to the stack.
        if udp.check == [0, 0] {
            return Err(Counter::UdpZeroChecksum);
        }
        if !listen6::listening(ip6.dst_raw, udp.dst) {
            return Err(Counter::NotListenAddress);
        }
        (Ip::V6, l4, udp, Client { v6: 1, addr: ip6.src }, cfg)
    } else {
        let ip4 = ipv4::parse(&f, eth.l3)?;
        let cfg = maps::config().ok_or(Counter::Disabled)?;
        if cfg.enabled == 0 {
            return Err(Counter::Disabled);
        }
        let l4 = eth.l3 + ipv4::HDR_LEN;
        let udp = udp::parse(&f, l4, ip4.tot_len - ipv4::HDR_LEN)?;
        // Only what we serve: another host's DNS traffic crossing this interface, or
        // a port we do not listen on, is not ours to answer.
        if !listen4::listening(ip4.dst, udp.dst) {
            return Err(Counter::NotListenAddress);
        }
        (Ip::V4(ip4), l4, udp, Client::v4(ip4.src), cfg)
    };
    let scratch = maps::SCRATCH.get_ptr_mut(0).ok_or(Counter::Malformed)?;
    dns::parse(ctx, &Frame::reload(ctx), l4 + udp::HDR_LEN, udp.payload_len, scratch)?;
    // SAFETY: plain per-CPU map memory, written by `dns::parse` for this packet.
    let q = unsafe { &(*scratch).query };

    let name = maps::name(q.qhash).ok_or(Counter::NameUnknown)?;
    // The hash only finds the candidate; the exact name decides.
    if !dns::name_matches(scratch, opaque(&q.qlen) & 0xff, name) {
        return Err(Counter::NameUnknown);
    }
    // Id and block in one load: the map writer changes them in one store.
    // SAFETY: `id` starts an 8-aligned word of the map value shared with `route4`
    // (`NameValue::TARGET_OFFSET`).
    let target = unsafe { core::ptr::read_volatile(&raw const name.id as *const u64) };
    let (name_id, route4) = (target as u32, (target >> 32) as u32);
    // RFC 7871 §7.1.1: the ECS address when SOURCE PREFIX-LENGTH > 0, else the sender.
    let client = if opaque(&q.has_ecs) != 0 && opaque(&q.ecs_source) > 0 {
        if opaque(&q.ecs_v6) != 0 { Client { v6: 1, addr: q.ecs_addr6 } } else { Client::v4(q.ecs_addr) }
    } else {
        source
    };
    let (answer_id, scope, primary) = route(name_id, route4, &client)?;
    // A signed zone's answer to a query with DO carries its RRSIG.
    let sig_len = if opaque(&q.do_bit) != 0 && opaque(&name.signed) != 0 {
        signed(q, name_id, answer_id, cfg.udp_payload, scratch)?
    } else {
        // SAFETY: this CPU's scratch: no RRSIG, no share of the checksum.
        unsafe { core::ptr::write_volatile(&raw mut (*scratch).rrsig_sum, 0) };
        0
    };
    // One state for signed and unsigned answers from here on (see `maps::launder`).
    // SAFETY: a field of this CPU's scratch.
    let sig_len = maps::launder(unsafe { &raw mut (*scratch).sig_len }, sig_len);
    // The packet's source (not the ECS address) is what a server cookie binds.
    let cookie = if opaque(&q.cookie) != 0 {
        cookie::respond(q, &source)?
    } else {
        cookie::ServerCookie { head: 0, hash: 0, valid: 0 }
    };
    // Response rate limiting, except for a query whose valid server cookie
    // proves its source (RFC 7873 §5.2.5), as in userspace.
    let mut slip = 0;
    if cfg.rrl_rate != 0 && cookie.valid == 0 {
        match rrl::decide(&source, cfg) {
            rrl::Decision::Send => {}
            rrl::Decision::Drop => return Ok((xdp_action::XDP_DROP, Counter::RrlLimited)),
            rrl::Decision::Slip => slip = 1,
        }
    }
    let counter = if slip != 0 { Counter::RrlSlipped } else { Counter::Answered };
    // The query log's sample: the query copied now, before the response overwrites it.
    tap::query(ctx, cfg.tap_every, eth.l3, eth.ipv6, l4, udp.payload_len);
    // One `response::build` per record type (see `response::Records`).
    if opaque(&q.aaaa) != 0 {
        let a = maps::answer6(answer_id).ok_or(Counter::NoAnswer)?;
        let count = a.count as usize;
        // No IPv6 address: userspace answers NODATA.
        if count == 0 || count > lagran_common::answers::MAX_ADDRS {
            return Err(Counter::NoAnswer);
        }
        let reply = response::Reply { records: a, count, scope, udp_payload: cfg.udp_payload, cookie, slip, sig_len };
        response::build(ctx, &eth, &ip, &udp, q, &reply, scratch).map(|action| (action, counter))
    } else {
        // The route's own answer unless the canary split chose another.
        let a = match primary {
            Some(a) => a,
            None => maps::answer(answer_id).ok_or(Counter::NoAnswer)?,
        };
        let count = a.count as usize;
        if count == 0 || count > lagran_common::answers::MAX_ADDRS {
            return Err(Counter::NoAnswer);
        }
        let reply = response::Reply { records: a, count, scope, udp_payload: cfg.udp_payload, cookie, slip, sig_len };
        response::build(ctx, &eth, &ip, &udp, q, &reply, scratch).map(|action| (action, counter))
    }
}

/// Longest tail of a signed answer besides its RRSIG: QTYPE and QCLASS,
/// four `AAAA` records, and the largest OPT the program writes (ECS with a
/// full IPv6 address, our COOKIE).
const SIGNED_MAX_TAIL: usize = 4 + 4 * lagran_common::answers::RR6_LEN + 11 + 8 + 16 + 28;

/// The RRSIG of answer `answer_id` of the signed name `name_id`, for a query
/// with DO; an answer the program does not send signed is passed, and
/// userspace answers it:
/// - no RRSIG in `lagran_rrsig` (`RrsigMissing`);
/// - a response that might exceed the client's UDP size (`SignedTooLarge`):
///   RFC 6891 §6.2.5, the smaller of the requestor's size and ours, 512 at
///   least (§6.2.3), as userspace's `Framing::accept_payload`. Checked for
///   the longest answer the name could get, before rate limiting charges
///   the client: with a zone apex of 17 octets it passes only names longer
///   than about 220 octets.
///
/// The record is copied into `scratch` (`Scratch::rrsig`); returns its length.
#[inline(always)]
fn signed(
    q: &query::Query,
    name_id: u32,
    answer_id: u32,
    udp_payload: u16,
    scratch: *mut maps::Scratch,
) -> Result<u32, Counter> {
    let s = maps::rrsig(name_id, answer_id, opaque(&q.aaaa)).ok_or(Counter::RrsigMissing)?;
    let qlen = opaque(&q.qlen) & 0xff;
    let requested = opaque(&q.udp_size);
    let ours = udp_payload as u32;
    let limit = if requested < ours { requested } else { ours };
    let limit = if limit < 512 { 512 } else { limit } as usize;
    if dns::HDR_LEN + qlen + SIGNED_MAX_TAIL + s.len as usize > limit {
        return Err(Counter::SignedTooLarge);
    }
    // Volatile word copies: a plain copy of the array becomes a `memcpy` call.
    let mut i = 0;
    while i < maps::RRSIG_WORDS {
        // SAFETY: map memory on both sides; `i` < RRSIG_WORDS.
        unsafe {
            let w = core::ptr::read_volatile(&s.record[8 * i] as *const u8 as *const u64);
            core::ptr::write_volatile(&raw mut (*scratch).rrsig[i], w);
        }
        i += 1;
    }
    // SAFETY: this CPU's scratch.
    unsafe { core::ptr::write_volatile(&raw mut (*scratch).rrsig_sum, s.sum) };
    Ok(s.len)
}

/// The client address an answer is chosen for: an IPv4 address (in the low 32
/// bits of `addr.lo`) or an IPv6 one.
#[derive(Clone, Copy)]
pub(crate) struct Client {
    pub(crate) v6: u32,
    pub(crate) addr: ipv6::Addr6,
}

impl Client {
    #[inline(always)]
    fn v4(a: [u8; 4]) -> Client {
        Client { v6: 0, addr: ipv6::Addr6 { hi: 0, lo: u32::from_be_bytes(a) as u64 } }
    }
}

/// The answer id and ECS scope for `client` (and its `A` records when they are
/// the route's own, not a canary's: no second lookup), exactly as
/// `ScheduledName::answer_for`: IPv4 clients and IPv4-mapped IPv6 clients
/// (`::ffff:a.b.c.d`, whose scope counts the 96 mapped bits) by the IPv4 trie,
/// other IPv6 clients by the IPv6 trie; a canary split per /24 or /48.
#[inline(always)]
fn route(name_id: u32, route4: u32, client: &Client) -> Result<(u32, u8, Option<&'static AnswerV4>), Counter> {
    let a = client.addr;
    let mapped = client.v6 != 0 && a.hi == 0 && a.lo >> 32 == 0xffff;
    let by_v4 = client.v6 == 0 || mapped;
    let (route, max, split, extra) = if by_v4 {
        let v4 = a.lo as u32;
        let r = match route4::lookup(route4, v4) {
            route4::Flat::Route(r) => r,
            route4::Flat::None => return Err(Counter::NoAnswer),
            route4::Flat::Trie => maps::route_v4(name_id, v4.to_be_bytes()).ok_or(Counter::NoAnswer)?,
        };
        (r, 32, canary::SPLIT_PREFIX_V4, if mapped { 96 } else { 0 })
    } else {
        let r = maps::route_v6(name_id, a).ok_or(Counter::NoAnswer)?;
        (r, 128, canary::SPLIT_PREFIX_V6, 0)
    };
    let id = route.answer_id;
    let mut scope = if route.scope > max { max as u8 } else { route.scope as u8 };
    let primary = maps::answer(id).ok_or(Counter::NoAnswer)?;
    if primary.canary_percent != 0 {
        // Canary split per client subnet, exactly as `ScheduledName::answer_for`.
        if scope < split {
            scope = split;
        }
        // Hashed only here: most answers have no canary.
        let bucket = if by_v4 { canary::bucket_v4(a.lo as u32) } else { canary::bucket_v6(a.hi) };
        if bucket < primary.canary_percent {
            return Ok((primary.canary_id, scope + extra, None));
        }
    }
    Ok((id, scope + extra, Some(primary)))
}

#[cfg(not(test))]
#[panic_handler]
fn panic(_info: &core::panic::PanicInfo) -> ! {
    loop {}
}
