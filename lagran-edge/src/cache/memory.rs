//! The memory tier: objects bounded by bytes, evicted by a CLOCK with a small
//! hit counter per object (the "generalised CLOCK"), sharded so that a hit
//! takes no exclusive lock.
//!
//! A hit takes its shard's lock shared, finds the object and raises its
//! counter (saturating at [`MAX_HITS`]) with a relaxed atomic store: no
//! allocation, no write to anything but the object's own counter, and none at
//! all once the counter is full. Inserting, removing and evicting take one
//! shard's lock exclusively at a time.
//!
//! The byte budget is one for the whole tier (an atomic sum), not one per
//! shard, so an object may take up to the whole budget whatever the shard
//! count. To make room, the tier visits the shards in turn; in each it moves
//! that shard's clock hand: an object whose counter is above zero has it
//! lowered and is passed over, the first one at zero goes. An object hit `n`
//! times thus outlives `n` turns of the hand, so objects stored and never hit
//! (a crawler's scan, a long tail) go before the hot set, which plain
//! LRU would flush after one cache's worth of them. A visit ends after one
//! turn of the hand without a victim, so a shard whose objects were all hit
//! gives none of them up while other shards hold objects never hit. Shards are
//! visited in turn whatever they hold: keys spread by hash and each shard
//! stands for at least [`MIN_SHARD_BYTES`] of the budget, so they hold alike.
//!
//! Why not a crate: `quick_cache` (CLOCK-PRO, weighted, sharded) splits its
//! weight budget evenly among shards and admits nothing heavier than most of
//! one shard's share; with the default 256 MiB budget and four shards per core
//! on a 64-core edge that is under 1 MiB, while objects up to
//! `cache_max_object_bytes` (16 MiB by default) belong in memory. Fewer shards
//! would give back the contention this tier exists to avoid.
//!
//! Keys are shared between a shard's index and its clock (`Arc<str>`).

use std::collections::HashMap;
use std::fmt;
use std::hash::{BuildHasher, RandomState};
use std::sync::atomic::{AtomicU8, AtomicUsize, Ordering};
use std::sync::{Arc, RwLock, RwLockReadGuard, RwLockWriteGuard};

use super::CachedObject;

/// How many turns of the clock hand a hit buys, at most.
const MAX_HITS: u8 = 3;

/// The least budget a shard stands for, so that every shard holds many
/// objects; a small tier is one exact CLOCK.
const MIN_SHARD_BYTES: usize = 1 << 20;

pub struct MemoryTier {
    max_bytes: usize,
    /// Bytes charged: the objects held plus those being inserted.
    bytes: AtomicUsize,
    len: AtomicUsize,
    shards: Box<[RwLock<Shard>]>,
    hasher: RandomState,
    /// Where making room goes next (a count; the shard is it modulo their number).
    next_shard: AtomicUsize,
}

#[derive(Default)]
struct Shard {
    index: HashMap<Arc<str>, usize>,
    /// The clock: each object's place, swept in order by `hand`. It keeps the
    /// length it once grew to; places emptied are reused.
    slots: Vec<Option<Slot>>,
    /// Empty places in `slots`, reused before the clock grows.
    free: Vec<usize>,
    hand: usize,
}

struct Slot {
    key: Arc<str>,
    object: Arc<CachedObject>,
    cost: usize,
    /// Hits not yet taken back by the hand, up to [`MAX_HITS`].
    hits: AtomicU8,
}

impl Shard {
    fn get(&self, key: &str) -> Option<&Slot> {
        self.slots[*self.index.get(key)?].as_ref()
    }

    /// Swaps in a new version of `key`'s object, counted as a hit; the old
    /// one's cost, or `object` back when `key` is not here.
    fn replace(&mut self, key: &str, object: Arc<CachedObject>, cost: usize) -> Result<usize, Arc<CachedObject>> {
        let Some(&place) = self.index.get(key) else {
            return Err(object);
        };
        let slot = self.slots[place].as_mut().expect("indexed places hold a slot");
        slot.object = object;
        let hits = slot.hits.get_mut();
        *hits = (*hits + 1).min(MAX_HITS);
        Ok(std::mem::replace(&mut slot.cost, cost))
    }

