//! Test-only (feature `test-broken-verifier`): a deliberate verifier failure, so
//! the kernel matrix (`cargo xtask integration-test vm --broken`) can be seen to
//! fail. Never built into a shipped object.

use aya_ebpf::programs::XdpContext;

/// Reads byte 64 of the frame without comparing it with `data_end` first: the
/// verifier rejects the load ("invalid access to packet").
#[inline(always)]
pub fn unchecked_read(ctx: &XdpContext) {
    // SAFETY: none; that is the point. The verifier refuses to load this.
    unsafe { core::ptr::read_volatile((ctx.data() + 64) as *const u8) };
}
