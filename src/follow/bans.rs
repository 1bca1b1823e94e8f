//! The follower's bans: what changed in the catalogue leaves the HTTP caches in front
//! (varnish with `deploy/varnish.vcl`, every URL of `[http_caches] ban_urls`).
//!
//! * **Batched.** The follower only queues ids ([`Banner::queue`]: a lock and a push, never
//!   a wait), so Redis writes are neither blocked nor reordered by a slow cache. Each cache
//!   has its own sender, which sends at most one `BAN` per [`BATCH_EVERY`], its
//!   `X-Ban-Url` an alternation over up to [`IDS_PER_BAN`] ids
//!   (`^(/musicdb|/stream/musicdb)/(id1|id2|…)([/?]|$)`, the regex `musicctl purge --id`
//!   sends for one).
//! * **Sent three times.** Every delivered ban is sent once more [`EARLY_ECHO_AFTER`] later
//!   and again [`ECHO_AFTER`] later. The ban and a musicd's pushed eviction travel side
//!   by side, so a fetch that reaches a musicd which has not applied its eviction yet, or
//!   one under way as the ban arrived, can put the old answer back in the cache: the
//!   early echo takes it out within a fraction of a second (it bounds staleness through
//!   varnish), the late one covers a musicd whose pushed eviction was lost (it then keeps
//!   answers 1 s at most). Neither copy is kept for the object's TTL.
//! * **Retried.** A refused or failed ban is sent again after a backoff (100 ms doubling to
//!   [`MAX_BACKOFF`]); the ids wait meanwhile, and more than [`MAX_PENDING`] of them become
//!   one ban of every track URL: wider than needed, never narrower.
//! * **Never lost silently.** While a cache fails, and when the process stops, what it is
//!   owed (waiting or being sent) is written to Redis (`{prefix}watch:bans:{url}`); a
//!   follower that takes the lease sends it first ([`Banner::take_over`]), and the copy is
//!   forgotten only once the cache took everything; the loss that remains (a process killed while a ban fails, with Redis down too)
//!   is logged and counted in `musicd_watch_bans_dropped_total`. The resume point is saved
//!   only once every change before it was banned or handed to Redis
//!   ([`Banner::settled`]), so a follower killed before its batch went out leaves the
//!   changes to its successor, which replays and bans them.
//! * **Shown.** `/metrics` (`musicd_watch_bans_total`, `..._pending`, `..._lag_seconds`),
//!   `/readyz` (`watch.bans`) and `musicctl health`.

use std::collections::{HashMap, VecDeque};
use std::sync::Mutex;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};

use mongodb::bson::oid::ObjectId;
use serde_json::json;

use crate::redis_link::RedisLink;

/// At most one BAN per cache this often.
pub(crate) const BATCH_EVERY: Duration = Duration::from_millis(50);

/// Ids in one BAN: its `X-Ban-Url` stays under varnish's 8 KiB header limit.
pub(crate) const IDS_PER_BAN: usize = 200;

/// Past this many waiting ids, one ban of every track URL replaces them.
pub(crate) const MAX_PENDING: usize = 20_000;

/// Past this many revoked links waiting, one ban of every cached authorization replaces
/// them: it costs each link one small round trip to musicd, and a backlog (a cache that
/// was down) goes in one ban instead of dozens, ahead of the takedowns behind it.
const MAX_LINKS: usize = 100;

/// The most a ban of revoked links' authorizations may hold of their escaped names.
const LINKS_REGEX_BYTES: usize = 6 * 1024;

/// The longest pause between attempts at a failing cache.
pub(crate) const MAX_BACKOFF: Duration = Duration::from_secs(5);

/// Every delivered ban is sent once more this long after: an answer fetched from a musicd
/// that had not heard of the change yet (its eviction subscription down: it keeps answers
/// up to [`crate::catalog::local::UNPUSHED_TTL`]), or a fetch under way while the ban
/// arrived, would otherwise stay cached for the object's whole TTL.
pub(crate) const ECHO_AFTER: Duration = Duration::from_millis(1200);

/// The first echo of a delivered ban: past the time a musicd takes to apply a pushed
/// eviction (change -> served by every musicd: p99 83 ms, docs/stack.md), so an answer a
/// cache fetched from a musicd that had not applied it yet is gone again within about
/// this long. It costs at most one more `BAN` per cache per [`BATCH_EVERY`].
pub(crate) const EARLY_ECHO_AFTER: Duration = Duration::from_millis(150);