    fn add(&mut self, key: Arc<str>, object: Arc<CachedObject>, cost: usize) {
        let slot = Some(Slot { key: key.clone(), object, cost, hits: AtomicU8::new(0) });
        let place = match self.free.pop() {
            Some(place) => {
                self.slots[place] = slot;
                place
            }
            None => {
                self.slots.push(slot);
                self.slots.len() - 1
            }
        };
        self.index.insert(key, place);
    }

    fn take(&mut self, place: usize) -> Option<Slot> {
        let slot = self.slots[place].take()?;
        self.index.remove(&slot.key);
        self.free.push(place);
        Some(slot)
    }

    /// Moves the hand at most one turn, taking back hits, until an object
    /// with none left goes; its cost.
    fn evict_one(&mut self) -> Option<usize> {
        for _ in 0..self.slots.len() {
            let place = self.hand;
            self.hand = (self.hand + 1) % self.slots.len();
            let Some(slot) = &mut self.slots[place] else { continue };
            let hits = slot.hits.get_mut();
            if *hits > 0 {
                *hits -= 1;
                continue;
            }
            return self.take(place).map(|slot| slot.cost);
        }
        None
    }
}

impl MemoryTier {
    pub fn new(max_bytes: usize) -> MemoryTier {
        let cores = std::thread::available_parallelism().map_or(1, |n| n.get());
        MemoryTier::with_shards(max_bytes, (cores * 4).min(max_bytes / MIN_SHARD_BYTES))
    }

    /// A tier of `shards` shards (rounded down to a power of two, at least one).
    fn with_shards(max_bytes: usize, shards: usize) -> MemoryTier {
        let shards = match shards {
            0 => 1,
            n => 1 << n.ilog2(),
        };
        MemoryTier {
            max_bytes,
            bytes: AtomicUsize::new(0),
            len: AtomicUsize::new(0),
            shards: (0..shards).map(|_| RwLock::default()).collect(),
            hasher: RandomState::new(),
            next_shard: AtomicUsize::new(0),
        }
    }

    fn shard_of(&self, key: &str) -> &RwLock<Shard> {
        // The shard count is a power of two: the low bits pick one.
        &self.shards[self.hasher.hash_one(key) as usize & (self.shards.len() - 1)]
    }

    fn read(shard: &RwLock<Shard>) -> RwLockReadGuard<'_, Shard> {
        shard.read().unwrap_or_else(|e| e.into_inner())
    }

    fn write(shard: &RwLock<Shard>) -> RwLockWriteGuard<'_, Shard> {
        shard.write().unwrap_or_else(|e| e.into_inner())
    }

    /// The object under `key`, its hit counted.
    pub fn get(&self, key: &str) -> Option<Arc<CachedObject>> {
        let shard = Self::read(self.shard_of(key));
        let slot = shard.get(key)?;
        // A lost raise between two racing hits costs nothing that matters;
        // a full counter is not written at all, so a hot object's cache line
        // stays shared between cores.
        let hits = slot.hits.load(Ordering::Relaxed);
        if hits < MAX_HITS {
            slot.hits.store(hits + 1, Ordering::Relaxed);
        }
        Some(slot.object.clone())
    }

    /// Stores `object`, evicting to make room; false when it alone is over
    /// the budget.
    pub fn insert(&self, key: String, object: Arc<CachedObject>) -> bool {
        let cost = object.cost(&key);
        if cost > self.max_bytes {
            return false;
        }
        let shard = self.shard_of(&key);
        self.bytes.fetch_add(cost, Ordering::Relaxed);
        // A new version of an object held keeps its place in the clock. (The
        // shard's guard must be gone before making room, which may lock it.)
        let replaced = Self::write(shard).replace(&key, object, cost);
        let object = match replaced {
            Ok(old) => {
                self.bytes.fetch_sub(old, Ordering::Relaxed);
                self.make_room();
                return true;
            }
            Err(object) => object,
        };
        // Room first, so the newcomer is not the one that goes.
        self.make_room();
        let mut shard = Self::write(shard);
        match shard.replace(&key, object, cost) {
            Ok(old) => {
                self.bytes.fetch_sub(old, Ordering::Relaxed);
            }
            Err(object) => {
                shard.add(key.into(), object, cost);
                self.len.fetch_add(1, Ordering::Relaxed);
            }
        }
        true
    }

    /// Evicts until the bytes charged fit the budget, or nothing is left to
    /// evict (what is over is then being inserted by other threads).
    fn make_room(&self) {
        let shards = self.shards.len();
        let mut fruitless = 0;
        // A shard's visit may only take back hits; after this many visits in
        // a row without an eviction every counter has run down to zero.
        while self.bytes.load(Ordering::Relaxed) > self.max_bytes && fruitless < shards * (MAX_HITS as usize + 2) {
            let next = self.next_shard.fetch_add(1, Ordering::Relaxed) & (shards - 1);
            match Self::write(&self.shards[next]).evict_one() {
                Some(cost) => {
                    self.release(cost);
                    fruitless = 0;
                }
                None => fruitless += 1,
            }
        }
    }

    /// Accounts for an object gone.
    fn release(&self, cost: usize) {
        self.bytes.fetch_sub(cost, Ordering::Relaxed);
        self.len.fetch_sub(1, Ordering::Relaxed);
    }

    pub fn remove(&self, key: &str) -> bool {
        let mut shard = Self::write(self.shard_of(key));
        let Some(&place) = shard.index.get(key) else {
            return false;
        };
        let slot = shard.take(place);
        drop(shard);
        slot.inspect(|slot| self.release(slot.cost)).is_some()
    }

    /// Removes every object `doomed` picks; returns their keys. Holds one
    /// shard at a time.
    pub fn remove_where(&self, mut doomed: impl FnMut(&str, &CachedObject) -> bool) -> Vec<String> {
        let mut gone = Vec::new();
        for shard in &self.shards {
            let mut shard = Self::write(shard);
            for place in 0..shard.slots.len() {
                if !shard.slots[place].as_ref().is_some_and(|slot| doomed(&slot.key, &slot.object)) {
                    continue;
                }
                if let Some(slot) = shard.take(place) {
                    self.release(slot.cost);
                    gone.push(slot.key.to_string());
                }
            }
        }
        gone
    }

    pub fn len(&self) -> usize {
        self.len.load(Ordering::Relaxed)
    }

    pub fn bytes(&self) -> usize {
        self.bytes.load(Ordering::Relaxed)
    }
}

