//! `lagran_rrl`: per-CPU LRU hash of response rate limiting accounts, keyed
//! like userspace's `dns::rrl::account_key` (client /24 or /56, response
//! class). Written and read by the XDP program only; each CPU keeps its own
//! accounts (approximate: a client whose packets spread over N CPUs gets up
//! to N times the rate), and the LRU bounds the memory.

/// Map name as `bpftool` shows it.
pub const MAP_NAME: &str = "lagran_rrl";
/// Accounts per CPU.
pub const MAX_ENTRIES: u32 = 65_536;
/// One response, in credit units (thousandths), as in userspace.
pub const COST: i64 = 1000;
/// Longest gap credited at once, in milliseconds (userspace caps the same).
pub const MAX_ELAPSED_MS: u64 = 3600 * 2000;

/// One account.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Account {
    /// Credit in thousandths of a response.
    pub credit: i64,
    /// When the credit was last brought up to date (milliseconds of `bpf_ktime_get_ns`).
    pub at_ms: u64,
    /// Limited responses so far (for `slip`).
    pub limited: u32,
    pub _pad: u32,
}

const _: () = assert!(size_of::<Account>() == 24);

crate::impl_pod!(Account);
