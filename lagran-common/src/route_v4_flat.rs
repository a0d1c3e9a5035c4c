//! `lagran_route4_l1` and `lagran_route4_l2`: the IPv4 route table of a name as
//! flat arrays (DIR-16-8 style), so that a lookup is one or two array reads
//! instead of a walk down `lagran_route_v4`'s LPM trie (one pointer chase, and
//! usually one cache miss, per trie level: at the real table's size that walk
//! is most of the program's time).
//!
//! - `l1` holds `FLAT_NAMES` blocks of 65 536 slots; slot `(s - 1) · 2^16 + a >> 16`
//!   covers the /16 of address `a` for the name whose `NameValue::route4` is `s`
//!   (0: the name has no block here; its routes are looked up in the trie).
//! - `l2` holds `L2_GROUPS` groups of 256 slots; slot `g · 256 + (a >> 8) & 0xff`
//!   covers the /24 of `a` inside a /16 whose `l1` slot points at group `g`.
//!
//! Every slot is one `u32`:
//! - [`NONE`]: no route covers it (the trie holds none either: passed);
//! - [`LEAF`]: one route covers it entirely: its answer id and its exact CIDR
//!   length, so the ECS scope is the route table's, never the slot size;
//! - [`GROUP`] (`l1` only): routes longer than /16 lie in it: look in `l2`;
//! - [`TRIE`] (`l2` only): routes longer than /24 lie in it: look in the trie,
//!   which always holds every route.
//!
//! Both arrays are `BPF_F_MMAPABLE`: the map writer fills them through a shared
//! mapping (millions of slots without a system call each) and writes a group's
//! slots before the `l1` slot that points at it, so a packet racing a sync sees
//! the old route or the new one, never a half-written group.

/// Map names as `bpftool` shows them.
pub const MAP_NAME_L1: &str = "lagran_route4_l1";
pub const MAP_NAME_L2: &str = "lagran_route4_l2";
/// Names that get a block of `l1` (the others use the trie): 4 MiB.
pub const FLAT_NAMES: u32 = 16;
/// Slots of one name's `l1` block.
pub const L1_SLOTS: u32 = 1 << 16;
pub const L1_ENTRIES: u32 = FLAT_NAMES * L1_SLOTS;
/// Groups of 256 `l2` slots, shared by every name: 64 MiB, enough for one
/// name that splits every /16. The real ip2region file with the demo's nodes
/// splits 2 291 /16s for one name; with the bench's fleet of 1 000 nodes at
/// real locations, more than 16 384 (the earlier size, which that name then
/// did not fit). A name that does not fit uses the trie.
pub const L2_GROUPS: u32 = 1 << 16;
pub const L2_SLOTS: u32 = 256;
pub const L2_ENTRIES: u32 = L2_GROUPS * L2_SLOTS;
/// The maps' elements are `u64`s holding two slots each (slot `2k` in the low
/// half, `2k + 1` in the high half): the kernel keeps array elements 8-aligned,
/// so a `u32` element would take 8 bytes. Seen through the mapping, the memory
/// is a plain little-endian `u32` array of slots.
pub const SLOTS_PER_ELEMENT: u32 = 2;
/// `BPF_F_MMAPABLE` (kernel ≥ 5.5).
pub const MAP_FLAGS: u32 = 1 << 10;

/// Slot kinds, in the two top bits.
pub const KIND_MASK: u32 = 0xc000_0000;
pub const NONE: u32 = 0;
pub const LEAF: u32 = 0x4000_0000;
pub const GROUP: u32 = 0x8000_0000;
pub const TRIE: u32 = 0xc000_0000;

/// A leaf: answer id (< 2^16, `answers::MAX_ENTRIES`) and CIDR length (0–32).
#[inline(always)]
pub const fn leaf(answer_id: u32, len: u32) -> u32 {
    LEAF | (len & 0x3f) << 16 | (answer_id & 0xffff)
}

/// A leaf's answer id.
#[inline(always)]
pub const fn leaf_answer(slot: u32) -> u32 {
    slot & 0xffff
}

/// A leaf's CIDR length (the ECS scope).
#[inline(always)]
pub const fn leaf_len(slot: u32) -> u32 {
    (slot >> 16) & 0x3f
}

/// An `l1` slot pointing at `l2` group `g`.
#[inline(always)]
pub const fn group(g: u32) -> u32 {
    GROUP | (g & !KIND_MASK)
}

#[inline(always)]
pub const fn group_index(slot: u32) -> u32 {
    slot & !KIND_MASK
}

const _: () = assert!(crate::answers::MAX_ENTRIES <= 1 << 16);
