//! `lagran_config`: one-entry array with what the XDP program needs to know
//! about the deployment. Written by userspace (the loader) at attach time.

/// Map name as `bpftool` shows it.
pub const MAP_NAME: &str = "lagran_config";
/// The single index of the config array.
pub const INDEX: u32 = 0;
/// The program's global (`u32`, in `.rodata`, set by the loader before the
/// verifier runs) choosing its clock: 1 = `bpf_ktime_get_coarse_ns` (Linux 5.11
/// and later), 0 = `bpf_ktime_get_ns`.
pub const COARSE_CLOCK_GLOBAL: &str = "LAGRAN_COARSE_CLOCK";
/// The first kernel with `bpf_ktime_get_coarse_ns`.
pub const COARSE_CLOCK_SINCE: (u8, u8) = (5, 11);
/// The program's global (`u64`, in `.rodata`, set by the loader before the
/// verifier runs): the running kernel's tick length in nanoseconds
/// (`TICK_NSEC`), with which RRL times its accounts by the tick counter
/// (`bpf_jiffies64`); 0 = unknown, and RRL reads the clock above instead.
pub const TICK_NS_GLOBAL: &str = "LAGRAN_TICK_NS";

/// The fast path's settings.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Config {
    /// The DNS port userspace was started with (host order), for `lagran maps
    /// dump`; the program answers what `lagran_listen` lists.
    pub dns_port: u16,
    /// UDP payload size advertised in our OPT record (host order), e.g. 1232.
    pub udp_payload: u16,
    /// 1: answer from the maps; 0: pass every query to userspace (maps not yet
    /// synced, or the route table is stale and a fallback applies).
    pub enabled: u32,
    /// Response rate limiting (see `rrl`): responses per second per account, 0 = off.
    pub rrl_rate: u32,
    /// Every `rrl_slip`-th limited response is sent truncated (or BADCOOKIE); 0 = drop all.
    pub rrl_slip: u32,
    /// The lowest credit, in `rrl::COST` units: `-window_secs × rate × rrl::COST`.
    pub rrl_floor: i64,
    /// Random, chosen by the loader: keys the account slot (`rrl::slot`), so a
    /// spoofer cannot pick prefixes that take over a victim's slot.
    pub rrl_seed: u64,
    /// Query logs (see `tap`): every `tap_every`-th answer is sampled into
    /// `lagran_tap_ring`; 0 = none.
    pub tap_every: u32,
    pub _pad: u32,
}

const _: () = assert!(size_of::<Config>() == 40);

crate::impl_pod!(Config);
