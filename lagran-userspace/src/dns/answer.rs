//! The pure answer function: query bytes + route table → response bytes.
//!
//! Shared by the UDP/TCP listeners, `lagran explain` and the XDP parity tests.
//! It never panics, never loops beyond the packet's length and allocates in
//! proportion to the response only.
//!
//! Parsing: the 12-octet header is read by hand (any opcode must be
//! readable to answer NOTIMP), the question name with hickory-proto's
//! `Name::read` (which handles compression and rejects names longer than 255
//! octets); the other records of a query are walked without decoding them
//! (their names are checked by `skip_name`) so that a packet claiming 65 535
//! records costs nothing, and the single OPT record is read from its raw bytes
//! ([`super::ecs`] validates the ECS option hickory would accept too leniently).
//!
//! Encoding: header by hand, the question and every record with hickory-proto's
//! `BinEncoder` (which compresses owner names against the question, so a
//! scheduled `A` record's owner is the pointer `0xC00C`), and the OPT record by
//! hand, always last. See the module documentation of [`super`] for the exact
//! layout the XDP program mirrors.

use std::fmt::Write as _;
use std::net::IpAddr;

use hickory_proto::ProtoError;
use hickory_proto::rr::rdata::{A, AAAA, CNAME, NS, SOA, TXT};
use hickory_proto::rr::{Name, RData, Record};
use hickory_proto::serialize::binary::{BinDecodable, BinDecoder, BinEncodable, BinEncoder};
use serde::Serialize;

use super::cookie::{self, CookieCheck, CookieOut};
use super::ecs::{self, Ecs};
use super::settings::DnsSettings;
use crate::model::{NsHost, Zone};
use crate::route_table::{NameLookup, NodeHost, RouteTable, ScheduledName};

/// Record types and classes this module names.
pub mod wire {
    pub const HEADER_LEN: usize = 12;
    pub const TYPE_A: u16 = 1;
    pub const TYPE_NS: u16 = 2;
    pub const TYPE_CNAME: u16 = 5;
    pub const TYPE_SOA: u16 = 6;
    pub const TYPE_TXT: u16 = 16;
    pub const TYPE_AAAA: u16 = 28;
    pub const TYPE_OPT: u16 = 41;
    pub const TYPE_IXFR: u16 = 251;
    pub const TYPE_AXFR: u16 = 252;
    pub const TYPE_ANY: u16 = 255;
    pub const CLASS_IN: u16 = 1;
    pub const RCODE_NOERROR: u16 = 0;
    pub const RCODE_FORMERR: u16 = 1;
    pub const RCODE_SERVFAIL: u16 = 2;
    pub const RCODE_NXDOMAIN: u16 = 3;
    pub const RCODE_NOTIMP: u16 = 4;
    pub const RCODE_REFUSED: u16 = 5;
    /// Extended RCODE (12 bits: 1 in the OPT TTL's high octet, 0 in the header).
    pub const RCODE_BADVERS: u16 = 16;
    /// Extended RCODE BADCOOKIE (RFC 7873 §8).
    pub const RCODE_BADCOOKIE: u16 = 23;
    /// The largest UDP response without EDNS (RFC 1035 §2.3.4).
    pub const UDP_PLAIN_LIMIT: usize = 512;
    /// TCP messages carry a 2-octet length.
    pub const TCP_LIMIT: usize = 65_535;
    /// EDNS(0) Padding option (RFC 7830 §3).
    pub const OPTION_PADDING: u16 = 12;
    /// RFC 8467 §4.1: "Responders: Block-Length Padding ... 468 octets".
    pub const RESPONSE_PAD_BLOCK: usize = 468;
}
use wire::*;

/// Scheduled answers never carry more than this many addresses (primary + 3 backups).
pub const MAX_ANSWERS: usize = 4;
/// The smallest question: the root name (one octet), QTYPE and QCLASS.
const MIN_QUESTION_LEN: usize = 5;
/// Longest chain of compression pointers accepted in a name (a name has at most 127 labels).
const MAX_POINTER_HOPS: usize = 127;

/// How the query arrived.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Transport {
    Udp,
    Tcp,
    /// DNS over TLS (RFC 7858): TCP framing inside TLS.
    Dot,
    /// DNS over QUIC (RFC 9250): one query per stream, 2-octet length prefix.
    Doq,
}

impl Transport {
    /// Encrypted transports pad their responses (RFC 8467).
    pub fn is_encrypted(self) -> bool {
        matches!(self, Transport::Dot | Transport::Doq)
    }
}

/// One query as received.
#[derive(Clone, Copy, Debug)]
pub struct Query<'a> {
    /// The DNS message (for TCP: without the 2-octet length).
    pub bytes: &'a [u8],
    /// The packet's source address (the resolver).
    pub source: IpAddr,
    pub transport: Transport,
}

/// What to send back and what happened.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Reply {
    /// The response message; `None` = drop silently.
    pub bytes: Option<Vec<u8>>,
    pub outcome: Outcome,
    /// Who asked what (`None` when the question could not be read).
    pub client: Option<ClientInfo>,
    /// The UDP response did not fit the client's size and was sent with TC=1.
    pub truncated: bool,
    /// A scheduled answer was served from a route table older than
    /// `stale_secs` because no fallback address is configured.
    pub stale: bool,
    /// The question was `A`/`AAAA` for a scheduled name (answered, fallback,
    /// NODATA or SERVFAIL): the listener logs these.
    pub scheduled: bool,
    /// Why no response was sent (`Some` exactly when `outcome` is [`Outcome::Dropped`]).
    pub dropped: Option<DropReason>,
    /// The COOKIE of the response, when the query had one and cookies were checked.
    pub cookie: Option<CookieOut>,
}

impl Reply {
    fn dropped(reason: DropReason) -> Reply {
        Reply {
            bytes: None,
            outcome: Outcome::Dropped,
            client: None,
            truncated: false,
            stale: false,
            scheduled: false,
            dropped: Some(reason),
            cookie: None,
        }
    }
}

/// Why a packet got no response at all. A response to junk would make this
/// server a reflector for anyone who spoofs a victim's address, so only a
/// packet whose header and question parse is answered, if only with FORMERR.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum DropReason {
    /// Shorter than a header and the smallest question (17 octets).
    Short,
    /// QR=1: a response, not a query.
    Response,
    /// QDCOUNT=0: nothing to echo, nothing to answer.
    NoQuestion,
    /// The first question does not parse (truncated, bad label, pointer forward).
    BadQuestion,
    /// The response could not be encoded (a broken zone configuration).
    Unencodable,
}

