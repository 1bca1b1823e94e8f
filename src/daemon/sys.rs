//! The few system calls the process lifecycle needs and std does not wrap: signal masks and
//! signalfd, non-blocking reaping, `kill`, `flock`, `poll`, fd redirection, the small
//! pre-exec steps of a worker, and taking what systemd or the supervisor hands over
//! (sockets, environment). Every unsafe operation of the daemon is here, one per block,
//! each with the reason it is sound (`clippy::undocumented_unsafe_blocks` and
//! `multiple_unsafe_ops_per_block` enforce it); the three `unsafe fn`s state the
//! precondition their callers in `daemon::run` uphold (a single thread, descriptors
//! handed to this process).

use std::fs::File;
use std::io;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};
use std::time::Duration;

/// Signals the supervisor handles synchronously through its signalfd.
pub(crate) const SUPERVISOR_SIGNALS: [i32; 5] = [
    libc::SIGTERM,
    libc::SIGINT,
    libc::SIGHUP,
    libc::SIGUSR1,
    libc::SIGCHLD,
];

fn cvt(ret: libc::c_int) -> io::Result<libc::c_int> {
    if ret < 0 {
        Err(io::Error::last_os_error())
    } else {
        Ok(ret)
    }
}

/// Points stdout and stderr at `file` (both end up sharing its open file description).
pub(crate) fn redirect_output(file: &File) -> io::Result<()> {
    // Rust's stdout/stderr handles are plain fd 1/2 wrappers, so they follow the new file.
    for target in [libc::STDOUT_FILENO, libc::STDERR_FILENO] {
        // SAFETY: dup2 on a valid fd we hold onto a standard fd; no memory is involved.
        cvt(unsafe { libc::dup2(file.as_raw_fd(), target) })?;
    }
    Ok(())
}

/// Blocks `signals` for this (single-threaded) process and returns a signalfd for them, so
/// that they are read as data in the supervisor's poll loop instead of interrupting it.
pub(crate) fn signalfd(signals: &[i32]) -> io::Result<OwnedFd> {
    let set = sigset(signals);
    // SAFETY: `set` is an initialised local sigset; only the process signal mask changes.
    cvt(unsafe { libc::sigprocmask(libc::SIG_BLOCK, &set, std::ptr::null_mut()) })?;
    // SAFETY: reads the local set; returns a new descriptor or -1.
    let fd = cvt(unsafe { libc::signalfd(-1, &set, libc::SFD_CLOEXEC | libc::SFD_NONBLOCK) })?;
    // SAFETY: signalfd just returned this descriptor, owned by nobody else.
    Ok(unsafe { OwnedFd::from_raw_fd(fd) })
}

/// A sigset holding `signals`.
fn sigset(signals: &[i32]) -> libc::sigset_t {
    // SAFETY: sigset_t is plain data; all-zero is a valid value, and sigemptyset sets it.
    let mut set: libc::sigset_t = unsafe { std::mem::zeroed() };
    // SAFETY: writes the local set only.
    unsafe { libc::sigemptyset(&mut set) };
    for &signal in signals {
        // SAFETY: writes the local set only.
        unsafe { libc::sigaddset(&mut set, signal) };
    }
    set
}

/// Reads one pending signal number from a signalfd, if any.
pub(crate) fn read_signal(fd: &OwnedFd) -> Option<i32> {
    // SAFETY: signalfd_siginfo is plain data; all-zero is a valid value.
    let mut info: libc::signalfd_siginfo = unsafe { std::mem::zeroed() };
    let size = std::mem::size_of::<libc::signalfd_siginfo>();
    let target = (&mut info as *mut libc::signalfd_siginfo).cast();
    // SAFETY: read writes at most `size` bytes into `info`, which is that large.
    let n = unsafe { libc::read(fd.as_raw_fd(), target, size) };
    if n == size as isize {
        i32::try_from(info.ssi_signo).ok()
    } else {
        None
    }
}

/// Waits until one of `fds` is readable or `timeout` passes; returns which are readable.
pub(crate) fn poll_readable(fds: &[RawFd], timeout: Duration) -> io::Result<Vec<bool>> {
    let mut pollfds: Vec<libc::pollfd> = fds
        .iter()
        .map(|&fd| libc::pollfd {
            fd,
            events: libc::POLLIN,
            revents: 0,
        })
        .collect();
    let millis = libc::c_int::try_from(timeout.as_millis()).unwrap_or(libc::c_int::MAX);
    // SAFETY: pollfds is a live, correctly sized array for the duration of the call.
    let ret = unsafe { libc::poll(pollfds.as_mut_ptr(), pollfds.len() as libc::nfds_t, millis) };
    if ret < 0 {
        let err = io::Error::last_os_error();
        if err.kind() == io::ErrorKind::Interrupted {
            return Ok(vec![false; fds.len()]);
        }
        return Err(err);
    }
    Ok(pollfds
        .iter()
        .map(|p| p.revents & libc::POLLIN != 0)
        .collect())
}

