//! Pushed eviction: what the follower changed leaves every musicd's in-process id cache
//! in milliseconds instead of at the end of its 1 s TTL.
//!
//! The follower publishes each id it writes on the Redis channel `{prefix}evict`, inside the
//! same script as the write ([`super::cache::TrackCache::apply`]), so a change and its
//! eviction are one round trip and cannot be reordered. `musicctl purge` publishes too
//! (`*` for a pattern: everything). Every musicd keeps one subscription
//! ([`follow`]) and evicts what arrives.
//!
//! Why plain pub/sub, and not sharded pub/sub or RESP3 client-side caching:
//! * On a Cluster a classic `PUBLISH` reaches every node over the cluster bus, so one
//!   subscription to any node hears every message, and a failed node is replaced by the
//!   next seed. Sharded pub/sub puts one channel on one shard anyway: it would buy nothing
//!   for a single channel and tie the subscriber to that shard's master.
//! * `CLIENT TRACKING` would make Redis remember which keys each musicd read (a table the
//!   size of the hot catalogue per node), push an invalidation for every write of a `reindex`,
//!   every TTL expiry and every fill, and needs a RESP3 connection per node. One message
//!   per change, from the one writer that matters, is far less.
//!
//! Pub/sub delivers at most once: a message sent while the subscription is down, or lost
//! in a partition nobody noticed yet, is never delivered. So the subscription is checked
//! with a `PING` every [`PING_EVERY`] (a partition shows as a missing answer, not only as a
//! reset), and the follower publishes a heartbeat every [`HEARTBEAT_EVERY`]: answers live
//! their configured TTL only while messages are heard (a Cluster node cut off from the bus
//! still answers `PING` but hears nothing), 1 s at most otherwise; when hearing resumes
//! with a longer TTL the whole local cache is cleared, so what was missed cannot survive.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::Duration;

use futures_util::StreamExt;
use mongodb::bson::oid::ObjectId;

use super::Resolver;
use crate::config::RedisTarget;
use crate::redis_link::RedisLink;
use crate::signing::Revoked;

/// How often a live subscription proves it is live.
pub(crate) const PING_EVERY: Duration = Duration::from_secs(1);

/// How often the follower says it is there (a message of its own on the channel).
pub(crate) const HEARTBEAT_EVERY: Duration = Duration::from_secs(1);

/// Past this long without a message, evictions are taken not to arrive: a Cluster node
/// cut off from the cluster bus still answers `PING`, but hears nothing published.
pub(crate) const SILENCE: Duration = Duration::from_secs(3);

/// The follower's heartbeat message (not an id: evicts nothing).
const HEARTBEAT: &str = ".";

/// Pause before subscribing again after a failure.
const RETRY: Duration = Duration::from_millis(500);

/// The message that evicts everything.
pub(crate) const EVERYTHING: &str = "*";

/// The channel of an index (its key prefix).
pub(crate) use crate::redis_link::channel;

/// The subscription's state and counters, for `/readyz` and `/metrics`.
#[derive(Debug, Default)]
pub(crate) struct EvictionStatus {
    subscribed: AtomicBool,
    /// Ids evicted on a message.
    evicted: AtomicU64,
    /// Whole-cache clears (messages for everything, and every (re)subscription).
    clears: AtomicU64,
    /// Times the subscription was lost.
    lost: AtomicU64,
    /// Why the last subscription ended (or could not start).
    last_error: std::sync::Mutex<String>,
}

impl EvictionStatus {
    /// Whether evictions are being received now.
    pub(crate) fn subscribed(&self) -> bool {
        self.subscribed.load(Ordering::Relaxed)
    }

    /// Ids evicted on a message so far.
    pub(crate) fn evicted(&self) -> u64 {
        self.evicted.load(Ordering::Relaxed)
    }

    /// Whole-cache clears so far.
    pub(crate) fn clears(&self) -> u64 {
        self.clears.load(Ordering::Relaxed)
    }

    /// Subscriptions lost so far.
    pub(crate) fn lost(&self) -> u64 {
        self.lost.load(Ordering::Relaxed)
    }

    /// For `/readyz`.
    pub(crate) fn to_json(&self) -> serde_json::Value {
        serde_json::json!({
            "subscribed": self.subscribed(),
            "evicted": self.evicted(),
            "clears": self.clears(),
            "lost": self.lost(),
            "last_error": self.last_error.lock().map(|e| e.clone()).unwrap_or_default(),
        })
    }
}