impl DropReason {
    pub const ALL: [DropReason; 5] = [
        DropReason::Short,
        DropReason::Response,
        DropReason::NoQuestion,
        DropReason::BadQuestion,
        DropReason::Unencodable,
    ];

    pub fn as_str(self) -> &'static str {
        match self {
            DropReason::Short => "short",
            DropReason::Response => "response",
            DropReason::NoQuestion => "no_question",
            DropReason::BadQuestion => "bad_question",
            DropReason::Unencodable => "unencodable",
        }
    }
}

/// The client as the responder saw it.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct ClientInfo {
    /// The packet's source address.
    pub address: IpAddr,
    /// The ECS option: (address zero-padded, SOURCE PREFIX-LENGTH, SCOPE PREFIX-LENGTH answered).
    pub ecs: Option<(IpAddr, u8, u8)>,
    /// The query name, lowercase, no trailing dot (odd octets escaped as `\DDD`).
    pub name: String,
    /// The primary node answered, for scheduled answers.
    pub node: Option<String>,
}

/// What became of a query, for counters and logs.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Outcome {
    /// NOERROR with records in the answer section.
    Answered,
    /// NOERROR, empty answer, SOA in authority (none for a cookie-only query,
    /// RFC 7873 §5.4).
    NoData,
    NxDomain,
    Refused,
    FormErr,
    BadVers,
    /// Opcode other than QUERY.
    NotImp,
    ServFail,
    /// BADCOOKIE to a cookie-only query whose server cookie is invalid (RFC 7873 §5.4).
    BadCookie,
    /// NOERROR answered with DNS_FALLBACK_IP (or NODATA for AAAA while stale).
    Fallback,
    /// No response sent.
    Dropped,
}

impl Outcome {
    pub const ALL: [Outcome; 11] = [
        Outcome::Answered,
        Outcome::NoData,
        Outcome::NxDomain,
        Outcome::Refused,
        Outcome::FormErr,
        Outcome::BadVers,
        Outcome::NotImp,
        Outcome::ServFail,
        Outcome::BadCookie,
        Outcome::Fallback,
        Outcome::Dropped,
    ];

    pub fn as_str(self) -> &'static str {
        match self {
            Outcome::Answered => "answered",
            Outcome::NoData => "nodata",
            Outcome::NxDomain => "nxdomain",
            Outcome::Refused => "refused",
            Outcome::FormErr => "formerr",
            Outcome::BadVers => "badvers",
            Outcome::NotImp => "notimp",
            Outcome::BadCookie => "badcookie",
            Outcome::ServFail => "servfail",
            Outcome::Fallback => "fallback",
            Outcome::Dropped => "dropped",
        }
    }

    /// The response code sent (`"none"` for dropped packets).
    pub fn rcode_name(self) -> &'static str {
        match self {
            Outcome::Answered | Outcome::NoData | Outcome::Fallback => "NOERROR",
            Outcome::NxDomain => "NXDOMAIN",
            Outcome::Refused => "REFUSED",
            Outcome::FormErr => "FORMERR",
            Outcome::BadVers => "BADVERS",
            Outcome::NotImp => "NOTIMP",
            Outcome::ServFail => "SERVFAIL",
            Outcome::BadCookie => "BADCOOKIE",
            Outcome::Dropped => "none",
        }
    }
}

impl std::fmt::Display for Outcome {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// The effective TTL of a scheduled answer ([`DnsSettings::served_ttl`]).
pub fn scheduled_ttl(route_ttl: u32, settings: &DnsSettings) -> u32 {
    settings.served_ttl(route_ttl)
}

/// Whether the table is stale under `settings.stale_secs`
/// ([`crate::confirmation::is_stale`], the one staleness policy).
pub fn is_stale(confirmed_at_ms: i64, settings: &DnsSettings, now_ms: i64) -> bool {
    crate::confirmation::is_stale(confirmed_at_ms, settings.stale_secs, now_ms)
}

/// The question as read from the query.
#[derive(Clone, Debug)]
struct Question {
    /// As received (case preserved).
    name: Name,
    qtype: u16,
    qclass: u16,
}

/// The query's OPT record (RFC 6891 §6.1.2).
#[derive(Clone, Copy, Debug)]
struct OptIn<'a> {
    /// CLASS: the requestor's UDP payload size.
    payload: u16,
    version: u8,
    dnssec_ok: bool,
    rdata: &'a [u8],
}

/// The OPT record of the response.
#[derive(Clone, Copy, Debug)]
struct OptOut {
    dnssec_ok: bool,
    /// The query's ECS option, echoed with the scope decided by the answer.
    ecs: Option<Ecs>,
    /// The COOKIE option data of the response (client cookie | server cookie).
    cookie: Option<CookieOut>,
}

/// Everything of the query header the response copies.
#[derive(Clone, Copy, Debug)]
struct Ctx {
    id: u16,
    opcode: u8,
    rd: bool,
    cd: bool,
    /// The largest response the client accepts.
    limit: usize,
    /// SOURCE PREFIX-LENGTH is echoed, our OPT advertises this.
    max_udp_payload: u16,
    /// Pad the OPT record to a multiple of this many octets (encrypted transports).
    pad_block: Option<usize>,
}

/// A response under construction.
struct Resp<'q> {
    rcode: u16,
    aa: bool,
    question: Option<&'q Question>,
    answer: Vec<Record>,
    authority: Vec<Record>,
    additional: Vec<Record>,
    opt: Option<OptOut>,
    /// ECS SCOPE PREFIX-LENGTH to echo (only for scheduled answers).
    scope: u8,
    outcome: Outcome,
    stale: bool,
    scheduled: bool,
    node: Option<String>,
}

impl<'q> Resp<'q> {
    fn new(question: Option<&'q Question>, opt: Option<OptOut>, rcode: u16, aa: bool, outcome: Outcome) -> Self {
        Resp {
            rcode,
            aa,
            question,
            answer: Vec::new(),
            authority: Vec::new(),
            additional: Vec::new(),
            opt,
            scope: 0,
            outcome,
            stale: false,
            scheduled: false,
            node: None,
        }
    }

    /// Turns this into an error response: no records, AA=0.
    fn error(mut self, rcode: u16, outcome: Outcome) -> Self {
        self.rcode = rcode;
        self.aa = false;
        self.outcome = outcome;
        self.answer.clear();
        self.authority.clear();
        self.additional.clear();
        self.scope = 0;
        self
    }
}

/// Answers one query from a table the control plane confirms right now (what
/// `lagran explain`, the parity tests and the simulator want); the responder
/// uses [`answer_confirmed`].
pub fn answer(q: &Query, table: &RouteTable, settings: &DnsSettings, now_ms: i64) -> Reply {
    answer_confirmed(q, table, settings, now_ms, now_ms)
}

