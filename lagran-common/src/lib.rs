//! Map keys and values shared by the XDP program (`lagran-ebpf`) and userspace.
//!
//! Every type is `#[repr(C)]`, has explicit padding, and a compile-time size check.
//! Multi-byte fields are in host byte order unless the field's doc says otherwise.
#![no_std]

/// The directory under bpffs where the loader pins every map.
pub const PIN_DIR: &str = "/sys/fs/bpf/lagran";
