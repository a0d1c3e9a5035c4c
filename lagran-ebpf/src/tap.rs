//! Sampling answers into the query log (`lagran_common::tap`): every
//! `tap_every`-th answer (a per-CPU countdown, no locks) has its query copied
//! into this CPU's `lagran_tap_buf` record before `response::build` rewrites
//! the frame, and its response copied after; the record then goes to
//! `lagran_tap_ring` with `bpf_ringbuf_output`. A full ring loses the record
//! (counted in `lagran_tap_drops`): the answer is sent the same, never waits.
//!
//! Messages are copied in 8-octet words, each checked against the frame end,
//! and the last 1–7 octets as the word that ends the message (overlapping the
//! one before): a bounded loop without byte-sized steps.

use aya_ebpf::{helpers::generated::bpf_ktime_get_ns, programs::XdpContext};
use lagran_common::tap::{MESSAGE_MAX, TapBuf, TapRecord};

use crate::{
    maps::{self, launder},
    packet::Frame,
    udp,
};

/// Counts this answer and, when it is the `every`-th, fills the record with
/// the query's addresses, ports, time and message, and notes where the
/// response will be (`TapBuf::pending`) for [`response`]; `every` 0 samples
/// nothing. `l3`, `v6` and `l4` locate the query's IP and UDP headers; `len`
/// is its DNS message's length. The countdown starts again only once a
/// sampled response is sent: when the answer fails after this, the next one
/// is sampled.
#[inline(always)]
pub fn query(ctx: &XdpContext, every: u32, l3: usize, v6: u32, l4: usize, len: usize) {
    if every == 0 {
        return;
    }
    let Some(buf) = maps::TAP_BUF.get_ptr_mut(0) else { return };
    // SAFETY (every access to `buf` below): this CPU's `lagran_tap_buf` value;
    // XDP programs do not nest on a CPU.
    let since = unsafe { (*buf).since }.saturating_add(1);
    unsafe {
        (*buf).since = since;
        (*buf).pending = 0;
    }
    if since < every {
        return;
    }
    let r = unsafe { &raw mut (*buf).record };
    if endpoints(&Frame::reload(ctx), r, l3, v6, l4).is_none() {
        return;
    }
    // SAFETY: a helper without arguments; `r` as above.
    unsafe {
        (*r).time_ns = bpf_ktime_get_ns();
        (*r).query_len = len as u16;
    }
    if copy(ctx, buf, l4 + udp::HDR_LEN, len, unsafe { &raw mut (*r).query }) {
        unsafe { (*buf).pending = l4 as u32 };
    }
}

/// After an answer was written (`XDP_TX`): when [`query`] sampled it, copies
/// the response `response::build` left in the frame (its DNS message runs from
/// after the UDP header to the frame's end) into the record and sends it.
///
/// What was sampled is read back from `lagran_tap_buf`, not carried through
/// `response::build`: a value held across it would have the verifier walk
/// every path of the build twice, sampled or not.
#[inline(always)]
pub fn response(ctx: &XdpContext) {
    match maps::config() {
        Some(cfg) if cfg.tap_every != 0 => {}
        _ => return,
    }
    let Some(buf) = maps::TAP_BUF.get_ptr_mut(0) else { return };
    // SAFETY (every access to `buf` below): as in `query`.
    let l4 = unsafe { (*buf).pending } as usize;
    if l4 == 0 {
        return;
    }
    unsafe {
        (*buf).pending = 0;
        (*buf).since = 0;
    }
    let off = l4 + udp::HDR_LEN;
    let frame_len = Frame::reload(ctx).len();
    if frame_len < off {
        return;
    }
    let len = frame_len - off;
    let r = unsafe { &raw mut (*buf).record };
    unsafe { (*r).response_len = len as u16 };
    if !copy(ctx, buf, off, len, unsafe { &raw mut (*r).response }) {
        return;
    }
    // SAFETY: the record is this CPU's map memory, complete now.
    #[expect(
        clippy::needless_borrows_for_generic_args,
        reason = "the record by value is a 1 080-octet copy to the stack: a memcpy call in the XDP section"
    )]
    let sent = maps::TAP_RING.output(unsafe { &*r }, 0);
    if sent.is_err()
        && let Some(d) = maps::TAP_DROPS.get_ptr_mut(0)
    {
        // SAFETY: per-CPU slot of this CPU.
        unsafe { *d += 1 };
    }
}

