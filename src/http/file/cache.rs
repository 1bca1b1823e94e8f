//! Hot files kept ready, never served stale: small ones in memory, larger ones open.
//!
//! Sending a small file from memory is cheaper than any read path (no open, no blocking-
//! pool hop, no read syscalls). A large file is better sent with `sendfile` from the page
//! cache than copied out of memory, so it is kept as an open descriptor instead, which
//! saves the open, the confinement checks and the blocking-pool hop on every request.
//!
//! The price is staleness risk. A copy is proven current by a `stat` of the document path:
//! device, inode, size and modification time (ns) must all match what was cached, or the
//! entry is ignored and the file is opened again. A file replaced by rename has a new
//! inode; one rewritten in place has a new mtime; one that vanished fails the stat.
//! Because the stat follows the same path the cached entry was confined from, a symlink
//! re-pointed elsewhere shows up as another inode too.
//!
//! One `stat` serves every request that was read before it began ([`FileCache::is_fresh`]
//! takes the instant its request was read): whatever replaced the file before such a
//! request was sent had happened before that instant, so a matching `stat` begun later
//! saw the file as it is since. A request read after the last matching `stat` began gets
//! a `stat` of its own. So a hot file costs one `stat` per event-loop turn instead of one
//! per request: [`FileCache::worth_waiting`] tells the caller when to let the loop's other
//! ready connections read their requests first (`super::from_cache`).
//!
//! Many different hot files would still cost a `stat` each per turn. So an entry whose
//! path can be watched is also *armed* by its `stat` ([`super::watch`]): from then on one
//! drain of the process's inotify descriptor per loop turn vouches for every armed entry
//! at once (a drain begun after the request was read, and no event for the entry). That
//! promise is the `stat`'s for every change whose call had returned when the request was
//! read; where inotify is weaker, [`super::watch`] says what covers it (a `stat` at least
//! every [`RESTAT_AFTER`], [`FileCache::evict_open`] after a transfer cut by a change).
//! Entries that cannot be watched, or once the watch limit is reached, keep the `stat`.
//!
//! Memory is bounded by `file_total_bytes` and descriptors by `open_files`; when full, the
//! least recently used entries of that kind go.

use std::collections::HashMap;
use std::fs::File;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, RwLock};
use std::time::{Duration, Instant};

use bytes::Bytes;

use super::facts::FileFacts;
use super::inotify::{self, EntryWatch, RESTAT_AFTER, Watcher};
use crate::http::service::Identity;

/// What a cache entry holds.
#[derive(Debug)]
pub(crate) enum Content {
    /// The whole (small) file.
    Memory(Bytes),
    /// The (large) file, open.
    Open(Arc<File>),
    /// The header lines of an offload answer (x-accel-redirect, x-sendfile): to play
    /// (`[0]`) and to download (`[1]`).
    Offload([Bytes; 2]),
}

/// What proved an entry current, kept by a copy of it ([`FileCache::note`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Noted {
    /// The process's count of changes ([`inotify::changes`]) before the entry was found
    /// armed.
    changes: u64,
    /// The entry's last `stat` then.
    checked: u64,
}

/// What a copy noted [`Noted`] is worth for a request ([`FileCache::vouch`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Vouch {
    /// Current: no entry was disarmed or retired since it was noted, and a drain begun
    /// after the request was read is complete.
    Current,
    /// Current once a drain begun after the request was read finds nothing for it
    /// ([`FileCache::vouch_after_drain`]); `worth_waiting` as
    /// [`FileCache::worth_waiting`] says.
    AfterDrain { worth_waiting: bool },
    /// Not known without reading the entry: [`FileCache::is_current`].
    Unknown,
}

/// One cached file: its content plus what was true of it when opened.
#[derive(Debug)]
pub(crate) struct CachedFile {
    /// The bytes or the descriptor.
    pub(crate) content: Content,
    /// What it was when read.
    pub(crate) identity: Identity,
    /// Its validators and header values, formatted once.
    pub(crate) facts: FileFacts,
    last_used: AtomicU64,
    /// When the last `stat` that found the file unchanged began, in ns since the cache's
    /// epoch (0: never).
    checked: AtomicU64,
    /// Its standing with the watcher.
    watch: Arc<EntryWatch>,
    /// Set when the cache lets it go (replaced, evicted): copies of it elsewhere
    /// ([`crate::http::hot`]) are then dropped too.
    retired: std::sync::atomic::AtomicBool,
}

