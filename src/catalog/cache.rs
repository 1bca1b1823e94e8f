//! The Redis side of the catalogue: key scheme, TTLs with jitter, negative entries.
//!
//! A track's key is `{prefix}{objectid-hex}` and its value the document's path as a plain
//! string, so operators can read it with `redis-cli GET` and purge it by pattern. An id that
//! MongoDB does not know is stored as an empty value with a short TTL (a negative entry):
//! a flood of bad ids then costs Redis lookups, not MongoDB queries.
//!
//! ## Fills cannot undo the follower
//!
//! A read-through write-back ("fill") states what MongoDB said *when it was asked*; by the
//! time it reaches Redis the change-stream follower may have written something newer. Fills
//! are therefore fenced with leases, as memcache's are in *Scaling Memcache at Facebook*
//! (NSDI 2013, §3.2.1): after a miss and before asking MongoDB, the reader takes a lease (a
//! random token in a companion key, [`TrackCache::begin_fill`]); every write of the
//! follower ([`TrackCache::apply`]) deletes that companion key first; the fill is written
//! only if its token is still there ([`TrackCache::complete_fill`], one Lua script). A change
//! the follower applied before the lease was taken is already visible to the read that
//! follows it (the follower only sees majority-committed changes, and lookups read the
//! primary); a change applied after it revokes the lease. So a fill never replaces a path
//! the follower wrote later, and never re-creates a negative entry after an insert.
//! `musicctl reindex` writes through the same fence, a batch at a time
//! ([`TrackCache::begin_fills`], then the batch's paths are read, then
//! [`TrackCache::complete_fills`]): a rebuild that runs while the catalogue changes leaves
//! the follower's writes standing.
//!
//! ## Nor can a follower that was cut off
//!
//! A follower cut off from Redis in the middle of a write has sent it: TCP keeps the
//! bytes and retransmits them, and when the network heals, Redis runs the command, after
//! the successor that took the lease meanwhile has written newer paths (seen in
//! `tests/integration/fleet.rs`: an entry went back to an older path half a second after
//! the heal). So the follower's writes are versioned: each carries its change's cluster
//! time (exact for a change event, unlike a plain read's), and a version key beside the
//! entry ([`version_key`]) keeps the newest one written. The script refuses a write older
//! than it. The version key outlives the longest a write can wait in TCP ([`VERSION_TTL`],
//! longer than Linux's `tcp_retries2` ≈ 924 s), so memory holds only recent changes.
//! A successor that rebuilds rather than replays fences its writes the same way, with the
//! cluster time read before its first read ([`TrackCache::complete_fills`] with a version).
//!
//! Operators' purges and reindexes revoke the fill leases of what they cover
//! ([`revoke_leases`]): a lookup that read MongoDB before the change they follow cannot
//! write it back after them.
//!
//! Why leases and not versioned writes for fills (comparing MongoDB cluster times in a script): the
//! version of a plain read is not exact (a `local` read reports the node's last applied
//! time, which can be later than what it read), the entry's value would have to carry its
//! version (operators read it with `redis-cli GET`), and the lease costs one `SET` per
//! miss and nothing on a hit. Leases rely on Redis's own ordering, so they hold the same on
//! a single server and on a Cluster (the companion key shares the entry's hash slot). A
//! lookup read from a lagging secondary (`readPreference` in the URI) can still fill what
//! that secondary had: the fence covers every change applied after the lease.

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
pub(crate) enum Cached {
    /// The id maps to this path.
    Path(String),
    /// The id is known not to exist (negative entry).
    Absent,
    /// Nothing cached for this id.
    Unknown,
}

impl Cached {
    fn from_value(value: Option<Vec<u8>>) -> Cached {
        match value {
            None => Cached::Unknown,
            Some(bytes) if bytes.is_empty() => Cached::Absent,
            // A value that is not UTF-8 cannot be a path MongoDB gave us: treat it as a miss
            // so the next lookup rewrites it.
            Some(bytes) => match String::from_utf8(bytes) {
                Ok(path) => Cached::Path(path),
                Err(_) => Cached::Unknown,
            },
        }
    }
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
    pub(crate) fn new(link: Arc<RedisLink>, config: &RedisConfig) -> TrackCache {
        TrackCache {
            link,
            prefix: config.prefix.clone(),
            ttl: config.ttl,
            negative_ttl: config.negative_ttl,
            jitter: config.ttl_jitter,
        }
    }

