//! The XDP fast path, seen from userspace: loading and attaching the program
//! (`lagran-ebpf`), pinning its maps, and keeping the maps equal to the route
//! table with diffed writes.
//!
//! - [`loader`]: finds the BPF object, loads it, attaches it to an interface
//!   (native mode, else generic), pins the maps under [`PIN_DIR`]; detaches and
//!   unpins on drop.
//! - [`maps`]: [`Maps`], the typed handles every map read and write goes
//!   through; [`dump`] prints them, [`counters`] sums the packet counters
//!   ([`CounterSnapshot`], with its Prometheus text).
//! - [`writer`]: [`MapWriter::sync`] turns a
//!   [`RouteTable`](crate::route_table::RouteTable) into map entries, writing
//!   only what changed (`diff` finds the trie entries that did); `rrsig`
//!   makes and diffs the signed answers' RRSIGs (`lagran_rrsig`).
//! - [`name_slots`]: places the served names in `lagran_names`' slots, keyed by
//!   [`wire_name`]; [`route4_flat`] writes the flat IPv4 route arrays;
//!   [`mapping`]: the shared mapping of an array map both write through.
//! - [`privileges`]: the capabilities attaching takes, checked first.
//! - [`tap`]: the program's sampled answers (`[dnstap] xdp_sample`) read from
//!   its ring buffer into the dnstap query log.
//! - `netns`: network-namespace and veth helpers for tests (feature `testkit`).
//!
//! aya's map types are imported by `maps`, `mapping`, `name_slots` and
//! `route4_flat` (the last two take the `Map` of the array they write from
//! [`Maps`]); [`XdpError`] below carries aya's `MapError`.
//!
//! Minimum kernel version: 5.10, the oldest kernel the matrix
//! (`cargo xtask integration-test vm`) passes (BTF-defined maps, bounded loops,
//! growing frames with `bpf_xdp_adjust_tail`); the tests run `BPF_PROG_TEST_RUN`.

pub mod counters;
mod diff;
pub mod dump;
pub mod loader;
pub mod mapping;
pub mod maps;
pub mod name_slots;
#[cfg(any(test, feature = "testkit"))]
pub mod netns;
pub mod privileges;
pub mod route4_flat;
mod rrsig;
pub mod sync;
pub mod tap;
pub mod tick;
pub mod wire_name;
pub mod writer;

use std::path::PathBuf;

pub use counters::CounterSnapshot;
pub use lagran_common::PIN_DIR;

/// Where `LAGRAN_PIN_DIR` moves the pins from [`PIN_DIR`] (tests and
/// benchmarks running beside a production instance), when set.
pub fn pin_dir_override() -> Option<std::path::PathBuf> {
    std::env::var_os("LAGRAN_PIN_DIR").filter(|p| !p.is_empty()).map(std::path::PathBuf::from)
}
pub use loader::{
    AttachMode, LoadedXdp, RunStats, TestRunOutput, XdpHandle, XdpOptions, expand_listen, object_bytes, object_path,
};
pub use maps::Maps;
pub use writer::{MapWriter, SyncStats, SyncStep};

/// Something the fast path could not do. Each variant names the object and, where
/// there is one, what to try next.
#[derive(Debug, thiserror::Error)]
pub enum XdpError {
    #[error(
        "the XDP object {path} does not exist: build it with `cargo xtask build-ebpf --release`, \
         or point LAGRAN_EBPF_OBJECT at a built object"
    )]
    ObjectMissing { path: PathBuf },
    #[error("the XDP map writer's thread: {0}")]
    Thread(#[from] crate::background::BackgroundError),
    #[error("cannot read the XDP object {path}: {source}")]
    ObjectRead { path: PathBuf, source: std::io::Error },
    #[error("loading the XDP object failed (is this kernel ≥ 5.8, and do we have CAP_BPF/CAP_SYS_ADMIN?): {0}")]
    Load(#[source] Box<aya::EbpfError>),
    #[error("the XDP program `{name}` was rejected: {source}")]
    Program { name: &'static str, source: Box<aya::programs::ProgramError> },
    #[error("the XDP object has no program `{0}`: was it built from this tree?")]
    NoProgram(&'static str),
    #[error("the XDP object has no map `{0}`: was it built from this tree?")]
    NoMap(&'static str),
    #[error("cannot map `{map}` into memory: {reason}")]
    Mmap { map: &'static str, reason: String },
    #[error("map `{map}`: {source}")]
    Map { map: &'static str, source: Box<aya::maps::MapError> },
    #[error("pinning map `{map}` at {path}: {source}")]
    Pin { map: &'static str, path: PathBuf, source: Box<aya::pin::PinError> },
    #[error("opening pinned map {path}: {source} (is `lagran serve --xdp` running, and are we root?)")]
    OpenPinned { path: PathBuf, source: Box<aya::maps::MapError> },
    #[error("bpffs at {path}: {source}")]
    Bpffs { path: PathBuf, source: std::io::Error },
    #[error("{0}")]
    Capabilities(#[from] privileges::MissingCapabilities),
    #[error(
        "attaching XDP to {iface} failed in native mode ({native}) and in generic mode ({generic}); \
         check that the interface exists, that no other XDP program holds it (`ip link show {iface}`), \
         and that we have CAP_NET_ADMIN — or serve without --xdp"
    )]
    Attach { iface: String, native: String, generic: String },
    #[error("attaching XDP to {iface} in {mode} mode failed: {source}")]
    AttachMode { iface: String, mode: AttachMode, source: Box<aya::programs::ProgramError> },
    #[error("pinning the XDP link at {path}: {reason}")]
    LinkPin { path: PathBuf, reason: String },
    #[error("BPF_PROG_TEST_RUN failed: {0}")]
    TestRun(#[source] Box<aya::programs::ProgramError>),
    #[error("map `{map}` is full ({max} entries): {what}")]
    Full { map: &'static str, max: u32, what: String },
    #[error("reading the addresses of interface {iface}: {source}")]
    Interface { iface: String, source: std::io::Error },
    #[error("scheduled names {a:?} and {b:?} share the name id {id}")]
    DuplicateNameId { id: u32, a: String, b: String },
}
