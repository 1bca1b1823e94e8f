//! Revoked sessions and keys: what `musicctl revoke` took back, held by every musicd in
//! memory so the check on a request never waits on Redis.
//!
//! One Redis sorted set, `{prefix}revoked`, holds every revocation: the member names it
//! (`sid:SESSION` or `kid:KEY`), the score is when it ends (Unix seconds). The key expires
//! with its longest member, and ended members are trimmed at each write. A revocation is
//! announced on the index's eviction channel (`revoke sid:S UNTIL`, `unrevoke sid:S`), which
//! every musicd already follows: it is applied on arrival, and the whole set is read again
//! whenever the subscription starts or hearing resumes after a silence, since pub/sub
//! drops what is published while nobody listens.
//!
//! A revocation lasts, unless told otherwise, `signing.revocation_ttl`: no session-bound
//! link may live longer (musicd refuses one that would), so it covers every link of the
//! session to its end. Sessions are kept as 64-bit keyed hashes with their end: 16 bytes
//! each, so a million fit in about 34 MiB.

use std::collections::HashMap;
use std::hash::{BuildHasher, RandomState};
use std::sync::RwLock;
use std::sync::atomic::{AtomicBool, Ordering};

use crate::redis_link::{LinkError, RedisLink};

/// What a revocation names.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Subject {
    /// Every link of a session (`sid`).
    Session(String),
    /// Every link signed by a key (`kid`): how a compromised key is retired at once.
    Key(String),
}

impl Subject {
    /// Its member in the Redis set and its name in messages: `sid:S` or `kid:K`.
    pub fn member(&self) -> String {
        match self {
            Subject::Session(sid) => format!("sid:{sid}"),
            Subject::Key(kid) => format!("kid:{kid}"),
        }
    }

    /// The subject a member names.
    pub fn parse(member: &str) -> Option<Subject> {
        match member.split_once(':')? {
            ("sid", sid) if super::valid_session(sid) => Some(Subject::Session(sid.to_string())),
            ("kid", kid) if !kid.is_empty() && !kid.contains(char::is_whitespace) => {
                Some(Subject::Key(kid.to_string()))
            }
            _ => None,
        }
    }
}

/// The revocations one musicd holds.
#[derive(Debug)]
pub(crate) struct Revoked {
    hasher: RandomState,
    /// Session hash -> end (Unix seconds).
    sessions: RwLock<HashMap<u64, u64>>,
    /// Key id -> end.
    keys: RwLock<HashMap<String, u64>>,
    /// Whether any key is revoked (most of the time none: the check then takes no lock).
    any_key: AtomicBool,
    /// Every revocation heard, for the follower to ban in the caches in front.
    changes: tokio::sync::broadcast::Sender<String>,
    /// While the set is read again: the messages heard meanwhile, applied once more over
    /// what was read, so a revocation announced during the read is never lost.
    heard_while_reloading: std::sync::Mutex<Option<Vec<String>>>,
    /// One reload at a time.
    reloading: tokio::sync::Mutex<()>,
}

impl Default for Revoked {
    fn default() -> Revoked {
        Revoked {
            hasher: RandomState::new(),
            sessions: RwLock::default(),
            keys: RwLock::default(),
            any_key: AtomicBool::new(false),
            changes: tokio::sync::broadcast::channel(4096).0,
            heard_while_reloading: std::sync::Mutex::default(),
            reloading: tokio::sync::Mutex::default(),
        }
    }
}

/// A change that stands for every revocation (after a reload).
pub(crate) const EVERY_AUTHORIZATION: &str = "*";

/// Revocations read per round trip when the whole set is loaded.
const PAGE: usize = 10_000;

impl Revoked {
    /// Whether `sid` is revoked at `now`.
    pub(crate) fn session_revoked(&self, sid: &str, now: u64) -> bool {
        let hash = self.hasher.hash_one(sid);
        let sessions = self.sessions.read().unwrap_or_else(|p| p.into_inner());
        sessions.get(&hash).is_some_and(|&until| now < until)
    }

    /// Whether key `kid` is revoked at `now`.
    pub(crate) fn key_revoked(&self, kid: &str, now: u64) -> bool {
        if !self.any_key.load(Ordering::Acquire) {
            return false;
        }
        let keys = self.keys.read().unwrap_or_else(|p| p.into_inner());
        keys.get(kid).is_some_and(|&until| now < until)
    }

