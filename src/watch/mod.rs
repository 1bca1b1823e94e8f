//! The index keeps itself current: one process follows the tracks collection's change
//! stream and writes what changed into Redis.
//!
//! Why a module of its own and not part of [`crate::catalog`]: the follower is a background
//! job that uses the catalogue's clients *and* the rebuild of `musicctl reindex --prune`
//! ([`crate::admin::reindex`]); the request path never calls it.
//!
//! How it works:
//! * **One follower per index.** Every musicd (and `musicctl watch`) runs a [`Follower`];
//!   the one that takes the lease ([`lease`]) follows, the others stand by and try again
//!   every third of the lease. A follower renews its lease every third of it, and gives it
//!   up on a clean stop, so a standby takes over at once; after a crash, within the lease.
//! * **No change lost, none out of order.** The resume token is saved in Redis next to the
//!   lease (only by the lease holder) after the changes before it were written, at most
//!   every [`SAVE_EVERY`] and on stop. A successor resumes from it, so changes are applied
//!   at least once and in the stream's order; applying one twice is harmless (each write
//!   states the document's state at that point of the stream).
//! * **What each event does** is [`change::index_change`]. A dropped or renamed collection,
//!   an `invalidate` or a resume point MongoDB no longer has (`ChangeStreamHistoryLost`)
//!   make it rebuild the index with `reindex --prune`; so does following with no saved
//!   resume point at all (the first follower of an index), because changes made before
//!   its stream was opened are in no stream. The stream is opened first and read only
//!   after the rebuild, so a change made during the rebuild is applied after it.
//! * **Failures.** MongoDB down or electing: the driver resumes the stream on the new
//!   primary once; past that the follower reopens it from the saved token every second.
//!   Redis down: the follower stops applying (the token is not advanced), loses its lease
//!   and starts over when Redis is back, replaying from the token.
//!
//! * **Every layer hears it.** Each write revokes any fill lease on its entry and publishes
//!   the id to every musicd in the same script ([`crate::catalog::cache`],
//!   [`crate::catalog::evictions`]), and the id is queued for a ban in the HTTP caches in
//!   front ([`bans`]); the resume point is saved only once those bans are safe.

pub mod bans;
pub(crate) mod change;
pub mod lease;

use std::collections::VecDeque;
use std::sync::Arc;
use std::sync::atomic::{AtomicI64, AtomicU8, AtomicU64, Ordering};
use std::time::{Duration, Instant};

use mongodb::bson::{Document, Timestamp, doc};
use mongodb::change_stream::ChangeStream;
use mongodb::change_stream::event::ChangeStreamEvent;
use mongodb::change_stream::event::ResumeToken;
use serde_json::json;

use crate::admin::reindex::{self, ReindexOptions};
use crate::catalog::backends::Backends;
use crate::catalog::cache::FollowerWrite;
use crate::config::{Config, WatchMode};
use bans::Banner;
use change::{IndexChange, OPERATIONS};
use lease::{Lease, Position};

/// How often the resume point is saved while changes flow (and whenever the stream is
/// idle). A successor replays at most this much.
pub(crate) const SAVE_EVERY: Duration = Duration::from_millis(500);

/// How long a stopping follower still tries to deliver its last bans.
const BAN_GRACE: Duration = Duration::from_millis(500);

/// How long a `getMore` waits for new changes: the loop's heartbeat.
const AWAIT: Duration = Duration::from_millis(500);

/// Pause before trying again after MongoDB or Redis failed.
const RETRY: Duration = Duration::from_secs(1);

/// `ChangeStreamHistoryLost`: the resume point fell off the oplog.
const HISTORY_LOST: i32 = 286;

/// What the follower of this process is doing.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[repr(u8)]
pub(crate) enum WatchState {
    /// Not following, by configuration or because MongoDB is not a replica set.
    Off = 0,
    /// Waiting for MongoDB or Redis to answer.
    Waiting = 1,
    /// Another process holds the lease.
    Standby = 2,
    /// This process follows the stream.
    Following = 3,
    /// Rebuilding the index (and following right after).
    Rebuilding = 4,
}

