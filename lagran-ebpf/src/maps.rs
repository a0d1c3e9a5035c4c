//! Every map of the fast path, and the reads of them that need no more than a
//! key. Types, names and sizes come from `lagran-common`, which userspace
//! shares; the `name = "…"` literals must equal each module's `MAP_NAME` (the
//! userspace loader looks maps up by those constants, so a mismatch fails at
//! load time). The scans of the listen sets (`listen4`, `listen6`) and the
//! flat IPv4 route lookup (`route4`) read the arrays defined here.

use aya_ebpf::{
    btf_maps::{Array, HashMap, LpmTrie, PerCpuArray, RingBuf, lpm_trie::Key},
    macros::btf_map,
};
use lagran_common::{
    answers::{self, AnswerV4, AnswerV6},
    config::{self, Config},
    cookie::{self, CookieConfig},
    counters::{self, Counter},
    listen::{self, ListenKey, ListenV4, ListenV6, ListenValue},
    names::{self, NameValue, WORDS},
    route_v4::{self, RouteV4Data, RouteValue},
    route_v4_flat::{self, L1_ENTRIES, L2_ENTRIES, SLOTS_PER_ELEMENT},
    route_v6::{self, RouteV6Data},
    rrl::{self, Account},
    rrsig::{self, RrsigKey, RrsigValue},
    tap::{self, TapBuf, TapRecord},
};

use crate::{ipv6::Addr6, query::Query};

/// Deployment settings (DNS port, our UDP payload size, on/off).
/// Written by userspace at attach time and when the fast path is switched off/on.
#[btf_map(name = "lagran_config")]
pub static CONFIG: Array<Config, 1> = Array::new();

/// The server cookie secret and clock (see `cookie`). Written by userspace at
/// attach time, on a rotation and every second.
#[btf_map(name = "lagran_cookie")]
pub static COOKIE: Array<CookieConfig, 1> = Array::new();

/// Response rate limiting accounts, per CPU (see `rrl`). Only this program touches them.
#[btf_map(name = "lagran_rrl")]
pub static RRL: PerCpuArray<Account, { rrl::SLOTS as usize }> = PerCpuArray::new();

/// (Address, UDP port) pairs we serve; the unspecified address of a family is a
/// wildcard. Written by the userspace loader at attach time.
#[btf_map(name = "lagran_listen")]
pub static LISTEN: HashMap<ListenKey, ListenValue, { listen::MAX_ENTRIES as usize }> = HashMap::new();

/// The IPv4 listen set, scanned by `listen4`. Written by the userspace loader
/// at attach time.
#[btf_map(name = "lagran_listen4")]
pub static LISTEN4: Array<ListenV4, 1> = Array::new();

/// The IPv6 listen set, scanned by `listen6`. Written by the userspace loader
/// at attach time.
#[btf_map(name = "lagran_listen6")]
pub static LISTEN6: Array<ListenV6, 1> = Array::new();

/// Slots of query names (`lagran_common::names`): placed by the hash of the
/// lowercased wire name, holding the name id, its flat IPv4 block and the exact
/// name (compared before answering: a colliding name is passed, never answered).
/// Written by the userspace map writer on every route-table sync, through a
/// shared mapping.
#[btf_map(name = "lagran_names")]
pub static NAMES: Array<NameValue, { names::SLOTS as usize }, { route_v4_flat::MAP_FLAGS as usize }> = Array::new();

/// `[name id | IPv4 prefix]` -> (answer id, ECS scope); prefixes of one name never nest.
/// Written by the userspace map writer with diffed inserts/deletes, never rebuilt.
#[btf_map(name = "lagran_route_v4")]
pub static ROUTE_V4: LpmTrie<RouteV4Data, RouteValue, { route_v4::MAX_ENTRIES as usize }> = LpmTrie::new();

/// Flat IPv4 routes, level 1 (read by `route4`): `(name block, /16)` -> leaf,
/// group or none. Written by the userspace map writer.
#[btf_map(name = "lagran_route4_l1")]
pub static ROUTE4_L1: Array<u64, { (L1_ENTRIES / SLOTS_PER_ELEMENT) as usize }, { route_v4_flat::MAP_FLAGS as usize }> =
    Array::new();

/// Flat IPv4 routes, level 2 (read by `route4`): `(group, /24)` -> leaf, trie
/// or none. Written by the userspace map writer.
#[btf_map(name = "lagran_route4_l2")]
pub static ROUTE4_L2: Array<u64, { (L2_ENTRIES / SLOTS_PER_ELEMENT) as usize }, { route_v4_flat::MAP_FLAGS as usize }> =
    Array::new();