    /// Sessions held (ended ones included until the next load).
    pub(crate) fn sessions(&self) -> usize {
        self.sessions.read().map_or(0, |s| s.len())
    }

    /// Applies a message of the eviction channel; false when it is not a revocation's.
    pub(crate) fn apply(&self, message: &str) -> bool {
        let mut words = message.split_ascii_whitespace();
        let (verb, member) = (words.next(), words.next());
        let until = match verb {
            Some("revoke") => match words.next().and_then(|u| u.parse::<u64>().ok()) {
                Some(until) => Some(until),
                None => return true,
            },
            Some("unrevoke") => None,
            _ => return false,
        };
        let Some(subject) = member.and_then(Subject::parse) else {
            return true;
        };
        // Noted for a reload under way before it is applied: applied first, it could land
        // in the map the reload is about to replace, and be lost.
        if let Some(heard) = self
            .heard_while_reloading
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .as_mut()
        {
            heard.push(message.to_string());
        }
        self.set(&subject, until);
        if until.is_some() {
            // Nobody listening (no follower here) is fine.
            let _ = self.changes.send(subject.member());
        }
        true
    }

    /// Applies a message again (after a reload), without announcing it twice.
    fn replay(&self, message: &str) {
        let mut words = message.split_ascii_whitespace();
        let until = match words.next() {
            Some("revoke") => words.clone().nth(1).and_then(|u| u.parse::<u64>().ok()),
            _ => None,
        };
        if let Some(subject) = words.next().and_then(Subject::parse) {
            self.set(&subject, until);
        }
    }

    fn set(&self, subject: &Subject, until: Option<u64>) {
        match subject {
            Subject::Session(sid) => {
                let hash = self.hasher.hash_one(sid.as_str());
                let mut sessions = self.sessions.write().unwrap_or_else(|p| p.into_inner());
                match until {
                    Some(until) => sessions.insert(hash, until),
                    None => sessions.remove(&hash),
                };
            }
            Subject::Key(kid) => {
                let mut keys = self.keys.write().unwrap_or_else(|p| p.into_inner());
                match until {
                    Some(until) => keys.insert(kid.clone(), until),
                    None => keys.remove(kid),
                };
                self.any_key.store(!keys.is_empty(), Ordering::Release);
            }
        }
    }

    /// Replaces what is held with the set as Redis has it now.
    pub(crate) async fn reload(
        &self,
        link: &RedisLink,
        prefix: &str,
        now: u64,
    ) -> Result<usize, LinkError> {
        let _one = self.reloading.lock().await;
        *self
            .heard_while_reloading
            .lock()
            .unwrap_or_else(|p| p.into_inner()) = Some(Vec::new());
        // Page by page into the new maps: a million sessions never exist as strings at
        // once, only as the 16 bytes each keeps.
        let mut sessions = HashMap::new();
        let mut keys = HashMap::new();
        let mut count = 0;
        let read = each_page(link, prefix, now, |page| {
            for (subject, until) in page {
                count += 1;
                match subject {
                    Subject::Session(sid) => {
                        sessions.insert(self.hasher.hash_one(sid.as_str()), until);
                    }
                    Subject::Key(kid) => {
                        keys.insert(kid, until);
                    }
                }
            }
        })
        .await;
        if let Err(err) = read {
            *self
                .heard_while_reloading
                .lock()
                .unwrap_or_else(|p| p.into_inner()) = None;
            return Err(err);
        }
        *self.sessions.write().unwrap_or_else(|p| p.into_inner()) = sessions;
        {
            let mut held = self.keys.write().unwrap_or_else(|p| p.into_inner());
            self.any_key.store(!keys.is_empty(), Ordering::Release);
            *held = keys;
        }
        let heard = self
            .heard_while_reloading
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .take();
        for message in heard.unwrap_or_default() {
            self.replay(&message);
        }
        // What the read brought that no message did (announced while this process did not
        // hear) was banned in the caches by nobody: the follower bans every authorization.
        let _ = self.changes.send(EVERY_AUTHORIZATION.to_string());
        Ok(count)
    }

    /// The revocations heard from now on, as members (`sid:S`, `kid:K`).
    pub(crate) fn changes(&self) -> tokio::sync::broadcast::Receiver<String> {
        self.changes.subscribe()
    }
}

/// The Redis set of an index's revocations.
pub fn key(prefix: &str) -> String {
    format!("{prefix}revoked")
}

