//! Operations endpoints: `/healthz` (the process answers) and `/readyz` (its backends do).
//!
//! `/readyz` is 200 when MongoDB answers, with `"status": "degraded"` when Redis does not:
//! musicd then still serves every track (from MongoDB), so a load balancer must keep
//! sending it traffic; taking every instance out because the shared cache died would turn a
//! slowdown into an outage. It is 503 when MongoDB is down, because unknown-to-Redis ids
//! then fail.

use std::time::Duration;

use axum::Json;
use axum::extract::State;
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use serde_json::json;

use super::AppState;

/// `GET /healthz`.
pub async fn healthz(State(state): State<AppState>) -> Response {
    Json(json!({
        "status": "ok",
        "uptime_secs": state.started.elapsed().as_secs(),
        "version": env!("CARGO_PKG_VERSION"),
    }))
    .into_response()
}

/// `GET /readyz`.
pub async fn readyz(State(state): State<AppState>) -> Response {
    let cache = state.resolver.cache();
    let redis = cache
        .link()
        .run(|mut conn| async move {
            let started = std::time::Instant::now();
            redis::cmd("PING").query_async::<()>(&mut conn).await?;
            Ok(started.elapsed())
        })
        .await;
    let mongo = state.resolver.store().ping().await;
    let redis_ok = redis.is_ok();
    let mongo_ok = mongo.is_ok();
    let status = match (mongo_ok, redis_ok) {
        (true, true) => "ready",
        (true, false) => "degraded",
        (false, _) => "unavailable",
    };
    let code = if mongo_ok {
        StatusCode::OK
    } else {
        StatusCode::SERVICE_UNAVAILABLE
    };
    (
        code,
        Json(json!({
            "status": status,
            "redis": check(redis.map_err(|e| e.to_string())),
            "mongodb": check(mongo.map_err(|e| e.to_string())),
        })),
    )
        .into_response()
}

fn check(result: Result<Duration, String>) -> serde_json::Value {
    match result {
        Ok(latency) => json!({ "ok": true, "latency_ms": latency.as_secs_f64() * 1000.0 }),
        Err(error) => json!({ "ok": false, "error": error }),
    }
}
