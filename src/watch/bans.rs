//! The follower's bans: what changed in the catalogue leaves the HTTP caches in front
//! (varnish with `deploy/varnish.vcl`, every URL of `[http_caches] ban_urls`).
//!
//! * **Batched.** The follower only queues ids ([`Banner::queue`]: a lock and a push, never
//!   a wait), so Redis writes are neither blocked nor reordered by a slow cache. Each cache
//!   has its own sender, which sends at most one `BAN` per [`BATCH_EVERY`], its
//!   `X-Ban-Url` an alternation over up to [`IDS_PER_BAN`] ids
//!   (`^(/musicdb|/stream/musicdb)/(id1|id2|…)([/?]|$)`, the regex `musicctl purge --id`
//!   sends for one).
//! * **Sent twice.** Every delivered ban is sent once more [`ECHO_AFTER`] later: a copy
//!   fetched meanwhile from a musicd that had not heard of the change yet (its pushed
//!   eviction lost; it then keeps answers 1 s at most), or a fetch under way as the ban
//!   arrived, is not kept for the object's TTL.
//! * **Retried.** A refused or failed ban is sent again after a backoff (100 ms doubling to
//!   [`MAX_BACKOFF`]); the ids wait meanwhile, and more than [`MAX_PENDING`] of them become
//!   one ban of every track URL: wider than needed, never narrower.
//! * **Never lost silently.** A ban still undelivered when the process stops is written to
//!   Redis (`{prefix}watch:bans`, one set per cache), and whoever follows next sends it
//!   first; the loss that remains (a process killed while a ban fails, with Redis down too)
//!   is logged and counted in `musicd_watch_bans_dropped_total`. The resume point is saved
//!   only once every change before it was banned or handed to Redis
//!   ([`Banner::settled`]), so a follower killed before its batch went out leaves the
//!   changes to its successor, which replays and bans them.
//! * **Shown.** `/metrics` (`musicd_watch_bans_total`, `..._pending`, `..._lag_seconds`),
//!   `/readyz` (`watch.bans`) and `musicctl health`.

use std::collections::HashMap;
use std::sync::Mutex;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use mongodb::bson::oid::ObjectId;
use serde_json::json;
use tokio::io::{AsyncReadExt, AsyncWriteExt};

use crate::redis_link::RedisLink;

/// At most one BAN per cache this often.
pub const BATCH_EVERY: Duration = Duration::from_millis(50);

/// Ids in one BAN: its `X-Ban-Url` stays under varnish's 8 KiB header limit.
pub const IDS_PER_BAN: usize = 200;

/// Past this many waiting ids, one ban of every track URL replaces them.
pub const MAX_PENDING: usize = 20_000;

/// The longest pause between attempts at a failing cache.
pub const MAX_BACKOFF: Duration = Duration::from_secs(5);

/// Every delivered ban is sent once more this long after: an answer fetched from a musicd
/// that had not heard of the change yet (its eviction subscription down: it keeps answers
/// up to [`crate::catalog::local::UNPUSHED_TTL`]), or a fetch under way while the ban
/// arrived, would otherwise stay cached for the object's whole TTL.
pub const ECHO_AFTER: Duration = Duration::from_millis(1200);

/// Sequence number of an echo: never holds the resume point back.
const ECHO_SEQ: u64 = u64::MAX;

/// How long one BAN may take (connect, send, answer).
const BAN_TIMEOUT: Duration = Duration::from_secs(2);

/// The ids one cache still has to ban.
#[derive(Default)]
struct Pending {
    /// Id -> (sequence number when first queued, when).
    ids: HashMap<ObjectId, (u64, Instant)>,
    /// Every track URL, queued at this sequence number and time.
    everything: Option<(u64, Instant)>,
}

impl Pending {
    fn is_empty(&self) -> bool {
        self.ids.is_empty() && self.everything.is_none()
    }

