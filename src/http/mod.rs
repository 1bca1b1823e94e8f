//! The HTTP server: routes, state, the access log, and the accept loop.
//!
//! [`serve`] takes an already-bound listener and a shutdown future, so the foreground
//! daemon, the supervisor's inherited socket and the integration tests all use the same
//! entry point. Connections are served by hyper directly (not `axum::serve`) because the
//! server needs knobs axum does not expose: header-read timeout, `TCP_NODELAY`, graceful
//! draining with a deadline.

pub mod body;
pub mod conditional;
pub mod error;
pub mod file;
pub mod filecache;
pub mod limits;
pub mod metrics;
pub mod mime;
pub mod ops;
pub mod range;

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::task::{Context, Poll};
use std::time::{Duration, Instant};

use axum::Router;
use axum::body::Body;
use axum::extract::{RawPathParams, Request, State};
use axum::http::{HeaderMap, HeaderValue, Method, StatusCode};
use axum::middleware::{self, Next};
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use bytes::Bytes;
use hyper_util::rt::{TokioIo, TokioTimer};
use hyper_util::service::TowerToHyperService;
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
    /// URL and header size limits (none: unlimited, for tests of other things).
    pub request_limits: Option<RequestLimits>,
}

/// Size limits checked on every request.
#[derive(Debug, Clone, Copy)]
pub struct RequestLimits {
    /// Longest URL accepted (414 beyond).
    pub max_uri_bytes: usize,
    /// Largest sum of header lines accepted (431 beyond).
    pub max_header_bytes: usize,
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
            ),
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
            request_limits: Some(RequestLimits {
                max_uri_bytes: config.limits.max_uri_bytes,
                max_header_bytes: config.limits.max_header_bytes,
            }),
        })
    }
}

/// The router: track routes under every configured prefix, ops endpoints, JSON 404s.
pub fn router(state: AppState, prefixes: &[String]) -> Router {
    let mut app = Router::new()
        .route("/healthz", get(ops::healthz))
        .route("/readyz", get(ops::readyz))
        .route("/metrics", get(ops::metrics));
    for prefix in prefixes {
        app = app
            .route(&format!("{prefix}/{{id}}"), get(track))
            .route(&format!("{prefix}/{{id}}/{{name}}"), get(track));
    }
    app.fallback(|| async { json_status(StatusCode::NOT_FOUND, "no such route") })
        .layer(middleware::from_fn_with_state(state.clone(), access_log))
        .with_state(state)
}

/// `GET|HEAD {prefix}/{id}[/{name}]`.
async fn track(State(state): State<AppState>, params: RawPathParams, request: Request) -> Response {
    // Borrowed extractors: no map of parameters, no copy of the request headers.
    let id = params
        .iter()
        .find(|(name, _)| *name == "id")
        .map(|(_, value)| value.to_string())
        .unwrap_or_default();
    let (outcome, result) = track_response(&state, id, request.method(), request.headers()).await;
    let mut response = result.unwrap_or_else(IntoResponse::into_response);
    response.extensions_mut().insert(Outcome(outcome));
    response
}

async fn track_response(
    state: &AppState,
    id: String,
    method: &Method,
    headers: &HeaderMap,
) -> (CacheOutcome, Result<Response, ApiError>) {
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
    let request = FileRequest::from_parts(method, headers);
    if let Some(answer) = file::from_memory(&state.files, &id, &path, &request) {
        state.metrics.file_cache(true);
        return (resolution.outcome, answer);
    }
    if state.files.mode == crate::config::ServeMode::Direct {
        state.metrics.file_cache(false);
    }
    let served = file::serve(Arc::clone(&state.files), id, path, request).await;
    (resolution.outcome, served)
}

/// The ObjectId in a track URL segment: exactly 24 hexadecimal digits (either case).
pub fn parse_track_id(segment: &str) -> Option<ObjectId> {
    if segment.len() != 24 || !segment.bytes().all(|b| b.is_ascii_hexdigit()) {
        return None;
    }
    ObjectId::parse_str(segment).ok()
}

/// Source of request ids: a random per-process prefix and a counter.
struct RequestIds {
    prefix: u32,
    next: AtomicU64,
}

static REQUEST_IDS: std::sync::LazyLock<RequestIds> = std::sync::LazyLock::new(|| RequestIds {
    prefix: rand::random(),
    next: AtomicU64::new(1),
});

