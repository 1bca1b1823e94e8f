//! The follower's lease and resume point in Redis: which process follows, and where it is.
//!
//! Two keys share one hash tag (one cluster slot) so a script can touch both atomically:
//! `musicd_watch:{PREFIX}:lease` holds the follower's owner id with a PX expiry (taken with
//! `SET NX PX`, renewed by its owner only, deleted on a clean stop), and
//! `musicd_watch:{PREFIX}:position` holds the last resume point, as BSON. Every write of the
//! position checks the lease in the same script, so a follower that lost its lease (paused
//! past it, cut off from Redis) cannot move the resume point of its successor. The keys sit
//! outside the track prefix: `musicctl purge "track_*"` leaves them alone.

use std::time::Duration;

use mongodb::change_stream::event::ResumeToken;
use serde::{Deserialize, Serialize};

use crate::redis_link::{LinkError, RedisLink};

/// Why the lease could not be read or written.
#[derive(Debug, thiserror::Error)]
pub(crate) enum LeaseError {
    /// Redis did not answer.
    #[error(transparent)]
    Link(#[from] LinkError),
    /// The saved position is not BSON this version understands.
    #[error("saved resume point unreadable: {0}")]
    Position(String),
}

/// Where the follower was: what it needs to continue, and what `health` shows.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub(crate) struct Position {
    /// The change stream's resume token.
    pub(crate) token: ResumeToken,
    /// The token is an `invalidate` event's: continue with `startAfter`, not `resumeAfter`.
    pub(crate) after_invalidate: bool,
    /// Who saved it.
    pub(crate) owner: String,
    /// When it was saved (ms since the epoch).
    pub(crate) saved_ms: i64,
    /// Cluster time of the last change applied (ms since the epoch), if any.
    pub(crate) last_event_ms: Option<i64>,
}

/// Who holds the lease now, as Redis says.
#[derive(Debug, Clone, Serialize)]
pub(crate) struct Holder {
    /// The owner id (`host:pid:random`).
    pub(crate) owner: String,
    /// Milliseconds left on the lease.
    pub(crate) remaining_ms: i64,
}

/// The lease of one index (one key prefix), held or wanted by one owner.
pub(crate) struct Lease<'a> {
    link: &'a RedisLink,
    lease_key: String,
    position_key: String,
    owner: String,
    ttl: Duration,
}

const RENEW: &str = r"
if redis.call('GET', KEYS[1]) == ARGV[1] then
  return redis.call('PEXPIRE', KEYS[1], ARGV[2])
end
return 0";

const SAVE: &str = r"
if redis.call('GET', KEYS[1]) == ARGV[1] then
  redis.call('SET', KEYS[2], ARGV[2])
  return 1
end
return 0";

const RELEASE: &str = r"
if redis.call('GET', KEYS[1]) == ARGV[1] then
  return redis.call('DEL', KEYS[1])
end
return 0";