    /// The lowest sequence number still waiting.
    fn oldest_seq(&self) -> Option<u64> {
        let ids = self.ids.values().map(|(seq, _)| *seq).min();
        match (ids, self.everything.map(|(seq, _)| seq)) {
            (Some(a), Some(b)) => Some(a.min(b)),
            (a, b) => a.or(b),
        }
    }

    fn oldest_time(&self) -> Option<Instant> {
        let ids = self.ids.values().map(|(_, at)| *at).min();
        match (ids, self.everything.map(|(_, at)| at)) {
            (Some(a), Some(b)) => Some(a.min(b)),
            (a, b) => a.or(b),
        }
    }
}

/// One cache in front, its queue and counters.
pub struct Cache {
    url: String,
    pending: Mutex<Pending>,
    wake: tokio::sync::Notify,
    sent: AtomicU64,
    failed: AtomicU64,
    dropped: AtomicU64,
    /// Microseconds between a change being queued and its ban answered, last ban.
    lag_us: AtomicU64,
    last_error: Mutex<String>,
    /// Every id queued up to this sequence number is delivered or copied to Redis.
    kept_through: AtomicU64,
    /// Bans delivered once, to be sent once more when due ([`ECHO_AFTER`]).
    echoes: Mutex<std::collections::VecDeque<(Instant, Echo)>>,
}

/// What a delivered ban covered, for its echo.
enum Echo {
    Ids(Vec<ObjectId>),
    Everything,
}

impl Cache {
    fn new(url: &str) -> Cache {
        Cache {
            url: url.trim_end_matches('/').to_string(),
            pending: Mutex::default(),
            wake: tokio::sync::Notify::new(),
            sent: AtomicU64::new(0),
            failed: AtomicU64::new(0),
            dropped: AtomicU64::new(0),
            lag_us: AtomicU64::new(0),
            last_error: Mutex::default(),
            kept_through: AtomicU64::new(0),
            echoes: Mutex::default(),
        }
    }

    fn pending(&self) -> std::sync::MutexGuard<'_, Pending> {
        self.pending.lock().unwrap_or_else(|p| p.into_inner())
    }

    fn echoes(&self) -> std::sync::MutexGuard<'_, std::collections::VecDeque<(Instant, Echo)>> {
        self.echoes.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Moves the echoes that are due into the queue (as echoes: they are not echoed again).
    fn queue_due_echoes(&self) {
        let now = Instant::now();
        let mut due = Vec::new();
        {
            let mut echoes = self.echoes();
            while echoes.front().is_some_and(|(at, _)| *at <= now) {
                if let Some((_, echo)) = echoes.pop_front() {
                    due.push(echo);
                }
            }
        }
        if due.is_empty() {
            return;
        }
        let mut pending = self.pending();
        for echo in due {
            match echo {
                Echo::Everything => {
                    if pending.everything.is_none() {
                        pending.ids.clear();
                        pending.everything = Some((ECHO_SEQ, now));
                    }
                }
                Echo::Ids(ids) if pending.everything.is_none() => {
                    for id in ids {
                        pending.ids.entry(id).or_insert((ECHO_SEQ, now));
                    }
                }
                Echo::Ids(_) => {}
            }
        }
    }

    /// Its URL.
    pub fn url(&self) -> &str {
        &self.url
    }

    /// Bans answered 2xx.
    pub fn sent(&self) -> u64 {
        self.sent.load(Ordering::Relaxed)
    }

    /// Attempts that failed (each retried).
    pub fn failed(&self) -> u64 {
        self.failed.load(Ordering::Relaxed)
    }

    /// Ids (or "everything") given up on, never delivered nor handed over.
    pub fn dropped(&self) -> u64 {
        self.dropped.load(Ordering::Relaxed)
    }

    /// Ids waiting (an "everything" counts one).
    pub fn waiting(&self) -> usize {
        let pending = self.pending();
        pending.ids.len() + usize::from(pending.everything.is_some())
    }

    /// Queued-to-answered time of the last delivered ban; while bans wait, the age of the
    /// oldest.
    pub fn lag_seconds(&self) -> f64 {
        let waiting = self
            .pending()
            .oldest_time()
            .map_or(0.0, |at| at.elapsed().as_secs_f64());
        let last = self.lag_us.load(Ordering::Relaxed) as f64 / 1e6;
        waiting.max(last)
    }

    fn to_json(&self) -> serde_json::Value {
        json!({
            "url": self.url,
            "sent": self.sent(),
            "failed": self.failed(),
            "dropped": self.dropped(),
            "pending": self.waiting(),
            "lag_seconds": self.lag_seconds(),
            "last_error": self.last_error.lock().map(|e| e.clone()).unwrap_or_default(),
        })
    }
}