/// Answers one query. See the module documentation of [`super`] for the rules.
/// `confirmed_at_ms` is when the control plane last confirmed `table`, on the
/// same clock as `now_ms` ([`crate::confirmation::Confirmation`]).
pub fn answer_confirmed(
    q: &Query,
    table: &RouteTable,
    settings: &DnsSettings,
    now_ms: i64,
    confirmed_at_ms: i64,
) -> Reply {
    answer_with_cookies(q, table, settings, now_ms, confirmed_at_ms, None)
}

/// [`answer_confirmed`] with server cookies (RFC 7873, see [`super::cookie`]):
/// with `cookies`, a query's COOKIE option is checked and the response
/// carries our server cookie; without, COOKIE options are ignored (RFC 7873
/// §5.2.1 for a server that does not implement them).
pub fn answer_with_cookies(
    q: &Query,
    table: &RouteTable,
    settings: &DnsSettings,
    now_ms: i64,
    confirmed_at_ms: i64,
    cookies: Option<&CookieCheck>,
) -> Reply {
    let buf = q.bytes;
    // RFC 1035 §4.1.1: the header is 12 octets, and the smallest question (the
    // root name, QTYPE, QCLASS) 5 more. FORMERR is only for packets whose header
    // and question parse: answering junk would reflect it at a spoofed victim.
    if buf.len() < HEADER_LEN + MIN_QUESTION_LEN {
        return Reply::dropped(DropReason::Short);
    }
    // RFC 1035 §4.1.1: "QR  A one bit field that specifies whether this message
    // is a query (0), or a response (1)." Responses are never answered (that
    // would let two servers bounce packets forever).
    if buf[2] & 0x80 != 0 {
        return Reply::dropped(DropReason::Response);
    }
    let be16 = |i: usize| u16::from_be_bytes([buf[i], buf[i + 1]]);
    let mut ctx = Ctx {
        id: be16(0),
        opcode: (buf[2] >> 3) & 0x0f,
        rd: buf[2] & 0x01 != 0,
        cd: buf[3] & 0x10 != 0,
        limit: match q.transport {
            Transport::Udp => UDP_PLAIN_LIMIT,
            Transport::Tcp | Transport::Dot | Transport::Doq => TCP_LIMIT,
        },
        max_udp_payload: settings.max_udp_payload,
        // RFC 7830 §4: "Responders MUST pad DNS responses when the respective DNS
        // query included the 'Padding' option [...]. Responders MAY pad DNS
        // responses when the respective DNS query indicated EDNS(0) support of
        // the Requestor but did not include the 'Padding' option." We pad every
        // response with an OPT, and only on encrypted transports (§6: padding
        // clear text gains nothing).
        pad_block: q.transport.is_encrypted().then_some(RESPONSE_PAD_BLOCK),
    };
    let (qdcount, ancount, nscount, arcount) = (be16(4), be16(6), be16(8), be16(10));
    if qdcount == 0 {
        return cookie_only(&ctx, buf, (ancount, nscount, arcount), q.source, cookies);
    }

    // The question section.
    let mut pos = HEADER_LEN;
    let mut question = None;
    for i in 0..qdcount {
        let read = if i == 0 {
            read_question(buf, pos).map(|(qq, end)| {
                question = Some(qq);
                end
            })
        } else {
            skip_name(buf, pos).ok().and_then(|(end, _)| (buf.len() - end >= 4).then_some(end + 4))
        };
        match read {
            Some(end) => pos = end,
            // An unreadable first question: junk, dropped (see above).
            None if i == 0 => return Reply::dropped(DropReason::BadQuestion),
            // RFC 1035 §4.1.1: "Format error - The name server was unable to interpret the query."
            None => return finish(&ctx, Resp::new(None, None, RCODE_FORMERR, false, Outcome::FormErr), None),
        }
    }
    let echo = if qdcount == 1 { question.as_ref() } else { None };

    // Answer, authority and additional sections: only the OPT record matters.
    let opt_in = match read_records(buf, pos, ancount, nscount, arcount) {
        Ok(o) => o,
        // RFC 6891 §6.1.1: "If a query message with more than one OPT RR is
        // received, a FORMERR (RCODE=1) MUST be returned."
        Err(()) => {
            let client = echo.map(|qq| client_info(q.source, &qq.name, None));
            return finish(&ctx, Resp::new(echo, None, RCODE_FORMERR, false, Outcome::FormErr), client);
        }
    };

    let mut opt_out = None;
    let mut ecs = None;
    if let Some(o) = opt_in {
        // RFC 6891 §7: "If an OPT record is present in a received request,
        // compliant responders MUST include an OPT record in their respective
        // responses."
        opt_out = Some(OptOut { dnssec_ok: o.dnssec_ok, ecs: None, cookie: None });
        if q.transport == Transport::Udp {
            // RFC 6891 §6.2.3: "Values lower than 512 MUST be treated as equal to 512."
            // RFC 6891 §6.2.5: the responder may send up to the smaller of the
            // requestor's size and its own.
            ctx.limit = (o.payload.min(settings.max_udp_payload) as usize).max(UDP_PLAIN_LIMIT);
        }
        // RFC 6891 §6.1.3: "If a responder does not implement the VERSION level
        // of the request, then it MUST respond with RCODE=BADVERS."
        if o.version > 0 {
            let client = echo.map(|qq| client_info(q.source, &qq.name, None));
            return finish(&ctx, Resp::new(echo, opt_out, RCODE_BADVERS, false, Outcome::BadVers), client);
        }
        match ecs::find_in_opt(o.rdata) {
            Ok(e) => ecs = e,
            // RFC 7871 §7.2.1: "A query with a wrongly formatted option (e.g., an
            // unknown FAMILY) MUST be rejected and a FORMERR response MUST be
            // returned to the sender". The response's OPT carries no ECS.
            Err(_) => {
                let client = echo.map(|qq| client_info(q.source, &qq.name, None));
                return finish(&ctx, Resp::new(echo, opt_out, RCODE_FORMERR, false, Outcome::FormErr), client);
            }
        }
        // RFC 7873 §5.2.2: "If the COOKIE option is too short to contain a
        // Server Cookie field or is too long [...], then the request is
        // malformed" (FORMERR, no cookie in the response).
        let cookie = match cookies {
            Some(check) => match cookie::find_in_opt(o.rdata) {
                Ok(c) => c.map(|c| check.respond(&c, q.source)),
                Err(_) => {
                    let client = echo.map(|qq| client_info(q.source, &qq.name, None));
                    return finish(&ctx, Resp::new(echo, opt_out, RCODE_FORMERR, false, Outcome::FormErr), client);
                }
            },
            None => None,
        };
        // RFC 7871 §7.2.2: "If the client query did include the option, the
        // server MUST include one in its response". Scope 0 unless the answer
        // was tailored to the client (set below). RFC 7873 §5.2.3: the
        // response carries "a COOKIE option containing both the Client Cookie
        // copied from the request and a Server Cookie it has generated".
        opt_out = Some(OptOut { dnssec_ok: o.dnssec_ok, ecs, cookie });
    }

    let client = echo.map(|qq| client_info(q.source, &qq.name, ecs));
    // RFC 1035 §4.1.1: "Not Implemented - The name server does not support
    // the requested kind of query."
    if ctx.opcode != 0 {
        return finish(&ctx, Resp::new(echo, opt_out, RCODE_NOTIMP, false, Outcome::NotImp), client);
    }
    let (Some(question), Some(mut client)) = (echo, client) else {
        // QDCOUNT 0 or more than 1: this server answers exactly one question.
        return finish(&ctx, Resp::new(None, opt_out, RCODE_FORMERR, false, Outcome::FormErr), None);
    };

    let resp = resolve(q, question, ecs, opt_out, &mut client, table, settings, (now_ms, confirmed_at_ms));
    finish(&ctx, resp, Some(client))
}

