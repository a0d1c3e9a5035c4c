//! Server cookies (RFC 7873, RFC 9018 layout) exactly as userspace's
//! `dns::cookie` makes and checks them, from the secret and clock userspace
//! publishes in `lagran_cookie`:
//! - a client cookie alone: a fresh server cookie (version 1, reserved 0, now, hash);
//! - a 16-octet server cookie, version 1, timestamp within [now − 1 h, now + 5 min]
//!   and the hash of the current secret: valid; echoed when at most half an
//!   hour old, else made afresh;
//! - any other server cookie: a fresh one, unless a previous secret is still in
//!   its grace (userspace then checks it: passed).

use lagran_common::{
    cookie::{hash_v4, hash_v6},
    counters::Counter,
};

use crate::{Client, maps, query::Query};

/// RFC 9018 §4.3 bounds, as in userspace.
const MAX_AGE_SECS: i32 = 3600;
const MAX_AHEAD_SECS: i32 = 300;
const REISSUE_AFTER_SECS: i32 = 1800;

/// The server cookie of the response, as little-endian words of its octets
/// 0–7 (version, reserved, timestamp) and 8–15 (hash).
#[derive(Clone, Copy)]
pub struct ServerCookie {
    pub head: u64,
    pub hash: u64,
    /// 1 when the query's server cookie was valid (exempt from rate limiting).
    pub valid: u32,
}

#[inline(always)]
fn hash(k0: u64, k1: u64, client: u64, head: u64, source: &Client) -> u64 {
    if source.v6 == 0 {
        hash_v4(k0, k1, client, head, (source.addr.lo as u32).swap_bytes())
    } else {
        hash_v6(k0, k1, client, head, [source.addr.hi.swap_bytes(), source.addr.lo.swap_bytes()])
    }
}

#[inline(always)]
pub fn respond(q: &Query, source: &Client) -> Result<ServerCookie, Counter> {
    let c = maps::cookie_config().ok_or(Counter::Cookie)?;
    if c.enabled == 0 {
        return Err(Counter::Cookie);
    }
    // Userspace hashes an IPv4-mapped source as IPv4; such a packet is rare enough to pass.
    let a = source.addr;
    if source.v6 != 0 && a.hi == 0 && a.lo >> 32 == 0xffff {
        return Err(Counter::Cookie);
    }
    let now = if c.fixed_now != 0 {
        c.fixed_now
    } else {
        let mono = crate::clock::now_ns() as i64;
        (mono.wrapping_add(c.unix_offset_ns) as u64 / 1_000_000_000) as u32
    };
    let fresh_head = 1u64 | ((now.swap_bytes() as u64) << 32);
    let mut valid = 0;
    if crate::dns::opaque(&q.cookie) == 2 {
        let head = q.cookie_head;
        let ts = ((head >> 32) as u32).swap_bytes();
        // Serial-number arithmetic, as userspace.
        let age = now.wrapping_sub(ts) as i32;
        if head & 0xff == 1 && (-MAX_AHEAD_SECS..=MAX_AGE_SECS).contains(&age) {
            if hash(c.k0, c.k1, q.cookie_client, head, source) == q.cookie_hash {
                if age <= REISSUE_AFTER_SECS {
                    return Ok(ServerCookie { head, hash: q.cookie_hash, valid: 1 });
                }
                valid = 1;
            } else if c.previous_in_grace != 0 {
                return Err(Counter::Cookie);
            }
        }
    }
    Ok(ServerCookie { head: fresh_head, hash: hash(c.k0, c.k1, q.cookie_client, fresh_head, source), valid })
}
