//! A memo bounded by bytes that keeps what is in use: two generations, an approximation of LRU
//! that costs one hash lookup more than a map.
//!
//! Entries go into the young generation; when it holds the budget's half, the old generation is
//! dropped and the young one becomes old. A hit in the old generation moves the entry back to
//! the young one, so an entry used at least once per half-budget of insertions stays, and what
//! nothing uses any more goes within two turnovers. The bytes held never exceed the budget.

use std::collections::HashMap;
use std::hash::Hash;

/// A memo of at most `max_bytes` (as its owner weighs entries).
#[derive(Debug)]
pub struct BoundedMemo<K, V> {
    young: HashMap<K, V>,
    old: HashMap<K, V>,
    young_bytes: usize,
    old_bytes: usize,
    max_bytes: usize,
    weigh: fn(&K, &V) -> usize,
}

impl<K: Hash + Eq, V> BoundedMemo<K, V> {
    /// An empty memo of at most `max_bytes`, an entry weighing `weigh(key, value)`.
    pub fn new(max_bytes: usize, weigh: fn(&K, &V) -> usize) -> BoundedMemo<K, V> {
        BoundedMemo {
            young: HashMap::new(),
            old: HashMap::new(),
            young_bytes: 0,
            old_bytes: 0,
            max_bytes,
            weigh,
        }
    }

    /// The value of `key`, kept young.
    pub fn get(&mut self, key: &K) -> Option<&V>
    where
        K: Clone,
    {
        if !self.young.contains_key(key) {
            let (key, value) = self.old.remove_entry(key)?;
            self.old_bytes -= (self.weigh)(&key, &value);
            self.insert(key, value);
        }
        self.young.get(key)
    }

    /// Whether `key` is held (it is not kept young for it).
    pub fn contains(&self, key: &K) -> bool {
        self.young.contains_key(key) || self.old.contains_key(key)
    }

    /// Keeps `value` under `key`; an entry heavier than half the budget is not kept.
    pub fn insert(&mut self, key: K, value: V) {
        let weigh = self.weigh;
        let weight = weigh(&key, &value);
        if let Some(previous) = self.old.remove(&key) {
            self.old_bytes -= weigh(&key, &previous);
        }
        if let Some(previous) = self.young.remove(&key) {
            self.young_bytes -= weigh(&key, &previous);
        }
        if weight > self.max_bytes / 2 {
            return;
        }
        if self.young_bytes + weight > self.max_bytes / 2 {
            self.old = std::mem::take(&mut self.young);
            self.old_bytes = std::mem::take(&mut self.young_bytes);
        }
        self.young.insert(key, value);
        self.young_bytes += weight;
    }

    /// Takes the value of `key` out.
    pub fn remove(&mut self, key: &K) -> Option<V> {
        if let Some(value) = self.young.remove(key) {
            self.young_bytes -= (self.weigh)(key, &value);
            return Some(value);
        }
        let value = self.old.remove(key)?;
        self.old_bytes -= (self.weigh)(key, &value);
        Some(value)
    }

    /// Forgets every entry.
    pub fn clear(&mut self) {
        self.young.clear();
        self.old.clear();
        self.young_bytes = 0;
        self.old_bytes = 0;
    }

    /// Bytes held.
    pub fn bytes(&self) -> usize {
        self.young_bytes + self.old_bytes
    }

    /// Entries held.
    pub fn len(&self) -> usize {
        self.young.len() + self.old.len()
    }

    /// Whether it holds nothing.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn memo(max: usize) -> BoundedMemo<u32, Vec<u8>> {
        BoundedMemo::new(max, |_, v| v.len())
    }

    #[test]
    fn never_holds_more_than_its_budget() {
        let mut m = memo(1_000);
        for i in 0..10_000u32 {
            m.insert(i, vec![0; (i % 97) as usize]);
            assert!(m.bytes() <= 1_000, "{} bytes after {i}", m.bytes());
        }
    }

    #[test]
    fn what_is_used_stays_and_what_is_not_goes() {
        let mut m = memo(1_000);
        m.insert(0, vec![0; 10]);
        for i in 1..1_000u32 {
            m.insert(i, vec![0; 10]);
            assert!(m.get(&0).is_some(), "the entry in use went at {i}");
        }
        assert!(!m.contains(&1), "an unused entry stayed");
    }

    #[test]
    fn replacing_an_entry_counts_it_once() {
        let mut m = memo(1_000);
        m.insert(1, vec![0; 100]);
        m.insert(1, vec![0; 50]);
        assert_eq!(m.bytes(), 50);
        assert_eq!(m.len(), 1);
    }

    #[test]
    fn an_entry_too_heavy_is_not_kept() {
        let mut m = memo(100);
        m.insert(1, vec![0; 60]);
        assert!(m.is_empty());
    }
}
