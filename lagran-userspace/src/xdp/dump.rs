//! `lagran maps dump`: every map of the fast path as text.

use std::fmt::Write as _;
use std::net::{Ipv4Addr, Ipv6Addr};

use lagran_common::{
    answers::{self, AnswerV4, AnswerV6, MAX_ADDRS},
    config, cookie, counters, listen, names,
    route_v4::{self, RouteValue},
    route_v6,
    rrsig::{self, FIXED_RDATA_LEN, HEAD_LEN, RrsigKey, RrsigValue},
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
        if self.has_rrsig() {
            write_rrsigs(&mut out, self.rrsigs()?, crate::clock::now_ms() / 1000);
        }
        let _ = writeln!(out, "{}:", counters::MAP_NAME);
        for (c, v) in self.counters()?.iter() {
            let _ = writeln!(out, "  {:<18} {v}", c.name());
        }
        Ok(out)
    }
}

/// `lagran_rrsig`'s entries sorted by name id, answer id and type: each
/// RRSIG's length as sent, algorithm, key tag and expiry (`now`: Unix seconds).
fn write_rrsigs(out: &mut String, mut entries: Vec<(RrsigKey, RrsigValue)>, now: i64) {
    entries.sort_by_key(|(k, _)| (k.name_id, k.answer_id, k.aaaa));
    let _ = writeln!(out, "{} ({} entries):", rrsig::MAP_NAME, entries.len());
    for (k, v) in &entries {
        let ty = if k.aaaa == 0 { "A" } else { "AAAA" };
        let _ = writeln!(
            out,
            "  name={:<4} answer #{:<6} {ty:<4} -> {}",
            k.name_id,
            k.answer_id,
            rrsig_text(v.bytes(), now)
        );
    }
}

/// An RRSIG record as the program sends it (see `lagran_common::rrsig`),
/// read by hand: its fixed RDATA fields sit at fixed offsets (RFC 4034 §3.1),
/// and the record starts with a compression pointer a message decoder would
/// need the question for.
fn rrsig_text(record: &[u8], now: i64) -> String {
    let Some(rdata) = record.get(HEAD_LEN..HEAD_LEN + FIXED_RDATA_LEN) else {
        return format!("len={} (shorter than an RRSIG)", record.len());
    };
    let be32 = |o: usize| u32::from_be_bytes([rdata[o], rdata[o + 1], rdata[o + 2], rdata[o + 3]]);
    let (algorithm, expiration, key_tag) = (rdata[2], be32(8), u16::from_be_bytes([rdata[16], rdata[17]]));
    let left = i64::from(expiration) - now;
    let when =
        if left <= 0 { "EXPIRED".to_string() } else { format!("in {}d{:02}h", left / 86_400, left % 86_400 / 3600) };
    format!("len={} algorithm={algorithm} key_tag={key_tag} expires={expiration} ({when})", record.len())
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_rrsig_entry_shows_its_length_algorithm_key_tag_and_expiry() {
        // type covered A, algorithm 13, 3 labels, original TTL 30, expiration,
        // inception, key tag 4242, signer `x.`, a four-octet signature.
        let now = 1_800_000_000i64;
        let expires = (now + 2 * 86_400 + 5 * 3600 + 59) as u32;
        let mut rdata = vec![0, 1, 13, 3, 0, 0, 0, 30];
        rdata.extend(expires.to_be_bytes());
        rdata.extend(1_700_000_000u32.to_be_bytes());
        rdata.extend(4242u16.to_be_bytes());
        rdata.extend([1, b'x', 0, 9, 9, 9, 9]);
        let v = RrsigValue::new(30, &rdata).expect("fits");
        let mut out = String::new();
        write_rrsigs(&mut out, vec![(RrsigKey { name_id: 7, answer_id: 3, aaaa: 1 }, v)], now);
        assert_eq!(
            out,
            format!(
                "lagran_rrsig (1 entries):\n  name=7    answer #3      AAAA -> len={} algorithm=13 key_tag=4242 \
                 expires={expires} (in 2d05h)\n",
                HEAD_LEN + rdata.len()
            )
        );
        assert!(rrsig_text(v.bytes(), i64::from(expires) + 1).ends_with("(EXPIRED)"));
    }
}
