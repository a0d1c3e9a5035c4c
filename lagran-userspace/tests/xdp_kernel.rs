//! Does this kernel's verifier accept the real object? Loads it (this is where
//! the verifier runs) and reports, for `cargo xtask integration-test`, the kernel
//! release and the verifier's processed-instruction count on lines the runner
//! reads from the guest's console:
//!
//! ```text
//! LAGRAN-KERNEL: 6.1.0-57-cloud-amd64
//! LAGRAN-VERIFIED-INSNS: 12345        (or `-`: the kernel does not report it, < 5.16)
//! ```
//!
//! When the verifier rejects the program, the end of its log (the instructions
//! it stopped at and its message) goes between `LAGRAN-VERIFIER-LOG-BEGIN` and
//! `LAGRAN-VERIFIER-LOG-END`, the count comes from its `processed N insns`, and
//! the test fails.
//!
//! Needs root (CAP_BPF) and the object (`LAGRAN_EBPF_OBJECT`, or
//! `cargo xtask build-ebpf --release`); fails with a message saying so.

use aya::programs::loaded_programs;
use lagran::xdp::LoadedXdp;

/// The program's name in the object (`#[xdp] fn lagran`), as the kernel keeps it.
const PROGRAM: &str = "lagran";

fn kernel_release() -> String {
    std::fs::read_to_string("/proc/sys/kernel/osrelease").map(|s| s.trim().to_owned()).unwrap_or_else(|_| "?".into())
}

/// The newest loaded XDP program called [`PROGRAM`]: the one this test loaded
/// (ids only grow), and its verified-instruction count if the kernel keeps one.
fn verified_insns() -> Option<u32> {
    loaded_programs()
        .filter_map(Result::ok)
        .filter(|p| p.name_as_str() == Some(PROGRAM))
        .max_by_key(|p| p.id())
        .and_then(|p| p.verified_instruction_count())
}

/// The end of the verifier's log, where it says why it stopped: the last
/// instructions it walked (with their source lines) and the message, without the
/// precision-backtracking noise. The whole log can be 100 000 lines.
fn verifier_tail(log: &str, lines: usize) -> Vec<&str> {
    let noise = |l: &&str| {
        l.starts_with("regs=") || l.starts_with("last_idx") || l.starts_with("parent ") || l.trim().is_empty()
    };
    let kept: Vec<&str> = log.lines().filter(|l| !noise(l)).collect();
    kept[kept.len().saturating_sub(lines)..].to_vec()
}

/// `processed N insns` from a verifier log.
fn processed_insns(log: &str) -> Option<u32> {
    log.lines().rev().find_map(|l| l.strip_prefix("processed ")?.split_whitespace().next()?.parse().ok())
}

#[test]
fn the_verifier_accepts_the_object() {
    let obj = lagran::xdp::object_bytes()
        .unwrap_or_else(|e| panic!("this test needs the BPF object: {e} (`cargo xtask test` builds it first)"));
    println!("LAGRAN-KERNEL: {}", kernel_release());
    let loaded = match LoadedXdp::load(&obj) {
        Ok(loaded) => loaded,
        Err(e) => {
            let log = e.to_string();
            match processed_insns(&log) {
                Some(n) => println!("LAGRAN-VERIFIED-INSNS: {n}"),
                None => println!("LAGRAN-VERIFIED-INSNS: -"),
            }
            let tail = verifier_tail(&log, 16);
            println!("LAGRAN-VERIFIER-LOG-BEGIN\n{}\nLAGRAN-VERIFIER-LOG-END", tail.join("\n"));
            let why = tail.iter().rev().find(|l| {
                !l.starts_with("verification time") && !l.starts_with("stack depth") && !l.starts_with("processed ")
            });
            panic!("kernel {} rejected the XDP object: {}", kernel_release(), why.unwrap_or(&"see the log above"));
        }
    };
    match verified_insns() {
        Some(n) => println!("LAGRAN-VERIFIED-INSNS: {n}"),
        None => println!("LAGRAN-VERIFIED-INSNS: -"),
    }
    drop(loaded);
}
