//! Response rate limiting (RRL) of UDP responses, with the semantics of BIND
//! and Knot: an authoritative server on the public internet is used as a
//! reflector by anyone who spoofs a victim's address, and must not send a
//! flood of responses wherever the queries claim to come from.
//!
//! - Accounts are kept per client prefix — an IPv4 /24, an IPv6 /56 — and per
//!   [`ResponseClass`]: a flood of NXDOMAIN does not use up the answers of the
//!   same network, and vice versa.
//! - Each account holds a credit in thousandths of a response. It starts at
//!   one second's worth (`responses_per_second`), grows by `responses_per_second`
//!   per second up to that, and every response costs one. While the credit is
//!   below zero the response is limited; a flood drives the credit down to
//!   `-window_secs × responses_per_second` at most, so a client is limited
//!   until it has stayed under the rate for up to `window_secs` (BIND's
//!   "window": the rate is averaged over that many seconds).
//! - `slip`: every `slip`-th limited response of an account is sent anyway,
//!   truncated (TC=1, no records), so that a real client behind a spoofed
//!   flood retries over TCP, which cannot be spoofed; a query that carried a
//!   client cookie gets BADCOOKIE with a fresh server cookie instead (RFC 7873
//!   §5.2.3 option 2, as BIND does), so it retries with a valid cookie. The
//!   rest are dropped. `slip = 0` drops every limited response.
//! - Exempt: TCP, DoT and DoQ (the handshake proves the address), and queries
//!   carrying a valid server cookie (RFC 7873 §5.2.5: the client's address is
//!   proven).
//!
//! The XDP program keeps the same accounts (key layout [`account_key`], same
//! arithmetic) per CPU; each path limits the responses it sends itself.
//!
//! Memory is bounded: a fixed table of [`SLOTS`] accounts, found by a keyed
//! hash of the account key; a new key takes over its slot (a spoofer spraying
//! prefixes can at worst reset other accounts to a full credit, never make the
//! table grow). Nothing is allocated per query.

use std::hash::BuildHasher;
use std::net::IpAddr;
use std::sync::Mutex;
use std::sync::atomic::{AtomicU64, Ordering};

use super::answer::wire::{HEADER_LEN, RCODE_BADCOOKIE, TYPE_OPT};
use super::answer::{Outcome, skip_name};
use crate::settings::{InvalidSetting, Key, KeyDefault};

/// Response rate limiting of UDP responses (`[rrl]`), in userspace and in the
/// XDP program alike.
#[derive(Clone, Debug, PartialEq, serde::Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct RrlSettings {
    /// Responses per second per client prefix and response class; 0 = off (RRL_RPS).
    pub responses_per_second: u32,
    /// Every `slip`-th limited response is sent truncated (TC=1); 0 drops all (RRL_SLIP).
    pub slip: u32,
    /// A flood drives an account down to `-window_secs × responses_per_second`,
    /// so the client is limited until its rate has been below the limit for that long.
    pub window_secs: u32,
}

impl Default for RrlSettings {
    fn default() -> Self {
        RrlSettings { responses_per_second: 0, slip: 2, window_secs: 15 }
    }
}

impl RrlSettings {
    /// Checks the rate and the window against what the credit arithmetic holds.
    pub fn validate(&self) -> Result<(), InvalidSetting> {
        if self.responses_per_second > 0 && self.window_secs == 0 {
            return Err(InvalidSetting::new("rrl.window_secs", "must be > 0 when RRL is on"));
        }
        if self.responses_per_second > MAX_RATE {
            return Err(InvalidSetting::new(
                "rrl.responses_per_second",
                format!("{} is above {MAX_RATE}", self.responses_per_second),
            ));
        }
        if self.window_secs > MAX_WINDOW_SECS {
            return Err(InvalidSetting::new(
                "rrl.window_secs",
                format!("{} is above {MAX_WINDOW_SECS}", self.window_secs),
            ));
        }
        Ok(())
    }
}

