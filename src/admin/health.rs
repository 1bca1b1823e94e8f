//! `musicctl health`: is everything musicd needs there? A probe for Nagios/Kubernetes.
//!
//! Five checks: Redis (PING and its latency), MongoDB (ping, and the tracks collection
//! exists), the daemon (`/readyz` at `ops_listen` when set, else at `listen`), the media roots
//! (each readable) and the change-stream follower (who holds the lease in Redis, how old
//! the last applied change is), and with `[http_caches] ban_urls`, the follower's bans (any
//! kept in Redis because a cache does not take them). The verdict: `healthy` (0) when all pass; `degraded` (1) when musicd
//! still serves every track but something is off (Redis down: it serves from MongoDB; a
//! media root unreadable while others are fine); `down` (2) when tracks cannot be served
//! (MongoDB down or the collection missing, the daemon not answering or not ready, no
//! media root readable).

use std::net::SocketAddr;
use std::time::{Duration, Instant};

use mongodb::bson::doc;
use serde::Serialize;

use super::Backends;

/// One check's result.
#[derive(Debug, Clone, Serialize)]
pub(crate) struct Check {
    /// What was checked.
    pub(crate) name: String,
    /// `ok`, `degraded` or `down`.
    pub(crate) state: Verdict,
    /// Round trip, when measured.
    pub(crate) latency_ms: Option<f64>,
    /// Detail for a human.
    pub(crate) detail: String,
}

/// Overall and per-check verdicts, ordered from good to bad.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Serialize)]
#[serde(rename_all = "lowercase")]
pub(crate) enum Verdict {
    /// Fine.
    Ok,
    /// Serving, but not as designed.
    Degraded,
    /// Not serving.
    Down,
}

/// The health report.
#[derive(Debug, Clone, Serialize)]
pub struct HealthReport {
    /// The worst check's verdict.
    pub(crate) status: Verdict,
    /// Every check.
    pub(crate) checks: Vec<Check>,
}

impl HealthReport {
    /// 0 healthy, 1 degraded, 2 down.
    pub fn exit_code(&self) -> u8 {
        match self.status {
            Verdict::Ok => 0,
            Verdict::Degraded => 1,
            Verdict::Down => 2,
        }
    }

    /// A table for a terminal.
    pub fn render(&self) -> String {
        let mut out = format!("{:<10} {:<9} {:>9}  detail\n", "check", "state", "latency");
        for check in &self.checks {
            let latency = check
                .latency_ms
                .map_or_else(|| "-".to_string(), |ms| format!("{ms:.2} ms"));
            let state = serde_json::to_value(check.state)
                .ok()
                .and_then(|v| v.as_str().map(str::to_string))
                .unwrap_or_default();
            out.push_str(&format!(
                "{:<10} {:<9} {:>9}  {}\n",
                check.name, state, latency, check.detail
            ));
        }
        let overall = match self.status {
            Verdict::Ok => "healthy",
            Verdict::Degraded => "degraded",
            Verdict::Down => "down",
        };
        out.push_str(&format!("overall: {overall}\n"));
        out
    }
}

/// Runs every check; `ban_urls` are the HTTP caches the follower bans in.
pub async fn health(backends: &Backends, listen: SocketAddr, ban_urls: &[String]) -> HealthReport {
    let (redis, mongodb) = tokio::join!(check_redis(backends), check_mongodb(backends));
    let daemon = tokio::task::spawn_blocking(move || check_daemon(listen))
        .await
        .unwrap_or_else(|e| Check {
            name: "daemon".into(),
            state: Verdict::Down,
            latency_ms: None,
            detail: e.to_string(),
        });
    let media = check_media(backends);
    let watch = check_watch(backends).await;
    let mut checks = vec![redis, mongodb, daemon, media, watch];
    if !ban_urls.is_empty() {
        checks.push(check_bans(backends, ban_urls).await);
    }
    HealthReport {
        status: checks.iter().map(|c| c.state).max().unwrap_or(Verdict::Ok),
        checks,
    }
}

/// The follower: `ok` while one holds the lease, or when none ever followed (MongoDB not
/// a replica set, `watch = "off"`); `degraded` when the index was followed and no process
/// follows now (changes then wait for the TTL or a purge).
async fn check_watch(backends: &Backends) -> Check {
    let check = |state, detail: String| Check {
        name: "watch".into(),
        state,
        latency_ms: None,
        detail,
    };
    let last = |position: &Option<crate::follow::lease::Position>| match position
        .as_ref()
        .and_then(|p| p.last_event_ms)
    {
        Some(ms) => {
            let ago = (crate::timing::unix_ms() - ms).max(0) as f64 / 1000.0;
            format!(", last change applied {ago:.1} s ago")
        }
        None => String::new(),
    };
    match crate::follow::lease::inspect(backends.cache.link(), backends.cache.prefix()).await {
        Ok((Some(holder), position)) => check(
            Verdict::Ok,
            format!(
                "followed by {} (lease {} ms left){}",
                holder.owner,
                holder.remaining_ms,
                last(&position)
            ),
        ),
        Ok((None, None)) => check(
            Verdict::Ok,
            "not followed (MongoDB not a replica set, or watch = \"off\")".into(),
        ),
        Ok((None, position)) => check(
            Verdict::Degraded,
            format!(
                "no process follows the change stream now{}",
                last(&position)
            ),
        ),
        Err(err) => check(Verdict::Degraded, format!("lease unreadable: {err}")),
    }
}

