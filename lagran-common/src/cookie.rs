//! `lagran_cookie`: one-entry array with the server cookie secret (RFC 9018)
//! and the clock the XDP program stamps cookies with. Written by userspace at
//! attach time, when the secret rotates, and every second (the clock offset).
//!
//! Also the one SipHash-2-4 both sides can run on a fixed-size input: the XDP
//! program hashes with [`siphash24`]; userspace uses the `siphasher` crate and
//! its tests check that the two agree.

/// Map name as `bpftool` shows it.
pub const MAP_NAME: &str = "lagran_cookie";
/// The single index of the array.
pub const INDEX: u32 = 0;

/// What the program needs to check and make server cookies.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct CookieConfig {
    /// The secret's octets 0–7 and 8–15 as little-endian words (SipHash's k0, k1).
    pub k0: u64,
    pub k1: u64,
    /// Unix time minus `bpf_ktime_get_ns` (CLOCK_MONOTONIC), in nanoseconds:
    /// kernels before 6.x have no wall-clock helper.
    pub unix_offset_ns: i64,
    /// 1: answer queries with a COOKIE option; 0: pass them (no secret yet).
    pub enabled: u32,
    /// 1 while a previous secret is still accepted: a server cookie that does
    /// not verify with `k0`/`k1` is passed to userspace, which also checks that one.
    pub previous_in_grace: u32,
    /// Not 0: the Unix second to use instead of the clock (tests and the
    /// differential fuzz fix the timestamp this way).
    pub fixed_now: u32,
    pub _pad: u32,
}

const _: () = assert!(size_of::<CookieConfig>() == 40);

crate::impl_pod!(CookieConfig);

#[inline(always)]
fn round(v: &mut [u64; 4]) {
    v[0] = v[0].wrapping_add(v[1]);
    v[1] = v[1].rotate_left(13);
    v[1] ^= v[0];
    v[0] = v[0].rotate_left(32);
    v[2] = v[2].wrapping_add(v[3]);
    v[3] = v[3].rotate_left(16);
    v[3] ^= v[2];
    v[0] = v[0].wrapping_add(v[3]);
    v[3] = v[3].rotate_left(21);
    v[3] ^= v[0];
    v[2] = v[2].wrapping_add(v[1]);
    v[1] = v[1].rotate_left(17);
    v[1] ^= v[2];
    v[2] = v[2].rotate_left(32);
}

#[inline(always)]
fn compress(v: &mut [u64; 4], m: u64) {
    v[3] ^= m;
    round(v);
    round(v);
    v[0] ^= m;
}

/// SipHash-2-4 (Aumasson and Bernstein) of a message of `len` octets given as
/// `full` whole little-endian words `m[..full]` and the remaining `len % 8`
/// octets in the low bits of `tail`. `full` is at most 4; the loop over the
/// words is bounded by that constant, so the verifier walks it once.
#[inline(always)]
pub fn siphash24(k0: u64, k1: u64, m: &[u64; 4], full: usize, tail: u64, len: usize) -> u64 {
    let mut v = [
        k0 ^ 0x736f_6d65_7073_6575,
        k1 ^ 0x646f_7261_6e64_6f6d,
        k0 ^ 0x6c79_6765_6e65_7261,
        k1 ^ 0x7465_6462_7974_6573,
    ];
    let mut i = 0;
    while i < 4 {
        if i >= full {
            break;
        }
        compress(&mut v, m[i]);
        i += 1;
    }
    compress(&mut v, tail | ((len as u64 & 0xff) << 56));
    v[2] ^= 0xff;
    round(&mut v);
    round(&mut v);
    round(&mut v);
    round(&mut v);
    v[0] ^ v[1] ^ v[2] ^ v[3]
}

/// The RFC 9018 hash of a cookie from an IPv4 client: 20 octets,
/// `client cookie | 1 | 0 0 0 | timestamp | address`. `client` and `head`
/// (version, reserved, timestamp) are the octets as they sit in the packet,
/// loaded little-endian; `addr` likewise (4 octets).
#[inline(always)]
pub fn hash_v4(k0: u64, k1: u64, client: u64, head: u64, addr: u32) -> u64 {
    siphash24(k0, k1, &[client, head, 0, 0], 2, addr as u64, 20)
}

/// The same for an IPv6 client: 32 octets, the address as two little-endian words.
#[inline(always)]
pub fn hash_v6(k0: u64, k1: u64, client: u64, head: u64, addr: [u64; 2]) -> u64 {
    siphash24(k0, k1, &[client, head, addr[0], addr[1]], 4, 0, 32)
}
