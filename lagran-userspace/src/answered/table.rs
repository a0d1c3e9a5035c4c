//! The responder's record of the client prefixes it answered: a fixed table
//! per family of (prefix, queries) slots, each one `AtomicU64`, updated with
//! one compare-and-swap per answer. Nothing is allocated and no lock is
//! taken on the answering path; the table's size never changes.
//!
//! A client is its IPv4 /24 or IPv6 /48 (the ECS address when the query
//! carried one, else the packet's source). A prefix hashes to one slot:
//! - an empty slot (count 0) takes it with count 1;
//! - its own slot counts one more (saturating);
//! - a slot held by another prefix loses one count instead (the Misra–Gries
//!   rule on one slot): a prefix keeps its slot while it outweighs the others
//!   hashing there, and a burst of one-off clients cannot flush a heavy one.
//!
//! So the counts are approximate (a heavy prefix's count is lowered by the
//! light ones sharing its slot), and exact for a prefix alone in its slot,
//! which is what a sample weighted by queries needs. Counts cover the time
//! since the responder started. A slot packs the prefix in its high bits and
//! the count in the rest: 40 bits of count for IPv4, 16 for IPv6 (a /48 that
//! reaches 65 535 queries stays there, at most weight).

use std::net::IpAddr;
use std::sync::atomic::{AtomicU64, Ordering};

use ipnet::{IpNet, Ipv4Net, Ipv6Net};

/// Slots per family (a power of two): 2 × 4 096 × 8 bytes = 64 KiB in all.
pub const SLOTS: usize = 4_096;

/// One family's slots; `KEY_BITS` of prefix over `64 - KEY_BITS` of count.
struct Slots<const KEY_BITS: u32> {
    slots: Box<[AtomicU64]>,
    seed: u64,
}

impl<const KEY_BITS: u32> Slots<KEY_BITS> {
    const COUNT_BITS: u32 = 64 - KEY_BITS;
    const MAX_COUNT: u64 = (1 << Self::COUNT_BITS) - 1;

    fn new(seed: u64) -> Self {
        Slots { slots: (0..SLOTS).map(|_| AtomicU64::new(0)).collect(), seed }
    }

    fn index(&self, key: u64) -> usize {
        ((key ^ self.seed).wrapping_mul(0x9e37_79b9_7f4a_7c15) >> (64 - SLOTS.trailing_zeros())) as usize
    }

    fn unpack(slot: u64) -> (u64, u64) {
        (slot >> Self::COUNT_BITS, slot & Self::MAX_COUNT)
    }

    fn pack(key: u64, count: u64) -> u64 {
        (key << Self::COUNT_BITS) | count
    }

    fn add(&self, key: u64) {
        let slot = &self.slots[self.index(key)];
        let mut current = slot.load(Ordering::Relaxed);
        loop {
            let (held, count) = Self::unpack(current);
            let next = match count {
                0 => Self::pack(key, 1),
                _ if held == key => Self::pack(key, (count + 1).min(Self::MAX_COUNT)),
                _ => Self::pack(held, count - 1),
            };
            if next == current {
                return;
            }
            match slot.compare_exchange_weak(current, next, Ordering::Relaxed, Ordering::Relaxed) {
                Ok(_) => return,
                Err(seen) => current = seen,
            }
        }
    }

    /// Every held (prefix key, count).
    fn held(&self) -> impl Iterator<Item = (u64, u64)> + '_ {
        self.slots.iter().map(|s| Self::unpack(s.load(Ordering::Relaxed))).filter(|&(_, c)| c > 0)
    }
}

/// See the module doc.
pub struct AnsweredPrefixes {
    v4: Slots<24>,
    v6: Slots<48>,
}

impl std::fmt::Debug for AnsweredPrefixes {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("AnsweredPrefixes").field("held", &(self.v4.held().count() + self.v6.held().count())).finish()
    }
}

impl Default for AnsweredPrefixes {
    fn default() -> Self {
        // A per-process seed: which prefixes share a slot cannot be chosen from outside.
        let seed: u64 = rand::random();
        AnsweredPrefixes { v4: Slots::new(seed), v6: Slots::new(seed.rotate_left(17)) }
    }
}

impl AnsweredPrefixes {
    /// Counts one answer to `client` (its /24 or /48).
    pub fn record(&self, client: IpAddr) {
        match client.to_canonical() {
            IpAddr::V4(a) => self.v4.add(u64::from(u32::from(a) >> 8)),
            IpAddr::V6(a) => self.v6.add((u128::from(a) >> 80) as u64),
        }
    }

    /// The `n` prefixes with the most queries, most first (ties by prefix).
    pub fn top(&self, n: usize) -> Vec<(IpNet, u64)> {
        let v4 = self.v4.held().map(|(k, c)| (IpNet::V4(v4_net(k)), c));
        let v6 = self.v6.held().map(|(k, c)| (IpNet::V6(v6_net(k)), c));
        let mut all: Vec<(IpNet, u64)> = v4.chain(v6).collect();
        all.sort_by(|a, b| b.1.cmp(&a.1).then_with(|| a.0.cmp(&b.0)));
        all.truncate(n);
        all
    }
}

fn v4_net(key: u64) -> Ipv4Net {
    Ipv4Net::new(((key as u32) << 8).into(), 24).expect("/24 is a valid IPv4 prefix length")
}

fn v6_net(key: u64) -> Ipv6Net {
    Ipv6Net::new((u128::from(key) << 80).into(), 48).expect("/48 is a valid IPv6 prefix length")
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ip(s: &str) -> IpAddr {
        s.parse().unwrap()
    }

    #[test]
    fn answers_are_counted_per_client_prefix() {
        let t = AnsweredPrefixes::default();
        for _ in 0..5 {
            t.record(ip("58.60.0.7"));
        }
        t.record(ip("58.60.0.200"));
        t.record(ip("::ffff:58.60.0.1"));
        for _ in 0..3 {
            t.record(ip("240e:1:2:3::1"));
        }
        let top = t.top(10);
        assert_eq!(top[0], ("58.60.0.0/24".parse().unwrap(), 7), "one /24, the mapped address included");
        assert_eq!(top[1], ("240e:1:2::/48".parse().unwrap(), 3));
        assert_eq!(top.len(), 2);
        assert_eq!(t.top(1).len(), 1);
    }

    #[test]
    fn the_table_is_bounded_and_heavy_prefixes_keep_their_slots() {
        let t = AnsweredPrefixes::default();
        for _ in 0..1_000 {
            t.record(ip("1.2.3.4"));
        }
        // Ten times more one-off clients than there are slots.
        for i in 0..(10 * SLOTS as u32) {
            t.record(IpAddr::V4((0x0a00_0000 + (i << 8)).into()));
        }
        let all = t.top(usize::MAX);
        assert!(all.len() <= SLOTS, "{} entries", all.len());
        assert_eq!(all[0].0, "1.2.3.0/24".parse::<IpNet>().unwrap(), "the heavy prefix is still held");
        assert!(all[0].1 > 900, "lowered by its slot's share of one-off clients only: {}", all[0].1);
    }

    #[test]
    fn an_ipv6_count_saturates() {
        let t = AnsweredPrefixes::default();
        let s = &t.v6;
        let key = 0x240e_0001_0002;
        s.slots[s.index(key)].store(Slots::<48>::pack(key, Slots::<48>::MAX_COUNT), Ordering::Relaxed);
        t.record(ip("240e:1:2::9"));
        assert_eq!(t.top(1)[0].1, 65_535);
    }
}
