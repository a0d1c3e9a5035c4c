//! `lagran_counters`: per-CPU array of `u64` event counts, indexed by [`Counter`].
//! Written by the XDP program; userspace sums the CPUs for `/metrics` and
//! `lagran maps dump`.
//!
//! Every packet the program sees increments exactly one counter: `Answered`,
//! `RrlLimited` or `RrlSlipped`, or the reason it was passed to the kernel stack.

/// Map name as `bpftool` shows it.
pub const MAP_NAME: &str = "lagran_counters";

macro_rules! counters {
    ($( $(#[$doc:meta])* $variant:ident = $name:literal ),* $(,)?) => {
        /// What happened to a packet. The discriminant is the array index.
        #[repr(u32)]
        #[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
        pub enum Counter {
            $( $(#[$doc])* $variant, )*
        }

        impl Counter {
            /// Every counter, in index order.
            pub const ALL: &'static [Counter] = &[$(Counter::$variant),*];

            /// Stable snake_case name, used as the metrics label (`reason="…"`).
            pub const fn name(self) -> &'static str {
                match self {
                    $(Counter::$variant => $name,)*
                }
            }
        }
    };
}

counters! {
    /// Answered from the maps with `XDP_TX`.
    Answered = "answered",
    /// Neither IPv4 nor IPv6 (ARP, stacked VLAN tags, …).
    NotIp = "not_ip",
    /// IPv4 header with options (IHL != 5).
    IpOptions = "ip_options",
    /// IPv4 fragment, or an IPv6 Fragment header.
    Fragment = "fragment",
    /// Not UDP (over IPv6: a next header other than UDP, extension headers included).
    NotUdp = "not_udp",
    /// UDP, but not to an address and port in `lagran_listen`.
    NotListenAddress = "not_listen_address",
    /// The packet ends before a header, the question or the OPT record it announces.
    TooShort = "too_short",
    /// QR=1: a response, not a query.
    IsResponse = "is_response",
    /// OPCODE other than QUERY.
    Opcode = "opcode",
    /// QDCOUNT != 1.
    Qdcount = "qdcount",
    /// ANCOUNT or NSCOUNT != 0, or ARCOUNT > 1, or the additional record is not OPT.
    OtherSections = "other_sections",
    /// A compression pointer or reserved label type in the question name.
    NameCompressed = "name_compressed",
    /// Question name longer than 255 octets.
    NameTooLong = "name_too_long",
    /// Question name not in `lagran_names`.
    NameUnknown = "name_unknown",
    /// QTYPE other than A or AAAA. The program reads a question name up to its
    /// first zero octet, so a name with one inside a label is counted here
    /// (or under a later check) when the octets after it are misread as QTYPE.
    Qtype = "qtype",
    /// QCLASS other than IN.
    Qclass = "qclass",
    /// OPT we do not answer: EDNS version > 0, extended RCODE set, an option other
    /// than ECS, COOKIE and padding, or more than four options.
    OptUnsupported = "opt_unsupported",
    /// Invalid ECS (length, family, prefix, non-zero scope or address bits beyond
    /// the prefix): userspace answers FORMERR.
    EcsBad = "ecs_bad",
    /// No route or an empty answer for this client: userspace falls back.
    NoAnswer = "no_answer",
    /// `lagran_config` says the fast path is off (or was never configured).
    Disabled = "disabled",
    /// Bytes after the DNS message inside the UDP payload.
    TrailingData = "trailing_data",
    /// Lengths that contradict each other (IP total length, UDP length, frame size).
    Malformed = "malformed",
    /// `bpf_xdp_adjust_tail` refused to grow the frame for the answer.
    TailGrowFailed = "tail_grow_failed",
    /// An EDNS option list that overruns the OPT RDATA: userspace answers FORMERR.
    OptMalformed = "opt_malformed",
    /// The IPv4 header checksum does not verify: the stack discards it (RFC 1122).
    IpChecksum = "ip_checksum",
    /// UDP over IPv6 with a zero checksum: the stack discards it (RFC 8200 §8.1).
    UdpZeroChecksum = "udp_zero_checksum",
    /// A COOKIE option the program does not answer: malformed or repeated
    /// (userspace answers FORMERR), a server cookie not 16 octets long, one
    /// that may be valid under the previous secret, an IPv4-mapped source, or
    /// no secret published yet.
    Cookie = "cookie",
    /// Response rate limiting withheld the answer: dropped (`XDP_DROP`).
    RrlLimited = "rrl_limited",
    /// Response rate limiting sent the answer truncated (TC=1), or BADCOOKIE
    /// when the query had a client cookie (`XDP_TX`).
    RrlSlipped = "rrl_slipped",
    /// A query with DO for a signed zone whose answer has no RRSIG in
    /// `lagran_rrsig` (not signed, signed by more than one key, or a record
    /// longer than the map holds).
    RrsigMissing = "rrsig_missing",
    /// A query with DO for a signed zone whose signed answer exceeds the
    /// client's UDP size: userspace answers it truncated (TC=1).
    SignedTooLarge = "signed_too_large",
}

/// Number of counters: the `lagran_counters` array size.
pub const COUNT: u32 = Counter::ALL.len() as u32;

const _: () = assert!(Counter::SignedTooLarge as u32 + 1 == COUNT);