/// A message without a question. RFC 7873 §5.4: "the QUERY opcode behavior is
/// extended to support queries with an empty Question Section (a QDCOUNT of
/// zero (0)), provided that an OPT record is present with a COOKIE option. Such
/// servers will send a reply that has an empty Answer Section and has a COOKIE
/// option containing the Client Cookie and a valid Server Cookie." Its RCODE:
/// NOERROR for "just a Client Cookie and no Server Cookie", else "BADCOOKIE if
/// the Server Cookie sent with the query was invalid and the RCODE NOERROR if it
/// was valid".
///
/// Anything else without a question (no COOKIE, a malformed one, no OPT, another
/// opcode, server cookies off) is dropped as junk, as the top of
/// [`answer_with_cookies`] explains.
fn cookie_only(
    ctx: &Ctx,
    buf: &[u8],
    (an, ns, ar): (u16, u16, u16),
    source: IpAddr,
    cookies: Option<&CookieCheck>,
) -> Reply {
    let junk = Reply::dropped(DropReason::NoQuestion);
    let (Some(check), 0) = (cookies, ctx.opcode) else { return junk };
    let Ok(Some(o)) = read_records(buf, HEADER_LEN, an, ns, ar) else { return junk };
    if o.version > 0 {
        return junk;
    }
    let Ok(Some(c)) = cookie::find_in_opt(o.rdata) else { return junk };
    let out = check.respond(&c, source);
    let rcode = if c.server.is_empty() || out.valid { RCODE_NOERROR } else { RCODE_BADCOOKIE };
    let opt = OptOut { dnssec_ok: o.dnssec_ok, ecs: None, cookie: Some(out) };
    // Counted with the empty NOERROR answers (and limited in their RRL class).
    let outcome = if rcode == RCODE_NOERROR { Outcome::NoData } else { Outcome::BadCookie };
    finish(ctx, Resp::new(None, Some(opt), rcode, false, outcome), None)
}

fn client_info(source: IpAddr, name: &Name, ecs: Option<Ecs>) -> ClientInfo {
    ClientInfo { address: source, ecs: ecs.map(|e| (e.address(), e.source(), 0)), name: lookup_key(name), node: None }
}

/// Decides the response to a well-formed QUERY with one question.
#[expect(
    clippy::too_many_arguments,
    reason = "the per-query parts are borrowed separately; bundling them would build a struct per query"
)]
fn resolve<'q>(
    q: &Query,
    question: &'q Question,
    ecs: Option<Ecs>,
    opt: Option<OptOut>,
    client: &mut ClientInfo,
    table: &RouteTable,
    settings: &DnsSettings,
    // (now, when the control plane last confirmed the table), one clock.
    (now_ms, confirmed_at_ms): (i64, i64),
) -> Resp<'q> {
    let mut r = Resp::new(Some(question), opt, RCODE_NOERROR, true, Outcome::Answered);
    // RFC 1035 §4.1.1: "Refused - The name server refuses to perform the
    // specified operation for policy reasons." We serve class IN only, and
    // refuse ANY (seed 000) and zone transfers.
    if question.qclass != CLASS_IN || matches!(question.qtype, TYPE_ANY | TYPE_AXFR | TYPE_IXFR) {
        return r.error(RCODE_REFUSED, Outcome::Refused);
    }
    let qtype = question.qtype;
    match table.lookup(&client.name) {
        NameLookup::OutOfZone => {
            if table.version == 0 && table.zones.is_empty() {
                // No table at all: we do not even know our zones (SPEC §7:
                // SERVFAIL only when there is no table, no cache and no fallback).
                no_table(r, qtype, settings)
            } else {
                r.error(RCODE_REFUSED, Outcome::Refused)
            }
        }
        NameLookup::Scheduled { zone, name } => {
            let apex = name.name == zone.name;
            // Seed 004 §4.5: a name with ECS off is answered for the resolver's
            // address, and the ECS option — supported but not used — is echoed
            // with SCOPE 0 (RFC 7871, quoted in `scheduled`): no ECS is passed.
            let used = if name.ecs { ecs } else { None };
            let source = q.source;
            let times = (now_ms, confirmed_at_ms);
            match qtype {
                TYPE_A | TYPE_AAAA => {
                    r.scheduled = true;
                    scheduled(r, question, zone, name, source, used, table, settings, times)
                }
                TYPE_SOA if apex => soa_answer(r, question, zone),
                TYPE_NS if apex => ns_answer(r, question, zone),
                // RFC 1034 §4.3.2 step 3a: "If the data at the node is a CNAME, and
                // QTYPE doesn't match CNAME, copy the CNAME RR into the answer section"
                // — whatever the QTYPE, so a name in CNAME mode answers its CNAME
                // (for this client) to every type; `scheduled` decides the rest.
                _ if table.version != 0
                    && client_answer(name, source, used).is_some_and(|(a, _)| a.hostname.is_some()) =>
                {
                    scheduled(r, question, zone, name, source, used, table, settings, times)
                }
                _ => nodata(r, question, zone),
            }
        }
        NameLookup::NsHost { zone, host } => glue_answer(r, question, zone, host),
        NameLookup::NodeHost { zone, host } => {
            let mut r = node_host_records(r, &question.name, host, qtype, settings);
            if r.answer.is_empty() {
                r = nodata(r, question, zone);
            }
            r
        }
        NameLookup::Whoami { zone } => {
            if qtype != TYPE_TXT {
                return nodata(r, question, zone);
            }
            let ecs_text = match ecs {
                Some(e) => format!("{}/{}", e.address(), e.source()),
                None => "none".to_string(),
            };
            let text = format!("client={} ecs={}", q.source, ecs_text);
            r.answer.push(Record::from_rdata(question.name.clone(), 0, RData::TXT(TXT::new(vec![text]))));
            r
        }
        NameLookup::Version { zone } => {
            if qtype != TYPE_TXT {
                return nodata(r, question, zone);
            }
            // `confirmed_ms_ago` is -1 when the table was never confirmed.
            let confirmed_ms_ago =
                if confirmed_at_ms == 0 { -1 } else { now_ms.saturating_sub(confirmed_at_ms).max(0) };
            let text = format!(
                "version={} generated_at={} age_ms={} confirmed_ms_ago={}",
                table.version,
                table.generated_at_ms,
                now_ms.saturating_sub(table.generated_at_ms),
                confirmed_ms_ago
            );
            r.answer.push(Record::from_rdata(question.name.clone(), 0, RData::TXT(TXT::new(vec![text]))));
            r
        }
        NameLookup::Missing { zone } => {
            if client.name == zone.name {
                // The apex exists even when it is not a scheduled name.
                match qtype {
                    TYPE_SOA => soa_answer(r, question, zone),
                    TYPE_NS => ns_answer(r, question, zone),
                    _ => nodata(r, question, zone),
                }
            } else if is_empty_non_terminal(table, zone, &client.name) {
                // RFC 8020 §2: an empty non-terminal exists: NOERROR, not NXDOMAIN.
                nodata(r, question, zone)
            } else {
                nxdomain(r, question, zone)
            }
        }
    }
    .with_node_into(client)
}