/// The query's addresses and ports into `r` (see `TapRecord`).
#[inline(always)]
fn endpoints(f: &Frame, r: *mut TapRecord, l3: usize, v6: u32, l4: usize) -> Option<()> {
    let ports: u32 = f.load(l4).ok()?;
    // Four words per address pair: IPv6 source and destination, or the IPv4
    // ones followed by zeros (written: the record is reused).
    let words: [u64; 4] = if v6 != 0 {
        let w = f.window::<40>(l3).ok()?;
        [w.load::<u64, 8>(), w.load::<u64, 16>(), w.load::<u64, 24>(), w.load::<u64, 32>()]
    } else {
        let w = f.window::<20>(l3).ok()?;
        [w.load::<u32, 12>() as u64, 0, w.load::<u32, 16>() as u64, 0]
    };
    // SAFETY: `r` is this CPU's record (map memory); volatile stores, so LLVM
    // neither merges nor turns them into a `memset`.
    unsafe {
        let client = (&raw mut (*r).client) as *mut u64;
        let server = (&raw mut (*r).server) as *mut u64;
        core::ptr::write_volatile(client, words[0]);
        core::ptr::write_volatile(client.add(1), words[1]);
        core::ptr::write_volatile(server, words[2]);
        core::ptr::write_volatile(server.add(1), words[3]);
        core::ptr::write_volatile((&raw mut (*r).client_port) as *mut u32, ports);
        core::ptr::write_volatile(&raw mut (*r).v6, v6);
    }
    Some(())
}

/// Copies the frame's octets `[off, off + len)`, at most [`MESSAGE_MAX`] of
/// them, into `dst`: whole 32-octet chunks, then the chunk that ends the
/// message (overlapping the one before; two 16-octet halves for a message
/// shorter than 32). Chunks, not bytes or words: the verifier walks the loop
/// once per iteration for every state that reaches it. False when the message
/// is shorter than 16 octets (no DNS message here is) or a read fails its
/// bounds check.
#[inline(always)]
fn copy(ctx: &XdpContext, buf: *mut TapBuf, off: usize, len: usize, dst: *mut [u8; MESSAGE_MAX]) -> bool {
    let n = if len > MESSAGE_MAX { MESSAGE_MAX } else { len };
    if n < 16 {
        return false;
    }
    let f = Frame::reload(ctx);
    let d = dst as *mut u8;
    let chunks = n / 32;
    let mut i = 0;
    while i < MESSAGE_MAX / 32 {
        if i >= chunks {
            break;
        }
        if !chunk::<32>(&f, off + i * 32, d, i * 32) {
            return false;
        }
        i += 1;
    }
    // Laundered, so the bounds below reach the verifier (LLVM knows `n` ≤ 512
    // and would drop the checks).
    // SAFETY: a field of this CPU's `lagran_tap_buf` value.
    let laundry = unsafe { &raw mut (*buf).laundry };
    if n >= 32 {
        let last = launder(laundry, (n - 32) as u32) as usize;
        last <= MESSAGE_MAX - 32 && chunk::<32>(&f, off + last, d, last)
    } else {
        let last = launder(laundry, (n - 16) as u32) as usize;
        last <= 16 && chunk::<16>(&f, off, d, 0) && chunk::<16>(&f, off + last, d, last)
    }
}

/// Copies the `N` octets (a multiple of 8) at frame offset `src` to `d + at`,
/// in words; false when they are not inside the frame.
#[inline(always)]
fn chunk<const N: usize>(f: &Frame, src: usize, d: *mut u8, at: usize) -> bool {
    let Ok(p) = f.at::<N>(src) else { return false };
    let mut k = 0;
    while k < N {
        // SAFETY: `at` checked `[p, p + N)` against the frame end; the callers
        // keep `at + N` within `MESSAGE_MAX`, the size of `d`'s array.
        unsafe {
            core::ptr::write_unaligned(d.add(at + k) as *mut u64, core::ptr::read_unaligned((p + k) as *const u64))
        };
        k += 8;
    }
    true
}
