//! The forever-style supervisor behind `musicd start`.
//!
//! One single-threaded process (no tokio runtime: it forks workers, and fork and threads
//! do not mix) that owns the listening socket and keeps one worker (`musicd run`) serving
//! on it:
//!
//! * a worker that dies is restarted after a backoff (100 ms doubling to `backoff_max`,
//!   with jitter, reset once a worker stayed up `min_uptime`); more than `max_restarts`
//!   crashes within `restart_window` and the supervisor gives up and exits 1;
//! * SIGHUP (and `musicd restart`) re-reads the config, starts a new worker on the same
//!   socket, waits for its `READY=1`, then drains the old one: no connection is refused,
//!   and a bad config leaves the old worker serving;
//! * SIGTERM/SIGINT drain every worker (up to `stop_timeout`, then SIGKILL) and exit 0;
//! * SIGUSR1 reopens the log file here and in the workers (logrotate).
//!
//! Because the socket stays open here, connections that arrive while no worker runs wait
//! in the kernel's accept queue and are served by the next worker.
//!
//! Signals arrive through a signalfd and worker readiness through per-worker `sd_notify`
//! datagram sockets, so the whole supervisor is one `poll` loop with timers.

use std::collections::VecDeque;
use std::io::Write;
use std::net::TcpListener;
use std::os::fd::{AsRawFd, OwnedFd};
use std::path::PathBuf;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use rand::RngExt;

use super::notify::NotifyListener;
use super::state::{Phase, ReloadOutcome, SupervisorState, write_state};
use super::sys::{self, ExitKind};
use crate::config::{Config, Sources};

/// First restart delay.
pub(crate) const INITIAL_BACKOFF: Duration = Duration::from_millis(100);

/// How long a worker's memory must stay above `max_rss_mb` before it is replaced.
pub(crate) const RSS_GRACE: Duration = Duration::from_secs(5);

/// How long a new worker may take to report `READY=1`.
pub(crate) const READY_TIMEOUT: Duration = Duration::from_secs(60);

/// Extra time after `stop_timeout` before a draining worker is killed: the worker enforces
/// the deadline itself, this only catches one that hangs.
const KILL_MARGIN: Duration = Duration::from_secs(2);

