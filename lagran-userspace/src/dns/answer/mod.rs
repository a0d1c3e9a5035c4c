//! The answer function: query bytes and an [`AnswerContext`] → response bytes.
//!
//! Shared by the UDP, TCP, DoT and DoQ listeners, the XDP parity tests, the
//! fuzz targets and the simulator example. It never panics, never loops
//! beyond the packet's length and allocates in proportion to the response
//! only. The module documentation of [`crate::dns`] gives the rules.
//!
//! Its layers, each importing only the ones listed before it:
//! - `wire`: the DNS constants; `reply`: what comes back ([`Reply`]);
//!   `context`: what a query is answered against ([`AnswerContext`]);
//! - `parse`: reading the query (header, question, OPT record);
//! - `draft`: the response under construction;
//! - `zone_records` (SOA, NS, glue, negative answers), `nsec3_proof` and
//!   `signed` (DNSSEC records for a query with DO set) and `resolve`
//!   (deciding the response from the route table);
//! - `encode`: writing the response, truncated or padded as needed;
//! - this module: [`answer()`], which drives them.

mod context;
mod draft;
mod encode;
mod nsec3_proof;
mod parse;
mod reply;
mod resolve;
mod signed;
pub mod wire;
mod zone_records;

use std::net::IpAddr;

use hickory_proto::rr::Name;

pub use self::context::{AnswerContext, Transport};
use self::draft::{Draft, OptOut};
use self::encode::{Framing, finish};
pub use self::parse::lookup_key;
pub(crate) use self::parse::skip_name;
use self::parse::{BadQuestion, Header, OptIn, read_header, read_questions, read_records};
pub use self::reply::{ClientInfo, DropReason, Outcome, Reply};
use self::resolve::resolve;
pub use self::resolve::{MAX_ANSWERS, is_stale, scheduled_ttl};
use self::wire::{HEADER_LEN, RCODE_BADCOOKIE, RCODE_BADVERS, RCODE_FORMERR, RCODE_NOERROR, RCODE_NOTIMP};
pub(crate) use self::zone_records::{fqdn, negative_ttl, soa_record_at};
use crate::dns::cookie;
use crate::dns::ecs::{self, Ecs};

/// Answers one query. See the module documentation of [`crate::dns`] for
/// the rules.
pub fn answer(query: &[u8], ctx: &AnswerContext<'_>) -> Reply {
    let header = match read_header(query) {
        Ok(header) => header,
        Err(reason) => return Reply::dropped(reason),
    };
    let mut framing = Framing::new(header, ctx.transport, ctx.settings.max_udp_payload);
    if header.qdcount == 0 {
        return cookie_only(&framing, query, &header, ctx);
    }
    let (first, end) = match read_questions(query, header.qdcount) {
        Ok(read) => read,
        // An unreadable first question: junk, dropped (see `read_header`).
        Err(BadQuestion::First) => return Reply::dropped(DropReason::BadQuestion),
        // RFC 1035 §4.1.1: "Format error - The name server was unable to interpret the query."
        Err(BadQuestion::Later) => {
            return finish(&framing, Draft::new(None, None, RCODE_FORMERR, false, Outcome::FormErr), None);
        }
    };
    // The question echoed: there is one exactly when QDCOUNT is 1.
    let echo = (header.qdcount == 1).then_some(&first);
    let error = |framing: &Framing, opt: Option<OptOut>, rcode: u16, outcome: Outcome| {
        let client = echo.map(|q| client_info(ctx.source, &q.name, None));
        finish(framing, Draft::new(echo, opt, rcode, false, outcome), client)
    };

    // Answer, authority and additional sections: only the OPT record matters.
    let Ok(opt_in) = read_records(query, end, header.ancount, header.nscount, header.arcount) else {
        // RFC 6891 §6.1.1: "If a query message with more than one OPT RR is
        // received, a FORMERR (RCODE=1) MUST be returned."
        return error(&framing, None, RCODE_FORMERR, Outcome::FormErr);
    };
    let (opt_out, ecs) = match opt_in {
        None => (None, None),
        Some(o) => {
            framing.accept_payload(o.payload);
            match check_opt(&o, ctx) {
                Ok((opt, ecs)) => (Some(opt), ecs),
                // RFC 6891 §7: "If an OPT record is present in a received
                // request, compliant responders MUST include an OPT record in
                // their respective responses."
                Err((rcode, outcome)) => return error(&framing, Some(OptOut::bare(o.dnssec_ok)), rcode, outcome),
            }
        }
    };

    let client = echo.map(|q| client_info(ctx.source, &q.name, ecs));
    // RFC 1035 §4.1.1: "Not Implemented - The name server does not support
    // the requested kind of query."
    if header.opcode != 0 {
        return finish(&framing, Draft::new(echo, opt_out, RCODE_NOTIMP, false, Outcome::NotImp), client);
    }
    let (Some(question), Some(mut client)) = (echo, client) else {
        // More than one question: this server answers exactly one.
        return finish(&framing, Draft::new(None, opt_out, RCODE_FORMERR, false, Outcome::FormErr), None);
    };
    let dnssec_ok = opt_out.is_some_and(|o| o.dnssec_ok);
    let mut draft = resolve(ctx, question, ecs, opt_out, &mut client);
    if dnssec_ok {
        draft = signed::add_dnssec(draft, ctx.table, question);
    }
    finish(&framing, draft, Some(client))
}

