//! RTT samples aggregated per key (a client subnet, or a subnet and a node) into a
//! bounded table of fixed-size summaries.
//!
//! A summary keeps the number of samples and a uniform reservoir of
//! [`RESERVOIR`] of them (Vitter's algorithm R), whose median is reported: one
//! stalled connection moves a median by one rank, where it would drag a mean. Adding
//! a sample allocates nothing: the map is allocated at its full capacity up front,
//! and eviction works in a scratch buffer kept beside it. When the table is full, a
//! new key first evicts the eighth of the keys with the fewest samples, so the busy
//! subnets a report favours stay. Reports [`RttTable::drain`] the table: each
//! interval starts afresh, and the control plane keeps the window.

use std::collections::HashMap;
use std::hash::Hash;
use std::sync::Mutex;
use std::time::Duration;

/// Samples kept per key; odd, so the median is one of them.
pub const RESERVOIR: usize = 15;

/// A key's sample count and reservoir, in microseconds.
#[derive(Debug, Clone, Copy)]
pub struct RttSummary {
    samples: u32,
    kept: [u32; RESERVOIR],
}

impl RttSummary {
    const EMPTY: RttSummary = RttSummary { samples: 0, kept: [0; RESERVOIR] };

    /// Adds a sample; `random` picks the reservoir slot once it is full.
    fn add(&mut self, micros: u32, random: u32) {
        let n = self.samples as usize;
        if n < RESERVOIR {
            self.kept[n] = micros;
        } else {
            let slot = random as usize % (n + 1);
            if slot < RESERVOIR {
                self.kept[slot] = micros;
            }
        }
        self.samples = self.samples.saturating_add(1);
    }

    pub fn samples(&self) -> u32 {
        self.samples
    }

    /// The reservoir's median (the upper one of an even count).
    pub fn median(&self) -> Duration {
        let n = (self.samples as usize).min(RESERVOIR);
        let mut kept = self.kept;
        let (_, median, _) = kept[..n.max(1)].select_nth_unstable(n / 2);
        Duration::from_micros(u64::from(*median))
    }
}

/// One key's summary as a report takes it.
#[derive(Debug, Clone, PartialEq)]
pub struct RttEntry<K> {
    pub key: K,
    pub samples: u32,
    pub median: Duration,
}

#[derive(Debug)]
struct Inner<K> {
    map: HashMap<K, RttSummary>,
    /// Sample counts, for choosing what to evict without allocating.
    scratch: Vec<u32>,
    rng: u32,
}

/// At most `max_keys` summaries, shared by the connections that record into it.
#[derive(Debug)]
pub struct RttTable<K> {
    max_keys: usize,
    inner: Mutex<Inner<K>>,
}

impl<K: Hash + Eq + Clone> RttTable<K> {
    pub fn new(max_keys: usize) -> RttTable<K> {
        let max_keys = max_keys.max(1);
        let inner =
            Inner { map: HashMap::with_capacity(max_keys), scratch: Vec::with_capacity(max_keys), rng: 0x9e37_79b9 };
        RttTable { max_keys, inner: Mutex::new(inner) }
    }

    /// Records one RTT sample for `key` (saturating at `u32::MAX` µs, over an hour).
    pub fn record(&self, key: &K, rtt: Duration) {
        let micros = u32::try_from(rtt.as_micros()).unwrap_or(u32::MAX);
        let mut inner = self.inner.lock().unwrap_or_else(|e| e.into_inner());
        // xorshift32: a slot choice for the reservoir, not a secret.
        let mut x = inner.rng;
        x ^= x << 13;
        x ^= x >> 17;
        x ^= x << 5;
        inner.rng = x;
        if !inner.map.contains_key(key) && inner.map.len() >= self.max_keys {
            inner.evict_least_sampled(self.max_keys);
        }
        if let Some(summary) = inner.map.get_mut(key) {
            summary.add(micros, x);
        } else {
            let mut summary = RttSummary::EMPTY;
            summary.add(micros, x);
            inner.map.insert(key.clone(), summary);
        }
    }

    pub fn len(&self) -> usize {
        self.inner.lock().unwrap_or_else(|e| e.into_inner()).map.len()
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Takes every summary out; returns the `max` with the most samples, busiest first.
    pub fn drain(&self, max: usize) -> Vec<RttEntry<K>> {
        let mut inner = self.inner.lock().unwrap_or_else(|e| e.into_inner());
        let mut all: Vec<(K, RttSummary)> = inner.map.drain().collect();
        drop(inner);
        all.sort_unstable_by_key(|(_, s)| std::cmp::Reverse(s.samples));
        all.truncate(max);
        all.into_iter().map(|(key, s)| RttEntry { key, samples: s.samples, median: s.median() }).collect()
    }
}

impl<K: Hash + Eq> Inner<K> {
    /// Removes an eighth of `max_keys` (at least one), those with the fewest samples.
    fn evict_least_sampled(&mut self, max_keys: usize) {
        let n = (max_keys / 8).max(1);
        self.scratch.clear();
        self.scratch.extend(self.map.values().map(|s| s.samples));
        let (_, &mut cutoff, _) = self.scratch.select_nth_unstable(n - 1);
        let below = self.scratch.iter().filter(|&&c| c < cutoff).count();
        let mut at_cutoff = n - below;
        self.map.retain(|_, s| {
            if s.samples < cutoff {
                return false;
            }
            if s.samples == cutoff && at_cutoff > 0 {
                at_cutoff -= 1;
                return false;
            }
            true
        });
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ms(v: u64) -> Duration {
        Duration::from_millis(v)
    }

    #[test]
    fn the_median_ignores_an_outlier() {
        let t = RttTable::new(4);
        for v in [40, 42, 41, 43, 5000] {
            t.record(&"a", ms(v));
        }
        let got = t.drain(10);
        assert_eq!(got, vec![RttEntry { key: "a", samples: 5, median: ms(42) }]);
        assert!(t.is_empty(), "a report starts the next interval afresh");
    }

    #[test]
    fn the_reservoir_stays_representative_past_its_size() {
        let t = RttTable::new(4);
        // 1 000 samples: 900 near 20 ms, 100 at 900 ms.
        for i in 0..1000u64 {
            t.record(&"a", if i % 10 == 0 { ms(900) } else { ms(20 + i % 3) });
        }
        let e = &t.drain(1)[0];
        assert_eq!(e.samples, 1000);
        assert!(e.median >= ms(20) && e.median <= ms(22), "median {:?}", e.median);
    }

    #[test]
    fn the_table_is_bounded_and_keeps_the_busy_keys() {
        let t = RttTable::new(16);
        for _ in 0..50 {
            t.record(&0u32, ms(10));
        }
        for k in 1..1000u32 {
            t.record(&k, ms(30));
            assert!(t.len() <= 16, "bounded at 16, got {}", t.len());
        }
        let got = t.drain(3);
        assert_eq!(got.len(), 3, "a report takes at most what it asks");
        assert_eq!((got[0].key, got[0].samples), (0, 50), "the busiest key survived every eviction");
        assert!(t.is_empty());
    }

    #[test]
    fn eviction_drops_an_eighth_with_the_fewest_samples() {
        let t = RttTable::new(8);
        for k in 0..8u32 {
            for _ in 0..=k {
                t.record(&k, ms(1));
            }
        }
        t.record(&100, ms(1));
        let keys: Vec<u32> = t.drain(100).into_iter().map(|e| e.key).collect();
        assert_eq!(keys.len(), 8);
        assert!(!keys.contains(&0) && keys.contains(&100), "key 0 (one sample) made room: {keys:?}");
    }
}