/// Publishes evictions of `ids` (or of everything) on `link`; how many subscribers heard it.
pub(crate) async fn publish(
    link: &RedisLink,
    prefix: &str,
    ids: Option<&[ObjectId]>,
) -> Result<u64, crate::redis_link::LinkError> {
    let message = match ids {
        Some(ids) => ids
            .iter()
            .map(|id| id.to_hex())
            .collect::<Vec<_>>()
            .join(" "),
        None => EVERYTHING.to_string(),
    };
    let channel = channel(prefix);
    link.run(|mut conn| async move {
        redis::cmd("PUBLISH")
            .arg(&channel)
            .arg(&message)
            .query_async(&mut conn)
            .await
    })
    .await
}

/// The follower's heartbeat: a message every musicd hears, proving evictions reach it.
pub(crate) async fn heartbeat(
    link: &RedisLink,
    prefix: &str,
) -> Result<u64, crate::redis_link::LinkError> {
    let channel = channel(prefix);
    link.run(|mut conn| async move {
        redis::cmd("PUBLISH")
            .arg(&channel)
            .arg(HEARTBEAT)
            .query_async(&mut conn)
            .await
    })
    .await
}

/// Applies one message to `resolver`, or to `revoked` when it is a revocation's.
fn apply(message: &[u8], resolver: &Resolver, revoked: &Revoked, status: &EvictionStatus) {
    let text = String::from_utf8_lossy(message);
    if revoked.apply(&text) {
        return;
    }
    if text.trim() == EVERYTHING {
        resolver.clear();
        status.clears.fetch_add(1, Ordering::Relaxed);
        return;
    }
    let ids: Vec<ObjectId> = text
        .split_ascii_whitespace()
        .filter_map(|hex| ObjectId::parse_str(hex).ok())
        .collect();
    resolver.evict(&ids);
    status
        .evicted
        .fetch_add(ids.len() as u64, Ordering::Relaxed);
}

/// Keeps a subscription to the index's channel until `stop` completes, evicting from
/// `local` what arrives; resubscribes (to the next node of a Cluster) after any failure.
pub(crate) async fn follow(
    target: RedisTarget,
    timeout: Duration,
    prefix: String,
    resolver: Arc<Resolver>,
    revoked: Arc<Revoked>,
    status: Arc<EvictionStatus>,
    stop: impl Future<Output = ()>,
) {
    // Reads the revocations again (on a subscription, and when hearing resumes).
    let link = RedisLink::new(&target, timeout).ok().map(Arc::new);
    let reload = {
        let (revoked, prefix) = (Arc::clone(&revoked), prefix.clone());
        move || {
            let Some(link) = link.clone() else { return };
            let (revoked, prefix) = (Arc::clone(&revoked), prefix.clone());
            tokio::spawn(async move {
                // Until it succeeds: a musicd that missed announcements must not go on
                // without them while its subscription, and the heartbeats, look fine.
                let mut backoff = crate::timing::Backoff::new(RETRY, Duration::from_secs(10));
                loop {
                    let now = crate::timing::unix_secs();
                    match revoked.reload(&link, &prefix, now).await {
                        Ok(count) => {
                            tracing::debug!(count, "revocations loaded");
                            return;
                        }
                        Err(err) => tracing::warn!(
                            error = %err,
                            "revocations could not be loaded; retrying (those announced meanwhile apply)"
                        ),
                    }
                    tokio::time::sleep(backoff.next_pause()).await;
                }
            });
        }
    };
    let mut stop = std::pin::pin!(stop);
    let nodes: Vec<String> = match &target {
        RedisTarget::Single(url) => vec![url.clone()],
        RedisTarget::Cluster(seeds) => seeds.clone(),
    };
    let channel = channel(&prefix);
    let mut next = 0usize;
    loop {
        let node = &nodes[next % nodes.len().max(1)];
        next += 1;
        tokio::select! {
            () = &mut stop => break,
            why = subscribed(node, &channel, timeout, &resolver, &revoked, &status, &reload) => {
                resolver.local().set_pushed(false);
                if let Ok(mut last) = status.last_error.lock() {
                    last.clone_from(&why);
                }
                if status.subscribed.swap(false, Ordering::Relaxed) {
                    status.lost.fetch_add(1, Ordering::Relaxed);
                    tracing::warn!(reason = %why, "eviction subscription lost: in-process ids expire by their TTL until it is back");
                }
            }
        }
        tokio::select! {
            () = &mut stop => break,
            () = tokio::time::sleep(RETRY) => {}
        }
    }
    status.subscribed.store(false, Ordering::Relaxed);
    resolver.local().set_pushed(false);
}