/// Everything the supervisor needs to start workers.
pub(crate) struct Launch {
    /// The validated config.
    pub(crate) config: Config,
    /// Where it came from, for reloads.
    pub(crate) sources: Sources,
    /// The musicd binary to run workers from.
    pub(crate) exe: PathBuf,
    /// Where to tell `musicd start` that the first worker is ready (or why not).
    pub(crate) report: Option<std::io::PipeWriter>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Role {
    /// Serving, or starting to serve with nobody else serving.
    Current,
    /// Starting to replace the current worker.
    Pending,
    /// Replaced or stopping: finishing its in-flight responses.
    Draining,
}

struct Worker {
    pid: i32,
    started: Instant,
    started_at: u64,
    notify: NotifyListener,
    ready: bool,
    role: Role,
    last_status: Option<String>,
    kill_at: Option<Instant>,
    /// The last `WATCHDOG=1` (or the start).
    last_ping: Instant,
    /// Why the supervisor killed it, when it did.
    killed_for: Option<String>,
    /// Since when its resident memory has been above `max_rss_mb`.
    over_rss_since: Option<Instant>,
    /// A SIGUSR1 came while it was starting: its handler may not be installed yet (the
    /// default action kills), so it is passed on once the worker is ready.
    reopen_owed: bool,
}

struct Supervisor {
    config: Config,
    sources: Sources,
    exe: PathBuf,
    listener: TcpListener,
    /// `ops_listen`, when configured (fd 4 of every worker).
    ops_listener: Option<TcpListener>,
    signals: OwnedFd,
    workers: Vec<Worker>,
    state: SupervisorState,
    backoff: crate::timing::Backoff,
    restart_at: Option<Instant>,
    crashes: VecDeque<Instant>,
    stopping: bool,
    exit_code: Option<i32>,
    worker_seq: u64,
    report: Option<std::io::PipeWriter>,
}

/// Runs the supervisor until it stops; returns the process exit code.
pub(crate) fn run(launch: Launch) -> i32 {
    let Launch {
        config,
        sources,
        exe,
        mut report,
    } = launch;
    let mut fail = |message: String| {
        tracing::error!("{message}");
        if let Some(mut pipe) = report.take() {
            let _ = writeln!(pipe, "error {message}");
        }
        1
    };
    let signals = match sys::signalfd(&sys::SUPERVISOR_SIGNALS) {
        Ok(fd) => fd,
        Err(err) => return fail(format!("cannot set up signal handling: {err}")),
    };
    let listener = match sys::listen(config.listen, sys::BACKLOG) {
        Ok(listener) => listener,
        Err(err) => return fail(format!("cannot listen on {}: {err}", config.listen)),
    };
    // The ops socket is the supervisor's too, so restarts refuse no scrape either.
    let ops_listener = match config.ops_listen {
        Some(addr) => match sys::listen(addr, sys::BACKLOG) {
            Ok(listener) => Some(listener),
            Err(err) => return fail(format!("cannot listen on {addr} (ops_listen): {err}")),
        },
        None => None,
    };
    let state = SupervisorState {
        phase: Phase::Starting,
        supervisor_pid: i32::try_from(std::process::id()).unwrap_or(0),
        started_at: crate::timing::unix_secs(),
        worker_pid: None,
        worker_started_at: None,
        restarts: 0,
        replacements: 0,
        last_exit: None,
        reload_attempts: 0,
        last_reload: None,
        gave_up_reason: None,
        // The bound address, so `listen = "127.0.0.1:0"` shows the real port.
        listen: listener
            .local_addr()
            .map_or_else(|_| config.listen.to_string(), |a| a.to_string()),
        next_backoff_ms: None,
        last_guard: None,
    };
    tracing::info!(listen = %config.listen, pid = state.supervisor_pid, "supervisor started");
    let backoff = crate::timing::Backoff::new(INITIAL_BACKOFF, config.daemon.backoff_max);
    let mut supervisor = Supervisor {
        config,
        sources,
        exe,
        listener,
        ops_listener,
        signals,
        workers: Vec::new(),
        state,
        backoff,
        restart_at: None,
        crashes: VecDeque::new(),
        stopping: false,
        exit_code: None,
        worker_seq: 0,
        report,
    };
    supervisor.spawn(Role::Current);
    supervisor.save();
    supervisor.run()
}

impl Supervisor {
    fn run(&mut self) -> i32 {
        loop {
            if let Some(code) = self.exit_code
                && self.workers.is_empty()
            {
                return self.finish(code);
            }
            let mut fds = vec![self.signals.as_raw_fd()];
            fds.extend(self.workers.iter().map(|w| w.notify.raw_fd()));
            let readable = match sys::poll_readable(&fds, self.next_timeout()) {
                Ok(r) => r,
                Err(err) => {
                    tracing::error!(error = %err, "poll failed");
                    std::thread::sleep(Duration::from_millis(100));
                    continue;
                }
            };
            if readable.first() == Some(&true) {
                while let Some(signal) = sys::read_signal(&self.signals) {
                    self.on_signal(signal);
                }
            }
            // Reap even without SIGCHLD: coalesced signals must not leave a zombie unseen.
            while let Some((pid, exit)) = sys::reap_child() {
                self.on_exit(pid, exit);
            }
            let ready_pids: Vec<i32> = self
                .workers
                .iter()
                .enumerate()
                .filter(|(i, _)| readable.get(i + 1) == Some(&true))
                .map(|(_, w)| w.pid)
                .collect();
            for pid in ready_pids {
                self.on_notify(pid);
            }
            self.on_timers(Instant::now());
        }
    }

