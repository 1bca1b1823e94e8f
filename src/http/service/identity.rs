//! What identifies one version of a file on disk: device, inode, size, modification time.
//!
//! The file cache compares it to prove a cached copy is current, and the senders compare
//! it after a transfer to notice a file rewritten under them.

use std::os::unix::fs::MetadataExt;

/// What identifies one version of a file on disk.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Identity {
    dev: u64,
    ino: u64,
    len: u64,
    mtime: i64,
    mtime_nsec: i64,
}

impl Identity {
    /// The identity in `metadata`.
    pub fn of(metadata: &std::fs::Metadata) -> Identity {
        Identity {
            dev: metadata.dev(),
            ino: metadata.ino(),
            len: metadata.len(),
            mtime: metadata.mtime(),
            mtime_nsec: metadata.mtime_nsec(),
        }
    }

    /// Whether `file` is no longer this version (or cannot be checked).
    pub(crate) fn changed(&self, file: &std::fs::File) -> bool {
        file.metadata()
            .map_or(true, |now| Identity::of(&now) != *self)
    }
}
