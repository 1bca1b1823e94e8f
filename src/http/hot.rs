//! Each event loop's own copies of its hot tracks: the id's path, the file's header lines
//! and its bytes, so that answering one touches no line another core writes.
//!
//! Through the shared caches a cached 4 KiB answer made about a dozen locked operations on
//! lines both loops write: the id cache's shard lock and the path's count, the file
//! cache's lock and the entry's count, its use clock, the counts of the body and of the
//! header lines. With both loops serving the same file, each of those moves a line from
//! the other core (about 50 ns here, against 7 for a locked operation on a line of one's
//! own). A copy per loop costs none of them. Measured in paired rounds against the build
//! before (4 KiB, logs on): CPU per request 0.95x; no change on 1,000 files at random.
//!
//! The shared caches stay the truth; a copy is only ever as good as what it copied:
//! * **The id.** Used only while the id cache entry it copied is still the entry: no
//!   eviction reached its shard since, and its TTL (as it applies now) is not over
//!   ([`LocalCache::standing`]). An eviction pushed by the follower is obeyed as at once as
//!   by the shared cache. In the last quarter of its TTL a copy asks for its id to be read
//!   from Redis again off the request path ([`crate::catalog::refresh`]); when its entry
//!   then runs out and the renewed entry names the same path, the copy takes the new
//!   entry's stamp and keeps its bytes, so a hot id is neither waited on nor copied again
//!   each TTL. A copy whose entry the other loop's copy already had renewed takes the
//!   renewed entry instead of asking: each loop asking for its own read had nearly doubled
//!   the reads (1,000 hot ids: refreshes for 4.8 % of requests, 3.0 % since).
//! * **The file.** Used only while the file cache still holds the entry it copied (an
//!   entry replaced or evicted is retired), and proven current for the request exactly as
//!   every answer from the file cache is ([`FileCache::is_current`]: the `stat` or the
//!   inotify drain after the request was read). A copy that fails is dropped, and the
//!   request takes the shared path.
//! * **Bounded.** Files of at most [`MOST_FILE_BYTES`], at most [`MOST_BYTES`] and
//!   [`MOST_TRACKS`] per loop. When full, one copy in [`REPLACE_EVERY`] misses replaces an
//!   arbitrary one: a working set larger than the copies costs a copy now and then, not
//!   one per request.
//! * **Use.** A hit marks the shared entry used every [`TOUCH_EVERY`] hits, so the file
//!   cache's choice of what to evict still sees the file as hot.

use std::cell::RefCell;
use std::collections::HashMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU32, Ordering};
use std::time::Instant;

use bytes::Bytes;
use mongodb::bson::oid::ObjectId;

use super::AppState;
use super::error::ApiError;
use super::file::{self, cache::CachedFile, facts::FileFacts, request::FileRequest};
use super::service::Answer;
use crate::catalog::local::{Local, Stamp, Standing};

/// The largest file copied.
pub(crate) const MOST_FILE_BYTES: usize = 64 * 1024;
/// The most bytes of files one loop holds in copies.
pub(crate) const MOST_BYTES: usize = 8 * 1024 * 1024;
/// The most tracks one loop holds.
pub(crate) const MOST_TRACKS: usize = 2048;
/// When full, one miss in this many replaces a copy.
const REPLACE_EVERY: u32 = 16;
/// A hit marks the shared entry used once in this many.
const TOUCH_EVERY: u32 = 16;

/// One track as this loop last answered it from the shared caches.
struct HotTrack {
    /// The path the id cache gave.
    path: Box<str>,
    /// Tells whether the id cache entry is still the one copied.
    stamp: Stamp,
    /// The file cache's entry (shared; only read here).
    file: Arc<CachedFile>,
    /// This loop's copy of its bytes.
    bytes: Bytes,
    /// This loop's copy of its facts.
    facts: FileFacts,
    /// Hits, for [`TOUCH_EVERY`]. Only this loop's thread writes it.
    hits: AtomicU32,
    /// Whether this copy asked for its id to be read again ([`crate::catalog::refresh`]).
    /// Only this loop's thread writes it.
    asked: AtomicBool,
}

