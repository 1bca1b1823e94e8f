//! Resolving a track id to the path of its file: Redis read-through in front of MongoDB.
//!
//! [`Resolver::resolve`] asks Redis first. On a miss it asks MongoDB and writes the answer
//! back (the path, or a negative entry for an unknown id). Concurrent misses for the same id
//! share one MongoDB query and one write-back. When Redis fails the resolver goes straight
//! to MongoDB ("bypass"); when MongoDB fails, ids Redis still knows keep resolving and the
//! others get [`ResolveError::StoreUnavailable`] (the HTTP layer turns that into 503).

pub mod backends;
pub mod cache;
pub(crate) mod evictions;
pub(crate) mod local;
pub(crate) mod mongo;
pub mod rebuild;
pub(crate) mod refresh;

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use futures_util::FutureExt;
use futures_util::future::{BoxFuture, Shared};
use mongodb::bson::oid::ObjectId;

pub(crate) use cache::{Cached, TrackCache};
pub(crate) use local::{Local, LocalCache};
pub use mongo::{StoredPath, TrackStore};

/// Why an id could not be resolved.
#[derive(Debug, thiserror::Error)]
pub(crate) enum ResolveError {
    /// MongoDB is unreachable and Redis does not know the id.
    #[error("track catalogue unavailable: {0}")]
    StoreUnavailable(Arc<mongo::StoreError>),
    /// The document exists but has no usable path.
    #[error("track document is invalid: {0}")]
    InvalidDocument(String),
}

/// Where an answer came from; logged with every request and counted in metrics.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum CacheOutcome {
    /// The in-process cache had the answer (path or negative) from the last second.
    Local,
    /// Redis had the path.
    Hit,
    /// Redis had nothing; MongoDB answered.
    Miss,
    /// Redis had a negative entry: the id is unknown.
    Negative,
    /// Redis was unreachable; MongoDB answered directly.
    Bypass,
    /// No lookup was made (invalid id, ops endpoint).
    None,
}

impl CacheOutcome {
    /// Lower-case name for logs and metrics.
    pub(crate) fn as_str(self) -> &'static str {
        match self {
            CacheOutcome::Local => "local",
            CacheOutcome::Hit => "hit",
            CacheOutcome::Miss => "miss",
            CacheOutcome::Negative => "negative",
            CacheOutcome::Bypass => "bypass",
            CacheOutcome::None => "-",
        }
    }
}

/// The answer for one id.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Resolution {
    /// The document's path, `None` when no track has this id.
    /// Shared with the in-process cache: a local hit copies no path.
    pub(crate) path: Option<Arc<str>>,
    /// Where the answer came from.
    pub(crate) outcome: CacheOutcome,
    /// Time spent resolving: zero for an in-process hit, which takes less than reading
    /// the clock would (the histogram's lowest bucket is 10 µs).
    pub(crate) elapsed: Duration,
}

type LookupResult = Result<Option<StoredPath>, Arc<mongo::StoreError>>;
type SharedLookup = Shared<BoxFuture<'static, LookupResult>>;

/// How long a finished MongoDB answer stays shareable. A request whose Redis GET was
/// answered just before the write-back landed still finds the answer here instead of
/// querying MongoDB again; this short it cannot serve anything meaningfully stale.
const FINISHED_LOOKUP_SHARED_FOR: Duration = Duration::from_millis(100);

/// MongoDB lookups under way (or just finished, see [`FINISHED_LOOKUP_SHARED_FOR`]), by id. The generation
/// tells an entry from a later one for the same id when retiring it.
type Inflight = Arc<Mutex<HashMap<ObjectId, (u64, SharedLookup)>>>;

/// Read-through resolver shared by all requests.
pub(crate) struct Resolver {
    local: LocalCache,
    cache: TrackCache,
    store: TrackStore,
    inflight: Inflight,
    generation: AtomicU64,
    refresh: refresh::Refresh,
}

