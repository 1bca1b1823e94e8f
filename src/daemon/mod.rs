//! Process lifecycle: the worker (`musicd run`), the supervisor (`musicd start`) and the
//! commands that control it.
//!
//! * [`run`] serves in the foreground. It takes its listening socket from the
//!   `LISTEN_FDS` convention when one is passed (systemd socket activation, or the
//!   supervisor), reports readiness with `sd_notify`, and drains on SIGTERM/SIGINT.
//! * [`supervisor`] keeps a worker running forever-style; [`control`] is `start`, `stop`,
//!   `restart` and `status`; [`state`] the pid and state files they share; [`notify`] the
//!   sd_notify protocol; [`sys`] the raw system calls.
//!
//! The runtime is built by hand (not `#[tokio::main]`) so `start` can fork before any
//! thread exists.

pub mod control;
pub mod notify;
pub(crate) mod state;
pub(crate) mod supervisor;
pub(crate) mod sys;

pub use sys::raise_open_files_limit;

use std::net::SocketAddr;
use std::os::fd::RawFd;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use tokio::net::TcpListener;

use crate::config::Config;
use crate::http;
use crate::server::{Listeners, Server};

/// Why the daemon stopped with an error.
#[derive(Debug, thiserror::Error)]
pub enum DaemonError {
    /// The runtime could not be built.
    #[error("cannot start the async runtime: {0}")]
    Runtime(#[source] std::io::Error),
    /// The listen address could not be bound.
    #[error("cannot listen on {addr}: {source}")]
    Bind {
        /// The address.
        addr: SocketAddr,
        /// Why.
        source: std::io::Error,
    },
    /// The inherited socket is unusable.
    #[error("inherited socket (LISTEN_FDS): {0}")]
    Inherited(#[source] std::io::Error),
    /// The log file could not be opened.
    #[error("log file {path}: {source}")]
    LogFile {
        /// The file.
        path: PathBuf,
        /// Why.
        source: std::io::Error,
    },
    /// The server could not be built or failed.
    #[error(transparent)]
    Server(#[from] http::ServerError),
}

/// Options of `musicd run`.
#[derive(Debug, Default, Clone)]
pub struct RunOptions {
    /// Send stdout/stderr to this file (append) and reopen it on SIGUSR1.
    pub log_file: Option<PathBuf>,
}

/// Sets up `tracing` output on stderr: `RUST_LOG` if set, else the configured level.
pub fn init_logging(level: &str) {
    let filter = tracing_subscriber::EnvFilter::try_from_default_env()
        .or_else(|_| tracing_subscriber::EnvFilter::try_new(level))
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("info"));
    let _ = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_target(true)
        .with_writer(std::io::stderr)
        .with_ansi(std::io::IsTerminal::is_terminal(&std::io::stderr()))
        .try_init();
}

fn open_log(path: &PathBuf) -> Result<std::fs::File, DaemonError> {
    std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(path)
        .map_err(|source| DaemonError::LogFile {
            path: path.clone(),
            source,
        })
}

/// Sockets passed by systemd or the supervisor.
#[derive(Default)]
struct Inherited {
    /// The public listener (`listen`).
    http: Option<std::net::TcpListener>,
    /// The ops listener (`ops_listen`).
    ops: Option<std::net::TcpListener>,
}

/// The sockets passed by systemd or the supervisor, if any (`LISTEN_FDS`, from fd 3): the
/// first is the public one, a second (or one named `ops` in `LISTEN_FDNAMES`) the ops one.
///
/// systemd also sets `LISTEN_PID` to the receiving process; when it is present it must be
/// ours. The supervisor leaves it out: Rust's `Command` fixes the child's environment
/// before fork, so the child's own pid cannot be put there, and the variables are only
/// ever set for the worker it execs.
fn inherited_listeners() -> Result<Inherited, DaemonError> {
    let count = std::env::var("LISTEN_FDS").ok();
    let target = std::env::var("LISTEN_PID").ok();
    let names = std::env::var("LISTEN_FDNAMES").ok();
    // SAFETY: called from `run` before the runtime (or any other thread) exists, which is
    // what remove_env requires. Removing them keeps them from leaking to any child.
    unsafe { sys::remove_env(&["LISTEN_FDS", "LISTEN_PID", "LISTEN_FDNAMES"]) };
    let Some(count) = count else {
        return Ok(Inherited::default());
    };
    if target.is_some_and(|pid| pid.trim() != std::process::id().to_string()) {
        return Ok(Inherited::default());
    }
    let count: RawFd = count.trim().parse().map_err(|_| {
        DaemonError::Inherited(std::io::Error::other(format!(
            "LISTEN_FDS={count} is not a number"
        )))
    })?;
    const LISTEN_FDS_START: RawFd = 3;
    let names: Vec<String> = names
        .map(|n| n.split(':').map(str::to_string).collect())
        .unwrap_or_default();
    let mut inherited = Inherited::default();
    for index in 0..count.clamp(0, 2) {
        let fd = LISTEN_FDS_START + index;
        // SAFETY: LISTEN_FDS says fd 3 onwards are listening sockets handed to this
        // process alone; each is taken exactly once.
        let listener = unsafe { sys::take_listener(fd) }.map_err(DaemonError::Inherited)?;
        listener.local_addr().map_err(DaemonError::Inherited)?;
        let is_ops = match names.get(index as usize) {
            Some(name) if !name.is_empty() => name == "ops",
            _ => index == 1,
        };
        if is_ops {
            inherited.ops = Some(listener);
        } else {
            inherited.http = Some(listener);
        }
    }
    Ok(inherited)
}

/// Descriptors kept for what is neither a client connection nor a cached open file:
/// listeners, Redis and MongoDB connections, event-loop and log descriptors.
pub(crate) const RESERVED_DESCRIPTORS: u64 = 128;

/// Fits the configuration to the open-file limit, so a valid track never fails because
/// descriptors ran out: the open-file cache keeps at most a quarter of the limit, and
/// `max_connections` is capped at what is left, counting two descriptors a connection (its
/// socket, and a file it may be sending that the cache does not hold). Past the cap a
/// connection gets the clean 503. What had to be lowered: (open files, connections).
pub(crate) fn fit_to_descriptors(
    config: &mut Config,
    limit: u64,
) -> (Option<usize>, Option<usize>) {
    let open_files_cap = usize::try_from(limit / 4).unwrap_or(usize::MAX);
    let open_files = (config.cache.open_files > open_files_cap).then(|| {
        config.cache.open_files = open_files_cap;
        open_files_cap
    });
    let reserved = config.cache.open_files as u64 + RESERVED_DESCRIPTORS;
    let room = usize::try_from(limit.saturating_sub(reserved) / 2)
        .unwrap_or(usize::MAX)
        .max(1);
    let connections = (config.limits.max_connections > room).then(|| {
        config.limits.max_connections = room;
        room
    });
    (open_files, connections)
}

/// Serves in the foreground until SIGTERM or SIGINT.
pub fn run(mut config: Config, options: RunOptions) -> Result<(), DaemonError> {
    if let Some(path) = &options.log_file {
        let file = open_log(path)?;
        sys::redirect_output(&file).map_err(|source| DaemonError::LogFile {
            path: path.clone(),
            source,
        })?;
    }
    init_logging(&config.log_level);
    for name in &config.ignored_env {
        tracing::warn!(variable = %name, "environment variable names no configuration key; ignored");
    }
    match sys::raise_open_files_limit() {
        Ok(limit) => {
            let (open_files, connections) = fit_to_descriptors(&mut config, limit);
            if open_files.is_some() || connections.is_some() {
                tracing::warn!(
                    open_files_limit = limit,
                    max_connections = config.limits.max_connections,
                    cache_open_files = config.cache.open_files,
                    "lowered to fit the open-file limit (raise LimitNOFILE or ulimit -n)"
                );
            }
        }
        Err(err) => tracing::warn!(error = %err, "cannot read the open-file limit"),
    }
    let inherited = inherited_listeners()?;
    // SAFETY: as above, no other thread exists yet.
    let watchdog = unsafe { sys::take_watchdog() };
    // The first of the per-core event loops runs here; see `serve_until_stopped`.
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .map_err(DaemonError::Runtime)?;
    let result = runtime.block_on(serve_until_stopped(config, options, inherited, watchdog));
    if let Err(err) = &result {
        // Tell the supervisor (or systemd) why, so `musicd status` can show it.
        notify::status(&format!("fatal: {err}"));
    }
    result
}

async fn serve_until_stopped(
    config: Config,
    options: RunOptions,
    inherited: Inherited,
    watchdog: Option<Duration>,
) -> Result<(), DaemonError> {
    // First of all: SIGUSR1's default action kills. The supervisor passes it on only to a
    // ready worker, but under systemd logrotate signals `musicd run` itself, at any time;
    // what arrives before the handler task runs waits for it.
    let other = OtherSignals::install();
    let ops_listener = match (inherited.ops, config.ops_listen) {
        (_, None) => None,
        (Some(listener), Some(_)) => Some(listener),
        (None, Some(addr)) => Some(
            sys::listen(addr, sys::BACKLOG).map_err(|source| DaemonError::Bind { addr, source })?,
        ),
    };
    let std_listener = match inherited.http {
        Some(listener) => listener,
        None => sys::listen(config.listen, sys::BACKLOG).map_err(|source| DaemonError::Bind {
            addr: config.listen,
            source,
        })?,
    };
    std_listener
        .set_nonblocking(true)
        .map_err(DaemonError::Inherited)?;
    let local = std_listener.local_addr().map_err(DaemonError::Inherited)?;
    let listener = TcpListener::from_std(std_listener).map_err(DaemonError::Inherited)?;
    let server = Server::build(&config).await?;
    // This thread is event loop 0 (the others are started by `serve`). Pinned after the
    // build, so the threads it started (the access log's writer) stay free to move.
    crate::server::pin_event_loop(&config, 0);

    let readiness = http::ops::readiness(server.state()).await;
    let status = format!(
        "serving on {local}: {} (redis {}, mongodb {})",
        readiness.status(),
        if readiness.redis.is_ok() {
            "up"
        } else {
            "down"
        },
        if readiness.mongodb.is_ok() {
            "up"
        } else {
            "down"
        },
    );
    tracing::info!(listen = %local, roots = ?config.media_roots, mode = ?config.serve_mode, backends = readiness.status(), "musicd serving");
    let access_log = server.state().access_log.clone();
    let signals = StopSignals::install();
    // Ready means "accepting": the socket is listening and the router is built. Backends
    // that are down do not hold this back, since cached ids and Redis-less serving work.
    notify::ready(&status);
    if let Some(interval) = watchdog {
        tokio::spawn(async move {
            let mut tick = tokio::time::interval(interval / 2);
            loop {
                tick.tick().await;
                notify::watchdog();
            }
        });
    }
    if let Some(other) = other {
        tokio::spawn(other.handle(options.log_file.clone(), access_log));
    }
    let draining = Arc::clone(&server.state().draining);
    let drain_delay = config.shutdown.drain_delay;
    let stop = async move {
        match signals {
            Some(signals) => signals.drained(&draining, drain_delay).await,
            None => std::future::pending().await,
        }
        notify::stopping();
    };
    let listeners = Listeners {
        http: listener,
        ops: ops_listener,
    };
    server.serve(listeners, stop).await?;
    tracing::info!("musicd stopped");
    Ok(())
}

/// SIGUSR1 reopens the log file and the access log; SIGHUP is logged (reloads are the
/// supervisor's job; the default action of SIGHUP would kill the process).
struct OtherSignals {
    usr1: tokio::signal::unix::Signal,
    hup: tokio::signal::unix::Signal,
}

impl OtherSignals {
    fn install() -> Option<Self> {
        use tokio::signal::unix::{SignalKind, signal};
        match (
            signal(SignalKind::user_defined1()),
            signal(SignalKind::hangup()),
        ) {
            (Ok(usr1), Ok(hup)) => Some(Self { usr1, hup }),
            _ => {
                tracing::warn!("cannot install SIGUSR1/SIGHUP handlers");
                None
            }
        }
    }

    async fn handle(
        self,
        log_file: Option<PathBuf>,
        access_log: Option<Arc<http::access_log::AccessLog>>,
    ) {
        let Self { mut usr1, mut hup } = self;
        loop {
            tokio::select! {
                _ = usr1.recv() => {
                    if let Some(log) = &access_log {
                        match log.reopen() {
                            Ok(()) => tracing::info!("SIGUSR1: access log reopened"),
                            Err(err) => tracing::error!(error = %err, "cannot reopen the access log"),
                        }
                    }
                    if let Some(path) = &log_file {
                        match open_log(path) {
                            Ok(file) => match sys::redirect_output(&file) {
                                Ok(()) => tracing::info!("SIGUSR1: log file reopened"),
                                Err(err) => tracing::error!(error = %err, "cannot reopen log file"),
                            },
                            Err(err) => tracing::error!(error = %err, "cannot reopen log file"),
                        }
                    }
                }
                _ = hup.recv() => tracing::info!("SIGHUP ignored by the worker: use `musicd restart` (or systemctl restart)"),
            }
        }
    }
}

/// What asked the process to stop.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum StopSignal {
    Term,
    Int,
}

/// SIGTERM and SIGINT, caught from the moment this is made: made before readiness is
/// announced, so a stop that comes right after it is never lost (as PID 1 in a container,
/// a signal with no handler is ignored, and the scheduler would wait its whole grace).
struct StopSignals {
    term: tokio::signal::unix::Signal,
    int: tokio::signal::unix::Signal,
}

impl StopSignals {
    fn install() -> Option<StopSignals> {
        use tokio::signal::unix::{SignalKind, signal};
        match (
            signal(SignalKind::terminate()),
            signal(SignalKind::interrupt()),
        ) {
            (Ok(term), Ok(int)) => Some(StopSignals { term, int }),
            _ => {
                tracing::error!("cannot install signal handlers; stop with SIGKILL");
                None
            }
        }
    }