/// The bans of one process's follower: a queue and a sender per cache.
pub struct Banner {
    caches: Vec<Cache>,
    prefixes: Vec<String>,
    /// Sequence number of the last id queued.
    queued: AtomicU64,
    /// Held while queuing and while a failing cache's queue is copied to Redis, so that
    /// copy holds every id up to the sequence number read with it.
    order: Mutex<()>,
}

impl Banner {
    /// A banner for these caches and route prefixes.
    pub fn new(ban_urls: &[String], route_prefixes: &[String]) -> Banner {
        Banner {
            caches: ban_urls.iter().map(|u| Cache::new(u)).collect(),
            prefixes: route_prefixes.to_vec(),
            queued: AtomicU64::new(0),
            order: Mutex::new(()),
        }
    }

    fn order(&self) -> std::sync::MutexGuard<'_, ()> {
        self.order.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// The caches, for metrics.
    pub fn caches(&self) -> &[Cache] {
        &self.caches
    }

    /// Queues a ban of `id`'s URLs in every cache. Never waits.
    pub fn queue(&self, id: ObjectId) {
        if self.caches.is_empty() {
            return;
        }
        let _order = self.order();
        let seq = self.queued.fetch_add(1, Ordering::AcqRel) + 1;
        let now = Instant::now();
        for cache in &self.caches {
            {
                let mut pending = cache.pending();
                if pending.everything.is_none() {
                    pending.ids.entry(id).or_insert((seq, now));
                    if pending.ids.len() > MAX_PENDING {
                        let oldest = (
                            pending.oldest_seq().unwrap_or(seq),
                            pending.oldest_time().unwrap_or(now),
                        );
                        pending.ids.clear();
                        pending.everything = Some(oldest);
                    }
                }
            }
            cache.wake.notify_one();
        }
    }

    /// Queues a ban of every track URL (after a rebuild: anything may have changed).
    pub fn queue_everything(&self) {
        if self.caches.is_empty() {
            return;
        }
        let _order = self.order();
        let seq = self.queued.fetch_add(1, Ordering::AcqRel) + 1;
        let now = Instant::now();
        for cache in &self.caches {
            {
                let mut pending = cache.pending();
                let oldest = (
                    pending.oldest_seq().unwrap_or(seq).min(seq),
                    pending.oldest_time().unwrap_or(now).min(now),
                );
                pending.ids.clear();
                pending.everything = Some(oldest);
            }
            cache.wake.notify_one();
        }
    }

    /// The sequence number of the last id queued so far.
    pub fn queued(&self) -> u64 {
        self.queued.load(Ordering::Acquire)
    }

    /// Whether every ban queued up to `seq` is safe from this process dying: answered by
    /// its cache, or (for a cache that fails) copied to Redis for the next follower.
    pub fn settled(&self, seq: u64) -> bool {
        self.caches.iter().all(|cache| {
            cache.kept_through.load(Ordering::Acquire) >= seq
                || cache
                    .pending()
                    .oldest_seq()
                    .is_none_or(|oldest| oldest > seq)
        })
    }

    /// For `/readyz`.
    pub fn to_json(&self) -> serde_json::Value {
        serde_json::Value::Array(self.caches.iter().map(Cache::to_json).collect())
    }