impl WatchState {
    /// Its name in `/readyz` and `health`.
    pub(crate) fn label(self) -> &'static str {
        match self {
            WatchState::Off => "off",
            WatchState::Waiting => "waiting",
            WatchState::Standby => "standby",
            WatchState::Following => "following",
            WatchState::Rebuilding => "rebuilding",
        }
    }

    fn from_u8(value: u8) -> WatchState {
        match value {
            1 => WatchState::Waiting,
            2 => WatchState::Standby,
            3 => WatchState::Following,
            4 => WatchState::Rebuilding,
            _ => WatchState::Off,
        }
    }
}

/// The follower's state and counters, shared with `/metrics` and `/readyz`.
pub struct WatchStatus {
    state: AtomicU8,
    events: [AtomicU64; OPERATIONS.len()],
    rebuilds: AtomicU64,
    /// Cluster time of the last event applied, ms since the epoch (0: none yet).
    last_event_ms: AtomicI64,
    reason: std::sync::Mutex<String>,
    /// The bans of the HTTP caches in front.
    bans: Banner,
}

impl WatchStatus {
    /// The status of a follower banning in `config`'s HTTP caches.
    pub fn new(config: &Config) -> WatchStatus {
        WatchStatus {
            state: AtomicU8::new(WatchState::Off as u8),
            events: Default::default(),
            rebuilds: AtomicU64::new(0),
            last_event_ms: AtomicI64::new(0),
            reason: std::sync::Mutex::default(),
            bans: Banner::new(&config.ban_urls, &config.route_prefixes),
        }
    }

    /// The bans of the HTTP caches in front.
    pub(crate) fn bans(&self) -> &Banner {
        &self.bans
    }

    /// The current state.
    pub(crate) fn state(&self) -> WatchState {
        WatchState::from_u8(self.state.load(Ordering::Relaxed))
    }

    fn set(&self, state: WatchState, reason: &str) {
        let previous = WatchState::from_u8(self.state.swap(state as u8, Ordering::Relaxed));
        if let Ok(mut current) = self.reason.lock()
            && (previous != state || *current != reason)
        {
            reason.clone_into(&mut current);
            if previous != state {
                tracing::info!(state = state.label(), reason, "change-stream follower");
            }
        }
    }

    /// Seconds between now and the last applied event's cluster time (0 before any).
    pub(crate) fn lag_seconds(&self) -> f64 {
        match self.last_event_ms.load(Ordering::Relaxed) {
            0 => 0.0,
            ms => (now_ms() - ms).max(0) as f64 / 1000.0,
        }
    }

    /// For `/readyz`: state, why, events, rebuilds, lag.
    pub(crate) fn to_json(&self) -> serde_json::Value {
        let events: serde_json::Map<String, serde_json::Value> = self
            .events()
            .map(|(op, n)| (op.to_string(), json!(n)))
            .collect();
        json!({
            "state": self.state().label(),
            "reason": self.reason.lock().map(|r| r.clone()).unwrap_or_default(),
            "events": events,
            "rebuilds": self.rebuilds.load(Ordering::Relaxed),
            "lag_seconds": self.lag_seconds(),
            "bans": self.bans.to_json(),
        })
    }

    /// Events applied so far, by operation (`musicd_watch_events_total`).
    pub(crate) fn events(&self) -> impl Iterator<Item = (&'static str, u64)> + '_ {
        OPERATIONS
            .iter()
            .zip(&self.events)
            .map(|(op, n)| (*op, n.load(Ordering::Relaxed)))
    }
}

/// Why following stopped.
enum Stopped {
    /// The lease is gone (someone else follows now, or Redis lost it).
    LeaseLost,
    /// A backend failed; try again after [`RETRY`].
    Failed(String),
}

/// The change-stream follower of one process.
pub struct Follower {
    backends: Backends,
    config: Config,
    status: Arc<WatchStatus>,
    owner: String,
}

impl Follower {
    /// A follower over its own clients (a change stream holds a connection open; it should
    /// not take one from the pool serving requests).
    pub async fn new(
        config: &Config,
        status: Arc<WatchStatus>,
    ) -> Result<Follower, crate::catalog::backends::BackendError> {
        Ok(Follower {
            backends: Backends::new(config).await?,
            config: config.clone(),
            status,
            owner: owner_id(),
        })
    }