impl Resolver {
    /// A resolver over a local cache, Redis and MongoDB.
    pub(crate) fn new(local: LocalCache, cache: TrackCache, store: TrackStore) -> Resolver {
        Resolver {
            local,
            cache,
            store,
            inflight: Arc::new(Mutex::new(HashMap::new())),
            generation: AtomicU64::new(0),
            refresh: refresh::Refresh::default(),
        }
    }

    /// Ids held in the in-process cache.
    pub(crate) fn local_len(&self) -> usize {
        self.local.len()
    }

    /// The Redis cache.
    pub(crate) fn cache(&self) -> &TrackCache {
        &self.cache
    }

    /// The MongoDB store.
    pub(crate) fn store(&self) -> &TrackStore {
        &self.store
    }

    /// Resolves an id to the path its document names, for a request read at `read_at`
    /// (the in-process cache's entries live for seconds: the request's own instant dates
    /// a hit, so the hot path reads no clock here).
    pub(crate) async fn resolve(
        &self,
        id: &ObjectId,
        read_at: Instant,
    ) -> Result<Resolution, ResolveError> {
        if let Some(local) = self.local.get(id, read_at) {
            return Ok(Resolution {
                path: match local {
                    Local::Path(path) => Some(path),
                    Local::Absent => None,
                },
                outcome: CacheOutcome::Local,
                elapsed: Duration::ZERO,
            });
        }
        // Boxed: the Redis and MongoDB futures are kilobytes, and every idle connection
        // would otherwise carry that space for a path the local hit never takes.
        Box::pin(self.resolve_remote(id, Instant::now())).await
    }

    /// The in-process cache, for pushed evictions.
    pub(crate) fn local(&self) -> &LocalCache {
        &self.local
    }

    /// Ids noted for refresh-ahead and not yet read.
    #[cfg(test)]
    pub(crate) fn refresh_waiting(&self) -> usize {
        self.refresh.waiting()
    }

    /// Asks for `id`'s in-process entry to be read from Redis again before it runs out
    /// ([`refresh`]).
    pub(crate) fn refresh_ahead(&self, id: ObjectId) {
        self.refresh.ask(id);
    }

    /// In-process entries renewed ahead of their end so far.
    pub(crate) fn refreshed(&self) -> u64 {
        self.refresh.renewed()
    }

    /// Forgets what this process knows of `ids` (a change the follower published): their
    /// in-process entries, and any MongoDB answer still shared (it lingers 100 ms), which may
    /// predate the change.
    pub(crate) fn evict(&self, ids: &[ObjectId]) {
        {
            let mut inflight = self.inflight.lock().unwrap_or_else(|p| p.into_inner());
            for id in ids {
                inflight.remove(id);
            }
        }
        self.local.evict(ids);
    }

    /// Forgets everything this process knows (a pattern purge, a rebuild, a new
    /// subscription to evictions).
    pub(crate) fn clear(&self) {
        self.inflight
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .clear();
        self.local.clear();
    }

    async fn resolve_remote(
        &self,
        id: &ObjectId,
        started: Instant,
    ) -> Result<Resolution, ResolveError> {
        let epoch = self.local.epoch(id);
        let (stored, outcome) = match self.cache.get(id).await {
            Ok(Cached::Path(path)) => (Some(StoredPath::Path(path)), CacheOutcome::Hit),
            Ok(Cached::Absent) => (None, CacheOutcome::Negative),
            Ok(Cached::Unknown) => (self.lookup(id, true).await?, CacheOutcome::Miss),
            Err(err) => {
                tracing::debug!(%id, error = %err, "cache lookup failed, asking MongoDB");
                (self.lookup(id, false).await?, CacheOutcome::Bypass)
            }
        };
        let path: Option<Arc<str>> = match stored {
            None => None,
            Some(StoredPath::Path(path)) => Some(path.into()),
            Some(StoredPath::Invalid(why)) => return Err(ResolveError::InvalidDocument(why)),
        };
        // Answers that came straight from MongoDB (Redis down) are kept too: the local
        // cache is then what shields MongoDB from the full request rate.
        let local = match &path {
            Some(path) => Local::Path(Arc::clone(path)),
            None => Local::Absent,
        };
        self.local.put(*id, local, epoch);
        Ok(Resolution {
            path,
            outcome,
            elapsed: started.elapsed(),
        })
    }

