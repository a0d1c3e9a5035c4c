//! Deciding the response to a well-formed QUERY with one question: what the
//! route table knows of the name (scheduled, NS host, node hostname,
//! `whoami`, `_version`, missing), then the records for the question's type.

use std::net::IpAddr;

use hickory_proto::rr::rdata::{A, AAAA, CNAME, TXT};
use hickory_proto::rr::{Name, RData, Record};

use super::context::AnswerContext;
use super::draft::{Draft, OptOut};
use super::parse::Question;
use super::reply::{ClientInfo, Outcome};
use super::signed::key_answer;
use super::wire::{
    CLASS_IN, RCODE_NOERROR, RCODE_REFUSED, RCODE_SERVFAIL, TYPE_A, TYPE_AAAA, TYPE_ANY, TYPE_AXFR, TYPE_CDNSKEY,
    TYPE_CDS, TYPE_CNAME, TYPE_DNSKEY, TYPE_IXFR, TYPE_NS, TYPE_NSEC3PARAM, TYPE_SOA, TYPE_TXT,
};
use super::zone_records::{
    fqdn, glue_answer, is_empty_non_terminal, negative, negative_ttl, nodata, ns_answer, nxdomain, soa_answer,
    soa_record_at,
};
use crate::dns::ecs::Ecs;
use crate::dns::settings::DnsSettings;
use crate::model::Zone;
use crate::route_table::{Answer, NameLookup, NodeHost, ScheduledName};

/// Scheduled answers never carry more than this many addresses (primary + 3 backups).
pub const MAX_ANSWERS: usize = 4;

/// The effective TTL of a scheduled answer ([`DnsSettings::served_ttl`]).
pub fn scheduled_ttl(route_ttl: u32, settings: &DnsSettings) -> u32 {
    settings.served_ttl(route_ttl)
}

/// Whether the table is stale under `settings.stale_secs`
/// ([`crate::confirmation::is_stale`], the one staleness policy).
pub fn is_stale(confirmed_at_ms: i64, settings: &DnsSettings, now_ms: i64) -> bool {
    crate::confirmation::is_stale(confirmed_at_ms, settings.stale_secs, now_ms)
}