    /// Its owner id in the lease.
    pub fn owner(&self) -> &str {
        &self.owner
    }

    /// Follows (or stands by) until `stop` completes, then gives the lease up so a
    /// standby takes over at once. The position was saved at most [`SAVE_EVERY`] before.
    ///
    /// Bans queued while following are sent by a task that outlives lost leases; on stop it
    /// tries once more for a moment and leaves what is undelivered to the next follower.
    pub async fn run(self, stop: impl Future<Output = ()>) {
        let (stopping, stopped) = tokio::sync::watch::channel(false);
        let follow = async {
            self.follow_until(stop).await;
            let _ = stopping.send(true);
        };
        let mut stopped = stopped;
        let bans = self.status.bans.run(
            self.backends.cache.link(),
            self.backends.cache.prefix(),
            BAN_GRACE,
            async move {
                let _ = stopped.wait_for(|stop| *stop).await;
            },
        );
        tokio::join!(follow, bans);
    }

    async fn follow_until(&self, stop: impl Future<Output = ()>) {
        let mut stop = std::pin::pin!(stop);
        let lease = Lease::new(
            self.backends.cache.link(),
            self.backends.cache.prefix(),
            self.owner.clone(),
            self.config.mongodb.watch_lease,
        );
        loop {
            let pause = tokio::select! {
                () = &mut stop => break,
                pause = self.round(&lease) => pause,
            };
            let Some(pause) = pause else {
                return;
            };
            tokio::select! {
                () = &mut stop => break,
                () = tokio::time::sleep(pause) => {}
            }
        }
        if let Err(err) = lease.release().await {
            tracing::warn!(error = %err, "could not give the change-stream lease up; it expires by itself");
        }
        self.status.set(WatchState::Off, "stopped");
    }

    /// One attempt: decide whether to follow, take the lease, follow until something ends
    /// it. `None`: never follow (off); `Some(pause)`: try again after it.
    async fn round(&self, lease: &Lease<'_>) -> Option<Duration> {
        let mode = self.config.mongodb.watch;
        if mode == WatchMode::Off {
            self.status.set(WatchState::Off, "mongodb.watch = \"off\"");
            return None;
        }
        match self.replica_set().await {
            Ok(true) => {}
            Ok(false) if mode == WatchMode::Auto => {
                self.status.set(
                    WatchState::Off,
                    "MongoDB is not a replica set (change streams need one)",
                );
                return None;
            }
            Ok(false) => {
                self.status.set(
                    WatchState::Waiting,
                    "mongodb.watch = \"on\" but MongoDB is not a replica set",
                );
                return Some(RETRY * 10);
            }
            Err(why) => {
                self.status.set(WatchState::Waiting, &why);
                return Some(RETRY);
            }
        }
        match lease.acquire().await {
            Ok(true) => {
                // Bans a previous follower could not deliver are this one's now.
                self.status
                    .bans
                    .take_over(self.backends.cache.link(), self.backends.cache.prefix())
                    .await;
            }
            Ok(false) => {
                self.status
                    .set(WatchState::Standby, "another process holds the lease");
                return Some(self.config.mongodb.watch_lease / 3);
            }
            Err(err) => {
                self.status
                    .set(WatchState::Waiting, &format!("redis: {err}"));
                return Some(RETRY);
            }
        }
        // Renewing runs beside following, so a slow MongoDB (an election) does not cost
        // the lease; losing the lease ends following at once.
        let outcome = tokio::select! {
            stopped = self.keep_lease(lease) => stopped,
            stopped = self.follow(lease) => stopped,
        };
        match outcome {
            Stopped::LeaseLost => {
                self.status
                    .set(WatchState::Standby, "lost the lease to another process");
                Some(Duration::ZERO)
            }
            Stopped::Failed(why) => {
                tracing::warn!(reason = %why, "change-stream follower interrupted; retrying");
                self.status.set(WatchState::Waiting, &why);
                Some(RETRY)
            }
        }
    }