/// `[name id | IPv6 prefix]` -> (answer id, ECS scope), from the same route table
/// (IPv4-mapped clients are looked up in `ROUTE_V4`). Written like `ROUTE_V4`.
#[btf_map(name = "lagran_route_v6")]
pub static ROUTE_V6: LpmTrie<RouteV6Data, RouteValue, { route_v6::MAX_ENTRIES as usize }> = LpmTrie::new();

/// Answer id -> the `AAAA` records of the answer whose `A` records sit at the same
/// id of `ANSWERS`. Written by the userspace map writer together with `ANSWERS`.
#[btf_map(name = "lagran_answers6")]
pub static ANSWERS6: Array<AnswerV6, { answers::MAX_ENTRIES as usize }> = Array::new();

/// Answer id -> final TTL and up to four addresses.
/// Written by the userspace map writer; ids stay stable while an answer is unchanged.
#[btf_map(name = "lagran_answers")]
pub static ANSWERS: Array<AnswerV4, { answers::MAX_ENTRIES as usize }> = Array::new();

/// `(name id, answer id, A or AAAA)` -> the RRSIG record of that answer, for
/// queries with DO in a signed zone (`NameValue::signed`). Written by the
/// userspace map writer from the route table's signatures, one entry per
/// distinct answer of a name.
#[btf_map(name = "lagran_rrsig")]
pub static RRSIG: HashMap<RrsigKey, RrsigValue, { rrsig::MAX_ENTRIES as usize }, { rrsig::MAP_FLAGS as usize }> =
    HashMap::new();

/// Per-CPU event counts indexed by [`Counter`]. Written here; summed by userspace.
#[btf_map(name = "lagran_counters")]
pub static COUNTERS: PerCpuArray<u64, { counters::COUNT as usize }> = PerCpuArray::new();

/// Sampled answers, query and response, for the query log (see `tap`).
/// Read by userspace when `[dnstap] xdp_sample` is set.
#[btf_map(name = "lagran_tap_ring")]
pub static TAP_RING: RingBuf<TapRecord, { tap::RING_BYTES as usize }> = RingBuf::new();

/// Per-CPU countdown to the next sample and the record being filled (see `tap`).
/// Only this program touches it.
#[btf_map(name = "lagran_tap_buf")]
pub static TAP_BUF: PerCpuArray<TapBuf, 1> = PerCpuArray::new();

/// Per-CPU count of sampled answers the full `TAP_RING` refused. Summed by userspace.
#[btf_map(name = "lagran_tap_drops")]
pub static TAP_DROPS: PerCpuArray<u64, 1> = PerCpuArray::new();

/// Per-CPU working memory of one packet. Only this program touches it.
#[btf_map(name = "lagran_scratch")]
pub static SCRATCH: PerCpuArray<Scratch, 1> = PerCpuArray::new();

/// Per-CPU working memory of one packet. Nothing in it is zeroed: only what the
/// current packet wrote is read.
#[repr(C)]
pub struct Scratch {
    /// The lowercased question name as 8-byte words (the first `ceil(qlen / 8)`
    /// are valid), compared with the `NAMES` value after the hash lookup.
    pub words: [u64; WORDS],
    /// The parsed name length, stored and reloaded so the verifier sees a bounded
    /// range instead of one exact value per loop exit (see `dns::parse_name`).
    pub qlen: u32,
    /// Frame offsets of the question name and of the message's end, for
    /// `dns::unknown_name_reason`.
    pub name_off: u32,
    pub name_end: u32,
    /// The answer's record count (0 when rate limiting slips it) and the slip
    /// itself, stored and reloaded by `response::build` for the same reason.
    pub count: u32,
    /// The query as parsed. It lives here, not on the stack, so that what
    /// `dns::parse` learned (an ECS option or not, a cookie or not, …) reaches
    /// the verifier as unknown values read from a map: the paths through the
    /// option walk then meet again instead of each being verified to the end.
    pub query: Query,
    pub slip: u32,
    /// The response's ECS option and OPT record lengths, and the offset after
    /// its records: each stored and reloaded by `response::build`.
    pub ecs_len: u32,
    pub opt_len: u32,
    pub records_end: u32,
    /// The RRSIG record's length (0 when the answer is unsigned), stored and
    /// reloaded by `response::build`.
    pub sig_len: u32,
    /// The answer's RRSIG record and its checksum share, copied from
    /// `lagran_rrsig` (`main::signed`): `response::build` reads it here, so
    /// signed and unsigned answers reach it with the same registers.
    pub rrsig_sum: u32,
    pub _pad2: u32,
    pub rrsig: [u64; RRSIG_WORDS],
}

