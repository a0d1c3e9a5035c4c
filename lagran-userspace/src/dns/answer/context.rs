//! What one query is answered against besides its bytes: the route table,
//! the settings, the packet's source and transport, the clock and the
//! server cookie secrets.

use std::net::IpAddr;

use serde::Serialize;

use crate::dns::cookie::CookieCheck;
use crate::dns::settings::DnsSettings;
use crate::route_table::RouteTable;

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

/// Everything [`super::answer()`] reads besides the query's bytes. It only
/// borrows, so building one per query costs no allocation.
#[derive(Clone, Copy)]
pub struct AnswerContext<'a> {
    /// The route table the answer comes from.
    pub table: &'a RouteTable,
    pub settings: &'a DnsSettings,
    /// The packet's source address (the resolver).
    pub source: IpAddr,
    pub transport: Transport,
    /// The current time, milliseconds since the Unix epoch on this host's clock.
    pub now_ms: i64,
    /// When the control plane last confirmed `table`, on the clock of
    /// `now_ms` (0 = never; see [`crate::confirmation::Confirmation`]).
    pub confirmed_at_ms: i64,
    /// With `Some`, a query's COOKIE option is checked and the response
    /// carries our server cookie (RFC 7873, see [`crate::dns::cookie`]); with
    /// `None`, COOKIE options are ignored, as RFC 7873 §5.2.1 describes for a
    /// server that does not implement them.
    pub cookies: Option<&'a CookieCheck>,
}

impl<'a> AnswerContext<'a> {
    /// A context whose table the control plane confirms at `now_ms` and
    /// which ignores COOKIE options (what `lagran explain`, the parity tests
    /// and the simulator want).
    pub fn new(
        table: &'a RouteTable,
        settings: &'a DnsSettings,
        source: IpAddr,
        transport: Transport,
        now_ms: i64,
    ) -> Self {
        AnswerContext { table, settings, source, transport, now_ms, confirmed_at_ms: now_ms, cookies: None }
    }

    /// The same context, its table last confirmed at `confirmed_at_ms`.
    pub fn confirmed_at(self, confirmed_at_ms: i64) -> Self {
        AnswerContext { confirmed_at_ms, ..self }
    }

    /// The same context, checking server cookies with `cookies`.
    pub fn with_cookies(self, cookies: Option<&'a CookieCheck>) -> Self {
        AnswerContext { cookies, ..self }
    }
}
