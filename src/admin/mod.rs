//! What `musicctl` does, one file per command. Commands reuse [`crate::catalog`] and
//! [`crate::config`]; none of them reaches into the HTTP server.

pub mod health;
pub mod import;
pub mod list;
pub mod progress;
pub mod purge;
pub mod reindex;
pub mod resolve;
pub mod sign;

use std::sync::Arc;

use crate::catalog::mongo::StoreError;
use crate::catalog::{TrackCache, TrackStore};
use crate::config::Config;
use crate::media::MediaRoots;
use crate::redis_link::{LinkError, RedisLink};

/// Why an admin command failed.
#[derive(Debug, thiserror::Error)]
pub enum AdminError {
    /// MongoDB failed.
    #[error(transparent)]
    Store(#[from] StoreError),
    /// Redis failed.
    #[error(transparent)]
    Redis(#[from] LinkError),
    /// A MongoDB operation failed.
    #[error("mongodb: {0}")]
    Mongo(#[from] mongodb::error::Error),
    /// The arguments do not make sense.
    #[error("{0}")]
    Usage(String),
    /// The file system failed.
    #[error("{path}: {source}")]
    Io {
        /// Where.
        path: String,
        /// Why.
        source: std::io::Error,
    },
}

/// The backends an admin command talks to.
pub struct Backends {
    /// The Redis cache.
    pub cache: TrackCache,
    /// The MongoDB store.
    pub store: TrackStore,
    /// The media roots.
    pub roots: MediaRoots,
}

impl Backends {
    /// Builds clients for the configured backends (connecting lazily).
    pub async fn new(config: &Config) -> Result<Backends, AdminError> {
        let link = Arc::new(RedisLink::new(&config.redis.target, config.redis.timeout)?);
        Ok(Backends {
            cache: TrackCache::new(link, &config.redis),
            store: TrackStore::new(&config.mongodb).await?,
            roots: MediaRoots::new(config.media_roots.clone())
                .follow_symlinks(config.follow_symlinks),
        })
    }
}
