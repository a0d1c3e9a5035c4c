//! Canary splits: which share of the client subnets a canary answer goes to.
//!
//! The split is per client subnet — the /24 of an IPv4 client, the /48 of an
//! IPv6 one — so a subnet always gets the same answer and resolver caches stay
//! correct. Both the XDP program and userspace call these functions,
//! so the two answer paths cannot disagree on a client's bucket.

/// Buckets are 0..BUCKETS; a canary of `p` % takes buckets `0..p`.
pub const BUCKETS: u32 = 100;

/// The prefix length a split answer is valid for (IPv4): one bucket per /24.
pub const SPLIT_PREFIX_V4: u8 = 24;
/// The prefix length a split answer is valid for (IPv6): one bucket per /48.
pub const SPLIT_PREFIX_V6: u8 = 48;

/// MurmurHash3's 32-bit finaliser: a cheap, well-mixing bijection.
#[inline(always)]
pub const fn fmix32(mut h: u32) -> u32 {
    h ^= h >> 16;
    h = h.wrapping_mul(0x85eb_ca6b);
    h ^= h >> 13;
    h = h.wrapping_mul(0xc2b2_ae35);
    h ^= h >> 16;
    h
}

/// The bucket of an IPv4 client (address in host order): a hash of its /24.
#[inline(always)]
pub const fn bucket_v4(addr: u32) -> u32 {
    fmix32(addr >> 8) % BUCKETS
}

/// The bucket of an IPv6 client (its upper 64 bits, host order): a hash of its /48.
#[inline(always)]
pub const fn bucket_v6(upper64: u64) -> u32 {
    let p48 = upper64 >> 16;
    fmix32((p48 as u32) ^ fmix32((p48 >> 32) as u32)) % BUCKETS
}
