//! The in-process id -> path cache in front of Redis (L1).
//!
//! Redis answers in ~0.1 ms, but at tens of thousands of requests per second that round
//! trip is most of a request's cost, and it spends Redis CPU nginx never pays. Entries here
//! live for a short TTL (1 s by default; a longer one is used only while pushed evictions
//! are heard, [`UNPUSHED_TTL`] otherwise) and are also evicted early when the follower
//! publishes a change ([`super::evictions`]): pub/sub delivers at most once, so the TTL
//! stays as the bound when a message is lost or the subscription is down. An answer read
//! from Redis before an eviction arrived must not be kept after it: each shard counts its
//! evictions, and [`LocalCache::put`] drops an answer whose shard saw one since the lookup
//! began ([`LocalCache::epoch`]). The map is sharded to keep lock contention off the hot
//! path and bounded in entries, so a flood of distinct ids cannot grow it without limit.

use std::collections::HashMap;
use std::sync::RwLock;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use mongodb::bson::oid::ObjectId;

const SHARDS: usize = 16;

/// One shard's entries. foldhash, not the default SipHash: every request hashes its id
/// here, and foldhash (randomly seeded per process) hashes a 12-byte id in a fraction of
/// the time.
type Shard = HashMap<ObjectId, Entry, foldhash::fast::RandomState>;

/// A shard's lock on cache lines of its own: the event loops read-lock different shards
/// without moving each other's lines between the cores.
#[repr(align(128))]
struct PaddedShard(RwLock<Shard>);

impl std::ops::Deref for PaddedShard {
    type Target = RwLock<Shard>;

    fn deref(&self) -> &RwLock<Shard> {
        &self.0
    }
}

/// The longest an entry lives while no eviction can reach it (the subscription is down):
/// a change then shows within this, as it did before evictions were pushed.
pub(crate) const UNPUSHED_TTL: Duration = Duration::from_secs(1);

/// What the local cache knows about an id.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Local {
    /// The id maps to this path.
    Path(std::sync::Arc<str>),
    /// The id is known not to exist.
    Absent,
}

struct Entry {
    value: Local,
    stored: Instant,
}

/// What a copy of an entry taken elsewhere needs to tell that it is still the entry: the
/// evictions its shard had seen when it was read, and when it was stored
/// ([`LocalCache::get_stamped`], [`LocalCache::standing`]).
#[derive(Debug, Clone, Copy)]
pub(crate) struct Stamp {
    epoch: u64,
    stored: Instant,
}

impl Stamp {
    /// Whether both stamps were taken from one entry: not one renewed or put since.
    pub(crate) fn same_entry(&self, other: &Stamp) -> bool {
        self.epoch == other.epoch && self.stored == other.stored
    }
}

/// What a copy of an entry is worth now ([`LocalCache::standing`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Standing {
    /// Evicted, cleared or past its TTL: not to be used.
    Gone,
    /// Good, and in the last quarter of its TTL: to be read again ahead.
    Due,
    /// Good.
    Good,
}

/// A bounded, sharded map with a fixed TTL.
pub(crate) struct LocalCache {
    shards: Vec<PaddedShard>,
    /// Evictions per shard so far (see [`LocalCache::epoch`]).
    epochs: Vec<AtomicU64>,
    ttl: Duration,
    /// Whether pushed evictions are heard now; if not, entries live [`UNPUSHED_TTL`] at most.
    pushed: std::sync::atomic::AtomicBool,
    max_entries: usize,
    entries: AtomicUsize,
}

impl LocalCache {
    /// A cache keeping entries for `ttl`, at most `max_entries` of them. A zero TTL or
    /// size disables it.
    pub(crate) fn new(ttl: Duration, max_entries: usize) -> LocalCache {
        LocalCache {
            shards: (0..SHARDS)
                .map(|_| PaddedShard(RwLock::new(Shard::default())))
                .collect(),
            epochs: (0..SHARDS).map(|_| AtomicU64::new(0)).collect(),
            ttl,
            pushed: std::sync::atomic::AtomicBool::new(false),
            max_entries,
            entries: AtomicUsize::new(0),
        }
    }

    /// The configured TTL (used while pushed evictions are heard).
    pub(crate) fn ttl(&self) -> Duration {
        self.ttl
    }

