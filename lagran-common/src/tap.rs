//! Sampled query logs of the fast path (`[dnstap] xdp_sample = "1/N"`): every
//! `N`th answer the XDP program sends is copied, query and response, into a
//! BPF ring buffer that userspace turns into dnstap messages.
//!
//! - `lagran_tap_ring` (ring buffer): one [`TapRecord`] per sampled answer;
//! - `lagran_tap_buf` (per-CPU array, one [`TapBuf`]): the countdown to the
//!   next sample and the record being filled (the query is copied before the
//!   response overwrites it in place);
//! - `lagran_tap_drops` (per-CPU array, one `u64`): sampled answers lost
//!   because the ring was full (userspace sums the CPUs).
//!
//! Whether and how often to sample is `Config::tap_every` (`lagran_config`),
//! read first: with it 0 a packet costs one comparison more.

/// The ring buffer's name as `bpftool` shows it.
pub const RING_MAP_NAME: &str = "lagran_tap_ring";
/// The per-CPU countdown and record being filled.
pub const BUF_MAP_NAME: &str = "lagran_tap_buf";
/// The per-CPU count of records the full ring refused.
pub const DROPS_MAP_NAME: &str = "lagran_tap_drops";
/// The ring's size in bytes: a power of two and a multiple of the page size,
/// room for about 240 records the reader has not taken yet.
pub const RING_BYTES: u32 = 256 * 1024;
/// Most octets of a message a record keeps; longer ones are cut (the lengths
/// say so).
pub const MESSAGE_MAX: usize = 512;

/// One sampled answer: the query as received and the response as sent.
#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct TapRecord {
    /// `bpf_ktime_get_ns` (CLOCK_MONOTONIC) when the query was sampled.
    pub time_ns: u64,
    /// The query's source and destination addresses: 16 octets of an IPv6
    /// address, or 4 of an IPv4 address followed by zeros (network order).
    pub client: [u8; 16],
    pub server: [u8; 16],
    /// The query's source and destination UDP ports (network order).
    pub client_port: [u8; 2],
    pub server_port: [u8; 2],
    /// 1: the addresses are IPv6; 0: IPv4.
    pub v6: u32,
    /// The messages' full lengths (host order); at most [`MESSAGE_MAX`] of
    /// each were copied.
    pub query_len: u16,
    pub response_len: u16,
    pub _pad: u32,
    pub query: [u8; MESSAGE_MAX],
    pub response: [u8; MESSAGE_MAX],
}

const _: () = assert!(size_of::<TapRecord>() == 56 + 2 * MESSAGE_MAX);

impl TapRecord {
    /// The copied octets of the query.
    pub fn query(&self) -> &[u8] {
        &self.query[..(self.query_len as usize).min(MESSAGE_MAX)]
    }

    /// The copied octets of the response.
    pub fn response(&self) -> &[u8] {
        &self.response[..(self.response_len as usize).min(MESSAGE_MAX)]
    }
}

/// This CPU's sampling state: `lagran_tap_buf`'s one value.
#[repr(C)]
#[derive(Clone, Copy)]
pub struct TapBuf {
    /// Answers since the last sample sent (host order).
    pub since: u32,
    /// The frame offset of the sampled query's UDP header, where its response
    /// goes, while the record waits for it; 0: nothing sampled.
    pub pending: u32,
    /// Working room of the program (see `maps::launder` in `lagran-ebpf`).
    pub laundry: u32,
    pub _pad: u32,
    pub record: TapRecord,
}

const _: () = assert!(size_of::<TapBuf>() == 16 + size_of::<TapRecord>());

crate::impl_pod!(TapRecord, TapBuf);
