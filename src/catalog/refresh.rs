//! Refresh-ahead of the in-process id cache: an id still being asked for is read from
//! Redis again before its entry runs out, in batches, off the request path.
//!
//! Without it, each entry of a hot id ran out once per TTL (1 s by default) and the next
//! request for it waited on a Redis round trip made from the event loop, and then copied the
//! file again for each loop ([`crate::http::hot`]). On 1,000 hot ids that is 1,000 single
//! `GET`s a second on the request path, each one a wake-up of the loop that holds the Redis
//! connection. Here a loop answering from its copy of a track (files up to
//! [`crate::http::hot::MOST_FILE_BYTES`]) notes the id once its entry is in the last
//! quarter of its TTL ([`Refresh::ask`]: a push under a lock once per id, loop and period);
//! one task reads the noted ids in one pipelined round trip per [`BATCH`] and renews their
//! entries. Larger files, whose transfers outlast a round trip by far, are not noted.
//!
//! The bound on staleness does not move: a renewed entry holds what Redis answered, read
//! under the same eviction fence as any lookup ([`super::LocalCache::put`] drops an answer
//! whose shard saw an eviction since), so a change written to Redis shows within the TTL
//! (and the round trip that read it) whether or not its eviction was heard. An id Redis no
//! longer holds is not renewed: its entry runs out and the next request takes the full
//! read-through (MongoDB). When Redis fails, nothing is renewed and requests find Redis
//! down as before.

use std::sync::Mutex;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use mongodb::bson::oid::ObjectId;

use super::{Cached, Local, Resolver};

/// The most ids read in one round trip.
pub(crate) const BATCH: usize = 256;

/// The most ids waiting: the loops note each hot id once per period, so this is only
/// reached when Redis stalls; the ids past it simply run out and are read on request.
const MOST_WAITING: usize = 16 * 1024;

/// Ids noted by the event loops, and what became of them.
#[derive(Default)]
pub(crate) struct Refresh {
    waiting: Mutex<Vec<ObjectId>>,
    wake: tokio::sync::Notify,
    renewed: AtomicU64,
}

impl Refresh {
    /// Notes `id`, whose entry is in the last quarter of its TTL and still asked for.
    pub(crate) fn ask(&self, id: ObjectId) {
        let mut waiting = self.waiting.lock().unwrap_or_else(|p| p.into_inner());
        if waiting.len() >= MOST_WAITING {
            return;
        }
        waiting.push(id);
        if waiting.len() == 1 {
            // A permit is stored if the task is busy: the id is not left waiting.
            self.wake.notify_one();
        }
    }

    /// Ids noted and not yet read.
    #[cfg(test)]
    pub(crate) fn waiting(&self) -> usize {
        self.waiting.lock().unwrap_or_else(|p| p.into_inner()).len()
    }

    /// Entries renewed so far.
    pub(crate) fn renewed(&self) -> u64 {
        self.renewed.load(Ordering::Relaxed)
    }

    /// Moves the noted ids into `ids` (emptied, its room left to the next notes: the two
    /// lists trade places each round, so neither the loops nor the task allocate once they
    /// have grown), once each.
    fn take(&self, ids: &mut Vec<ObjectId>) {
        ids.clear();
        std::mem::swap(
            &mut *self.waiting.lock().unwrap_or_else(|p| p.into_inner()),
            ids,
        );
        ids.sort_unstable();
        ids.dedup();
    }
}

/// How long the task lets notes gather before it reads them: long enough that the ids of
/// a busy second share round trips, short against the quarter of the TTL they have left.
fn gathering(ttl: Duration) -> Duration {
    (ttl / 16).min(Duration::from_millis(20))
}

/// Renews the entries the loops note until `stop` completes.
pub(crate) async fn run(resolver: std::sync::Arc<Resolver>, stop: impl Future<Output = ()>) {
    let mut stop = std::pin::pin!(stop);
    let mut ids = Vec::new();
    loop {
        let round = async {
            resolver.refresh.wake.notified().await;
            tokio::time::sleep(gathering(resolver.local.ttl())).await;
            resolver.refresh.take(&mut ids);
            for batch in ids.chunks(BATCH) {
                renew(&resolver, batch).await;
            }
        };
        // A stop is not held up by a round against a Redis that times out each batch.
        tokio::select! {
            biased;
            () = &mut stop => return,
            () = round => {}
        }
    }
}

async fn renew(resolver: &Resolver, ids: &[ObjectId]) {
    let local = &resolver.local;
    // Taken before the read leaves the process: an eviction meanwhile wins.
    let epochs: Vec<u64> = ids.iter().map(|id| local.epoch(id)).collect();
    let answers = match resolver.cache.get_many(ids).await {
        Ok(answers) => answers,
        Err(err) => {
            tracing::debug!(error = %err, ids = ids.len(), "ids not refreshed: Redis failed");
            return;
        }
    };
    let mut renewed = 0;
    for ((id, epoch), answer) in ids.iter().zip(epochs).zip(answers) {
        let value = match answer {
            Cached::Path(path) => Local::Path(path.into()),
            Cached::Absent => Local::Absent,
            Cached::Unknown => continue,
        };
        if local.put(*id, value, epoch) {
            renewed += 1;
        }
    }
    resolver
        .refresh
        .renewed
        .fetch_add(renewed, Ordering::Relaxed);
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn noted_ids_are_read_once_each_and_the_waiting_list_is_bounded() {
        let refresh = Refresh::default();
        let (a, b) = (ObjectId::new(), ObjectId::new());
        for _ in 0..3 {
            refresh.ask(a);
            refresh.ask(b);
        }
        let mut expected = vec![a, b];
        expected.sort_unstable();
        let mut ids = Vec::new();
        refresh.take(&mut ids);
        assert_eq!(ids, expected);
        refresh.take(&mut ids);
        assert!(ids.is_empty());
        for _ in 0..MOST_WAITING + 10 {
            refresh.ask(ObjectId::new());
        }
        refresh.take(&mut ids);
        assert_eq!(ids.len(), MOST_WAITING);
    }
}