/// 8-octet words of the largest RRSIG record the program sends.
pub const RRSIG_WORDS: usize = rrsig::RECORD_MAX / 8;

/// Stores `v` in `slot` and reads it back, volatile: the verifier then holds one
/// unknown value where each path brought its own exact one, so the paths meet at
/// the next instruction instead of each being verified to the end. The caller
/// bounds the result again.
#[inline(always)]
pub fn launder(slot: *mut u32, v: u32) -> u32 {
    // SAFETY: `slot` points into this CPU's `SCRATCH` value.
    unsafe {
        core::ptr::write_volatile(slot, v);
        core::ptr::read_volatile(slot)
    }
}

#[inline(always)]
pub fn count(c: Counter) {
    if let Some(p) = COUNTERS.get_ptr_mut(c as u32) {
        // SAFETY: per-CPU slot of this CPU; XDP programs do not nest on a CPU.
        unsafe { *p += 1 };
    }
}

/// Whether we serve `addr:port` (IPv4, both in network order): the address
/// itself, else the IPv4 wildcard.
#[inline(always)]
#[expect(
    clippy::needless_borrows_for_generic_args,
    reason = "a key passed by value is copied through a zeroed temporary: a memset call in the XDP section"
)]
pub fn listening_v4(addr: [u8; 4], port: [u8; 2]) -> bool {
    let exact = listen_key_v4(u32::from_ne_bytes(addr), port);
    let any = listen_key_v4(0, port);
    LISTEN.get_ptr(&exact).is_some() || LISTEN.get_ptr(&any).is_some()
}

/// `ListenKey::v4` built with four word stores: a struct literal with zero
/// fields makes LLVM zero the key with a `memset` call first.
#[inline(always)]
fn listen_key_v4(addr: u32, port: [u8; 2]) -> ListenKey {
    let mut k = core::mem::MaybeUninit::<ListenKey>::uninit();
    let p = k.as_mut_ptr() as *mut u8;
    // SAFETY: four stores covering the 20 bytes of the key (8 + 4 + 4 + 4).
    unsafe {
        core::ptr::write_unaligned(p as *mut u64, 0);
        core::ptr::write_unaligned(p.add(8) as *mut u32, u32::from_ne_bytes([0, 0, 0xff, 0xff]));
        core::ptr::write_unaligned(p.add(12) as *mut u32, addr);
        core::ptr::write_unaligned(p.add(16) as *mut u32, u32::from_ne_bytes([port[0], port[1], 0, 0]));
        k.assume_init()
    }
}

/// Whether we serve `[addr]:port` (IPv6; the address as loaded from the packet,
/// the port in network order): the address itself, else the IPv6 wildcard `::`.
#[inline(always)]
#[expect(
    clippy::needless_borrows_for_generic_args,
    reason = "a key passed by value is copied through a zeroed temporary: a memset call in the XDP section"
)]
pub fn listening_v6(addr: [u64; 2], port: [u8; 2]) -> bool {
    // 8-aligned room for a key (20 bytes, alignment 1), so the word stores are aligned.
    let mut exact = core::mem::MaybeUninit::<[u64; 3]>::uninit();
    let mut any = core::mem::MaybeUninit::<[u64; 3]>::uninit();
    let (e, a) = (exact.as_mut_ptr() as *mut ListenKey, any.as_mut_ptr() as *mut ListenKey);
    // SAFETY: `fill_listen_key_v6` writes every byte of each key before it is read.
    unsafe {
        fill_listen_key_v6(e, addr, port);
        fill_listen_key_v6(a, [0, 0], port);
        LISTEN.get_ptr(&*e).is_some() || LISTEN.get_ptr(&*a).is_some()
    }
}

