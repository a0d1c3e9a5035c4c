//! Map keys and values shared by the XDP program (`lagran-ebpf`) and userspace.
//!
//! One module per map: its name (at most 15 characters, so `bpftool` shows it
//! whole), its size constants and its key/value types. Every type is
//! `#[repr(C)]`, has explicit `_pad` fields where the layout would otherwise
//! have holes, uses `u32` flags instead of `bool`, and carries a compile-time size
//! check. Byte order is stated on every multi-byte field: addresses and name ids
//! inside LPM keys are big-endian (the trie matches bits most significant first),
//! everything else is host order.
//!
//! The `user` feature implements `aya::Pod` for the types; only userspace turns it
//! on, so `std` never leaks into the eBPF build.
#![no_std]

pub mod answers;
pub mod canary;
pub mod config;
pub mod cookie;
pub mod counters;
pub mod listen;
pub mod names;
pub mod route_v4;
pub mod route_v4_flat;
pub mod route_v6;
pub mod rrl;
pub mod rrsig;
pub mod tap;

/// The directory under bpffs where the loader pins every map.
pub const PIN_DIR: &str = "/sys/fs/bpf/lagran";

/// Implements `aya::Pod` for plain-data map types when the `user` feature is on.
macro_rules! impl_pod {
    ($($t:ty),* $(,)?) => {
        $(
            #[cfg(feature = "user")]
            // SAFETY: `#[repr(C)]`, only integer/array fields, no padding holes
            // (checked by the size assertions beside each type).
            unsafe impl aya::Pod for $t {}
        )*
    };
}
pub(crate) use impl_pod;
