//! What the responder hands back for one query: the response bytes, what
//! became of the query and who asked what.

use std::net::IpAddr;

use serde::Serialize;

use crate::dns::cookie::CookieOut;

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
    /// A scheduled answer was served from a route table the control plane
    /// has not confirmed for `stale_secs`, because no fallback address is
    /// configured.
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
    pub(super) fn dropped(reason: DropReason) -> Reply {
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