impl Resp<'_> {
    fn with_node_into(self, client: &mut ClientInfo) -> Self {
        client.node = self.node.clone();
        if let Some(e) = client.ecs.as_mut() {
            e.2 = self.scope;
        }
        self
    }
}

/// `A`/`AAAA` for a scheduled name.
#[expect(
    clippy::too_many_arguments,
    reason = "the per-query parts are borrowed separately; bundling them would build a struct per query"
)]
fn scheduled<'q>(
    mut r: Resp<'q>,
    question: &'q Question,
    zone: &Zone,
    name: &ScheduledName,
    // The packet's source (the resolver).
    source: IpAddr,
    ecs: Option<Ecs>,
    table: &RouteTable,
    settings: &DnsSettings,
    // (now, when the control plane last confirmed the table), one clock.
    (now_ms, confirmed_at_ms): (i64, i64),
) -> Resp<'q> {
    let v4 = question.qtype == TYPE_A;
    if table.version == 0 {
        // A table without a version is no table: nothing was computed yet.
        return no_table(r, question.qtype, settings);
    }
    let Some((ans, matched)) = client_answer(name, source, ecs) else {
        // A table that does not cover this client is treated like no table.
        return no_table(r, question.qtype, settings);
    };
    // RFC 7871 §12.1: "If the option is supported but not actually used for
    // generating a response, its SCOPE PREFIX-LENGTH MUST be set to 0." A
    // SOURCE PREFIX-LENGTH of 0 means the packet's source address was used.
    let scope = if ecs.is_some_and(|e| e.source() > 0) { matched } else { 0 };
    let ttl = scheduled_ttl(ans.ttl, settings);
    let stale = is_stale(confirmed_at_ms, settings, now_ms);
    if stale && let Some(fallback) = settings.fallback_ip {
        // SPEC §7: answers older than DNS_STALE_SECS are replaced by
        // DNS_FALLBACK_IP; it is the same for every client, so scope 0.
        r.outcome = Outcome::Fallback;
        if v4 {
            r.answer.push(Record::from_rdata(question.name.clone(), ttl, RData::A(A(fallback))));
            return r;
        }
        // No IPv6 fallback: NODATA steers clients to the A fallback.
        return negative(r, question, zone);
    }
    if let Some(host) = ans.hostname.as_deref() {
        let mut r = cname_answer(r, question, host, ttl, table, settings);
        r.scope = scope;
        r.stale = stale;
        r.node = ans.node.clone();
        return r;
    }
    if v4 {
        if ans.ipv4.is_empty() {
            // No eligible node for this partition.
            return match settings.fallback_ip {
                Some(fallback) => {
                    r.outcome = Outcome::Fallback;
                    r.scope = scope;
                    r.answer.push(Record::from_rdata(question.name.clone(), ttl, RData::A(A(fallback))));
                    r
                }
                None => r.error(RCODE_SERVFAIL, Outcome::ServFail),
            };
        }
        for a in ans.ipv4.iter().take(MAX_ANSWERS) {
            r.answer.push(Record::from_rdata(question.name.clone(), ttl, RData::A(A(*a))));
        }
    } else {
        if ans.ipv6.is_empty() {
            // No node with IPv6 for this partition: NODATA, tailored like the
            // answer would be (another partition may well have AAAA).
            let mut r = negative(r, question, zone);
            r.outcome = Outcome::NoData;
            r.scope = scope;
            r.stale = stale;
            return r;
        }
        for a in ans.ipv6.iter().take(MAX_ANSWERS) {
            r.answer.push(Record::from_rdata(question.name.clone(), ttl, RData::AAAA(AAAA(*a))));
        }
    }
    r.scope = scope;
    r.stale = stale;
    r.node = ans.node.clone();
    r
}

/// A name in CNAME mode (seed 004 §4.3): `CNAME <hostname of the chosen
/// node>`, then the hostname's own records when this server is authoritative
/// for it. A node without a hostname never gets here: the builder leaves its
/// answer in address mode, so a partition whose best node has no hostname
/// still reaches that node (its addresses are the one thing the chosen node
/// can be reached by) rather than losing its answer to a configuration gap.
fn cname_answer<'q>(
    mut r: Resp<'q>,
    question: &'q Question,
    host: &str,
    ttl: u32,
    table: &RouteTable,
    settings: &DnsSettings,
) -> Resp<'q> {
    let Some(target) = fqdn(host) else { return r.error(RCODE_SERVFAIL, Outcome::ServFail) };
    r.answer.push(Record::from_rdata(question.name.clone(), ttl, RData::CNAME(CNAME(target.clone()))));
    // RFC 1034 §4.3.2 step 3a: "If the data at the node is a CNAME, and QTYPE
    // doesn't match CNAME, copy the CNAME RR into the answer section of the
    // response, change QNAME to the canonical name in the CNAME RR, and go
    // back to step 1." A QTYPE of CNAME is answered by the CNAME alone.
    if question.qtype == TYPE_CNAME {
        return r;
    }
    // Step 2: "Search the available zones for the zone which is the nearest
    // ancestor to QNAME. If such a zone is found, go to step 3, otherwise step
    // 4." Step 4 reads a cache this authoritative-only server does not keep:
    // a target outside the served zones ends the answer with the CNAME.
    let NameLookup::NodeHost { zone, host } = table.lookup(host) else { return r };
    let before = r.answer.len();
    let mut r = node_host_records(r, &target, host, question.qtype, settings);
    if r.answer.len() == before {
        // RFC 2308 §3: "Name servers authoritative for a zone MUST include the
        // SOA record of the zone in the authority section of the response
        // when [...] indicating that no data of the requested type exists" —
        // the target's zone, as the chain ends there (RFC 2308 §2.2).
        match fqdn(&zone.name).and_then(|owner| soa_record_at(owner, zone, negative_ttl(zone))) {
            Some(soa) => r.authority.push(soa),
            None => return r.error(RCODE_SERVFAIL, Outcome::ServFail),
        }
    }
    r
}