    /// Sends every cache's bans until `stop` completes; then tries once more, for at most
    /// `grace`, and writes what is still undelivered to Redis for the next follower.
    pub async fn run(
        &self,
        link: &RedisLink,
        prefix: &str,
        grace: Duration,
        stop: impl Future<Output = ()>,
    ) {
        if self.caches.is_empty() {
            return;
        }
        self.take_over(link, prefix).await;
        let senders = futures_util::future::join_all(
            self.caches
                .iter()
                .map(|cache| self.send_forever(cache, link, prefix)),
        );
        tokio::select! {
            () = stop => {}
            _ = senders => {}
        }
        let last_try =
            futures_util::future::join_all(self.caches.iter().map(|cache| self.send_batch(cache)));
        let _ = tokio::time::timeout(grace, last_try).await;
        self.hand_over(link, prefix).await;
    }

    /// Queues the bans a previous follower could not deliver.
    async fn take_over(&self, link: &RedisLink, prefix: &str) {
        for cache in &self.caches {
            let key = handover_key(prefix, &cache.url);
            let taken = link
                .run(|mut conn| async move {
                    redis::pipe()
                        .atomic()
                        .cmd("SMEMBERS")
                        .arg(&key)
                        .cmd("DEL")
                        .arg(&key)
                        .ignore()
                        .query_async::<(Vec<String>,)>(&mut conn)
                        .await
                })
                .await;
            let Ok((members,)) = taken else { continue };
            if members.is_empty() {
                continue;
            }
            tracing::info!(cache = %cache.url, bans = members.len(), "sending the bans a previous follower left");
            let _order = self.order();
            let seq = self.queued.fetch_add(1, Ordering::AcqRel) + 1;
            let now = Instant::now();
            let mut pending = cache.pending();
            for member in members {
                if member == crate::catalog::evictions::EVERYTHING {
                    pending.everything = Some((seq, now));
                } else if let Ok(id) = ObjectId::parse_str(&member) {
                    pending.ids.entry(id).or_insert((seq, now));
                }
            }
            drop(pending);
            cache.wake.notify_one();
        }
    }

    /// Writes undelivered bans to Redis for the next follower; counts and logs what even
    /// that could not keep.
    async fn hand_over(&self, link: &RedisLink, prefix: &str) {
        for cache in &self.caches {
            let count = cache.waiting();
            if count == 0 {
                continue;
            }
            match self.keep(link, prefix, cache).await {
                Ok(()) => tracing::warn!(
                    cache = %cache.url, bans = count,
                    "bans not delivered before stopping: left in Redis for the next follower"
                ),
                Err(err) => {
                    cache.dropped.fetch_add(count as u64, Ordering::Relaxed);
                    tracing::error!(
                        cache = %cache.url, bans = count, error = %err,
                        "bans lost: neither the cache nor Redis took them; purge the cache by hand"
                    );
                }
            }
            *cache.pending() = Pending::default();
        }
    }

    /// Copies a cache's queue to Redis (the set the next follower sends first).
    async fn keep(
        &self,
        link: &RedisLink,
        prefix: &str,
        cache: &Cache,
    ) -> Result<(), crate::redis_link::LinkError> {
        let (members, through) = {
            let _order = self.order();
            let pending = cache.pending();
            let members: Vec<String> = if pending.everything.is_some() {
                vec![crate::catalog::evictions::EVERYTHING.to_string()]
            } else {
                pending.ids.keys().map(|id| id.to_hex()).collect()
            };
            (members, self.queued())
        };
        let key = handover_key(prefix, &cache.url);
        if !members.is_empty() {
            link.run(|mut conn| async move {
                redis::pipe()
                    .cmd("SADD")
                    .arg(&key)
                    .arg(&members)
                    .ignore()
                    .cmd("EXPIRE")
                    .arg(&key)
                    .arg(HANDOVER_TTL.as_secs())
                    .ignore()
                    .query_async::<()>(&mut conn)
                    .await
            })
            .await?;
        }
        cache.kept_through.fetch_max(through, Ordering::AcqRel);
        Ok(())
    }

