//! The program's clock, for RRL accounts and server cookie timestamps: both
//! need CLOCK_MONOTONIC, neither needs it finer than a scheduler tick.
//!
//! `bpf_ktime_get_ns` reads the clock source on every call: measured at 30–40 ns
//! per packet on a KVM guest, more than the whole RRL budget (issue 11: < 20 ns).
//! `bpf_ktime_get_coarse_ns` (Linux 5.11) returns the time of the last tick
//! from memory. The loader sets [`LAGRAN_COARSE_CLOCK`] to 1 on kernels that have
//! it; the global lives in the object's frozen `.rodata`, so the verifier sees
//! a constant and never walks (nor checks) the call the kernel lacks — the way
//! libbpf programs guard newer helpers. On 5.10 the program keeps the precise clock.

use aya_ebpf::helpers::generated::{bpf_ktime_get_coarse_ns, bpf_ktime_get_ns};

/// 1: `bpf_ktime_get_coarse_ns`; 0: `bpf_ktime_get_ns`. Set at load time
/// (`lagran_common::config::COARSE_CLOCK_GLOBAL`).
#[unsafe(no_mangle)]
static LAGRAN_COARSE_CLOCK: u32 = 0;

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
