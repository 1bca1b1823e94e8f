//! Kernel notification that cached files did not change: one `epoll_wait` per loop turn where a
//! `stat` per hot file was needed.
//!
//! [`super::cache`] proves a copy current with a `stat` begun after its request was read.
//! One `stat` serves every request for that file read before it, but a loop turn serving
//! many *different* small files still makes one `stat` each: 12 % of musicd's CPU serving
//! 1,000 small files at random. This module lets one drain of an inotify descriptor vouch
//! for all of them, with the same promise:
//!
//! * **What is watched.** For a cached `/a/b/f.mp3`: each directory on the way (`/`, `/a`,
//!   `/a/b`) for names being created, deleted, renamed or changing attributes, and the file
//!   itself for writes and attribute changes through any of its links. Each watch records
//!   which entries depend on which name in it, so an event disarms only what it can change.
//! * **Armed.** An entry is armed once its watches are in place and a `stat` begun after
//!   that found the file unchanged ([`Watcher::arming`], then [`Watcher::arm`]). An event
//!   naming it disarms it (its `dirty` count moves) and drops its registration, so the next
//!   `stat` watches whatever the path names by then.
//! * **Drained.** A drain ([`Watcher::drain`]) reads every event queued before it began,
//!   disarms what they name, then publishes when it began. A change queues its event before
//!   the system call making it returns, so an armed entry is current for any request read
//!   after such a call returned and before the last drain began.
//! * **Where that is weaker than a `stat`, and what covers it.** The event is queued at the
//!   end of the call, after its effect is visible (a truncation frees blocks in between):
//!   a request read in that window may still get the old version, as if it had been read
//!   just before the call. A transfer that notices its file changed under it evicts the
//!   entry (`FileCache::evict_open`), so a client retrying after such a cut gets the new
//!   version. Writes through a shared `mmap` and Linux AIO queue no event at all, so an
//!   armed entry is still `stat`ed once its last `stat` is [`RESTAT_AFTER`] old: those
//!   writers are seen within that time, as they would be by the `stat`'s mtime anyway.
//! * **What stays on `stat`.** A path through a symbolic link, `.` or `..` (what it names
//!   could change without an event on the way); a directory or file not on a local
//!   filesystem (NFS, SMB, FUSE and other network filesystems change without telling this
//!   kernel; trusted are ext2/3/4, XFS, Btrfs, tmpfs, F2FS and overlayfs, the root of most
//!   containers); a watch the kernel refuses
//!   (`fs.inotify.max_user_watches`, shared by every process of the user) or past
//!   `cache.file_watches`, which also logs one warning. Those entries keep the `stat` per
//!   loop turn, so reaching a limit costs speed, never correctness.
//! * **Lost certainty.** A queue overflow (events lost) or a change of the mount table (a
//!   mount over a directory on the way changes what a path names without any event) drops
//!   every watch and disarms every entry; they are armed again by their next `stat`.
//!
//! The descriptor is read only under the tables' lock, so no drain can publish its start
//! while another holds events it has not applied yet. Registration checks the path
//! (`statfs`, `lstat`) before taking the lock, so a slow filesystem stalls only the
//! request that asked, not every loop's drain.

use std::collections::HashMap;
use std::fs::File;
use std::mem::MaybeUninit;
use std::os::fd::OwnedFd;
use std::path::{Component, Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, TryLockError, Weak};

use rustix::event::{Timespec, epoll};
use rustix::fs::inotify::{self, CreateFlags, ReadFlags, WatchFlags};
use rustix::io::Errno;

/// What [`Watcher::news`] says an event is about.
const INOTIFY: u64 = 0;
const MOUNTS: u64 = 1;

/// A directory on the way: its names coming, going, renamed, or changing attributes, and
/// itself being moved or deleted. `ONLYDIR | DONT_FOLLOW`: a symbolic link is refused.
fn directory_events() -> WatchFlags {
    WatchFlags::CREATE
        | WatchFlags::DELETE
        | WatchFlags::MOVED_FROM
        | WatchFlags::MOVED_TO
        | WatchFlags::ATTRIB
        | WatchFlags::DELETE_SELF
        | WatchFlags::MOVE_SELF
        | WatchFlags::ONLYDIR
        | WatchFlags::DONT_FOLLOW
}