    fn next_timeout(&self) -> Duration {
        let now = Instant::now();
        let mut deadlines: Vec<Instant> = self.workers.iter().filter_map(|w| w.kill_at).collect();
        deadlines.extend(self.restart_at);
        if let Some(limit) = self.config.daemon.watchdog {
            deadlines.extend(
                self.workers
                    .iter()
                    .filter(|w| w.ready && w.killed_for.is_none())
                    .map(|w| w.last_ping + limit),
            );
        }
        deadlines.extend(
            self.workers
                .iter()
                .filter(|w| !w.ready && w.role != Role::Draining)
                .map(|w| w.started + READY_TIMEOUT),
        );
        deadlines
            .into_iter()
            .map(|d| d.saturating_duration_since(now))
            .min()
            .unwrap_or(Duration::from_secs(1))
            .min(Duration::from_secs(1))
    }

    fn on_signal(&mut self, signal: i32) {
        match signal {
            libc::SIGTERM | libc::SIGINT => {
                tracing::info!(
                    signal = sys::signal_name(signal),
                    "stopping: draining workers"
                );
                // Passed on as it came: SIGTERM lets a worker drain first
                // (`shutdown.drain_delay`), SIGINT stops it accepting at once.
                self.begin_stop(0, signal);
            }
            libc::SIGHUP => self.reload(),
            libc::SIGUSR1 => self.reopen_log(),
            _ => {}
        }
    }

    fn spawn(&mut self, role: Role) {
        self.worker_seq += 1;
        let notify_path = self.config.daemon.state_dir.join(format!(
            "notify-{}-{}.sock",
            self.state.supervisor_pid, self.worker_seq
        ));
        let notify = match NotifyListener::bind(&notify_path) {
            Ok(n) => n,
            Err(err) => {
                tracing::error!(error = %err, path = %notify_path.display(), "cannot create notify socket");
                self.schedule_restart_after_failure(format!("notify socket: {err}"));
                return;
            }
        };
        let mut command = Command::new(&self.exe);
        command.arg("run").arg("--supervised");
        if let Some(file) = &self.sources.file {
            command.arg("--config").arg(file);
        }
        for item in &self.sources.overrides {
            command.arg("--set").arg(item);
        }
        command
            .arg("--log-file")
            .arg(&self.config.daemon.log_file)
            .env(
                "LISTEN_FDS",
                if self.ops_listener.is_some() {
                    "2"
                } else {
                    "1"
                },
            )
            .env(
                "LISTEN_FDNAMES",
                if self.ops_listener.is_some() {
                    "http:ops"
                } else {
                    "http"
                },
            )
            .env("NOTIFY_SOCKET", notify.path())
            .env_remove("WATCHDOG_USEC")
            .env_remove("WATCHDOG_PID")
            .stdin(Stdio::null());
        if let Some(limit) = self.config.daemon.watchdog {
            // The worker pings every half of it, as it does for systemd's WatchdogSec.
            command.env("WATCHDOG_USEC", limit.as_micros().to_string());
        }
        let listener_fd = self.listener.as_raw_fd();
        let ops_fd = self.ops_listener.as_ref().map(AsRawFd::as_raw_fd);
        sys::exec_as_worker(&mut command, listener_fd, ops_fd);
        match command.spawn() {
            Ok(child) => {
                let pid = i32::try_from(child.id()).unwrap_or(0);
                // The child is reaped by waitpid(-1) in the loop, not through `child`.
                drop(child);
                tracing::info!(pid, role = ?role, "worker started");
                self.workers.push(Worker {
                    pid,
                    started: Instant::now(),
                    started_at: crate::timing::unix_secs(),
                    notify,
                    ready: false,
                    role,
                    last_status: None,
                    kill_at: None,
                    last_ping: Instant::now(),
                    killed_for: None,
                    over_rss_since: None,
                    reopen_owed: false,
                });
                if role == Role::Current {
                    self.state.worker_pid = Some(pid);
                    self.state.worker_started_at = Some(crate::timing::unix_secs());
                }
            }
            Err(err) => {
                tracing::error!(error = %err, exe = %self.exe.display(), "cannot start worker");
                if role == Role::Pending {
                    self.reload_done(false, format!("cannot start worker: {err}"));
                } else {
                    self.schedule_restart_after_failure(format!("cannot start worker: {err}"));
                }
            }
        }
    }