impl fmt::Debug for MemoryTier {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("MemoryTier")
            .field("max_bytes", &self.max_bytes)
            .field("bytes", &self.bytes())
            .field("len", &self.len())
            .field("shards", &self.shards.len())
            .finish()
    }
}

#[cfg(test)]
mod tests {
    use bytes::Bytes;
    use hyper::header::HeaderMap;

    use super::*;

    fn object(key: &str, body_len: usize) -> Arc<CachedObject> {
        Arc::new(CachedObject::fresh(key, HeaderMap::new(), Bytes::from(vec![b'x'; body_len]).into()))
    }

    fn put(tier: &MemoryTier, key: &str, body_len: usize) -> bool {
        tier.insert(key.to_owned(), object(key, body_len))
    }

    /// Objects and bytes as the shards hold them, counted one by one.
    fn held(tier: &MemoryTier) -> (usize, usize) {
        tier.shards.iter().fold((0, 0), |(len, bytes), shard| {
            let shard = MemoryTier::read(shard);
            let slots = shard.slots.iter().flatten();
            assert_eq!(shard.index.len(), slots.clone().count(), "the index and the clock agree");
            (len + shard.index.len(), bytes + slots.map(|s| s.cost).sum::<usize>())
        })
    }

    #[test]
    fn bounded_by_bytes_under_inserts() {
        let budget = 20 * object("k", 100).cost("k000");
        for shards in [1, 4] {
            let tier = MemoryTier::with_shards(budget, shards);
            for i in 0..300 {
                let key = format!("k{i:03}");
                assert!(put(&tier, &key, (i * 37) % 400));
                assert!(tier.bytes() <= budget, "{} bytes over a budget of {budget}", tier.bytes());
                assert_eq!((tier.len(), tier.bytes()), held(&tier));
                assert!(tier.get(&key).is_some(), "the newest object is held");
            }
            assert!(tier.len() > 5, "evictions leave the rest of the budget in use: {}", tier.len());
        }
        let tier = MemoryTier::with_shards(budget, 1);
        assert!(!put(&tier, "big", budget), "an object over the whole budget is refused");
        assert!(put(&tier, "half", budget / 2), "an object may take much of the budget in any shard");
    }