/// The TTL of a node hostname's address records: the responder's TTL for a
/// route of DNS_TTL (a node's address is as changeable as a route).
fn node_host_ttl(settings: &DnsSettings) -> u32 {
    scheduled_ttl(settings.ttl, settings)
}

/// Appends a node hostname's record of `qtype` (A or AAAA), owned by `owner`;
/// appends nothing for other types or a missing address.
fn node_host_records<'q>(
    mut r: Resp<'q>,
    owner: &Name,
    host: &NodeHost,
    qtype: u16,
    settings: &DnsSettings,
) -> Resp<'q> {
    let rdata = match qtype {
        TYPE_A => host.ipv4.map(|a| RData::A(A(a))),
        TYPE_AAAA => host.ipv6.map(|a| RData::AAAA(AAAA(a))),
        _ => None,
    };
    if let Some(rdata) = rdata {
        r.answer.push(Record::from_rdata(owner.clone(), node_host_ttl(settings), rdata));
        r.node = Some(host.node.clone());
    }
    r
}

/// The answer for a client and the scope it holds for: `source` is the
/// packet's source, `ecs` the option when the name uses ECS. The decision is [`ScheduledName::served`], the one the
/// HTTP 302 entry point, `lagran explain` and `/api/v1/schedule` take too.
fn client_answer(name: &ScheduledName, source: IpAddr, ecs: Option<Ecs>) -> Option<(&crate::route_table::Answer, u8)> {
    name.served(source, ecs.and_then(|e| e.client())).map(|s| (s.answer, s.scope))
}

/// No route table yet: DNS_FALLBACK_IP for `A`, SERVFAIL otherwise.
fn no_table<'q>(mut r: Resp<'q>, qtype: u16, settings: &DnsSettings) -> Resp<'q> {
    match (qtype, settings.fallback_ip) {
        (TYPE_A, Some(fallback)) => {
            let Some(question) = r.question else { return r.error(RCODE_SERVFAIL, Outcome::ServFail) };
            let ttl = scheduled_ttl(settings.ttl, settings);
            r.outcome = Outcome::Fallback;
            r.scope = 0;
            r.answer.push(Record::from_rdata(question.name.clone(), ttl, RData::A(A(fallback))));
            r
        }
        _ => r.error(RCODE_SERVFAIL, Outcome::ServFail),
    }
}

/// The zone apex with the question's spelling (so that it compresses against it).
fn zone_owner(question: &Question, zone: &Zone) -> Option<Name> {
    let zone_labels = zone.name.split('.').filter(|l| !l.is_empty()).count();
    let have = question.name.num_labels_raw();
    if zone_labels > have {
        return fqdn(&zone.name);
    }
    Name::from_labels(question.name.iter().skip(have - zone_labels)).ok()
}

trait RawLabels {
    fn num_labels_raw(&self) -> usize;
}

impl RawLabels for Name {
    /// The label count, counting a leading `*` (hickory's `num_labels` does not).
    fn num_labels_raw(&self) -> usize {
        self.iter().count()
    }
}

fn fqdn(s: &str) -> Option<Name> {
    let mut n = Name::from_ascii(s).ok()?;
    n.set_fqdn(true);
    Some(n)
}

fn soa_record(question: &Question, zone: &Zone, ttl: u32) -> Option<Record> {
    soa_record_at(zone_owner(question, zone)?, zone, ttl)
}

fn soa_record_at(owner: Name, zone: &Zone, ttl: u32) -> Option<Record> {
    let soa = SOA::new(
        fqdn(&zone.soa_mname)?,
        fqdn(&zone.soa_rname)?,
        zone.soa_serial,
        zone.soa_refresh as i32,
        zone.soa_retry as i32,
        zone.soa_expire as i32,
        zone.soa_minimum,
    );
    Some(Record::from_rdata(owner, ttl, RData::SOA(soa)))
}

/// RFC 2308 §3: "The TTL of this record is set from the minimum of the
/// MINIMUM field of the SOA record and the TTL of the SOA itself, and
/// indicates how long a resolver may cache the negative answer."
fn negative_ttl(zone: &Zone) -> u32 {
    zone.ns_ttl.min(zone.soa_minimum)
}

/// Empty answer + SOA in authority (RCODE and outcome untouched).
fn negative<'q>(mut r: Resp<'q>, question: &'q Question, zone: &Zone) -> Resp<'q> {
    // RFC 2308 §3: "Name servers authoritative for a zone MUST include the SOA
    // record of the zone in the authority section of the response when
    // reporting an NXDOMAIN or indicating that no data of the requested type
    // exists."
    match soa_record(question, zone, negative_ttl(zone)) {
        Some(soa) => {
            r.answer.clear();
            r.authority.push(soa);
            r
        }
        None => r.error(RCODE_SERVFAIL, Outcome::ServFail),
    }
}

fn nodata<'q>(mut r: Resp<'q>, question: &'q Question, zone: &Zone) -> Resp<'q> {
    r.outcome = Outcome::NoData;
    negative(r, question, zone)
}

fn nxdomain<'q>(mut r: Resp<'q>, question: &'q Question, zone: &Zone) -> Resp<'q> {
    r.outcome = Outcome::NxDomain;
    r.rcode = RCODE_NXDOMAIN;
    negative(r, question, zone)
}

fn soa_answer<'q>(mut r: Resp<'q>, question: &'q Question, zone: &Zone) -> Resp<'q> {
    match soa_record(question, zone, zone.ns_ttl) {
        Some(soa) => {
            r.answer.push(soa);
            r
        }
        None => r.error(RCODE_SERVFAIL, Outcome::ServFail),
    }
}