/// Sequence number of an echo: never holds the resume point back.
const ECHO_SEQ: u64 = u64::MAX;

/// How long one BAN may take (connect, send, answer).
const BAN_TIMEOUT: Duration = Duration::from_secs(2);

/// When an id (or everything) was first queued: its sequence number and time.
type Queued = (u64, Instant);

/// The ids one cache still has to ban.
#[derive(Default)]
struct Pending {
    /// Waiting to be sent: id -> when first queued.
    ids: HashMap<ObjectId, Queued>,
    /// Revoked links whose cached authorizations must go: `sid:S`, `kid:K`, or `*` (every
    /// authorization) -> when first queued.
    links: HashMap<String, Queued>,
    /// Every track URL, waiting.
    everything: Option<Queued>,
    /// The batch being sent now: still owed until its cache answers, so it counts for
    /// [`Banner::settled`] and is handed over if the process stops meanwhile.
    sending: Option<Batch>,
}

/// What one BAN covers.
#[derive(Clone)]
enum Batch {
    Ids(Vec<(ObjectId, Queued)>),
    Everything(Queued),
    /// Cached authorizations of revoked links.
    Links(Vec<(String, Queued)>),
}

impl Batch {
    fn queued(&self) -> Vec<Queued> {
        match self {
            Batch::Ids(ids) => ids.iter().map(|(_, q)| *q).collect(),
            Batch::Everything(q) => vec![*q],
            Batch::Links(links) => links.iter().map(|(_, q)| *q).collect(),
        }
    }
}

impl Pending {
    /// Nothing waits to be sent (a batch may be under way).
    fn is_empty(&self) -> bool {
        self.ids.is_empty() && self.everything.is_none() && self.links.is_empty()
    }

    fn all_queued(&self) -> impl Iterator<Item = Queued> + '_ {
        self.ids
            .values()
            .copied()
            .chain(self.links.values().copied())
            .chain(self.everything)
            .chain(self.sending.iter().flat_map(Batch::queued))
    }

    /// The lowest sequence number still owed.
    fn oldest_seq(&self) -> Option<u64> {
        self.all_queued().map(|(seq, _)| seq).min()
    }

    /// Owed ids (an "everything" counts one).
    fn owed(&self) -> usize {
        let sending = match &self.sending {
            Some(Batch::Ids(ids)) => ids.len(),
            Some(Batch::Everything(_)) => 1,
            Some(Batch::Links(links)) => links.len(),
            None => 0,
        };
        self.ids.len() + self.links.len() + usize::from(self.everything.is_some()) + sending
    }

    /// Adds an id; past [`MAX_PENDING`] everything is banned instead.
    fn add(&mut self, id: ObjectId, queued: Queued) {
        if let Some(everything) = &mut self.everything {
            // Covered; the oldest change still owed keeps the resume point back.
            *everything = earliest(*everything, queued);
            return;
        }
        let entry = self.ids.entry(id).or_insert(queued);
        *entry = earliest(*entry, queued);
        if self.ids.len() > MAX_PENDING {
            self.replace_with_everything(queued);
        }
    }

    /// Adds a revoked link's authorizations; past [`MAX_LINKS`], every authorization.
    fn add_link(&mut self, member: String, queued: Queued) {
        let entry = self.links.entry(member).or_insert(queued);
        *entry = earliest(*entry, queued);
        if self.links.len() > MAX_LINKS {
            let oldest = self.links.drain().map(|(_, q)| q).fold(queued, earliest);
            self.links.insert(EVERY_AUTHORIZATION.to_string(), oldest);
        }
    }

    /// One ban of everything replaces what waits, owing what the oldest of it owed.
    fn replace_with_everything(&mut self, queued: Queued) {
        let oldest = self
            .ids
            .drain()
            .map(|(_, q)| q)
            .chain(self.everything.take())
            .fold(queued, earliest);
        self.everything = Some(oldest);
    }

    /// Puts a batch that failed (or is abandoned) back in front.
    fn put_back(&mut self, batch: Batch) {
        match batch {
            Batch::Everything(queued) => self.replace_with_everything(queued),
            Batch::Ids(ids) => {
                for (id, queued) in ids {
                    self.add(id, queued);
                }
            }
            Batch::Links(links) => {
                for (member, queued) in links {
                    self.add_link(member, queued);
                }
            }
        }
    }

    /// What is owed, as Redis set members (`*` for everything, `link:…` for a revoked
    /// link's authorizations).
    fn members(&self) -> Vec<String> {
        let mut links: Vec<String> = self.links.keys().cloned().collect();
        if let Some(Batch::Links(sending)) = &self.sending {
            links.extend(sending.iter().map(|(member, _)| member.clone()));
        }
        let links = links.into_iter().map(|member| format!("{LINK}{member}"));
        let everything =
            self.everything.is_some() || matches!(self.sending, Some(Batch::Everything(_)));
        if everything {
            return std::iter::once(crate::catalog::evictions::EVERYTHING.to_string())
                .chain(links)
                .collect();
        }
        let sending = match &self.sending {
            Some(Batch::Ids(ids)) => ids.iter().map(|(id, _)| *id).collect(),
            _ => Vec::new(),
        };
        self.ids
            .keys()
            .copied()
            .chain(sending)
            .map(|id| id.to_hex())
            .chain(links)
            .collect()
    }
}