/// The keys of `[rrl]`.
pub const RRL_KEYS: &[Key] = &[
    Key::toml(
        "rrl.responses_per_second",
        KeyDefault::Toml("0"),
        "100",
        "response rate limiting of UDP responses (BIND/Knot RRL), in userspace and the XDP program alike: \
         responses per second per client /24 (IPv4) or /56 (IPv6) and response class \
         (answer, NXDOMAIN, NODATA, referral, error); 0 is off",
    )
    .env("RRL_RPS"),
    Key::toml(
        "rrl.slip",
        KeyDefault::Toml("2"),
        "3",
        "every Nth limited response goes out anyway, truncated (TC=1, no records) so a real client retries \
         over TCP — BADCOOKIE with a fresh server cookie when the query had a client cookie; \
         0 drops every limited response",
    )
    .env("RRL_SLIP"),
    Key::toml(
        "rrl.window_secs",
        KeyDefault::Toml("15"),
        "30",
        "a flood drives its account down to `-window_secs × rate`: the client stays limited until it has \
         kept under the rate for up to this long",
    ),
];

/// Accounts in the table (about 48 octets each).
pub const SLOTS: usize = 1 << 14;
/// Highest `responses_per_second` accepted (the credit arithmetic stays far inside i64).
pub const MAX_RATE: u32 = 1_000_000;
/// Highest `window_secs` accepted.
pub const MAX_WINDOW_SECS: u32 = 3600;
/// One response, in credit units.
pub const COST: i64 = 1000;

/// What kind of response is limited (BIND's response types): each has its own account.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[repr(u8)]
pub enum ResponseClass {
    /// NOERROR with records in the answer section.
    Answer = 0,
    Nxdomain = 1,
    /// NOERROR, empty answer.
    Nodata = 2,
    /// A delegation. This server has no delegations below its zones, so no
    /// response is in this class today; the class keeps the metric's label set
    /// and the key layout the kernel shares complete.
    Referral = 3,
    /// REFUSED, FORMERR, SERVFAIL, NOTIMP, BADVERS, BADCOOKIE.
    Error = 4,
}

impl ResponseClass {
    pub const ALL: [ResponseClass; 5] = [
        ResponseClass::Answer,
        ResponseClass::Nxdomain,
        ResponseClass::Nodata,
        ResponseClass::Referral,
        ResponseClass::Error,
    ];

    pub fn as_str(self) -> &'static str {
        match self {
            ResponseClass::Answer => "answer",
            ResponseClass::Nxdomain => "nxdomain",
            ResponseClass::Nodata => "nodata",
            ResponseClass::Referral => "referral",
            ResponseClass::Error => "error",
        }
    }

    /// The class of a response; `None` for a packet that gets none.
    pub fn of(outcome: Outcome) -> Option<ResponseClass> {
        Some(match outcome {
            Outcome::Answered | Outcome::Fallback => ResponseClass::Answer,
            Outcome::NoData => ResponseClass::Nodata,
            Outcome::NxDomain => ResponseClass::Nxdomain,
            Outcome::Refused
            | Outcome::FormErr
            | Outcome::BadVers
            | Outcome::NotImp
            | Outcome::ServFail
            | Outcome::BadCookie => ResponseClass::Error,
            Outcome::Dropped => return None,
        })
    }
}

/// What to do with one response.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Decision {
    Send,
    /// Send it truncated (see [`slipped`]).
    Slip,
    Drop,
}

/// The account key, shared with the XDP program: the client prefix in the
/// high bits (IPv4: the /24 in bits 8–31; IPv6: the /56 in bits 8–63), bit 7
/// set for IPv6, the class in bits 0–2. IPv4-mapped IPv6 addresses count as IPv4.
pub fn account_key(client: IpAddr, class: ResponseClass) -> u64 {
    let prefix = match client.to_canonical() {
        IpAddr::V4(a) => u64::from(u32::from(a) & 0xffff_ff00),
        IpAddr::V6(a) => ((u128::from(a) >> 64) as u64 & !0xff) | 0x80,
    };
    prefix | class as u64
}

/// One account.
#[derive(Clone, Copy, Debug, Default)]
struct Slot {
    /// 0 = unused (no real key is 0 with a class other than Answer… so a key
    /// of 0, IPv4 0.0.0.0/24 answers, is also marked by `used`).
    key: u64,
    used: bool,
    /// Credit in thousandths of a response.
    credit: i64,
    /// When the credit was last brought up to date (milliseconds, any monotonic clock).
    at_ms: u64,
    /// Limited responses so far, for `slip`.
    limited: u32,
}

/// The accounts and what they limited. One per responder, shared by its tasks.
pub struct RateLimiter {
    rate: i64,
    floor: i64,
    slip: u32,
    slots: Box<[Mutex<Slot>]>,
    hasher: std::hash::RandomState,
    /// `[class][0 = limited (dropped), 1 = slipped]`.
    counts: [[AtomicU64; 2]; 5],
}