    /// The Redis key of a track.
    pub(crate) fn key(&self, id: &ObjectId) -> String {
        // Not `id.to_hex()`: bson's collects the digits a `char` at a time, about 740
        // instructions, paid for each id the refresh-ahead reads (callgrind).
        const HEX: &[u8; 16] = b"0123456789abcdef";
        let mut key = String::with_capacity(self.prefix.len() + 24);
        key.push_str(&self.prefix);
        for byte in id.bytes() {
            key.push(char::from(HEX[usize::from(byte >> 4)]));
            key.push(char::from(HEX[usize::from(byte & 15)]));
        }
        key
    }

    /// The link, for health checks.
    pub(crate) fn link(&self) -> &RedisLink {
        &self.link
    }

    /// Looks an id up.
    pub(crate) async fn get(&self, id: &ObjectId) -> Result<Cached, CacheError> {
        let key = self.key(id);
        let value: Option<Vec<u8>> = self
            .link
            .run(|mut conn| async move { redis::cmd("GET").arg(&key).query_async(&mut conn).await })
            .await?;
        Ok(Cached::from_value(value))
    }

    /// Looks many ids up in one round trip; their answers in order.
    pub(crate) async fn get_many(&self, ids: &[ObjectId]) -> Result<Vec<Cached>, CacheError> {
        if ids.is_empty() {
            return Ok(Vec::new());
        }
        let keys: Vec<String> = ids.iter().map(|id| self.key(id)).collect();
        let values: Vec<Option<Vec<u8>>> = self
            .link
            .run(move |conn| async move {
                match conn {
                    // One `MGET`, not a pipeline of `GET`s: one command to build and one
                    // reply to read for the whole batch. The pipeline cost about 8,000
                    // instructions an id with the client's parsing (callgrind), and the
                    // refresh-ahead reads every hot id once a TTL.
                    RedisConn::Single(mut conn) => {
                        redis::cmd("MGET").arg(&keys).query_async(&mut conn).await
                    }
                    // A batch's keys fall in many hash slots, which one `MGET` cannot span.
                    RedisConn::Cluster(conn) => {
                        let gets: Vec<redis::Cmd> = keys
                            .iter()
                            .map(|key| {
                                let mut get = redis::cmd("GET");
                                get.arg(key);
                                get
                            })
                            .collect();
                        each_on_cluster(&conn, &gets).await
                    }
                }
            })
            .await?;
        Ok(values.into_iter().map(Cached::from_value).collect())
    }

    /// The key prefix.
    pub(crate) fn prefix(&self) -> &str {
        &self.prefix
    }

    /// Takes fill leases for many ids at once (`reindex`), before their paths are read:
    /// the batch form of [`TrackCache::begin_fill`].
    pub async fn begin_fills(&self, ids: &[ObjectId]) -> Result<Vec<Fill>, CacheError> {
        let fills: Vec<Fill> = ids
            .iter()
            .map(|id| Fill {
                key: self.key(id),
                token: format!("{:016x}", rand::random::<u64>()),
            })
            .collect();
        let lease_ms = crate::timing::redis_ms(FILL_LEASE);
        let commands = fills
            .iter()
            .map(|fill| {
                let mut cmd = redis::cmd("SET");
                cmd.arg(fill_key(&fill.key))
                    .arg(&fill.token)
                    .arg("PX")
                    .arg(lease_ms);
                cmd
            })
            .collect();
        self.run_batch::<redis::Value>(commands).await?;
        Ok(fills)
    }