/// The one queued first (lowest sequence number, earliest time).
fn earliest(a: Queued, b: Queued) -> Queued {
    (a.0.min(b.0), a.1.min(b.1))
}

/// One cache in front, its queue and counters.
pub(crate) struct HttpCache {
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
    /// Whether Redis holds a copy of what this cache owes (forgotten once it took all).
    kept: AtomicBool,
    /// Bans delivered once, to be sent again when due ([`EARLY_ECHO_AFTER`],
    /// [`ECHO_AFTER`]), earliest first.
    echoes: Mutex<VecDeque<(Instant, Echo)>>,
}

/// What a delivered ban covered, for its echo.
#[derive(Clone)]
enum Echo {
    Ids(Vec<ObjectId>),
    Everything,
    Links(Vec<String>),
}

/// The handover member prefix of a revoked link's authorizations.
const LINK: &str = "link:";

/// A link member that stands for every cached authorization.
pub(crate) use crate::signing::revoked::EVERY_AUTHORIZATION;

impl HttpCache {
    fn new(url: &str) -> HttpCache {
        HttpCache {
            url: url.trim_end_matches('/').to_string(),
            pending: Mutex::default(),
            wake: tokio::sync::Notify::new(),
            sent: AtomicU64::new(0),
            failed: AtomicU64::new(0),
            dropped: AtomicU64::new(0),
            lag_us: AtomicU64::new(0),
            last_error: Mutex::default(),
            kept_through: AtomicU64::new(0),
            kept: AtomicBool::new(false),
            echoes: Mutex::default(),
        }
    }