/// How a child ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum ExitKind {
    /// `exit(code)`.
    Code(i32),
    /// Killed by a signal.
    Signal(i32),
}

impl std::fmt::Display for ExitKind {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            ExitKind::Code(code) => write!(f, "exit code {code}"),
            ExitKind::Signal(signal) => {
                write!(f, "killed by signal {signal} ({})", signal_name(*signal))
            }
        }
    }
}

/// A short name for common signals.
pub(crate) fn signal_name(signal: i32) -> &'static str {
    match signal {
        libc::SIGKILL => "SIGKILL",
        libc::SIGTERM => "SIGTERM",
        libc::SIGINT => "SIGINT",
        libc::SIGSEGV => "SIGSEGV",
        libc::SIGABRT => "SIGABRT",
        libc::SIGBUS => "SIGBUS",
        libc::SIGHUP => "SIGHUP",
        _ => "signal",
    }
}

/// Reaps one exited child without blocking.
pub(crate) fn reap_child() -> Option<(i32, ExitKind)> {
    let mut status: libc::c_int = 0;
    // SAFETY: status is a valid out-pointer; WNOHANG makes the call non-blocking.
    let pid = unsafe { libc::waitpid(-1, &mut status, libc::WNOHANG) };
    if pid <= 0 {
        return None;
    }
    let kind = if libc::WIFEXITED(status) {
        ExitKind::Code(libc::WEXITSTATUS(status))
    } else {
        ExitKind::Signal(libc::WTERMSIG(status))
    };
    Some((pid, kind))
}

/// Sends `signal` to `pid`.
pub(crate) fn kill(pid: i32, signal: i32) -> io::Result<()> {
    // SAFETY: kill(2) takes plain integers.
    cvt(unsafe { libc::kill(pid, signal) }).map(|_| ())
}

/// Whether a process with this pid exists (and we may signal it).
pub(crate) fn alive(pid: i32) -> bool {
    pid > 0 && kill(pid, 0).is_ok()
}

/// Whether another process holds an exclusive `flock` on the file.
pub(crate) fn locked_by_other(file: &File) -> bool {
    // SAFETY: flock on a valid fd we own.
    let got = unsafe { libc::flock(file.as_raw_fd(), libc::LOCK_EX | libc::LOCK_NB) } == 0;
    if got {
        // SAFETY: as above; the lock we just got is released right away.
        unsafe { libc::flock(file.as_raw_fd(), libc::LOCK_UN) };
    }
    !got
}

/// Prepares a freshly forked worker before exec. Runs between fork and exec, in the child
/// of the single-threaded supervisor.
///
/// * the listening socket goes to fd 3 (`SD_LISTEN_FDS_START`), the ops socket (if any) to
///   fd 4, and both stay open across exec;
/// * the signal mask the supervisor set is cleared (masks are inherited across exec, and a
///   worker with SIGTERM blocked could never be stopped);
/// * the worker gets SIGTERM if the supervisor dies, so no orphan keeps the port.
pub(crate) fn prepare_worker(listener: RawFd, ops: Option<RawFd>) -> io::Result<()> {
    // Only async-signal-safe syscalls on integers and a local sigset, as required between
    // fork and exec. The ops socket moves first: it may sit on fd 3, which the listener is
    // about to take.
    let ops = match ops {
        // SAFETY: fcntl on a descriptor this process holds.
        Some(3) => Some(cvt(unsafe { libc::fcntl(3, libc::F_DUPFD_CLOEXEC, 5) })?),
        other => other,
    };
    keep_across_exec(listener, 3)?;
    if let Some(ops) = ops {
        keep_across_exec(ops, 4)?;
    }
    let empty = sigset(&[]);
    // SAFETY: sets the mask from an initialised local set.
    cvt(unsafe { libc::sigprocmask(libc::SIG_SETMASK, &empty, std::ptr::null_mut()) })?;
    // SAFETY: prctl with integer arguments.
    cvt(unsafe { libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGTERM, 0, 0, 0) })?;
    // The supervisor may already be gone between fork and prctl.
    // SAFETY: getppid takes nothing and cannot fail.
    if unsafe { libc::getppid() } == 1 {
        return Err(io::Error::other("supervisor exited"));
    }
    Ok(())
}

/// Puts `fd` on `target` with close-on-exec cleared (async-signal-safe).
fn keep_across_exec(fd: RawFd, target: RawFd) -> io::Result<()> {
    if fd == target {
        // SAFETY: fcntl on a descriptor this process holds.
        let flags = cvt(unsafe { libc::fcntl(target, libc::F_GETFD) })?;
        // SAFETY: as above.
        cvt(unsafe { libc::fcntl(target, libc::F_SETFD, flags & !libc::FD_CLOEXEC) })?;
    } else {
        // SAFETY: dup2 of a held descriptor; it clears FD_CLOEXEC on the new one.
        cvt(unsafe { libc::dup2(fd, target) })?;
    }
    Ok(())
}