/// The file: written, truncated, touched, through whichever link.
fn file_events() -> WatchFlags {
    WatchFlags::MODIFY
        | WatchFlags::ATTRIB
        | WatchFlags::CLOSE_WRITE
        | WatchFlags::DELETE_SELF
        | WatchFlags::MOVE_SELF
        | WatchFlags::DONT_FOLLOW
}

/// Filesystems whose every change is made by this kernel on the inode watched, so inotify
/// sees it.
const TRUSTED_FILESYSTEMS: [u64; 6] = [
    0xEF53,      // ext2, ext3, ext4
    0x5846_5342, // XFS
    0x9123_683E, // Btrfs
    0x0102_1994, // tmpfs
    0xF2F5_2010, // F2FS
    // overlayfs, a container's root: changes made through it are reported. Changing its
    // layers behind its back is undefined for the kernel itself ("Changes to underlying
    // filesystems", Documentation/filesystems/overlayfs.rst), and still met by RESTAT_AFTER.
    0x794C_7630,
];

/// An armed entry is `stat`ed again once its last `stat` is this old: changes inotify never
/// reports (shared `mmap`, Linux AIO) are seen within it.
pub(crate) const RESTAT_AFTER: std::time::Duration = std::time::Duration::from_secs(1);

/// Registrations between sweeps of dead entries and unused watches.
const SWEEP_EVERY: usize = 1024;

/// One cache entry's standing with the watcher.
#[derive(Debug, Default)]
pub(crate) struct EntryWatch {
    /// Moves with every event that names the entry.
    dirty: AtomicU64,
    /// `dirty + 1` as it was when the entry was last armed; 0: never.
    armed: AtomicU64,
    /// Its watches are in place for the path as it is.
    registered: AtomicBool,
    /// It cannot be watched (see the module doc): it stays on `stat`.
    unwatchable: AtomicBool,
}

/// Moves after every entry is disarmed, and after a cache entry is retired
/// ([`note_change`]): while it stands still, no entry armed when it was read has been
/// disarmed since. So a copy of an entry (`crate::http::hot`) noted armed with this count
/// needs no look at the entry itself while the count holds, one load of a line every
/// event loop keeps, where the entry's own lines were a cache miss a request. One count
/// for the process: a change in one cache costs another's copies a look at their
/// entries, never a wrong answer.
static CHANGES: AtomicU64 = AtomicU64::new(0);

/// The count of [`CHANGES`]; loaded before what it vouches for (`Acquire`).
pub(crate) fn changes() -> u64 {
    CHANGES.load(Ordering::Acquire)
}

/// Moves [`CHANGES`], after the change it tells of.
pub(crate) fn note_change() {
    CHANGES.fetch_add(1, Ordering::AcqRel);
}

impl EntryWatch {
    /// Whether no event named it since it was last armed.
    pub(crate) fn is_armed(&self) -> bool {
        let armed = self.armed.load(Ordering::Acquire);
        armed != 0 && armed == self.dirty.load(Ordering::Acquire).wrapping_add(1)
    }

    fn disarm(&self) {
        self.registered.store(false, Ordering::Release);
        self.dirty.fetch_add(1, Ordering::AcqRel);
        note_change();
    }
}

/// What [`Watcher::arming`] saw before the `stat` that may arm an entry.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Arming {
    dirty: u64,
}

/// Entries depending on one name, by address.
type Dependents = HashMap<usize, Weak<EntryWatch>>;

/// One watch: the entries depending on each name in it (`b""`: on the watched file itself).
#[derive(Default)]
struct Watched {
    names: HashMap<Box<[u8]>, Dependents>,
}

impl Watched {
    fn disarm_all(&self) {
        for dependents in self.names.values() {
            disarm(dependents);
        }
    }
}

fn disarm(dependents: &Dependents) {
    for entry in dependents.values().filter_map(Weak::upgrade) {
        entry.disarm();
    }
}

struct Tables {
    watches: HashMap<i32, Watched>,
    since_sweep: usize,
    warned_full: bool,
}