fn in_zone(host: &str, zone: &Zone) -> bool {
    host == zone.name || host.ends_with(&format!(".{}", zone.name))
}

fn ns_answer<'q>(mut r: Resp<'q>, question: &'q Question, zone: &Zone) -> Resp<'q> {
    if zone.ns_hosts.is_empty() {
        return nodata(r, question, zone);
    }
    let Some(owner) = zone_owner(question, zone) else { return r.error(RCODE_SERVFAIL, Outcome::ServFail) };
    for host in &zone.ns_hosts {
        let Some(target) = fqdn(&host.name) else { return r.error(RCODE_SERVFAIL, Outcome::ServFail) };
        r.answer.push(Record::from_rdata(owner.clone(), zone.ns_ttl, RData::NS(NS(target))));
    }
    // Glue: addresses of the NS hosts inside the zone, A then AAAA per host.
    for host in zone.ns_hosts.iter().filter(|h| in_zone(&h.name, zone)) {
        let Some(name) = fqdn(&host.name) else { continue };
        if let Some(a) = host.ipv4 {
            r.additional.push(Record::from_rdata(name.clone(), zone.ns_ttl, RData::A(A(a))));
        }
        if let Some(a) = host.ipv6 {
            r.additional.push(Record::from_rdata(name, zone.ns_ttl, RData::AAAA(AAAA(a))));
        }
    }
    r
}

fn glue_answer<'q>(mut r: Resp<'q>, question: &'q Question, zone: &Zone, host: &NsHost) -> Resp<'q> {
    let rdata = match question.qtype {
        TYPE_A => host.ipv4.map(|a| RData::A(A(a))),
        TYPE_AAAA => host.ipv6.map(|a| RData::AAAA(AAAA(a))),
        _ => None,
    };
    match rdata {
        Some(rdata) => {
            r.answer.push(Record::from_rdata(question.name.clone(), zone.ns_ttl, rdata));
            r
        }
        None => nodata(r, question, zone),
    }
}

/// A name with no records of its own but names below it (RFC 8020 §2).
fn is_empty_non_terminal(table: &RouteTable, zone: &Zone, name: &str) -> bool {
    let suffix = format!(".{name}");
    zone.ns_hosts.iter().any(|h| h.name.ends_with(&suffix))
        || table.hosts.iter().any(|h| h.name.ends_with(&suffix))
        || table
            .zones
            .iter()
            .filter(|z| z.zone.name == zone.name)
            .any(|z| z.names.iter().any(|n| n.name.ends_with(&suffix)))
}

/// The lookup form of a name: lowercase ASCII, labels joined by `.`, no
/// trailing dot; any octet outside `[A-Za-z0-9_*-]` (a dot inside a label,
/// binary) is written `\DDD` so that it can never match a served name.
pub fn lookup_key(name: &Name) -> String {
    let mut s = String::with_capacity(name.len());
    for (i, label) in name.iter().enumerate() {
        if i > 0 {
            s.push('.');
        }
        for &b in label {
            match b {
                b'A'..=b'Z' => s.push(b.to_ascii_lowercase() as char),
                b'a'..=b'z' | b'0'..=b'9' | b'-' | b'_' | b'*' => s.push(b as char),
                _ => {
                    let _ = write!(s, "\\{b:03}");
                }
            }
        }
    }
    s
}

fn read_question(buf: &[u8], pos: usize) -> Option<(Question, usize)> {
    // The question name may only point into the header (offsets < 12), so
    // hickory's recursive pointer following is bounded here.
    let mut dec = BinDecoder::new(buf);
    dec.read_slice(pos).ok()?;
    let name = Name::read(&mut dec).ok()?;
    let qtype = dec.read_u16().ok()?.unverified();
    let qclass = dec.read_u16().ok()?.unverified();
    Some((Question { name, qtype, qclass }, dec.index()))
}

/// Checks the (possibly compressed) name at `pos` and returns the offset just
/// after it and whether it is the root name. Iterative and bounded: pointers
/// must go strictly backwards, at most [`MAX_POINTER_HOPS`] of them, labels
/// at most 63 octets, the name at most 255 octets.
pub(crate) fn skip_name(buf: &[u8], start: usize) -> Result<(usize, bool), ()> {
    let mut pos = start;
    let mut end = None;
    let mut wire_len = 0usize;
    let mut hops = 0usize;
    let mut limit = start;
    loop {
        let b = *buf.get(pos).ok_or(())?;
        match b & 0xc0 {
            0x00 if b == 0 => {
                wire_len += 1;
                if wire_len > 255 {
                    return Err(());
                }
                return Ok((end.unwrap_or(pos + 1), wire_len == 1));
            }
            0x00 => {
                let len = b as usize;
                if buf.len() - pos < 1 + len {
                    return Err(());
                }
                wire_len += 1 + len;
                if wire_len > 254 {
                    return Err(());
                }
                pos += 1 + len;
            }
            0xc0 => {
                let b2 = *buf.get(pos + 1).ok_or(())?;
                let target = (((b & 0x3f) as usize) << 8) | b2 as usize;
                if end.is_none() {
                    end = Some(pos + 2);
                }
                hops += 1;
                if target >= limit || hops > MAX_POINTER_HOPS {
                    return Err(());
                }
                limit = target;
                pos = target;
            }
            // 0x40 and 0x80: extended label types (RFC 6891 §5) are not supported.
            _ => return Err(()),
        }
    }
}

/// Walks the answer, authority and additional sections and returns the OPT
/// record, if any. Errors: truncated records, bad names, an OPT record outside
/// the additional section, with a non-root owner, or more than one OPT.
fn read_records(buf: &[u8], mut pos: usize, an: u16, ns: u16, ar: u16) -> Result<Option<OptIn<'_>>, ()> {
    let mut opt = None;
    let total = an as usize + ns as usize + ar as usize;
    for i in 0..total {
        let (after_name, root) = skip_name(buf, pos)?;
        if buf.len() - after_name < 10 {
            return Err(());
        }
        let f = &buf[after_name..after_name + 10];
        let rtype = u16::from_be_bytes([f[0], f[1]]);
        let class = u16::from_be_bytes([f[2], f[3]]);
        let ttl = u32::from_be_bytes([f[4], f[5], f[6], f[7]]);
        let rdlen = u16::from_be_bytes([f[8], f[9]]) as usize;
        let rdata_start = after_name + 10;
        if buf.len() - rdata_start < rdlen {
            return Err(());
        }
        if rtype == TYPE_OPT {
            let in_additional = i >= an as usize + ns as usize;
            // RFC 6891 §6.1.2: the OPT owner "MUST be 0 (root domain)"; §6.1.1:
            // "The OPT RR MAY be placed anywhere within the additional data section."
            if !in_additional || !root || opt.is_some() {
                return Err(());
            }
            opt = Some(OptIn {
                payload: class,
                version: ((ttl >> 16) & 0xff) as u8,
                dnssec_ok: ttl & 0x8000 != 0,
                rdata: &buf[rdata_start..rdata_start + rdlen],
            });
        }
        pos = rdata_start + rdlen;
    }
    Ok(opt)
}