/// This loop's copies. `cache` (the file cache's instance) keeps the servers of one
/// process apart.
#[derive(Default)]
struct HotTracks {
    tracks: HashMap<(u64, ObjectId), Arc<HotTrack>, foldhash::fast::RandomState>,
    bytes: usize,
    misses: u32,
}

thread_local! {
    static HOT: RefCell<HotTracks> = RefCell::new(HotTracks::default());
}

/// The answer to `request` for `oid` from this loop's copy, if it has one that is current.
pub(crate) async fn answer(
    state: &AppState,
    oid: &ObjectId,
    id: &str,
    request: &FileRequest,
) -> Option<Result<Answer, ApiError>> {
    let cache = &state.files.cache;
    let key = (cache.instance(), *oid);
    let mut hot = HOT.with_borrow(|hot| hot.tracks.get(&key).cloned())?;
    let read_at = request.read_at.unwrap_or_else(Instant::now);
    let local = state.resolver.local();
    match local.standing(oid, hot.stamp, read_at) {
        Standing::Good => {}
        Standing::Gone => match renewed(state, key, &hot, read_at) {
            Some(renewed) => hot = renewed,
            None => {
                forget(key);
                return None;
            }
        },
        Standing::Due if !hot.asked.load(Ordering::Relaxed) => {
            // The other loop's copy of the id may have asked first and its entry been
            // renewed: that entry is taken, not read from Redis a second time.
            match renewed(state, key, &hot, read_at) {
                Some(renewed) => hot = renewed,
                None => {
                    hot.asked.store(true, Ordering::Relaxed);
                    state.resolver.refresh_ahead(*oid);
                }
            }
        }
        Standing::Due => {}
    }
    if hot.file.is_retired() {
        forget(key);
        return None;
    }
    let answer = file::from_copy(&state.files, id, &hot.facts, hot.bytes.clone(), request);
    if cache.worth_waiting(&hot.file, read_at) {
        tokio::task::yield_now().await;
    }
    if !cache.is_current(&hot.path, &hot.file, read_at) {
        forget(key);
        return None;
    }
    // Only this thread writes it: a plain load and store, no locked add.
    let hits = hot.hits.load(Ordering::Relaxed).wrapping_add(1);
    hot.hits.store(hits, Ordering::Relaxed);
    if hits % TOUCH_EVERY == 0 {
        cache.touch(&hot.file);
    }
    Some(answer)
}

/// Copies what answered `oid` (at `path`, read at `read_at`) from the shared caches, if it
/// is small enough and still what they hold.
pub(crate) fn keep(state: &AppState, oid: ObjectId, path: &str, read_at: Instant) {
    let cache = &state.files.cache;
    let key = (cache.instance(), oid);
    let room = HOT.with_borrow_mut(|hot| {
        if hot.tracks.len() < MOST_TRACKS && hot.bytes < MOST_BYTES {
            return true;
        }
        hot.misses = hot.misses.wrapping_add(1);
        hot.misses % REPLACE_EVERY == 0
    });
    if !room {
        return;
    }
    let Some((Local::Path(current), stamp)) = state.resolver.local().get_stamped(&oid, read_at)
    else {
        return;
    };
    if &*current != path {
        return;
    }
    let Some(file) = cache.get(path) else {
        return;
    };
    let Some(bytes) = file.in_memory().filter(|b| b.len() <= MOST_FILE_BYTES) else {
        return;
    };
    let hot = HotTrack {
        path: path.into(),
        stamp,
        bytes: Bytes::copy_from_slice(bytes),
        facts: file.facts.copied(),
        file: Arc::clone(&file),
        hits: AtomicU32::new(0),
        asked: AtomicBool::new(false),
    };
    HOT.with_borrow_mut(|hot_tracks| hot_tracks.insert(key, hot));
}

