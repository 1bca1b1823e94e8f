//! The media: confining document paths to the media roots, and what kind of file each is
//! ([`mime`]).
//!
//! MongoDB's contents are trusted to name files, not to name *any* file: a path is served
//! only if, after resolving `..` and every symlink, it lies under one of the configured
//! (already canonical) media roots and is a regular file. This is the one place that
//! decides that; it is synchronous (it touches the file system) and is called from the
//! blocking pool.

pub(crate) mod mime;
pub mod probe;

use std::fs::{File, Metadata};
use std::io;
use std::path::{Component, Path, PathBuf};

/// Why a document's path is not served.
#[derive(Debug, thiserror::Error)]
pub(crate) enum MediaError {
    /// The path is relative, empty or contains a NUL byte.
    #[error("path is not an absolute file path")]
    NotAbsolute,
    /// After resolving symlinks the path lies outside every media root.
    #[error("path resolves outside the media roots")]
    OutsideRoots,
    /// Nothing exists at the path.
    #[error("file does not exist")]
    Missing,
    /// Something exists but it is not a regular file (directory, FIFO, device).
    #[error("not a regular file")]
    NotAFile,
    /// The path goes through a symlink and `follow_symlinks` is off.
    #[error("path goes through a symlink (follow_symlinks = false)")]
    Symlink,
    /// The file exists but cannot be read.
    #[error("file cannot be read: {0}")]
    Unreadable(#[source] io::Error),
    /// The process (or the system) is out of file descriptors or memory for the moment:
    /// nothing is wrong with the file, so the client is told to retry, not refused.
    #[error("out of resources opening the file: {0}")]
    Exhausted(#[source] io::Error),
}

/// `Unreadable`, unless the error is a momentary shortage of descriptors or memory.
fn unreadable(err: io::Error) -> MediaError {
    match err.raw_os_error() {
        Some(libc::EMFILE | libc::ENFILE | libc::ENOMEM) => MediaError::Exhausted(err),
        _ => MediaError::Unreadable(err),
    }
}

/// An open file under a media root.
#[derive(Debug)]
pub(crate) struct MediaFile {
    /// Canonical path.
    pub(crate) path: PathBuf,
    /// Index of the media root it lies under.
    pub(crate) root_index: usize,
    /// The open file.
    pub(crate) file: File,
    /// Its metadata, taken from the open file (not the path), so both describe one inode.
    pub(crate) metadata: Metadata,
}

/// The canonical media roots and the symlink policy.
#[derive(Debug, Clone)]
pub(crate) struct MediaRoots {
    roots: Vec<PathBuf>,
    follow_symlinks: bool,
}

impl MediaRoots {
    /// Roots as given; they must already be canonical (config validation does that).
    /// Symlinks inside the roots are followed.
    pub(crate) fn new(roots: Vec<PathBuf>) -> MediaRoots {
        MediaRoots {
            roots,
            follow_symlinks: true,
        }
    }

    /// Sets whether a path may go through symlinks inside the roots. When not, a document
    /// must name its file by its real path: the canonical path must equal the path as
    /// written (after removing `.` and doubled slashes).
    pub(crate) fn follow_symlinks(mut self, follow: bool) -> MediaRoots {
        self.follow_symlinks = follow;
        self
    }

    pub(crate) fn roots(&self) -> &[PathBuf] {
        &self.roots
    }

    /// Resolves a document path to a canonical path under a root, without opening it.
    pub(crate) fn confine(&self, raw: &str) -> Result<(PathBuf, usize), MediaError> {
        if raw.is_empty() || raw.contains('\0') {
            return Err(MediaError::NotAbsolute);
        }
        let path = Path::new(raw);
        if !path.is_absolute() {
            return Err(MediaError::NotAbsolute);
        }
        // Refuse `..` before touching the disk: even when it happens to land inside a root,
        // a document written that way is suspicious and should be fixed, not served.
        if path.components().any(|c| matches!(c, Component::ParentDir)) {
            return Err(MediaError::OutsideRoots);
        }
        let canonical = match std::fs::canonicalize(path) {
            Ok(p) => p,
            Err(err) if err.kind() == io::ErrorKind::NotFound => {
                // A missing file inside a root is "missing"; one outside is still "outside",
                // so an attacker cannot probe the rest of the file system.
                return Err(if self.root_of(path).is_some() {
                    MediaError::Missing
                } else {
                    MediaError::OutsideRoots
                });
            }
            Err(err) => return Err(unreadable(err)),
        };
        let root_index = self.root_of(&canonical).ok_or(MediaError::OutsideRoots)?;
        if !self.follow_symlinks {
            let lexical: PathBuf = path.components().collect();
            if lexical != canonical {
                return Err(MediaError::Symlink);
            }
        }
        Ok((canonical, root_index))
    }

    /// Confines and opens a document path; only regular files pass.
    pub(crate) fn open(&self, raw: &str) -> Result<MediaFile, MediaError> {
        let (path, root_index) = self.confine(raw)?;
        // Checking the type before opening keeps a FIFO from blocking the open.
        let pre = std::fs::metadata(&path).map_err(open_error)?;
        if !pre.is_file() {
            return Err(MediaError::NotAFile);
        }
        // O_NONBLOCK: if the path was swapped for a FIFO after the check above, open must
        // not wait for a writer (it is meaningless for regular files).
        let file = {
            use std::os::unix::fs::OpenOptionsExt;
            std::fs::OpenOptions::new()
                .read(true)
                .custom_flags(libc::O_NONBLOCK)
                .open(&path)
                .map_err(open_error)?
        };
        let metadata = file.metadata().map_err(unreadable)?;
        if !metadata.is_file() {
            return Err(MediaError::NotAFile);
        }
        Ok(MediaFile {
            path,
            root_index,
            file,
            metadata,
        })
    }

    /// The path relative to its root, for x-accel-redirect / x-sendfile.
    pub(crate) fn relative<'a>(&self, file: &'a MediaFile) -> Option<&'a Path> {
        let root = self.roots.get(file.root_index)?;
        file.path.strip_prefix(root).ok()
    }

