//! The one place the backend clients are built from the configuration: the daemon's
//! resolver, every `musicctl` command and the tests all get theirs here, so they cannot
//! disagree on timeouts, prefixes or symlink policy.

use std::sync::Arc;

use super::mongo::{StoreError, TrackStore};
use super::{LocalCache, Resolver, TrackCache};
use crate::config::Config;
use crate::media::MediaRoots;
use crate::redis_link::{LinkError, RedisLink};

/// Why the clients could not be built.
#[derive(Debug, thiserror::Error)]
pub enum BackendError {
    /// The Redis URL is unusable.
    #[error(transparent)]
    Redis(#[from] LinkError),
    /// The MongoDB URI is unusable.
    #[error(transparent)]
    Mongo(#[from] StoreError),
}

/// Clients for Redis and MongoDB, and the media roots. Nothing connects until first use,
/// so a program starts even while a backend is down.
pub struct Backends {
    /// The Redis cache.
    pub cache: TrackCache,
    /// The MongoDB store.
    pub store: TrackStore,
    /// The media roots.
    pub(crate) roots: MediaRoots,
}

impl Backends {
    /// Builds the clients `config` names.
    pub async fn new(config: &Config) -> Result<Backends, BackendError> {
        let link = Arc::new(RedisLink::new(&config.redis.target, config.redis.timeout)?);
        Ok(Backends {
            cache: TrackCache::new(link, &config.redis),
            store: TrackStore::new(&config.mongodb).await?,
            roots: MediaRoots::new(config.media_roots.clone())
                .follow_symlinks(config.follow_symlinks),
        })
    }

    /// The read-through resolver over these clients, with the in-process id cache.
    pub(crate) fn resolver(self, config: &Config) -> (Resolver, MediaRoots) {
        let local = LocalCache::new(config.cache.id_ttl, config.cache.id_max_entries);
        (Resolver::new(local, self.cache, self.store), self.roots)
    }
}