impl<'a> Lease<'a> {
    /// The lease for the index under `prefix`, as `owner`.
    pub(crate) fn new(
        link: &'a RedisLink,
        prefix: &str,
        owner: String,
        ttl: Duration,
    ) -> Lease<'a> {
        let (lease_key, position_key) = keys(prefix);
        Lease {
            link,
            lease_key,
            position_key,
            owner,
            ttl,
        }
    }

    /// Takes the lease if nobody holds it (or we already do); true when we hold it now.
    pub(crate) async fn acquire(&self) -> Result<bool, LeaseError> {
        if self.renew().await? {
            return Ok(true);
        }
        let (key, owner, ttl) = (
            &self.lease_key,
            &self.owner,
            crate::timing::redis_ms(self.ttl),
        );
        let taken: Option<String> = self
            .link
            .run(|mut conn| async move {
                redis::cmd("SET")
                    .arg(key)
                    .arg(owner)
                    .arg("NX")
                    .arg("PX")
                    .arg(ttl)
                    .query_async(&mut conn)
                    .await
            })
            .await?;
        Ok(taken.is_some())
    }

    /// Extends the lease if we hold it; false when someone else does (or nobody).
    pub(crate) async fn renew(&self) -> Result<bool, LeaseError> {
        let renewed: i64 = self
            .script(
                RENEW,
                &[&self.lease_key],
                crate::timing::redis_ms(self.ttl).to_string().into_bytes(),
            )
            .await?;
        Ok(renewed == 1)
    }

    /// Saves the resume point, only while we hold the lease; false when we do not.
    pub(crate) async fn save(&self, position: &Position) -> Result<bool, LeaseError> {
        let bytes = mongodb::bson::serialize_to_vec(position)
            .map_err(|e| LeaseError::Position(e.to_string()))?;
        let saved: i64 = self
            .script(SAVE, &[&self.lease_key, &self.position_key], bytes)
            .await?;
        Ok(saved == 1)
    }

    /// Gives the lease up (a clean stop), so a standby takes over at once.
    pub(crate) async fn release(&self) -> Result<(), LeaseError> {
        let _: i64 = self.script(RELEASE, &[&self.lease_key], Vec::new()).await?;
        Ok(())
    }

    /// The saved resume point, if any.
    pub(crate) async fn position(&self) -> Result<Option<Position>, LeaseError> {
        read_position(self.link, &self.position_key).await
    }

    async fn script(&self, body: &str, keys: &[&str], arg: Vec<u8>) -> Result<i64, LeaseError> {
        let script = redis::Script::new(body);
        let mut invocation = script.prepare_invoke();
        for key in keys {
            invocation.key(*key);
        }
        invocation.arg(&self.owner);
        if !arg.is_empty() {
            invocation.arg(arg);
        }
        Ok(self
            .link
            .run(|mut conn| async move { invocation.invoke_async(&mut conn).await })
            .await?)
    }
}

/// What Redis says about the follower of the index under `prefix`: who holds the lease
/// and the saved position (for `musicctl health` and `/readyz`).
pub(crate) async fn inspect(
    link: &RedisLink,
    prefix: &str,
) -> Result<(Option<Holder>, Option<Position>), LeaseError> {
    let (lease_key, position_key) = keys(prefix);
    let key = &lease_key;
    let (owner, remaining_ms): (Option<String>, i64) = link
        .run(|mut conn| async move {
            redis::pipe()
                .cmd("GET")
                .arg(key)
                .cmd("PTTL")
                .arg(key)
                .query_async(&mut conn)
                .await
        })
        .await?;
    let holder = owner.map(|owner| Holder {
        owner,
        remaining_ms,
    });
    Ok((holder, read_position(link, &position_key).await?))
}

async fn read_position(link: &RedisLink, key: &str) -> Result<Option<Position>, LeaseError> {
    let bytes: Option<Vec<u8>> = link
        .run(|mut conn| async move { redis::cmd("GET").arg(key).query_async(&mut conn).await })
        .await?;
    bytes
        .map(|bytes| {
            mongodb::bson::deserialize_from_slice(&bytes)
                .map_err(|e| LeaseError::Position(e.to_string()))
        })
        .transpose()
}

/// The lease and position keys of the index under `prefix`: one hash tag, one slot.
pub fn keys(prefix: &str) -> (String, String) {
    (
        format!("musicd_watch:{{{prefix}}}:lease"),
        format!("musicd_watch:{{{prefix}}}:position"),
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The part of a key Redis Cluster hashes: the first `{...}` with something inside.
    fn hash_tag(key: &str) -> &str {
        key.find('{')
            .and_then(|open| {
                let close = key[open + 1..].find('}')? + open + 1;
                (close > open + 1).then(|| &key[open + 1..close])
            })
            .unwrap_or(key)
    }

    #[test]
    fn both_keys_hash_to_one_slot_and_stay_outside_the_track_prefix() {
        let (lease, position) = keys("track_");
        assert_eq!(hash_tag(&lease), "track_");
        assert_eq!(hash_tag(&lease), hash_tag(&position));
        assert!(!lease.starts_with("track_") && !position.starts_with("track_"));
    }
}