/// Why an entry cannot be watched.
#[derive(Debug, PartialEq, Eq)]
enum Refusal {
    /// Not a plain path on a trusted filesystem, or not readable.
    Path,
    /// `cache.file_watches` or the kernel's limit reached.
    Full,
}

/// The process's inotify descriptor and what depends on each of its watches.
pub(crate) struct Watcher {
    inotify: OwnedFd,
    /// `/proc/self/mountinfo`, which `poll` reports as changed when the mount table changes.
    /// Only `news` reads it, and only while it is open: epoll forgets a closed file.
    _mounts: File,
    /// An epoll set of the two, level-triggered: a drain asks it once whether either has
    /// news. Asking is one check of its ready list, where `poll` of the two descriptors
    /// asked each (and copied them in and out): a drain is made nearly once a request when
    /// a loop serves a few requests a turn.
    news: OwnedFd,
    limit: usize,
    /// When the last complete drain began, in ns since the cache's epoch.
    drained: AtomicU64,
    tables: Mutex<Tables>,
    watches: AtomicUsize,
    drains: AtomicU64,
    /// Times the mount table changed and every watch was dropped.
    mount_changes: AtomicU64,
}

impl Watcher {
    /// A watcher holding at most `limit` watches; `None` when the kernel offers no inotify
    /// or no mount-table notification (then every entry stays on `stat`).
    pub(crate) fn new(limit: usize) -> Option<Watcher> {
        if limit == 0 {
            return None;
        }
        let opened = inotify::init(CreateFlags::NONBLOCK | CreateFlags::CLOEXEC)
            .map_err(std::io::Error::from)
            .and_then(|inotify| Ok((inotify, File::open("/proc/self/mountinfo")?)))
            .and_then(|(inotify, mounts)| {
                let news = epoll::create(epoll::CreateFlags::CLOEXEC)?;
                epoll::add(
                    &news,
                    &inotify,
                    epoll::EventData::new_u64(INOTIFY),
                    epoll::EventFlags::IN,
                )?;
                epoll::add(
                    &news,
                    &mounts,
                    epoll::EventData::new_u64(MOUNTS),
                    epoll::EventFlags::PRI,
                )?;
                Ok((inotify, mounts, news))
            });
        let (inotify, mounts, news) = match opened {
            Ok(both) => both,
            Err(err) => {
                tracing::warn!(error = %err, "no inotify: hot files are checked with a stat per loop turn");
                return None;
            }
        };
        Some(Watcher {
            inotify,
            _mounts: mounts,
            news,
            limit,
            drained: AtomicU64::new(0),
            tables: Mutex::new(Tables {
                watches: HashMap::new(),
                since_sweep: 0,
                warned_full: false,
            }),
            watches: AtomicUsize::new(0),
            drains: AtomicU64::new(0),
            mount_changes: AtomicU64::new(0),
        })
    }