/// Encodes the response, truncating it to the client's limit, and builds the Reply.
fn finish(ctx: &Ctx, mut r: Resp<'_>, client: Option<ClientInfo>) -> Reply {
    if let Some(opt) = r.opt.as_mut()
        && let Some(e) = opt.ecs
    {
        // Only a tailored answer carries a non-zero scope (set by `scheduled`).
        r.scope = r.scope.min(e.max_prefix());
    }
    let mut encoded = encode(ctx, &r, false);
    if encoded.is_err() {
        // A record we could not encode (e.g. a bad name in the zone config).
        r = r.error(RCODE_SERVFAIL, Outcome::ServFail);
        encoded = encode(ctx, &r, false);
    }
    let Ok(mut bytes) = encoded else { return Reply::dropped(DropReason::Unencodable) };
    let mut truncated = false;
    if bytes.len() > ctx.limit {
        // RFC 1035 §4.1.1: "TC  TrunCation - specifies that this message was
        // truncated due to length greater than that permitted on the
        // transmission channel." We drop every record but the OPT (RFC 6891
        // §7: the OPT record must be kept) and let the client retry over TCP.
        match encode(ctx, &r, true) {
            Ok(b) => bytes = b,
            Err(_) => return Reply::dropped(DropReason::Unencodable),
        }
        truncated = true;
    }
    Reply {
        bytes: Some(bytes),
        outcome: r.outcome,
        client,
        truncated,
        stale: r.stale,
        scheduled: r.scheduled,
        dropped: None,
        cookie: r.opt.and_then(|o| o.cookie),
    }
}

fn encode(ctx: &Ctx, r: &Resp<'_>, truncated: bool) -> Result<Vec<u8>, ProtoError> {
    let mut buf = Vec::with_capacity(128);
    {
        let mut enc = BinEncoder::new(&mut buf);
        let (an, ns, ar) = if truncated { (0, 0, 0) } else { (r.answer.len(), r.authority.len(), r.additional.len()) };
        let ar = ar + usize::from(r.opt.is_some());
        enc.emit_u16(ctx.id)?;
        // QR=1, OPCODE copied, AA, TC, RD copied.
        let f1 =
            0x80 | ((ctx.opcode & 0x0f) << 3) | (u8::from(r.aa) << 2) | (u8::from(truncated) << 1) | u8::from(ctx.rd);
        // RA=0, Z=0, AD=0, CD copied, low 4 bits of RCODE.
        let f2 = (u8::from(ctx.cd) << 4) | (r.rcode & 0x0f) as u8;
        enc.emit(f1)?;
        enc.emit(f2)?;
        enc.emit_u16(u16::from(r.question.is_some()))?;
        enc.emit_u16(an as u16)?;
        enc.emit_u16(ns as u16)?;
        enc.emit_u16(ar as u16)?;
        if let Some(q) = r.question {
            q.name.emit(&mut enc)?;
            enc.emit_u16(q.qtype)?;
            enc.emit_u16(q.qclass)?;
        }
        if !truncated {
            for rec in r.answer.iter().chain(&r.authority).chain(&r.additional) {
                rec.emit(&mut enc)?;
            }
        }
    }
    if let Some(opt) = &r.opt {
        let rdlen_at = write_opt(&mut buf, ctx.max_udp_payload, r.rcode, opt, r.scope);
        if let Some(block) = ctx.pad_block {
            pad_opt(&mut buf, rdlen_at, block, ctx.limit);
        }
    }
    Ok(buf)
}

/// The response's OPT record (RFC 6891 §6.1.2), always the last record:
/// owner root, TYPE 41, CLASS = our UDP payload size, TTL = extended RCODE
/// (high 8 bits of the 12-bit RCODE) | VERSION 0 | DO copied | Z 0, RDATA =
/// the echoed ECS option when the query had one, then our COOKIE option when
/// the query had a client cookie. Returns where its RDLEN is.
fn write_opt(out: &mut Vec<u8>, payload: u16, rcode: u16, opt: &OptOut, scope: u8) -> usize {
    out.push(0);
    out.extend_from_slice(&TYPE_OPT.to_be_bytes());
    out.extend_from_slice(&payload.to_be_bytes());
    // RFC 3225 §3: "The DO bit of the query MUST be copied in the response."
    let ttl: u32 = (u32::from((rcode >> 4) as u8) << 24) | if opt.dnssec_ok { 0x8000 } else { 0 };
    out.extend_from_slice(&ttl.to_be_bytes());
    let rdlen_at = out.len();
    let cookie_len = opt.cookie.map_or(0, |_| 4 + cookie::OPTION_LEN);
    let ecs_len = opt.ecs.map_or(0, |e| e.wire_len());
    out.extend_from_slice(&((ecs_len + cookie_len) as u16).to_be_bytes());
    if let Some(e) = opt.ecs {
        e.write_option(scope, out);
    }
    // The COOKIE option after ECS (the XDP program writes the same order).
    if let Some(c) = opt.cookie {
        out.extend_from_slice(&cookie::OPTION_CODE.to_be_bytes());
        out.extend_from_slice(&(cookie::OPTION_LEN as u16).to_be_bytes());
        out.extend_from_slice(&c.option);
    }
    rdlen_at
}

/// Appends a Padding option (RFC 7830 §3: zero octets) to the OPT record that
/// ends `out` (its RDLEN at `rdlen_at`), so that the message is a multiple of
/// `block` octets, unless that would pass `limit`.
fn pad_opt(out: &mut Vec<u8>, rdlen_at: usize, block: usize, limit: usize) {
    let header = 4;
    let pad = (block - (out.len() + header) % block) % block;
    let rdlen = u16::from_be_bytes([out[rdlen_at], out[rdlen_at + 1]]) as usize + header + pad;
    // RFC 8467 §4.1 pads to the block, but never past what the transport carries.
    if out.len() + header + pad > limit || rdlen > u16::MAX as usize {
        return;
    }
    out[rdlen_at..rdlen_at + 2].copy_from_slice(&(rdlen as u16).to_be_bytes());
    out.extend_from_slice(&OPTION_PADDING.to_be_bytes());
    out.extend_from_slice(&(pad as u16).to_be_bytes());
    out.resize(out.len() + pad, 0);
}
