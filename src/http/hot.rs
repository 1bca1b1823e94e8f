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
//!   request takes the shared path. Once a check found the entry armed, the copy keeps
//!   what it noted ([`FileCache::note`]), and later requests ask only the process's count
//!   of disarmed and retired entries and the last drain ([`FileCache::vouch`]), not the
//!   entry: its lines, which both cores read and the kernel's copies of other files push
//!   out of the cache, had been three of the misses of every answer (perf, 1,000 files:
//!   the copy's count, its entry's `retired` and its watch, 12 % of user time with the
//!   hash probe). The entry is read again whenever the count moves or its `stat` is due.
//! * **Bounded.** Files of at most [`MOST_FILE_BYTES`], at most [`MOST_BYTES`] and
//!   [`MOST_TRACKS`] per loop. When full, one copy in [`REPLACE_EVERY`] misses replaces an
//!   arbitrary one: a working set larger than the copies costs a copy now and then, not
//!   one per request.
//! * **Use.** A hit marks the shared entry used every [`TOUCH_EVERY`] hits, so the file
//!   cache's choice of what to evict still sees the file as hot.

use std::cell::RefCell;
use std::collections::HashMap;
use std::sync::Arc;
use std::time::Instant;

use bytes::Bytes;
use mongodb::bson::oid::ObjectId;

use super::AppState;
use super::error::ApiError;
use super::file::cache::{CachedFile, Noted, Vouch};
use super::file::{self, facts::FileFacts, request::FileRequest};
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

/// One track as this loop last answered it from the shared caches. Held in the map
/// itself, not behind an `Arc`: an answer's checks read its first lines and move no count
/// (a locked add on a line missed in the cache held up every load after it).
/// `repr(C)`: what every answer reads comes first.
#[repr(C)]
struct HotTrack {
    /// Tells whether the id cache entry is still the one copied.
    stamp: Stamp,
    /// What last proved the file current, if the watcher can vouch for it without a look
    /// at the shared entry ([`FileCache::vouch`]).
    noted: Option<Noted>,
    /// Hits, for [`TOUCH_EVERY`].
    hits: u32,
    /// Whether this copy asked for its id to be read again ([`crate::catalog::refresh`]).
    asked: bool,
    /// This loop's copy of its bytes.
    bytes: Bytes,
    /// This loop's copy of its facts (its lines share the bytes' allocation).
    facts: FileFacts,
    /// The path the id cache gave.
    path: Box<str>,
    /// The file cache's entry (shared; only read here).
    file: Arc<CachedFile>,
}

impl HotTrack {
    fn answer(&mut self, state: &AppState, id: &str, request: &FileRequest) -> Answered {
        self.hits = self.hits.wrapping_add(1);
        if self.hits.is_multiple_of(TOUCH_EVERY) {
            state.files.cache.touch(&self.file);
        }
        file::from_copy(&state.files, id, &self.facts, self.bytes.clone(), request)
    }
}

type Answered = Result<Answer, ApiError>;

/// This loop's copies. `cache` (the file cache's instance) keeps the servers of one
/// process apart.
#[derive(Default)]
struct HotTracks {
    tracks: HashMap<(u64, ObjectId), HotTrack, foldhash::fast::RandomState>,
    bytes: usize,
    misses: u32,
}

thread_local! {
    static HOT: RefCell<HotTracks> = RefCell::new(HotTracks::default());
}

/// What a copy can do for a request, decided without waiting.
enum Step {
    /// Answered from the copy.
    Answered(Answered),
    /// Current once the watcher has drained its events; `file`: the copy's entry, by
    /// address (to tell the same copy after the wait).
    AfterDrain {
        noted: Noted,
        worth_waiting: bool,
        file: usize,
    },
    /// To be checked against the shared entry.
    Check {
        file: Arc<CachedFile>,
        path: Box<str>,
    },
}