/// Makes `command` exec as a worker: its listening sockets on fd 3 (and 4), a clean signal
/// mask, SIGTERM when the supervisor dies ([`prepare_worker`], between fork and exec).
pub(crate) fn exec_as_worker(
    command: &mut std::process::Command,
    listener: RawFd,
    ops: Option<RawFd>,
) {
    use std::os::unix::process::CommandExt;
    // SAFETY: the closure runs between fork and exec and only makes async-signal-safe
    // syscalls (prepare_worker), allocating nothing.
    unsafe {
        command.pre_exec(move || prepare_worker(listener, ops));
    }
}

/// Whether systemd asked for watchdog pings (`WATCHDOG_USEC`), and how often; the variables
/// are removed so no child inherits them.
///
/// # Safety
/// No other thread may exist (it changes the environment).
pub(crate) unsafe fn take_watchdog() -> Option<Duration> {
    // SAFETY: the caller guarantees that this process has a single thread.
    unsafe { sd_notify::watchdog_enabled_and_unset_env() }
}

/// Removes environment variables from this process.
///
/// # Safety
/// No other thread may exist (`setenv`/`unsetenv` are not thread-safe): call it before the
/// runtime is built.
pub(crate) unsafe fn remove_env(names: &[&str]) {
    for name in names {
        // SAFETY: the caller guarantees that this process has a single thread.
        unsafe { std::env::remove_var(name) };
    }
}

/// Takes ownership of an inherited listening socket on `fd` (`LISTEN_FDS`) and marks it
/// close-on-exec, as `sd_listen_fds` does.
///
/// # Safety
/// `fd` must be a descriptor handed to this process (by systemd or the supervisor) that
/// nothing else owns, taken exactly once.
pub(crate) unsafe fn take_listener(fd: RawFd) -> io::Result<std::net::TcpListener> {
    // SAFETY: fcntl on a descriptor the caller vouches for.
    let flags = cvt(unsafe { libc::fcntl(fd, libc::F_GETFD) })?;
    // SAFETY: as above.
    cvt(unsafe { libc::fcntl(fd, libc::F_SETFD, flags | libc::FD_CLOEXEC) })?;
    // SAFETY: the caller guarantees the descriptor is ours alone, taken once.
    Ok(unsafe { std::net::TcpListener::from_raw_fd(fd) })
}

/// Raises this process's soft limit of open files to its hard limit (as Go's runtime and
/// nginx's `worker_rlimit_nofile` do: shells hand out 1,024 under a hard limit far
/// higher). The limit in force afterwards.
pub fn raise_open_files_limit() -> io::Result<u64> {
    let mut limit = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: getrlimit writes the local struct.
    cvt(unsafe { libc::getrlimit(libc::RLIMIT_NOFILE, &mut limit) })?;
    if limit.rlim_cur < limit.rlim_max {
        let raised = libc::rlimit {
            // An unlimited hard limit is not a usable soft one; the kernel caps at nr_open.
            rlim_cur: limit.rlim_max.min(1 << 20),
            rlim_max: limit.rlim_max,
        };
        // SAFETY: setrlimit reads the local struct.
        if cvt(unsafe { libc::setrlimit(libc::RLIMIT_NOFILE, &raised) }).is_ok() {
            limit = raised;
        }
    }
    Ok(limit.rlim_cur)
}

/// The resident memory of process `pid` (`VmRSS` in `/proc/{pid}/status`).
pub(crate) fn resident_bytes(pid: i32) -> Option<u64> {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
    let line = status.lines().find(|l| l.starts_with("VmRSS:"))?;
    let kib: u64 = line.split_whitespace().nth(1)?.parse().ok()?;
    Some(kib * 1024)
}

/// Binds a listening TCP socket with a deep accept queue. std's `TcpListener::bind` uses a
/// backlog of 128; connections that arrive while a worker restarts, or in a burst of
/// thousands, wait in this queue, so it is sized like nginx's production setting.
pub(crate) fn listen(
    addr: std::net::SocketAddr,
    backlog: i32,
) -> io::Result<std::net::TcpListener> {
    use socket2::{Domain, Socket, Type};
    let socket = Socket::new(Domain::for_address(addr), Type::STREAM, None)?;
    socket.set_reuse_address(true)?;
    socket.bind(&addr.into())?;
    socket.listen(backlog)?;
    Ok(socket.into())
}

/// Accept-queue length for [`listen`] (the kernel caps it at `net.core.somaxconn`).
pub(crate) const BACKLOG: i32 = 4096;