    async fn keep_lease(&self, lease: &Lease<'_>) -> Stopped {
        let ttl = self.config.mongodb.watch_lease;
        let mut renewed = Instant::now();
        loop {
            tokio::time::sleep(ttl / 3).await;
            // Redis starts the new term when the renewal arrives, which is after it was
            // sent: counting from the send keeps this process's idea of its term inside
            // Redis's. Expiry is noticed at the next failed renewal, so a cut-off follower
            // may write up to a third of a lease past it; those writes are newer than any
            // its successor replays, and versioned writes refuse them once it has written
            // newer (`catalog::cache::version_key`).
            let asked = Instant::now();
            match lease.renew().await {
                Ok(true) => renewed = asked,
                Ok(false) => return Stopped::LeaseLost,
                // Past the lease, a successor may already follow.
                Err(_) if renewed.elapsed() >= ttl => return Stopped::LeaseLost,
                Err(err) => tracing::warn!(error = %err, "could not renew the change-stream lease"),
            }
        }
    }

    /// Follows the stream from the saved position until a backend fails (or the caller
    /// drops this future because the lease is gone).
    async fn follow(&self, lease: &Lease<'_>) -> Stopped {
        let (position, unreadable) = match lease.position().await {
            Ok(position) => (position, false),
            // Written by a version that stored it differently: start at the present and
            // rebuild, rather than never follow again.
            Err(err @ lease::LeaseError::Position(_)) => {
                tracing::warn!(error = %err, "ignoring the saved resume point");
                (None, true)
            }
            Err(err) => return Stopped::Failed(format!("redis: {err}")),
        };
        let mut last_event_ms = position.as_ref().and_then(|p| p.last_event_ms);
        let (stream, lost) = match self.open(position.as_ref()).await {
            Ok(stream) => (stream, false),
            Err(err) if history_lost(&err) => match self.open(None).await {
                Ok(stream) => (stream, true),
                Err(err) => return Stopped::Failed(format!("mongodb: {err}")),
            },
            Err(err) => return Stopped::Failed(format!("mongodb: {err}")),
        };
        // Without a usable resume point nobody knows what changed before the stream was
        // opened (since `reindex`, since an id was cached, since the lease was taken), so
        // the index is rebuilt once, after opening: nothing made before or during the
        // rebuild is missed. `Following` is said only when that is true.
        let why = if lost {
            Some("the resume point fell off the oplog")
        } else if unreadable {
            Some("the saved resume point was unreadable")
        } else if position.is_none() {
            Some("no saved resume point (the first follower of this index)")
        } else {
            None
        };
        match why {
            Some(why) => {
                if let Err(failed) = self.rebuild(why).await {
                    return Stopped::Failed(failed);
                }
            }
            None => self
                .status
                .set(WatchState::Following, "resumed from the saved position"),
        }
        let mut saved = Instant::now();
        let mut after_invalidate = false;
        let mut reader = Reader::spawn(stream);
        // Resume points not saved yet, each with the last ban queued before it: the newest
        // whose bans are safe is the one saved.
        let mut unsaved: VecDeque<(ResumeToken, u64)> = VecDeque::new();
        let mut heartbeat = Instant::now();
        loop {
            // What the stream delivered since the last turn, waiting for it if need be: a
            // burst of changes is written as one batch.
            let (batch, latest, failed) = reader.batch().await;
            let mut writes = Vec::new();
            for event in batch {
                let index = usize::from(change::operation_index(&event.operation_type));
                self.status.events[index].fetch_add(1, Ordering::Relaxed);
                if let Some(time) = event.cluster_time {
                    let ms = i64::from(time.time) * 1000;
                    last_event_ms = Some(ms);
                    self.status.last_event_ms.store(ms, Ordering::Relaxed);
                }
                match change::index_change(&event, self.backends.store.path_field()) {
                    IndexChange::Nothing => {}
                    IndexChange::Rebuild => {
                        if let Err(why) = self.apply_all(std::mem::take(&mut writes)).await {
                            return Stopped::Failed(why);
                        }
                        if let Err(why) =
                            self.rebuild("the collection was dropped or renamed").await
                        {
                            return Stopped::Failed(why);
                        }
                    }
                    IndexChange::Invalidated => {
                        if let Err(why) = self.apply_all(std::mem::take(&mut writes)).await {
                            return Stopped::Failed(why);
                        }
                        // The stream is over; the next one starts right after this
                        // event, and the rebuild covers whatever the collection is now.
                        let position = Position {
                            token: event.id.clone(),
                            after_invalidate: true,
                            owner: self.owner.clone(),
                            saved_ms: now_ms(),
                            last_event_ms,
                        };
                        match self.open(Some(&position)).await {
                            Ok(next) => reader = Reader::spawn(next),
                            Err(err) => return Stopped::Failed(format!("mongodb: {err}")),
                        }
                        unsaved.clear();
                        unsaved.push_back((event.id.clone(), self.status.bans.queued()));
                        if let Err(why) = self.rebuild("the stream was invalidated").await {
                            return Stopped::Failed(why);
                        }
                        after_invalidate = true;
                    }
                    write => {
                        writes.push((write, event.cluster_time));
                        after_invalidate = false;
                    }
                }
            }
            if let Err(why) = self.apply_all(writes).await {
                return Stopped::Failed(why);
            }
            if let Some(token) = latest {
                if unsaved.len() >= MAX_UNSAVED {
                    unsaved.pop_front();
                }
                unsaved.push_back((token, self.status.bans.queued()));
            }
            if heartbeat.elapsed() >= crate::catalog::evictions::HEARTBEAT_EVERY {
                heartbeat = Instant::now();
                if let Err(err) = crate::catalog::evictions::heartbeat(
                    self.backends.cache.link(),
                    self.backends.cache.prefix(),
                )
                .await
                {
                    tracing::debug!(error = %err, "eviction heartbeat not published");
                }
            }
            match failed {
                None => {}
                Some(err) if history_lost(&err) => {
                    match self.open(None).await {
                        Ok(next) => reader = Reader::spawn(next),
                        Err(err) => return Stopped::Failed(format!("mongodb: {err}")),
                    }
                    unsaved.clear();
                    if let Err(why) = self.rebuild("the resume point fell off the oplog").await {
                        return Stopped::Failed(why);
                    }
                }
                Some(err) => return Stopped::Failed(format!("mongodb: {err}")),
            }
            // Saved only once the bans of every change before it are safe (sent, or kept
            // in Redis): a successor replays and bans whatever came after.
            let mut settled = || {
                let newest = unsaved
                    .iter()
                    .rposition(|(_, seq)| self.status.bans.settled(*seq))?;
                let token = unsaved.get(newest).map(|(token, _)| token.clone());
                unsaved.drain(..newest);
                token
            };
            if saved.elapsed() >= SAVE_EVERY
                && let Some(token) = settled()
            {
                let position = Position {
                    token,
                    after_invalidate,
                    owner: self.owner.clone(),
                    saved_ms: now_ms(),
                    last_event_ms,
                };
                match lease.save(&position).await {
                    Ok(true) => saved = Instant::now(),
                    Ok(false) => return Stopped::LeaseLost,
                    Err(err) => return Stopped::Failed(format!("redis: {err}")),
                }
            }
        }
    }

