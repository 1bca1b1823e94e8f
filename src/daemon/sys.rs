//! The few system calls the process lifecycle needs and std does not wrap: signal masks and
//! signalfd, non-blocking reaping, `kill`, `flock`, `poll`, fd redirection and the small
//! pre-exec steps of a worker. All `unsafe` of the daemon lives here, each block with the
//! reason it is sound.

use std::fs::File;
use std::io;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};
use std::time::Duration;

/// Signals the supervisor handles synchronously through its signalfd.
pub const SUPERVISOR_SIGNALS: [i32; 5] = [
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
pub fn redirect_output(file: &File) -> io::Result<()> {
    // SAFETY: dup2 on a valid fd we hold onto the standard fds; no memory is involved.
    // Rust's stdout/stderr handles are plain fd 1/2 wrappers, so they follow the new file.
    unsafe {
        cvt(libc::dup2(file.as_raw_fd(), libc::STDOUT_FILENO))?;
        cvt(libc::dup2(file.as_raw_fd(), libc::STDERR_FILENO))?;
    }
    Ok(())
}

/// Blocks `signals` for this (single-threaded) process and returns a signalfd for them, so
/// that they are read as data in the supervisor's poll loop instead of interrupting it.
pub fn signalfd(signals: &[i32]) -> io::Result<OwnedFd> {
    // SAFETY: sigset_t is plain data initialised by sigemptyset before use; the calls only
    // read and write that local set and the process signal mask.
    unsafe {
        let mut set: libc::sigset_t = std::mem::zeroed();
        libc::sigemptyset(&mut set);
        for &signal in signals {
            libc::sigaddset(&mut set, signal);
        }
        cvt(libc::sigprocmask(
            libc::SIG_BLOCK,
            &set,
            std::ptr::null_mut(),
        ))?;
        let fd = cvt(libc::signalfd(
            -1,
            &set,
            libc::SFD_CLOEXEC | libc::SFD_NONBLOCK,
        ))?;
        Ok(OwnedFd::from_raw_fd(fd))
    }
}

/// Reads one pending signal number from a signalfd, if any.
pub fn read_signal(fd: &OwnedFd) -> Option<i32> {
    // SAFETY: signalfd_siginfo is plain data; read writes at most its size into it.
    unsafe {
        let mut info: libc::signalfd_siginfo = std::mem::zeroed();
        let size = std::mem::size_of::<libc::signalfd_siginfo>();
        let n = libc::read(
            fd.as_raw_fd(),
            (&mut info as *mut libc::signalfd_siginfo).cast(),
            size,
        );
        if n == size as isize {
            i32::try_from(info.ssi_signo).ok()
        } else {
            None
        }
    }
}

/// Waits until one of `fds` is readable or `timeout` passes; returns which are readable.
pub fn poll_readable(fds: &[RawFd], timeout: Duration) -> io::Result<Vec<bool>> {
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
pub enum ExitKind {
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
pub fn signal_name(signal: i32) -> &'static str {
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
pub fn reap_child() -> Option<(i32, ExitKind)> {
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
pub fn kill(pid: i32, signal: i32) -> io::Result<()> {
    // SAFETY: kill(2) takes plain integers.
    cvt(unsafe { libc::kill(pid, signal) }).map(|_| ())
}

/// Whether a process with this pid exists (and we may signal it).
pub fn alive(pid: i32) -> bool {
    pid > 0 && kill(pid, 0).is_ok()
}

/// Whether another process holds an exclusive `flock` on the file.
pub fn locked_by_other(file: &File) -> bool {
    // SAFETY: flock on a valid fd we own; a lock we get is released right away.
    unsafe {
        if libc::flock(file.as_raw_fd(), libc::LOCK_EX | libc::LOCK_NB) == 0 {
            libc::flock(file.as_raw_fd(), libc::LOCK_UN);
            false
        } else {
            true
        }
    }
}

/// Prepares a freshly forked worker before exec. Runs between fork and exec, in the child
/// of the single-threaded supervisor.
///
/// * the listening socket goes to fd 3 (`SD_LISTEN_FDS_START`), the ops socket (if any) to
///   fd 4, and both stay open across exec;
/// * the signal mask the supervisor set is cleared (masks are inherited across exec, and a
///   worker with SIGTERM blocked could never be stopped);
/// * the worker gets SIGTERM if the supervisor dies, so no orphan keeps the port.
pub fn prepare_worker(listener: RawFd, ops: Option<RawFd>) -> io::Result<()> {
    // SAFETY: only async-signal-safe syscalls on integers and a local sigset, as required
    // between fork and exec.
    unsafe {
        // The ops socket first: it may sit on fd 3, which the listener is about to take.
        let ops = match ops {
            Some(3) => Some(cvt(libc::fcntl(3, libc::F_DUPFD_CLOEXEC, 5))?),
            other => other,
        };
        if listener == 3 {
            let flags = cvt(libc::fcntl(3, libc::F_GETFD))?;
            cvt(libc::fcntl(3, libc::F_SETFD, flags & !libc::FD_CLOEXEC))?;
        } else {
            // dup2 clears FD_CLOEXEC on the new descriptor.
            cvt(libc::dup2(listener, 3))?;
        }
        if let Some(ops) = ops {
            if ops == 4 {
                let flags = cvt(libc::fcntl(4, libc::F_GETFD))?;
                cvt(libc::fcntl(4, libc::F_SETFD, flags & !libc::FD_CLOEXEC))?;
            } else {
                cvt(libc::dup2(ops, 4))?;
            }
        }
        let mut empty: libc::sigset_t = std::mem::zeroed();
        libc::sigemptyset(&mut empty);
        cvt(libc::sigprocmask(
            libc::SIG_SETMASK,
            &empty,
            std::ptr::null_mut(),
        ))?;
        cvt(libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGTERM, 0, 0, 0))?;
        // The supervisor may already be gone between fork and prctl.
        if libc::getppid() == 1 {
            return Err(io::Error::other("supervisor exited"));
        }
    }
    Ok(())
}

/// Binds a listening TCP socket with a deep accept queue. std's `TcpListener::bind` uses a
/// backlog of 128; connections that arrive while a worker restarts, or in a burst of
/// thousands, wait in this queue, so it is sized like nginx's production setting.
pub fn listen(addr: std::net::SocketAddr, backlog: i32) -> io::Result<std::net::TcpListener> {
    use socket2::{Domain, Socket, Type};
    let socket = Socket::new(Domain::for_address(addr), Type::STREAM, None)?;
    socket.set_reuse_address(true)?;
    socket.bind(&addr.into())?;
    socket.listen(backlog)?;
    Ok(socket.into())
}

/// Accept-queue length for [`listen`] (the kernel caps it at `net.core.somaxconn`).
pub const BACKLOG: i32 = 4096;