    #[test]
    fn a_new_version_replaces_the_old_in_place() {
        let tier = MemoryTier::new(1 << 20);
        assert!(put(&tier, "k", 10) && put(&tier, "k", 1000));
        assert_eq!(tier.len(), 1);
        assert_eq!(tier.bytes(), object("k", 1000).cost("k"));
        assert_eq!(tier.get("k").map(|o| o.body.len()), Some(1000));
        assert_eq!((tier.len(), tier.bytes()), held(&tier));
        let full = MemoryTier::with_shards(3 * object("k", 0).cost("k0"), 1);
        assert!(put(&full, "k0", 0) && put(&full, "k1", 0) && put(&full, "k2", 0));
        assert!(put(&full, "k1", 10), "a larger version makes room for itself");
        assert_eq!((full.len(), full.bytes()), (2, held(&full).1));
        assert!(full.get("k1").is_some_and(|o| o.body.len() == 10), "the new version is the one kept");
    }

    #[test]
    fn a_hot_object_outlives_a_scan_that_would_flush_lru() {
        let capacity = 8;
        let tier = MemoryTier::with_shards(capacity * object("k", 0).cost("scan000"), 1);
        assert!(put(&tier, "hot", 0) && put(&tier, "cold", 0));
        for _ in 0..MAX_HITS {
            assert!(tier.get("hot").is_some());
        }
        // Twice the tier's worth of objects, each seen once: LRU would hold
        // none of what was there before.
        for i in 0..2 * capacity {
            assert!(put(&tier, &format!("scan{i:03}"), 0));
        }
        assert!(tier.get("hot").is_some(), "the object hit before the scan is still here");
        assert!(tier.get("cold").is_none(), "the one never hit went");
        assert_eq!(tier.len(), capacity);
    }

    #[test]
    fn a_referenced_object_goes_after_unreferenced_ones() {
        let one = object("k", 0).cost("k0");
        let tier = MemoryTier::with_shards(3 * one, 1);
        for k in ["k0", "k1", "k2"] {
            assert!(put(&tier, k, 0));
        }
        assert!(tier.get("k0").is_some());
        assert!(put(&tier, "k3", 0));
        assert!(tier.get("k1").is_none(), "the oldest unreferenced object went");
        assert!(tier.get("k0").is_some() && tier.get("k2").is_some() && tier.get("k3").is_some());
    }

    #[test]
    fn remove_and_remove_where() {
        let tier = MemoryTier::with_shards(1 << 20, 4);
        for i in 0..10 {
            assert!(put(&tier, &format!("a/{i}"), 10) && put(&tier, &format!("b/{i}"), 1000));
        }
        assert!(tier.remove("b/0") && !tier.remove("b/0"));
        let mut gone = tier.remove_where(|key, object| key.starts_with("a/") && object.body.len() == 10);
        gone.sort();
        assert_eq!(gone, (0..10).map(|i| format!("a/{i}")).collect::<Vec<_>>());
        assert!(tier.remove_where(|key, _| key.starts_with("a/")).is_empty(), "nothing left to purge");
        assert_eq!(tier.len(), 9);
        assert_eq!((tier.len(), tier.bytes()), held(&tier));
        assert!((1..10).all(|i| tier.get(&format!("b/{i}")).is_some()));
        assert!(put(&tier, "a/0", 10), "a purged place is used again");
        assert_eq!((tier.len(), tier.bytes()), held(&tier));
    }

    #[test]
    fn concurrent_hits_and_inserts_keep_the_counts() {
        let cost = object("k", 100).cost("hot00");
        let budget = 64 * cost;
        let tier = MemoryTier::with_shards(budget, 4);
        let hot: Vec<String> = (0..16).map(|i| format!("hot{i:02}")).collect();
        for key in &hot {
            assert!(put(&tier, key, 100));
        }
        std::thread::scope(|s| {
            for t in 0..2 {
                let tier = &tier;
                s.spawn(move || {
                    for i in 0..2000 {
                        let key = format!("t{t}/{i:04}");
                        assert!(put(tier, &key, i % 200));
                        if i % 3 == 0 {
                            tier.remove(&format!("t{t}/{:04}", i / 2));
                        }
                    }
                });
            }
            for _ in 0..4 {
                let (tier, hot) = (&tier, &hot);
                s.spawn(move || {
                    for i in 0..20_000 {
                        let key = &hot[i % hot.len()];
                        if let Some(object) = tier.get(key) {
                            assert_eq!(&object.primary, key, "a hit is the object stored under its key");
                        }
                    }
                });
            }
        });
        assert_eq!((tier.len(), tier.bytes()), held(&tier), "the counters match what is held");
        assert!(tier.bytes() <= budget);
    }
}
