//! `lagran_answers`: array from answer id to the records to send.
//! Written by userspace (the map writer); ids are stable while an answer is
//! unchanged, so a sync rewrites only the answers that changed.

/// Map name as `bpftool` shows it.
pub const MAP_NAME: &str = "lagran_answers";
pub const MAX_ENTRIES: u32 = 1 << 16;
/// Most `A` records in one answer (`answers_per_query` is 1–4).
pub const MAX_ADDRS: usize = 4;

/// An `A` answer, ready to be copied into a response.
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
}

const _: () = assert!(core::mem::size_of::<AnswerV4>() == 32);

crate::impl_pod!(AnswerV4);