    /// Writes many paths under leases taken by [`TrackCache::begin_fills`]: each is written
    /// only if the follower did not change its entry since (the rule of
    /// [`TrackCache::complete_fill`]). With a `version` (a rebuild by the follower: the
    /// cluster time read before its documents were), each write is also fenced as a
    /// follower's is: refused under a newer version, and it leaves its version behind, so a
    /// write of a predecessor that was cut off, older than the rebuild, cannot land after
    /// it. How many were written.
    pub async fn complete_fills(
        &self,
        fills: Vec<(Fill, String)>,
        version: Option<&str>,
    ) -> Result<u64, CacheError> {
        let ttl_ms = crate::timing::redis_ms(VERSION_TTL);
        let commands = fills
            .iter()
            .map(|(fill, path)| {
                let mut cmd = redis::cmd("EVAL");
                match version {
                    None => {
                        cmd.arg(FILL_SOURCE).arg(2);
                    }
                    Some(_) => {
                        cmd.arg(VERSIONED_FILL_SOURCE).arg(3);
                    }
                }
                cmd.arg(&fill.key).arg(fill_key(&fill.key));
                if version.is_some() {
                    cmd.arg(version_key(&fill.key));
                }
                cmd.arg(&fill.token).arg(path).arg(self.jittered_ttl_ms());
                if let Some(version) = version {
                    cmd.arg(version).arg(ttl_ms);
                }
                cmd
            })
            .collect();
        let written: Vec<u8> = self.run_batch(commands).await?;
        Ok(written.iter().map(|w| u64::from(*w == 1)).sum())
    }

    /// Gives back leases that will not be used (a missing file, a deleted document), so they
    /// do not linger for [`FILL_LEASE`]; a lease another reader took since is left alone.
    pub async fn release_fills(&self, fills: Vec<Fill>) -> Result<(), CacheError> {
        let commands = fills
            .iter()
            .map(|fill| {
                let mut cmd = redis::cmd("EVAL");
                cmd.arg(RELEASE_SOURCE)
                    .arg(1)
                    .arg(fill_key(&fill.key))
                    .arg(&fill.token);
                cmd
            })
            .collect();
        self.run_batch::<redis::Value>(commands).await?;
        Ok(())
    }

