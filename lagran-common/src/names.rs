//! `lagran_names`: the query names the fast path answers, in an array of slots
//! placed by userspace (open addressing), so that finding a name is array
//! reads the verifier inlines, never a call into the kernel's hash table.
//!
//! The program hashes the lowercased wire name in 8-byte words while it reads
//! it ([`hash_words`]; the name ends at its first zero octet, so a name with a
//! zero octet inside a label is never stored), reads the slots of the hash's probe window
//! ([`slot`], at most [`PROBES`]) until one holds that hash or one was never
//! used, then compares the name with the stored one word by word. Two names
//! with the same hash cannot both be stored (the writer leaves the second to
//! userspace), and a query whose name hashes like a stored one but differs
//! fails the comparison and is passed: a collision can cost an answer in the
//! kernel, never a wrong answer.
//!
//! The array is `BPF_F_MMAPABLE`: the map writer writes slots through a shared
//! mapping, in an order that lets a packet racing it see a whole old entry, a
//! whole new one, or none (and be passed):
//! - a new entry's name, length, id and block are written while its `hash` says
//!   [`EMPTY`] or [`TOMBSTONE`], then `hash` last (after a release fence);
//! - a name that stays but gets another id or block gets both in one 8-byte
//!   store (`id` and `route4` share an aligned word, read by the program in one load);
//! - a name given up gets `hash` = [`TOMBSTONE`] and nothing else, and its slot
//!   is reused only from the next sync on, when no packet can still be reading it.

/// Map name as `bpftool` shows it.
pub const MAP_NAME: &str = "lagran_names";
/// Most names the fast path serves.
pub const MAX_ENTRIES: u32 = 4096;
/// Slots of the array: twice the names, so probe windows stay short.
pub const SLOTS: u32 = 2 * MAX_ENTRIES;
/// Slots a name may sit in: its hash's home slot and the next ones, wrapping.
/// A name whose window is full is left to userspace.
pub const PROBES: u32 = 8;
/// `hash` of a slot never used since the map was created or emptied: a probe stops there.
pub const EMPTY: u64 = 0;
/// `hash` of a slot whose name was given up: a probe goes on past it.
pub const TOMBSTONE: u64 = 1;
/// Longest wire-format name (RFC 1035 §2.3.4: 255 octets, length bytes included).
pub const NAME_MAX: usize = 255;
/// 8-byte words a name of `NAME_MAX` octets occupies.
pub const WORDS: usize = NAME_MAX.div_ceil(8);

/// One slot: what the fast path knows about a name.
#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct NameValue {
    /// [`hash_words`] of the name; [`EMPTY`] or [`TOMBSTONE`] in a slot without one.
    pub hash: u64,
    /// The name's id: the leading 32 bits of its `lagran_route_v4` keys (host order here).
    /// With `route4`, one aligned 8-byte word ([`NameValue::target_word`]).
    pub id: u32,
    /// The name's block of `lagran_route4_l1` plus one (`route_v4_flat`); 0: none,
    /// its IPv4 routes are looked up in the trie.
    pub route4: u32,
    /// Length of the wire name in octets, root label included (1–255).
    /// With `signed`, one aligned 8-byte word (`LEN_OFFSET`).
    pub len: u32,
    /// 1: the name is in a signed zone, and a query with DO gets its answer's
    /// RRSIG from `lagran_rrsig`; 0: answered unsigned.
    pub signed: u32,
    /// The wire name (`04 e d g e 06 l a g r a n 03 n e t 00`), ASCII letters
    /// lowercased, as little-endian 8-byte words (octet `i` is byte `i % 8` of
    /// word `i / 8`), zero after `len` octets.
    pub name: [u64; WORDS],
}

impl NameValue {
    /// The value for `wire` (lowercased wire format, at most `NAME_MAX` octets).
    pub fn new(id: u32, wire: &[u8]) -> NameValue {
        NameValue { hash: hash_wire(wire), id, route4: 0, len: wire.len() as u32, signed: 0, name: words(wire) }
    }

    /// `id` and `route4` as the one word they share (id in the low half).
    #[inline(always)]
    pub const fn target_word(id: u32, route4: u32) -> u64 {
        id as u64 | (route4 as u64) << 32
    }

    /// Byte offsets of the fields the map writer stores one by one.
    pub const HASH_OFFSET: usize = 0;
    pub const TARGET_OFFSET: usize = 8;
    pub const LEN_OFFSET: usize = 16;
    pub const NAME_OFFSET: usize = 24;

