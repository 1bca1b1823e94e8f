//! The index keeps itself current: one process follows the tracks collection's change
//! stream and writes what changed into Redis.
//!
//! Why a module of its own and not part of [`crate::catalog`]: the follower is a background
//! job that uses the catalogue's clients and its fenced rebuild
//! ([`crate::catalog::rebuild`], which `musicctl reindex` runs too); the request path
//! never calls it.
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

use crate::catalog::backends::Backends;
use crate::catalog::cache::FollowerWrite;
use crate::catalog::rebuild::{self, RebuildOptions};
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
pub(crate) enum FollowerState {
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

impl FollowerState {
    /// Its name in `/readyz` and `health`.
    pub(crate) fn label(self) -> &'static str {
        match self {
            FollowerState::Off => "off",
            FollowerState::Waiting => "waiting",
            FollowerState::Standby => "standby",
            FollowerState::Following => "following",
            FollowerState::Rebuilding => "rebuilding",
        }
    }

    fn from_u8(value: u8) -> FollowerState {
        match value {
            1 => FollowerState::Waiting,
            2 => FollowerState::Standby,
            3 => FollowerState::Following,
            4 => FollowerState::Rebuilding,
            _ => FollowerState::Off,
        }
    }
}

/// The follower's state and counters, shared with `/metrics` and `/readyz`.
pub struct FollowerStatus {
    state: AtomicU8,
    events: [AtomicU64; OPERATIONS.len()],
    rebuilds: AtomicU64,
    /// Interruptions, by [`FollowError::kind`].
    interruptions: [AtomicU64; FollowError::KINDS.len()],
    /// Cluster time of the last event applied, ms since the epoch (0: none yet).
    last_event_ms: AtomicI64,
    reason: std::sync::Mutex<String>,
    /// The bans of the HTTP caches in front.
    bans: Banner,
    /// Whether this process holds the lease now (it bans revoked links' authorizations).
    holding: std::sync::atomic::AtomicBool,
}

impl FollowerStatus {
    /// The status of a follower banning in `config`'s HTTP caches.
    pub fn new(config: &Config) -> FollowerStatus {
        FollowerStatus {
            state: AtomicU8::new(FollowerState::Off as u8),
            events: Default::default(),
            rebuilds: AtomicU64::new(0),
            interruptions: Default::default(),
            last_event_ms: AtomicI64::new(0),
            reason: std::sync::Mutex::default(),
            bans: Banner::new(&config.ban_urls, &config.route_prefixes),
            holding: std::sync::atomic::AtomicBool::new(false),
        }
    }

    /// The bans of the HTTP caches in front.
    pub(crate) fn bans(&self) -> &Banner {
        &self.bans
    }

    /// The current state.
    pub(crate) fn state(&self) -> FollowerState {
        FollowerState::from_u8(self.state.load(Ordering::Relaxed))
    }

    /// Sets the state and why; whether either changed.
    fn set(&self, state: FollowerState, reason: &str) -> bool {
        let previous = FollowerState::from_u8(self.state.swap(state as u8, Ordering::Relaxed));
        let Ok(mut current) = self.reason.lock() else {
            return previous != state;
        };
        let changed = previous != state || *current != reason;
        if changed {
            reason.clone_into(&mut current);
            if previous != state {
                tracing::info!(state = state.label(), reason, "change-stream follower");
            }
        }
        changed
    }