    fn on_notify(&mut self, pid: i32) {
        let Some(index) = self.workers.iter().position(|w| w.pid == pid) else {
            return;
        };
        let message = self.workers[index].notify.receive();
        if message.watchdog {
            self.workers[index].last_ping = Instant::now();
        }
        if let Some(status) = message.status {
            self.workers[index].last_status = Some(status);
        }
        if !message.ready || self.workers[index].ready {
            return;
        }
        self.workers[index].ready = true;
        if std::mem::take(&mut self.workers[index].reopen_owed) {
            let _ = sys::kill(pid, libc::SIGUSR1);
        }
        match self.workers[index].role {
            Role::Current => {
                tracing::info!(pid, "worker ready");
                self.state.phase = Phase::Running;
                self.state.next_backoff_ms = None;
                // State first: `start` returns on this report and may read it at once.
                self.save();
                self.report_start(format!("ready {}", self.state.supervisor_pid));
            }
            Role::Pending => {
                // The replacement serves now; the old worker finishes what it has.
                let stop_by = Instant::now() + self.config.daemon.stop_timeout + KILL_MARGIN;
                for worker in &mut self.workers {
                    if worker.role == Role::Current {
                        worker.role = Role::Draining;
                        worker.kill_at = Some(stop_by);
                        // SIGINT: the replacement already accepts on the same socket, so
                        // the old worker skips `shutdown.drain_delay` and only finishes
                        // what it has.
                        let _ = sys::kill(worker.pid, libc::SIGINT);
                        tracing::info!(pid = worker.pid, "draining replaced worker");
                    }
                }
                let started_at = self.workers[index].started_at;
                self.workers[index].role = Role::Current;
                self.state.worker_pid = Some(pid);
                self.state.worker_started_at = Some(started_at);
                self.state.replacements += 1;
                self.state.phase = Phase::Running;
                // A replacement that is serving cancels a pending crash restart.
                self.restart_at = None;
                self.reload_done(true, format!("worker {pid} replaced the previous worker"));
            }
            Role::Draining => {}
        }
        self.save();
    }

    fn on_exit(&mut self, pid: i32, exit: ExitKind) {
        let Some(index) = self.workers.iter().position(|w| w.pid == pid) else {
            return;
        };
        let mut worker = self.workers.remove(index);
        // A dying worker's last words (e.g. "fatal: ...") may still sit in its socket.
        if let Some(status) = worker.notify.receive().status {
            worker.last_status = Some(status);
        }
        let mut reason = match &worker.killed_for {
            Some(why) => format!("worker {pid}: {why} ({exit})"),
            None => format!("worker {pid}: {exit}"),
        };
        if let Some(status) = &worker.last_status {
            reason.push_str(&format!("; last status: {status}"));
        }
        self.state.last_exit = Some(reason.clone());
        match worker.role {
            Role::Draining => tracing::info!(pid, %exit, "drained worker exited"),
            _ if self.stopping => tracing::info!(pid, %exit, "worker stopped"),
            Role::Pending => {
                tracing::error!(pid, %exit, "replacement worker died before it was ready; the current worker keeps serving");
                self.reload_done(false, reason.clone());
                if !self.workers.iter().any(|w| w.role == Role::Current) {
                    self.crashed(&worker, reason);
                }
            }
            Role::Current => {
                tracing::error!(pid, %exit, uptime_ms = worker.started.elapsed().as_millis() as u64, "worker died");
                self.state.worker_pid = None;
                self.state.worker_started_at = None;
                // A replacement already starting takes over when ready; otherwise restart.
                if !self.workers.iter().any(|w| w.role == Role::Pending) {
                    self.crashed(&worker, reason);
                }
            }
        }
        self.save();
    }