impl RateLimiter {
    /// `None` when `responses_per_second` is 0 (RRL off).
    pub fn new(settings: &RrlSettings) -> Option<RateLimiter> {
        if settings.responses_per_second == 0 {
            return None;
        }
        let rate = i64::from(settings.responses_per_second.min(MAX_RATE));
        Some(RateLimiter {
            rate,
            floor: -i64::from(settings.window_secs.clamp(1, MAX_WINDOW_SECS)) * rate * COST,
            slip: settings.slip,
            slots: (0..SLOTS).map(|_| Mutex::new(Slot::default())).collect(),
            hasher: std::hash::RandomState::new(),
            counts: Default::default(),
        })
    }

    /// Debits one response of `class` to `client`'s account at `now_ms` (a
    /// monotonic clock) and says what to do with it; counts limited ones.
    pub fn decide(&self, client: IpAddr, class: ResponseClass, now_ms: u64) -> Decision {
        let key = account_key(client, class);
        let idx = (self.hasher.hash_one(key) as usize) & (SLOTS - 1);
        let decision = {
            let mut s = match self.slots[idx].lock() {
                Ok(g) => g,
                Err(poisoned) => poisoned.into_inner(),
            };
            step(&mut s, key, now_ms, self.rate, self.floor, self.slip)
        };
        match decision {
            Decision::Send => {}
            Decision::Drop => {
                self.counts[class as usize][0].fetch_add(1, Ordering::Relaxed);
            }
            Decision::Slip => {
                self.counts[class as usize][1].fetch_add(1, Ordering::Relaxed);
            }
        }
        decision
    }

    /// (limited, slipped) of `class` so far.
    pub fn counts(&self, class: ResponseClass) -> (u64, u64) {
        let c = &self.counts[class as usize];
        (c[0].load(Ordering::Relaxed), c[1].load(Ordering::Relaxed))
    }
}

/// The account arithmetic. The XDP program (`lagran-ebpf` `rrl::decide`) keeps
/// the same bucket at nanosecond grain, in units of `lagran_common::rrl::COST`.
fn step(s: &mut Slot, key: u64, now_ms: u64, rate: i64, floor: i64, slip: u32) -> Decision {
    let full = rate * COST;
    if !s.used || s.key != key {
        *s = Slot { key, used: true, credit: full, at_ms: now_ms, limited: 0 };
    } else if now_ms > s.at_ms {
        // `rate` responses per second are `rate` thousandths per millisecond.
        let elapsed = (now_ms - s.at_ms).min(u64::from(MAX_WINDOW_SECS) * 2000) as i64;
        s.credit = (s.credit + elapsed * rate).min(full);
        s.at_ms = now_ms;
    }
    s.credit = (s.credit - COST).max(floor);
    if s.credit >= 0 {
        return Decision::Send;
    }
    s.limited = s.limited.wrapping_add(1);
    if slip > 0 && s.limited.is_multiple_of(slip) { Decision::Slip } else { Decision::Drop }
}

/// The XDP program's limited and slipped answers (class "answer", the only
/// one it sends), as the XDP sync last read them from its counters.
#[derive(Debug, Default)]
pub struct XdpCounts {
    pub limited: AtomicU64,
    pub slipped: AtomicU64,
}

impl XdpCounts {
    /// Per class, as [`render_prometheus`] takes them.
    pub fn by_class(&self) -> [(u64, u64); 5] {
        let mut out = [(0, 0); 5];
        out[ResponseClass::Answer as usize] =
            (self.limited.load(Ordering::Relaxed), self.slipped.load(Ordering::Relaxed));
        out
    }
}

/// The `lagran_config` fields of RRL for the XDP program.
pub fn kernel_knobs(settings: &RrlSettings) -> (u32, u32, i64) {
    let rate = settings.responses_per_second.min(MAX_RATE);
    let floor = -i64::from(settings.window_secs.clamp(1, MAX_WINDOW_SECS))
        * i64::from(rate)
        * COST
        * lagran_common::rrl::UNITS_PER_THOUSANDTH;
    (rate, settings.slip, floor)
}

/// Milliseconds on a monotonic clock (since the first call), for [`RateLimiter::decide`].
pub fn monotonic_ms() -> u64 {
    static START: std::sync::OnceLock<std::time::Instant> = std::sync::OnceLock::new();
    START.get_or_init(std::time::Instant::now).elapsed().as_millis() as u64
}

