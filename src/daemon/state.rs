//! The files through which `musicd stop|restart|status` find and read the supervisor: the
//! locked pid file (written by `daemonize`) and a JSON state file in `state_dir`, replaced
//! atomically (write + rename) on every change so a reader never sees half of it.

use std::fs::File;
use std::io::Read;
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

use super::sys;

/// What the supervisor is doing.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub(crate) enum Phase {
    /// Starting its first worker.
    Starting,
    /// A worker is serving.
    Running,
    /// The worker died; a new one starts after the backoff.
    Backoff,
    /// A new worker is starting to replace the current one (restart / reload).
    Replacing,
    /// Draining workers before exiting.
    Stopping,
    /// Exited normally.
    Stopped,
    /// Too many crashes: exited non-zero.
    GaveUp,
}

/// The state file's content.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub(crate) struct SupervisorState {
    /// What the supervisor is doing.
    pub(crate) phase: Phase,
    /// The supervisor's pid.
    pub(crate) supervisor_pid: i32,
    /// When the supervisor started (seconds since the epoch).
    pub(crate) started_at: u64,
    /// The serving worker, if any.
    pub(crate) worker_pid: Option<i32>,
    /// When that worker started (seconds since the epoch).
    pub(crate) worker_started_at: Option<u64>,
    /// Workers restarted after a crash, since the supervisor started.
    pub(crate) restarts: u32,
    /// Workers replaced on request (restart / reload).
    pub(crate) replacements: u32,
    /// How the last worker that ended ended, and its last status line.
    pub(crate) last_exit: Option<String>,
    /// SIGHUPs received (reloads asked for).
    pub(crate) reload_attempts: u32,
    /// How the last reload ended.
    pub(crate) last_reload: Option<ReloadOutcome>,
    /// Why the supervisor gave up, if it did.
    pub(crate) gave_up_reason: Option<String>,
    /// Listening address.
    pub(crate) listen: String,
    /// Backoff before the next restart, in milliseconds, when in backoff.
    pub(crate) next_backoff_ms: Option<u64>,
    /// Why a guard last replaced or killed a worker (memory, watchdog).
    #[serde(default)]
    pub(crate) last_guard: Option<String>,
}

/// The result of one reload (SIGHUP / `musicd restart`).
#[derive(Debug, Clone, Serialize, Deserialize)]
pub(crate) struct ReloadOutcome {
    /// Which reload this was (see `reload_attempts`).
    pub(crate) attempt: u32,
    /// Whether a new worker took over.
    pub(crate) ok: bool,
    /// What happened.
    pub(crate) message: String,
}

/// Path of the state file in `state_dir`.
pub(crate) fn state_path(state_dir: &Path) -> PathBuf {
    state_dir.join("musicd.state.json")
}

/// Writes the state atomically.
pub(crate) fn write_state(state_dir: &Path, state: &SupervisorState) -> std::io::Result<()> {
    let path = state_path(state_dir);
    let tmp = path.with_extension(format!("json.{}", std::process::id()));
    let text = serde_json::to_vec_pretty(state).map_err(std::io::Error::other)?;
    std::fs::write(&tmp, text)?;
    std::fs::rename(&tmp, &path)
}

/// Reads the state file, if present and readable.
pub(crate) fn read_state(state_dir: &Path) -> Option<SupervisorState> {
    let text = std::fs::read(state_path(state_dir)).ok()?;
    serde_json::from_slice(&text).ok()
}

/// What the pid file says.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum PidFileStatus {
    /// No pid file.
    Absent,
    /// A pid file nobody holds locked: the supervisor that wrote it is gone.
    Stale(Option<i32>),
    /// Locked by a live supervisor with this pid.
    Running(i32),
}

/// Inspects the pid file: a pid counts only while its file is locked, so a pid recycled by
/// an unrelated process after a crash is never mistaken for musicd.
pub(crate) fn pid_file_status(path: &Path) -> PidFileStatus {
    let Ok(mut file) = File::open(path) else {
        return PidFileStatus::Absent;
    };
    let mut text = String::new();
    let pid = file
        .read_to_string(&mut text)
        .ok()
        .and_then(|_| text.trim().parse::<i32>().ok());
    match pid {
        Some(pid) if sys::locked_by_other(&file) && sys::alive(pid) => PidFileStatus::Running(pid),
        // Locked but the pid not written yet: the supervisor is starting.
        None if sys::locked_by_other(&file) => PidFileStatus::Running(0),
        other => PidFileStatus::Stale(other),
    }
}