/// Records a revocation of `subject` until `until` (Unix seconds) and announces it to
/// every musicd; how many subscribers heard it.
pub async fn revoke(
    link: &RedisLink,
    prefix: &str,
    subject: &Subject,
    until: u64,
    now: u64,
) -> Result<u64, LinkError> {
    let key = key(prefix);
    let member = subject.member();
    let channel = crate::redis_link::channel(prefix);
    let message = format!("revoke {member} {until}");
    link.run(|mut conn| async move {
        let (_, _, _, _, heard): ((), (), (), (), u64) = redis::pipe()
            .atomic()
            .cmd("ZADD")
            .arg(&key)
            .arg(until)
            .arg(&member)
            .cmd("ZREMRANGEBYSCORE")
            .arg(&key)
            .arg("-inf")
            .arg(now)
            // The set lives as long as its longest revocation: set on a new key (NX),
            // lengthened on an old one (GT), never shortened.
            .cmd("EXPIREAT")
            .arg(&key)
            .arg(until)
            .arg("NX")
            .cmd("EXPIREAT")
            .arg(&key)
            .arg(until)
            .arg("GT")
            .cmd("PUBLISH")
            .arg(&channel)
            .arg(&message)
            .query_async(&mut conn)
            .await?;
        Ok(heard)
    })
    .await
}

/// Ends a revocation early; whether there was one.
pub async fn unrevoke(
    link: &RedisLink,
    prefix: &str,
    subject: &Subject,
) -> Result<bool, LinkError> {
    let key = key(prefix);
    let member = subject.member();
    let channel = crate::redis_link::channel(prefix);
    let message = format!("unrevoke {member}");
    link.run(|mut conn| async move {
        let (removed, _): (u64, u64) = redis::pipe()
            .atomic()
            .cmd("ZREM")
            .arg(&key)
            .arg(&member)
            .cmd("PUBLISH")
            .arg(&channel)
            .arg(&message)
            .query_async(&mut conn)
            .await?;
        Ok(removed > 0)
    })
    .await
}

/// Every revocation still in force at `now`, with its end.
pub async fn list(
    link: &RedisLink,
    prefix: &str,
    now: u64,
) -> Result<Vec<(Subject, u64)>, LinkError> {
    let mut entries = Vec::new();
    each_page(link, prefix, now, |page| entries.extend(page)).await?;
    entries.sort_by_key(|(subject, _)| subject.member());
    entries.dedup_by(|a, b| a.0 == b.0);
    Ok(entries)
}

/// Reads the revocations in force at `now` a page at a time (`ZSCAN`: each page costs the
/// same however far in), handing each to `each`. A member may come twice.
async fn each_page(
    link: &RedisLink,
    prefix: &str,
    now: u64,
    mut each: impl FnMut(Vec<(Subject, u64)>),
) -> Result<(), LinkError> {
    let key = key(prefix);
    let mut cursor = 0u64;
    loop {
        let key = key.clone();
        let (next, page): (u64, Vec<(String, f64)>) = link
            .run(|mut conn| async move {
                redis::cmd("ZSCAN")
                    .arg(&key)
                    .arg(cursor)
                    .arg("COUNT")
                    .arg(PAGE)
                    .query_async(&mut conn)
                    .await
            })
            .await?;
        each(
            page.into_iter()
                .filter(|(_, until)| *until > now as f64)
                .filter_map(|(member, until)| Some((Subject::parse(&member)?, until as u64)))
                .collect(),
        );
        if next == 0 {
            return Ok(());
        }
        cursor = next;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn messages_revoke_and_restore_and_others_are_left_alone() {
        let revoked = Revoked::default();
        let mut heard = revoked.changes();
        assert!(!revoked.apply("6b0dc37d3ba0d873deac9381"));
        assert!(!revoked.apply("*"));
        assert!(revoked.apply("revoke sid:abc 100"));
        assert!(revoked.session_revoked("abc", 99));
        assert!(!revoked.session_revoked("abc", 100));
        assert!(!revoked.session_revoked("abd", 99));
        assert_eq!(heard.try_recv().ok().as_deref(), Some("sid:abc"));
        assert!(revoked.apply("revoke kid:k1 100"));
        assert!(revoked.key_revoked("k1", 50));
        assert!(revoked.apply("unrevoke kid:k1"));
        assert!(!revoked.key_revoked("k1", 50));
        // Malformed revocations are revocation messages, and change nothing.
        assert!(revoked.apply("revoke sid:a%20b 100"));
        assert!(revoked.apply("revoke sid:abc"));
        assert_eq!(revoked.sessions(), 1);
    }
}