fn request_id(headers: &HeaderMap) -> String {
    // A proxy's id is kept so one request can be followed through nginx/varnish and musicd,
    // but only if it is short and plain (it goes into our logs).
    if let Some(given) = headers.get("x-request-id").and_then(|v| v.to_str().ok())
        && !given.is_empty()
        && given.len() <= 64
        && given
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b"-_.:".contains(&b))
    {
        return given.to_string();
    }
    let n = REQUEST_IDS.next.fetch_add(1, Ordering::Relaxed);
    format!("{:08x}-{n:x}", REQUEST_IDS.prefix)
}

/// Logs one line per request, when its body has been sent (or abandoned), and counts it.
async fn access_log(State(state): State<AppState>, request: Request, next: Next) -> Response {
    let started = Instant::now();
    let id = request_id(request.headers());
    let method = request.method().clone();
    if let Some(limits) = &state.request_limits {
        if request.uri().to_string().len() > limits.max_uri_bytes {
            return json_status(StatusCode::URI_TOO_LONG, "URL too long");
        }
        // hyper's read buffer caps a head at 64 KiB; the configured limit is checked here.
        let head: usize = request
            .headers()
            .iter()
            .map(|(name, value)| name.as_str().len() + value.len() + 4)
            .sum();
        if head > limits.max_header_bytes {
            return json_status(
                StatusCode::REQUEST_HEADER_FIELDS_TOO_LARGE,
                "request headers too large",
            );
        }
    }
    let full_path = request.uri().path();
    let route = match full_path {
        "/healthz" => "healthz",
        "/readyz" => "readyz",
        "/metrics" => "metrics",
        _ => "",
    };
    // Formatting the log line's fields costs allocations: only when it will be written.
    let logging = tracing::enabled!(target: "musicd::access", tracing::Level::INFO);
    let path: String = if logging {
        full_path.chars().take(256).collect()
    } else {
        String::new()
    };
    state.metrics.response_started();
    let mut response = next.run(request).await;
    if let Ok(value) = HeaderValue::from_str(&id) {
        response.headers_mut().insert("x-request-id", value);
    }
    let cache = response
        .extensions()
        .get::<Outcome>()
        .map_or(CacheOutcome::None, |o| o.0);
    let status = response.status().as_u16();
    let route = match route {
        "" if response.extensions().get::<Outcome>().is_some() => "track",
        "" => "other",
        known => known,
    };
    let (parts, body) = response.into_parts();
    let logged = LoggedBody {
        inner: body,
        bytes: 0,
        finished: false,
        metrics: state.metrics,
        route: metrics::route_index(route),
        status,
        cache,
        entry: logging.then_some(AccessEntry {
            id,
            method,
            path,
            started,
        }),
    };
    Response::from_parts(parts, Body::new(logged))
}

struct AccessEntry {
    id: String,
    method: Method,
    path: String,
    started: Instant,
}

/// A body that counts what it sends and writes the access-log line when it is dropped.
struct LoggedBody {
    inner: Body,
    bytes: u64,
    finished: bool,
    metrics: Arc<metrics::Metrics>,
    route: usize,
    status: u16,
    cache: CacheOutcome,
    /// Present when the access log is enabled.
    entry: Option<AccessEntry>,
}

impl http_body::Body for LoggedBody {
    type Data = Bytes;
    type Error = axum::Error;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<http_body::Frame<Bytes>, axum::Error>>> {
        let polled = Pin::new(&mut self.inner).poll_frame(cx);
        match &polled {
            Poll::Ready(Some(Ok(frame))) => {
                if let Some(data) = frame.data_ref() {
                    self.bytes += data.len() as u64;
                }
            }
            Poll::Ready(None) => self.finished = true,
            _ => {}
        }
        polled
    }

    fn is_end_stream(&self) -> bool {
        self.inner.is_end_stream()
    }

    fn size_hint(&self) -> http_body::SizeHint {
        self.inner.size_hint()
    }
}

impl Drop for LoggedBody {
    fn drop(&mut self) {
        self.metrics
            .response_finished(self.route, self.status, self.bytes, self.cache);
        if let Some(entry) = self.entry.take() {
            let complete = self.finished || http_body::Body::is_end_stream(&self.inner);
            // `%` fields print without quotes, so the line stays grep- and awk-friendly.
            tracing::info!(
                target: "musicd::access",
                id = %entry.id,
                method = %entry.method,
                path = %entry.path,
                status = self.status,
                bytes = self.bytes,
                latency_ms = format_args!("{:.3}", entry.started.elapsed().as_secs_f64() * 1000.0),
                cache = %self.cache.as_str(),
                complete,
            );
        }
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
    /// Largest request head accepted.
    pub max_header_bytes: usize,
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
            max_connections: 10_000,
        }
    }
}

