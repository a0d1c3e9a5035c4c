//! Writing a response: the header by hand, the question and every record
//! with hickory-proto's `BinEncoder` (which compresses owner names against
//! the question, so a scheduled `A` record's owner is the pointer `0xC00C`),
//! and the OPT record by hand, always last. The module documentation of
//! [`crate::dns`] gives the exact layout the XDP program mirrors.

use hickory_proto::ProtoError;
use hickory_proto::serialize::binary::{BinEncodable, BinEncoder};

use super::context::Transport;
use super::draft::{Draft, OptOut};
use super::parse::Header;
use super::reply::{ClientInfo, DropReason, Outcome, Reply};
use super::wire::{OPTION_PADDING, RCODE_SERVFAIL, RESPONSE_PAD_BLOCK, TCP_LIMIT, TYPE_OPT, UDP_PLAIN_LIMIT};
use crate::dns::cookie;

/// What the response copies from the query's header, and the size limits
/// it is encoded under.
#[derive(Clone, Copy, Debug)]
pub(super) struct Framing {
    header: Header,
    /// The largest response the client accepts.
    limit: usize,
    /// Over UDP, the limit follows the requestor's EDNS payload size.
    udp: bool,
    /// Our OPT record advertises this UDP payload size.
    max_udp_payload: u16,
    /// Pad the OPT record to a multiple of this many octets (encrypted transports).
    pad_block: Option<usize>,
}

impl Framing {
    pub(super) fn new(header: Header, transport: Transport, max_udp_payload: u16) -> Self {
        Framing {
            header,
            limit: match transport {
                Transport::Udp => UDP_PLAIN_LIMIT,
                Transport::Tcp | Transport::Dot | Transport::Doq => TCP_LIMIT,
            },
            udp: transport == Transport::Udp,
            max_udp_payload,
            // RFC 7830 §4: "Responders MUST pad DNS responses when the respective DNS
            // query included the 'Padding' option [...]. Responders MAY pad DNS
            // responses when the respective DNS query indicated EDNS(0) support of
            // the Requestor but did not include the 'Padding' option." We pad every
            // response with an OPT, and only on encrypted transports (§6: padding
            // clear text gains nothing).
            pad_block: transport.is_encrypted().then_some(RESPONSE_PAD_BLOCK),
        }
    }

    /// Applies the requestor's UDP payload size of the query's OPT record.
    pub(super) fn accept_payload(&mut self, requested: u16) {
        if self.udp {
            // RFC 6891 §6.2.3: "Values lower than 512 MUST be treated as equal to 512."
            // RFC 6891 §6.2.5: the responder may send up to the smaller of the
            // requestor's size and its own.
            self.limit = (requested.min(self.max_udp_payload) as usize).max(UDP_PLAIN_LIMIT);
        }
    }
}

/// Encodes the response, truncating it to the client's limit, and builds the Reply.
pub(super) fn finish(framing: &Framing, mut r: Draft<'_>, client: Option<ClientInfo>) -> Reply {
    if let Some(opt) = r.opt.as_mut()
        && let Some(e) = opt.ecs
    {
        // Only a tailored answer carries a non-zero scope (set by `scheduled`).
        r.scope = r.scope.min(e.max_prefix());
    }
    let mut encoded = encode(framing, &r, false);
    if encoded.is_err() {
        // A record we could not encode (e.g. a bad name in the zone config).
        r = r.error(RCODE_SERVFAIL, Outcome::ServFail);
        encoded = encode(framing, &r, false);
    }
    let Ok(mut bytes) = encoded else { return Reply::dropped(DropReason::Unencodable) };
    let mut truncated = false;
    if bytes.len() > framing.limit {
        // RFC 1035 §4.1.1: "TC  TrunCation - specifies that this message was
        // truncated due to length greater than that permitted on the
        // transmission channel." We drop every record but the OPT (RFC 6891
        // §7: the OPT record must be kept) and let the client retry over TCP.
        match encode(framing, &r, true) {
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

fn encode(framing: &Framing, r: &Draft<'_>, truncated: bool) -> Result<Vec<u8>, ProtoError> {
    let mut buf = Vec::with_capacity(128);
    {
        let mut enc = BinEncoder::new(&mut buf);
        let (an, ns, ar) = if truncated { (0, 0, 0) } else { (r.answer.len(), r.authority.len(), r.additional.len()) };
        let ar = ar + usize::from(r.opt.is_some());
        let h = &framing.header;
        enc.emit_u16(h.id)?;
        // QR=1, OPCODE copied, AA, TC, RD copied.
        let f1 = 0x80 | ((h.opcode & 0x0f) << 3) | (u8::from(r.aa) << 2) | (u8::from(truncated) << 1) | u8::from(h.rd);
        // RA=0, Z=0, AD=0, CD copied, low 4 bits of RCODE.
        let f2 = (u8::from(h.cd) << 4) | (r.rcode & 0x0f) as u8;
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
        let rdlen_at = write_opt(&mut buf, framing.max_udp_payload, r.rcode, opt, r.scope);
        if let Some(block) = framing.pad_block {
            pad_opt(&mut buf, rdlen_at, block, framing.limit);
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