    async fn open(
        &self,
        position: Option<&Position>,
    ) -> mongodb::error::Result<ChangeStream<ChangeStreamEvent<Document>>> {
        let watch = self
            .backends
            .store
            .collection()
            .watch()
            .pipeline(change::pipeline(self.backends.store.path_field()))
            .max_await_time(AWAIT);
        match position {
            Some(p) if p.after_invalidate => watch.start_after(p.token.clone()).await,
            Some(p) => watch.resume_after(p.token.clone()).await,
            None => watch.await,
        }
    }

    /// Writes `writes` in stream order, all sent before the first answer is awaited (the
    /// connection keeps the order in which they were sent, so each key still sees its
    /// changes in order), then queues their bans. Any failure fails the whole batch: the
    /// position is not saved past it, and a successor replays it.
    async fn apply_all(&self, writes: Vec<(IndexChange, Option<Timestamp>)>) -> Result<(), String> {
        if writes.is_empty() {
            return Ok(());
        }
        // Each write states the document's whole state, so only the last one per id is
        // sent: two writes to one key in flight at once could be reordered by a Cluster
        // connection's retries.
        let mut last = std::collections::HashMap::new();
        for (at, (write, _)) in writes.iter().enumerate() {
            if let Some(id) = write_id(write) {
                last.insert(id, at);
            }
        }
        let sent = writes
            .iter()
            .enumerate()
            .filter(|(at, (w, _))| write_id(w).is_some_and(|id| last.get(&id) == Some(at)))
            .map(|(_, (w, time))| self.apply(w, *time));
        let results = futures_util::future::join_all(sent).await;
        let mut refused = 0;
        for result in results {
            match result {
                Ok(true) => {}
                Ok(false) => refused += 1,
                Err(err) => return Err(format!("redis: {err}")),
            }
        }
        if refused > 0 {
            // A replay of changes a newer write already covers (after a handover): the
            // entry is right as it is.
            tracing::debug!(refused, "writes older than the entry's version skipped");
        }
        for id in writes.iter().filter_map(|(w, _)| write_id(w)) {
            self.status.bans.queue(id);
        }
        Ok(())
    }

