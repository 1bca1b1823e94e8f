//! The end of every exchange: its counters in `/metrics` and its access-log line.
//!
//! The line is a `tracing` event on the `musicd::access` target, written only when that
//! target is enabled (checked once per connection).

use axum::http::Method;

use super::h1::request_id::RequestId;
use super::metrics::Metrics;
use super::routes::Route;
use crate::catalog::CacheOutcome;

/// What an exchange did.
pub struct Finished<'a> {
    /// Which route answered.
    pub route: Route,
    /// The status sent.
    pub status: u16,
    /// Body bytes sent.
    pub bytes: u64,
    /// Where the id's path came from.
    pub cache: CacheOutcome,
    /// Whether the whole answer left.
    pub complete: bool,
    /// The request's method.
    pub method: &'a Method,
    /// The request's path (empty unless logging).
    pub path: &'a str,
    /// The request's id.
    pub request_id: &'a RequestId,
    /// When the exchange began, when logging.
    pub started: Option<std::time::Instant>,
}

/// Counts the exchange and writes its access-log line.
pub fn finish(metrics: &Metrics, done: Finished<'_>) {
    metrics.response_finished(done.route, done.status, done.bytes, done.cache);
    // `%` fields print without quotes, so the line stays grep- and awk-friendly.
    tracing::info!(
        target: "musicd::access",
        id = %done.request_id,
        method = %done.method,
        path = %done.path,
        status = done.status,
        bytes = done.bytes,
        latency_ms = format_args!(
            "{:.3}",
            done.started.map_or(0.0, |t| t.elapsed().as_secs_f64() * 1000.0)
        ),
        cache = %done.cache.as_str(),
        complete = done.complete,
    );
}

/// Whether access-log lines are written.
pub fn enabled() -> bool {
    tracing::enabled!(target: "musicd::access", tracing::Level::INFO)
}
