//! `lagran_rrsig`: hash map from (name id, answer id, record type) to the RRSIG
//! record covering that answer's `A` or `AAAA` RRset, ready to follow the
//! records of a signed answer. One entry per name and distinct answer (the
//! signature covers the owner name, the type and the addresses), never per
//! partition. Written by userspace (the map writer) from the route table's
//! signatures; an entry is replaced whole when its signature is made anew.
//!
//! The record as sent (RFC 4034 §3.1): `C0 0C | 00 2E | 00 01 | TTL |
//! RDLENGTH | type covered | algorithm | labels | original TTL | expiration |
//! inception | key tag | signer | signature`. The owner is a pointer to the
//! question name; the signer's name is written whole and lowercase, as the
//! userspace encoder writes it (RFC 4034 §3.1.7: "A sender MUST NOT use DNS
//! name compression on the Signer's Name field"), so the record is the same
//! for every query and the map holds it ready, with its checksum share.

/// Map name as `bpftool` shows it.
pub const MAP_NAME: &str = "lagran_rrsig";
/// Most entries: one per (name, distinct answer, type).
pub const MAX_ENTRIES: u32 = 1 << 16;
/// `BPF_F_NO_PREALLOC`: entries are allocated as written, so a fast path
/// with few signed names does not hold memory for the most it could have.
pub const MAP_FLAGS: u32 = 1;
/// Most octets of a record the program sends: room for a signer's name of
/// up to 66 octets with a 64-octet signature (ECDSA P-256, algorithm 13, and
/// Ed25519, algorithm 15, both sign in 64). A longer record is left to userspace.
pub const RECORD_MAX: usize = 160;
/// Octets of the RDATA fields before the signer's name (RFC 4034 §3.1).
pub const FIXED_RDATA_LEN: usize = 18;
/// Octets before the RDATA: owner pointer, TYPE, CLASS, TTL, RDLENGTH.
pub const HEAD_LEN: usize = 12;
/// RFC 4034 §3: the RRSIG type.
pub const TYPE_RRSIG: u16 = 46;

/// Which RRSIG: the name's id (as in `lagran_names`), the answer id the
/// program answers from (`lagran_answers`), and 1 for the `AAAA` RRset, 0 for `A`.
/// Host order.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub struct RrsigKey {
    pub name_id: u32,
    pub answer_id: u32,
    pub aaaa: u32,
}

const _: () = assert!(size_of::<RrsigKey>() == 12);

/// The RRSIG record of one answer.
#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct RrsigValue {
    /// The record as sent, `len` octets, zero after them.
    pub record: [u8; RECORD_MAX],
    /// Octets of the record.
    pub len: u32,
    /// One's-complement sum of `record` as big-endian 16-bit words, unfolded:
    /// its share of the UDP checksum when it starts at an even offset.
    pub sum: u32,
}

const _: () = assert!(size_of::<RrsigValue>() == RECORD_MAX + 8);
const _: () = assert!(RECORD_MAX.is_multiple_of(8));

impl RrsigValue {
    /// The record for an RRset answered with `ttl` (the RRset's own TTL:
    /// RFC 4034 §3, "The TTL value of an RRSIG RR MUST match the TTL value
    /// of the RRset it covers") and the RRSIG's RDATA, uncompressed; `None`
    /// when it does not fit [`RECORD_MAX`].
    pub fn new(ttl: u32, rdata: &[u8]) -> Option<RrsigValue> {
        let len = HEAD_LEN + rdata.len();
        if len > RECORD_MAX || rdata.len() <= FIXED_RDATA_LEN {
            return None;
        }
        let mut record = [0u8; RECORD_MAX];
        let t = ttl.to_be_bytes();
        let rdlen = (rdata.len() as u16).to_be_bytes();
        let ty = TYPE_RRSIG.to_be_bytes();
        let head = [0xc0, 0x0c, ty[0], ty[1], 0, 1, t[0], t[1], t[2], t[3], rdlen[0], rdlen[1]];
        record[..HEAD_LEN].copy_from_slice(&head);
        record[HEAD_LEN..len].copy_from_slice(rdata);
        let mut sum = 0u32;
        let mut j = 0;
        while j < RECORD_MAX {
            sum += u16::from_be_bytes([record[j], record[j + 1]]) as u32;
            j += 2;
        }
        Some(RrsigValue { record, len: len as u32, sum })
    }

    /// The record's octets.
    pub fn bytes(&self) -> &[u8] {
        &self.record[..(self.len as usize).min(RECORD_MAX)]
    }
}

crate::impl_pod!(RrsigKey, RrsigValue);