/// The answer to `request` for `oid` from this loop's copy, if it has one that is current.
pub(crate) async fn answer(
    state: &AppState,
    oid: &ObjectId,
    id: &str,
    request: &FileRequest,
) -> Option<Answered> {
    let cache = &state.files.cache;
    let key = (cache.instance(), *oid);
    let read_at = request.read_at.unwrap_or_else(Instant::now);
    let (mut vouched, mut waited) = (true, false);
    loop {
        match step(state, key, id, request, read_at, vouched)? {
            Step::Answered(answer) => return Some(answer),
            Step::AfterDrain {
                noted,
                worth_waiting,
                file,
            } => {
                if worth_waiting && !waited {
                    tokio::task::yield_now().await;
                }
                vouched = !waited && cache.vouch_after_drain(noted, read_at);
                waited = true;
                // Current for this request: answered by the same copy if it is still
                // there (the id was checked before the wait, as a `stat` would have been
                // made after it); otherwise the next step decides again.
                let answered = vouched.then(|| {
                    HOT.with_borrow_mut(|hot| {
                        let track = hot.tracks.get_mut(&key)?;
                        let same =
                            track.noted == Some(noted) && Arc::as_ptr(&track.file) as usize == file;
                        same.then(|| track.answer(state, id, request))
                    })
                });
                if let Some(Some(answer)) = answered {
                    return Some(answer);
                }
            }
            Step::Check { file, path } => {
                let noted = cache.note(&file);
                if file.is_retired() {
                    forget(key, &file);
                    return None;
                }
                if cache.worth_waiting(&file, read_at) {
                    tokio::task::yield_now().await;
                }
                if !cache.is_current(&path, &file, read_at) {
                    forget(key, &file);
                    return None;
                }
                // The copy may have been dropped or replaced while this one waited.
                return HOT.with_borrow_mut(|hot| {
                    let track = hot.tracks.get_mut(&key)?;
                    if !Arc::ptr_eq(&track.file, &file) {
                        return None;
                    }
                    track.noted = noted;
                    Some(track.answer(state, id, request))
                });
            }
        }
    }
}

/// What the copy of `key` can do for `request` now (`None`: no copy, or none usable);
/// `vouched`: whether the watcher may vouch for its file.
fn step(
    state: &AppState,
    key: (u64, ObjectId),
    id: &str,
    request: &FileRequest,
    read_at: Instant,
    vouched: bool,
) -> Option<Step> {
    HOT.with_borrow_mut(|hot| {
        let track = hot.tracks.get_mut(&key)?;
        let local = state.resolver.local();
        match local.standing(&key.1, track.stamp, read_at) {
            Standing::Good => {}
            Standing::Gone => {
                if !renewed(state, key, track, read_at) {
                    hot.remove(&key);
                    return None;
                }
            }
            Standing::Due if !track.asked => {
                // The other loop's copy of the id may have asked first and its entry been
                // renewed: that entry is taken, not read from Redis a second time.
                if !renewed(state, key, track, read_at) {
                    track.asked = true;
                    state.resolver.refresh_ahead(key.1);
                }
            }
            Standing::Due => {}
        }
        let vouch = match track.noted {
            Some(noted) if vouched => (noted, state.files.cache.vouch(noted, read_at)),
            _ => {
                return Some(Step::Check {
                    file: Arc::clone(&track.file),
                    path: track.path.clone(),
                });
            }
        };
        Some(match vouch {
            (_, Vouch::Current) => Step::Answered(track.answer(state, id, request)),
            (noted, Vouch::AfterDrain { worth_waiting }) => Step::AfterDrain {
                noted,
                worth_waiting,
                file: Arc::as_ptr(&track.file) as usize,
            },
            (_, Vouch::Unknown) => {
                track.noted = None;
                Step::Check {
                    file: Arc::clone(&track.file),
                    path: track.path.clone(),
                }
            }
        })
    })
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
    let (facts, bytes) = file.facts.copied_with(bytes);
    let hot = HotTrack {
        stamp,
        noted: None,
        hits: 0,
        asked: false,
        bytes,
        facts,
        path: path.into(),
        file: Arc::clone(&file),
    };
    HOT.with_borrow_mut(|hot_tracks| hot_tracks.insert(key, hot));
}

/// Moves the copy `track` onto the id cache's current entry, if that entry is not the one
/// copied (it was renewed since, [`crate::catalog::refresh`]) and still names the copy's
/// path: the bytes are kept, not copied again. Whether it did.
fn renewed(state: &AppState, key: (u64, ObjectId), track: &mut HotTrack, read_at: Instant) -> bool {
    let Some((Local::Path(current), stamp)) = state.resolver.local().get_stamped(&key.1, read_at)
    else {
        return false;
    };
    if stamp.same_entry(&track.stamp) || *current != *track.path {
        return false;
    }
    track.stamp = stamp;
    track.asked = false;
    true
}