/// One subscription, until it fails; why it ended.
async fn subscribed(
    node: &str,
    channel: &str,
    timeout: Duration,
    resolver: &Resolver,
    revoked: &Revoked,
    status: &EvictionStatus,
    reload_revocations: &impl Fn(),
) -> String {
    let connect = async {
        let client = redis::Client::open(node)?;
        let mut pubsub = client.get_async_pubsub().await?;
        pubsub.subscribe(channel).await?;
        Ok::<_, redis::RedisError>(pubsub)
    };
    let pubsub = match tokio::time::timeout(timeout, connect).await {
        Ok(Ok(pubsub)) => pubsub,
        Ok(Err(err)) => return err.to_string(),
        Err(_) => return format!("subscribing took longer than {timeout:?}"),
    };
    if !status.subscribed.swap(true, Ordering::Relaxed) {
        tracing::info!(node, channel, "evictions subscribed");
    }
    // Subscribed first, read second: a revocation announced meanwhile is heard.
    reload_revocations();
    // Entries live their configured TTL only while messages are heard (the follower's
    // heartbeat at least); whatever was published while nobody listened is lost, so
    // answers kept meanwhile (1 s at most) are cleared when hearing resumes with a longer
    // TTL. With the default 1 s TTL nothing changes, and nothing is thrown away.
    let mut silenced = false;
    let hear = |heard: &mut Option<std::time::Instant>, silenced: &mut bool| {
        if heard.is_none() && resolver.local().ttl() > super::local::UNPUSHED_TTL {
            resolver.clear();
            status.clears.fetch_add(1, Ordering::Relaxed);
        }
        // Revocations announced during the silence were lost: read them again.
        if std::mem::take(silenced) {
            reload_revocations();
        }
        *heard = Some(std::time::Instant::now());
        resolver.local().set_pushed(true);
    };
    let mut heard: Option<std::time::Instant> = None;
    let (mut sink, mut messages) = pubsub.split();
    let mut ping = tokio::time::interval(PING_EVERY);
    ping.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        tokio::select! {
            message = messages.next() => match message {
                Some(message) => {
                    hear(&mut heard, &mut silenced);
                    apply(message.get_payload_bytes(), resolver, revoked, status);
                }
                None => return "the connection closed".into(),
            },
            _ = ping.tick() => {
                match tokio::time::timeout(timeout, sink.ping::<redis::Value>()).await {
                    Ok(Ok(_)) => {}
                    Ok(Err(err)) => return err.to_string(),
                    Err(_) => return format!("no answer to PING within {timeout:?}"),
                }
                if heard.is_some_and(|at| at.elapsed() > SILENCE) {
                    heard = None;
                    silenced = true;
                    resolver.local().set_pushed(false);
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::catalog::Local;
    use std::time::Instant;

    #[tokio::test]
    async fn a_message_evicts_its_ids_and_a_star_everything() {
        let sources = crate::config::Sources {
            file: None,
            env: Vec::new(),
            overrides: vec!["cache.id_ttl_ms=60000".into()],
        };
        let config = crate::config::Config::load_for_control(&sources).expect("defaults");
        let backends = crate::catalog::backends::Backends::new(&config)
            .await
            .expect("clients (nothing connects)");
        let (resolver, _) = backends.resolver(&config);
        let local = resolver.local();
        let status = EvictionStatus::default();
        let ids: Vec<ObjectId> = (0..3).map(|_| ObjectId::new()).collect();
        for id in &ids {
            local.put(*id, Local::Absent, local.epoch(id));
        }
        let message = format!("{} {} not-an-id", ids[0].to_hex(), ids[1].to_hex());
        apply(message.as_bytes(), &resolver, &Revoked::default(), &status);
        assert_eq!(local.get(&ids[0], Instant::now()), None);
        assert_eq!(local.get(&ids[1], Instant::now()), None);
        assert_eq!(local.get(&ids[2], Instant::now()), Some(Local::Absent));
        assert_eq!(status.evicted(), 2);
        apply(b"*", &resolver, &Revoked::default(), &status);
        assert!(local.is_empty());
        assert_eq!(status.clears(), 1);
    }
}
