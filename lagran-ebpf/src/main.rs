//! The Lagran XDP fast path.
//!
//! Answers `A` queries for scheduled names from BPF maps and hands everything
//! else to the kernel stack (and so to the userspace responder) with `XDP_PASS`.
//! Userspace computes every answer; this program only parses, looks up and
//! rewrites (SPEC §8):
//!
//! ```text
//! Ethernet [802.1Q] → IPv4 (no options, no fragments) → UDP to a listen address (lagran_listen)
//!   → DNS query, one question, A/IN, [OPT [ECS v4]]
//!   → lagran_names (qname → name id)
//!   → lagran_route_v4 ([name id | client] → answer id, scope)
//!   → lagran_answers (answer id → TTL, addresses, canary split)
//!   → response written in place, XDP_TX
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
mod csum;
mod dns;
mod eth;
mod ipv4;
mod maps;
mod packet;
mod response;
mod udp;

use aya_ebpf::{bindings::xdp_action, macros::xdp, programs::XdpContext};
use lagran_common::{canary, counters::Counter};

use crate::packet::Frame;

#[xdp]
pub fn lagran(ctx: XdpContext) -> u32 {
    #[cfg(feature = "test-broken-verifier")]
    broken::unchecked_read(&ctx);
    match try_lagran(&ctx) {
        Ok(action) => {
            maps::count(Counter::Answered);
            #[cfg(feature = "xdp-debug-log")]
            aya_log_ebpf::debug!(&ctx, "lagran: answered");
            action
        }
        Err(reason) => {
            maps::count(reason);
            #[cfg(feature = "xdp-debug-log")]
            aya_log_ebpf::debug!(&ctx, "lagran: passed, counter {}", reason as u32);
            xdp_action::XDP_PASS
        }
    }
}

#[inline(always)]
fn try_lagran(ctx: &XdpContext) -> Result<u32, Counter> {
    let f = Frame::new(ctx);
    let eth = eth::parse(&f)?;
    let ip = ipv4::parse(&f, eth.l3)?;
    let cfg = maps::config().ok_or(Counter::Disabled)?;
    if cfg.enabled == 0 {
        return Err(Counter::Disabled);
    }
    let l4 = eth.l3 + ipv4::HDR_LEN;
    let udp = udp::parse(&f, l4, ip.tot_len - ipv4::HDR_LEN)?;
    // Only what we serve: another host's DNS traffic crossing this interface, or
    // a port we do not listen on, is not ours to answer.
    if !maps::listening_v4(ip.dst, udp.dst) {
        return Err(Counter::NotListenAddress);
    }
    let scratch = maps::SCRATCH.get_ptr_mut(0).ok_or(Counter::Malformed)?;
    let q = dns::parse(ctx, &f, l4 + udp::HDR_LEN, udp.payload_len, scratch)?;

    // SAFETY: a read-only view of a map value, used before this program returns.
    #[expect(
        clippy::needless_borrows_for_generic_args,
        reason = "a key passed by value goes through a zeroed temporary: a memset call in the XDP section"
    )]
    let name = unsafe { maps::NAMES.get(&q.qhash) }.ok_or(Counter::NameUnknown)?;
    // The hash only finds the candidate; the exact name decides.
    if !dns::name_matches(scratch, q.qlen, name) {
        return Err(Counter::NameUnknown);
    }
    let name_id = name.id;
    // RFC 7871 §7.1.1: the ECS address when SOURCE PREFIX-LENGTH > 0, else the sender.
    let client = if q.has_ecs != 0 && q.ecs_source > 0 { q.ecs_addr } else { ip.src };
    let route = maps::route_v4(name_id, client).ok_or(Counter::NoAnswer)?;
    let mut answer = maps::answer(route.answer_id).ok_or(Counter::NoAnswer)?;
    let mut scope = if route.scope > 32 { 32 } else { route.scope as u8 };
    if answer.canary_percent != 0 {
        // Canary split per client subnet, exactly as `ScheduledName::answer_for`.
        if scope < canary::SPLIT_PREFIX_V4 {
            scope = canary::SPLIT_PREFIX_V4;
        }
        if canary::bucket_v4(u32::from_be_bytes(client)) < answer.canary_percent {
            answer = maps::answer(answer.canary_id).ok_or(Counter::NoAnswer)?;
        }
    }
    let count = answer.count as usize;
    if count == 0 || count > lagran_common::answers::MAX_ADDRS {
        return Err(Counter::NoAnswer);
    }
    let reply = response::Reply { answer: &answer, count, scope, udp_payload: cfg.udp_payload };
    response::build(ctx, &eth, &ip, &udp, &q, &reply)
}

#[cfg(not(test))]
#[panic_handler]
fn panic(_info: &core::panic::PanicInfo) -> ! {
    loop {}
}
