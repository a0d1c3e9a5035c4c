//! The memory tier: objects bounded by bytes, least recently used out first.
//!
//! Keys are shared between the map and the recency order (`Arc<str>`), so a
//! hit, which moves its key in the order, copies no string.

use std::collections::{BTreeMap, HashMap};
use std::sync::{Arc, Mutex, MutexGuard};

use super::CachedObject;

#[derive(Debug)]
pub struct MemoryTier {
    max_bytes: usize,
    inner: Mutex<Inner>,
}

#[derive(Debug, Default)]
struct Inner {
    entries: HashMap<Arc<str>, Entry>,
    /// Last-use tick → key; the first entry is the least recently used.
    lru: BTreeMap<u64, Arc<str>>,
    tick: u64,
    bytes: usize,
}

#[derive(Debug)]
struct Entry {
    object: Arc<CachedObject>,
    tick: u64,
    cost: usize,
}

impl Inner {
    fn remove(&mut self, key: &str) -> bool {
        match self.entries.remove(key) {
            Some(e) => {
                self.lru.remove(&e.tick);
                self.bytes -= e.cost;
                true
            }
            None => false,
        }
    }
}

impl MemoryTier {
    pub fn new(max_bytes: usize) -> MemoryTier {
        MemoryTier { max_bytes, inner: Mutex::default() }
    }

    fn lock(&self) -> MutexGuard<'_, Inner> {
        self.inner.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// The object under `key`, now the most recently used.
    pub fn get(&self, key: &str) -> Option<Arc<CachedObject>> {
        let mut inner = self.lock();
        let inner = &mut *inner;
        let (shared, _) = inner.entries.get_key_value(key)?;
        let shared = shared.clone();
        let entry = inner.entries.get_mut(key)?;
        let old = inner.lru.remove(&entry.tick);
        inner.tick += 1;
        entry.tick = inner.tick;
        inner.lru.insert(inner.tick, old.unwrap_or(shared));
        Some(entry.object.clone())
    }

    /// Stores `object`, evicting least recently used entries to make room; false
    /// when it alone is over the budget.
    pub fn insert(&self, key: String, object: Arc<CachedObject>) -> bool {
        let cost = object.cost(&key);
        if cost > self.max_bytes {
            return false;
        }
        let mut inner = self.lock();
        inner.remove(&key);
        while inner.bytes + cost > self.max_bytes {
            let Some((_, oldest)) = inner.lru.pop_first() else {
                break;
            };
            inner.remove(&oldest);
        }
        inner.tick += 1;
        let tick = inner.tick;
        let key: Arc<str> = key.into();
        inner.lru.insert(tick, key.clone());
        inner.bytes += cost;
        inner.entries.insert(key, Entry { object, tick, cost });
        true
    }

    pub fn remove(&self, key: &str) -> bool {
        self.lock().remove(key)
    }

    /// Removes every object `doomed` picks; returns their keys.
    pub fn remove_where(&self, mut doomed: impl FnMut(&str, &CachedObject) -> bool) -> Vec<String> {
        let mut inner = self.lock();
        let keys: Vec<String> =
            inner.entries.iter().filter(|(k, e)| doomed(k, &e.object)).map(|(k, _)| k.to_string()).collect();
        for k in &keys {
            inner.remove(k);
        }
        keys
    }

    pub fn len(&self) -> usize {
        self.lock().entries.len()
    }

    pub fn bytes(&self) -> usize {
        self.lock().bytes
    }
}