    fn pending(&self) -> std::sync::MutexGuard<'_, Pending> {
        self.pending.lock().unwrap_or_else(|p| p.into_inner())
    }

    fn echoes(&self) -> std::sync::MutexGuard<'_, VecDeque<(Instant, Echo)>> {
        self.echoes.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Schedules the echoes of a ban delivered at `delivered`, keeping them in time order
    /// (an early echo is due before the late echoes of bans delivered just before it).
    fn schedule_echoes(&self, delivered: Instant, echo: Echo) {
        let mut echoes = self.echoes();
        for (after, echo) in [(EARLY_ECHO_AFTER, echo.clone()), (ECHO_AFTER, echo)] {
            let at = delivered + after;
            let place = echoes.partition_point(|(due, _)| *due <= at);
            echoes.insert(place, (at, echo));
        }
    }

    /// Moves the echoes that are due into the queue. An echo owes nothing of its own
    /// ([`ECHO_SEQ`]): it never holds the resume point back, and whatever real ban it
    /// joins keeps its own sequence number.
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
                Echo::Everything => pending.replace_with_everything((ECHO_SEQ, now)),
                Echo::Ids(ids) => {
                    for id in ids {
                        pending.add(id, (ECHO_SEQ, now));
                    }
                }
                Echo::Links(links) => {
                    for member in links {
                        pending.add_link(member, (ECHO_SEQ, now));
                    }
                }
            }
        }
    }

    pub(crate) fn url(&self) -> &str {
        &self.url
    }

    /// Bans answered 2xx.
    pub(crate) fn sent(&self) -> u64 {
        self.sent.load(Ordering::Relaxed)
    }

    /// Attempts that failed (each retried).
    pub(crate) fn failed(&self) -> u64 {
        self.failed.load(Ordering::Relaxed)
    }

    /// Ids (or "everything") given up on, never delivered nor handed over.
    pub(crate) fn dropped(&self) -> u64 {
        self.dropped.load(Ordering::Relaxed)
    }

    /// Ids owed, waiting or being sent (an "everything" counts one).
    pub(crate) fn waiting(&self) -> usize {
        self.pending().owed()
    }

    /// Queued-to-answered time of the last delivered ban; while bans are owed, the age of
    /// the oldest.
    pub(crate) fn lag_seconds(&self) -> f64 {
        let owed = self
            .pending()
            .all_queued()
            .filter(|(seq, _)| *seq != ECHO_SEQ)
            .map(|(_, at)| at)
            .min()
            .map_or(0.0, |at| at.elapsed().as_secs_f64());
        let last = self.lag_us.load(Ordering::Relaxed) as f64 / 1e6;
        owed.max(last)
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
pub(crate) struct Banner {
    caches: Vec<HttpCache>,
    prefixes: Vec<String>,
    /// Sequence number of the last id queued.
    queued: AtomicU64,
    /// Held while queuing and while a cache's queue is copied to Redis, so that copy holds
    /// every id up to the sequence number read with it.
    order: Mutex<()>,
}

impl Banner {
    /// A banner for these caches and route prefixes.
    pub(crate) fn new(ban_urls: &[String], route_prefixes: &[String]) -> Banner {
        Banner {
            caches: ban_urls.iter().map(|u| HttpCache::new(u)).collect(),
            prefixes: route_prefixes.to_vec(),
            queued: AtomicU64::new(0),
            order: Mutex::new(()),
        }
    }

    fn order(&self) -> std::sync::MutexGuard<'_, ()> {
        self.order.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// The caches, for metrics.
    pub(crate) fn caches(&self) -> &[HttpCache] {
        &self.caches
    }

    /// Queues a ban of `id`'s URLs in every cache. Never waits.
    pub(crate) fn queue(&self, id: ObjectId) {
        self.queue_with(|pending, queued| pending.add(id, queued));
    }

    /// Queues a ban of every track URL (after a rebuild: anything may have changed).
    pub(crate) fn queue_everything(&self) {
        self.queue_with(Pending::replace_with_everything);
    }

    /// Queues a ban of the cached authorizations of a revoked link: `sid:S`, `kid:K`, or
    /// [`EVERY_AUTHORIZATION`].
    pub(crate) fn queue_link(&self, member: &str) {
        self.queue_with(|pending, queued| pending.add_link(member.to_string(), queued));
    }

    /// Gives the next sequence number to `add` in every cache's queue, and wakes them.
    fn queue_with(&self, add: impl Fn(&mut Pending, Queued)) {
        if self.caches.is_empty() {
            return;
        }
        let _order = self.order();
        let queued = (
            self.queued.fetch_add(1, Ordering::AcqRel) + 1,
            Instant::now(),
        );
        for cache in &self.caches {
            add(&mut cache.pending(), queued);
            cache.wake.notify_one();
        }
    }

    /// The sequence number of the last id queued so far.
    pub(crate) fn queued(&self) -> u64 {
        self.queued.load(Ordering::Acquire)
    }

    /// Whether every ban queued up to `seq` is safe from this process dying: answered by
    /// its cache, or (for a cache that fails) copied to Redis for the next follower.
    pub(crate) fn settled(&self, seq: u64) -> bool {
        self.caches.iter().all(|cache| {
            cache.kept_through.load(Ordering::Acquire) >= seq
                || cache
                    .pending()
                    .oldest_seq()
                    .is_none_or(|oldest| oldest > seq)
        })
    }

    /// For `/readyz`.
    pub(crate) fn to_json(&self) -> serde_json::Value {
        serde_json::Value::Array(self.caches.iter().map(HttpCache::to_json).collect())
    }

    /// Sends every cache's bans until `stop` completes; then tries once more, for at most
    /// `grace`, and writes what is still owed to Redis for the next follower.
    pub(crate) async fn run(
        &self,
        link: &RedisLink,
        prefix: &str,
        grace: Duration,
        stop: impl Future<Output = ()>,
    ) {
        if self.caches.is_empty() {
            return;
        }
        let senders = futures_util::future::join_all(
            self.caches
                .iter()
                .map(|cache| self.send_forever(cache, link, prefix)),
        );
        tokio::select! {
            () = stop => {}
            _ = senders => {}
        }
        // A batch cut off mid-send is still owed: back in the queue with the rest.
        for cache in &self.caches {
            let mut pending = cache.pending();
            if let Some(batch) = pending.sending.take() {
                pending.put_back(batch);
            }
        }
        let last_try =
            futures_util::future::join_all(self.caches.iter().map(|cache| self.send_batch(cache)));
        let _ = tokio::time::timeout(grace, last_try).await;
        self.hand_over(link, prefix).await;
    }

    /// Queues what a previous follower could not deliver (kept in Redis). Called by a
    /// follower each time it takes the lease: the copy stays in Redis until the cache
    /// took everything, so a follower that dies meanwhile leaves it to the next.
    pub(crate) async fn take_over(&self, link: &RedisLink, prefix: &str) {
        // A link revoked while no follower held the lease was banned by nobody: every
        // cached authorization goes (each costs its link one small round trip).
        self.queue_link(EVERY_AUTHORIZATION);
        for cache in &self.caches {
            let key = handover_key(prefix, &cache.url);
            let members: Result<Vec<String>, _> = link
                .run(|mut conn| async move {
                    redis::cmd("SMEMBERS")
                        .arg(&key)
                        .query_async(&mut conn)
                        .await
                })
                .await;
            let Ok(members) = members else { continue };
            if members.is_empty() {
                continue;
            }
            tracing::info!(cache = %cache.url, bans = members.len(), "sending the bans a previous follower left");
            let _order = self.order();
            let queued = (
                self.queued.fetch_add(1, Ordering::AcqRel) + 1,
                Instant::now(),
            );
            {
                let mut pending = cache.pending();
                for member in members {
                    if member == crate::catalog::evictions::EVERYTHING {
                        pending.replace_with_everything(queued);
                    } else if let Some(link) = member.strip_prefix(LINK) {
                        pending.add_link(link.to_string(), queued);
                    } else if let Ok(id) = ObjectId::parse_str(&member) {
                        pending.add(id, queued);
                    }
                }
            }
            cache.kept.store(true, Ordering::Release);
            cache.kept_through.fetch_max(queued.0, Ordering::AcqRel);
            cache.wake.notify_one();
        }
    }

    /// Writes what each cache still owes to Redis for the next follower, and forgets it
    /// here; counts and logs what even that could not keep.
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

    /// Copies what a cache owes to Redis (the set the next follower sends first).
    async fn keep(
        &self,
        link: &RedisLink,
        prefix: &str,
        cache: &HttpCache,
    ) -> Result<(), crate::redis_link::LinkError> {
        let (members, through) = {
            let _order = self.order();
            (cache.pending().members(), self.queued())
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
            cache.kept.store(true, Ordering::Release);
        }
        cache.kept_through.fetch_max(through, Ordering::AcqRel);
        Ok(())
    }

    /// Forgets the copy of a cache's queue in Redis once the cache took everything.
    async fn unkeep(&self, link: &RedisLink, prefix: &str, cache: &HttpCache) {
        let key = handover_key(prefix, &cache.url);
        let forgotten = link
            .run(|mut conn| async move {
                redis::cmd("DEL")
                    .arg(&key)
                    .query_async::<()>(&mut conn)
                    .await
            })
            .await;
        if forgotten.is_ok() {
            cache.kept.store(false, Ordering::Release);
        }
    }

    async fn send_forever(&self, cache: &HttpCache, link: &RedisLink, prefix: &str) {
        let mut backoff = crate::timing::Backoff::new(Duration::from_millis(100), MAX_BACKOFF);
        loop {
            if cache.pending().is_empty() {
                if cache.kept.load(Ordering::Acquire) {
                    self.unkeep(link, prefix, cache).await;
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
            let pause = if self.send_batch(cache).await {
                backoff.reset();
                Duration::ZERO
            } else {
                // The cache may stay away for long: what it owes is kept in Redis, so the
                // resume point can advance and a successor still sends it.
                if let Err(err) = self.keep(link, prefix, cache).await {
                    tracing::warn!(cache = %cache.url, error = %err, "could not keep undelivered bans in Redis");
                }
                backoff.next_pause()
            };
            tokio::time::sleep((BATCH_EVERY + pause).saturating_sub(started.elapsed())).await;
        }
    }

    /// Sends one batch; false if it failed (it is queued again).
    async fn send_batch(&self, cache: &HttpCache) -> bool {
        let batch = {
            let mut pending = cache.pending();
            if pending.is_empty() || pending.sending.is_some() {
                return true;
            }
            let batch = match pending.everything.take() {
                Some(queued) => Batch::Everything(queued),
                // Revocations before takedowns: a revoked link must stop within a second.
                None if !pending.links.is_empty() => {
                    // Bounded by the regex's length, not by a count: a session id may be
                    // 128 characters, and varnish refuses a header past 8 KiB.
                    let mut length = 0;
                    let members: Vec<String> = pending
                        .links
                        .keys()
                        .take_while(|member| {
                            length += 2 * member.len() + 1;
                            length <= LINKS_REGEX_BYTES
                        })
                        .cloned()
                        .collect();
                    Batch::Links(
                        members
                            .into_iter()
                            .filter_map(|m| pending.links.remove(&m).map(|q| (m, q)))
                            .collect(),
                    )
                }
                None => {
                    let ids: Vec<ObjectId> =
                        pending.ids.keys().take(IDS_PER_BAN).copied().collect();
                    Batch::Ids(
                        ids.into_iter()
                            .filter_map(|id| pending.ids.remove(&id).map(|q| (id, q)))
                            .collect(),
                    )
                }
            };
            pending.sending = Some(batch.clone());
            batch
        };
        let regex = match &batch {
            Batch::Everything(_) => crate::varnish::everything_regex(&self.prefixes),
            Batch::Ids(ids) => {
                let hex: Vec<String> = ids.iter().map(|(id, _)| id.to_hex()).collect();
                crate::varnish::ids_regex(&self.prefixes, &hex)
            }
            Batch::Links(links) => {
                let members: Vec<&str> = links.iter().map(|(m, _)| m.as_str()).collect();
                crate::varnish::authorizations_regex(&members)
            }
        };
        let outcome = crate::varnish::ban(&cache.url, &regex, BAN_TIMEOUT).await;
        let mut pending = cache.pending();
        pending.sending = None;
        match outcome {
            Ok(status) if crate::varnish::taken(status) => {
                drop(pending);
                cache.sent.fetch_add(1, Ordering::Relaxed);
                let owed = batch
                    .queued()
                    .into_iter()
                    .filter(|(seq, _)| *seq != ECHO_SEQ);
                if let Some(oldest) = owed.map(|(_, at)| at).min() {
                    let lag = u64::try_from(oldest.elapsed().as_micros()).unwrap_or(u64::MAX);
                    cache.lag_us.store(lag, Ordering::Relaxed);
                }
                let echo = match batch {
                    Batch::Everything((seq, _)) => (seq != ECHO_SEQ).then_some(Echo::Everything),
                    Batch::Ids(ids) => {
                        let ids: Vec<ObjectId> = ids
                            .into_iter()
                            .filter(|(_, (seq, _))| *seq != ECHO_SEQ)
                            .map(|(id, _)| id)
                            .collect();
                        (!ids.is_empty()).then_some(Echo::Ids(ids))
                    }
                    Batch::Links(links) => {
                        let links: Vec<String> = links
                            .into_iter()
                            .filter(|(_, (seq, _))| *seq != ECHO_SEQ)
                            .map(|(member, _)| member)
                            .collect();
                        (!links.is_empty()).then_some(Echo::Links(links))
                    }
                };
                if let Some(echo) = echo {
                    cache.schedule_echoes(Instant::now(), echo);
                }
                true
            }
            outcome => {
                pending.put_back(batch);
                drop(pending);
                let why = match outcome {
                    Ok(status) => format!("answered {status}"),
                    Err(err) => err.to_string(),
                };
                if cache.failed.fetch_add(1, Ordering::Relaxed) == 0
                    || cache.last_error.lock().is_ok_and(|e| *e != why)
                {
                    tracing::warn!(cache = %cache.url, error = %why, "ban failed; retrying");
                }
                if let Ok(mut last) = cache.last_error.lock() {
                    last.clone_from(&why);
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_backlog_of_revoked_links_becomes_one_ban_of_every_authorization() {
        let banner = Banner::new(&["http://127.0.0.1:1".into()], &["/musicdb".into()]);
        for n in 0..MAX_LINKS {
            banner.queue_link(&format!("sid:{}-{n}", "s".repeat(120)));
        }
        assert_eq!(banner.caches()[0].waiting(), MAX_LINKS);
        banner.queue_link("sid:one-too-many");
        let pending = banner.caches()[0].pending();
        assert_eq!(
            pending.links.keys().collect::<Vec<_>>(),
            [EVERY_AUTHORIZATION],
            "a varnish that was down gets one ban, not a header it refuses"
        );
        assert!(!pending.is_empty());
    }

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
    fn a_batch_being_sent_is_still_owed_and_an_echo_never_hides_a_real_ban() {
        let banner = Banner::new(&["http://127.0.0.1:1".into()], &["/musicdb".into()]);
        let cache = &banner.caches()[0];
        let id = ObjectId::new();
        banner.queue(id);
        let seq = banner.queued();
        {
            // What send_batch does before the cache answers.
            let mut pending = cache.pending();
            let batch: Vec<_> = pending.ids.drain().collect();
            pending.sending = Some(Batch::Ids(batch));
        }
        assert!(cache.pending().is_empty(), "nothing left to send");
        assert!(!banner.settled(seq), "but the batch in flight is owed");
        assert_eq!(
            cache.pending().members(),
            vec![id.to_hex()],
            "and handed over"
        );
        cache.pending().sending = None;
        assert!(banner.settled(seq));

        // An echo of everything joins a real ban without lowering what it owes.
        let real = ObjectId::new();
        banner.queue(real);
        let seq = banner.queued();
        cache.echoes().push_back((Instant::now(), Echo::Everything));
        cache.queue_due_echoes();
        assert!(cache.pending().everything.is_some());
        assert!(!banner.settled(seq), "the real ban is still owed");
        // And a real id queued behind an echoed everything is owed too.
        *cache.pending() = Pending::default();
        cache.echoes().push_back((Instant::now(), Echo::Everything));
        cache.queue_due_echoes();
        assert!(
            banner.settled(banner.queued()),
            "an echo alone owes nothing"
        );
        banner.queue(ObjectId::new());
        assert!(!banner.settled(banner.queued()));
    }

    #[test]
    fn a_delivered_ban_is_echoed_early_then_late_in_time_order() {
        let banner = Banner::new(&["http://127.0.0.1:1".into()], &["/musicdb".into()]);
        let cache = &banner.caches()[0];
        let (first, second) = (ObjectId::new(), ObjectId::new());
        let start = Instant::now();
        cache.schedule_echoes(start, Echo::Ids(vec![first]));
        // Delivered later than the first ban's early echo is due, sooner than its late one.
        let later = start + EARLY_ECHO_AFTER + Duration::from_millis(10);
        cache.schedule_echoes(later, Echo::Ids(vec![second]));
        let due: Vec<(Duration, Vec<ObjectId>)> = cache
            .echoes()
            .iter()
            .map(|(at, echo)| match echo {
                Echo::Ids(ids) => (*at - start, ids.clone()),
                _ => panic!("only ids were scheduled"),
            })
            .collect();
        assert_eq!(
            due,
            vec![
                (EARLY_ECHO_AFTER, vec![first]),
                (later - start + EARLY_ECHO_AFTER, vec![second]),
                (ECHO_AFTER, vec![first]),
                (later - start + ECHO_AFTER, vec![second]),
            ],
            "earliest first: queue_due_echoes takes them from the front"
        );
    }

    #[test]
    fn without_caches_nothing_waits() {
        let banner = Banner::new(&[], &["/musicdb".into()]);
        banner.queue(ObjectId::new());
        assert!(banner.settled(banner.queued()));
    }
}