    /// Holds the tables as another event loop's drain would.
    #[cfg(test)]
    pub(super) fn hold_tables(&self) -> impl Drop + '_ {
        self.tables.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// The tables, unless another event loop holds them. The request paths never wait for
    /// that loop: on a machine whose cores are all busy, the holder can be preempted with
    /// the lock held, and every loop waiting on it stalled with it (the 4 KiB benchmark's
    /// p99 went from about 5 to 20-40 ms). They make their own `stat` instead.
    fn try_lock(&self) -> Option<MutexGuard<'_, Tables>> {
        match self.tables.try_lock() {
            Ok(tables) => Some(tables),
            Err(TryLockError::Poisoned(poisoned)) => Some(poisoned.into_inner()),
            Err(TryLockError::WouldBlock) => None,
        }
    }

    /// When the last complete drain began (ns since the cache's epoch; 0: never).
    pub(crate) fn drained(&self) -> u64 {
        self.drained.load(Ordering::Acquire)
    }

    /// Watches held.
    pub(crate) fn watches(&self) -> usize {
        self.watches.load(Ordering::Relaxed)
    }

    fn count_watches(&self, tables: &Tables) {
        self.watches.store(tables.watches.len(), Ordering::Relaxed);
    }

    /// Drains made.
    pub(crate) fn drains(&self) -> u64 {
        self.drains.load(Ordering::Relaxed)
    }

    /// Mount-table changes seen (each dropped every watch).
    pub(crate) fn mount_changes(&self) -> u64 {
        self.mount_changes.load(Ordering::Relaxed)
    }

    /// Whether `entry` is current for a request read at `read_ns`: armed, and no event
    /// for it queued before a drain begun after `read_ns`. Drains if none has begun since,
    /// unless another loop is draining now (its drain may have begun before the request
    /// was read): then false, and the caller makes a `stat`.
    pub(crate) fn vouches(
        &self,
        entry: &EntryWatch,
        read_ns: u64,
        now_ns: impl Fn() -> u64,
    ) -> bool {
        if !entry.is_armed() {
            return false;
        }
        // The drain's start is loaded before the entry: its disarming happened before.
        self.drained_after(read_ns, now_ns) && entry.is_armed()
    }

    /// Whether an entry armed when [`changes`] was `noted` is still armed for a request
    /// read at `read_ns`: [`Watcher::vouches`] for a copy that does not look at the entry.
    pub(crate) fn vouches_unchanged(
        &self,
        noted: u64,
        read_ns: u64,
        now_ns: impl Fn() -> u64,
    ) -> bool {
        // As in `vouches`: the drain's start first, then what its disarming moved.
        self.drained_after(read_ns, now_ns) && changes() == noted
    }

    /// Whether a drain begun after `read_ns` is complete: drains if none has begun since,
    /// unless another loop is draining now.
    fn drained_after(&self, read_ns: u64, now_ns: impl Fn() -> u64) -> bool {
        if self.drained() <= read_ns {
            let Some(mut tables) = self.try_lock() else {
                return false;
            };
            if self.drained() <= read_ns {
                self.drain_locked(&mut tables, now_ns());
            }
        }
        self.drained() > read_ns
    }

    fn drain_locked(&self, tables: &mut Tables, began: u64) {
        let immediately = Timespec {
            tv_sec: 0,
            tv_nsec: 0,
        };
        let mut ready = [epoll::Event {
            flags: epoll::EventFlags::empty(),
            data: epoll::EventData::new_u64(0),
        }; 2];
        let Ok(count) = epoll::wait(&self.news, &mut ready[..], Some(&immediately)) else {
            return;
        };
        self.drains.fetch_add(1, Ordering::Relaxed);
        let news = |source: u64| {
            ready[..count]
                .iter()
                .find(|event| event.data.u64() == source)
                .map_or(epoll::EventFlags::empty(), |event| event.flags)
        };
        let (events, mounts) = (news(INOTIFY), news(MOUNTS));
        if mounts.intersects(epoll::EventFlags::PRI | epoll::EventFlags::ERR) {
            tracing::info!(
                "the mount table changed: every cached file is checked with a stat again"
            );
            self.mount_changes.fetch_add(1, Ordering::Relaxed);
            self.forget_all(tables);
        }
        if events.contains(epoll::EventFlags::IN) && !self.read_events(tables) {
            return;
        }
        self.drained.fetch_max(began, Ordering::AcqRel);
    }

    /// Applies queued events until none is left; false when reading failed.
    fn read_events(&self, tables: &mut Tables) -> bool {
        let mut buffer = [MaybeUninit::<u8>::uninit(); 16 * 1024];
        let mut reader = inotify::Reader::new(&self.inotify, &mut buffer);
        loop {
            match reader.next() {
                Ok(event) => {
                    let name = event.file_name().map(|n| n.to_bytes());
                    if self.apply(tables, event.wd(), event.events(), name) {
                        // Everything was dropped: what is still queued names nothing.
                        return true;
                    }
                }
                Err(Errno::AGAIN) => return true,
                Err(Errno::INTR) => {}
                Err(err) => {
                    tracing::warn!(error = %err, "reading inotify failed; checking hot files with stat");
                    self.forget_all(tables);
                    return false;
                }
            }
        }
    }

    /// Disarms what one event names; true when it dropped every watch.
    fn apply(&self, tables: &mut Tables, wd: i32, flags: ReadFlags, name: Option<&[u8]>) -> bool {
        if flags.contains(ReadFlags::QUEUE_OVERFLOW) {
            tracing::warn!(
                "inotify queue overflowed: every cached file is checked with a stat again"
            );
            self.forget_all(tables);
            return true;
        }
        let Some(watched) = tables.watches.get(&wd) else {
            return false;
        };
        match name.filter(|n| !n.is_empty()) {
            Some(name) => {
                if let Some(dependents) = watched.names.get(name) {
                    disarm(dependents);
                }
            }
            // About the watched directory or file itself.
            None => watched.disarm_all(),
        }
        if flags.contains(ReadFlags::IGNORED) {
            tables.watches.remove(&wd);
            self.count_watches(tables);
        }
        false
    }

    /// Drops every watch and disarms every entry.
    fn forget_all(&self, tables: &mut Tables) {
        for (wd, watched) in tables.watches.drain() {
            watched.disarm_all();
            let _ = inotify::remove_watch(&self.inotify, wd);
        }
        self.count_watches(tables);
    }

    /// Before the `stat` that may arm `entry` (cached for `raw_path`): puts its watches
    /// in place if they are not, and notes its state. `None`: it stays on `stat`, for good
    /// or, while another loop holds the tables, for this request.
    pub(crate) fn arming(
        &self,
        raw_path: &str,
        entry: &Arc<EntryWatch>,
        now_ns: impl Fn() -> u64,
    ) -> Option<Arming> {
        if entry.unwatchable.load(Ordering::Relaxed) {
            return None;
        }
        // The path checks are slow (a `statfs` per level): made before the lock, and only
        // used if the entry still needs its watches once the lock is held.
        let accepted = match entry.registered.load(Ordering::Acquire) {
            true => None,
            false => match watchable(raw_path) {
                Some(plan) => Some(plan),
                None => {
                    entry.unwatchable.store(true, Ordering::Relaxed);
                    return None;
                }
            },
        };
        let mut tables = self.try_lock()?;
        if !entry.registered.load(Ordering::Acquire) {
            // Disarmed since it was seen registered: its watches may be on what the path
            // named before. No arming now; the next `stat` registers it again.
            let plan = accepted?;
            // Events already queued are about the path's past (the write that made this
            // version, the entry it replaces): applied now, they cannot disarm this one.
            self.drain_locked(&mut tables, now_ns());
            if let Err(refusal) = self.register(&mut tables, &plan, entry) {
                // Watches added before the refusal stay while the entry is cached.
                self.count_watches(&tables);
                if refusal == Refusal::Full && !tables.warned_full {
                    tables.warned_full = true;
                    tracing::warn!(
                        limit = self.limit,
                        "file watches exhausted (cache.file_watches or fs.inotify.max_user_watches): further hot files are checked with a stat per loop turn"
                    );
                }
                entry.unwatchable.store(true, Ordering::Relaxed);
                return None;
            }
            entry.registered.store(true, Ordering::Release);
        }
        // Taken under the lock: an event queued since the watches were added is applied
        // after this, and voids the arming.
        Some(Arming {
            dirty: entry.dirty.load(Ordering::Acquire),
        })
    }

    /// After a `stat` begun after [`Watcher::arming`] found the file unchanged.
    pub(crate) fn arm(&self, entry: &EntryWatch, arming: Arming) {
        entry
            .armed
            .store(arming.dirty.wrapping_add(1), Ordering::Release);
    }

    /// Adds the watches of a path [`watchable`] accepted. What the path names may change
    /// between that check and these watches; such a change queues an event after the
    /// entry's state is noted, and disarms it.
    fn register(
        &self,
        tables: &mut Tables,
        plan: &WatchPlan<'_>,
        entry: &Arc<EntryWatch>,
    ) -> Result<(), Refusal> {
        let full = |tables: &Tables| tables.watches.len() + plan.watches() > self.limit;
        if full(tables) || tables.since_sweep >= SWEEP_EVERY {
            self.sweep(tables);
            if full(tables) {
                return Err(Refusal::Full);
            }
        }
        for (directory, name) in &plan.directories {
            let wd = self.watch(directory, directory_events())?;
            depend(tables, wd, name.as_encoded_bytes(), entry);
        }
        let wd = self.watch(&plan.file, file_events())?;
        depend(tables, wd, b"", entry);
        tables.since_sweep += 1;
        self.count_watches(tables);
        Ok(())
    }

    fn watch(&self, path: &Path, flags: WatchFlags) -> Result<i32, Refusal> {
        inotify::add_watch(&self.inotify, path, flags).map_err(|err| match err {
            Errno::NOSPC => Refusal::Full,
            _ => Refusal::Path,
        })
    }

    /// Forgets entries no longer cached and removes the watches nothing depends on.
    fn sweep(&self, tables: &mut Tables) {
        tables.since_sweep = 0;
        tables.watches.retain(|wd, watched| {
            watched.names.retain(|_, dependents| {
                dependents.retain(|_, entry| entry.strong_count() > 0);
                !dependents.is_empty()
            });
            let used = !watched.names.is_empty();
            if !used {
                let _ = inotify::remove_watch(&self.inotify, *wd);
            }
            used
        });
        self.count_watches(tables);
    }
}

