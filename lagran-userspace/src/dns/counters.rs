//! Lock-free counters of the userspace responder, rendered as Prometheus text.

use std::fmt::Write as _;
use std::sync::Arc;
use std::sync::atomic::{AtomicI64, AtomicU64, Ordering};

use super::answer::{DropReason, Outcome, Reply, Transport};
use crate::answered::table::AnsweredPrefixes;

/// Counters shared by every listener task.
#[derive(Debug, Default)]
pub struct DnsCounters {
    pub queries_udp: AtomicU64,
    pub queries_tcp: AtomicU64,
    pub queries_dot: AtomicU64,
    pub queries_doq: AtomicU64,
    pub answered: AtomicU64,
    pub nodata: AtomicU64,
    pub nxdomain: AtomicU64,
    pub refused: AtomicU64,
    pub formerr: AtomicU64,
    pub badvers: AtomicU64,
    pub notimp: AtomicU64,
    pub servfail: AtomicU64,
    /// BADCOOKIE to a cookie-only query (RFC 7873 §5.4).
    pub badcookie: AtomicU64,
    pub fallback: AtomicU64,
    pub dropped: AtomicU64,
    /// `dropped` by [`DropReason`], indexed by its position in [`DropReason::ALL`].
    pub dropped_by: [AtomicU64; DropReason::ALL.len()],
    /// UDP responses sent with TC=1.
    pub truncated: AtomicU64,
    /// Packets that could not be understood: dropped + FORMERR.
    pub malformed: AtomicU64,
    /// Answers served from a route table older than DNS_STALE_SECS (no fallback set).
    pub stale_served: AtomicU64,
    /// TCP connections refused because `tcp_max_connections` was reached.
    pub tcp_rejected: AtomicU64,
    /// DoT and DoQ connections refused because the connection limit was reached.
    pub tls_rejected: AtomicU64,
    /// DoT and DoQ handshakes that failed or timed out.
    pub tls_handshake_failed: AtomicU64,
    /// TCP connections refused because their client had `tcp_max_per_client`.
    pub tcp_rejected_per_client: AtomicU64,
    /// TCP connections closed because no whole query arrived within `tcp_idle_secs`.
    pub tcp_idle_closed: AtomicU64,
    /// TCP connections closed after `tcp_max_queries_per_connection` queries.
    pub tcp_query_limit_closed: AtomicU64,
    /// UDP datagrams larger than the receive buffer (ignored).
    pub oversized: AtomicU64,
    /// Socket errors (receive, send, accept), logged and survived.
    pub io_errors: AtomicU64,
    /// When the last "serving stale answers" warning was logged (unix ms).
    pub(crate) last_stale_warn_ms: AtomicI64,
    /// The client prefixes of the scheduled answers, by queries (what a geo
    /// reload's check samples; see [`crate::answered`]).
    pub answered_prefixes: Arc<AnsweredPrefixes>,
}

fn inc(c: &AtomicU64) {
    c.fetch_add(1, Ordering::Relaxed);
}

impl DnsCounters {
    pub fn new() -> Self {
        Self::default()
    }

    /// Counts one query and what became of it.
    pub fn record(&self, transport: Transport, reply: &Reply) {
        match transport {
            Transport::Udp => inc(&self.queries_udp),
            Transport::Tcp => inc(&self.queries_tcp),
            Transport::Dot => inc(&self.queries_dot),
            Transport::Doq => inc(&self.queries_doq),
        }
        inc(self.outcome_counter(reply.outcome));
        if matches!(reply.outcome, Outcome::Dropped | Outcome::FormErr) {
            inc(&self.malformed);
        }
        if let Some(reason) = reply.dropped {
            inc(&self.dropped_by[reason as usize]);
        }
        if reply.truncated {
            inc(&self.truncated);
        }
        if reply.stale {
            inc(&self.stale_served);
        }
        if reply.scheduled
            && reply.outcome == Outcome::Answered
            && let Some(client) = &reply.client
        {
            // The client the answer was chosen for: its ECS subnet, else the source.
            self.answered_prefixes.record(client.ecs.map_or(client.address, |(a, _, _)| a));
        }
    }

    fn outcome_counter(&self, o: Outcome) -> &AtomicU64 {
        match o {
            Outcome::Answered => &self.answered,
            Outcome::NoData => &self.nodata,
            Outcome::NxDomain => &self.nxdomain,
            Outcome::Refused => &self.refused,
            Outcome::FormErr => &self.formerr,
            Outcome::BadVers => &self.badvers,
            Outcome::NotImp => &self.notimp,
            Outcome::ServFail => &self.servfail,
            Outcome::BadCookie => &self.badcookie,
            Outcome::Fallback => &self.fallback,
            Outcome::Dropped => &self.dropped,
        }
    }

    /// The count of one outcome.
    pub fn outcome(&self, o: Outcome) -> u64 {
        self.outcome_counter(o).load(Ordering::Relaxed)
    }