/// The copy `hot` under the id cache's current entry, if that entry is not the one copied
/// (it was renewed since, [`crate::catalog::refresh`]) and still names the copy's path: the
/// bytes are kept, not copied again.
fn renewed(
    state: &AppState,
    key: (u64, ObjectId),
    hot: &HotTrack,
    read_at: Instant,
) -> Option<Arc<HotTrack>> {
    let Some((Local::Path(current), stamp)) = state.resolver.local().get_stamped(&key.1, read_at)
    else {
        return None;
    };
    if stamp.same_entry(&hot.stamp) || *current != *hot.path {
        return None;
    }
    let renewed = Arc::new(HotTrack {
        path: hot.path.clone(),
        stamp,
        file: Arc::clone(&hot.file),
        bytes: hot.bytes.clone(),
        facts: hot.facts.clone(),
        hits: AtomicU32::new(hot.hits.load(Ordering::Relaxed)),
        asked: AtomicBool::new(false),
    });
    HOT.with_borrow_mut(|hot_tracks| hot_tracks.renew(key, Arc::clone(&renewed)));
    Some(renewed)
}

fn forget(key: (u64, ObjectId)) {
    HOT.with_borrow_mut(|hot| hot.remove(&key));
}

impl HotTracks {
    fn insert(&mut self, key: (u64, ObjectId), track: HotTrack) {
        self.remove(&key);
        while self.tracks.len() >= MOST_TRACKS || self.bytes + track.bytes.len() > MOST_BYTES {
            let Some(victim) = self.tracks.keys().next().copied() else {
                break;
            };
            self.remove(&victim);
        }
        self.bytes += track.bytes.len();
        self.tracks.insert(key, Arc::new(track));
    }

    /// Puts `track` in place of the copy of the same bytes it renews.
    fn renew(&mut self, key: (u64, ObjectId), track: Arc<HotTrack>) {
        if let Some(old) = self.tracks.get_mut(&key) {
            *old = track;
        }
    }

    fn remove(&mut self, key: &(u64, ObjectId)) {
        if let Some(old) = self.tracks.remove(key) {
            self.bytes -= old.bytes.len();
        }
    }
}

/// This thread's copies: how many, and their bytes.
#[cfg(test)]
pub(crate) fn held() -> (usize, usize) {
    HOT.with_borrow(|hot| (hot.tracks.len(), hot.bytes))
}

#[cfg(test)]
mod tests {
    //! Each test runs on one thread (a current-thread runtime), as an event loop does, so
    //! the copies it makes are the ones it asks. The backends are down: an answer that
    //! needed them fails, which tells a copy's answer from the shared path's.

    use std::net::IpAddr;
    use std::path::Path;
    use std::time::Duration;

    use axum::http::{Method, StatusCode, Version};

    use super::*;
    use crate::config::Config;
    use crate::http::app::{App, ListenerRole};
    use crate::http::dispatch::dispatch;
    use crate::http::service::{Payload, Request};

    const ID: &str = "6b0dc37d3ba0d873deac9381";

    async fn app(media: &Path) -> App {
        let mut config = Config::defaults_with_roots(vec![media.to_path_buf()]).expect("config");
        config.redis.target = crate::redis_link::RedisTarget::Single("redis://127.0.0.1:1".into());
        config.redis.timeout = Duration::from_millis(20);
        config.mongodb.uri = "mongodb://127.0.0.1:1/".into();
        config.mongodb.timeout = Duration::from_millis(20);
        let state = AppState::new(&config).await.expect("state");
        App::new(state, &config.route_prefixes)
    }

    /// The id cache knows `path` for [`ID`] (as if Redis had answered).
    fn knows(app: &App, path: &Path) {
        let oid = ObjectId::parse_str(ID).expect("id");
        let local = app.state.resolver.local();
        let path = path.to_str().expect("utf-8");
        local.put(oid, Local::Path(path.into()), local.epoch(&oid));
    }

    async fn get(app: &App) -> (StatusCode, Vec<u8>) {
        get_at(app, Instant::now()).await
    }