    /// The wire name's octets.
    pub fn wire(&self) -> impl Iterator<Item = u8> + '_ {
        let len = (self.len as usize).min(NAME_MAX);
        (0..len).map(|i| (self.name[i / 8] >> ((i % 8) * 8)) as u8)
    }
}

/// `wire` as little-endian words, zero-padded.
pub fn words(wire: &[u8]) -> [u64; WORDS] {
    let mut w = [0u64; WORDS];
    for (i, b) in wire.iter().take(NAME_MAX).enumerate() {
        w[i / 8] |= (*b as u64) << ((i % 8) * 8);
    }
    w
}

/// FxHash's multiplier: odd, with well-spread bits.
const K: u64 = 0x517c_c1b7_2722_0a95;

/// One step of the name hash: mixes in the next 8-byte word.
#[inline(always)]
pub const fn hash_step(h: u64, word: u64) -> u64 {
    (h.rotate_left(5) ^ word).wrapping_mul(K)
}

/// The hash before the first word.
#[inline(always)]
pub const fn hash_seed() -> u64 {
    K
}

/// The final mix: the name's length first (the program learns it only at the
/// last word), so names that differ only in trailing zero octets cannot
/// collide; then MurmurHash3's 64-bit finaliser, so that every bit of every
/// word moves the key.
#[inline(always)]
pub const fn hash_finish(h: u64, len: usize) -> u64 {
    let mut h = hash_step(h, len as u64);
    h ^= h >> 33;
    h = h.wrapping_mul(0xff51_afd7_ed55_8ccd);
    h ^= h >> 33;
    h = h.wrapping_mul(0xc4ce_b9fe_1a85_ec53);
    h ^= h >> 33;
    h
}

/// The key of a name given its lowercased words (as [`words`] makes them).
pub fn hash_words(len: usize, words: &[u64; WORDS]) -> u64 {
    let mut h = hash_seed();
    for w in words.iter().take(len.div_ceil(8)) {
        h = hash_step(h, *w);
    }
    hash_finish(h, len)
}

/// Slot `i` (0-based, below [`PROBES`]) of the probe window of `hash`.
#[inline(always)]
pub const fn slot(hash: u64, i: u32) -> u32 {
    (hash as u32).wrapping_add(i) & (SLOTS - 1)
}

/// The key of a lowercased wire name.
pub fn hash_wire(wire: &[u8]) -> u64 {
    hash_words(wire.len(), &words(wire))
}

/// ASCII letters of the eight octets of `w` lowercased, other octets unchanged
/// (label length octets are ≤ 63, below `A`). SWAR, branch-free.
#[inline(always)]
pub const fn lowercase_word(w: u64) -> u64 {
    const LO7: u64 = 0x7f7f_7f7f_7f7f_7f7f;
    const HI: u64 = 0x8080_8080_8080_8080;
    let b = w & LO7;
    // High bit set where the low 7 bits are ≥ 'A', and where they are > 'Z'.
    let ge_a = b + 0x3f3f_3f3f_3f3f_3f3f; // 0x80 - 'A'
    let gt_z = b + 0x2525_2525_2525_2525; // 0x7f - 'Z'
    let upper = ge_a & !gt_z & !w & HI;
    w | (upper >> 2)
}

const _: () = assert!(size_of::<NameValue>() == 24 + 8 * WORDS);
const _: () = assert!(core::mem::offset_of!(NameValue, id) == NameValue::TARGET_OFFSET);
const _: () = assert!(core::mem::offset_of!(NameValue, route4) == NameValue::TARGET_OFFSET + 4);
const _: () = assert!(core::mem::offset_of!(NameValue, len) == NameValue::LEN_OFFSET);
const _: () = assert!(core::mem::offset_of!(NameValue, name) == NameValue::NAME_OFFSET);
const _: () = assert!(SLOTS.is_power_of_two() && PROBES <= SLOTS);
const _: () = assert!(WORDS == 32);

crate::impl_pod!(NameValue);

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lowercase_word_matches_bytewise() {
        for b in 0..=255u8 {
            let w = u64::from_le_bytes([b, b'A', b'z', b, b'@', b'[', b'Z', b]);
            let want = u64::from_le_bytes([b, b'A', b'z', b, b'@', b'[', b'Z', b].map(|c| c.to_ascii_lowercase()));
            assert_eq!(lowercase_word(w), want, "byte {b:#x}");
        }
    }
}