    fn root_of(&self, path: &Path) -> Option<usize> {
        self.roots.iter().position(|root| path.starts_with(root))
    }
}

fn open_error(err: io::Error) -> MediaError {
    if err.kind() == io::ErrorKind::NotFound {
        MediaError::Missing
    } else {
        unreadable(err)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn setup() -> (tempfile::TempDir, MediaRoots) {
        let dir = tempfile::tempdir().expect("tempdir");
        let root = dir.path().join("music");
        std::fs::create_dir_all(root.join("album")).expect("mkdir");
        std::fs::write(root.join("album/a.mp3"), b"abc").expect("write");
        std::fs::write(dir.path().join("secret.txt"), b"secret").expect("write");
        let canonical = std::fs::canonicalize(&root).expect("canonical");
        (dir, MediaRoots::new(vec![canonical]))
    }

    #[test]
    fn a_file_under_the_root_is_served() {
        let (dir, roots) = setup();
        let path = dir.path().join("music/album/a.mp3");
        let file = roots.open(&path.display().to_string()).expect("open");
        assert_eq!(file.metadata.len(), 3);
        assert_eq!(roots.relative(&file), Some(Path::new("album/a.mp3")));
    }

    #[test]
    fn running_out_of_descriptors_is_a_retry_not_a_refusal() {
        let emfile = io::Error::from_raw_os_error(libc::EMFILE);
        assert!(matches!(unreadable(emfile), MediaError::Exhausted(_)));
        let denied = io::Error::from_raw_os_error(libc::EACCES);
        assert!(matches!(unreadable(denied), MediaError::Unreadable(_)));
    }

    #[test]
    fn dot_dot_is_refused_even_when_it_exists() {
        let (dir, roots) = setup();
        let path = format!("{}/music/../secret.txt", dir.path().display());
        assert!(matches!(roots.open(&path), Err(MediaError::OutsideRoots)));
        let inside = format!("{}/music/album/../album/a.mp3", dir.path().display());
        assert!(matches!(roots.open(&inside), Err(MediaError::OutsideRoots)));
    }

    #[test]
    fn a_symlink_out_of_the_root_is_refused() {
        let (dir, roots) = setup();
        let link = dir.path().join("music/album/escape.mp3");
        std::os::unix::fs::symlink(dir.path().join("secret.txt"), &link).expect("symlink");
        assert!(matches!(
            roots.open(&link.display().to_string()),
            Err(MediaError::OutsideRoots)
        ));
    }

    #[test]
    fn symlinks_inside_a_root_follow_the_policy() {
        let (dir, roots) = setup();
        let link = dir.path().join("music/album/alias.mp3");
        std::os::unix::fs::symlink(dir.path().join("music/album/a.mp3"), &link).expect("symlink");
        let raw = link.display().to_string();
        assert!(
            roots.open(&raw).is_ok(),
            "followed by default in MediaRoots::new"
        );
        let strict = roots.clone().follow_symlinks(false);
        assert!(matches!(strict.open(&raw), Err(MediaError::Symlink)));
        let real = dir.path().join("music/album/a.mp3");
        let canonical = std::fs::canonicalize(&real).expect("canonical");
        assert!(strict.open(&canonical.display().to_string()).is_ok());
        let dotted = format!("{}/./album//a.mp3", strict.roots()[0].display());
        assert!(
            strict.open(&dotted).is_ok(),
            "`.` and `//` are not symlinks"
        );
    }

    #[test]
    fn a_fifo_is_refused_without_hanging() {
        let (dir, roots) = setup();
        let fifo = dir.path().join("music/album/pipe.mp3");
        let c = std::ffi::CString::new(fifo.display().to_string()).expect("cstring");
        // SAFETY: mkfifo with a valid NUL-terminated path.
        assert_eq!(unsafe { libc::mkfifo(c.as_ptr(), 0o644) }, 0);
        assert!(matches!(
            roots.open(&fifo.display().to_string()),
            Err(MediaError::NotAFile)
        ));
        let dev = roots.open("/dev/null");
        assert!(matches!(dev, Err(MediaError::OutsideRoots)));
    }

    #[test]
    fn relative_empty_and_nul_paths_are_refused() {
        let (_dir, roots) = setup();
        for raw in ["", "album/a.mp3", "/srv/a\0b.mp3"] {
            assert!(
                matches!(roots.open(raw), Err(MediaError::NotAbsolute)),
                "{raw:?}"
            );
        }
    }

    #[test]
    fn a_directory_is_not_a_file_and_missing_is_missing() {
        let (dir, roots) = setup();
        let album = dir.path().join("music/album");
        assert!(matches!(
            roots.open(&album.display().to_string()),
            Err(MediaError::NotAFile)
        ));
        let gone = dir.path().join("music/album/gone.mp3");
        assert!(matches!(
            roots.open(&gone.display().to_string()),
            Err(MediaError::Missing)
        ));
        assert!(matches!(
            roots.open("/etc/definitely-not-here.mp3"),
            Err(MediaError::OutsideRoots)
        ));
    }
}