    /// Forgets the copy of a cache's queue in Redis once the cache took everything.
    async fn unkeep(&self, link: &RedisLink, prefix: &str, cache: &Cache) {
        let key = handover_key(prefix, &cache.url);
        let _ = link
            .run(|mut conn| async move {
                redis::cmd("DEL")
                    .arg(&key)
                    .query_async::<()>(&mut conn)
                    .await
            })
            .await;
    }

    async fn send_forever(&self, cache: &Cache, link: &RedisLink, prefix: &str) {
        let mut backoff = Duration::ZERO;
        let mut kept = false;
        loop {
            if cache.pending().is_empty() {
                if kept {
                    self.unkeep(link, prefix, cache).await;
                    kept = false;
                }
                let due = cache.echoes().front().map(|(at, _)| *at);
                match due {
                    Some(at) => {
                        tokio::select! {
                            () = cache.wake.notified() => {}
                            () = tokio::time::sleep_until(at.into()) => {}
                        }
                    }
                    None => cache.wake.notified().await,
                }
            }
            cache.queue_due_echoes();
            let started = Instant::now();
            backoff = if self.send_batch(cache).await {
                Duration::ZERO
            } else {
                // The cache may stay away for long: what it owes is kept in Redis, so the
                // resume point can advance and a successor still sends it.
                match self.keep(link, prefix, cache).await {
                    Ok(()) => kept = true,
                    Err(err) => {
                        tracing::warn!(cache = %cache.url, error = %err, "could not keep undelivered bans in Redis")
                    }
                }
                (backoff * 2).clamp(Duration::from_millis(100), MAX_BACKOFF)
            };
            tokio::time::sleep((BATCH_EVERY + backoff).saturating_sub(started.elapsed())).await;
        }
    }

    /// Sends one batch; false if it failed (the ids are queued again).
    async fn send_batch(&self, cache: &Cache) -> bool {
        let (batch, everything, oldest) = {
            let mut pending = cache.pending();
            if pending.is_empty() {
                return true;
            }
            let oldest = pending.oldest_time();
            match pending.everything.take() {
                Some(everything) => (vec![], Some(everything), oldest),
                None => {
                    let ids: Vec<ObjectId> =
                        pending.ids.keys().take(IDS_PER_BAN).copied().collect();
                    let batch: Vec<(ObjectId, (u64, Instant))> = ids
                        .iter()
                        .filter_map(|id| pending.ids.remove(id).map(|v| (*id, v)))
                        .collect();
                    (batch, None, oldest)
                }
            }
        };
        let regex = match everything {
            Some(_) => crate::admin::ban::everything_regex(&self.prefixes),
            None => {
                let hex: Vec<String> = batch.iter().map(|(id, _)| id.to_hex()).collect();
                crate::admin::ban::ids_regex(&self.prefixes, &hex)
            }
        };
        match ban(&cache.url, &regex).await {
            Ok(status) if (200..300).contains(&status) => {
                cache.sent.fetch_add(1, Ordering::Relaxed);
                let echo = match everything {
                    Some((seq, _)) => (seq != ECHO_SEQ).then_some(Echo::Everything),
                    None => {
                        let ids: Vec<ObjectId> = batch
                            .iter()
                            .filter(|(_, (seq, _))| *seq != ECHO_SEQ)
                            .map(|(id, _)| *id)
                            .collect();
                        (!ids.is_empty()).then_some(Echo::Ids(ids))
                    }
                };
                if let Some(echo) = echo {
                    cache
                        .echoes()
                        .push_back((Instant::now() + ECHO_AFTER, echo));
                }
                if let Some(oldest) = oldest {
                    let lag = u64::try_from(oldest.elapsed().as_micros()).unwrap_or(u64::MAX);
                    cache.lag_us.store(lag, Ordering::Relaxed);
                }
                true
            }
            outcome => {
                let why = match outcome {
                    Ok(status) => format!("answered {status}"),
                    Err(err) => err,
                };
                if cache.failed.fetch_add(1, Ordering::Relaxed) == 0
                    || cache.last_error.lock().is_ok_and(|e| *e != why)
                {
                    tracing::warn!(cache = %cache.url, error = %why, "ban failed; retrying");
                }
                if let Ok(mut last) = cache.last_error.lock() {
                    last.clone_from(&why);
                }
                // Back in the queue, keeping when each was first queued.
                let mut pending = cache.pending();
                match everything {
                    Some(everything) => {
                        pending.ids.clear();
                        pending.everything = Some(everything);
                    }
                    None if pending.everything.is_none() => {
                        for (id, first) in batch {
                            let entry = pending.ids.entry(id).or_insert(first);
                            *entry = (entry.0.min(first.0), entry.1.min(first.1));
                        }
                    }
                    None => {}
                }
                false
            }
        }
    }
}

