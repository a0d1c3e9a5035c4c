//! The program's clocks, for RRL accounts and server cookie timestamps:
//! neither needs time finer than a scheduler tick.
//!
//! `bpf_ktime_get_ns` reads the clock source on every call: measured at 30–40 ns
//! per packet on a KVM guest, more than the whole budget of rate limiting
//! (under 20 ns per answered query).
//! `bpf_ktime_get_coarse_ns` (Linux 5.11) returns the time of the last tick
//! from memory. The loader sets [`LAGRAN_COARSE_CLOCK`] to 1 on kernels that have
//! it; the global lives in the object's frozen `.rodata`, so the verifier sees
//! a constant and never walks (nor checks) the call the kernel lacks — the way
//! libbpf programs guard newer helpers. On 5.10 the program keeps the precise clock.
//!
//! RRL needs intervals only, and reads the tick counter itself where the loader
//! knows the tick's length ([`interval_ns`]): `bpf_jiffies64` is one of the few
//! helpers the verifier replaces by a load on 64-bit JITs, where the two clock
//! helpers are calls (measured: the coarse helper was about 15 ns of the RRL
//! path's 25 ns).

use aya_ebpf::helpers::generated::{bpf_jiffies64, bpf_ktime_get_coarse_ns, bpf_ktime_get_ns};

/// 1: `bpf_ktime_get_coarse_ns`; 0: `bpf_ktime_get_ns`. Set at load time
/// (`lagran_common::config::COARSE_CLOCK_GLOBAL`).
#[unsafe(no_mangle)]
static LAGRAN_COARSE_CLOCK: u32 = 0;

/// The kernel's tick length in nanoseconds (`TICK_NSEC`), 0 where the loader
/// could not tell it. Set at load time (`lagran_common::config::TICK_NS_GLOBAL`).
#[unsafe(no_mangle)]
static LAGRAN_TICK_NS: u64 = 0;

/// Nanoseconds of a clock that counts scheduler ticks, for intervals only:
/// `jiffies_64 × TICK_NSEC` (its origin is not CLOCK_MONOTONIC's), or
/// [`now_ns`] where the tick length is unknown. Never 0.
#[inline(always)]
pub fn interval_ns() -> u64 {
    // SAFETY: a read of a static; volatile so the compiler keeps the load the
    // loader's value replaces (the verifier then sees a constant and drops the
    // other branch).
    let tick = unsafe { core::ptr::read_volatile(&LAGRAN_TICK_NS) };
    if tick != 0 {
        // SAFETY: a helper without arguments. jiffies_64 starts 300 s short of
        // a 32-bit wrap (INITIAL_JIFFIES), so the product is never 0.
        unsafe { bpf_jiffies64() }.wrapping_mul(tick)
    } else {
        now_ns()
    }
}

/// Nanoseconds of CLOCK_MONOTONIC, at most one tick old.
#[inline(always)]
pub fn now_ns() -> u64 {
    // SAFETY: a read of a static; volatile so the compiler keeps the load the
    // loader's value replaces.
    if unsafe { core::ptr::read_volatile(&LAGRAN_COARSE_CLOCK) } != 0 {
        // SAFETY: a helper without arguments.
        unsafe { bpf_ktime_get_coarse_ns() }
    } else {
        // SAFETY: a helper without arguments.
        unsafe { bpf_ktime_get_ns() }
    }
}