/// Checks the query's OPT record. Returns the OPT record of the response and
/// the query's ECS option, or the RCODE and outcome of the error response.
fn check_opt(o: &OptIn<'_>, ctx: &AnswerContext<'_>) -> Result<(OptOut, Option<Ecs>), (u16, Outcome)> {
    // RFC 6891 §6.1.3: "If a responder does not implement the VERSION level
    // of the request, then it MUST respond with RCODE=BADVERS."
    if o.version > 0 {
        return Err((RCODE_BADVERS, Outcome::BadVers));
    }
    // RFC 7871 §7.2.1: "A query with a wrongly formatted option (e.g., an
    // unknown FAMILY) MUST be rejected and a FORMERR response MUST be
    // returned to the sender". The response's OPT carries no ECS.
    let ecs = ecs::find_in_opt(o.rdata).map_err(|_| (RCODE_FORMERR, Outcome::FormErr))?;
    // RFC 7873 §5.2.2: "If the COOKIE option is too short to contain a
    // Server Cookie field or is too long [...], then the request is
    // malformed" (FORMERR, no cookie in the response).
    let cookie = match ctx.cookies {
        Some(check) => cookie::find_in_opt(o.rdata)
            .map_err(|_| (RCODE_FORMERR, Outcome::FormErr))?
            .map(|c| check.respond(&c, ctx.source)),
        None => None,
    };
    // RFC 7871 §7.2.2: "If the client query did include the option, the
    // server MUST include one in its response". Scope 0 unless the answer
    // was tailored to the client (set by `resolve`). RFC 7873 §5.2.3: the
    // response carries "a COOKIE option containing both the Client Cookie
    // copied from the request and a Server Cookie it has generated".
    Ok((OptOut { dnssec_ok: o.dnssec_ok, ecs, cookie }, ecs))
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
/// opcode, server cookies off) is dropped as junk: a response to junk would
/// reflect it at a spoofed victim.
fn cookie_only(framing: &Framing, query: &[u8], header: &Header, ctx: &AnswerContext<'_>) -> Reply {
    let junk = Reply::dropped(DropReason::NoQuestion);
    let (Some(check), 0) = (ctx.cookies, header.opcode) else { return junk };
    let Ok(Some(o)) = read_records(query, HEADER_LEN, header.ancount, header.nscount, header.arcount) else {
        return junk;
    };
    if o.version > 0 {
        return junk;
    }
    let Ok(Some(c)) = cookie::find_in_opt(o.rdata) else { return junk };
    let out = check.respond(&c, ctx.source);
    let rcode = if c.server.is_empty() || out.valid { RCODE_NOERROR } else { RCODE_BADCOOKIE };
    let opt = OptOut { dnssec_ok: o.dnssec_ok, ecs: None, cookie: Some(out) };
    // Counted with the empty NOERROR answers (and limited in their RRL class).
    let outcome = if rcode == RCODE_NOERROR { Outcome::NoData } else { Outcome::BadCookie };
    finish(framing, Draft::new(None, Some(opt), rcode, false, outcome), None)
}

fn client_info(source: IpAddr, name: &Name, ecs: Option<Ecs>) -> ClientInfo {
    ClientInfo { address: source, ecs: ecs.map(|e| (e.address(), e.source(), 0)), name: lookup_key(name), node: None }
}