/// The bans of the HTTP caches in front: `degraded` while bans wait in Redis for a cache
/// that does not take them (the follower keeps them there while it retries, and a
/// successor sends them), with how many and since when.
async fn check_bans(backends: &Backends, ban_urls: &[String]) -> Check {
    let prefix = backends.cache.prefix().to_string();
    let mut waiting = Vec::new();
    for url in ban_urls {
        let key = crate::follow::bans::handover_key(&prefix, url.trim_end_matches('/'));
        let count: Result<u64, _> =
            backends
                .cache
                .link()
                .run(|mut conn| async move {
                    redis::cmd("SCARD").arg(&key).query_async(&mut conn).await
                })
                .await;
        match count {
            Ok(0) => {}
            Ok(n) => waiting.push(format!("{url}: {n} undelivered")),
            Err(err) => waiting.push(format!("{url}: unknown ({err})")),
        }
    }
    let (state, detail) = if waiting.is_empty() {
        (
            Verdict::Ok,
            format!("nothing waits for {} cache(s)", ban_urls.len()),
        )
    } else {
        (
            Verdict::Degraded,
            format!("bans failing, kept in Redis: {}", waiting.join("; ")),
        )
    };
    Check {
        name: "bans".into(),
        state,
        latency_ms: None,
        detail,
    }
}

async fn check_redis(backends: &Backends) -> Check {
    let result = backends
        .cache
        .link()
        .run(|mut conn| async move {
            let started = Instant::now();
            redis::cmd("PING").query_async::<()>(&mut conn).await?;
            Ok(started.elapsed())
        })
        .await;
    match result {
        Ok(latency) => Check {
            name: "redis".into(),
            state: Verdict::Ok,
            latency_ms: Some(ms(latency)),
            detail: "PONG".into(),
        },
        Err(err) => Check {
            name: "redis".into(),
            // musicd serves from MongoDB without Redis: slower, not broken.
            state: Verdict::Degraded,
            latency_ms: None,
            detail: failure_detail(err.is_hang(), &err),
        },
    }
}

async fn check_mongodb(backends: &Backends) -> Check {
    let store = &backends.store;
    let latency = match store.ping().await {
        Ok(latency) => latency,
        Err(err) => {
            return Check {
                name: "mongodb".into(),
                state: Verdict::Down,
                latency_ms: None,
                detail: failure_detail(err.is_hang(), &err),
            };
        }
    };
    let collection = store.collection();
    let name = collection.name().to_string();
    let found = collection
        .client()
        .database(collection.namespace().db.as_str())
        .list_collection_names()
        .filter(doc! { "name": &name })
        .await;
    let (state, detail) = match found {
        Ok(names) if names.iter().any(|n| n == &name) => (
            Verdict::Ok,
            format!("collection {} present", collection.namespace()),
        ),
        Ok(_) => (
            Verdict::Down,
            format!("collection {} does not exist", collection.namespace()),
        ),
        Err(err) => (Verdict::Down, err.to_string()),
    };
    Check {
        name: "mongodb".into(),
        state,
        latency_ms: Some(ms(latency)),
        detail,
    }
}

fn check_daemon(listen: SocketAddr) -> Check {
    let started = Instant::now();
    match crate::daemon::control::probe_readyz(listen) {
        Ok((200, body)) => {
            let degraded = body.contains("\"degraded\"");
            Check {
                name: "daemon".into(),
                state: if degraded {
                    Verdict::Degraded
                } else {
                    Verdict::Ok
                },
                latency_ms: Some(ms(started.elapsed())),
                detail: format!("{listen} /readyz 200{}", backends_seen(&body)),
            }
        }
        Ok((code, body)) => Check {
            name: "daemon".into(),
            state: Verdict::Down,
            latency_ms: Some(ms(started.elapsed())),
            detail: format!("{listen} /readyz {code} {body}"),
        },
        Err(err) => Check {
            name: "daemon".into(),
            state: Verdict::Down,
            latency_ms: None,
            detail: format!("{listen}: {err}"),
        },
    }
}

fn check_media(backends: &Backends) -> Check {
    let roots = backends.roots.roots();
    let unreadable: Vec<String> = roots
        .iter()
        .filter(|root| std::fs::read_dir(root).is_err())
        .map(|root| root.display().to_string())
        .collect();
    let state = if unreadable.is_empty() {
        Verdict::Ok
    } else if unreadable.len() < roots.len() {
        Verdict::Degraded
    } else {
        Verdict::Down
    };
    let detail = if unreadable.is_empty() {
        format!("{} root(s) readable", roots.len())
    } else {
        format!("unreadable: {}", unreadable.join(", "))
    };
    Check {
        name: "media".into(),
        state,
        latency_ms: None,
        detail,
    }
}

/// A backend's failure, led by `hung:` when it timed out: a hung server (or a partition)
/// and a refusing one call for different fixes.
fn failure_detail(hung: bool, err: &dyn std::fmt::Display) -> String {
    if hung {
        format!("hung: {err}")
    } else {
        err.to_string()
    }
}

/// What the daemon's `/readyz` says of backends that are not up, e.g. ` (redis hung)`: the
/// daemon's own view, which can differ from musicctl's (another network path).
fn backends_seen(readyz: &str) -> String {
    let Ok(body) = serde_json::from_str::<serde_json::Value>(readyz) else {
        return String::new();
    };
    let troubled: Vec<String> = ["redis", "mongodb"]
        .iter()
        .filter_map(|name| {
            let state = body[name]["state"].as_str()?;
            (state != "up").then(|| format!("{name} {state}"))
        })
        .collect();
    if troubled.is_empty() {
        String::new()
    } else {
        format!(" ({})", troubled.join(", "))
    }
}

fn ms(d: Duration) -> f64 {
    d.as_secs_f64() * 1000.0
}
