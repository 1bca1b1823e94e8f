//! The Redis side of the catalogue: key scheme, TTLs with jitter, negative entries.
//!
//! A track's key is `{prefix}{objectid-hex}` and its value the document's path as a plain
//! string, so operators can read it with `redis-cli GET` and purge it by pattern. An id that
//! MongoDB does not know is stored as an empty value with a short TTL (a negative entry):
//! a flood of bad ids then costs Redis lookups, not MongoDB queries.

use std::sync::Arc;
use std::time::Duration;

use mongodb::bson::oid::ObjectId;
use rand::RngExt;

use crate::config::RedisConfig;
use crate::redis_link::{LinkError, RedisConn, RedisLink};

/// Why the cache could not answer.
#[derive(Debug, thiserror::Error)]
pub enum CacheError {
    /// The link to Redis failed.
    #[error(transparent)]
    Link(#[from] LinkError),
}

/// What the cache knows about one id.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Cached {
    /// The id maps to this path.
    Path(String),
    /// The id is known not to exist (negative entry).
    Absent,
    /// Nothing cached for this id.
    Unknown,
}

/// The id -> path cache in Redis; cheap to clone (the link is shared).
#[derive(Clone)]
pub struct TrackCache {
    link: Arc<RedisLink>,
    prefix: String,
    ttl: Duration,
    negative_ttl: Duration,
    jitter: f64,
}

impl TrackCache {
    /// A cache over `link` with the configured key prefix and TTLs.
    pub fn new(link: Arc<RedisLink>, config: &RedisConfig) -> TrackCache {
        TrackCache {
            link,
            prefix: config.prefix.clone(),
            ttl: config.ttl,
            negative_ttl: config.negative_ttl,
            jitter: config.ttl_jitter,
        }
    }

    /// The Redis key of a track.
    pub fn key(&self, id: &ObjectId) -> String {
        format!("{}{}", self.prefix, id.to_hex())
    }

    /// The link, for health checks.
    pub fn link(&self) -> &RedisLink {
        &self.link
    }

    /// Looks an id up.
    pub async fn get(&self, id: &ObjectId) -> Result<Cached, CacheError> {
        let key = self.key(id);
        let value: Option<Vec<u8>> = self
            .link
            .run(|mut conn| async move { redis::cmd("GET").arg(&key).query_async(&mut conn).await })
            .await?;
        Ok(match value {
            None => Cached::Unknown,
            Some(bytes) if bytes.is_empty() => Cached::Absent,
            // A value that is not UTF-8 cannot be a path MongoDB gave us: treat it as a miss
            // so the next lookup rewrites it.
            Some(bytes) => match String::from_utf8(bytes) {
                Ok(path) => Cached::Path(path),
                Err(_) => Cached::Unknown,
            },
        })
    }

    /// Caches a path with the positive TTL plus jitter.
    pub async fn put_path(&self, id: &ObjectId, path: &str) -> Result<(), CacheError> {
        let ttl = self.jittered_ttl_ms();
        self.set(id, path.as_bytes().to_vec(), ttl).await
    }

    /// The key prefix.
    pub fn prefix(&self) -> &str {
        &self.prefix
    }

    /// Caches many paths at once (reindex): one pipelined round trip on a single server;
    /// on a cluster, where a pipeline must stay within one slot, concurrent commands that
    /// the cluster connection multiplexes.
    pub async fn put_many(&self, entries: &[(ObjectId, String)]) -> Result<(), CacheError> {
        let commands: Vec<(String, String, u64)> = entries
            .iter()
            .map(|(id, path)| (self.key(id), path.clone(), self.jittered_ttl_ms()))
            .collect();
        self.link
            .run(|conn| async move {
                match conn {
                    RedisConn::Single(mut conn) => {
                        let mut pipe = redis::pipe();
                        for (key, path, ttl) in &commands {
                            pipe.cmd("SET")
                                .arg(key)
                                .arg(path)
                                .arg("PX")
                                .arg(*ttl)
                                .ignore();
                        }
                        pipe.query_async::<()>(&mut conn).await
                    }
                    RedisConn::Cluster(conn) => {
                        let writes = commands.iter().map(|(key, path, ttl)| {
                            let mut conn = conn.clone();
                            async move {
                                redis::cmd("SET")
                                    .arg(key)
                                    .arg(path)
                                    .arg("PX")
                                    .arg(*ttl)
                                    .query_async::<()>(&mut conn)
                                    .await
                            }
                        });
                        futures_util::future::try_join_all(writes).await.map(|_| ())
                    }
                }
            })
            .await?;
        Ok(())
    }

    /// Removes one id's entry; true if there was one.
    pub async fn forget(&self, id: &ObjectId) -> Result<bool, CacheError> {
        let key = self.key(id);
        let removed: u64 =
            self.link
                .run(|mut conn| async move {
                    redis::cmd("UNLINK").arg(&key).query_async(&mut conn).await
                })
                .await?;
        Ok(removed > 0)
    }

    /// Caches "this id does not exist" with the negative TTL.
    pub async fn put_absent(&self, id: &ObjectId) -> Result<(), CacheError> {
        let ttl = millis(self.negative_ttl);
        self.set(id, Vec::new(), ttl).await
    }

    async fn set(&self, id: &ObjectId, value: Vec<u8>, ttl_ms: u64) -> Result<(), CacheError> {
        let key = self.key(id);
        self.link
            .run(|mut conn| async move {
                redis::cmd("SET")
                    .arg(&key)
                    .arg(value)
                    .arg("PX")
                    .arg(ttl_ms)
                    .query_async::<()>(&mut conn)
                    .await
            })
            .await?;
        Ok(())
    }

    /// TTL in milliseconds with up to `jitter` of it added at random.
    pub fn jittered_ttl_ms(&self) -> u64 {
        jittered_ms(self.ttl, self.jitter)
    }
}

/// `base` plus a random fraction of up to `jitter` of it, in milliseconds.
pub fn jittered_ms(base: Duration, jitter: f64) -> u64 {
    let base = millis(base);
    if jitter <= 0.0 {
        return base;
    }
    let extra = (base as f64 * jitter) as u64;
    base + rand::rng().random_range(0..=extra)
}

fn millis(d: Duration) -> u64 {
    u64::try_from(d.as_millis()).unwrap_or(u64::MAX).max(1)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn jitter_stays_within_the_configured_fraction() {
        let base = Duration::from_secs(100);
        let samples: Vec<u64> = (0..2000).map(|_| jittered_ms(base, 0.1)).collect();
        assert!(samples.iter().all(|&ms| (100_000..=110_000).contains(&ms)));
        // Spread, not a constant: entries written together must not expire together.
        let distinct: std::collections::HashSet<_> = samples.iter().collect();
        assert!(
            distinct.len() > 100,
            "only {} distinct TTLs",
            distinct.len()
        );
    }

    #[test]
    fn no_jitter_means_the_exact_ttl() {
        assert_eq!(jittered_ms(Duration::from_secs(5), 0.0), 5000);
    }
}