    /// Runs many single-key commands: one pipelined round trip on a single server; on a
    /// cluster, where a pipeline must stay within one slot, concurrent commands that the
    /// cluster connection multiplexes. Their replies, in order.
    async fn run_batch<T: redis::FromRedisValue + Send + 'static>(
        &self,
        commands: Vec<redis::Cmd>,
    ) -> Result<Vec<T>, CacheError> {
        if commands.is_empty() {
            return Ok(Vec::new());
        }
        let replies = self
            .link
            .run(|conn| async move {
                match conn {
                    RedisConn::Single(mut conn) => {
                        let mut pipe = redis::pipe();
                        for cmd in &commands {
                            pipe.add_command(cmd.clone());
                        }
                        pipe.query_async::<Vec<T>>(&mut conn).await
                    }
                    RedisConn::Cluster(conn) => each_on_cluster(&conn, &commands).await,
                }
            })
            .await?;
        Ok(replies)
    }

    /// Removes one id's entry and revokes any fill lease on it (a lookup that read
    /// MongoDB before an operator's change must not write it back after the purge); true
    /// if there was an entry.
    pub(crate) async fn forget(&self, id: &ObjectId) -> Result<bool, CacheError> {
        let key = self.key(id);
        let lease = fill_key(&key);
        let removed: u64 = self
            .link
            .run(|mut conn| async move {
                FORGET_SCRIPT
                    .key(&key)
                    .key(&lease)
                    .invoke_async(&mut conn)
                    .await
            })
            .await?;
        Ok(removed > 0)
    }

    /// Takes a fill lease for `id` after a miss, before MongoDB is asked. `None` when Redis
    /// failed: the answer is then not written back.
    pub async fn begin_fill(&self, id: &ObjectId) -> Result<Fill, CacheError> {
        let key = self.key(id);
        let lease = fill_key(&key);
        let token = format!("{:016x}", rand::random::<u64>());
        let value = token.clone();
        self.link
            .run(|mut conn| async move {
                redis::cmd("SET")
                    .arg(&lease)
                    .arg(&value)
                    .arg("PX")
                    .arg(crate::timing::redis_ms(FILL_LEASE))
                    .query_async::<()>(&mut conn)
                    .await
            })
            .await?;
        Ok(Fill { key, token })
    }

    /// Writes what MongoDB said under a lease taken by [`TrackCache::begin_fill`]: `Some`
    /// path, or `None` for "no such document" (a negative entry). Nothing is written when
    /// the follower changed the entry since the lease was taken (false).
    pub async fn complete_fill(&self, fill: Fill, path: Option<&str>) -> Result<bool, CacheError> {
        let (value, ttl) = match path {
            Some(path) => (path.as_bytes().to_vec(), self.jittered_ttl_ms()),
            None => (Vec::new(), crate::timing::redis_ms(self.negative_ttl)),
        };
        let lease = fill_key(&fill.key);
        let written: u8 = self
            .link
            .run(|mut conn| async move {
                FILL_SCRIPT
                    .key(&fill.key)
                    .key(&lease)
                    .arg(&fill.token)
                    .arg(value)
                    .arg(ttl)
                    .invoke_async(&mut conn)
                    .await
            })
            .await?;
        Ok(written == 1)
    }

    /// Applies one of the follower's writes, made by the change of cluster time `version`
    /// (16 hex digits, [`change_version`]): refused when a newer change was written
    /// already; else revokes any fill lease on the entry, writes it, and publishes its
    /// eviction to every musicd ([`super::evictions`]). Every write of the follower goes
    /// through here, so none can be undone by a fill that read MongoDB before it, nor by
    /// an older write of a follower that was cut off. Whether it was written.
    pub async fn apply(
        &self,
        id: &ObjectId,
        entry: FollowerWrite<'_>,
        version: &str,
    ) -> Result<bool, CacheError> {
        let key = self.key(id);
        let lease = fill_key(&key);
        let versions = version_key(&key);
        let version_ttl = crate::timing::redis_ms(VERSION_TTL);
        let (value, ttl): (Option<Vec<u8>>, u64) = match entry {
            FollowerWrite::Path(path) => (Some(path.as_bytes().to_vec()), self.jittered_ttl_ms()),
            FollowerWrite::Absent => (Some(Vec::new()), crate::timing::redis_ms(self.negative_ttl)),
            FollowerWrite::Forget => (None, 0),
        };
        let (channel, hex) = (super::evictions::channel(&self.prefix), id.to_hex());
        let written: i64 = self
            .link
            .run(|mut conn| async move {
                let mut invocation = APPLY_SCRIPT.key(&key);
                invocation.key(&lease).key(&versions);
                match value {
                    Some(value) => invocation.arg("set").arg(value).arg(ttl),
                    None => invocation.arg("forget").arg("").arg(0),
                };
                invocation
                    .arg(&channel)
                    .arg(&hex)
                    .arg(version)
                    .arg(version_ttl);
                invocation.invoke_async(&mut conn).await
            })
            .await?;
        Ok(written == 1)
    }

    /// TTL in milliseconds with up to `jitter` of it added at random.
    pub(crate) fn jittered_ttl_ms(&self) -> u64 {
        jittered_ms(self.ttl, self.jitter)
    }
}

/// How long a fill lease lives: longer than any lookup takes (its MongoDB query is
/// bounded by the configured timeout, a few seconds); a fill that comes later writes nothing.
pub(crate) const FILL_LEASE: Duration = Duration::from_secs(30);

/// A fill lease: the entry's key and the token that must still be there to write it.
#[derive(Debug)]
pub struct Fill {
    key: String,
    token: String,
}

/// What the follower writes for an id.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FollowerWrite<'a> {
    /// The document's path.
    Path(&'a str),
    /// The document is gone: a negative entry.
    Absent,
    /// No entry: the next request reads the document through.
    Forget,
}

/// KEYS: entry, lease. ARGV: token, value, ttl ms. Writes only under an unrevoked lease.
const FILL_SOURCE: &str = r"if redis.call('GET', KEYS[2]) ~= ARGV[1] then return 0 end
redis.call('DEL', KEYS[2])
redis.call('SET', KEYS[1], ARGV[2], 'PX', ARGV[3])
return 1";

/// KEYS: entry, lease, version. ARGV: token, value, ttl ms, version, version ttl ms.
/// [`FILL_SOURCE`] that is also refused under a newer follower version, and keeps its own.
const VERSIONED_FILL_SOURCE: &str = r"if redis.call('GET', KEYS[2]) ~= ARGV[1] then return 0 end
redis.call('DEL', KEYS[2])
local newest = redis.call('GET', KEYS[3])
if newest and newest > ARGV[4] then return 0 end
redis.call('SET', KEYS[3], ARGV[4], 'PX', ARGV[5])
redis.call('SET', KEYS[1], ARGV[2], 'PX', ARGV[3])
return 1";