    /// Seconds between now and the last applied event's cluster time (0 before any).
    pub(crate) fn lag_seconds(&self) -> f64 {
        match self.last_event_ms.load(Ordering::Relaxed) {
            0 => 0.0,
            ms => (crate::timing::unix_ms() - ms).max(0) as f64 / 1000.0,
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

    fn interrupted(&self, err: &FollowError) {
        self.interruptions[err.kind()].fetch_add(1, Ordering::Relaxed);
    }

    /// Interruptions so far, by kind (`musicd_watch_interruptions_total`).
    pub(crate) fn interruptions(&self) -> impl Iterator<Item = (&'static str, u64)> + '_ {
        FollowError::KINDS
            .iter()
            .zip(&self.interruptions)
            .map(|(kind, n)| (*kind, n.load(Ordering::Relaxed)))
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
    Failed(FollowError),
}

/// Why the follower was interrupted. Each kind is counted by its [`FollowError::kind`]
/// (`musicd_watch_interruptions_total`).
#[derive(Debug, thiserror::Error)]
pub(crate) enum FollowError {
    /// Redis failed under the lease or the resume point.
    #[error("redis: {0}")]
    Lease(#[from] lease::LeaseError),
    /// Redis refused a write of a change.
    #[error("redis: {0}")]
    Cache(#[from] crate::catalog::cache::CacheError),
    /// MongoDB failed: the stream, or the question whether it is a replica set.
    #[error("mongodb: {0}")]
    Mongo(#[from] mongodb::error::Error),
    /// The rebuild of the index failed.
    #[error("rebuild: {0}")]
    Rebuild(#[from] rebuild::RebuildError),
}

impl FollowError {
    /// The kinds, in the order [`FollowError::kind`] numbers them.
    pub(crate) const KINDS: [&'static str; 3] = ["redis", "mongodb", "rebuild"];

    /// Its index in [`FollowError::KINDS`].
    fn kind(&self) -> usize {
        match self {
            FollowError::Lease(_) | FollowError::Cache(_) => 0,
            FollowError::Mongo(_) => 1,
            FollowError::Rebuild(_) => 2,
        }
    }

    /// Whether trying again soon can mend it: every outage can; MongoDB refusing the
    /// follower's credentials or a malformed argument cannot.
    pub(crate) fn is_retryable(&self) -> bool {
        let mongo = match self {
            FollowError::Mongo(err) => err,
            FollowError::Rebuild(rebuild::RebuildError::Mongo(err)) => err,
            _ => return true,
        };
        !matches!(
            *mongo.kind,
            mongodb::error::ErrorKind::Authentication { .. }
                | mongodb::error::ErrorKind::InvalidArgument { .. }
        )
    }
}

impl From<FollowError> for Stopped {
    fn from(err: FollowError) -> Stopped {
        Stopped::Failed(err)
    }
}

impl From<mongodb::error::Error> for Stopped {
    fn from(err: mongodb::error::Error) -> Stopped {
        Stopped::Failed(err.into())
    }
}

/// The state of one opened stream while it is followed.
struct Stream {
    reader: Reader,
    /// Cluster time of the last event seen, ms since the epoch.
    last_event_ms: Option<i64>,
    /// The last event was an `invalidate`: the next stream starts after it.
    after_invalidate: bool,
    /// When the resume point was last saved.
    saved: Instant,
    /// Resume points not saved yet, each with the last ban queued before it: the newest
    /// whose bans are safe is the one saved.
    unsaved: VecDeque<(ResumeToken, u64)>,
    /// When every musicd last heard that the follower is alive.
    heartbeat: Instant,
}

/// The change-stream follower of one process.
pub struct Follower {
    backends: Backends,
    config: Config,
    status: Arc<FollowerStatus>,
    owner: String,
    /// The revocations this process hears (a daemon's own); `None`: the follower listens
    /// for them itself (`musicctl watch`).
    revoked: Option<Arc<crate::signing::Revoked>>,
}

impl Follower {
    /// A follower over its own clients (a change stream holds a connection open; it should
    /// not take one from the pool serving requests).
    pub async fn new(
        config: &Config,
        status: Arc<FollowerStatus>,
    ) -> Result<Follower, crate::catalog::backends::BackendError> {
        Ok(Follower {
            backends: Backends::new(config).await?,
            config: config.clone(),
            status,
            owner: owner_id(),
            revoked: None,
        })
    }

    /// Bans the authorizations of the links revoked as `revoked` hears them (the daemon's
    /// own set), instead of listening for revocations itself.
    pub(crate) fn hearing(mut self, revoked: Arc<crate::signing::Revoked>) -> Follower {
        self.revoked = Some(revoked);
        self
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
        let until_stopped = |mut stopped: tokio::sync::watch::Receiver<bool>| async move {
            let _ = stopped.wait_for(|stop| *stop).await;
        };
        let revocations = self.ban_revocations(until_stopped(stopped.clone()));
        let bans = self.status.bans.run(
            self.backends.cache.link(),
            self.backends.cache.prefix(),
            BAN_GRACE,
            async move {
                let _ = stopped.wait_for(|stop| *stop).await;
            },
        );
        tokio::join!(follow, bans, revocations);
    }

    /// While this process holds the lease, bans in the caches in front the authorizations
    /// of every link revoked: a cache keeps musicd's 204 for a signed URL up to a minute.
    /// A follower taking the lease bans every authorization once (in [`Banner::take_over`]):
    /// what was revoked while nobody followed is covered too.
    async fn ban_revocations(&self, stop: impl Future<Output = ()>) {
        if self.config.ban_urls.is_empty() {
            return;
        }
        let revoked = match &self.revoked {
            Some(revoked) => Arc::clone(revoked),
            None => {
                let revoked = Arc::new(crate::signing::Revoked::default());
                let Ok(backends) = Backends::new(&self.config).await else {
                    return;
                };
                let (resolver, _) = backends.resolver(&self.config);
                tokio::spawn(crate::catalog::evictions::follow(
                    self.config.redis.target.clone(),
                    self.config.redis.timeout,
                    self.config.redis.prefix.clone(),
                    Arc::new(resolver),
                    Arc::clone(&revoked),
                    Arc::default(),
                    std::future::pending(),
                ));
                revoked
            }
        };
        let mut heard = revoked.changes();
        let mut stop = std::pin::pin!(stop);
        loop {
            let member = tokio::select! {
                () = &mut stop => return,
                member = heard.recv() => member,
            };
            let holding = self.status.holding.load(Ordering::Acquire);
            match member {
                Ok(member) if holding => self.status.bans.queue_link(&member),
                Ok(_) => {}
                Err(tokio::sync::broadcast::error::RecvError::Lagged(_)) if holding => {
                    self.status.bans.queue_link(bans::EVERY_AUTHORIZATION);
                }
                Err(tokio::sync::broadcast::error::RecvError::Lagged(_)) => {}
                Err(tokio::sync::broadcast::error::RecvError::Closed) => return,
            }
        }
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
        self.status.set(FollowerState::Off, "stopped");
    }

    /// One attempt: decide whether to follow, take the lease, follow until something ends
    /// it. `None`: never follow (off); `Some(pause)`: try again after it.
    async fn round(&self, lease: &Lease<'_>) -> Option<Duration> {
        let mode = self.config.mongodb.watch;
        if mode == WatchMode::Off {
            self.status
                .set(FollowerState::Off, "mongodb.watch = \"off\"");
            return None;
        }
        match self.replica_set().await {
            Ok(true) => {}
            Ok(false) if mode == WatchMode::Auto => {
                self.status.set(
                    FollowerState::Off,
                    "MongoDB is not a replica set (change streams need one)",
                );
                return None;
            }
            Ok(false) => {
                self.status.set(
                    FollowerState::Waiting,
                    "mongodb.watch = \"on\" but MongoDB is not a replica set",
                );
                return Some(RETRY * 10);
            }
            Err(err) => return Some(self.interrupted(err)),
        }
        match lease.acquire().await {
            Ok(true) => {
                // From now on revocations are this process's to ban: set before the ban of
                // every authorization that `take_over` queues, so none falls between.
                self.status.holding.store(true, Ordering::Release);
                // Bans a previous follower could not deliver are this one's now.
                self.status
                    .bans
                    .take_over(self.backends.cache.link(), self.backends.cache.prefix())
                    .await;
            }
            Ok(false) => {
                self.status
                    .set(FollowerState::Standby, "another process holds the lease");
                return Some(self.config.mongodb.watch_lease / 3);
            }
            Err(err) => return Some(self.interrupted(FollowError::Lease(err))),
        }
        // Renewing runs beside following, so a slow MongoDB (an election) does not cost
        // the lease; losing the lease ends following at once.
        let outcome = tokio::select! {
            stopped = self.keep_lease(lease) => stopped,
            stopped = self.follow(lease) => stopped,
        };
        self.status.holding.store(false, Ordering::Release);
        match outcome {
            Stopped::LeaseLost => {
                self.status
                    .set(FollowerState::Standby, "lost the lease to another process");
                Some(Duration::ZERO)
            }
            Stopped::Failed(err) => Some(self.interrupted(err)),
        }
    }

    /// Counts and reports a failure; the pause before trying again.
    fn interrupted(&self, err: FollowError) -> Duration {
        self.status.interrupted(&err);
        let why = err.to_string();
        // Said once per reason, however long it lasts; the metric counts every one.
        let news = self.status.set(FollowerState::Waiting, &why);
        if err.is_retryable() {
            if news {
                tracing::warn!(reason = %why, "change-stream follower interrupted; retrying");
            }
            RETRY
        } else {
            // A fault no retry mends soon (credentials, a bad argument): said louder, tried
            // less often.
            if news {
                tracing::error!(reason = %why, "change-stream follower stopped; fix the cause");
            }
            RETRY * 10
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
        match self.try_follow(lease).await {
            Ok(never) => match never {},
            Err(stopped) => stopped,
        }
    }

    async fn try_follow(&self, lease: &Lease<'_>) -> Result<std::convert::Infallible, Stopped> {
        let mut stream = self.start(lease).await?;
        loop {
            // What the stream delivered since the last turn, waiting for it if need be: a
            // burst of changes is written as one batch.
            let (batch, latest, failed) = stream.reader.batch().await;
            let mut writes = Vec::new();
            for event in batch {
                self.count(&event, &mut stream);
                self.handle(event, &mut stream, &mut writes).await?;
            }
            self.apply_all(writes).await?;
            if let Some(token) = latest {
                if stream.unsaved.len() >= MAX_UNSAVED {
                    stream.unsaved.pop_front();
                }
                stream.unsaved.push_back((token, self.status.bans.queued()));
            }
            self.heartbeat(&mut stream).await;
            match failed {
                None => {}
                Some(err) if history_lost(&err) => {
                    stream.reader = Reader::spawn(self.open(None).await?);
                    stream.unsaved.clear();
                    self.rebuild("the resume point fell off the oplog").await?;
                }
                Some(err) => return Err(FollowError::Mongo(err).into()),
            }
            self.save_if_due(lease, &mut stream).await?;
        }
    }

    /// Opens the stream from the saved position and, without a usable one, rebuilds the
    /// index once, after opening: nothing made before or during the rebuild is missed.
    async fn start(&self, lease: &Lease<'_>) -> Result<Stream, Stopped> {
        let (position, unreadable) = match lease.position().await {
            Ok(position) => (position, false),
            // Written by a version that stored it differently: start at the present and
            // rebuild, rather than never follow again.
            Err(err @ lease::LeaseError::Position(_)) => {
                tracing::warn!(error = %err, "ignoring the saved resume point");
                (None, true)
            }
            Err(err) => return Err(FollowError::Lease(err).into()),
        };
        let (opened, lost) = match self.open(position.as_ref()).await {
            Ok(opened) => (opened, false),
            Err(err) if history_lost(&err) => (self.open(None).await?, true),
            Err(err) => return Err(FollowError::Mongo(err).into()),
        };
        // Without a usable resume point nobody knows what changed before the stream was
        // opened (since `reindex`, since an id was cached, since the lease was taken).
        // `Following` is said only when nothing was missed.
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
            Some(why) => self.rebuild(why).await?,
            None => {
                self.status
                    .set(FollowerState::Following, "resumed from the saved position");
            }
        }
        Ok(Stream {
            reader: Reader::spawn(opened),
            last_event_ms: position.as_ref().and_then(|p| p.last_event_ms),
            after_invalidate: false,
            saved: Instant::now(),
            unsaved: VecDeque::new(),
            heartbeat: Instant::now(),
        })
    }

    /// Counts an event by operation and notes its cluster time.
    fn count(&self, event: &Event, stream: &mut Stream) {
        let index = usize::from(change::operation_index(&event.operation_type));
        self.status.events[index].fetch_add(1, Ordering::Relaxed);
        if let Some(time) = event.cluster_time {
            let ms = i64::from(time.time) * 1000;
            stream.last_event_ms = Some(ms);
            self.status.last_event_ms.store(ms, Ordering::Relaxed);
        }
    }

    /// What one event does ([`change::index_change`]): a write joins the batch; a rebuild
    /// or an invalidation first writes the batch so far, in stream order.
    async fn handle(
        &self,
        event: Event,
        stream: &mut Stream,
        writes: &mut Vec<(IndexChange, Option<Timestamp>)>,
    ) -> Result<(), Stopped> {
        match change::index_change(&event, self.backends.store.path_field()) {
            IndexChange::Nothing => {}
            IndexChange::Rebuild => {
                self.apply_all(std::mem::take(writes)).await?;
                self.rebuild("the collection was dropped or renamed")
                    .await?;
            }
            IndexChange::Invalidated => {
                self.apply_all(std::mem::take(writes)).await?;
                // The stream is over; the next one starts right after this event, and the
                // rebuild covers whatever the collection is now.
                let position = Position {
                    token: event.id.clone(),
                    after_invalidate: true,
                    owner: self.owner.clone(),
                    saved_ms: crate::timing::unix_ms(),
                    last_event_ms: stream.last_event_ms,
                };
                stream.reader = Reader::spawn(self.open(Some(&position)).await?);
                stream.unsaved.clear();
                stream
                    .unsaved
                    .push_back((event.id.clone(), self.status.bans.queued()));
                self.rebuild("the stream was invalidated").await?;
                stream.after_invalidate = true;
            }
            write => {
                writes.push((write, event.cluster_time));
                stream.after_invalidate = false;
            }
        }
        Ok(())
    }

    /// Tells every musicd that the follower is alive, at most every
    /// [`crate::catalog::evictions::HEARTBEAT_EVERY`].
    async fn heartbeat(&self, stream: &mut Stream) {
        if stream.heartbeat.elapsed() < crate::catalog::evictions::HEARTBEAT_EVERY {
            return;
        }
        stream.heartbeat = Instant::now();
        let cache = &self.backends.cache;
        if let Err(err) = crate::catalog::evictions::heartbeat(cache.link(), cache.prefix()).await {
            tracing::debug!(error = %err, "eviction heartbeat not published");
        }
    }

    /// Saves the newest resume point whose changes' bans are all safe (sent, or kept in
    /// Redis), at most every [`SAVE_EVERY`]: a successor replays and bans whatever came
    /// after.
    async fn save_if_due(&self, lease: &Lease<'_>, stream: &mut Stream) -> Result<(), Stopped> {
        if stream.saved.elapsed() < SAVE_EVERY {
            return Ok(());
        }
        let Some(newest) = stream
            .unsaved
            .iter()
            .rposition(|(_, seq)| self.status.bans.settled(*seq))
        else {
            return Ok(());
        };
        let Some(token) = stream.unsaved.get(newest).map(|(token, _)| token.clone()) else {
            return Ok(());
        };
        stream.unsaved.drain(..newest);
        let position = Position {
            token,
            after_invalidate: stream.after_invalidate,
            owner: self.owner.clone(),
            saved_ms: crate::timing::unix_ms(),
            last_event_ms: stream.last_event_ms,
        };
        match lease.save(&position).await {
            Ok(true) => stream.saved = Instant::now(),
            Ok(false) => return Err(Stopped::LeaseLost),
            Err(err) => return Err(FollowError::Lease(err).into()),
        }
        Ok(())
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
    async fn apply_all(
        &self,
        writes: Vec<(IndexChange, Option<Timestamp>)>,
    ) -> Result<(), FollowError> {
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
                Err(err) => return Err(FollowError::Cache(err)),
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
    async fn rebuild(&self, why: &str) -> Result<(), FollowError> {
        self.status.set(FollowerState::Rebuilding, why);
        tracing::warn!(reason = why, "change-stream follower: rebuilding the index");
        let options = RebuildOptions {
            dry_run: false,
            prune: true,
            batch: 1000,
            versioned: true,
        };
        let report = rebuild::rebuild(
            &self.backends,
            &self.config.redis.target,
            self.config.redis.batch_timeout(),
            &options,
            |_| {},
        )
        .await?;
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
            .set(FollowerState::Following, "following after a rebuild");
        Ok(())
    }

    async fn replica_set(&self) -> Result<bool, FollowError> {
        let hello = self
            .backends
            .store
            .client()
            .database("admin")
            .run_command(doc! { "hello": 1 })
            .await?;
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
