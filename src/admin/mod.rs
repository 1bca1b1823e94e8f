//! What `musicctl` does, one file per command. Commands reuse [`crate::catalog`] (their
//! clients come from [`crate::catalog::backends`], like the daemon's), [`crate::media`],
//! [`crate::signing`] and [`crate::config`]; none of them reaches into the HTTP server.

pub mod compare;
pub mod health;
pub mod import;
pub mod list;
pub mod progress;
pub mod purge;
pub mod reindex;
pub mod resolve;
pub mod revoke;
pub mod sign;
pub mod verify;

use crate::catalog::mongo::StoreError;
use crate::redis_link::LinkError;

/// Why an admin command failed.
#[derive(Debug, thiserror::Error)]
pub enum AdminError {
    /// MongoDB failed.
    #[error(transparent)]
    Store(#[from] StoreError),
    /// Redis failed.
    #[error(transparent)]
    Redis(#[from] LinkError),
    /// The Redis cache failed.
    #[error(transparent)]
    Cache(#[from] crate::catalog::cache::CacheError),
    /// A client could not be built.
    #[error(transparent)]
    Backend(#[from] crate::catalog::backends::BackendError),
    /// The rebuild of the index failed.
    #[error(transparent)]
    Rebuild(#[from] crate::catalog::rebuild::RebuildError),
    /// A MongoDB operation failed.
    #[error("mongodb: {0}")]
    Mongo(#[from] mongodb::error::Error),
    /// The arguments do not make sense.
    #[error("{0}")]
    Usage(String),
    /// An HTTP server (a cache to ban in, a service to compare) gave no answer.
    #[error(transparent)]
    Http(#[from] crate::blocking_http::RequestError),
    /// A worker task stopped before it finished.
    #[error("a worker task failed: {0}")]
    Task(#[from] tokio::task::JoinError),
    /// The file system failed.
    #[error("{path}: {source}")]
    Io {
        /// Where.
        path: String,
        /// Why.
        source: std::io::Error,
    },
}

pub use crate::catalog::backends::Backends;