    async fn apply(
        &self,
        change: &IndexChange,
        time: Option<Timestamp>,
    ) -> Result<bool, crate::catalog::cache::CacheError> {
        let cache = &self.backends.cache;
        let version = crate::catalog::cache::change_version(time);
        match change {
            IndexChange::Path(id, path) => {
                cache.apply(id, FollowerWrite::Path(path), &version).await
            }
            IndexChange::Forget(id) => cache.apply(id, FollowerWrite::Forget, &version).await,
            IndexChange::Absent(id) => cache.apply(id, FollowerWrite::Absent, &version).await,
            IndexChange::Rebuild | IndexChange::Invalidated | IndexChange::Nothing => Ok(true),
        }
    }

    /// `reindex --prune`, while the stream waits: changes made meanwhile are applied after.
    async fn rebuild(&self, why: &str) -> Result<(), String> {
        self.status.set(WatchState::Rebuilding, why);
        tracing::warn!(reason = why, "change-stream follower: rebuilding the index");
        let options = ReindexOptions {
            dry_run: false,
            prune: true,
            batch: 1000,
        };
        let report = reindex::reindex(
            &self.backends,
            &self.config.redis.target,
            self.config.redis.batch_timeout(),
            &options,
            |_| {},
        )
        .await
        .map_err(|e| format!("rebuild: {e}"))?;
        self.status.rebuilds.fetch_add(1, Ordering::Relaxed);
        // Anything may have changed: every cache in front and in every musicd forgets all.
        self.status.bans.queue_everything();
        if let Err(err) = crate::catalog::evictions::publish(
            self.backends.cache.link(),
            self.backends.cache.prefix(),
            None,
        )
        .await
        {
            tracing::warn!(error = %err, "could not publish the eviction of every id after a rebuild");
        }
        tracing::info!(
            documents = report.documents,
            indexed = report.indexed,
            pruned = report.pruned,
            seconds = report.seconds,
            "change-stream follower: index rebuilt"
        );
        self.status
            .set(WatchState::Following, "following after a rebuild");
        Ok(())
    }