/// How long, once stopping, a connection accepted just before may take to send its first
/// request. Closing it at once (as hyper's graceful shutdown does with a connection that
/// has not sent a request yet) would reset a client whose connect raced the stop.
const FIRST_REQUEST_GRACE: Duration = Duration::from_secs(1);

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

/// Answers a connection over the cap with 503 and closes it.
async fn refuse(mut stream: tokio::net::TcpStream) {
    use tokio::io::AsyncWriteExt;
    const BUSY: &[u8] = b"HTTP/1.1 503 Service Unavailable\r\nRetry-After: 1\r\n\
Content-Type: application/json\r\nContent-Length: 37\r\nConnection: close\r\n\r\n\
{\"error\":\"too many connections\"}\n";
    let _ = tokio::time::timeout(Duration::from_secs(1), stream.write_all(BUSY)).await;
    let _ = stream.shutdown().await;
}

/// Serves `app` on `listener` until `shutdown` completes, then stops accepting and lets
/// in-flight responses finish for at most `options.grace`.
pub async fn serve(
    listener: TcpListener,
    app: Router,
    shutdown: impl Future<Output = ()>,
    options: ServeOptions,
) -> std::io::Result<()> {
    let mut builder = hyper::server::conn::http1::Builder::new();
    builder
        .timer(TokioTimer::new())
        .header_read_timeout(options.header_read_timeout)
        .keep_alive(true)
        // Also bounds the write buffer: a body is pulled only as fast as the client takes
        // it. (hyper's `pipeline_flush` must stay off: it lifts that bound, and a stalled
        // client then made hyper pull a whole 64 MiB file into memory.)
        .max_buf_size(options.max_header_bytes.max(64 * 1024));
    let slots = Arc::new(tokio::sync::Semaphore::new(options.max_connections));
    let (stop_tx, stop_rx) = tokio::sync::watch::channel(false);
    let connections = Connections {
        metrics: options.metrics.clone(),
        ..Connections::default()
    };
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
            tokio::spawn(refuse(stream));
            continue;
        };
        let stream = limits::GuardedIo::new(stream, options.write_timeout, options.idle_timeout);
        let first_request = Arc::new(tokio::sync::Notify::new());
        let seen = Arc::clone(&first_request);
        let inner = TowerToHyperService::new(app.clone());
        let service = hyper::service::service_fn(move |request| {
            // notify_one keeps a permit, so the drain sees a request that came earlier.
            seen.notify_one();
            hyper::service::Service::call(&inner, request)
        });
        let connection = builder.serve_connection(TokioIo::new(stream), service);
        let mut stop = stop_rx.clone();
        let guard = connections.enter();
        tokio::spawn(async move {
            let _guard = guard;
            let _slot = slot;
            tokio::pin!(connection);
            tokio::select! {
                result = connection.as_mut() => {
                    if let Err(err) = result {
                        tracing::debug!(error = %err, "connection ended with an error");
                    }
                    return;
                }
                _ = stop.wait_for(|stopping| *stopping) => {}
            }
            tokio::select! {
                _ = connection.as_mut() => return,
                () = first_request.notified() => {}
                () = tokio::time::sleep(FIRST_REQUEST_GRACE) => {}
            }
            // Finishes the request in flight (if any), then closes.
            connection.as_mut().graceful_shutdown();
            let _ = connection.await;
        });
    }
    drop(listener);
    let _ = stop_tx.send(true);
    let deadline = tokio::time::Instant::now() + options.grace;
    loop {
        let drained = connections.drained.notified();
        if connections.count() == 0 {
            tracing::info!("all connections drained");
            break;
        }
        tokio::select! {
            () = drained => {}
            () = tokio::time::sleep_until(deadline) => {
                tracing::warn!(grace = ?options.grace, open = connections.count(), "shutdown grace expired, closing remaining connections");
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
        assert!(parse_track_id("6b0dc37d3ba0d873deac9381").is_some());
        assert!(parse_track_id("6B0DC37D3BA0D873DEAC9381").is_some());
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
