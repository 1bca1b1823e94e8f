//! The HTTP server: the wire below the service seam, the application above it.
//!
//! Below the seam, knowing no route ([`service`] is the seam, a leaf):
//! * [`accept`] accepts connections (one accept loop per event loop), up to the cap;
//! * [`h1`] speaks HTTP/1.1 on them: head, body, framing, clocks, staged close, senders.
//!
//! Above it, the application h1 calls:
//! * [`endpoint`] is the [`service::Service`]: it dispatches, then counts the exchange in
//!   [`metrics`] and logs it ([`access_log`]);
//! * [`dispatch`] picks the handler ([`routes`] names every route): the track route goes to
//!   [`track`] (id to file answer, [`file`](mod@file) for the HTTP file semantics, [`hot`]
//!   for each loop's own copies of its hot tracks), the ops endpoints to the axum router of
//!   [`app`] ([`ops`]);
//! * every handler returns a [`service::Answer`]; [`error`] maps failures to their status.

pub mod accept;
pub(crate) mod access;
pub(crate) mod access_log;
pub(crate) mod app;
pub(crate) mod client_ip;
pub(crate) mod dispatch;
pub(crate) mod endpoint;
pub(crate) mod error;
pub mod file;
pub mod h1;
pub(crate) mod hot;
pub(crate) mod metrics;
pub(crate) mod ops;
pub(crate) mod routes;
pub mod service;
pub(crate) mod track;

use std::sync::Arc;
use std::time::Instant;

use axum::http::HeaderValue;

use crate::catalog::Resolver;
use crate::catalog::backends::Backends;
use crate::config::Config;
use file::FileSettings;

pub use track::parse_track_id;

/// Why the server could not be set up.
#[derive(Debug, thiserror::Error)]
pub enum ServerError {
    /// A backend client could not be built.
    #[error(transparent)]
    Backend(#[from] crate::catalog::backends::BackendError),
    /// The access log file cannot be opened.
    #[error("access log: {0}")]
    AccessLog(#[source] std::io::Error),
    /// A config value cannot be a header.
    #[error("cache_control is not a valid header value")]
    CacheControl,
    /// Accepting connections failed for good.
    #[error("listener: {0}")]
    Io(#[from] std::io::Error),
}

/// Shared by every request.
#[derive(Clone)]
pub(crate) struct AppState {
    /// id -> path.
    pub(crate) resolver: Arc<Resolver>,
    /// How files are served.
    pub(crate) files: Arc<FileSettings>,
    /// For `/healthz` uptime.
    pub(crate) started: Instant,
    /// Counters for `/metrics`.
    pub(crate) metrics: Arc<metrics::Metrics>,
    /// The access log, when it is on.
    pub(crate) access_log: Option<Arc<access_log::AccessLog>>,
    /// Signed links and CORS.
    pub(crate) access: Arc<access::AccessRules>,
    /// The change-stream follower's state, for `/readyz` and `/metrics`.
    pub(crate) follower: Arc<crate::follow::FollowerStatus>,
    /// The subscription to pushed evictions, for `/readyz` and `/metrics`.
    pub(crate) evictions: Arc<crate::catalog::evictions::EvictionStatus>,
    /// Set on the first SIGTERM of a drain (`shutdown.drain_delay`): `/readyz` answers 503
    /// `draining` while every listener still accepts and serves.
    pub(crate) draining: Arc<std::sync::atomic::AtomicBool>,
}

impl AppState {
    /// Builds the resolver and file settings from a validated config. Connects to nothing:
    /// backends are reached on first use, so the server starts even while they are down.
    pub(crate) async fn new(config: &Config) -> Result<AppState, ServerError> {
        let (resolver, roots) = Backends::new(config).await?.resolver(config);
        let files = FileSettings {
            roots,
            mode: config.serve_mode,
            cache_control: HeaderValue::from_str(&config.cache_control)
                .map_err(|_| ServerError::CacheControl)?,
            max_ranges: config.max_ranges,
            accel_location: config.accel_location.clone(),
            cache: file::cache::FileCache::new(
                config.cache.file_max_bytes,
                config.cache.file_total_bytes,
                config.cache.open_files,
                config.cache.file_watches,
            ),
            pacing: service::Pacing::new(
                config.limits.rate_bytes_per_sec,
                config.limits.rate_after_bytes,
            ),
        };
        Ok(AppState {
            resolver: Arc::new(resolver),
            files: Arc::new(files),
            started: Instant::now(),
            metrics: Arc::new(metrics::Metrics::default()),
            access_log: access_log::AccessLog::open(&config.access_log)
                .map_err(ServerError::AccessLog)?,
            access: Arc::new(access::AccessRules::from_config(config)),
            follower: Arc::new(crate::follow::FollowerStatus::new(config)),
            evictions: Arc::default(),
            draining: Arc::default(),
        })
    }
}
