//! A least-recently-used cache bounded in bytes (not entries), shared by the
//! footer cache and the decoded-postings cache. Values are `Arc`s so a reader
//! keeps what it got even if the entry is evicted meanwhile.

use lru::LruCache;
use std::hash::Hash;
use std::sync::{Arc, Mutex, PoisonError};

/// A byte-bounded LRU cache. An entry larger than the whole capacity is not kept.
#[derive(Debug)]
pub struct ByteLru<K: Hash + Eq, V> {
    inner: Mutex<Inner<K, V>>,
}

#[derive(Debug)]
struct Inner<K: Hash + Eq, V> {
    lru: LruCache<K, (Arc<V>, usize)>,
    bytes: usize,
    capacity: usize,
}

impl<K: Hash + Eq, V> ByteLru<K, V> {
    /// A cache holding at most `capacity` bytes (0 disables it).
    pub fn new(capacity: usize) -> Self {
        Self {
            inner: Mutex::new(Inner {
                lru: LruCache::unbounded(),
                bytes: 0,
                capacity,
            }),
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Inner<K, V>> {
        self.inner.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// The cached value, marked as most recently used.
    pub fn get(&self, key: &K) -> Option<Arc<V>> {
        self.lock().lru.get(key).map(|(v, _)| Arc::clone(v))
    }

    /// Insert `value` weighing `bytes`, evicting least recently used entries.
    pub fn insert(&self, key: K, value: Arc<V>, bytes: usize) {
        let mut inner = self.lock();
        if bytes > inner.capacity {
            return;
        }
        if let Some((_, old)) = inner.lru.put(key, (value, bytes)) {
            inner.bytes -= old;
        }
        inner.bytes += bytes;
        while inner.bytes > inner.capacity {
            match inner.lru.pop_lru() {
                Some((_, (_, b))) => inner.bytes -= b,
                None => break,
            }
        }
    }

    /// Change the capacity (evicting if it shrinks).
    pub fn set_capacity(&self, capacity: usize) {
        let mut inner = self.lock();
        inner.capacity = capacity;
        while inner.bytes > inner.capacity {
            match inner.lru.pop_lru() {
                Some((_, (_, b))) => inner.bytes -= b,
                None => break,
            }
        }
    }

    /// Bytes held now.
    pub fn bytes(&self) -> usize {
        self.lock().bytes
    }

    /// Entries held now.
    pub fn len(&self) -> usize {
        self.lock().lru.len()
    }

    /// Whether the cache holds nothing.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn evicts_least_recently_used_by_bytes() {
        let c = ByteLru::new(100);
        c.insert(1, Arc::new("a"), 40);
        c.insert(2, Arc::new("b"), 40);
        assert!(c.get(&1).is_some()); // 2 is now least recently used
        c.insert(3, Arc::new("c"), 40);
        assert!(c.get(&2).is_none());
        assert!(c.get(&1).is_some() && c.get(&3).is_some());
        assert_eq!(c.bytes(), 80);
        c.insert(4, Arc::new("too big"), 101);
        assert!(c.get(&4).is_none());
        assert_eq!(c.len(), 2);
        c.set_capacity(50);
        assert_eq!((c.len(), c.bytes()), (1, 40));
    }
}