/// Decides the response to a well-formed QUERY with one question, and
/// records in `client` the node answered and the ECS scope.
pub(super) fn resolve<'q>(
    ctx: &AnswerContext<'_>,
    question: &'q Question,
    ecs: Option<Ecs>,
    opt: Option<OptOut>,
    client: &mut ClientInfo,
) -> Draft<'q> {
    let r = Draft::new(Some(question), opt, RCODE_NOERROR, true, Outcome::Answered);
    // RFC 1035 §4.1.1: "Refused - The name server refuses to perform the
    // specified operation for policy reasons." We serve class IN only, and
    // refuse ANY and zone transfers.
    if question.qclass != CLASS_IN || matches!(question.qtype, TYPE_ANY | TYPE_AXFR | TYPE_IXFR) {
        return r.error(RCODE_REFUSED, Outcome::Refused);
    }
    let table = ctx.table;
    match table.lookup(&client.name) {
        NameLookup::OutOfZone => {
            if table.version == 0 && table.zones.is_empty() {
                // No table at all, so no zones to refuse from: the fallback
                // address for `A`, SERVFAIL otherwise.
                no_table(r, question.qtype, ctx.settings)
            } else {
                r.error(RCODE_REFUSED, Outcome::Refused)
            }
        }
        NameLookup::Scheduled { zone, name } => scheduled_name(r, ctx, question, zone, name, ecs),
        NameLookup::NsHost { zone, host } => glue_answer(r, question, zone, host),
        NameLookup::NodeHost { zone, host } => {
            let r = node_host_records(r, &question.name, host, question.qtype, ctx.settings);
            if r.answer.is_empty() { nodata(r, question, zone) } else { r }
        }
        NameLookup::Whoami { zone } => txt_answer(r, question, zone, || whoami_text(ctx.source, ecs)),
        NameLookup::Version { zone } => txt_answer(r, question, zone, || version_text(ctx)),
        NameLookup::Missing { zone } => {
            if client.name == zone.name {
                // The apex exists even when it is not a scheduled name.
                match question.qtype {
                    TYPE_SOA => soa_answer(r, question, zone),
                    TYPE_NS => ns_answer(r, question, zone),
                    TYPE_DNSKEY | TYPE_CDS | TYPE_CDNSKEY | TYPE_NSEC3PARAM => key_answer(r, table, question, zone),
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

/// Any question for a scheduled name of `zone`.
fn scheduled_name<'q>(
    mut r: Draft<'q>,
    ctx: &AnswerContext<'_>,
    question: &'q Question,
    zone: &Zone,
    name: &ScheduledName,
    ecs: Option<Ecs>,
) -> Draft<'q> {
    let apex = name.name == zone.name;
    // A name the operator turned ECS off for is answered for the resolver's
    // address, and the ECS option — supported but not used — is echoed with
    // SCOPE 0 (RFC 7871, quoted in `scheduled`): no ECS is passed.
    let used = if name.ecs { ecs } else { None };
    let asked = ScheduledQuestion { question, zone, name, ecs: used };
    match question.qtype {
        TYPE_A | TYPE_AAAA => {
            r.scheduled = true;
            scheduled(r, ctx, asked)
        }
        TYPE_SOA if apex => soa_answer(r, question, zone),
        TYPE_NS if apex => ns_answer(r, question, zone),
        TYPE_DNSKEY | TYPE_CDS | TYPE_CDNSKEY | TYPE_NSEC3PARAM if apex => key_answer(r, ctx.table, question, zone),
        // RFC 1034 §4.3.2 step 3a: "If the data at the node is a CNAME, and
        // QTYPE doesn't match CNAME, copy the CNAME RR into the answer section"
        // — whatever the QTYPE, so a name in CNAME mode answers its CNAME
        // (for this client) to every type; `scheduled` decides the rest.
        _ if ctx.table.version != 0
            && client_answer(name, ctx.source, used).is_some_and(|(a, _)| a.hostname.is_some()) =>
        {
            scheduled(r, ctx, asked)
        }
        _ => nodata(r, question, zone),
    }
}

/// One TXT record of `text` (TTL 0) for a TXT question, NODATA otherwise.
fn txt_answer<'q>(mut r: Draft<'q>, question: &'q Question, zone: &Zone, text: impl FnOnce() -> String) -> Draft<'q> {
    if question.qtype != TYPE_TXT {
        return nodata(r, question, zone);
    }
    r.answer.push(Record::from_rdata(question.name.clone(), 0, RData::TXT(TXT::new(vec![text()]))));
    r
}

/// The text of `whoami`: the packet's source and the query's ECS option.
fn whoami_text(source: IpAddr, ecs: Option<Ecs>) -> String {
    let ecs_text = match ecs {
        Some(e) => format!("{}/{}", e.address(), e.source()),
        None => "none".to_string(),
    };
    format!("client={source} ecs={ecs_text}")
}

/// The text of `_version`: the table's version and age, and how long ago the
/// control plane confirmed it (`confirmed_ms_ago` is -1 when it never did).
fn version_text(ctx: &AnswerContext<'_>) -> String {
    let (now_ms, confirmed_at_ms) = (ctx.now_ms, ctx.confirmed_at_ms);
    let confirmed_ms_ago = if confirmed_at_ms == 0 { -1 } else { now_ms.saturating_sub(confirmed_at_ms).max(0) };
    format!(
        "version={} generated_at={} age_ms={} confirmed_ms_ago={}",
        ctx.table.version,
        ctx.table.generated_at_ms,
        now_ms.saturating_sub(ctx.table.generated_at_ms),
        confirmed_ms_ago
    )
}

/// A question for a scheduled name of `zone`, as [`scheduled`] answers it.
#[derive(Clone, Copy)]
struct ScheduledQuestion<'q, 't> {
    question: &'q Question,
    zone: &'t Zone,
    name: &'t ScheduledName,
    /// The query's ECS option, when the name uses ECS.
    ecs: Option<Ecs>,
}

/// `A`/`AAAA` for a scheduled name, or any type for a name in CNAME mode.
fn scheduled<'q>(mut r: Draft<'q>, ctx: &AnswerContext<'_>, asked: ScheduledQuestion<'q, '_>) -> Draft<'q> {
    let ScheduledQuestion { question, zone, name, ecs } = asked;
    let (table, settings) = (ctx.table, ctx.settings);
    let v4 = question.qtype == TYPE_A;
    if table.version == 0 {
        // A table without a version is no table: nothing was computed yet.
        return no_table(r, question.qtype, settings);
    }
    let Some((ans, matched)) = client_answer(name, ctx.source, ecs) else {
        // A table that does not cover this client is treated like no table.
        return no_table(r, question.qtype, settings);
    };
    // RFC 7871 §12.1: "If the option is supported but not actually used for
    // generating a response, its SCOPE PREFIX-LENGTH MUST be set to 0." A
    // SOURCE PREFIX-LENGTH of 0 means the packet's source address was used.
    let scope = if ecs.is_some_and(|e| e.source() > 0) { matched } else { 0 };
    let ttl = scheduled_ttl(ans.ttl, settings);
    let stale = is_stale(ctx.confirmed_at_ms, settings, ctx.now_ms);
    if stale && let Some(fallback) = settings.fallback_ip {
        // A table not confirmed for DNS_STALE_SECS is not trusted when
        // DNS_FALLBACK_IP is set: that address answers instead, the same for
        // every client, so scope 0.
        r.outcome = Outcome::Fallback;
        if v4 {
            r.answer.push(Record::from_rdata(question.name.clone(), ttl, RData::A(A(fallback))));
            return r;
        }
        // No IPv6 fallback: NODATA steers clients to the A fallback.
        return negative(r, question, zone);
    }
    if let Some(host) = ans.hostname.as_deref() {
        let mut r = cname_answer(r, ctx, question, host, ttl);
        r.scope = scope;
        r.stale = stale;
        r.node = ans.node.clone();
        return r;
    }
    let mut r = if v4 {
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
        r
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
        r
    };
    r.scope = scope;
    r.stale = stale;
    r.node = ans.node.clone();
    r
}

/// A name in CNAME mode: `CNAME <hostname of the chosen node>`, then the
/// hostname's own records when this server is authoritative for it. A node
/// without a hostname never gets here: the builder leaves its answer in
/// address mode, so a partition whose best node has no hostname still
/// reaches that node (its addresses are the one thing the chosen node can be
/// reached by) rather than losing its answer to a configuration gap.
fn cname_answer<'q>(
    mut r: Draft<'q>,
    ctx: &AnswerContext<'_>,
    question: &'q Question,
    host: &str,
    ttl: u32,
) -> Draft<'q> {
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
    let NameLookup::NodeHost { zone, host } = ctx.table.lookup(host) else { return r };
    let before = r.answer.len();
    let mut r = node_host_records(r, &target, host, question.qtype, ctx.settings);
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
    mut r: Draft<'q>,
    owner: &Name,
    host: &NodeHost,
    qtype: u16,
    settings: &DnsSettings,
) -> Draft<'q> {
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
/// packet's source, `ecs` the option when the name uses ECS. The decision is
/// [`ScheduledName::served`], the one the HTTP 302 entry point, `lagran
/// explain` and `/api/v1/schedule` take too.
fn client_answer(name: &ScheduledName, source: IpAddr, ecs: Option<Ecs>) -> Option<(&Answer, u8)> {
    name.served(source, ecs.and_then(|e| e.client())).map(|s| (s.answer, s.scope))
}

/// No route table yet: DNS_FALLBACK_IP for `A`, SERVFAIL otherwise.
fn no_table<'q>(mut r: Draft<'q>, qtype: u16, settings: &DnsSettings) -> Draft<'q> {
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