/// KEYS: entry, lease. Removes the entry and revokes its fill lease.
static FORGET_SCRIPT: std::sync::LazyLock<redis::Script> = std::sync::LazyLock::new(|| {
    redis::Script::new(
        r"redis.call('DEL', KEYS[2])
return redis.call('UNLINK', KEYS[1])",
    )
});

/// KEYS: entry, lease, version. ARGV: version, version ttl ms. A rebuild's removal of a
/// stale entry: revokes its lease, and with a version (`''` for none) is refused under a
/// newer one and leaves its own, as a follower's write does.
pub(crate) const PRUNE_SOURCE: &str = r"if ARGV[1] ~= '' then
  local newest = redis.call('GET', KEYS[3])
  if newest and newest > ARGV[1] then return 0 end
  redis.call('SET', KEYS[3], ARGV[1], 'PX', ARGV[2])
end
redis.call('DEL', KEYS[2])
return redis.call('UNLINK', KEYS[1])";

/// KEYS: lease. ARGV: token. Deletes the lease only if it is still this token.
const RELEASE_SOURCE: &str = r"if redis.call('GET', KEYS[1]) == ARGV[1] then
  return redis.call('DEL', KEYS[1])
end
return 0";

/// [`FILL_SOURCE`], run by its digest (`EVALSHA`, loaded on first use).
static FILL_SCRIPT: std::sync::LazyLock<redis::Script> =
    std::sync::LazyLock::new(|| redis::Script::new(FILL_SOURCE));

/// How long the newest version written for an entry is kept: longer than a command can
/// wait in TCP retransmissions before Redis runs it (Linux gives up after `tcp_retries2`,
/// about 924 s by default).
pub(crate) const VERSION_TTL: Duration = Duration::from_secs(30 * 60);

/// KEYS: entry, lease, version. ARGV: 'set' or 'forget', value, ttl ms, eviction channel,
/// id, version (16 hex digits, ordered as text), version ttl ms. Refuses a write older than
/// the newest written (returns 0); else revokes any fill, writes, keeps the version, then
/// tells every musicd.
static APPLY_SCRIPT: std::sync::LazyLock<redis::Script> = std::sync::LazyLock::new(|| {
    redis::Script::new(
        r"local newest = redis.call('GET', KEYS[3])
if newest and newest > ARGV[6] then return 0 end
redis.call('DEL', KEYS[2])
redis.call('SET', KEYS[3], ARGV[6], 'PX', ARGV[7])
if ARGV[1] == 'set' then
  redis.call('SET', KEYS[1], ARGV[2], 'PX', ARGV[3])
else
  redis.call('UNLINK', KEYS[1])
end
redis.call('PUBLISH', ARGV[4], ARGV[5])
return 1",
    )
});

/// The fill lease's key for an entry's key, in the entry's Cluster hash slot: when the key
/// already names a hash tag (`{...}`), the same tag leads; otherwise the whole key becomes
/// the tag. It never starts with the key prefix, so purges and prunes by prefix skip it.
/// (A prefix with a `}` and no tag could not share a slot: the configuration refuses it.)
pub(crate) fn fill_key(key: &str) -> String {
    companion_key(key, "fill")
}

/// The key holding the newest follower version written for an entry: in its slot, outside
/// its prefix, as [`fill_key`].
pub(crate) fn version_key(key: &str) -> String {
    companion_key(key, "version")
}

/// The globs that match the fill leases of the entries `glob` matches: one per form of
/// [`fill_key`] (it may match a few more leases than those, which only costs their
/// lookups a write-back).
pub(crate) fn lease_globs(glob: &[u8]) -> [Vec<u8>; 2] {
    let mut untagged = b"{".to_vec();
    untagged.extend_from_slice(glob);
    untagged.extend_from_slice(b"}:fill");
    let mut tagged = b"fill:".to_vec();
    tagged.extend_from_slice(glob);
    [untagged, tagged]
}

