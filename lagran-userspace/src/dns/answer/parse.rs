//! Reading a query: the 12-octet header by hand (any opcode must be readable
//! to answer NOTIMP), the first question's name with hickory-proto's
//! `Name::read` (which handles compression and rejects names longer than 255
//! octets), and the other records walked without decoding them (their names
//! are checked by [`skip_name`]) so that a packet claiming 65 535 records
//! costs nothing. The single OPT record is returned as its raw bytes
//! ([`crate::dns::ecs`] validates the ECS option hickory would accept too
//! leniently).

use std::fmt::Write as _;

use hickory_proto::rr::Name;
use hickory_proto::serialize::binary::{BinDecodable, BinDecoder};

use super::reply::DropReason;
use super::wire::{HEADER_LEN, TYPE_OPT};

/// The smallest question: the root name (one octet), QTYPE and QCLASS.
const MIN_QUESTION_LEN: usize = 5;
/// Longest chain of compression pointers accepted in a name (a name has at most 127 labels).
const MAX_POINTER_HOPS: usize = 127;

/// The fields of the query's header the responder reads (RFC 1035 §4.1.1).
#[derive(Clone, Copy, Debug)]
pub(super) struct Header {
    pub(super) id: u16,
    pub(super) opcode: u8,
    /// Recursion desired, copied into the response.
    pub(super) rd: bool,
    /// Checking disabled, copied into the response.
    pub(super) cd: bool,
    pub(super) qdcount: u16,
    pub(super) ancount: u16,
    pub(super) nscount: u16,
    pub(super) arcount: u16,
}

/// The question as read from the query.
#[derive(Clone, Debug)]
pub(super) struct Question {
    /// As received (case preserved).
    pub(super) name: Name,
    pub(super) qtype: u16,
    pub(super) qclass: u16,
}

/// The query's OPT record (RFC 6891 §6.1.2).
#[derive(Clone, Copy, Debug)]
pub(super) struct OptIn<'a> {
    /// CLASS: the requestor's UDP payload size.
    pub(super) payload: u16,
    pub(super) version: u8,
    pub(super) dnssec_ok: bool,
    pub(super) rdata: &'a [u8],
}

/// Which question of the question section could not be read.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum BadQuestion {
    /// The first one: the packet is junk.
    First,
    /// A later one: the query is malformed (FORMERR).
    Later,
}

/// Reads the header of a message that may be answered. Dropped: a message
/// shorter than a header and the smallest question, and a response.
pub(super) fn read_header(buf: &[u8]) -> Result<Header, DropReason> {
    // RFC 1035 §4.1.1: the header is 12 octets, and the smallest question (the
    // root name, QTYPE, QCLASS) 5 more. FORMERR is only for packets whose header
    // and question parse: answering junk would reflect it at a spoofed victim.
    if buf.len() < HEADER_LEN + MIN_QUESTION_LEN {
        return Err(DropReason::Short);
    }
    // RFC 1035 §4.1.1: "QR  A one bit field that specifies whether this message
    // is a query (0), or a response (1)." Responses are never answered (that
    // would let two servers bounce packets forever).
    if buf[2] & 0x80 != 0 {
        return Err(DropReason::Response);
    }
    let be16 = |i: usize| u16::from_be_bytes([buf[i], buf[i + 1]]);
    Ok(Header {
        id: be16(0),
        opcode: (buf[2] >> 3) & 0x0f,
        rd: buf[2] & 0x01 != 0,
        cd: buf[3] & 0x10 != 0,
        qdcount: be16(4),
        ancount: be16(6),
        nscount: be16(8),
        arcount: be16(10),
    })
}

/// Reads a question section of `qdcount` (at least 1) questions after the
/// header: the first question decoded, the others only checked. Returns the
/// first question and the offset just after the section.
pub(super) fn read_questions(buf: &[u8], qdcount: u16) -> Result<(Question, usize), BadQuestion> {
    let (first, mut pos) = read_question(buf, HEADER_LEN).ok_or(BadQuestion::First)?;
    for _ in 1..qdcount {
        pos = skip_name(buf, pos)
            .ok()
            .and_then(|(end, _)| (buf.len() - end >= 4).then_some(end + 4))
            .ok_or(BadQuestion::Later)?;
    }
    Ok((first, pos))
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
pub(super) fn read_records(buf: &[u8], mut pos: usize, an: u16, ns: u16, ar: u16) -> Result<Option<OptIn<'_>>, ()> {
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
