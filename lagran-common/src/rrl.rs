//! `lagran_rrl`: per-CPU array of response rate limiting accounts, one slot
//! per account key (userspace's `dns::rrl::account_key`: client /24 or /56,
//! response class) found by a keyed hash ([`slot`]); a new key takes over its
//! slot with a full credit, as in userspace's fixed table. An array lookup
//! instead of an LRU hash keeps the per-packet cost of RRL under 20 ns.
//! Written and read by the XDP program only; each CPU keeps its own accounts
//! (approximate: a client whose packets spread over N CPUs gets up to N times
//! the rate).

/// Map name as `bpftool` shows it.
pub const MAP_NAME: &str = "lagran_rrl";
/// Accounts per CPU (a power of two), as many as userspace keeps.
pub const SLOTS: u32 = 1 << SLOT_BITS;
const SLOT_BITS: u32 = 14;

/// The slot of account `key`: a multiplicative hash of the key mixed with the
/// loader's random `seed` (`Config::rrl_seed`).
#[inline(always)]
pub fn slot(key: u64, seed: u64) -> u32 {
    ((key ^ seed).wrapping_mul(0x9e37_79b9_7f4a_7c15).wrapping_add(seed) >> (64 - SLOT_BITS)) as u32
}
/// One response in the program's credit units: userspace's thousandths of a
/// response times 10⁶, so that a rate of `r` responses per second refills `r`
/// units per nanosecond of the program's interval clock and it divides nothing
/// per packet (a 64-bit division is tens of cycles).
pub const COST: i64 = 1_000_000_000;
/// The program's credit units per userspace credit unit (a thousandth of a response).
pub const UNITS_PER_THOUSANDTH: i64 = 1_000_000;
/// Longest gap credited at once, in nanoseconds (userspace caps the same gap
/// in milliseconds). With a rate of at most 10⁶ per second, `elapsed × rate`
/// stays below 7.2·10¹⁸, inside an `i64`.
pub const MAX_ELAPSED_NS: u64 = 3600 * 2000 * 1_000_000;

/// One account.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Account {
    /// The account key this slot holds.
    pub key: u64,
    /// Credit in [`COST`] units per response.
    pub credit: i64,
    /// When the credit was last brought up to date (the program's interval clock, ns).
    pub at_ns: u64,
    /// Limited responses so far (for `slip`).
    pub limited: u32,
    pub _pad: u32,
}

const _: () = assert!(size_of::<Account>() == 32);

crate::impl_pod!(Account);
