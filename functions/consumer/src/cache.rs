//! Completed keys a warm process remembers (`IDEMPOTENCY_CACHE_SIZE`), so that a duplicate of
//! a key this process completed, or found COMPLETED, is settled without a call to the store.
//!
//! Bounded: the least recently used entry goes when a new key would exceed the capacity. An
//! entry is served only while the record it stands for is unexpired by the store's own rule
//! (`expiration >= now`, in epoch seconds), so the cache never calls a key a duplicate that a
//! claim could take. Only COMPLETED records enter it: nothing in progress or released is
//! remembered.

use std::collections::{BTreeMap, HashMap};
use std::sync::Mutex;

use crate::ports::CompletedRecord;

/// A bounded least-recently-used map of completed keys to what their record said.
#[derive(Debug)]
pub struct CompletedCache {
    capacity: usize,
    inner: Mutex<Lru>,
}

#[derive(Debug, Default)]
struct Lru {
    /// Key -> (record, its recency tick).
    entries: HashMap<String, (CompletedRecord, u64)>,
    /// Recency tick -> key, oldest first.
    order: BTreeMap<u64, String>,
    tick: u64,
}

impl Lru {
    fn touch(&mut self, key: &str) {
        self.tick += 1;
        let tick = self.tick;
        if let Some((_, old)) = self.entries.get_mut(key) {
            self.order.remove(old);
            *old = tick;
            self.order.insert(tick, key.to_string());
        }
    }

    fn remove(&mut self, key: &str) {
        if let Some((_, tick)) = self.entries.remove(key) {
            self.order.remove(&tick);
        }
    }
}

impl CompletedCache {
    /// A cache of at most `capacity` keys (at least one).
    pub fn new(capacity: usize) -> Self {
        Self {
            capacity: capacity.max(1),
            inner: Mutex::new(Lru::default()),
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Lru> {
        redrive_shared::sync::lock(&self.inner)
    }

    /// The record of `key` if it is remembered and unexpired at `now_ms` (epoch ms); an
    /// expired entry is dropped.
    pub fn get(&self, key: &str, now_ms: i64) -> Option<CompletedRecord> {
        let mut lru = self.lock();
        let record = lru.entries.get(key)?.0.clone();
        if record.is_expired_at(now_ms) {
            lru.remove(key);
            return None;
        }
        lru.touch(key);
        Some(record)
    }

    /// Remembers `key` as completed, evicting the least recently used key when full.
    pub fn insert(&self, key: &str, record: CompletedRecord) {
        let mut lru = self.lock();
        if let Some(entry) = lru.entries.get_mut(key) {
            entry.0 = record;
            lru.touch(key);
            return;
        }
        while lru.entries.len() >= self.capacity {
            let Some((_, oldest)) = lru.order.pop_first() else {
                break;
            };
            lru.entries.remove(&oldest);
        }
        lru.tick += 1;
        let tick = lru.tick;
        lru.entries.insert(key.to_string(), (record, tick));
        lru.order.insert(tick, key.to_string());
    }

    pub fn len(&self) -> usize {
        self.lock().entries.len()
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    pub fn capacity(&self) -> usize {
        self.capacity
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const NOW_MS: i64 = 1_764_000_000_000;
    const NOW_S: i64 = NOW_MS / 1000;

    fn completed(expiration_s: i64) -> CompletedRecord {
        CompletedRecord::new(expiration_s)
    }

    #[test]
    fn a_remembered_key_is_served_until_its_expiration_and_never_after() {
        // GIVEN a key whose record expires at NOW_S
        let cache = CompletedCache::new(10);
        cache.insert("k", completed(NOW_S));

        // THEN it is served up to the last millisecond of its expiration second (the store's
        // rule: a record is expired when expiration < now in seconds)
        assert_eq!(cache.get("k", NOW_MS), Some(completed(NOW_S)));
        assert_eq!(cache.get("k", NOW_MS + 999), Some(completed(NOW_S)));
        // AND not one second later, when a claim could take the key: it is dropped
        assert_eq!(cache.get("k", NOW_MS + 1000), None);
        assert!(cache.is_empty());
        assert_eq!(
            cache.get("k", NOW_MS),
            None,
            "an expired entry is gone for good"
        );
    }

    #[test]
    fn the_least_recently_used_key_goes_first_when_full() {
        let cache = CompletedCache::new(3);
        for k in ["a", "b", "c"] {
            cache.insert(k, completed(NOW_S + 60));
        }
        // "a" is used, so "b" is now the least recently used
        assert!(cache.get("a", NOW_MS).is_some());

        cache.insert("d", completed(NOW_S + 60));

        assert_eq!(cache.len(), 3);
        assert!(cache.get("b", NOW_MS).is_none());
        for k in ["a", "c", "d"] {
            assert!(cache.get(k, NOW_MS).is_some(), "{k}");
        }
    }

    #[test]
    fn inserting_a_known_key_updates_it_without_growing() {
        let cache = CompletedCache::new(2);
        cache.insert("a", completed(NOW_S - 5));
        cache.insert("b", completed(NOW_S + 60));
        cache.insert("a", completed(NOW_S + 60));

        assert_eq!(cache.len(), 2);
        assert_eq!(cache.get("a", NOW_MS), Some(completed(NOW_S + 60)));
        // "b" is the oldest now
        cache.insert("c", completed(NOW_S + 60));
        assert!(cache.get("b", NOW_MS).is_none());
        assert!(cache.get("a", NOW_MS).is_some());
    }

    #[test]
    fn a_capacity_of_one_holds_the_last_key_and_bounds_hold_under_churn() {
        let cache = CompletedCache::new(1);
        cache.insert("a", completed(NOW_S + 60));
        cache.insert("b", completed(NOW_S + 60));
        assert_eq!(cache.len(), 1);
        assert!(cache.get("b", NOW_MS).is_some());

        let cache = CompletedCache::new(100);
        for i in 0..10_000 {
            cache.insert(&format!("k{i}"), completed(NOW_S + 60));
            if i % 3 == 0 {
                cache.get(&format!("k{}", i / 2), NOW_MS);
            }
        }
        assert_eq!(cache.len(), 100);
        let lru = cache.lock();
        assert_eq!(
            lru.order.len(),
            100,
            "the recency index matches the entries"
        );
        assert!(lru.order.values().all(|k| lru.entries.contains_key(k)));
    }
}
