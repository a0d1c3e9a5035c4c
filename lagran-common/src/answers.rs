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
    /// Canary split (SPEC §4): clients whose subnet bucket
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
