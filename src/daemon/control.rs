//! `musicd start | stop | restart | status`: the operator's side of the supervisor.
//!
//! These commands find the supervisor through its locked pid file and read its state file;
//! they talk to it with signals only (TERM to stop, HUP to replace the worker).

use std::io::{BufRead, BufReader, Write};
use std::net::SocketAddr;
use std::os::fd::AsRawFd;
use std::path::Path;
use std::time::{Duration, Instant};

use daemonize::{Daemonize, Outcome};

use super::state::{PidFileStatus, SupervisorState, pid_file_status, read_state};
use super::supervisor::{self, Launch};
use super::sys;
use crate::config::{Config, Sources};

/// How long `start` waits for the first worker to report ready.
pub(crate) const START_WAIT: Duration = Duration::from_secs(30);

/// Why a control command failed.
#[derive(Debug, thiserror::Error)]
pub enum ControlError {
    /// `start` while a supervisor runs.
    #[error(
        "musicd is already running (supervisor pid {0}); use `musicd restart` or `musicd stop`"
    )]
    AlreadyRunning(i32),
    /// A directory or file could not be prepared.
    #[error("{path}: {source}")]
    Io {
        /// Which.
        path: String,
        /// Why.
        source: std::io::Error,
    },
    /// Daemonizing failed.
    #[error("cannot daemonize: {0}")]
    Daemonize(String),
    /// The supervisor reported a failure or vanished.
    #[error("musicd did not start: {0}")]
    StartFailed(String),
    /// The supervisor did not exit in time.
    #[error("musicd (pid {0}) did not stop within {1:?}")]
    StopTimeout(i32, Duration),
    /// A restart was refused or failed.
    #[error("restart failed: {0}")]
    RestartFailed(String),
}

/// What `start` achieved.
#[derive(Debug)]
pub enum Started {
    /// The supervisor runs and its worker is ready.
    Ready {
        /// Supervisor pid.
        pid: i32,
    },
    /// The supervisor runs but the worker was not ready within [`START_WAIT`].
    NotReadyYet,
}

fn io_err(path: &Path) -> impl FnOnce(std::io::Error) -> ControlError + '_ {
    move |source| ControlError::Io {
        path: path.display().to_string(),
        source,
    }
}

/// Daemonizes a supervisor and waits until its first worker is ready. Must be called before
/// any thread or runtime exists (it forks).
pub fn start(config: Config, sources: Sources) -> Result<Started, ControlError> {
    let daemon = &config.daemon;
    match pid_file_status(&daemon.pid_file) {
        PidFileStatus::Running(pid) => return Err(ControlError::AlreadyRunning(pid)),
        PidFileStatus::Stale(pid) => {
            eprintln!(
                "musicd: removing stale pid file {} (pid {} is not running)",
                daemon.pid_file.display(),
                pid.map_or_else(|| "?".to_string(), |p| p.to_string())
            );
            std::fs::remove_file(&daemon.pid_file).map_err(io_err(&daemon.pid_file))?;
        }
        PidFileStatus::Absent => {}
    }
    for dir in [
        daemon.pid_file.parent(),
        daemon.log_file.parent(),
        Some(daemon.state_dir.as_path()),
    ]
    .into_iter()
    .flatten()
    {
        std::fs::create_dir_all(dir).map_err(io_err(dir))?;
    }
    let log = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(&daemon.log_file)
        .map_err(io_err(&daemon.log_file))?;
    let log_err = log.try_clone().map_err(io_err(&daemon.log_file))?;
    let exe = std::env::current_exe().map_err(io_err(Path::new("/proc/self/exe")))?;
    let sources = absolute_sources(sources)?;
    let (reader, writer) = std::io::pipe().map_err(io_err(Path::new("pipe")))?;
    let pid_file = daemon.pid_file.clone();

    match Daemonize::new()
        .pid_file(&pid_file)
        .working_directory("/")
        .stdout(log)
        .stderr(log_err)
        .execute()
    {
        Outcome::Parent(Ok(_)) => {
            drop(writer);
            wait_for_report(reader, &pid_file)
        }
        Outcome::Parent(Err(err)) => Err(ControlError::Daemonize(err.to_string())),
        Outcome::Child(Ok(_)) => {
            drop(reader);
            super::init_logging(&config.log_level);
            let code = supervisor::run(Launch {
                config,
                sources,
                exe,
                report: Some(writer),
            });
            std::process::exit(code);
        }
        Outcome::Child(Err(err)) => {
            // Typically: another `start` won the race for the pid file lock.
            let mut writer = writer;
            let _ = writeln!(writer, "error {err}");
            std::process::exit(1);
        }
    }
}

/// Workers run from `/`: make the config path absolute first.
fn absolute_sources(mut sources: Sources) -> Result<Sources, ControlError> {
    if let Some(file) = &sources.file {
        sources.file = Some(std::fs::canonicalize(file).map_err(io_err(file))?);
    }
    Ok(sources)
}