/// Drops the copy of `key` if it is still the copy of `file`.
fn forget(key: (u64, ObjectId), file: &Arc<CachedFile>) {
    HOT.with_borrow_mut(|hot| {
        if hot
            .tracks
            .get(&key)
            .is_some_and(|track| Arc::ptr_eq(&track.file, file))
        {
            hot.remove(&key);
        }
    });
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
        self.tracks.insert(key, track);
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
    use std::path::{Path, PathBuf};
    use std::time::Duration;

    use axum::http::{Method, StatusCode, Version};

    use super::*;
    use crate::config::Config;
    use crate::http::app::{App, ListenerRole};
    use crate::http::dispatch::dispatch;
    use crate::http::service::{Payload, Request};

    const ID: &str = "6b0dc37d3ba0d873deac9381";

    /// Serving `media`, with Redis and MongoDB unreachable: only what a test put in the
    /// id cache resolves.
    fn offline(media: &Path) -> Config {
        let mut config = Config::defaults_with_roots(vec![media.to_path_buf()]).expect("config");
        config.redis.target = crate::redis_link::RedisTarget::Single("redis://127.0.0.1:1".into());
        config.redis.timeout = Duration::from_millis(20);
        config.mongodb.uri = "mongodb://127.0.0.1:1/".into();
        config.mongodb.timeout = Duration::from_millis(20);
        config
    }

    async fn app_of(config: &Config) -> App {
        let state = AppState::new(config).await.expect("state");
        App::new(state, &config.route_prefixes)
    }

    async fn app(media: &Path) -> App {
        app_of(&offline(media)).await
    }

    /// Writes 4 KiB of `fill` at `media/a.mp3`, has the id cache know it as [`ID`] and
    /// GETs it `times` times: opened, then answered from the file cache (and copied),
    /// then from the copy.
    async fn answered(app: &App, media: &Path, fill: u8, times: usize) -> PathBuf {
        let path = media.join("a.mp3");
        std::fs::write(&path, [fill; 4096]).expect("write");
        knows(app, &path);
        for _ in 0..times {
            assert_eq!(get(app).await, (StatusCode::OK, vec![fill; 4096]));
        }
        path
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
        let app = app(media.path()).await;
        answered(&app, media.path(), 7, 3).await;
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
        let app = app(media.path()).await;
        let path = answered(&app, media.path(), 1, 3).await;
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

    #[tokio::test]
    async fn a_copy_the_watcher_vouches_for_is_dropped_when_the_file_cache_lets_its_entry_go() {
        let media = tempfile::tempdir().expect("dir");
        let app = app(media.path()).await;
        let path = answered(&app, media.path(), 6, 4).await;
        let noted = HOT.with_borrow(|hot| hot.tracks.values().any(|t| t.noted.is_some()));
        assert!(noted, "the copy was not proved current by the watcher");
        // Another version takes the entry's place (as when a `stat` found the file
        // changed before any event was drained): no event names the copy's file, only
        // the retirement of the entry it copied tells.
        let metadata = std::fs::metadata(&path).expect("stat");
        let facts = FileFacts::new(
            &path,
            4096,
            metadata.modified().expect("mtime"),
            &axum::http::HeaderValue::from_static("public"),
        );
        let other = CachedFile::new(
            crate::http::file::cache::Content::Memory(Bytes::from(vec![9u8; 4096])),
            &metadata,
            facts,
        );
        let raw = path.to_str().expect("utf-8");
        app.state.files.cache.insert(raw, other);
        let (status, body) = get(&app).await;
        assert_eq!(status, StatusCode::OK);
        assert!(
            body.len() == 4096 && body.iter().all(|&b| b == 9),
            "a copy of a retired entry was answered: {:?}",
            &body[..body.len().min(4)]
        );
    }

    /// An app whose id cache keeps entries `ttl` (evictions heard), knowing [`ID`] at a
    /// copied 4 KiB file; and the instant before it knew it.
    async fn copied(media: &Path, ttl: Duration) -> (App, Instant) {
        let mut config = offline(media);
        config.cache.id_ttl = ttl;
        let app = app_of(&config).await;
        app.state.resolver.local().set_pushed(true);
        let before = Instant::now();
        answered(&app, media, 4, 3).await;
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
        let track = |len: usize| {
            let (facts, bytes) = file.facts.copied_with(&vec![0u8; len]);
            HotTrack {
                stamp,
                noted: None,
                hits: 0,
                asked: false,
                bytes,
                facts,
                path: "/x".into(),
                file: Arc::clone(&file),
            }
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