    /// Says whether pushed evictions are heard: while they are not, no entry is used
    /// past [`UNPUSHED_TTL`], whatever the configured TTL.
    pub(crate) fn set_pushed(&self, pushed: bool) {
        self.pushed.store(pushed, Ordering::Relaxed);
    }

    fn live_ttl(&self) -> Duration {
        if self.pushed.load(Ordering::Relaxed) {
            self.ttl
        } else {
            self.ttl.min(UNPUSHED_TTL)
        }
    }

    /// Whether the cache is in use.
    pub(crate) fn enabled(&self) -> bool {
        !self.ttl.is_zero() && self.max_entries > 0
    }

    fn shard_index(id: &ObjectId) -> usize {
        // The last bytes of an ObjectId are a counter: well spread across shards.
        usize::from(id.bytes()[11]) % SHARDS
    }

    fn shard(&self, id: &ObjectId) -> &RwLock<Shard> {
        &self.shards[Self::shard_index(id)]
    }

    /// Taken before a lookup leaves the process; [`LocalCache::put`] keeps the answer only
    /// if no eviction reached `id`'s shard since.
    pub(crate) fn epoch(&self, id: &ObjectId) -> u64 {
        self.epochs[Self::shard_index(id)].load(Ordering::Acquire)
    }

    /// Forgets these ids (a change the follower published).
    pub(crate) fn evict(&self, ids: &[ObjectId]) {
        for id in ids {
            let index = Self::shard_index(id);
            let mut shard = self.shards[index]
                .write()
                .unwrap_or_else(|p| p.into_inner());
            // Under the lock: a put holding it either ran before (and is removed here) or
            // sees the new epoch.
            self.epochs[index].fetch_add(1, Ordering::AcqRel);
            if shard.remove(id).is_some() {
                self.entries.fetch_sub(1, Ordering::Relaxed);
            }
        }
    }

    /// Forgets everything (a pattern purge, a rebuild, or a subscription that was down and
    /// may have missed evictions).
    pub(crate) fn clear(&self) {
        for (shard, epoch) in self.shards.iter().zip(&self.epochs) {
            let mut shard = shard.write().unwrap_or_else(|p| p.into_inner());
            epoch.fetch_add(1, Ordering::AcqRel);
            self.entries.fetch_sub(shard.len(), Ordering::Relaxed);
            shard.clear();
        }
    }

    /// A live entry for `id` at time `now`, if any.
    pub(crate) fn get(&self, id: &ObjectId, now: Instant) -> Option<Local> {
        if !self.enabled() {
            return None;
        }
        let shard = self.shard(id).read().unwrap_or_else(|p| p.into_inner());
        let entry = shard.get(id)?;
        (now.saturating_duration_since(entry.stored) < self.live_ttl()).then(|| entry.value.clone())
    }

    /// [`LocalCache::get`], with the entry's [`Stamp`].
    pub(crate) fn get_stamped(&self, id: &ObjectId, now: Instant) -> Option<(Local, Stamp)> {
        if !self.enabled() {
            return None;
        }
        let index = Self::shard_index(id);
        let shard = self.shards[index].read().unwrap_or_else(|p| p.into_inner());
        let entry = shard.get(id)?;
        // Read under the shard's lock, which an eviction takes to move it: this count
        // and this entry go together.
        let epoch = self.epochs[index].load(Ordering::Acquire);
        (now.saturating_duration_since(entry.stored) < self.live_ttl()).then(|| {
            let stamp = Stamp {
                epoch,
                stored: entry.stored,
            };
            (entry.value.clone(), stamp)
        })
    }

    /// What a copy of `id`'s entry stamped `stamp` is worth at time `now`. It is gone once
    /// an eviction reached its shard (the entry was evicted or cleared) or the TTL that
    /// applies now is over: two loads of lines that only evictions write, no lock, no count
    /// moved on a line every core reads. In the TTL's last quarter it still answers but is
    /// due to be read again ([`super::refresh`]): later would leave a slow Redis too little
    /// time, earlier would read each hot id more often than once a TTL. One judgement, so
    /// a hot request measures the copy's age once.
    pub(crate) fn standing(&self, id: &ObjectId, stamp: Stamp, now: Instant) -> Standing {
        if !self.enabled()
            || self.epochs[Self::shard_index(id)].load(Ordering::Acquire) != stamp.epoch
        {
            return Standing::Gone;
        }
        let (age, ttl) = (now.saturating_duration_since(stamp.stored), self.live_ttl());
        if age >= ttl {
            Standing::Gone
        } else if age >= ttl - ttl / 4 {
            Standing::Due
        } else {
            Standing::Good
        }
    }