fn wait_for_report(reader: std::io::PipeReader, pid_file: &Path) -> Result<Started, ControlError> {
    let deadline = Instant::now() + START_WAIT;
    let fd = reader.as_raw_fd();
    let mut reader = BufReader::new(reader);
    loop {
        let left = deadline.saturating_duration_since(Instant::now());
        if left.is_zero() {
            return Ok(Started::NotReadyYet);
        }
        let readable = sys::poll_readable(&[fd], left).map_err(io_err(Path::new("pipe")))?;
        if readable.first() != Some(&true) {
            continue;
        }
        let mut line = String::new();
        let n = reader
            .read_line(&mut line)
            .map_err(io_err(Path::new("pipe")))?;
        if n == 0 {
            return Err(ControlError::StartFailed(format!(
                "the supervisor exited during start-up; pid file {}",
                pid_file.display()
            )));
        }
        let line = line.trim();
        if let Some(pid) = line.strip_prefix("ready ") {
            return Ok(Started::Ready {
                pid: pid.parse().unwrap_or(0),
            });
        }
        if let Some(message) = line.strip_prefix("error ") {
            return Err(ControlError::StartFailed(message.to_string()));
        }
    }
}

/// What `stop` did.
#[derive(Debug)]
pub enum Stopped {
    /// Stopped the supervisor with this pid.
    Stopped(i32),
    /// Nothing was running.
    NotRunning,
}