    /// Asks MongoDB, sharing the query with concurrent callers for the same id.
    ///
    /// The query and its write-back run in their own task, so a client that goes away
    /// mid-lookup neither cancels it for the other waiters nor leaves an entry behind:
    /// the task retires its own entry when done.
    async fn lookup(
        &self,
        id: &ObjectId,
        write_back: bool,
    ) -> Result<Option<StoredPath>, ResolveError> {
        let shared = {
            let mut inflight = self.inflight.lock().unwrap_or_else(|p| p.into_inner());
            match inflight.get(id) {
                Some((_, shared)) => shared.clone(),
                None => {
                    let generation = self.generation.fetch_add(1, Ordering::Relaxed);
                    let task = tokio::spawn(query_task(
                        *id,
                        generation,
                        self.store.clone(),
                        write_back.then(|| self.cache.clone()),
                        Arc::clone(&self.inflight),
                    ));
                    let shared = async move {
                        task.await.unwrap_or_else(|join| {
                            Err(Arc::new(mongo::StoreError::Task(join.to_string())))
                        })
                    }
                    .boxed()
                    .shared();
                    inflight.insert(*id, (generation, shared.clone()));
                    shared
                }
            }
        };
        shared.await.map_err(ResolveError::StoreUnavailable)
    }
}

/// One MongoDB lookup with its write-back; retires its in-flight entry afterwards.
///
/// The write-back is a fenced fill ([`cache`]): its lease is taken before MongoDB is
/// asked, so a change the follower writes meanwhile wins over what this lookup read.
async fn query_task(
    id: ObjectId,
    generation: u64,
    store: TrackStore,
    cache: Option<TrackCache>,
    inflight: Inflight,
) -> LookupResult {
    // Refused first when too many lookups wait on MongoDB: a refusal costs no fill lease.
    let result = match store.wait_turn() {
        Err(busy) => Err(Arc::new(busy)),
        Ok(turn) => {
            let fill = match &cache {
                Some(cache) => match cache.begin_fill(&id).await {
                    Ok(fill) => Some(fill),
                    Err(err) => {
                        tracing::debug!(%id, error = %err, "no fill lease: the answer is not cached");
                        None
                    }
                },
                None => None,
            };
            let result = store.find_path_in_turn(&id, turn).await.map_err(Arc::new);
            if let (Some(cache), Some(fill)) = (&cache, fill) {
                write_back(cache, fill, &id, &result).await;
            }
            result
        }
    };
    // Errors are retired at once so that a recovered MongoDB is asked again immediately.
    let linger = if result.is_ok() {
        FINISHED_LOOKUP_SHARED_FOR
    } else {
        Duration::ZERO
    };
    tokio::spawn(async move {
        tokio::time::sleep(linger).await;
        let mut inflight = inflight.lock().unwrap_or_else(|p| p.into_inner());
        if inflight.get(&id).is_some_and(|(g, _)| *g == generation) {
            inflight.remove(&id);
        }
    });
    result
}

async fn write_back(cache: &TrackCache, fill: cache::Fill, id: &ObjectId, result: &LookupResult) {
    let written = match result {
        Ok(Some(StoredPath::Path(path))) => cache.complete_fill(fill, Some(path)).await,
        Ok(None) => cache.complete_fill(fill, None).await,
        // Invalid documents and errors are not cached: fixing the document or MongoDB
        // must take effect at once.
        Ok(Some(StoredPath::Invalid(_))) | Err(_) => Ok(true),
    };
    match written {
        Ok(true) => {}
        Ok(false) => tracing::debug!(%id, "fill fenced: the follower wrote the entry since"),
        Err(err) => tracing::debug!(%id, error = %err, "cache write-back failed"),
    }
}
