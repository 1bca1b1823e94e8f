//! The `sd_notify` protocol, from both ends.
//!
//! A worker reports `READY=1`, `STATUS=...`, `WATCHDOG=1` and `STOPPING=1` to whatever
//! `NOTIFY_SOCKET` names: systemd when run as a `Type=notify` service, or musicd's own
//! supervisor, which listens on one datagram socket per worker ([`NotifyListener`]). One
//! protocol for both means the supervisor learns readiness exactly as systemd does.

use std::os::fd::{AsRawFd, RawFd};
use std::os::unix::net::UnixDatagram;
use std::path::{Path, PathBuf};

use sd_notify::NotifyState;

/// Tells the service manager the worker is ready, with a status line.
pub(crate) fn ready(status: &str) {
    send(&[NotifyState::Ready, NotifyState::Status(status)]);
}

/// Updates the status line.
pub fn status(status: &str) {
    send(&[NotifyState::Status(status)]);
}

/// Tells the service manager the worker is stopping.
pub(crate) fn stopping() {
    send(&[
        NotifyState::Stopping,
        NotifyState::Status("stopping: draining connections"),
    ]);
}

/// Pets the watchdog.
pub(crate) fn watchdog() {
    send(&[NotifyState::Watchdog]);
}

fn send(states: &[NotifyState<'_>]) {
    if let Err(err) = sd_notify::notify(states) {
        tracing::debug!(error = %err, "sd_notify failed");
    }
}

/// The supervisor's end: a datagram socket a worker's `NOTIFY_SOCKET` points at.
pub(crate) struct NotifyListener {
    socket: UnixDatagram,
    path: PathBuf,
}

/// What a worker said.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub(crate) struct Notification {
    /// `READY=1` was in the message.
    pub(crate) ready: bool,
    /// `STOPPING=1` was in the message.
    pub(crate) stopping: bool,
    /// The last `STATUS=` line, if any.
    pub(crate) status: Option<String>,
    /// `WATCHDOG=1` was in the message.
    pub(crate) watchdog: bool,
}

impl NotifyListener {
    /// Binds a fresh socket at `path` (a stale file there is replaced).
    pub(crate) fn bind(path: &Path) -> std::io::Result<NotifyListener> {
        let _ = std::fs::remove_file(path);
        let socket = UnixDatagram::bind(path)?;
        socket.set_nonblocking(true)?;
        Ok(NotifyListener {
            socket,
            path: path.to_path_buf(),
        })
    }

    /// The socket's path, for `NOTIFY_SOCKET`.
    pub(crate) fn path(&self) -> &Path {
        &self.path
    }

    /// The fd to poll.
    pub(crate) fn raw_fd(&self) -> RawFd {
        self.socket.as_raw_fd()
    }

    /// Drains every pending message into one summary.
    pub(crate) fn receive(&self) -> Notification {
        let mut summary = Notification::default();
        let mut buf = [0u8; 4096];
        while let Ok(n) = self.socket.recv(&mut buf) {
            let text = String::from_utf8_lossy(&buf[..n]);
            for line in text.lines() {
                match line.split_once('=') {
                    Some(("READY", "1")) => summary.ready = true,
                    Some(("STOPPING", "1")) => summary.stopping = true,
                    Some(("WATCHDOG", "1")) => summary.watchdog = true,
                    Some(("STATUS", status)) => summary.status = Some(status.to_string()),
                    _ => {}
                }
            }
        }
        summary
    }
}

impl Drop for NotifyListener {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.path);
    }
}