fn depend(tables: &mut Tables, wd: i32, name: &[u8], entry: &Arc<EntryWatch>) {
    tables
        .watches
        .entry(wd)
        .or_default()
        .names
        .entry(name.into())
        .or_default()
        .insert(Arc::as_ptr(entry) as usize, Arc::downgrade(entry));
}

/// The names of `raw_path` if it can be watched: spelled plainly, a regular file, and it
/// and every directory on the way on a trusted filesystem. A `statfs` per level and an
/// `lstat`, made before taking the watcher's lock.
fn watchable(raw_path: &str) -> Option<WatchPlan<'_>> {
    let mut at = PathBuf::from("/");
    let mut directories = Vec::new();
    for name in plain_names(raw_path)? {
        if !trusted(&at) {
            return None;
        }
        let directory = at.clone();
        at.push(name);
        directories.push((directory, name));
    }
    let is_file = std::fs::symlink_metadata(&at).is_ok_and(|m| m.file_type().is_file());
    (is_file && trusted(&at)).then_some(WatchPlan {
        directories,
        file: at,
    })
}

/// The watches one entry needs, as [`watchable`] found its path.
struct WatchPlan<'a> {
    /// Each directory on the way, with the name in it the path goes through.
    directories: Vec<(PathBuf, &'a std::ffi::OsStr)>,
    /// The file itself.
    file: PathBuf,
}

