//! The HTTP server: routes, state, and the accept loop.
//!
//! [`serve`] takes an already-bound listener and a shutdown future, so the foreground
//! daemon, the supervisor's inherited socket and the integration tests all use the same
//! entry point. Each connection is served by [`conn`], which speaks HTTP/1.1 itself so
//! that file bodies can leave with `sendfile(2)`; the track route is answered directly,
//! everything else by the axum router built in [`app`].

pub mod body;
pub mod conditional;
pub mod conn;
pub mod error;
pub mod file;
pub mod filecache;
pub mod metrics;
pub mod mime;
pub mod ops;
pub mod range;
pub mod wire;
pub mod zerocopy;

use std::future::Future;
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use axum::Router;
use axum::extract::{RawPathParams, Request, State};
use axum::http::{HeaderValue, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use mongodb::bson::oid::ObjectId;
use tokio::net::TcpListener;

use crate::catalog::{CacheOutcome, LocalCache, Resolver, TrackCache, TrackStore};
use crate::config::Config;
use crate::media::MediaRoots;
use crate::redis_link::RedisLink;
use error::{ApiError, Outcome, json_status};
use file::{FileRequest, FileSettings};

/// Why the server could not be set up.
#[derive(Debug, thiserror::Error)]
pub enum ServerError {
    /// The Redis URL is unusable.
    #[error(transparent)]
    Redis(#[from] crate::redis_link::LinkError),
    /// The MongoDB URI is unusable.
    #[error(transparent)]
    Mongo(#[from] crate::catalog::mongo::StoreError),
    /// A config value cannot be a header.
    #[error("cache_control is not a valid header value")]
    CacheControl,
    /// Accepting connections failed for good.
    #[error("listener: {0}")]
    Io(#[from] std::io::Error),
}

/// Shared by every request.
#[derive(Clone)]
pub struct AppState {
    /// id -> path.
    pub resolver: Arc<Resolver>,
    /// How files are served.
    pub files: Arc<FileSettings>,
    /// For `/healthz` uptime.
    pub started: Instant,
    /// Counters for `/metrics`.
    pub metrics: Arc<metrics::Metrics>,
}

impl AppState {
    /// Builds the resolver and file settings from a validated config. Connects to nothing:
    /// backends are reached on first use, so the server starts even while they are down.
    pub async fn new(config: &Config) -> Result<AppState, ServerError> {
        let link = Arc::new(RedisLink::new(&config.redis.target, config.redis.timeout)?);
        let cache = TrackCache::new(link, &config.redis);
        let store = TrackStore::new(&config.mongodb).await?;
        let files = FileSettings {
            roots: MediaRoots::new(config.media_roots.clone())
                .follow_symlinks(config.follow_symlinks),
            mode: config.serve_mode,
            cache_control: HeaderValue::from_str(&config.cache_control)
                .map_err(|_| ServerError::CacheControl)?,
            max_ranges: config.max_ranges,
            accel_location: config.accel_location.clone(),
            cache: filecache::FileCache::new(
                config.cache.file_max_bytes,
                config.cache.file_total_bytes,
                config.cache.open_files,
            ),
            zero_copy: config.zero_copy,
        };
        Ok(AppState {
            resolver: Arc::new(Resolver::new(
                LocalCache::new(config.cache.id_ttl, config.cache.id_max_entries),
                cache,
                store,
            )),
            files: Arc::new(files),
            started: Instant::now(),
            metrics: Arc::new(metrics::Metrics::default()),
        })
    }
}

/// The application: state, the track route prefixes, and the axum router for the rest.
#[derive(Clone)]
pub struct App {
    /// Shared by every request.
    pub state: AppState,
    router: Router,
    prefixes: Arc<[String]>,
}

impl App {
    /// The id segment when `path` is `{prefix}/{id}` or `{prefix}/{id}/{name}`, the track
    /// route's two forms. Ids with percent escapes are left to the router, which decodes
    /// them, so both paths give the same answer.
    pub fn track_id<'p>(&self, path: &'p str) -> Option<&'p str> {
        self.prefixes.iter().find_map(|prefix| {
            let rest = path.strip_prefix(prefix.as_str())?.strip_prefix('/')?;
            let (id, name) = match rest.split_once('/') {
                Some((id, name)) => (id, Some(name)),
                None => (rest, None),
            };
            let plain_name = name.is_none_or(|n| !n.is_empty() && !n.contains('/'));
            (!id.is_empty() && !id.contains('%') && plain_name).then_some(id)
        })
    }

    /// Answers a request through the axum router.
    pub async fn route(&self, request: Request) -> Response {
        let mut router = self.router.clone();
        match tower_service::Service::call(&mut router, request).await {
            Ok(response) => response,
            Err(never) => match never {},
        }
    }
}

/// The application: track routes under every configured prefix, ops endpoints, JSON 404s.
pub fn app(state: AppState, prefixes: &[String]) -> App {
    let mut router = Router::new()
        .route("/healthz", get(ops::healthz))
        .route("/readyz", get(ops::readyz))
        .route("/metrics", get(ops::metrics));
    for prefix in prefixes {
        router = router
            .route(&format!("{prefix}/{{id}}"), get(track))
            .route(&format!("{prefix}/{{id}}/{{name}}"), get(track));
    }
    let router = router
        .fallback(|| async { json_status(StatusCode::NOT_FOUND, "no such route") })
        .with_state(state.clone());
    App {
        state,
        router,
        prefixes: prefixes.into(),
    }
}

/// `GET|HEAD {prefix}/{id}[/{name}]` through the router: ids the connection did not route
/// itself (percent-escaped ones).
async fn track(State(state): State<AppState>, params: RawPathParams, request: Request) -> Response {
    let id = params
        .iter()
        .find(|(name, _)| *name == "id")
        .map(|(_, value)| value.to_string())
        .unwrap_or_default();
    let file_request = FileRequest::from_parts(request.method(), request.headers());
    let (outcome, result) = track_response(&state, id, file_request).await;
    let mut response = match result {
        Ok(answer) => answer.into_response(),
        Err(error) => error.into_response(),
    };
    response.extensions_mut().insert(Outcome(outcome));
    response
}

/// Resolves `id` and answers with its file.
pub async fn track_response(
    state: &AppState,
    id: String,
    request: FileRequest,
) -> (CacheOutcome, Result<file::Answer, ApiError>) {
    let Some(oid) = parse_track_id(&id) else {
        return (CacheOutcome::None, Err(ApiError::InvalidId { id }));
    };
    let resolution = match state.resolver.resolve(&oid).await {
        Ok(r) => r,
        Err(source) => {
            if matches!(source, crate::catalog::ResolveError::StoreUnavailable(_)) {
                state.metrics.mongodb_error();
            }
            return (CacheOutcome::None, Err(ApiError::Resolve { id, source }));
        }
    };
    state.metrics.observe_resolve(resolution.elapsed);
    let Some(path) = resolution.path else {
        return (resolution.outcome, Err(ApiError::UnknownId { id }));
    };
    if let Some(answer) = file::from_cache(&state.files, &id, &path, &request) {
        state.metrics.file_cache(true);
        return (resolution.outcome, answer);
    }
    state.metrics.file_cache(false);
    let served = Box::pin(file::serve(Arc::clone(&state.files), id, path, request)).await;
    (resolution.outcome, served)
}

/// The ObjectId in a track URL segment: exactly 24 hexadecimal digits (either case).
pub fn parse_track_id(segment: &str) -> Option<ObjectId> {
    // Decoded by hand: the bson parser collects into a Vec first, on every request.
    let digits = segment.as_bytes();
    if digits.len() != 24 {
        return None;
    }
    let mut bytes = [0u8; 12];
    for (byte, pair) in bytes.iter_mut().zip(digits.chunks_exact(2)) {
        *byte = (hex_value(pair[0])? << 4) | hex_value(pair[1])?;
    }
    Some(ObjectId::from_bytes(bytes))
}

fn hex_value(digit: u8) -> Option<u8> {
    match digit {
        b'0'..=b'9' => Some(digit - b'0'),
        b'a'..=b'f' => Some(digit - b'a' + 10),
        b'A'..=b'F' => Some(digit - b'A' + 10),
        _ => None,
    }
}

/// Limits of the connection handling.
#[derive(Debug, Clone)]
pub struct ServeOptions {
    /// How long in-flight responses may finish after shutdown starts.
    pub grace: Duration,
    /// How long a client may take to send its request headers.
    pub header_read_timeout: Duration,
    /// Where to count open connections, if anywhere.
    pub metrics: Option<Arc<metrics::Metrics>>,
    /// Idle keep-alive connections are closed after this.
    pub idle_timeout: Duration,
    /// A response whose client stops reading for this long is dropped.
    pub write_timeout: Duration,
    /// Largest request head accepted (431 beyond).
    pub max_header_bytes: usize,
    /// Longest URL accepted (414 beyond).
    pub max_uri_bytes: usize,
    /// Connections served at once; beyond, a 503 and close.
    pub max_connections: usize,
}

impl ServeOptions {
    /// The options a config asks for.
    pub fn from_config(config: &crate::config::Config) -> ServeOptions {
        ServeOptions {
            grace: config.daemon.stop_timeout,
            header_read_timeout: config.limits.header_read_timeout,
            metrics: None,
            idle_timeout: config.limits.idle_timeout,
            write_timeout: config.limits.write_timeout,
            max_header_bytes: config.limits.max_header_bytes,
            max_uri_bytes: config.limits.max_uri_bytes,
            max_connections: config.limits.max_connections,
        }
    }
}

impl Default for ServeOptions {
    fn default() -> Self {
        ServeOptions {
            grace: Duration::from_secs(30),
            header_read_timeout: Duration::from_secs(10),
            metrics: None,
            idle_timeout: Duration::from_secs(60),
            write_timeout: Duration::from_secs(30),
            max_header_bytes: 16 * 1024,
            max_uri_bytes: 2048,
            max_connections: 10_000,
        }
    }
}

/// Counts live connections; the last one out wakes the drain.
#[derive(Clone, Default)]
struct Connections {
    live: Arc<std::sync::atomic::AtomicUsize>,
    drained: Arc<tokio::sync::Notify>,
    metrics: Option<Arc<metrics::Metrics>>,
}

struct ConnectionGuard(Connections);

impl Connections {
    fn enter(&self) -> ConnectionGuard {
        self.live.fetch_add(1, Ordering::SeqCst);
        if let Some(metrics) = &self.metrics {
            metrics.connections(1);
        }
        ConnectionGuard(self.clone())
    }

    fn count(&self) -> usize {
        self.live.load(Ordering::SeqCst)
    }
}

impl Drop for ConnectionGuard {
    fn drop(&mut self) {
        if let Some(metrics) = &self.0.metrics {
            metrics.connections(-1);
        }
        if self.0.live.fetch_sub(1, Ordering::SeqCst) == 1 {
            self.0.drained.notify_waiters();
        }
    }
}

/// Serves `app` on `listener` until `shutdown` completes, then stops accepting and lets
/// in-flight responses finish for at most `options.grace`.
pub async fn serve(
    listener: TcpListener,
    app: App,
    shutdown: impl Future<Output = ()>,
    options: ServeOptions,
) -> std::io::Result<()> {
    let slots = Arc::new(tokio::sync::Semaphore::new(options.max_connections));
    let (stop_tx, stop_rx) = tokio::sync::watch::channel(false);
    let connections = Connections {
        metrics: options.metrics.clone(),
        ..Connections::default()
    };
    let grace = options.grace;
    let shared = Arc::new(conn::Shared {
        app,
        limits: wire::HeadLimits {
            max_uri_bytes: options.max_uri_bytes,
            max_header_bytes: options.max_header_bytes,
        },
        options,
    });
    tokio::pin!(shutdown);
    let mut accept_backoff = Duration::from_millis(5);
    loop {
        let accepted = tokio::select! {
            accepted = listener.accept() => accepted,
            () = &mut shutdown => break,
        };
        let (stream, _peer) = match accepted {
            Ok(pair) => {
                accept_backoff = Duration::from_millis(5);
                pair
            }
            Err(err) => {
                // Out of file descriptors and similar: wait and retry rather than spin.
                tracing::warn!(error = %err, "accept failed");
                tokio::time::sleep(accept_backoff).await;
                accept_backoff = (accept_backoff * 2).min(Duration::from_secs(1));
                continue;
            }
        };
        // Small responses wait 40 ms for delayed ACKs without this.
        let _ = stream.set_nodelay(true);
        let Ok(slot) = Arc::clone(&slots).try_acquire_owned() else {
            // Over the cap: a short, cheap refusal instead of an unbounded pile of tasks.
            tokio::spawn(conn::refuse_over_cap(stream));
            continue;
        };
        let guard = connections.enter();
        let shared = Arc::clone(&shared);
        let stop = stop_rx.clone();
        tokio::spawn(async move {
            let _guard = guard;
            let _slot = slot;
            conn::serve_connection(stream, shared, stop).await;
        });
    }
    drop(listener);
    let _ = stop_tx.send(true);
    let deadline = tokio::time::Instant::now() + grace;
    loop {
        let drained = connections.drained.notified();
        if connections.count() == 0 {
            tracing::info!("all connections drained");
            break;
        }
        tokio::select! {
            () = drained => {}
            () = tokio::time::sleep_until(deadline) => {
                tracing::warn!(?grace, open = connections.count(), "shutdown grace expired, closing remaining connections");
                break;
            }
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::parse_track_id;

    #[test]
    fn track_ids_are_exactly_24_hex_digits() {
        let id = parse_track_id("6b0dc37d3ba0d873deac9381").expect("valid");
        assert_eq!(id.to_hex(), "6b0dc37d3ba0d873deac9381");
        assert_eq!(parse_track_id("6B0DC37D3BA0D873DEAC9381"), Some(id));
        for bad in [
            "",
            "6b0dc37d3ba0d873deac938",
            "6b0dc37d3ba0d873deac93811",
            "zb0dc37d3ba0d873deac9381",
            "6b0dc37d3ba0d873deac938é",
        ] {
            assert!(parse_track_id(bad).is_none(), "{bad}");
        }
    }
}