/// How long undelivered bans wait in Redis for the next follower.
const HANDOVER_TTL: Duration = Duration::from_secs(7 * 24 * 3600);

/// The Redis set of the bans a cache still owes (see the module doc).
pub fn handover_key(prefix: &str, url: &str) -> String {
    format!("{prefix}watch:bans:{url}")
}

/// One `BAN` to the cache at `base` (`http://host:port`); its status.
async fn ban(base: &str, regex: &str) -> Result<u16, String> {
    let authority = base
        .strip_prefix("http://")
        .ok_or_else(|| format!("{base}: only http:// URLs are supported"))?
        .trim_end_matches('/')
        .to_string();
    let exchange = async {
        let mut stream = tokio::net::TcpStream::connect(authority.as_str())
            .await
            .map_err(|e| format!("connect: {e}"))?;
        let request = format!(
            "BAN / HTTP/1.1\r\nHost: {authority}\r\nX-Ban-Url: {regex}\r\nConnection: close\r\n\r\n"
        );
        stream
            .write_all(request.as_bytes())
            .await
            .map_err(|e| format!("send: {e}"))?;
        let mut answer = Vec::with_capacity(512);
        let mut buf = [0u8; 1024];
        loop {
            let n = stream
                .read(&mut buf)
                .await
                .map_err(|e| format!("read: {e}"))?;
            answer.extend_from_slice(&buf[..n]);
            let mut headers = [httparse::EMPTY_HEADER; 32];
            let mut response = httparse::Response::new(&mut headers);
            match response.parse(&answer) {
                Ok(httparse::Status::Complete(_)) => return Ok(response.code.unwrap_or(0)),
                Ok(httparse::Status::Partial) if n > 0 => {}
                _ => return Err("not an HTTP answer".to_string()),
            }
        }
    };
    tokio::time::timeout(BAN_TIMEOUT, exchange)
        .await
        .unwrap_or_else(|_| Err(format!("no answer within {BAN_TIMEOUT:?}")))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn queued_ids_settle_only_when_sent_and_overflow_becomes_everything() {
        let banner = Banner::new(&["http://127.0.0.1:1".into()], &["/musicdb".into()]);
        let id = ObjectId::new();
        banner.queue(id);
        banner.queue(id);
        let seq = banner.queued();
        assert!(!banner.settled(seq));
        assert_eq!(
            banner.caches()[0].waiting(),
            1,
            "one id queued twice waits once"
        );
        for _ in 0..=MAX_PENDING {
            banner.queue(ObjectId::new());
        }
        assert_eq!(
            banner.caches()[0].waiting(),
            1,
            "collapsed into one ban of everything"
        );
        assert!(banner.caches()[0].pending().everything.is_some());
        assert!(
            !banner.settled(seq),
            "the collapse keeps the oldest sequence number"
        );
    }

    #[test]
    fn without_caches_nothing_waits() {
        let banner = Banner::new(&[], &["/musicdb".into()]);
        banner.queue(ObjectId::new());
        assert!(banner.settled(banner.queued()));
    }
}
