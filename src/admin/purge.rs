//! `musicctl purge PATTERN`: delete cache keys by glob pattern, safely on a live server.
//!
//! `SCAN MATCH pattern COUNT n` walks the keyspace in small steps (never `KEYS`, which
//! blocks Redis), and the keys found are removed with `UNLINK` (freed in the background) in
//! batches of n, one round trip per batch. Keys travel as raw bytes end to end, so quotes,
//! spaces, newlines and invalid UTF-8 need no escaping and nothing goes through a shell or
//! a Lua `unpack`. The fill leases of the purged entries are revoked first
//! ([`crate::catalog::cache::revoke_leases`]), so a lookup that read MongoDB before the
//! purge cannot put its answer back after it. On a Redis Cluster every master is scanned over its own connection and
//! each key is unlinked on the master that owns it, one command per key in a pipeline, so
//! no multi-key command can cross slots.

use std::time::{Duration, Instant};

use futures_util::StreamExt;
use futures_util::stream::FuturesUnordered;
use redis::aio::MultiplexedConnection;
use serde::Serialize;

use super::AdminError;
use crate::catalog::backends::Backends;
use crate::catalog::evictions;
use crate::config::Config;
use crate::redis_link::{self, RedisTarget};
use crate::varnish;

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
    pub(crate) nodes: usize,
    /// Keys that matched.
    pub(crate) matched: u64,
    /// Keys removed (a key that expired between SCAN and UNLINK is matched, not removed).
    pub(crate) removed: u64,
    /// Keys whose UNLINK failed.
    pub(crate) failed: u64,
    /// Fill leases of the matching entries revoked before the keys were removed: a lookup
    /// that read MongoDB before the purge cannot write its answer back after it.
    pub(crate) leases_revoked: u64,
    /// A few matching keys, shown with non-printable bytes escaped.
    pub(crate) sample: Vec<String>,
    /// Wall time in seconds.
    pub(crate) seconds: f64,
    /// Whether this was a dry run.
    pub(crate) dry_run: bool,
}

/// What to purge: one id, or the keys a glob matches.
#[derive(Debug, Clone)]
pub enum PurgeTarget {
    /// One track id (24 hex digits).
    Id(String),
    /// A Redis glob; `force` allows one that matches every key in Redis.
    Pattern {
        /// The glob.
        pattern: String,
        /// Allow a glob that matches everything.
        force: bool,
    },
}

/// A whole purge, everywhere a track's answer is kept: the Redis keys, every musicd's
/// in-process cache (told through the eviction channel), and every HTTP cache in front
/// (`[http_caches] ban_urls`).
#[derive(Debug, Clone, Serialize)]
#[serde(untagged)]
pub enum Purged {
    /// One id.
    Id {
        /// Its Redis key.
        key: String,
        /// Whether the key existed (and was removed).
        removed: bool,
        /// Nothing was changed.
        dry_run: bool,
        /// What each HTTP cache did.
        bans: Vec<BanOutcome>,
    },
    /// A glob.
    Pattern {
        /// What the Redis purge did.
        #[serde(flatten)]
        report: PurgeReport,
        /// What each HTTP cache did.
        bans: Vec<BanOutcome>,
    },
}

impl Purged {
    /// 0 when every key that matched is gone and every cache took its ban, else 1.
    pub fn exit_code(&self) -> u8 {
        let (failed, bans) = match self {
            Purged::Id { bans, .. } => (0, bans),
            Purged::Pattern { report, bans } => (report.failed, bans),
        };
        u8::from(failed > 0 || !bans.iter().all(BanOutcome::taken))
    }

    /// The report for a terminal.
    pub fn render(&self) -> String {
        let (mut out, bans) = match self {
            Purged::Id {
                key,
                removed,
                dry_run,
                bans,
            } => {
                let what = match (dry_run, removed) {
                    (true, _) => "(dry run)",
                    (false, true) => "removed",
                    (false, false) => "was not cached",
                };
                (format!("purge: {key} {what}\n"), bans)
            }
            Purged::Pattern { report, bans } if report.dry_run => {
                let mut out = format!(
                    "purge (dry run): {} keys match on {} node(s); nothing deleted ({:.2}s)\n",
                    report.matched, report.nodes, report.seconds
                );
                for key in &report.sample {
                    out.push_str(&format!("  \"{key}\"\n"));
                }
                (out, bans)
            }
            Purged::Pattern { report, bans } => {
                let failed = if report.failed > 0 {
                    format!("; {} could not be removed", report.failed)
                } else {
                    String::new()
                };
                let leases = if report.leases_revoked > 0 {
                    format!(
                        "; {} lookups under way will not write back",
                        report.leases_revoked
                    )
                } else {
                    String::new()
                };
                let out = format!(
                    "purge: removed {} of {} matching keys on {} node(s) in {:.2}s{failed}{leases}\n",
                    report.removed, report.matched, report.nodes, report.seconds
                );
                (out, bans)
            }
        };
        for ban in bans {
            out.push_str(&ban.render());
            out.push('\n');
        }
        out
    }
}