    /// Remembers `value` for `id` for the TTL, unless an eviction reached its shard since
    /// `epoch` ([`LocalCache::epoch`], taken before the lookup). Whether it was kept.
    pub(crate) fn put(&self, id: ObjectId, value: Local, epoch: u64) -> bool {
        if !self.enabled() {
            return false;
        }
        let now = Instant::now();
        let index = Self::shard_index(&id);
        let mut shard = self.shards[index]
            .write()
            .unwrap_or_else(|p| p.into_inner());
        if self.epochs[index].load(Ordering::Acquire) != epoch {
            return false;
        }
        if self.entries.load(Ordering::Relaxed) >= self.max_entries {
            // Full: drop this shard's expired entries; if still full, skip caching this one
            // (it will simply be asked from Redis again).
            let before = shard.len();
            let ttl = self.live_ttl();
            shard.retain(|_, e| now.saturating_duration_since(e.stored) < ttl);
            self.entries
                .fetch_sub(before - shard.len(), Ordering::Relaxed);
            if self.entries.load(Ordering::Relaxed) >= self.max_entries && !shard.contains_key(&id)
            {
                return false;
            }
        }
        let previous = shard.insert(id, Entry { value, stored: now });
        if previous.is_none() {
            self.entries.fetch_add(1, Ordering::Relaxed);
        }
        true
    }

    /// Entries held (live or not yet swept).
    pub(crate) fn len(&self) -> usize {
        self.entries.load(Ordering::Relaxed)
    }

    /// Whether nothing is held.
    #[cfg(test)]
    pub(crate) fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn without_pushed_evictions_a_long_ttl_falls_back_to_a_second() {
        let cache = LocalCache::new(Duration::from_secs(60), 10);
        let id = ObjectId::new();
        cache.put(id, Local::Absent, cache.epoch(&id));
        let later = Instant::now() + Duration::from_secs(2);
        assert_eq!(cache.get(&id, later), None, "unpushed: 1 s");
        cache.set_pushed(true);
        assert_eq!(cache.get(&id, later), Some(Local::Absent), "pushed: 60 s");
    }

    #[test]
    fn entries_expire_after_the_ttl() {
        let cache = LocalCache::new(Duration::from_millis(30), 10);
        let id = ObjectId::new();
        cache.put(id, Local::Path("/a.mp3".into()), cache.epoch(&id));
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
            let id = ObjectId::new();
            cache.put(id, Local::Absent, cache.epoch(&id));
        }
        assert!(cache.len() <= 100, "{}", cache.len());
    }

    #[test]
    fn a_zero_ttl_disables_it() {
        let cache = LocalCache::new(Duration::ZERO, 100);
        let id = ObjectId::new();
        cache.put(id, Local::Absent, cache.epoch(&id));
        assert_eq!(cache.get(&id, Instant::now()), None);
    }

    #[test]
    fn an_evicted_id_is_gone_and_an_answer_read_before_the_eviction_is_not_kept() {
        let cache = LocalCache::new(Duration::from_secs(60), 100);
        let (kept, evicted) = (ObjectId::new(), ObjectId::new());
        cache.put(kept, Local::Absent, cache.epoch(&kept));
        cache.put(evicted, Local::Absent, cache.epoch(&evicted));
        let before = cache.epoch(&evicted);
        cache.evict(&[evicted]);
        assert_eq!(cache.get(&evicted, Instant::now()), None);
        assert_eq!(cache.get(&kept, Instant::now()), Some(Local::Absent));
        // A lookup that began before the eviction comes back with the old answer.
        cache.put(evicted, Local::Path("/old.mp3".into()), before);
        assert_eq!(
            cache.get(&evicted, Instant::now()),
            None,
            "stale answer kept"
        );
        cache.put(
            evicted,
            Local::Path("/new.mp3".into()),
            cache.epoch(&evicted),
        );
        assert!(cache.get(&evicted, Instant::now()).is_some());
        cache.clear();
        assert!(cache.is_empty());
        assert_eq!(cache.get(&kept, Instant::now()), None);
    }
}
