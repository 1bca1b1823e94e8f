//! `musicctl purge PATTERN`: delete cache keys by glob pattern, safely on a live server.
//!
//! `SCAN MATCH pattern COUNT n` walks the keyspace in small steps (never `KEYS`, which
//! blocks Redis), and the keys found are removed with `UNLINK` (freed in the background) in
//! batches of n, one round trip per batch. Keys travel as raw bytes end to end, so quotes,
//! spaces, newlines and invalid UTF-8 need no escaping and nothing goes through a shell or
//! a Lua `unpack`. On a Redis Cluster every master is scanned over its own connection and
//! each key is unlinked on the master that owns it, one command per key in a pipeline, so
//! no multi-key command can cross slots.

use std::time::{Duration, Instant};

use futures_util::StreamExt;
use futures_util::stream::FuturesUnordered;
use redis::aio::MultiplexedConnection;
use serde::Serialize;

use super::AdminError;
use crate::redis_link::{self, RedisTarget};

/// How to purge.
#[derive(Debug, Clone)]
pub struct PurgeOptions {
    /// Glob pattern (Redis `MATCH` syntax), as bytes.
    pub pattern: Vec<u8>,
    /// `SCAN COUNT` and keys per `UNLINK` batch.
    pub batch: usize,
    /// Pause between batches, to spare a busy server.
    pub pause: Duration,
    /// Count and sample, delete nothing.
    pub dry_run: bool,
    /// How many matching keys to keep as a sample for the report.
    pub sample: usize,
}

/// What a purge did.
#[derive(Debug, Default, Clone, Serialize)]
pub struct PurgeReport {
    /// Masters scanned.
    pub nodes: usize,
    /// Keys that matched.
    pub matched: u64,
    /// Keys removed (a key that expired between SCAN and UNLINK is matched, not removed).
    pub removed: u64,
    /// Keys whose UNLINK failed.
    pub failed: u64,
    /// A few matching keys, shown with non-printable bytes escaped.
    pub sample: Vec<String>,
    /// Wall time in seconds.
    pub seconds: f64,
    /// Whether this was a dry run.
    pub dry_run: bool,
}

/// Progress, for a progress line.
#[derive(Debug, Clone, Copy)]
pub struct PurgeProgress {
    /// Keys matched so far.
    pub matched: u64,
    /// Keys removed so far.
    pub removed: u64,
    /// Masters finished.
    pub nodes_done: usize,
    /// Masters in all.
    pub nodes: usize,
}

/// Whether a pattern matches every key (needs `--force`).
pub fn matches_everything(pattern: &[u8]) -> bool {
    pattern.iter().all(|&b| b == b'*')
}

/// Purges the keys matching `options.pattern` on every master of `target`.
pub async fn purge(
    target: &RedisTarget,
    timeout: Duration,
    options: &PurgeOptions,
    mut progress: impl FnMut(PurgeProgress),
) -> Result<PurgeReport, AdminError> {
    let started = Instant::now();
    let masters = redis_link::masters(target, timeout).await?;
    let cluster = matches!(target, RedisTarget::Cluster(_));
    let mut report = PurgeReport {
        nodes: masters.len(),
        dry_run: options.dry_run,
        ..PurgeReport::default()
    };
    for (index, master) in masters.iter().enumerate() {
        let mut conn = redis_link::connect_node(master, timeout).await?;
        // UNLINKs run while the next SCAN step is under way (the connection multiplexes),
        // a few batches deep, so the walk is not one round trip per step slower.
        let mut unlinking = FuturesUnordered::new();
        let mut cursor: u64 = 0;
        loop {
            let (next, keys): (u64, Vec<Vec<u8>>) = redis::cmd("SCAN")
                .arg(cursor)
                .arg("MATCH")
                .arg(options.pattern.as_slice())
                .arg("COUNT")
                .arg(options.batch)
                .query_async(&mut conn)
                .await
                .map_err(redis_link::LinkError::from)?;
            report.matched += keys.len() as u64;
            for key in keys
                .iter()
                .take(options.sample.saturating_sub(report.sample.len()))
            {
                report.sample.push(escape(key));
            }
            if !options.dry_run && !keys.is_empty() {
                let conn = conn.clone();
                unlinking.push(async move {
                    let mut conn = conn;
                    let result = unlink(&mut conn, &keys, cluster).await;
                    (keys.len() as u64, result)
                });
                while unlinking.len() >= UNLINKS_IN_FLIGHT {
                    if let Some(done) = unlinking.next().await {
                        account(&mut report, master, done);
                    }
                }
            }
            progress(PurgeProgress {
                matched: report.matched,
                removed: report.removed,
                nodes_done: index,
                nodes: masters.len(),
            });
            cursor = next;
            if cursor == 0 {
                break;
            }
            if !options.pause.is_zero() {
                tokio::time::sleep(options.pause).await;
            }
        }
        while let Some(done) = unlinking.next().await {
            account(&mut report, master, done);
        }
    }
    progress(PurgeProgress {
        matched: report.matched,
        removed: report.removed,
        nodes_done: masters.len(),
        nodes: masters.len(),
    });
    report.seconds = started.elapsed().as_secs_f64();
    Ok(report)
}

/// Batches being unlinked at once per master.
const UNLINKS_IN_FLIGHT: usize = 4;

fn account(
    report: &mut PurgeReport,
    master: &str,
    (count, result): (u64, redis::RedisResult<u64>),
) {
    match result {
        Ok(removed) => report.removed += removed,
        Err(err) => {
            tracing::warn!(node = %master, error = %err, keys = count, "UNLINK failed");
            report.failed += count;
        }
    }
}

async fn unlink(
    conn: &mut MultiplexedConnection,
    keys: &[Vec<u8>],
    one_per_command: bool,
) -> redis::RedisResult<u64> {
    if keys.is_empty() {
        return Ok(0);
    }
    if one_per_command {
        // Cluster: keys of one master may lie in many slots, and multi-key commands must
        // not cross slots. A pipeline of single-key UNLINKs costs one round trip all the same.
        let mut pipe = redis::pipe();
        for key in keys {
            pipe.cmd("UNLINK").arg(key.as_slice());
        }
        let counts: Vec<u64> = pipe.query_async(conn).await?;
        Ok(counts.iter().sum())
    } else {
        let mut cmd = redis::cmd("UNLINK");
        for key in keys {
            cmd.arg(key.as_slice());
        }
        cmd.query_async(conn).await
    }
}

/// A key for display: printable ASCII as is, everything else as `\xNN`.
pub fn escape(key: &[u8]) -> String {
    let mut out = String::with_capacity(key.len());
    for &b in key {
        match b {
            b'\\' => out.push_str("\\\\"),
            b'"' => out.push_str("\\\""),
            0x20..=0x7e => out.push(b as char),
            b'\n' => out.push_str("\\n"),
            _ => out.push_str(&format!("\\x{b:02x}")),
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_star_patterns_match_everything() {
        assert!(matches_everything(b"*"));
        assert!(matches_everything(b"**"));
        assert!(!matches_everything(b"track_*"));
        assert!(!matches_everything(b"*_x"));
    }

    #[test]
    fn escape_keeps_keys_readable_and_unambiguous() {
        assert_eq!(escape(b"track_a b"), "track_a b");
        assert_eq!(escape(b"it's \"q\"\n\xff"), "it's \\\"q\\\"\\n\\xff");
    }
}