/// Revokes every fill lease of the entries `glob` matches, on every master: a lookup
/// that read MongoDB before an operator's change (the one a purge or a reindex follows)
/// then cannot write its answer back after it. A lookup that read after it fills the
/// entry on its next miss. How many leases were revoked.
pub(crate) async fn revoke_leases(
    target: &crate::redis_link::RedisTarget,
    timeout: Duration,
    glob: &[u8],
) -> Result<u64, CacheError> {
    let mut revoked = 0;
    for master in crate::redis_link::masters(target, timeout).await? {
        let mut conn = crate::redis_link::connect_node(&master, timeout).await?;
        for pattern in lease_globs(glob) {
            let mut cursor: u64 = 0;
            loop {
                let (next, keys): (u64, Vec<Vec<u8>>) = redis::cmd("SCAN")
                    .arg(cursor)
                    .arg("MATCH")
                    .arg(pattern.as_slice())
                    .arg("COUNT")
                    .arg(1000)
                    .query_async(&mut conn)
                    .await
                    .map_err(LinkError::from)?;
                if !keys.is_empty() {
                    // One key per command: on a Cluster, the keys of one master lie in many slots.
                    let mut pipe = redis::pipe();
                    for key in &keys {
                        pipe.cmd("DEL").arg(key.as_slice());
                    }
                    let removed: Vec<u64> =
                        pipe.query_async(&mut conn).await.map_err(LinkError::from)?;
                    revoked += removed.iter().sum::<u64>();
                }
                cursor = next;
                if cursor == 0 {
                    break;
                }
            }
        }
    }
    Ok(revoked)
}

fn companion_key(key: &str, role: &str) -> String {
    let tagged = key
        .find('{')
        .and_then(|open| key[open + 1..].find('}').map(|close| close > 0))
        .unwrap_or(false);
    if tagged {
        format!("{role}:{key}")
    } else {
        format!("{{{key}}}:{role}")
    }
}

/// A change's version for [`TrackCache::apply`]: its cluster time as 16 hex digits, so
/// text order is time order (a Lua number could not hold it exactly). A change without one
/// (never seen on a replica set) is the oldest there is.
pub fn change_version(cluster_time: Option<mongodb::bson::Timestamp>) -> String {
    cluster_time.map_or_else(
        || "0".repeat(16),
        |t| format!("{:08x}{:08x}", t.time, t.increment),
    )
}

/// `base` plus a random fraction of up to `jitter` of it, in milliseconds.
pub(crate) fn jittered_ms(base: Duration, jitter: f64) -> u64 {
    let base = crate::timing::redis_ms(base);
    if jitter <= 0.0 {
        return base;
    }
    let extra = (base as f64 * jitter) as u64;
    base + rand::rng().random_range(0..=extra)
}

/// `commands` on a Cluster, each sent to its key's node, all at once; the replies in order.
/// A pipeline or a multi-key command cannot span the hash slots of a batch's keys.
async fn each_on_cluster<T: redis::FromRedisValue + Send + 'static>(
    conn: &redis::cluster_async::ClusterConnection,
    commands: &[redis::Cmd],
) -> redis::RedisResult<Vec<T>> {
    let replies = commands.iter().map(|cmd| {
        let mut conn = conn.clone();
        async move { cmd.query_async::<T>(&mut conn).await }
    });
    futures_util::future::try_join_all(replies).await
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

    /// The part of a key Redis Cluster hashes (its hash tag, else the whole key).
    fn hashed(key: &str) -> &str {
        key.find('{')
            .and_then(|open| {
                let rest = &key[open + 1..];
                rest.find('}')
                    .filter(|&close| close > 0)
                    .map(|close| &rest[..close])
            })
            .unwrap_or(key)
    }

    #[test]
    fn a_fill_lease_shares_its_entrys_hash_slot_and_escapes_the_prefix() {
        for key in [
            "track_6b0dc37d3ba0d873deac9381",
            "t{x}_6b0d",
            "{app}track_6b0d",
        ] {
            let lease = fill_key(key);
            assert_eq!(hashed(&lease), hashed(key), "{key} -> {lease}");
            assert!(!lease.starts_with(&key[..2]), "{lease} matches the prefix");
        }
    }

    #[test]
    fn no_jitter_means_the_exact_ttl() {
        assert_eq!(jittered_ms(Duration::from_secs(5), 0.0), 5000);
    }
}
