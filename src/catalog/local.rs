//! The in-process id -> path cache in front of Redis (L1).
//!
//! Redis answers in ~0.1 ms, but at tens of thousands of requests per second that round
//! trip is most of a request's cost, and it spends Redis CPU nginx never pays. Entries here
//! live for a short TTL only (1 s by default) instead of being invalidated: a
//! `musicctl purge` or a changed document reaches every musicd within that TTL, with no
//! pub/sub channel to lose messages on and nothing that behaves differently on a Redis
//! Cluster. The map is sharded to keep lock contention off the hot path and bounded in
//! entries, so a flood of distinct ids cannot grow it without limit.

use std::collections::HashMap;
use std::sync::RwLock;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use mongodb::bson::oid::ObjectId;

const SHARDS: usize = 16;

/// What the local cache knows about an id.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Local {
    /// The id maps to this path.
    Path(std::sync::Arc<str>),
    /// The id is known not to exist.
    Absent,
}

struct Entry {
    value: Local,
    expires: Instant,
}

/// A bounded, sharded map with a fixed TTL.
pub struct LocalCache {
    shards: Vec<RwLock<HashMap<ObjectId, Entry>>>,
    ttl: Duration,
    max_entries: usize,
    entries: AtomicUsize,
}

impl LocalCache {
    /// A cache keeping entries for `ttl`, at most `max_entries` of them. A zero TTL or
    /// size disables it.
    pub fn new(ttl: Duration, max_entries: usize) -> LocalCache {
        LocalCache {
            shards: (0..SHARDS).map(|_| RwLock::new(HashMap::new())).collect(),
            ttl,
            max_entries,
            entries: AtomicUsize::new(0),
        }
    }

    /// Whether the cache is in use.
    pub fn enabled(&self) -> bool {
        !self.ttl.is_zero() && self.max_entries > 0
    }

    fn shard(&self, id: &ObjectId) -> &RwLock<HashMap<ObjectId, Entry>> {
        // The last bytes of an ObjectId are a counter: well spread across shards.
        let bytes = id.bytes();
        &self.shards[usize::from(bytes[11]) % SHARDS]
    }

    /// A live entry for `id` at time `now`, if any.
    pub fn get(&self, id: &ObjectId, now: Instant) -> Option<Local> {
        if !self.enabled() {
            return None;
        }
        let shard = self.shard(id).read().unwrap_or_else(|p| p.into_inner());
        let entry = shard.get(id)?;
        (entry.expires > now).then(|| entry.value.clone())
    }

    /// Remembers `value` for `id` for the TTL.
    pub fn put(&self, id: ObjectId, value: Local) {
        if !self.enabled() {
            return;
        }
        let now = Instant::now();
        let mut shard = self.shard(&id).write().unwrap_or_else(|p| p.into_inner());
        if self.entries.load(Ordering::Relaxed) >= self.max_entries {
            // Full: drop this shard's expired entries; if still full, skip caching this one
            // (it will simply be asked from Redis again).
            let before = shard.len();
            shard.retain(|_, e| e.expires > now);
            self.entries
                .fetch_sub(before - shard.len(), Ordering::Relaxed);
            if self.entries.load(Ordering::Relaxed) >= self.max_entries && !shard.contains_key(&id)
            {
                return;
            }
        }
        let previous = shard.insert(
            id,
            Entry {
                value,
                expires: now + self.ttl,
            },
        );
        if previous.is_none() {
            self.entries.fetch_add(1, Ordering::Relaxed);
        }
    }

    /// Entries held (live or not yet swept).
    pub fn len(&self) -> usize {
        self.entries.load(Ordering::Relaxed)
    }

    /// Whether nothing is held.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn entries_expire_after_the_ttl() {
        let cache = LocalCache::new(Duration::from_millis(30), 10);
        let id = ObjectId::new();
        cache.put(id, Local::Path("/a.mp3".into()));
        assert_eq!(
            cache.get(&id, Instant::now()),
            Some(Local::Path("/a.mp3".into()))
        );
        std::thread::sleep(Duration::from_millis(40));
        assert_eq!(cache.get(&id, Instant::now()), None);
    }

    #[test]
    fn the_cache_is_bounded() {
        let cache = LocalCache::new(Duration::from_secs(60), 100);
        for _ in 0..1000 {
            cache.put(ObjectId::new(), Local::Absent);
        }
        assert!(cache.len() <= 100, "{}", cache.len());
    }

    #[test]
    fn a_zero_ttl_disables_it() {
        let cache = LocalCache::new(Duration::ZERO, 100);
        let id = ObjectId::new();
        cache.put(id, Local::Absent);
        assert_eq!(cache.get(&id, Instant::now()), None);
    }
}