/// Renders `lagran_rrl_responses_total{path,class,action}` for the paths given
/// as (path, counts per class as (limited, slipped)).
pub fn render_prometheus(out: &mut String, paths: &[(&str, [(u64, u64); 5])]) {
    use std::fmt::Write as _;
    let _ = writeln!(
        out,
        "# HELP lagran_rrl_responses_total Responses withheld by response rate limiting: limited (dropped) or slipped (sent truncated or BADCOOKIE)."
    );
    let _ = writeln!(out, "# TYPE lagran_rrl_responses_total counter");
    for (path, counts) in paths {
        for class in ResponseClass::ALL {
            let (limited, slipped) = counts[class as usize];
            let c = class.as_str();
            let _ = writeln!(
                out,
                "lagran_rrl_responses_total{{path=\"{path}\",class=\"{c}\",action=\"limited\"}} {limited}"
            );
            let _ = writeln!(
                out,
                "lagran_rrl_responses_total{{path=\"{path}\",class=\"{c}\",action=\"slipped\"}} {slipped}"
            );
        }
    }
}

/// The slipped form of an encoded response (ours: one question at most, the
/// OPT record last): the header with no records but the OPT, the question,
/// the OPT. `badcookie`: RCODE BADCOOKIE (23: 7 in the header, 1 in the OPT's
/// extended RCODE) and AA=0 (the OPT then carries the fresh server cookie
/// already); otherwise TC=1 with the RCODE unchanged. `None` if `response`
/// is not what the encoder makes.
pub fn slipped(response: &[u8], badcookie: bool) -> Option<Vec<u8>> {
    if response.len() < HEADER_LEN {
        return None;
    }
    let count = |i: usize| u16::from_be_bytes([response[i], response[i + 1]]) as usize;
    let (qd, an, ns, ar) = (count(4), count(6), count(8), count(10));
    let mut pos = HEADER_LEN;
    for _ in 0..qd {
        pos = skip_name(response, pos).ok()?.0.checked_add(4)?;
    }
    let question_end = pos;
    if question_end > response.len() {
        return None;
    }
    let mut opt = None;
    for _ in 0..an + ns + ar {
        let start = pos;
        let (after_name, _) = skip_name(response, pos).ok()?;
        let fixed = response.get(after_name..after_name + 10)?;
        let rtype = u16::from_be_bytes([fixed[0], fixed[1]]);
        pos = after_name + 10 + u16::from_be_bytes([fixed[8], fixed[9]]) as usize;
        if pos > response.len() {
            return None;
        }
        if rtype == TYPE_OPT {
            opt = Some(start..pos);
        }
    }
    let mut out = Vec::with_capacity(question_end + opt.as_ref().map_or(0, |r| r.len()));
    out.extend_from_slice(&response[..question_end]);
    out[6..10].fill(0);
    out[10..12].copy_from_slice(&u16::from(opt.is_some()).to_be_bytes());
    if badcookie {
        // RFC 7873 §8: BADCOOKIE is an extended RCODE; AA off as for every error.
        out[2] &= !0x04;
        out[3] = (out[3] & 0xf0) | (RCODE_BADCOOKIE & 0x0f) as u8;
    } else {
        // RFC 1035 §4.1.1: TC, so the client retries over TCP.
        out[2] |= 0x02;
    }
    if let Some(r) = opt {
        let at = out.len();
        out.extend_from_slice(&response[r]);
        if badcookie {
            // OPT: root (1), TYPE (2), CLASS (2), then the TTL's extended-RCODE octet.
            out[at + 5] = (RCODE_BADCOOKIE >> 4) as u8;
        }
    }
    Some(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn limiter(rps: u32, slip: u32, window: u32) -> RateLimiter {
        RateLimiter::new(&RrlSettings { responses_per_second: rps, slip, window_secs: window }).unwrap()
    }

    fn ip(s: &str) -> IpAddr {
        s.parse().unwrap()
    }

    #[test]
    fn off_when_the_rate_is_zero() {
        assert!(RateLimiter::new(&RrlSettings::default()).is_none());
    }

    #[test]
    fn a_flood_gets_one_second_of_responses_then_nothing_until_it_stops_for_the_window() {
        let rrl = limiter(10, 0, 2);
        let c = ip("192.0.2.7");
        let sent = |from_ms: u64, n: u64, per_ms: u64| {
            (0..n).filter(|i| rrl.decide(c, ResponseClass::Nxdomain, from_ms + i / per_ms) == Decision::Send).count()
        };
        // 1000 queries in 100 ms: the first second's credit (10), nothing else.
        assert_eq!(sent(0, 1000, 10), 10);
        assert_eq!(rrl.counts(ResponseClass::Nxdomain), (990, 0));
        // Driven down to -window × rate: 2 s of silence only bring it back to 0.
        assert_eq!(sent(2100, 1, 1), 0);
        // After 3 s more of silence the credit is full again (capped at one second).
        assert_eq!(sent(6000, 100, 100), 10);
    }

    #[test]
    fn accounts_are_per_prefix_and_per_class() {
        let rrl = limiter(2, 0, 15);
        let send = |a: &str, class| rrl.decide(ip(a), class, 0) == Decision::Send;
        assert!(send("192.0.2.1", ResponseClass::Answer));
        assert!(send("192.0.2.200", ResponseClass::Answer), "same /24, second response");
        assert!(!send("192.0.2.3", ResponseClass::Answer), "the /24 has used its rate");
        assert!(send("192.0.2.3", ResponseClass::Nxdomain), "another class has its own account");
        assert!(send("192.0.3.3", ResponseClass::Answer), "another /24");
        assert!(send("2001:db8:0:ff::1", ResponseClass::Answer));
        assert!(send("2001:db8:0:1::2", ResponseClass::Answer), "same /56");
        assert!(!send("2001:db8:0:80::3", ResponseClass::Answer));
        assert!(send("2001:db8:0:100::3", ResponseClass::Answer), "another /56");
        assert!(!send("::ffff:192.0.2.9", ResponseClass::Answer), "IPv4-mapped counts as IPv4");
    }

    #[test]
    fn every_slip_th_limited_response_slips() {
        let rrl = limiter(1, 3, 15);
        let c = ip("198.51.100.1");
        let got: Vec<_> = (0..8).map(|_| rrl.decide(c, ResponseClass::Answer, 0)).collect();
        use Decision::*;
        assert_eq!(got, [Send, Drop, Drop, Slip, Drop, Drop, Slip, Drop]);
        assert_eq!(rrl.counts(ResponseClass::Answer), (5, 2));
        let mut text = String::new();
        render_prometheus(&mut text, &[("userspace", ResponseClass::ALL.map(|k| rrl.counts(k)))]);
        assert!(
            text.contains("lagran_rrl_responses_total{path=\"userspace\",class=\"answer\",action=\"slipped\"} 2"),
            "{text}"
        );
        assert!(text.contains("class=\"answer\",action=\"limited\"} 5"), "{text}");
    }

    #[test]
    fn key_layout_is_the_kernels() {
        assert_eq!(account_key(ip("192.0.2.77"), ResponseClass::Nxdomain), 0xc000_0200 | 1);
        assert_eq!(account_key(ip("2001:db8:1:2ff::1"), ResponseClass::Error), 0x2001_0db8_0001_0280 | 4);
    }

    #[test]
    fn slipped_keeps_header_question_and_opt() {
        use hickory_proto::op::{Edns, Message, MessageType, Query};
        use hickory_proto::rr::{Name, RData, Record, RecordType, rdata::A};
        let mut m = Message::new();
        m.set_id(9).set_message_type(MessageType::Response).set_authoritative(true);
        let name = Name::from_ascii("www.example.").unwrap();
        m.add_query(Query::query(name.clone(), RecordType::A));
        m.add_answer(Record::from_rdata(name, 30, RData::A(A::new(192, 0, 2, 1))));
        m.set_edns(Edns::new());
        let bytes = m.to_vec().unwrap();
        let tc = Message::from_vec(&slipped(&bytes, false).unwrap()).unwrap();
        assert!(tc.truncated() && tc.authoritative());
        assert_eq!((tc.id(), tc.queries().len(), tc.answers().len()), (9, 1, 0));
        assert!(tc.extensions().is_some());
        let bad = slipped(&bytes, true).unwrap();
        let b = Message::from_vec(&bad).unwrap();
        assert!(!b.truncated() && !b.authoritative());
        assert_eq!(u16::from(b.response_code()), RCODE_BADCOOKIE);
        assert!(slipped(&bytes[..20], false).is_none());
    }
}