    /// Books a crash and schedules the restart, or gives up.
    fn crashed(&mut self, worker: &Worker, reason: String) {
        let now = Instant::now();
        if worker.started.elapsed() >= self.config.daemon.min_uptime {
            self.backoff.reset();
        }
        self.crashes.push_back(now);
        while self
            .crashes
            .front()
            .is_some_and(|&t| now.duration_since(t) > self.config.daemon.restart_window)
        {
            self.crashes.pop_front();
        }
        let limit = self.config.daemon.max_restarts as usize;
        if self.crashes.len() > limit {
            let why = format!(
                "gave up: {} crashes within {}s (max_restarts = {}); last: {reason}",
                self.crashes.len(),
                self.config.daemon.restart_window.as_secs(),
                limit
            );
            tracing::error!("{why}");
            self.state.gave_up_reason = Some(why.clone());
            self.report_start(format!("error {why}"));
            self.begin_stop(1, libc::SIGINT);
            self.state.phase = Phase::GaveUp;
            return;
        }
        self.schedule_restart_after_failure(reason);
    }

    fn schedule_restart_after_failure(&mut self, reason: String) {
        // Up to +10 % jitter so a fleet of supervisors does not retry in lockstep.
        let jitter = rand::rng().random_range(0.0..=0.1);
        self.backoff.set_max(self.config.daemon.backoff_max);
        let delay = self.backoff.next_pause().mul_f64(1.0 + jitter);
        self.restart_at = Some(Instant::now() + delay);
        self.state.phase = Phase::Backoff;
        self.state.next_backoff_ms = Some(delay.as_millis() as u64);
        tracing::warn!(delay_ms = delay.as_millis() as u64, %reason, "restarting worker after backoff");
    }

    fn on_timers(&mut self, now: Instant) {
        if let Some(at) = self.restart_at
            && now >= at
            && !self.stopping
        {
            self.restart_at = None;
            self.state.restarts += 1;
            self.spawn(Role::Current);
            self.save();
        }
        if let Some(limit) = self.config.daemon.watchdog {
            for worker in &mut self.workers {
                // A hung event loop stops pinging; the socket stays with the supervisor,
                // so connections wait in its queue for the replacement.
                if worker.ready
                    && worker.role != Role::Draining
                    && worker.killed_for.is_none()
                    && now.duration_since(worker.last_ping) > limit
                {
                    let why = format!(
                        "watchdog: no WATCHDOG=1 for {}s (hung?)",
                        now.duration_since(worker.last_ping).as_secs()
                    );
                    tracing::error!(pid = worker.pid, "{why}: SIGKILL and replace");
                    let _ = sys::kill(worker.pid, libc::SIGKILL);
                    self.state.last_guard = Some(format!("worker {}: {why}", worker.pid));
                    worker.killed_for = Some(why);
                }
            }
        }
        self.check_memory(now);
        for worker in &mut self.workers {
            if worker.kill_at.is_some_and(|at| now >= at) {
                tracing::warn!(pid = worker.pid, "worker did not finish in time: SIGKILL");
                let _ = sys::kill(worker.pid, libc::SIGKILL);
                worker.kill_at = None;
            }
        }
        let late: Vec<i32> = self
            .workers
            .iter()
            .filter(|w| !w.ready && w.role == Role::Pending && now >= w.started + READY_TIMEOUT)
            .map(|w| w.pid)
            .collect();
        for pid in late {
            tracing::error!(pid, "replacement worker not ready in time: killing it");
            let _ = sys::kill(pid, libc::SIGKILL);
        }
    }

    /// Replaces the serving worker gracefully when its resident memory has stayed above
    /// `max_rss_mb` for [`RSS_GRACE`] (a brief peak is not a leak).
    fn check_memory(&mut self, now: Instant) {
        let Some(limit) = self.config.daemon.max_rss_bytes else {
            return;
        };
        if self.stopping || self.workers.iter().any(|w| w.role == Role::Pending) {
            return;
        }
        let Some(worker) = self
            .workers
            .iter_mut()
            .find(|w| w.role == Role::Current && w.ready)
        else {
            return;
        };
        let rss = sys::resident_bytes(worker.pid).unwrap_or(0);
        if rss <= limit {
            worker.over_rss_since = None;
            return;
        }
        let since = *worker.over_rss_since.get_or_insert(now);
        if now.duration_since(since) < RSS_GRACE {
            return;
        }
        let why = format!(
            "worker {}: resident memory {} MiB above max_rss_mb = {} for {}s: replaced",
            worker.pid,
            rss / (1024 * 1024),
            limit / (1024 * 1024),
            RSS_GRACE.as_secs()
        );
        tracing::warn!("{why}");
        self.state.last_guard = Some(why);
        self.state.phase = Phase::Replacing;
        self.spawn(Role::Pending);
        self.save();
    }

