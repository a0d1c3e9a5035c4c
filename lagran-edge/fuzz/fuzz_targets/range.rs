//! Arbitrary `Range` header values and object lengths into
//! `lagran_edge::range::byte_range`: never a panic, and a partial range always
//! lies inside the object (first <= last < len), so slicing the body with it
//! cannot panic either.
#![no_main]

use lagran_edge::range::{ByteRange, byte_range};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    if data.len() < 8 {
        return;
    }
    let (len, header) = data.split_at(8);
    // Small lengths matter most (0, 1, …); large ones check overflow.
    let raw = u64::from_le_bytes(len.try_into().unwrap_or([0; 8]));
    let len = if raw & 1 == 0 { raw >> 1 & 0xffff } else { raw >> 1 };
    let Ok(header) = std::str::from_utf8(header) else { return };
    match byte_range(header, len) {
        ByteRange::Part(first, last) => assert!(first <= last && last < len, "{header:?} len {len}: {first}-{last}"),
        ByteRange::Full | ByteRange::Unsatisfiable => {}
    }
});