    /// Every counter by name (`queries_udp`, `answered`, …).
    pub fn snapshot(&self) -> Vec<(&'static str, u64)> {
        let l = |c: &AtomicU64| c.load(Ordering::Relaxed);
        let mut v = vec![
            ("queries_udp", l(&self.queries_udp)),
            ("queries_tcp", l(&self.queries_tcp)),
            ("queries_dot", l(&self.queries_dot)),
            ("queries_doq", l(&self.queries_doq)),
            ("answered", l(&self.answered)),
            ("nodata", l(&self.nodata)),
            ("nxdomain", l(&self.nxdomain)),
            ("refused", l(&self.refused)),
            ("formerr", l(&self.formerr)),
            ("badvers", l(&self.badvers)),
            ("notimp", l(&self.notimp)),
            ("servfail", l(&self.servfail)),
            ("badcookie", l(&self.badcookie)),
            ("fallback", l(&self.fallback)),
            ("dropped", l(&self.dropped)),
            ("truncated", l(&self.truncated)),
            ("malformed", l(&self.malformed)),
            ("stale_served", l(&self.stale_served)),
            ("tcp_rejected", l(&self.tcp_rejected)),
            ("tls_rejected", l(&self.tls_rejected)),
            ("tls_handshake_failed", l(&self.tls_handshake_failed)),
            ("tcp_rejected_per_client", l(&self.tcp_rejected_per_client)),
            ("tcp_idle_closed", l(&self.tcp_idle_closed)),
            ("tcp_query_limit_closed", l(&self.tcp_query_limit_closed)),
            ("oversized", l(&self.oversized)),
            ("io_errors", l(&self.io_errors)),
        ];
        for r in DropReason::ALL {
            let name = match r {
                DropReason::Short => "dropped_short",
                DropReason::Response => "dropped_response",
                DropReason::NoQuestion => "dropped_no_question",
                DropReason::BadQuestion => "dropped_bad_question",
                DropReason::Unencodable => "dropped_unencodable",
            };
            v.push((name, l(&self.dropped_by[r as usize])));
        }
        v
    }