    /// Stops every worker with `signal`, and kills what is left past its drain and grace.
    fn begin_stop(&mut self, code: i32, signal: i32) {
        self.stopping = true;
        self.exit_code.get_or_insert(code);
        self.restart_at = None;
        self.state.phase = Phase::Stopping;
        let drain = if signal == libc::SIGTERM {
            self.config.shutdown.drain_delay
        } else {
            Duration::ZERO
        };
        let stop_by = Instant::now() + drain + self.config.daemon.stop_timeout + KILL_MARGIN;
        for worker in &mut self.workers {
            let _ = sys::kill(worker.pid, signal);
            worker.kill_at = Some(worker.kill_at.map_or(stop_by, |at| at.min(stop_by)));
        }
        self.save();
    }

    fn reload(&mut self) {
        self.state.reload_attempts += 1;
        if self.stopping {
            return;
        }
        tracing::info!("SIGHUP: reloading configuration and replacing the worker");
        let config = match Config::load(&self.sources) {
            Ok(config) => config,
            Err(err) => {
                tracing::error!(error = %err, "reload refused: the current worker keeps serving");
                self.reload_done(false, err.to_string());
                self.save();
                return;
            }
        };
        if config.listen != self.config.listen {
            tracing::warn!(old = %self.config.listen, new = %config.listen, "`listen` changes need musicd stop + start; keeping the open socket");
        }
        self.config = config;
        if self.workers.iter().any(|w| w.role == Role::Pending) {
            tracing::info!("a replacement is already starting");
            return;
        }
        if self.workers.iter().any(|w| w.role == Role::Current) {
            self.state.phase = Phase::Replacing;
            self.spawn(Role::Pending);
        } else {
            // In backoff: restart at once with the new configuration.
            self.restart_at = Some(Instant::now());
            self.backoff.reset();
            self.reload_done(true, "no worker was running: starting one".into());
        }
        self.save();
    }

    fn reload_done(&mut self, ok: bool, message: String) {
        self.state.last_reload = Some(ReloadOutcome {
            attempt: self.state.reload_attempts,
            ok,
            message,
        });
    }

    fn reopen_log(&mut self) {
        match std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(&self.config.daemon.log_file)
        {
            Ok(file) => {
                if let Err(err) = sys::redirect_output(&file) {
                    tracing::error!(error = %err, "cannot reopen log file");
                }
                tracing::info!("SIGUSR1: log file reopened");
            }
            Err(err) => tracing::error!(error = %err, "cannot reopen log file"),
        }
        for worker in &mut self.workers {
            if worker.ready {
                let _ = sys::kill(worker.pid, libc::SIGUSR1);
            } else {
                worker.reopen_owed = true;
            }
        }
    }

    fn report_start(&mut self, line: String) {
        if let Some(mut pipe) = self.report.take() {
            let _ = writeln!(pipe, "{line}");
        }
    }

    fn save(&self) {
        if let Err(err) = write_state(&self.config.daemon.state_dir, &self.state) {
            tracing::warn!(error = %err, "cannot write state file");
        }
    }

    fn finish(&mut self, code: i32) -> i32 {
        if self.state.phase != Phase::GaveUp {
            self.state.phase = Phase::Stopped;
        }
        self.state.worker_pid = None;
        self.state.worker_started_at = None;
        self.save();
        self.report_start(format!("error supervisor exited with code {code}"));
        let _ = std::fs::remove_file(&self.config.daemon.pid_file);
        tracing::info!(code, "supervisor exiting");
        code
    }
}