impl CachedFile {
    /// A cache entry for `content` of a file with this metadata.
    pub(crate) fn new(
        content: Content,
        metadata: &std::fs::Metadata,
        facts: FileFacts,
    ) -> CachedFile {
        CachedFile {
            content,
            identity: Identity::of(metadata),
            facts,
            last_used: AtomicU64::new(0),
            checked: AtomicU64::new(0),
            watch: Arc::default(),
            retired: std::sync::atomic::AtomicBool::new(false),
        }
    }

    /// Whether the cache has let it go.
    pub(crate) fn is_retired(&self) -> bool {
        self.retired.load(Ordering::Acquire)
    }

    /// The bytes of a file kept in memory.
    pub(crate) fn in_memory(&self) -> Option<&Bytes> {
        match &self.content {
            Content::Memory(bytes) => Some(bytes),
            _ => None,
        }
    }

    /// Memory held.
    fn bytes(&self) -> u64 {
        match &self.content {
            Content::Memory(bytes) => bytes.len() as u64,
            Content::Offload(variants) => variants.iter().map(|b| b.len() as u64).sum(),
            Content::Open(_) => 0,
        }
    }

    fn is_open(&self) -> bool {
        matches!(self.content, Content::Open(_))
    }
}

/// The cache, keyed by the document's path as written.
pub(crate) struct FileCache {
    /// foldhash (randomly seeded per process): every request hashes its path here.
    files: RwLock<HashMap<Arc<str>, Arc<CachedFile>, foldhash::fast::RandomState>>,
    max_file: u64,
    budget: u64,
    used: AtomicU64,
    max_open: usize,
    open: AtomicUsize,
    clock: AtomicU64,
    /// The origin of the `checked` instants.
    epoch: Instant,
    /// Vouches for armed entries without a `stat`; `None`: `cache.file_watches = 0` or no
    /// inotify.
    watcher: Option<Watcher>,
    stats: AtomicU64,
    /// Tells this cache from any other in the process (a test runs several servers):
    /// copies of its entries elsewhere are keyed by it.
    instance: u64,
}

/// A copy checked this recently before a request was read is a hot file: the loop's other
/// connections probably ask for it in the same turn, so waiting for them to be read first
/// lets one `stat` serve them all. Beyond, the `stat` is made at once.
const HOT: Duration = Duration::from_millis(2);

impl FileCache {
    /// A cache for files up to `max_file` bytes in memory, `budget` bytes in all (0: no
    /// copies in memory), for at most `max_open` larger files kept open (0: none), and
    /// using at most `watches` inotify watches (0: a `stat` per loop turn for every file).
    pub(crate) fn new(max_file: u64, budget: u64, max_open: usize, watches: usize) -> FileCache {
        FileCache {
            files: RwLock::new(HashMap::default()),
            max_file: if budget == 0 { 0 } else { max_file },
            budget,
            used: AtomicU64::new(0),
            max_open,
            open: AtomicUsize::new(0),
            clock: AtomicU64::new(0),
            epoch: Instant::now(),
            watcher: Watcher::new(watches),
            stats: AtomicU64::new(0),
            instance: {
                static INSTANCES: AtomicU64 = AtomicU64::new(0);
                INSTANCES.fetch_add(1, Ordering::Relaxed)
            },
        }
    }

    /// This cache among the process's (see `instance`).
    pub(crate) fn instance(&self) -> u64 {
        self.instance
    }

    fn now(&self) -> u64 {
        self.since_epoch(Instant::now())
    }

    fn since_epoch(&self, at: Instant) -> u64 {
        u64::try_from(at.saturating_duration_since(self.epoch).as_nanos()).unwrap_or(u64::MAX)
    }

    /// Whether a file of `len` bytes would be kept in memory.
    pub(crate) fn admits(&self, len: u64) -> bool {
        len <= self.max_file
    }

    /// Whether files too large for memory are kept open.
    pub(crate) fn keeps_open(&self) -> bool {
        self.max_open > 0
    }