    /// A request read at `read_at`: a later instant stands for time passed.
    async fn get_at(app: &App, read_at: Instant) -> (StatusCode, Vec<u8>) {
        let target = format!("/musicdb/{ID}/a.mp3");
        let head = format!("GET {target} HTTP/1.1\r\nHost: h\r\n\r\n");
        let request = Request::new(
            &Method::GET,
            Version::HTTP_11,
            &target,
            &target,
            IpAddr::from([127, 0, 0, 1]),
            read_at,
            head.as_bytes(),
        );
        let answer = dispatch(app, ListenerRole::All, &request).await.answer;
        let body = match answer.payload {
            Payload::Bytes(bytes) => bytes.to_vec(),
            _ => Vec::new(),
        };
        (answer.status, body)
    }

    fn replace(path: &Path, bytes: &[u8]) {
        let next = path.with_extension("next");
        std::fs::write(&next, bytes).expect("write");
        std::fs::rename(&next, path).expect("rename");
    }

    #[tokio::test]
    async fn a_copy_answers_only_while_the_id_cache_still_holds_what_it_copied() {
        let media = tempfile::tempdir().expect("dir");
        let path = media.path().join("a.mp3");
        std::fs::write(&path, [7u8; 4096]).expect("write");
        let app = app(media.path()).await;
        knows(&app, &path);
        // Opened, then answered from the file cache (and copied), then from the copy.
        for _ in 0..3 {
            assert_eq!(get(&app).await, (StatusCode::OK, vec![7u8; 4096]));
        }
        assert_eq!(held(), (1, 4096));
        // The follower publishes a change of the id: the copy is not used, and the id
        // must be asked again (from backends that are down).
        let oid = ObjectId::parse_str(ID).expect("id");
        app.state.resolver.evict(&[oid]);
        let (status, _) = get(&app).await;
        assert_ne!(
            status,
            StatusCode::OK,
            "an evicted id was answered from a copy"
        );
        assert_eq!(held().0, 0);
    }

    #[tokio::test]
    async fn a_changed_file_is_seen_by_the_next_request_even_after_it_was_copied() {
        let media = tempfile::tempdir().expect("dir");
        let path = media.path().join("a.mp3");
        std::fs::write(&path, [1u8; 4096]).expect("write");
        let app = app(media.path()).await;
        knows(&app, &path);
        for _ in 0..3 {
            assert_eq!(get(&app).await, (StatusCode::OK, vec![1u8; 4096]));
        }
        assert_eq!(held().0, 1);
        replace(&path, &[2u8; 5000]);
        assert_eq!(get(&app).await, (StatusCode::OK, vec![2u8; 5000]));
        // Copied again, then rewritten in place (same inode).
        assert_eq!(get(&app).await.1, vec![2u8; 5000]);
        assert_eq!(get(&app).await.1, vec![2u8; 5000]);
        assert_eq!(held().0, 1);
        std::fs::write(&path, [3u8; 6000]).expect("rewrite");
        assert_eq!(get(&app).await, (StatusCode::OK, vec![3u8; 6000]));
        std::fs::remove_file(&path).expect("remove");
        assert_eq!(get(&app).await.0, StatusCode::NOT_FOUND);
    }

    /// An app whose id cache keeps entries `ttl` (evictions heard), knowing [`ID`] at a
    /// copied 4 KiB file; and the instant before it knew it.
    async fn copied(media: &Path, ttl: Duration) -> (App, Instant) {
        let path = media.join("a.mp3");
        std::fs::write(&path, [4u8; 4096]).expect("write");
        let mut config = Config::defaults_with_roots(vec![media.to_path_buf()]).expect("config");
        config.redis.target = crate::redis_link::RedisTarget::Single("redis://127.0.0.1:1".into());
        config.redis.timeout = Duration::from_millis(20);
        config.mongodb.uri = "mongodb://127.0.0.1:1/".into();
        config.mongodb.timeout = Duration::from_millis(20);
        config.cache.id_ttl = ttl;
        let state = AppState::new(&config).await.expect("state");
        let app = App::new(state, &config.route_prefixes);
        app.state.resolver.local().set_pushed(true);
        let before = Instant::now();
        knows(&app, &path);
        for _ in 0..3 {
            assert_eq!(get(&app).await, (StatusCode::OK, vec![4u8; 4096]));
        }
        assert_eq!(held().0, 1);
        (app, before)
    }

