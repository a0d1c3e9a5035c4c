//! Arbitrary request paths into `lagran_edge::waf::normalize_path`: never a
//! panic, the result is absolute, has no `.`/`..` segments and no empty ones,
//! and normalizing it again changes nothing that could let a second pass see a
//! different path than the WAF did (idempotent once no `%` is left).
#![no_main]

use lagran_edge::waf::normalize_path;
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let Ok(path) = std::str::from_utf8(data) else { return };
    let n = normalize_path(path);
    assert!(n.starts_with('/'), "{path:?} -> {n:?}");
    let inner = n.trim_start_matches('/').trim_end_matches('/');
    if !inner.is_empty() {
        for seg in inner.split('/') {
            assert!(!seg.is_empty() && seg != "." && seg != "..", "{path:?} -> {n:?}");
        }
    }
    if !n.contains('%') {
        assert_eq!(normalize_path(&n), n, "{path:?}");
    }
});