/// Purges `target` everywhere (see [`Purged`]); `on_progress` hears a glob's progress.
pub async fn purge_everywhere(
    config: &Config,
    backends: &Backends,
    target: PurgeTarget,
    options: &PurgeOptions,
    on_progress: impl FnMut(PurgeProgress),
) -> Result<Purged, AdminError> {
    let dry_run = options.dry_run;
    let (pattern, force) = match target {
        PurgeTarget::Id(id) => {
            let oid = mongodb::bson::oid::ObjectId::parse_str(&id)
                .map_err(|_| AdminError::Usage(format!("`{id}` is not a 24-digit hex ObjectId")))?;
            let cache = &backends.cache;
            let removed = if dry_run {
                false
            } else {
                let removed = cache.forget(&oid).await?;
                // Every musicd forgets it now rather than at the end of its in-process TTL.
                evictions::publish(cache.link(), cache.prefix(), Some(&[oid])).await?;
                removed
            };
            let regex = varnish::id_regex(&config.route_prefixes, &oid.to_hex());
            return Ok(Purged::Id {
                key: cache.key(&oid),
                removed,
                dry_run,
                bans: ban_everywhere(&config.ban_urls, Some(&regex), dry_run).await,
            });
        }
        PurgeTarget::Pattern { pattern, force } => (pattern, force),
    };
    if pattern.is_empty() {
        return Err(AdminError::Usage(format!(
            "an empty pattern matches nothing; did you mean \"{}*\"?",
            config.redis.prefix
        )));
    }
    if matches_everything(pattern.as_bytes()) && !force {
        return Err(AdminError::Usage(format!(
            "`{pattern}` matches every key in Redis, not just musicd's; add --force if you mean it"
        )));
    }
    let options = PurgeOptions {
        pattern: pattern.clone().into_bytes(),
        ..options.clone()
    };
    // Leases first: a lookup that took one before the purge may have read MongoDB before
    // the change it follows, and its fill could land after its key was removed (the
    // write uses up the lease, so revoking after would find nothing). One that takes a
    // lease after this reads MongoDB after the change.
    let leases_revoked = if dry_run {
        0
    } else {
        crate::catalog::cache::revoke_leases(
            &config.redis.target,
            config.redis.batch_timeout(),
            &options.pattern,
        )
        .await?
    };
    let mut report = purge(
        &config.redis.target,
        config.redis.batch_timeout(),
        &options,
        on_progress,
    )
    .await?;
    report.leases_revoked = leases_revoked;
    if !dry_run {
        evictions::publish(backends.cache.link(), backends.cache.prefix(), None).await?;
    }
    let regex = varnish::glob_regex(&config.route_prefixes, &config.redis.prefix, &pattern);
    Ok(Purged::Pattern {
        report,
        bans: ban_everywhere(&config.ban_urls, regex.as_deref(), dry_run).await,
    })
}

/// How long a purge waits for each cache to answer its `BAN`.
const BAN_TIMEOUT: Duration = Duration::from_secs(10);

/// What one cache did with a ban.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct BanOutcome {
    /// The cache (`[http_caches] ban_urls`).
    pub(crate) url: String,
    /// The URL regex banned.
    pub(crate) regex: String,
    /// The status it answered ([`varnish::taken`] says whether that took).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(crate) status: Option<u16>,
    /// Why it could not be asked.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(crate) error: Option<String>,
    /// Not sent: a dry run.
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    pub(crate) dry_run: bool,
}

impl BanOutcome {
    /// Whether the cache took the ban (a dry run takes nothing and fails nothing).
    pub(crate) fn taken(&self) -> bool {
        self.dry_run || self.status.is_some_and(varnish::taken)
    }

    /// One line: `ban: url regex -> status`.
    pub(crate) fn render(&self) -> String {
        match (self.status, &self.error) {
            (Some(status), _) => format!("ban: {} {} -> {status}", self.url, self.regex),
            (None, Some(error)) => format!("ban: {} failed: {error}", self.url),
            (None, None) => format!("ban: {} {} (dry run)", self.url, self.regex),
        }
    }
}

/// Bans `regex` in every cache of `urls` at once (none when `regex` is `None`: the purge
/// named no track URL).
async fn ban_everywhere(urls: &[String], regex: Option<&str>, dry_run: bool) -> Vec<BanOutcome> {
    let Some(regex) = regex else {
        return Vec::new();
    };
    futures_util::future::join_all(urls.iter().map(|url| async move {
        let mut outcome = BanOutcome {
            url: url.clone(),
            regex: regex.to_string(),
            status: None,
            error: None,
            dry_run,
        };
        if !dry_run {
            match varnish::ban(url, regex, BAN_TIMEOUT).await {
                Ok(status) => outcome.status = Some(status),
                Err(err) => outcome.error = Some(format!("BAN {url}: {err}")),
            }
        }
        outcome
    }))
    .await
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
pub(crate) fn matches_everything(pattern: &[u8]) -> bool {
    pattern.iter().all(|&b| b == b'*')
}

/// Purges the keys matching `options.pattern` on every master of `target`.
pub(crate) async fn purge(
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
pub(crate) fn escape(key: &[u8]) -> String {
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