impl WatchPlan<'_> {
    fn watches(&self) -> usize {
        self.directories.len() + 1
    }
}

fn trusted(path: &Path) -> bool {
    // `f_type` is signed on some architectures and narrower on others; the magic numbers
    // are 32-bit.
    #[allow(clippy::unnecessary_cast)]
    rustix::fs::statfs(path)
        .is_ok_and(|fs| TRUSTED_FILESYSTEMS.contains(&((fs.f_type as i64 as u64) & 0xFFFF_FFFF)))
}

/// The names of an absolute path spelled plainly (no `.`, `..`, `//` or trailing `/`).
fn plain_names(raw_path: &str) -> Option<Vec<&std::ffi::OsStr>> {
    let mut names = Vec::new();
    let mut spelled = String::with_capacity(raw_path.len());
    for component in Path::new(raw_path).components() {
        match component {
            Component::RootDir => {}
            Component::Normal(name) => {
                spelled.push('/');
                spelled.push_str(name.to_str()?);
                names.push(name);
            }
            _ => return None,
        }
    }
    (!names.is_empty() && spelled == raw_path).then_some(names)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_plainly_spelled_absolute_paths_are_watched() {
        assert_eq!(plain_names("/srv/music/a.mp3").map(|n| n.len()), Some(3));
        for odd in [
            "srv/a.mp3",
            "/srv/../a.mp3",
            "/srv/./a.mp3",
            "/srv//a.mp3",
            "/srv/a.mp3/",
            "/",
        ] {
            assert!(plain_names(odd).is_none(), "{odd}");
        }
    }
}
