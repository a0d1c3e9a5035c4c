//! `lagran maps dump`: every map of the fast path as text.

use std::fmt::Write as _;
use std::net::{Ipv4Addr, Ipv6Addr};

use lagran_common::{
    answers::{self, AnswerV4, AnswerV6, MAX_ADDRS},
    config, cookie, counters, listen, names,
    route_v4::{self, RouteValue},
    route_v6,
};

use super::XdpError;
use super::maps::Maps;
use super::wire_name::wire_to_text;

impl Maps {
    /// A human-readable dump of every map (`lagran maps dump`). At most
    /// `route_limit` trie entries are listed (the trie can hold millions).
    pub fn dump(&self, route_limit: usize) -> Result<String, XdpError> {
        let mut out = String::new();
        let c = self.config()?;
        let _ = writeln!(
            out,
            "{}: dns_port={} udp_payload={} enabled={} rrl_rate={} rrl_slip={} rrl_floor={}",
            config::MAP_NAME,
            c.dns_port,
            c.udp_payload,
            c.enabled,
            c.rrl_rate,
            c.rrl_slip,
            c.rrl_floor
        );
        // Never the secret itself: a dump is pasted into tickets.
        let k = self.cookie()?;
        let _ = writeln!(
            out,
            "{}: enabled={} previous_in_grace={} unix_offset_ns={} fixed_now={} secret={}",
            cookie::MAP_NAME,
            k.enabled,
            k.previous_in_grace,
            k.unix_offset_ns,
            k.fixed_now,
            if k.k0 == 0 && k.k1 == 0 { "unset" } else { "set (not shown)" }
        );
        let listen: Vec<String> = self.listen()?.iter().map(ToString::to_string).collect();
        let _ = writeln!(out, "{}: {}", listen::MAP_NAME, listen.join(" "));
        let mut names: Vec<(String, u32)> = Vec::new();
        for v in self.names().entries() {
            names.push((wire_to_text(&v.wire().collect::<Vec<u8>>()), v.id));
        }
        names.sort();
        let _ = writeln!(out, "{} ({} entries):", names::MAP_NAME, names.len());
        for (n, id) in &names {
            let _ = writeln!(out, "  {n:<40} id={id}");
        }
        let mut used = Vec::new();
        for item in self.answers() {
            let (id, a, a6) = item?;
            if a != AnswerV4::default() || a6 != AnswerV6::default() {
                used.push((id, a, a6));
            }
        }
        let _ = writeln!(out, "{} ({} in use):", answers::MAP_NAME, used.len());
        for (id, a, a6) in &used {
            let addrs: Vec<String> = a
                .addrs
                .iter()
                .take((a.count as usize).min(MAX_ADDRS))
                .map(|b| Ipv4Addr::from(*b).to_string())
                .chain((0..(a6.count as usize).min(MAX_ADDRS)).map(|i| Ipv6Addr::from(a6.addr(i)).to_string()))
                .collect();
            let canary = if a.canary_percent > 0 {
                format!(" canary={}%->#{}", a.canary_percent, a.canary_id)
            } else {
                String::new()
            };
            let _ = writeln!(out, "  #{id:<6} ttl={:<6} [{}]{canary}", a.ttl, addrs.join(", "));
        }
        write_routes(&mut out, route_v4::MAP_NAME, self.routes4(), route_limit, 18)?;
        write_routes(&mut out, route_v6::MAP_NAME, self.routes6(), route_limit, 24)?;
        let _ = writeln!(out, "{}:", counters::MAP_NAME);
        for (c, v) in self.counters()?.iter() {
            let _ = writeln!(out, "  {:<18} {v}", c.name());
        }
        Ok(out)
    }
}

/// A trie's entries: how many, and the first `limit` of them sorted by name
/// id, block start and length (`width`: the block column's).
fn write_routes<A: Ord + std::fmt::Display>(
    out: &mut String,
    map: &str,
    entries: impl Iterator<Item = Result<(u32, A, u8, RouteValue), XdpError>>,
    limit: usize,
    width: usize,
) -> Result<(), XdpError> {
    let mut total = 0usize;
    let mut shown = Vec::new();
    for item in entries {
        let route = item?;
        total += 1;
        if shown.len() < limit {
            shown.push(route);
        }
    }
    shown.sort_by(|a, b| (a.0, &a.1, a.2).cmp(&(b.0, &b.1, b.2)));
    let _ = writeln!(out, "{map} ({total} entries, {} shown):", shown.len());
    for (name_id, addr, len, v) in shown {
        let block = format!("{addr}/{len}");
        let _ = writeln!(out, "  name={name_id:<4} {block:<width$} -> answer #{} scope /{}", v.answer_id, v.scope);
    }
    Ok(())
}