    /// Appends the counters in the Prometheus text exposition format.
    ///
    /// - `lagran_dns_queries_total{transport}`
    /// - `lagran_dns_responses_total{outcome,rcode}` (dropped packets are not responses)
    /// - `lagran_dns_dropped_total{reason}` (short, response, no_question,
    ///   bad_question, unencodable: junk gets no response, so it cannot be reflected)
    /// - `lagran_dns_truncated_total`,
    ///   `lagran_dns_malformed_total`, `lagran_dns_stale_served_total`,
    ///   `lagran_dns_tcp_rejected_total`, `lagran_dns_tls_rejected_total`,
    ///   `lagran_dns_tls_handshake_failed_total`, `lagran_dns_oversized_total`,
    ///   `lagran_dns_oversized_total`,
    ///   `lagran_dns_io_errors_total`
    /// - `lagran_dns_tcp_rejected_total{limit}` (total, per_client)
    /// - `lagran_dns_tcp_closed_total{reason}` (idle, query_limit): closed by the server
    pub fn render_prometheus(&self, out: &mut String) {
        let l = |c: &AtomicU64| c.load(Ordering::Relaxed);
        let _ = writeln!(out, "# HELP lagran_dns_queries_total DNS queries received by the userspace responder.");
        let _ = writeln!(out, "# TYPE lagran_dns_queries_total counter");
        let _ = writeln!(out, "lagran_dns_queries_total{{transport=\"udp\"}} {}", l(&self.queries_udp));
        let _ = writeln!(out, "lagran_dns_queries_total{{transport=\"tcp\"}} {}", l(&self.queries_tcp));
        let _ = writeln!(out, "lagran_dns_queries_total{{transport=\"dot\"}} {}", l(&self.queries_dot));
        let _ = writeln!(out, "lagran_dns_queries_total{{transport=\"doq\"}} {}", l(&self.queries_doq));
        let _ = writeln!(out, "# HELP lagran_dns_responses_total DNS responses by outcome and RCODE.");
        let _ = writeln!(out, "# TYPE lagran_dns_responses_total counter");
        for o in Outcome::ALL {
            if o == Outcome::Dropped {
                continue;
            }
            let _ = writeln!(
                out,
                "lagran_dns_responses_total{{outcome=\"{}\",rcode=\"{}\"}} {}",
                o.as_str(),
                o.rcode_name(),
                self.outcome(o)
            );
        }
        let _ = writeln!(out, "# HELP lagran_dns_dropped_total Packets dropped without a response, by reason.");
        let _ = writeln!(out, "# TYPE lagran_dns_dropped_total counter");
        for r in DropReason::ALL {
            let _ = writeln!(
                out,
                "lagran_dns_dropped_total{{reason=\"{}\"}} {}",
                r.as_str(),
                l(&self.dropped_by[r as usize])
            );
        }
        let labelled: [(&str, &str, &str, &str, &AtomicU64); 4] = [
            (
                "lagran_dns_tcp_rejected_total",
                "TCP connections refused at a limit.",
                "limit",
                "total",
                &self.tcp_rejected,
            ),
            ("lagran_dns_tcp_rejected_total", "", "limit", "per_client", &self.tcp_rejected_per_client),
            (
                "lagran_dns_tcp_closed_total",
                "TCP connections closed by the server.",
                "reason",
                "idle",
                &self.tcp_idle_closed,
            ),
            ("lagran_dns_tcp_closed_total", "", "reason", "query_limit", &self.tcp_query_limit_closed),
        ];
        for (name, help, label, value, c) in labelled {
            if !help.is_empty() {
                let _ = writeln!(out, "# HELP {name} {help}");
                let _ = writeln!(out, "# TYPE {name} counter");
            }
            let _ = writeln!(out, "{name}{{{label}=\"{value}\"}} {}", l(c));
        }
        let simple: [(&str, &str, &AtomicU64); 7] = [
            ("lagran_dns_truncated_total", "UDP responses sent with TC=1.", &self.truncated),
            ("lagran_dns_malformed_total", "Malformed packets (dropped or FORMERR).", &self.malformed),
            (
                "lagran_dns_stale_served_total",
                "Answers served from a route table older than DNS_STALE_SECS.",
                &self.stale_served,
            ),
            (
                "lagran_dns_tls_rejected_total",
                "DoT and DoQ connections refused at the connection limit.",
                &self.tls_rejected,
            ),
            (
                "lagran_dns_tls_handshake_failed_total",
                "DoT and DoQ handshakes that failed or timed out.",
                &self.tls_handshake_failed,
            ),
            ("lagran_dns_oversized_total", "UDP datagrams larger than the receive buffer.", &self.oversized),
            ("lagran_dns_io_errors_total", "Socket errors survived by the listeners.", &self.io_errors),
        ];
        for (name, help, c) in simple {
            let _ = writeln!(out, "# HELP {name} {help}");
            let _ = writeln!(out, "# TYPE {name} counter");
            let _ = writeln!(out, "{name} {}", l(c));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn records_and_renders() {
        let c = DnsCounters::new();
        let r = |outcome, truncated, stale| Reply {
            bytes: None,
            outcome,
            client: None,
            truncated,
            stale,
            scheduled: false,
            dropped: (outcome == Outcome::Dropped).then_some(DropReason::BadQuestion),
            cookie: None,
        };
        c.record(Transport::Udp, &r(Outcome::Answered, true, true));
        c.record(Transport::Tcp, &r(Outcome::FormErr, false, false));
        c.record(Transport::Udp, &r(Outcome::Dropped, false, false));
        let snap: std::collections::HashMap<_, _> = c.snapshot().into_iter().collect();
        assert_eq!(snap["queries_udp"], 2);
        assert_eq!(snap["queries_tcp"], 1);
        assert_eq!(snap["answered"], 1);
        assert_eq!(snap["malformed"], 2);
        assert_eq!(snap["truncated"], 1);
        assert_eq!(snap["stale_served"], 1);
        let mut s = String::new();
        c.render_prometheus(&mut s);
        assert!(s.contains("lagran_dns_responses_total{outcome=\"answered\",rcode=\"NOERROR\"} 1"), "{s}");
        assert!(s.contains("lagran_dns_responses_total{outcome=\"formerr\",rcode=\"FORMERR\"} 1"), "{s}");
        assert!(s.contains("lagran_dns_dropped_total{reason=\"bad_question\"} 1"), "{s}");
        assert!(s.contains("lagran_dns_dropped_total{reason=\"short\"} 0"), "{s}");
        assert_eq!(snap["dropped_bad_question"], 1);
        assert!(s.contains("lagran_dns_queries_total{transport=\"tcp\"} 1"), "{s}");
        assert!(c.answered_prefixes.top(1).is_empty(), "no scheduled answer yet");
    }

    #[test]
    fn scheduled_answers_count_their_client_prefix() {
        use super::super::answer::ClientInfo;
        let c = DnsCounters::new();
        let reply = |ecs: Option<&str>, outcome| Reply {
            bytes: None,
            outcome,
            client: Some(ClientInfo {
                address: "10.0.0.1".parse().unwrap(),
                ecs: ecs.map(|a| (a.parse().unwrap(), 24, 0)),
                name: "edge.lagran.net".into(),
                node: None,
            }),
            truncated: false,
            stale: false,
            scheduled: true,
            dropped: None,
            cookie: None,
        };
        c.record(Transport::Udp, &reply(Some("58.60.1.0"), Outcome::Answered));
        c.record(Transport::Udp, &reply(Some("58.60.1.0"), Outcome::Answered));
        c.record(Transport::Udp, &reply(None, Outcome::Answered));
        c.record(Transport::Udp, &reply(Some("58.60.9.0"), Outcome::ServFail));
        let top: Vec<String> = c.answered_prefixes.top(5).iter().map(|(n, q)| format!("{n}={q}")).collect();
        assert_eq!(top, ["58.60.1.0/24=2", "10.0.0.0/24=1"], "the ECS subnet, else the source");
    }
}