/// Sends SIGTERM to the supervisor and waits until it has exited.
pub fn stop(config: &Config) -> Result<Stopped, ControlError> {
    let PidFileStatus::Running(pid) = pid_file_status(&config.daemon.pid_file) else {
        return Ok(Stopped::NotRunning);
    };
    if pid <= 0 {
        return Ok(Stopped::NotRunning);
    }
    sys::kill(pid, libc::SIGTERM).map_err(io_err(&config.daemon.pid_file))?;
    let limit = config.shutdown.drain_delay + config.daemon.stop_timeout + Duration::from_secs(10);
    let deadline = Instant::now() + limit;
    while sys::alive(pid) {
        if Instant::now() > deadline {
            return Err(ControlError::StopTimeout(pid, limit));
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    Ok(Stopped::Stopped(pid))
}

/// Replaces the worker (new one first, then the old one drains), or starts musicd if it is
/// not running. Returns the new worker's pid.
pub fn restart(config: Config, sources: Sources) -> Result<String, ControlError> {
    let PidFileStatus::Running(pid) = pid_file_status(&config.daemon.pid_file) else {
        return match start(config, sources)? {
            Started::Ready { pid } => Ok(format!(
                "musicd was not running; started (supervisor pid {pid})"
            )),
            Started::NotReadyYet => Ok("musicd was not running; started, not ready yet".into()),
        };
    };
    let before = read_state(&config.daemon.state_dir)
        .map(|s| s.reload_attempts)
        .unwrap_or(0);
    sys::kill(pid, libc::SIGHUP).map_err(io_err(&config.daemon.pid_file))?;
    let deadline = Instant::now() + supervisor::READY_TIMEOUT + Duration::from_secs(5);
    while Instant::now() < deadline {
        if let Some(state) = read_state(&config.daemon.state_dir)
            && let Some(outcome) = &state.last_reload
            && outcome.attempt > before
        {
            return if outcome.ok {
                Ok(format!(
                    "restarted: {} (worker pid {})",
                    outcome.message,
                    state
                        .worker_pid
                        .map_or_else(|| "-".into(), |p| p.to_string())
                ))
            } else {
                Err(ControlError::RestartFailed(format!(
                    "{}; the previous worker keeps serving",
                    outcome.message
                )))
            };
        }
        if !sys::alive(pid) {
            return Err(ControlError::RestartFailed("the supervisor exited".into()));
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    Err(ControlError::RestartFailed(
        "no answer from the supervisor".into(),
    ))
}

/// What `status` found.
#[derive(Debug)]
pub struct Status {
    /// Supervisor pid, when it runs.
    pub(crate) running: Option<i32>,
    /// The state file, if any.
    pub(crate) state: Option<SupervisorState>,
    /// `/readyz`: status code and body, or the error.
    pub(crate) readyz: Result<(u16, String), String>,
}

impl Status {
    /// LSB exit code: 0 running, 3 not running.
    pub fn exit_code(&self) -> u8 {
        if self.running.is_some() { 0 } else { 3 }
    }

    /// The report as JSON, with stable field names (documented in docs/running.md):
    /// `running`, `supervisor_pid`, `phase`, `listen`, `uptime_secs`, `worker` (`pid`,
    /// `uptime_secs`), `restarts`, `replacements`, `last_exit`, `last_reload`,
    /// `gave_up_reason`, and `readiness` (`http_status` and `/readyz`'s own fields, or
    /// `error`).
    pub fn to_json(&self) -> serde_json::Value {
        let now = crate::timing::unix_secs();
        let state = self.state.as_ref();
        let readiness = match &self.readyz {
            Ok((code, body)) => {
                let mut value = serde_json::from_str::<serde_json::Value>(body)
                    .ok()
                    .filter(serde_json::Value::is_object)
                    .unwrap_or_else(|| serde_json::json!({ "body": body }));
                value["http_status"] = serde_json::json!(code);
                value
            }
            Err(error) => serde_json::json!({ "error": error }),
        };
        serde_json::json!({
            "running": self.running.is_some(),
            "supervisor_pid": self.running,
            "phase": state.map(|s| s.phase),
            "listen": state.map(|s| s.listen.clone()),
            "uptime_secs": state.map(|s| now.saturating_sub(s.started_at)),
            "worker": state.and_then(|s| s.worker_pid).map(|pid| serde_json::json!({
                "pid": pid,
                "uptime_secs": state
                    .and_then(|s| s.worker_started_at)
                    .map(|at| now.saturating_sub(at)),
            })),
            "restarts": state.map(|s| s.restarts),
            "replacements": state.map(|s| s.replacements),
            "last_exit": state.and_then(|s| s.last_exit.clone()),
            "last_reload": state.and_then(|s| s.last_reload.as_ref()).map(|r| serde_json::json!({
                "attempt": r.attempt,
                "ok": r.ok,
                "message": r.message,
            })),
            "gave_up_reason": state.and_then(|s| s.gave_up_reason.clone()),
            "last_guard": state.and_then(|s| s.last_guard.clone()),
            "readiness": readiness,
        })
    }

    /// Human-readable report.
    pub fn render(&self) -> String {
        let mut out = String::new();
        let now = crate::timing::unix_secs();
        match (self.running, &self.state) {
            (Some(pid), _) => out.push_str(&format!("musicd: running (supervisor pid {pid})\n")),
            (None, _) => out.push_str("musicd: not running\n"),
        }
        if let Some(state) = &self.state {
            let phase = serde_json::to_value(state.phase)
                .ok()
                .and_then(|v| v.as_str().map(str::to_string))
                .unwrap_or_default();
            out.push_str(&format!("phase:        {phase}\n"));
            out.push_str(&format!("listen:       {}\n", state.listen));
            if self.running.is_some() {
                out.push_str(&format!(
                    "uptime:       {}s\n",
                    now.saturating_sub(state.started_at)
                ));
            }
            match (state.worker_pid, state.worker_started_at) {
                (Some(pid), Some(at)) => out.push_str(&format!(
                    "worker:       pid {pid}, up {}s\n",
                    now.saturating_sub(at)
                )),
                _ => out.push_str("worker:       none\n"),
            }
            out.push_str(&format!(
                "restarts:     {} after crashes, {} on request\n",
                state.restarts, state.replacements
            ));
            if let Some(exit) = &state.last_exit {
                out.push_str(&format!("last exit:    {exit}\n"));
            }
            if let Some(ms) = state.next_backoff_ms {
                out.push_str(&format!("next restart: in about {ms} ms\n"));
            }
            if let Some(reload) = &state.last_reload {
                let verdict = if reload.ok { "ok" } else { "refused" };
                out.push_str(&format!("last reload:  {verdict}: {}\n", reload.message));
            }
            if let Some(reason) = &state.gave_up_reason {
                out.push_str(&format!("gave up:      {reason}\n"));
            }
            if let Some(guard) = &state.last_guard {
                out.push_str(&format!("last guard:   {guard}\n"));
            }
        }
        match &self.readyz {
            Ok((code, body)) => out.push_str(&format!("readyz:       {code} {body}\n")),
            Err(err) => out.push_str(&format!("readyz:       unreachable ({err})\n")),
        }
        out
    }
}

/// Collects the supervisor's status and asks the server's `/readyz`.
pub fn status(config: &Config) -> Status {
    let running = match pid_file_status(&config.daemon.pid_file) {
        PidFileStatus::Running(pid) => Some(pid),
        _ => None,
    };
    let state = read_state(&config.daemon.state_dir);
    let listening = state.as_ref().and_then(|s| s.listen.parse().ok());
    Status {
        running,
        state,
        readyz: probe_readyz(readyz_address(config, listening)),
    }
}

/// `GET /readyz` from `addr` (no runtime needed): its status and body.
pub(crate) fn probe_readyz(addr: SocketAddr) -> Result<(u16, String), String> {
    let answer = crate::blocking_http::get_from(addr, "/readyz", Duration::from_secs(3))
        .map_err(|e| e.to_string())?;
    Ok((
        answer.status,
        String::from_utf8_lossy(&answer.body).trim().to_string(),
    ))
}

/// Where `/readyz` answers: the ops address when one is configured (the public one then
/// answers 404 there, by design), else the address the server listens on.
pub fn readyz_address(config: &Config, listening: Option<SocketAddr>) -> SocketAddr {
    match config.ops_listen {
        Some(ops) if ops.port() != 0 => ops,
        _ => listening.unwrap_or(config.listen),
    }
}