    /// The cached copy of `raw_path`, if it is still exactly the file on disk for a
    /// request read at `read_at` (or later): [`FileCache::get`] then
    /// [`FileCache::is_fresh`].
    #[cfg(test)]
    pub(crate) fn get_fresh(&self, raw_path: &str, read_at: Instant) -> Option<Arc<CachedFile>> {
        let cached = self.get(raw_path)?;
        self.is_fresh(raw_path, &cached, read_at).then_some(cached)
    }

    /// The entry for `raw_path`, unchecked.
    pub(crate) fn get(&self, raw_path: &str) -> Option<Arc<CachedFile>> {
        if self.max_file == 0 && self.max_open == 0 {
            return None;
        }
        self.files
            .read()
            .unwrap_or_else(|p| p.into_inner())
            .get(raw_path)
            .cloned()
    }

    /// Whether `cached` (the entry of `raw_path`) is still exactly the file on disk for a
    /// request read at `read_at` (or later).
    ///
    /// Makes one `stat` call on the calling thread, unless one begun after `read_at`
    /// already found the file unchanged, or the entry is armed and a drain of the watcher
    /// begun after `read_at` (this one's, if need be) saw no event for it: cheap for local
    /// files, and the price of never serving a stale copy.
    pub(crate) fn is_fresh(&self, raw_path: &str, cached: &CachedFile, read_at: Instant) -> bool {
        let fresh = self.is_current(raw_path, cached, read_at);
        if fresh {
            self.touch(cached);
        }
        fresh
    }

    /// Marks `cached` as just used, for the choice of what to evict.
    pub(crate) fn touch(&self, cached: &CachedFile) {
        cached.last_used.store(
            self.clock.fetch_add(1, Ordering::Relaxed),
            Ordering::Relaxed,
        );
    }

    /// [`FileCache::is_fresh`] without [`FileCache::touch`].
    pub(crate) fn is_current(&self, raw_path: &str, cached: &CachedFile, read_at: Instant) -> bool {
        let read_ns = self.since_epoch(read_at);
        let checked = cached.checked.load(Ordering::Acquire);
        let restat_due = read_ns.saturating_sub(checked) >= RESTAT_AFTER.as_nanos() as u64;
        checked > read_ns
            || (!restat_due
                && self
                    .watcher
                    .as_ref()
                    .is_some_and(|w| w.vouches(&cached.watch, read_ns, || self.now())))
            || self.unchanged_on_disk(raw_path, cached)
    }

    /// The `stat`: whether `raw_path` is still the cached version. Arms the entry when it
    /// can be watched.
    fn unchanged_on_disk(&self, raw_path: &str, cached: &CachedFile) -> bool {
        let arming = self
            .watcher
            .as_ref()
            .and_then(|w| w.arming(raw_path, &cached.watch, || self.now()));
        let began = self.now();
        self.stats.fetch_add(1, Ordering::Relaxed);
        let Ok(metadata) = std::fs::metadata(raw_path) else {
            return false;
        };
        if !metadata.is_file() || Identity::of(&metadata) != cached.identity {
            return false;
        }
        cached.checked.fetch_max(began, Ordering::AcqRel);
        if let (Some(watcher), Some(arming)) = (&self.watcher, arming) {
            watcher.arm(&cached.watch, arming);
        }
        true
    }

    /// Whether a request read at `read_at` for `cached` should let the event loop's other
    /// ready connections be read before it asks [`FileCache::is_fresh`]: the file is hot,
    /// and its last check (its `stat`, or for an armed entry the last drain) began before
    /// the request was read, so one of those requests' check (or this one's, made after
    /// theirs are read) serves them all.
    pub(crate) fn worth_waiting(&self, cached: &CachedFile, read_at: Instant) -> bool {
        let last = match &self.watcher {
            Some(watcher) if cached.watch.is_armed() => watcher.drained(),
            _ => cached.checked.load(Ordering::Acquire),
        };
        let read_at = self.since_epoch(read_at);
        last != 0 && last <= read_at && read_at - last < HOT.as_nanos() as u64
    }

    /// Noted before a check proves `cached` current, for a copy of it to be proved current
    /// later without reading the entry ([`FileCache::vouch`]): `None` unless the entry is
    /// armed and still cached.
    pub(crate) fn note(&self, cached: &CachedFile) -> Option<Noted> {
        self.watcher.as_ref()?;
        // The count first: a disarming or a retirement after it moves it.
        let changes = inotify::changes();
        let checked = cached.checked.load(Ordering::Acquire);
        (cached.watch.is_armed() && !cached.is_retired()).then_some(Noted { changes, checked })
    }

