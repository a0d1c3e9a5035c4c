//! Per-client token buckets.
//!
//! Each client address (an IPv6 client by its /64, which one subscriber usually holds
//! whole) has a bucket of `burst` tokens refilled at `rps` per second; a request takes
//! one or is refused. The map is bounded: when it is full, buckets that have refilled
//! completely are dropped first (forgetting them changes nothing), then the least
//! recently seen eighth.

use std::collections::HashMap;
use std::net::{IpAddr, Ipv6Addr};
use std::sync::Mutex;
use std::time::Instant;

#[derive(Debug)]
pub struct RateLimiter {
    rps: f64,
    burst: f64,
    max_clients: usize,
    buckets: Mutex<HashMap<IpAddr, Bucket>>,
}

#[derive(Debug, Clone, Copy)]
struct Bucket {
    tokens: f64,
    last: Instant,
}

impl Bucket {
    fn refilled(&self, now: Instant, rps: f64, burst: f64) -> f64 {
        (self.tokens + now.saturating_duration_since(self.last).as_secs_f64() * rps).min(burst)
    }
}

/// The key a client is limited under.
pub(crate) fn client_key(ip: IpAddr) -> IpAddr {
    match ip.to_canonical() {
        IpAddr::V6(v6) => IpAddr::V6(Ipv6Addr::from(v6.to_bits() & !((1u128 << 64) - 1))),
        v4 => v4,
    }
}

impl RateLimiter {
    pub fn new(rps: f64, burst: u32, max_clients: usize) -> RateLimiter {
        RateLimiter { rps, burst: f64::from(burst.max(1)), max_clients: max_clients.max(1), buckets: Mutex::default() }
    }

    /// Takes a token for `ip` at `now`; false means the request must be refused.
    pub fn allow(&self, ip: IpAddr, now: Instant) -> bool {
        let key = client_key(ip);
        let mut buckets = self.buckets.lock().unwrap_or_else(|e| e.into_inner());
        if !buckets.contains_key(&key) && buckets.len() >= self.max_clients {
            self.evict(&mut buckets, now);
        }
        let bucket = buckets.entry(key).or_insert(Bucket { tokens: self.burst, last: now });
        let tokens = bucket.refilled(now, self.rps, self.burst);
        let allowed = tokens >= 1.0;
        *bucket = Bucket { tokens: if allowed { tokens - 1.0 } else { tokens }, last: now };
        allowed
    }

    fn evict(&self, buckets: &mut HashMap<IpAddr, Bucket>, now: Instant) {
        buckets.retain(|_, b| b.refilled(now, self.rps, self.burst) < self.burst);
        if buckets.len() < self.max_clients {
            return;
        }
        let mut seen: Vec<Instant> = buckets.values().map(|b| b.last).collect();
        let n = (seen.len() / 8).max(1);
        let (_, &mut cutoff, _) = seen.select_nth_unstable(n - 1);
        buckets.retain(|_, b| b.last > cutoff);
    }

    pub fn tracked_clients(&self) -> usize {
        self.buckets.lock().unwrap_or_else(|e| e.into_inner()).len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    fn ip(s: &str) -> IpAddr {
        s.parse().unwrap()
    }

    #[test]
    fn burst_then_refill() {
        let rl = RateLimiter::new(2.0, 3, 10);
        let t0 = Instant::now();
        let a = ip("192.0.2.1");
        assert!((0..3).all(|_| rl.allow(a, t0)), "the burst passes");
        assert!(!rl.allow(a, t0), "the fourth request at once is refused");
        assert!(rl.allow(ip("192.0.2.2"), t0), "another client has its own bucket");
        assert!(rl.allow(a, t0 + Duration::from_millis(500)), "one token back after 0.5 s at 2 rps");
        assert!(!rl.allow(a, t0 + Duration::from_millis(500)));
    }

    #[test]
    fn ipv6_clients_share_their_64() {
        let rl = RateLimiter::new(1.0, 1, 10);
        let t0 = Instant::now();
        assert!(rl.allow(ip("2001:db8:1:2::1"), t0));
        assert!(!rl.allow(ip("2001:db8:1:2::ffff"), t0), "same /64");
        assert!(rl.allow(ip("2001:db8:1:3::1"), t0));
        assert!(rl.allow(ip("::ffff:192.0.2.9"), t0));
        assert!(!rl.allow(ip("192.0.2.9"), t0), "a v4-mapped address is its v4 client");
    }

    #[test]
    fn map_stays_bounded() {
        let rl = RateLimiter::new(1.0, 2, 16);
        let t0 = Instant::now();
        for i in 0..1000u32 {
            let now = t0 + Duration::from_micros(u64::from(i));
            assert!(rl.allow(IpAddr::from((0x0a00_0000u32 + i).to_be_bytes()), now), "a new client gets its burst");
            assert!(rl.tracked_clients() <= 16, "bounded at 16, got {}", rl.tracked_clients());
        }
    }

    #[test]
    fn refilled_buckets_go_first() {
        let rl = RateLimiter::new(1.0, 2, 4);
        let t0 = Instant::now();
        for i in 0..4u8 {
            rl.allow(IpAddr::from([192, 0, 2, i]), t0);
        }
        assert_eq!(rl.tracked_clients(), 4);
        rl.allow(ip("198.51.100.1"), t0 + Duration::from_secs(5));
        assert_eq!(rl.tracked_clients(), 1, "all four had refilled and were forgotten");
    }
}
