//! The `xdp-debug-log` feature of `lagran-ebpf`: an object built with it reports
//! every packet's outcome through aya-log; the production object carries none of it.
//!
//! Needs root (CAP_BPF), the release object (`LAGRAN_EBPF_OBJECT`) and the debug one
//! (`LAGRAN_EBPF_DEBUG_OBJECT`, from `cargo xtask build-ebpf --release --features
//! xdp-debug-log`); `cargo xtask test` builds both. Fails with a message saying so.

use std::sync::{Arc, Mutex};

use lagran::xdp::LoadedXdp;

/// Keeps every record aya-log hands over.
#[derive(Clone, Default)]
struct Capture(Arc<Mutex<Vec<String>>>);

impl log::Log for Capture {
    fn enabled(&self, _: &log::Metadata) -> bool {
        true
    }
    fn log(&self, record: &log::Record) {
        self.0.lock().unwrap().push(format!("{} {}", record.level(), record.args()));
    }
    fn flush(&self) {}
}

fn object(var: &str, how: &str) -> Vec<u8> {
    let path = std::env::var_os(var).unwrap_or_else(|| panic!("{var} is not set: {how}"));
    std::fs::read(&path).unwrap_or_else(|e| panic!("reading {}: {e} ({how})", path.to_string_lossy()))
}

/// An ARP request: not IP, so the program passes it (counter `not_ip`).
fn arp_frame() -> Vec<u8> {
    let mut f = vec![0xff; 6];
    f.extend_from_slice(&[0x02, 0, 0, 0, 0, 1, 0x08, 0x06]);
    f.extend_from_slice(&[0, 1, 8, 0, 6, 4, 0, 1]);
    f.resize(60, 0);
    f
}

#[test]
fn the_production_object_carries_no_debug_log() {
    let obj = object("LAGRAN_EBPF_OBJECT", "cargo xtask build-ebpf --release");
    let mut loaded = LoadedXdp::load(&obj).expect("loading the release object (root needed)");
    assert!(
        loaded.take_debug_logger(Capture::default()).is_none(),
        "the release object has an aya-log map: xdp-debug-log leaked into production"
    );
}

#[test]
fn the_debug_object_reports_each_packets_outcome() {
    let obj = object("LAGRAN_EBPF_DEBUG_OBJECT", "cargo xtask build-ebpf --release --features xdp-debug-log");
    let mut loaded = LoadedXdp::load(&obj).expect("loading the debug object (root needed)");
    let capture = Capture::default();
    let mut logger = loaded.take_debug_logger(capture.clone()).expect("the debug object has an aya-log map");
    let out = loaded.test_run(&arp_frame()).expect("BPF_PROG_TEST_RUN");
    assert_eq!(out.action, 2, "ARP is passed");
    logger.flush();
    let records = capture.0.lock().unwrap().clone();
    assert!(
        records.iter().any(|r| r.starts_with("DEBUG") && r.contains("lagran: passed")),
        "a debug record says the packet was passed: {records:?}"
    );
}
