//! Operations endpoints: `/healthz` (the process answers) and `/readyz` (its backends do).
//!
//! `/readyz` is 200 when MongoDB answers, with `"status": "degraded"` when Redis does not:
//! musicd then still serves every track (from MongoDB), so a load balancer must keep
//! sending it traffic; taking every instance out because the shared cache died would turn a
//! slowdown into an outage. It is 503 when MongoDB is down, because unknown-to-Redis ids
//! then fail. Until Redis has answered once since the start, a Redis that does not answer
//! is 503 too (`"status": "unavailable"`, its error named): a new instance with a wrong
//! address must not join the pool, while a running one that loses Redis stays in it. While
//! musicd drains before a stop (`shutdown.drain_delay`) it is 503 with
//! `"status": "draining"`, and `/healthz` stays 200: a liveness probe must not kill a
//! process that is finishing its work.

use std::time::Duration;

use axum::Json;
use axum::extract::State;
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use bytes::Bytes;
use serde_json::json;

use super::AppState;
use super::service::{Answer, Payload};

/// The `/healthz` answer (`http::dispatch` gives it, never the router).
pub(crate) fn healthz(state: &AppState) -> Answer {
    Answer::new(
        StatusCode::OK,
        Bytes::from_static(b"content-type: application/json\r\n"),
        Payload::Bytes(healthz_body(state)),
    )
}

/// `{"status":"ok","uptime_secs":N,"version":"V"}`, written by hand: it is the cheapest
/// answer musicd gives, and a JSON map per request was most of its cost.
fn healthz_body(state: &AppState) -> Bytes {
    Bytes::from(format!(
        r#"{{"status":"ok","uptime_secs":{},"version":"{}"}}"#,
        state.started.elapsed().as_secs(),
        env!("CARGO_PKG_VERSION"),
    ))
}

/// Whether the backends answer.
#[derive(Debug, Clone)]
pub(crate) struct Readiness {
    /// Redis round trip, or why it failed.
    pub(crate) redis: Result<Duration, Failure>,
    /// MongoDB round trip, or why it failed.
    pub(crate) mongodb: Result<Duration, Failure>,
}

/// Why a backend did not answer a probe.
#[derive(Debug, Clone)]
pub(crate) struct Failure {
    /// No answer within the timeout (a stopped or overloaded server, or a partition),
    /// rather than a refusal or an error: the two call for different fixes.
    pub(crate) hung: bool,
    /// What the client said.
    pub(crate) error: String,
}

impl Readiness {
    /// `ready`, `degraded` (Redis down) or `unavailable` (MongoDB down).
    pub(crate) fn status(&self) -> &'static str {
        match (self.mongodb.is_ok(), self.redis.is_ok()) {
            (true, true) => "ready",
            (true, false) => "degraded",
            (false, _) => "unavailable",
        }
    }

    /// The JSON body of `/readyz`.
    pub(crate) fn to_json(&self) -> serde_json::Value {
        json!({
            "status": self.status(),
            "redis": check(&self.redis),
            "mongodb": check(&self.mongodb),
        })
    }
}

/// Pings Redis and MongoDB (each bounded by its configured timeout).
pub(crate) async fn readiness(state: &AppState) -> Readiness {
    let redis = state.resolver.cache().link().run(|mut conn| async move {
        let started = std::time::Instant::now();
        redis::cmd("PING").query_async::<()>(&mut conn).await?;
        Ok(started.elapsed())
    });
    let mongodb = state.resolver.store().ping();
    let (redis, mongodb) = tokio::join!(redis, mongodb);
    Readiness {
        redis: redis.map_err(|e| Failure {
            hung: e.is_hang(),
            error: e.to_string(),
        }),
        mongodb: mongodb.map_err(|e| Failure {
            hung: e.is_hang(),
            error: e.to_string(),
        }),
    }
}

/// `GET /readyz`.
pub(crate) async fn readyz(State(state): State<AppState>) -> Response {
    let readiness = readiness(&state).await;
    // Draining: still serving, but a load balancer should send new connections elsewhere.
    let draining = state.draining.load(std::sync::atomic::Ordering::Relaxed);
    // Until Redis has answered once, a Redis that does not answer is a wrong address as
    // likely as an outage.
    let redis_never_answered =
        readiness.redis.is_err() && !state.resolver.cache().link().has_answered();
    let code = if readiness.mongodb.is_ok() && !draining && !redis_never_answered {
        StatusCode::OK
    } else {
        StatusCode::SERVICE_UNAVAILABLE
    };
    let mut body = readiness.to_json();
    if redis_never_answered {
        body["status"] = json!("unavailable");
        body["reason"] =
            json!("redis has not answered since musicd started: check redis.url or redis.cluster");
    }
    if draining {
        body["status"] = json!("draining");
    }
    // Shown, not judged: a standby or a stopped follower does not make serving unready.
    body["watch"] = state.follower.to_json();
    body["evictions"] = state.evictions.to_json();
    (code, Json(body)).into_response()
}

/// One backend's part of `/readyz`: `state` is `up`, `hung` or `down`.
fn check(result: &Result<Duration, Failure>) -> serde_json::Value {
    match result {
        Ok(latency) => {
            json!({ "ok": true, "state": "up", "latency_ms": latency.as_secs_f64() * 1000.0 })
        }
        Err(failure) => json!({
            "ok": false,
            "state": if failure.hung { "hung" } else { "down" },
            "error": failure.error,
        }),
    }
}

/// `GET /metrics`: Prometheus text format.
pub(crate) async fn metrics(State(state): State<AppState>) -> Response {
    let mut text = state.metrics.render(
        state.resolver.cache().link().errors(),
        state.files.cache.used_bytes(),
        state.resolver.local_len(),
    );
    super::metrics::render_file_checks(&mut text, &state.files.cache);
    super::metrics::render_follower(&mut text, &state.follower);
    super::metrics::render_evictions(&mut text, &state.evictions);
    super::metrics::render_revoked(&mut text, state.access.signing.revoked.sessions());
    super::metrics::render_mongodb_waiting(&mut text, state.resolver.store().waiting());
    super::metrics::render_refreshed(&mut text, state.resolver.refreshed());
    if let Some(log) = &state.access_log {
        let (written, dropped) = log.lines();
        super::metrics::render_access_log(&mut text, written, dropped);
    }
    (
        [(
            axum::http::header::CONTENT_TYPE,
            "text/plain; version=0.0.4; charset=utf-8",
        )],
        text,
    )
        .into_response()
}