    /// What [`FileCache::is_current`] would say of an entry noted `noted` (and since proved
    /// current) for a request read at `read_at`, from the process's count of changes and
    /// the watcher's last drain only: no line of the entry is read.
    pub(crate) fn vouch(&self, noted: Noted, read_at: Instant) -> Vouch {
        let Some(watcher) = &self.watcher else {
            return Vouch::Unknown;
        };
        let read_ns = self.since_epoch(read_at);
        // The restat the entry itself would be due (its `checked` may have moved since it
        // was noted: then this copy is only checked sooner).
        if read_ns.saturating_sub(noted.checked) >= RESTAT_AFTER.as_nanos() as u64 {
            return Vouch::Unknown;
        }
        let drained = watcher.drained();
        if inotify::changes() != noted.changes {
            return Vouch::Unknown;
        }
        if drained > read_ns {
            return Vouch::Current;
        }
        Vouch::AfterDrain {
            worth_waiting: drained != 0 && read_ns - drained < HOT.as_nanos() as u64,
        }
    }

    /// For [`Vouch::AfterDrain`]: drains if no drain has begun since `read_at`, and says
    /// whether the copy noted `noted` is current; false also when another loop is draining
    /// (then the entry is checked as [`FileCache::is_current`] checks it).
    pub(crate) fn vouch_after_drain(&self, noted: Noted, read_at: Instant) -> bool {
        self.watcher.as_ref().is_some_and(|watcher| {
            watcher.vouches_unchanged(noted.changes, self.since_epoch(read_at), || self.now())
        })
    }

    /// Keeps `file` for `raw_path`, evicting the least recently used entries of its kind
    /// if needed.
    pub(crate) fn insert(&self, raw_path: &str, file: CachedFile) -> Arc<CachedFile> {
        let file = Arc::new(file);
        let len = file.bytes();
        let open = file.is_open();
        if (open && !self.keeps_open()) || (!open && !self.admits(len)) {
            return file;
        }
        file.last_used.store(
            self.clock.fetch_add(1, Ordering::Relaxed),
            Ordering::Relaxed,
        );
        let mut files = self.files.write().unwrap_or_else(|p| p.into_inner());
        if let Some(old) = files.remove(raw_path) {
            self.forget(&old);
        }
        let full = |cache: &FileCache| {
            if open {
                cache.open.load(Ordering::Relaxed) >= cache.max_open
            } else {
                cache.used.load(Ordering::Relaxed) + len > cache.budget
            }
        };
        while full(self) {
            let Some(victim) = files
                .iter()
                .filter(|(_, f)| f.is_open() == open)
                .min_by_key(|(_, f)| f.last_used.load(Ordering::Relaxed))
                .map(|(k, _)| Arc::clone(k))
            else {
                break;
            };
            if let Some(old) = files.remove(&victim) {
                self.forget(&old);
            }
        }
        if open {
            self.open.fetch_add(1, Ordering::Relaxed);
        } else {
            self.used.fetch_add(len, Ordering::Relaxed);
        }
        files.insert(Arc::from(raw_path), Arc::clone(&file));
        file
    }

    /// Drops the entry holding `file` open: a transfer found it changed, so the next
    /// request opens the path afresh even if no event has told the watcher yet.
    pub(crate) fn evict_open(&self, file: &File) {
        let mut files = self.files.write().unwrap_or_else(|p| p.into_inner());
        let holding = files
            .iter()
            .find(|(_, f)| matches!(&f.content, Content::Open(open) if std::ptr::eq(Arc::as_ptr(open), file)))
            .map(|(k, _)| Arc::clone(k));
        if let Some(old) = holding.and_then(|key| files.remove(&key)) {
            self.forget(&old);
        }
    }

    fn forget(&self, old: &CachedFile) {
        old.retired.store(true, Ordering::Release);
        inotify::note_change();
        if old.is_open() {
            self.open.fetch_sub(1, Ordering::Relaxed);
        } else {
            self.used.fetch_sub(old.bytes(), Ordering::Relaxed);
        }
    }

    /// Descriptors held open.
    #[cfg(test)]
    pub(crate) fn open_files(&self) -> usize {
        self.open.load(Ordering::Relaxed)
    }