    #[tokio::test]
    async fn a_copy_in_the_last_quarter_of_its_ttl_asks_for_its_id_to_be_read_again() {
        let media = tempfile::tempdir().expect("dir");
        let ttl = Duration::from_secs(1000);
        let (app, before) = copied(media.path(), ttl).await;
        // Read 0.8 TTL after the entry was stored (at most a test's run later than that).
        let due = before + ttl * 4 / 5;
        assert_eq!(get_at(&app, due).await.0, StatusCode::OK);
        assert_eq!(app.state.resolver.refresh_waiting(), 1);
        // Asked once per copy and period.
        assert_eq!(get_at(&app, due).await.0, StatusCode::OK);
        assert_eq!(app.state.resolver.refresh_waiting(), 1);
    }

    #[tokio::test]
    async fn a_copy_whose_entry_was_renewed_for_the_other_loop_takes_it_and_does_not_ask() {
        let media = tempfile::tempdir().expect("dir");
        let ttl = Duration::from_secs(1000);
        let (app, before) = copied(media.path(), ttl).await;
        // The other loop's copy asked, and the refresh renewed the entry (same path).
        knows(&app, &media.path().join("a.mp3"));
        let due = before + ttl * 4 / 5;
        assert_eq!(get_at(&app, due).await, (StatusCode::OK, vec![4u8; 4096]));
        assert_eq!(
            app.state.resolver.refresh_waiting(),
            0,
            "the id was asked for again though its entry was renewed"
        );
        // The copy now stands on the renewed entry, its bytes kept.
        let oid = ObjectId::parse_str(ID).expect("id");
        let (_, current) = app
            .state
            .resolver
            .local()
            .get_stamped(&oid, Instant::now())
            .expect("entry");
        let copy = HOT.with_borrow(|hot| hot.tracks.values().next().map(|track| track.stamp));
        assert!(copy.is_some_and(|copy| copy.same_entry(&current)));
        assert_eq!(held(), (1, 4096));
    }

    #[tokio::test]
    async fn copies_stay_within_their_bounds() {
        let media = tempfile::tempdir().expect("dir");
        let path = media.path().join("a.mp3");
        std::fs::write(&path, [5u8; 4096]).expect("write");
        let app = app(media.path()).await;
        knows(&app, &path);
        for _ in 0..2 {
            assert_eq!(get(&app).await.0, StatusCode::OK);
        }
        let oid = ObjectId::parse_str(ID).expect("id");
        let state = &app.state;
        let (_, stamp) = state
            .resolver
            .local()
            .get_stamped(&oid, Instant::now())
            .expect("entry");
        let file = state
            .files
            .cache
            .get(path.to_str().expect("utf-8"))
            .expect("cached");
        let track = |len: usize| HotTrack {
            path: "/x".into(),
            stamp,
            file: Arc::clone(&file),
            bytes: Bytes::from(vec![0u8; len]),
            facts: file.facts.copied(),
            hits: AtomicU32::new(0),
            asked: AtomicBool::new(false),
        };
        let mut hot = HotTracks::default();
        for n in 0..(MOST_BYTES / MOST_FILE_BYTES + 10) {
            let mut id = [0u8; 12];
            id[..8].copy_from_slice(&(n as u64).to_le_bytes());
            hot.insert((0, ObjectId::from_bytes(id)), track(MOST_FILE_BYTES));
            assert!(hot.bytes <= MOST_BYTES, "{} bytes", hot.bytes);
        }
        for n in 0..(MOST_TRACKS + 10) {
            let mut id = [1u8; 12];
            id[..8].copy_from_slice(&(n as u64).to_le_bytes());
            hot.insert((0, ObjectId::from_bytes(id)), track(10));
            assert!(hot.tracks.len() <= MOST_TRACKS);
        }
        let counted: usize = hot.tracks.values().map(|t| t.bytes.len()).sum();
        assert_eq!(counted, hot.bytes);
    }
}
