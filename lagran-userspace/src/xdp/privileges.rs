//! The capabilities attaching the XDP program takes, checked before loading so
//! that a service missing one is told which, instead of the verifier's or the
//! kernel's bare "Permission denied".
//!
//! What each is for (kernel ≥ 5.8, where CAP_BPF and CAP_PERFMON exist):
//! - `CAP_BPF`: creating the maps, loading the program and its BTF.
//! - `CAP_PERFMON`: without it the verifier treats the loader as unprivileged
//!   for pointer arithmetic ("pointer arithmetic with it prohibited for !root")
//!   and rejects the program's packet parsing.
//! - `CAP_NET_ADMIN`: loading a networking program type and attaching it to
//!   an interface (the XDP link).
//!
//! Before 5.8 all of `bpf(2)` is `CAP_SYS_ADMIN`'s; `CAP_SYS_ADMIN` also stands in
//! for `CAP_BPF` and `CAP_PERFMON` on newer kernels, as the kernel's own checks
//! (`bpf_capable`, `perfmon_capable`) let it. Binding port 53 is the responder's
//! business (`CAP_NET_BIND_SERVICE`), not this module's.
//!
//! The effective set is read from `/proc/self/status` (`CapEff`, a hex mask)
//! rather than through a crate: one line of a file the kernel documents, and
//! no `capget(2)` struct versions to carry.

use std::fmt;

/// A capability by its number in `linux/capability.h`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Capability {
    pub name: &'static str,
    pub bit: u32,
    /// What the fast path uses it for, said in the error.
    pub purpose: &'static str,
}

pub const CAP_NET_ADMIN: Capability =
    Capability { name: "CAP_NET_ADMIN", bit: 12, purpose: "attaches the program to the interface" };
pub const CAP_SYS_ADMIN: Capability =
    Capability { name: "CAP_SYS_ADMIN", bit: 21, purpose: "loads BPF programs on kernels before 5.8" };
pub const CAP_PERFMON: Capability = Capability {
    name: "CAP_PERFMON",
    bit: 38,
    purpose: "lets the verifier accept the program's packet pointer arithmetic",
};
pub const CAP_BPF: Capability =
    Capability { name: "CAP_BPF", bit: 39, purpose: "creates the maps and loads the program" };

/// The capabilities `mask` (an effective set) lacks for loading and attaching
/// the program. `kernel_knows_bpf`: the running kernel has CAP_BPF (≥ 5.8).
pub fn missing_for_xdp(mask: u64, kernel_knows_bpf: bool) -> Vec<Capability> {
    let has = |c: Capability| mask & (1u64 << c.bit) != 0;
    let mut missing = Vec::new();
    if kernel_knows_bpf {
        for c in [CAP_BPF, CAP_PERFMON] {
            if !has(c) && !has(CAP_SYS_ADMIN) {
                missing.push(c);
            }
        }
    } else if !has(CAP_SYS_ADMIN) {
        missing.push(CAP_SYS_ADMIN);
    }
    if !has(CAP_NET_ADMIN) {
        missing.push(CAP_NET_ADMIN);
    }
    missing
}

/// The missing capabilities, said as the operator needs to hear it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MissingCapabilities(pub Vec<Capability>);

impl fmt::Display for MissingCapabilities {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("--xdp needs ")?;
        for (i, c) in self.0.iter().enumerate() {
            if i > 0 {
                f.write_str(", ")?;
            }
            write!(f, "{} (missing: it {})", c.name, c.purpose)?;
        }
        f.write_str(
            "; grant CAP_BPF, CAP_PERFMON and CAP_NET_ADMIN to the service \
             (AmbientCapabilities=, or setpriv/capsh --ambient-caps), or run without --xdp",
        )
    }
}

impl std::error::Error for MissingCapabilities {}

/// `CapEff` of a `/proc/<pid>/status` text.
pub fn effective_mask(status: &str) -> Option<u64> {
    let hex = status.lines().find_map(|l| l.strip_prefix("CapEff:"))?.trim();
    u64::from_str_radix(hex, 16).ok()
}

/// Checks this process's effective capabilities. An unreadable `/proc` is not
/// an error: the kernel then says what it refuses.
pub fn check_xdp() -> Result<(), MissingCapabilities> {
    let Some(mask) = std::fs::read_to_string("/proc/self/status").ok().as_deref().and_then(effective_mask) else {
        return Ok(());
    };
    // The highest capability number this kernel knows; CAP_BPF is 39.
    let last_cap = std::fs::read_to_string("/proc/sys/kernel/cap_last_cap")
        .ok()
        .and_then(|s| s.trim().parse::<u32>().ok())
        .unwrap_or(CAP_BPF.bit);
    let missing = missing_for_xdp(mask, last_cap >= CAP_BPF.bit);
    if missing.is_empty() { Ok(()) } else { Err(MissingCapabilities(missing)) }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn mask(caps: &[Capability]) -> u64 {
        caps.iter().fold(0, |m, c| m | 1 << c.bit)
    }

    #[test]
    fn the_three_capabilities_are_enough_and_each_is_named_when_missing() {
        assert!(missing_for_xdp(mask(&[CAP_BPF, CAP_PERFMON, CAP_NET_ADMIN]), true).is_empty());
        assert_eq!(missing_for_xdp(mask(&[CAP_PERFMON, CAP_NET_ADMIN]), true), vec![CAP_BPF]);
        assert_eq!(missing_for_xdp(mask(&[CAP_BPF, CAP_NET_ADMIN]), true), vec![CAP_PERFMON]);
        assert_eq!(missing_for_xdp(mask(&[CAP_BPF, CAP_PERFMON]), true), vec![CAP_NET_ADMIN]);
        let all = MissingCapabilities(missing_for_xdp(0, true)).to_string();
        assert!(all.starts_with("--xdp needs CAP_BPF (missing"), "{all}");
        assert!(all.contains("CAP_PERFMON (missing") && all.contains("CAP_NET_ADMIN (missing"), "{all}");
    }

    #[test]
    fn sys_admin_stands_in_for_bpf_and_perfmon_and_is_required_before_5_8() {
        assert!(missing_for_xdp(mask(&[CAP_SYS_ADMIN, CAP_NET_ADMIN]), true).is_empty());
        assert_eq!(missing_for_xdp(mask(&[CAP_BPF, CAP_PERFMON, CAP_NET_ADMIN]), false), vec![CAP_SYS_ADMIN]);
        assert!(missing_for_xdp(u64::MAX, false).is_empty());
    }

    #[test]
    fn the_effective_set_is_read_from_the_status_text() {
        let status = "Name:\tlagran\nCapInh:\t0000000000000000\nCapEff:\t000000c000001400\nCapBnd:\t000001ffffffffff\n";
        let m = effective_mask(status).expect("CapEff");
        assert!(missing_for_xdp(m, true).is_empty(), "bpf, perfmon, net_admin, net_bind_service");
        assert_eq!(effective_mask("Name:\tx\n"), None);
    }
}