/// Writes `ListenKey::v6` in place with volatile word stores: a key returned by
/// value, or zero words LLVM may merge, become a `memset` call.
///
/// # Safety
/// `k` must be 4-aligned and valid for writes of a `ListenKey`.
#[inline(always)]
unsafe fn fill_listen_key_v6(k: *mut ListenKey, addr: [u64; 2], port: [u8; 2]) {
    let p = k as *mut u8;
    // SAFETY: five stores covering the 20 bytes of the key (4 × 4 + 4).
    unsafe {
        core::ptr::write_volatile(p as *mut u32, addr[0] as u32);
        core::ptr::write_volatile(p.add(4) as *mut u32, (addr[0] >> 32) as u32);
        core::ptr::write_volatile(p.add(8) as *mut u32, addr[1] as u32);
        core::ptr::write_volatile(p.add(12) as *mut u32, (addr[1] >> 32) as u32);
        core::ptr::write_volatile(p.add(16) as *mut u32, u32::from_ne_bytes([port[0], port[1], 0, 0]));
    }
}

/// The `NAMES` slot holding `hash` in its probe window, if any: the slots from
/// its home on, until one holds the hash or was never used (`names::EMPTY`).
/// Array reads the verifier inlines; the caller compares the exact name.
#[inline(always)]
pub fn name(hash: u64) -> Option<&'static NameValue> {
    let mut i = 0;
    while i < names::PROBES {
        let v = NAMES.get(names::slot(hash, i))?;
        if v.hash == hash {
            return Some(v);
        }
        if v.hash == names::EMPTY {
            return None;
        }
        i += 1;
    }
    None
}

#[inline(always)]
pub fn config() -> Option<&'static Config> {
    CONFIG.get(config::INDEX)
}

/// This CPU's account slot `i` (see `rrl::slot`).
#[inline(always)]
pub fn rrl_slot(i: u32) -> Option<*mut Account> {
    RRL.get_ptr_mut(i)
}

#[inline(always)]
pub fn cookie_config() -> Option<&'static CookieConfig> {
    COOKIE.get(cookie::INDEX)
}

#[inline(always)]
pub fn route_v4(name_id: u32, addr: [u8; 4]) -> Option<RouteValue> {
    let key = Key::new(route_v4::FULL_PREFIX, RouteV4Data { name_id: name_id.to_be_bytes(), addr });
    ROUTE_V4.get(&key).copied()
}

/// The route of an IPv6 client (not IPv4-mapped) of name `name_id`.
#[inline(always)]
pub fn route_v6(name_id: u32, addr: Addr6) -> Option<RouteValue> {
    // Built with word stores (an array copy into the key may become a `memcpy`)
    // into 8-aligned room: the key type is packed, and verifiers refuse
    // misaligned stack access.
    let mut room = core::mem::MaybeUninit::<[u64; 3]>::uninit();
    let p = room.as_mut_ptr() as *mut u8;
    // SAFETY: four aligned stores covering the 24 bytes of the key (prefix
    // length 4, name id 4, address 16), all big-endian but the prefix length.
    let key = unsafe {
        core::ptr::write(p as *mut u32, route_v6::FULL_PREFIX);
        core::ptr::write(p.add(4) as *mut u32, name_id.to_be());
        core::ptr::write(p.add(8) as *mut u64, addr.hi.to_be());
        core::ptr::write(p.add(16) as *mut u64, addr.lo.to_be());
        &*(p as *const Key<RouteV6Data>)
    };
    ROUTE_V6.get(key).copied()
}

#[inline(always)]
pub fn answer(id: u32) -> Option<&'static AnswerV4> {
    ANSWERS.get(id)
}

#[inline(always)]
pub fn answer6(id: u32) -> Option<&'static AnswerV6> {
    ANSWERS6.get(id)
}

/// The RRSIG record of answer `answer_id` of name `name_id` (`aaaa`: 1 for
/// the `AAAA` RRset).
#[inline(always)]
pub fn rrsig(name_id: u32, answer_id: u32, aaaa: u32) -> Option<&'static RrsigValue> {
    // Word stores into room on the stack: a struct literal may be built with a
    // `memset` first (see `listen_key_v4`).
    let mut room = core::mem::MaybeUninit::<[u32; 3]>::uninit();
    let p = room.as_mut_ptr() as *mut u32;
    // SAFETY: three stores covering the 12 bytes of the key.
    let key = unsafe {
        core::ptr::write_volatile(p, name_id);
        core::ptr::write_volatile(p.add(1), answer_id);
        core::ptr::write_volatile(p.add(2), aaaa);
        &*(p as *const RrsigKey)
    };
    // SAFETY: the value is only read; the map writer replaces an entry whole
    // (a hash map update swaps in a new element), never in place.
    unsafe { RRSIG.get(key) }
}