    /// `stat` calls made to prove copies current.
    pub(crate) fn stat_calls(&self) -> u64 {
        self.stats.load(Ordering::Relaxed)
    }

    /// Drains of the watcher made to prove copies current.
    pub(crate) fn drains(&self) -> u64 {
        self.watcher.as_ref().map_or(0, Watcher::drains)
    }

    /// Mount-table changes the watcher saw: after each, every copy is checked with a
    /// `stat` again.
    pub(crate) fn mount_changes(&self) -> u64 {
        self.watcher.as_ref().map_or(0, Watcher::mount_changes)
    }

    /// inotify watches held.
    pub(crate) fn watches(&self) -> usize {
        self.watcher.as_ref().map_or(0, Watcher::watches)
    }

    /// Bytes held.
    pub(crate) fn used_bytes(&self) -> u64 {
        self.used.load(Ordering::Relaxed)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn entry(path: &std::path::Path, bytes: &[u8]) -> CachedFile {
        std::fs::write(path, bytes).expect("write");
        let metadata = std::fs::metadata(path).expect("stat");
        let facts = FileFacts::new(
            path,
            metadata.len(),
            metadata.modified().expect("mtime"),
            &axum::http::HeaderValue::from_static("public"),
        );
        CachedFile::new(
            Content::Memory(Bytes::copy_from_slice(bytes)),
            &metadata,
            facts,
        )
    }

    fn opened(path: &std::path::Path) -> CachedFile {
        let file = File::open(path).expect("open");
        let metadata = file.metadata().expect("stat");
        let facts = FileFacts::new(
            path,
            metadata.len(),
            metadata.modified().expect("mtime"),
            &axum::http::HeaderValue::from_static("public"),
        );
        CachedFile::new(Content::Open(Arc::new(file)), &metadata, facts)
    }

    /// The entry of `path` if fresh for a request read now.
    fn fresh(cache: &FileCache, path: &std::path::Path) -> Option<Arc<CachedFile>> {
        cache.get_fresh(path.to_str().expect("utf8"), Instant::now())
    }

    /// A cache holding `a.mp3` ("version 1") in `dir`.
    fn one_cached_file(dir: &tempfile::TempDir) -> (std::path::PathBuf, FileCache) {
        let path = dir.path().join("a.mp3");
        let cache = FileCache::new(1000, 10_000, 10, 0);
        cache.insert(path.to_str().expect("utf8"), entry(&path, b"version 1"));
        (path, cache)
    }

    fn memory(cached: &CachedFile) -> &[u8] {
        match &cached.content {
            Content::Memory(bytes) => bytes,
            Content::Open(_) => b"(open file)",
            Content::Offload(_) => b"(offload)",
        }
    }

    #[test]
    fn a_replaced_or_rewritten_file_is_not_served_from_memory() {
        let dir = tempfile::tempdir().expect("tempdir");
        let (path, cache) = one_cached_file(&dir);
        let raw = path.to_str().expect("utf8");
        assert_eq!(memory(&fresh(&cache, &path).expect("fresh")), b"version 1");

        // Replaced by rename: new inode.
        let tmp = dir.path().join("tmp");
        std::fs::write(&tmp, b"version 2").expect("write");
        std::fs::rename(&tmp, &path).expect("rename");
        assert!(fresh(&cache, &path).is_none());

        // Rewritten in place with the same length: new mtime.
        cache.insert(raw, entry(&path, b"version 3"));
        std::thread::sleep(std::time::Duration::from_millis(5));
        std::fs::write(&path, b"version 4").expect("write");
        assert!(fresh(&cache, &path).is_none());

        // The same holds for an open descriptor.
        cache.insert(raw, opened(&path));
        assert!(fresh(&cache, &path).is_some_and(|c| c.is_open()));
        std::thread::sleep(std::time::Duration::from_millis(5));
        std::fs::write(&path, b"version 5").expect("write");
        assert!(fresh(&cache, &path).is_none());

        std::fs::remove_file(&path).expect("rm");
        assert!(fresh(&cache, &path).is_none());
    }

    #[test]
    fn one_check_serves_the_requests_read_before_it_began_and_no_later_one() {
        let dir = tempfile::tempdir().expect("tempdir");
        let (path, cache) = one_cached_file(&dir);
        let raw = path.to_str().expect("utf8");
        let read_early = Instant::now();
        let first = cache.get(raw).expect("cached");
        assert!(
            !cache.worth_waiting(&first, read_early),
            "never checked: not known to be hot"
        );
        assert!(cache.get_fresh(raw, read_early).is_some(), "checked now");
        assert!(
            !cache.worth_waiting(&first, read_early),
            "checked after it was read: no wait"
        );
        let read_late = Instant::now();
        assert!(
            cache.worth_waiting(&first, read_late),
            "read after the check, which is recent: hot"
        );

        // Replaced by rename after that check.
        let tmp = dir.path().join("tmp");
        std::fs::write(&tmp, b"version 2").expect("write");
        std::fs::rename(&tmp, &path).expect("rename");
        // A request read before the check began could not have been sent after the rename:
        // the check covers it. Any request read since gets a check of its own.
        assert!(cache.get_fresh(raw, read_early).is_some());
        assert!(cache.get_fresh(raw, read_late).is_none());
        assert!(fresh(&cache, &path).is_none());
        // A request waiting long after the last check is not worth waiting for.
        cache.insert(raw, entry(&path, b"version 3"));
        assert!(cache.get_fresh(raw, Instant::now()).is_some());
        std::thread::sleep(HOT * 2);
        let third = cache.get(raw).expect("cached");
        assert!(!cache.worth_waiting(&third, Instant::now()));
    }

    /// A watching cache holding `d/a.mp3` ("version 1") in `dir`, checked once (armed).
    fn one_watched_file(
        dir: &tempfile::TempDir,
        watches: usize,
    ) -> (std::path::PathBuf, FileCache) {
        let sub = dir.path().join("d");
        std::fs::create_dir(&sub).expect("mkdir");
        let path = sub.join("a.mp3");
        let cache = FileCache::new(1000, 10_000, 10, watches);
        cache.insert(path.to_str().expect("utf8"), entry(&path, b"version 1"));
        assert!(fresh(&cache, &path).is_some(), "the first check: a stat");
        (path, cache)
    }

    /// Whether a check for a request read now needed no `stat` (and found it fresh).
    ///
    /// Another program mounting something meanwhile (the suite runs network namespaces
    /// and tmpfs mounts beside the unit tests) makes the watcher drop every watch, as it
    /// must; that check's `stat` arms the entry again, so the check is then made again.
    fn vouched_without_stat(cache: &FileCache, path: &std::path::Path) -> bool {
        loop {
            let (stats, mounts) = (cache.stat_calls(), cache.mount_changes());
            let vouched = fresh(cache, path).is_some() && cache.stat_calls() == stats;
            if vouched || cache.mount_changes() == mounts {
                return vouched;
            }
        }
    }

    /// Whether a check for a request read now made a `stat` (and found it fresh).
    fn needed_a_stat(cache: &FileCache, path: &std::path::Path) -> bool {
        let stats = cache.stat_calls();
        fresh(cache, path).is_some() && cache.stat_calls() > stats
    }

    /// Puts `bytes` in place at `path` again, as a new entry, checked once.
    fn recache(cache: &FileCache, path: &std::path::Path, bytes: &[u8]) {
        cache.insert(path.to_str().expect("utf8"), entry(path, bytes));
        assert!(fresh(cache, path).is_some());
    }

    #[test]
    fn a_watched_file_needs_no_stat_until_anything_on_its_path_changes() {
        let dir = tempfile::tempdir().expect("tempdir");
        let (path, cache) = one_watched_file(&dir, 100);
        assert!(
            cache.watches() >= 3,
            "directories and the file: {}",
            cache.watches()
        );
        for _ in 0..3 {
            assert!(vouched_without_stat(&cache, &path));
        }
        assert!(cache.drains() >= 3);

        // Replaced by rename.
        let tmp = dir.path().join("tmp");
        std::fs::write(&tmp, b"version 2").expect("write");
        std::fs::rename(&tmp, &path).expect("rename");
        assert!(fresh(&cache, &path).is_none(), "renamed over");

        // Rewritten in place, same length.
        recache(&cache, &path, b"version 3");
        assert!(vouched_without_stat(&cache, &path));
        std::fs::write(&path, b"version 4").expect("write");
        assert!(fresh(&cache, &path).is_none(), "rewritten");

        // Written through a hard link in a directory nobody watches.
        recache(&cache, &path, b"version 5");
        let elsewhere = tempfile::tempdir().expect("tempdir");
        let link = elsewhere.path().join("b.mp3");
        std::fs::hard_link(&path, &link).expect("link");
        assert!(fresh(&cache, &path).is_some(), "a new link changes nothing");
        assert!(vouched_without_stat(&cache, &path));
        std::fs::write(&link, b"version 6").expect("write");
        assert!(
            fresh(&cache, &path).is_none(),
            "written through another link"
        );

        // Its directory swapped for another holding the same name.
        recache(&cache, &path, b"version 7");
        assert!(vouched_without_stat(&cache, &path));
        let sub = path.parent().expect("parent");
        std::fs::rename(sub, dir.path().join("d.old")).expect("rename dir");
        std::fs::create_dir(sub).expect("mkdir");
        std::fs::write(&path, b"version 8").expect("write");
        assert!(fresh(&cache, &path).is_none(), "directory swapped");

        // Deleted.
        recache(&cache, &path, b"version 9");
        assert!(vouched_without_stat(&cache, &path));
        std::fs::remove_file(&path).expect("rm");
        assert!(fresh(&cache, &path).is_none(), "deleted");
    }

    #[test]
    fn a_request_never_waits_for_another_loops_drain_and_is_still_never_stale() {
        let dir = tempfile::tempdir().expect("tempdir");
        let (path, cache) = one_watched_file(&dir, 100);
        assert!(vouched_without_stat(&cache, &path));
        let watcher = cache.watcher.as_ref().expect("watcher");
        // Another event loop draining (holding the tables) while this one checks a request.
        let held = watcher.hold_tables();
        let stats = cache.stat_calls();
        assert!(fresh(&cache, &path).is_some(), "served, without waiting");
        assert_eq!(
            cache.stat_calls(),
            stats + 1,
            "proved current by its own stat"
        );
        std::fs::write(&path, b"version 2").expect("write");
        assert!(
            fresh(&cache, &path).is_none(),
            "a change is seen by that stat"
        );
        drop(held);
    }

    #[test]
    fn a_drain_vouches_only_for_requests_read_before_it_began() {
        let dir = tempfile::tempdir().expect("tempdir");
        let (path, cache) = one_watched_file(&dir, 100);
        let raw = path.to_str().expect("utf8");
        let read_early = Instant::now();
        assert!(cache.get_fresh(raw, read_early).is_some());
        let tmp = dir.path().join("tmp");
        std::fs::write(&tmp, b"version 2").expect("write");
        std::fs::rename(&tmp, &path).expect("rename");
        // Sent before the rename: the copy was current then.
        assert!(cache.get_fresh(raw, read_early).is_some());
        assert!(cache.get_fresh(raw, Instant::now()).is_none());
    }

    #[test]
    fn what_cannot_be_watched_stays_on_a_stat_and_is_never_stale() {
        // Through a symbolic link: the link could be pointed elsewhere with no event on
        // the way the path is spelled.
        let dir = tempfile::tempdir().expect("tempdir");
        let real = dir.path().join("real");
        std::fs::create_dir(&real).expect("mkdir");
        std::os::unix::fs::symlink(&real, dir.path().join("link")).expect("symlink");
        let path = dir.path().join("link/a.mp3");
        let cache = FileCache::new(1000, 10_000, 10, 100);
        recache(&cache, &path, b"version 1");
        assert!(
            needed_a_stat(&cache, &path),
            "a symlinked path: a stat each time"
        );
        std::fs::write(real.join("tmp"), b"version 2").expect("write");
        std::fs::rename(real.join("tmp"), real.join("a.mp3")).expect("rename");
        assert!(fresh(&cache, &path).is_none());

        // Past the watch limit: too deep for two watches.
        let dir = tempfile::tempdir().expect("tempdir");
        let (path, cache) = one_watched_file(&dir, 2);
        assert_eq!(cache.watches(), 0);
        assert!(
            needed_a_stat(&cache, &path),
            "over the limit: a stat each time"
        );
        std::fs::write(&path, b"version 2").expect("write");
        assert!(fresh(&cache, &path).is_none());
    }

    #[test]
    fn an_armed_copy_is_still_checked_with_a_stat_once_its_last_is_old() {
        // Writes through a shared mmap or Linux AIO queue no inotify event.
        let dir = tempfile::tempdir().expect("tempdir");
        let (path, cache) = one_watched_file(&dir, 100);
        assert!(vouched_without_stat(&cache, &path));
        std::thread::sleep(RESTAT_AFTER);
        assert!(needed_a_stat(&cache, &path), "a stat after RESTAT_AFTER");
        assert!(vouched_without_stat(&cache, &path), "then vouched again");
    }

    #[test]
    fn a_transfer_that_found_its_file_changed_evicts_the_open_entry() {
        let dir = tempfile::tempdir().expect("tempdir");
        let path = dir.path().join("large.mp3");
        std::fs::write(&path, b"large").expect("write");
        let cache = FileCache::new(0, 0, 2, 100);
        let cached = cache.insert(path.to_str().expect("utf8"), opened(&path));
        assert!(fresh(&cache, &path).is_some());
        let Content::Open(file) = &cached.content else {
            panic!("kept open");
        };
        cache.evict_open(file);
        assert!(fresh(&cache, &path).is_none());
        assert_eq!(cache.open_files(), 0);
    }

    #[test]
    fn lost_events_disarm_every_entry_until_its_next_stat() {
        let dir = tempfile::tempdir().expect("tempdir");
        let (path, cache) = one_watched_file(&dir, 100);
        assert!(vouched_without_stat(&cache, &path));
        // More events than the kernel queues: some are lost.
        let queue: usize = std::fs::read_to_string("/proc/sys/fs/inotify/max_queued_events")
            .expect("max_queued_events")
            .trim()
            .parse()
            .expect("a number");
        // Attribute changes of two other names in its directory, alternated so the kernel
        // cannot merge them: fast enough to stay well inside RESTAT_AFTER.
        let sub = path.parent().expect("parent");
        let others: Vec<std::fs::File> = ["x", "y"]
            .iter()
            .map(|name| std::fs::File::create(sub.join(name)).expect("create"))
            .collect();
        let started = Instant::now();
        for i in 0..=queue {
            let now = std::time::SystemTime::now();
            let times = std::fs::FileTimes::new()
                .set_accessed(now)
                .set_modified(now);
            others[i % 2].set_times(times).expect("utimes");
        }
        assert!(
            started.elapsed() < RESTAT_AFTER / 2,
            "{:?}",
            started.elapsed()
        );
        let stats = cache.stat_calls();
        assert!(fresh(&cache, &path).is_some(), "unchanged");
        assert_eq!(
            cache.stat_calls(),
            stats + 1,
            "checked with a stat after the overflow"
        );
        assert!(vouched_without_stat(&cache, &path), "and armed again");
    }

    #[test]
    fn open_descriptors_stay_within_their_cap() {
        let dir = tempfile::tempdir().expect("tempdir");
        let cache = FileCache::new(0, 0, 2, 0);
        let paths: Vec<_> = (0..3).map(|i| dir.path().join(format!("{i}"))).collect();
        for path in &paths {
            std::fs::write(path, b"large").expect("write");
            cache.insert(path.to_str().expect("utf8"), opened(path));
        }
        assert_eq!(cache.open_files(), 2);
        assert!(fresh(&cache, &paths[0]).is_none());
        assert!(fresh(&cache, &paths[2]).is_some());
        assert_eq!(cache.used_bytes(), 0);
    }

    #[test]
    fn memory_stays_within_budget_evicting_the_least_recently_used() {
        let dir = tempfile::tempdir().expect("tempdir");
        let cache = FileCache::new(400, 1000, 0, 0);
        let paths: Vec<_> = (0..4).map(|i| dir.path().join(format!("{i}"))).collect();
        for path in &paths[..3] {
            cache.insert(path.to_str().expect("utf8"), entry(path, &[0u8; 300]));
        }
        // Touch the first so the second is the least recently used.
        assert!(fresh(&cache, &paths[0]).is_some());
        cache.insert(
            paths[3].to_str().expect("utf8"),
            entry(&paths[3], &[0u8; 300]),
        );
        assert!(cache.used_bytes() <= 1000);
        assert!(fresh(&cache, &paths[1]).is_none());
        assert!(fresh(&cache, &paths[0]).is_some());
        // Too big for the cache: not kept.
        let big = dir.path().join("big");
        cache.insert(big.to_str().expect("utf8"), entry(&big, &[0u8; 500]));
        assert!(fresh(&cache, &big).is_none());
    }
}
