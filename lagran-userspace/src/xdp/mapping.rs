//! A shared mapping of a `BPF_F_MMAPABLE` array map: the map's elements as
//! memory, written and read with atomics, so the writer orders its stores the
//! way the program's readers need (see `route4_flat` and `name_slots`) and
//! writes millions of slots without a system call each.

use std::sync::atomic::{AtomicU32, AtomicU64};

use aya::maps::{Map, MapData};

use super::XdpError;

pub struct Mapping {
    ptr: *mut u8,
    bytes: usize,
    /// Keeps the map (and so the mapping's object) open.
    _map: MapData,
}

// SAFETY: the mapping is plain shared memory owned by this value; every access
// goes through atomics.
unsafe impl Send for Mapping {}

impl Mapping {
    /// Maps the first `data_bytes` of array map `map` (named `name` in errors),
    /// read-only unless `writable`.
    pub fn new(map: Map, name: &'static str, data_bytes: usize, writable: bool) -> Result<Mapping, XdpError> {
        let Map::Array(data) = map else {
            return Err(XdpError::Mmap { map: name, reason: "not an array map".into() });
        };
        let page = 4096usize;
        let bytes = data_bytes.div_ceil(page) * page;
        use std::os::fd::{AsFd as _, AsRawFd as _};
        let fd = data.fd().as_fd().as_raw_fd();
        let prot = if writable { libc::PROT_READ | libc::PROT_WRITE } else { libc::PROT_READ };
        // SAFETY: a fresh shared mapping of the map's memory, unmapped on drop.
        let p = unsafe { libc::mmap(std::ptr::null_mut(), bytes, prot, libc::MAP_SHARED, fd, 0) };
        if p == libc::MAP_FAILED {
            return Err(XdpError::Mmap { map: name, reason: std::io::Error::last_os_error().to_string() });
        }
        Ok(Mapping { ptr: p.cast(), bytes, _map: data })
    }

    /// The 4-byte word at byte offset `off` (4-aligned, inside the mapping).
    pub fn u32(&self, off: usize) -> &AtomicU32 {
        assert!(off.is_multiple_of(4) && off + 4 <= self.bytes, "offset {off} outside the mapping");
        // SAFETY: aligned and inside the mapping, which lives as long as `self`.
        unsafe { &*self.ptr.add(off).cast::<AtomicU32>() }
    }

    /// The 8-byte word at byte offset `off` (8-aligned, inside the mapping).
    pub fn u64(&self, off: usize) -> &AtomicU64 {
        assert!(off.is_multiple_of(8) && off + 8 <= self.bytes, "offset {off} outside the mapping");
        // SAFETY: aligned and inside the mapping, which lives as long as `self`.
        unsafe { &*self.ptr.add(off).cast::<AtomicU64>() }
    }
}

impl Drop for Mapping {
    fn drop(&mut self) {
        // SAFETY: the mapping made in `new`.
        unsafe { libc::munmap(self.ptr.cast(), self.bytes) };
    }
}