    async fn replica_set(&self) -> Result<bool, String> {
        let hello = self
            .backends
            .store
            .client()
            .database("admin")
            .run_command(doc! { "hello": 1 })
            .await
            .map_err(|e| format!("mongodb: {e}"))?;
        Ok(hello.get_str("setName").is_ok())
    }
}

/// The id a write is for.
fn write_id(write: &IndexChange) -> Option<mongodb::bson::oid::ObjectId> {
    match write {
        IndexChange::Path(id, _) | IndexChange::Forget(id) | IndexChange::Absent(id) => Some(*id),
        IndexChange::Rebuild | IndexChange::Invalidated | IndexChange::Nothing => None,
    }
}

/// Resume points kept while their bans are under way (older ones are dropped first).
const MAX_UNSAVED: usize = 256;

/// Events in one batch at most.
const MAX_BATCH: usize = 256;

type Event = ChangeStreamEvent<Document>;

/// What the reading task passes on: an event with the resume point after it, a resume
/// point alone (an empty batch: the stream moved on without a change for us), or the
/// error that ended the stream.
enum Read {
    Event(Box<Event>, Option<ResumeToken>),
    Idle(Option<ResumeToken>),
    Failed(mongodb::error::Error),
}

/// The change stream read by a task of its own. The follower then takes everything that
/// arrived as one batch without ever cancelling a read (`next_if_any` is not cancel-safe:
/// a `getMore` dropped half-way breaks the cursor). Dropping the reader stops the task.
struct Reader {
    rx: tokio::sync::mpsc::Receiver<Read>,
    task: tokio::task::JoinHandle<()>,
}

impl Reader {
    fn spawn(mut stream: ChangeStream<Event>) -> Reader {
        let (tx, rx) = tokio::sync::mpsc::channel(MAX_BATCH * 4);
        let task = tokio::spawn(async move {
            loop {
                let read = match stream.next_if_any().await {
                    Ok(Some(event)) => Read::Event(Box::new(event), stream.resume_token()),
                    Ok(None) => Read::Idle(stream.resume_token()),
                    Err(err) => {
                        let _ = tx.send(Read::Failed(err)).await;
                        return;
                    }
                };
                if tx.send(read).await.is_err() {
                    return;
                }
            }
        });
        Reader { rx, task }
    }

    /// Events that arrived (waiting for the first), the resume point after the last of
    /// them, and the error that ended the stream, if it did.
    async fn batch(
        &mut self,
    ) -> (
        Vec<Event>,
        Option<ResumeToken>,
        Option<mongodb::error::Error>,
    ) {
        let mut events = Vec::new();
        let mut token = None;
        let mut next = self.rx.recv().await;
        loop {
            match next {
                Some(Read::Event(event, after)) => {
                    events.push(*event);
                    token = after.or(token);
                }
                Some(Read::Idle(after)) => token = after.or(token),
                Some(Read::Failed(err)) => return (events, token, Some(err)),
                None => {
                    let gone = mongodb::error::Error::custom("the change-stream reader stopped");
                    return (events, token, Some(gone));
                }
            }
            if events.len() >= MAX_BATCH {
                break;
            }
            match self.rx.try_recv() {
                Ok(read) => next = Some(read),
                Err(_) => break,
            }
        }
        (events, token, None)
    }
}

impl Drop for Reader {
    fn drop(&mut self) {
        self.task.abort();
    }
}

fn history_lost(err: &mongodb::error::Error) -> bool {
    // 280 ChangeStreamFatalError is what older servers say for the same thing.
    matches!(&*err.kind, mongodb::error::ErrorKind::Command(c) if c.code == HISTORY_LOST || c.code == 280)
}

fn owner_id() -> String {
    let host = std::fs::read_to_string("/proc/sys/kernel/hostname")
        .map(|h| h.trim().to_string())
        .unwrap_or_else(|_| "localhost".into());
    format!(
        "{host}:{}:{:08x}",
        std::process::id(),
        rand::random::<u32>()
    )
}

/// Milliseconds since the epoch, as the saved position counts them.
pub(crate) fn now_ms() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| i64::try_from(d.as_millis()).unwrap_or(i64::MAX))
        .unwrap_or(0)
}
