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
//! When the verifier rejects the program, its message goes between
//! `LAGRAN-VERIFIER-LOG-BEGIN` and `LAGRAN-VERIFIER-LOG-END`, and the test fails.
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

#[test]
fn the_verifier_accepts_the_object() {
    let obj = lagran::xdp::object_bytes()
        .unwrap_or_else(|e| panic!("this test needs the BPF object: {e} (`cargo xtask test` builds it first)"));
    println!("LAGRAN-KERNEL: {}", kernel_release());
    let loaded = match LoadedXdp::load(&obj) {
        Ok(loaded) => loaded,
        Err(e) => {
            println!("LAGRAN-VERIFIED-INSNS: -");
            println!("LAGRAN-VERIFIER-LOG-BEGIN\n{e}\nLAGRAN-VERIFIER-LOG-END");
            panic!("kernel {} rejected the XDP object: {e}", kernel_release());
        }
    };
    match verified_insns() {
        Some(n) => println!("LAGRAN-VERIFIED-INSNS: {n}"),
        None => println!("LAGRAN-VERIFIED-INSNS: -"),
    }
    drop(loaded);
}