    /// Completes when the listeners should close. At once on SIGINT, or on SIGTERM without
    /// a drain delay. With one, the first SIGTERM sets `draining` (`/readyz` answers 503)
    /// and serving goes on for `delay`, the time a load balancer takes to stop sending new
    /// connections; a second SIGTERM or a SIGINT cuts it short. `musicd restart` hands its
    /// socket over and stops the old worker with SIGINT: nothing to drain there.
    async fn drained(mut self, draining: &std::sync::atomic::AtomicBool, delay: Duration) {
        let first = tokio::select! {
            _ = self.term.recv() => StopSignal::Term,
            _ = self.int.recv() => StopSignal::Int,
        };
        if first == StopSignal::Int || delay.is_zero() {
            let name = match first {
                StopSignal::Term => "SIGTERM",
                StopSignal::Int => "SIGINT",
            };
            tracing::info!("{name}: stopping gracefully");
            return;
        }
        draining.store(true, std::sync::atomic::Ordering::Relaxed);
        tracing::info!(
            "draining for {}: /readyz answers 503, new connections are still served",
            humantime::format_duration(delay)
        );
        notify::status("draining");
        tokio::select! {
            () = tokio::time::sleep(delay) => tracing::info!("drained: stopping gracefully"),
            _ = self.term.recv() => tracing::info!("a second SIGTERM: stopping gracefully now"),
            _ = self.int.recv() => tracing::info!("SIGINT: stopping gracefully now"),
        }
    }
}

/// Completes on the first SIGTERM or SIGINT.
pub async fn stop_signal() {
    match StopSignals::install() {
        Some(signals) => {
            let never = std::sync::atomic::AtomicBool::new(false);
            signals.drained(&never, Duration::ZERO).await;
        }
        None => std::future::pending().await,
    }
}
