//! `lagran_answers`: array from answer id to the records to send.
//! Written by userspace (the map writer); ids are stable while an answer is
//! unchanged, so a sync rewrites only the answers that changed.

/// Map name as `bpftool` shows it.
pub const MAP_NAME: &str = "lagran_answers";
pub const MAX_ENTRIES: u32 = 1 << 16;
/// Most `A` records in one answer (`answers_per_query` is 1–4).
pub const MAX_ADDRS: usize = 4;

/// An `A` answer, ready to be copied into a response: the records and their
/// checksum share are computed by the map writer, the program only copies them.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub struct AnswerV4 {
    /// The final TTL in seconds (host order): userspace already applied
    /// `max(min(route ttl, DNS_TTL), 5)`.
    pub ttl: u32,
    /// Number of valid entries in `addrs`, 0–4. 0 (also every unwritten slot)
    /// means "no answer here": the program passes the query to userspace, which
    /// answers the fallback address or SERVFAIL.
    pub count: u32,
    /// Canary split: clients whose subnet bucket
    /// (`canary::bucket_v4`) is below this percentage, 1–100, get the answer
    /// `canary_id` instead, and the ECS scope is at least
    /// `canary::SPLIT_PREFIX_V4`. 0: no split.
    pub canary_percent: u32,
    /// Answer id of the canary answer (only read when `canary_percent` > 0; its
    /// own canary fields are not followed).
    pub canary_id: u32,
    /// IPv4 addresses in network order, primary first.
    pub addrs: [[u8; 4]; MAX_ADDRS],
    /// The answer records exactly as sent, `count` of them:
    /// `C0 0C | 00 01 | 00 01 | TTL | 00 04 | address` (RFC 1035 §4.1.3; the owner
    /// is a pointer to the question name at offset 12).
    pub records: [[u8; RR_LEN]; MAX_ADDRS],
    /// One's-complement sum of the `count` records as big-endian 16-bit words,
    /// unfolded (< 2^21): their share of the UDP checksum.
    pub records_sum: u32,
    pub _pad: u32,
}

/// Octets of one `A` record with a compressed owner name.
pub const RR_LEN: usize = 16;

impl AnswerV4 {
    /// The answer for `addrs` (at most `MAX_ADDRS` used) with `ttl`, records and
    /// their checksum share filled in; no canary split.
    pub fn new(ttl: u32, addrs: &[[u8; 4]]) -> AnswerV4 {
        let count = if addrs.len() > MAX_ADDRS { MAX_ADDRS } else { addrs.len() };
        let mut a = AnswerV4 { ttl, count: count as u32, ..AnswerV4::default() };
        let t = ttl.to_be_bytes();
        let mut i = 0;
        while i < count {
            let ad = addrs[i];
            a.addrs[i] = ad;
            a.records[i] = [0xc0, 0x0c, 0, 1, 0, 1, t[0], t[1], t[2], t[3], 0, 4, ad[0], ad[1], ad[2], ad[3]];
            let mut j = 0;
            while j < RR_LEN {
                a.records_sum += u16::from_be_bytes([a.records[i][j], a.records[i][j + 1]]) as u32;
                j += 2;
            }
            i += 1;
        }
        a
    }
}

const _: () = assert!(size_of::<AnswerV4>() == 32 + RR_LEN * MAX_ADDRS + 8);

crate::impl_pod!(AnswerV4);

/// `lagran_answers6`: array from the same answer id to the `AAAA` records of
/// that answer. The map writer writes both arrays at one id, so a trie entry
/// (of either family) names both the `A` and the `AAAA` answer of a block.
pub const MAP_NAME_V6: &str = "lagran_answers6";

/// Octets of one `AAAA` record with a compressed owner name.
pub const RR6_LEN: usize = 28;

/// An `AAAA` answer, ready to be copied into a response (see [`AnswerV4`]).
#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct AnswerV6 {
    /// The final TTL in seconds (host order), as in [`AnswerV4::ttl`].
    pub ttl: u32,
    /// Number of valid records, 0–4. 0: the answer has no IPv6 address, the
    /// program passes the query (userspace answers NODATA).
    pub count: u32,
    /// The canary split, the same as the `AnswerV4` at this id.
    pub canary_percent: u32,
    pub canary_id: u32,
    /// The records exactly as sent, `count` of them:
    /// `C0 0C | 00 1C | 00 01 | TTL | 00 10 | address` (RFC 3596 §2.2).
    pub records: [[u8; RR6_LEN]; MAX_ADDRS],
    /// One's-complement sum of the `count` records as big-endian 16-bit words,
    /// unfolded: their share of the UDP checksum.
    pub records_sum: u32,
    pub _pad: u32,
}

impl Default for AnswerV6 {
    fn default() -> Self {
        AnswerV6 {
            ttl: 0,
            count: 0,
            canary_percent: 0,
            canary_id: 0,
            records: [[0; RR6_LEN]; MAX_ADDRS],
            records_sum: 0,
            _pad: 0,
        }
    }
}

impl AnswerV6 {
    /// The answer for `addrs` (at most `MAX_ADDRS` used) with `ttl`; no canary split.
    pub fn new(ttl: u32, addrs: &[[u8; 16]]) -> AnswerV6 {
        let count = if addrs.len() > MAX_ADDRS { MAX_ADDRS } else { addrs.len() };
        let mut a = AnswerV6 { ttl, count: count as u32, ..AnswerV6::default() };
        let t = ttl.to_be_bytes();
        let mut i = 0;
        while i < count {
            let r = &mut a.records[i];
            r[..12].copy_from_slice(&[0xc0, 0x0c, 0, 28, 0, 1, t[0], t[1], t[2], t[3], 0, 16]);
            r[12..].copy_from_slice(&addrs[i]);
            let mut j = 0;
            while j < RR6_LEN {
                a.records_sum += u16::from_be_bytes([r[j], r[j + 1]]) as u32;
                j += 2;
            }
            i += 1;
        }
        a
    }

    /// The address of record `i`.
    pub fn addr(&self, i: usize) -> [u8; 16] {
        let mut out = [0; 16];
        out.copy_from_slice(&self.records[i][12..]);
        out
    }
}

const _: () = assert!(size_of::<AnswerV6>() == 16 + RR6_LEN * MAX_ADDRS + 8);

crate::impl_pod!(AnswerV6);
