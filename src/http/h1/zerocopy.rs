//! The socket calls tokio does not offer: `send(2)` with `MSG_MORE`, `sendmsg(2)` for a
//! head and its body in one call, and `sendfile(2)`.
//!
//! Large file bodies go from the page cache to the socket with `sendfile`, so their bytes
//! never pass through user space (nginx's `sendfile on`); the response head goes first with
//! `MSG_MORE`, so head and body leave in full packets even with `TCP_NODELAY` set (nginx's
//! `tcp_nopush`). Both are non-blocking on the socket side: callers run them inside
//! tokio's readiness loop (`TcpStream::try_io`), which treats `WouldBlock` as "wait for
//! writable". All `unsafe` of the HTTP server is in this module.

use std::fs::File;
use std::io;
use std::os::fd::{AsRawFd, BorrowedFd};

/// Sends `data` on socket `socket`; with `more`, tells the kernel more follows
/// (`MSG_MORE`): it holds a partial packet back until the next send without the flag.
pub(crate) fn send(socket: BorrowedFd<'_>, data: &[u8], more: bool) -> io::Result<usize> {
    let flags = libc::MSG_NOSIGNAL | if more { libc::MSG_MORE } else { 0 };
    // SAFETY: `data` is a valid, initialised slice for the duration of the call; the kernel
    // only reads `data.len()` bytes from it. An invalid descriptor is reported as EBADF.
    let sent = unsafe { libc::send(socket.as_raw_fd(), data.as_ptr().cast(), data.len(), flags) };
    if sent < 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(sent as usize)
}

/// Sends `parts` in order on socket `socket` in one call. `sendmsg`, not `writev`: a
/// socket's write through the file layer (`writev`) costs the position lock and the
/// file-write checks for nothing; tokio's vectored write is the latter.
pub(crate) fn send_vectored(
    socket: BorrowedFd<'_>,
    parts: &[io::IoSlice<'_>],
) -> io::Result<usize> {
    // SAFETY: an all-zero msghdr is a valid empty message (no name, no control data).
    let mut message: libc::msghdr = unsafe { std::mem::zeroed() };
    // `IoSlice` is guaranteed ABI-compatible with `iovec` on Unix; the kernel only reads
    // through it.
    message.msg_iov = parts.as_ptr().cast_mut().cast();
    message.msg_iovlen = parts.len() as _;
    // SAFETY: `message` points at `parts.len()` valid iovecs borrowed for the call, each
    // naming initialised memory the kernel only reads; no name or control buffer is given.
    // An invalid descriptor is reported as EBADF.
    let sent = unsafe { libc::sendmsg(socket.as_raw_fd(), &message, libc::MSG_NOSIGNAL) };
    if sent < 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(sent as usize)
}

/// Sends up to `len` bytes of `file` starting at `offset` on socket `socket`, without
/// copying them through user space. Returns how many were sent; `Ok(0)` for a non-empty
/// request means the file ended before `offset + len` (it shrank).
pub(crate) fn send_file(
    socket: BorrowedFd<'_>,
    file: &File,
    offset: u64,
    len: usize,
) -> io::Result<usize> {
    let mut position = libc::off_t::try_from(offset)
        .map_err(|_| io::Error::new(io::ErrorKind::InvalidInput, "offset too large"))?;
    // SAFETY: both descriptors are borrowed from live objects for the call; `position` is a
    // valid, exclusively borrowed off_t the kernel updates. sendfile with an offset pointer
    // does not move the file's own offset, so concurrent senders of one file do not race.
    let sent = unsafe { libc::sendfile(socket.as_raw_fd(), file.as_raw_fd(), &mut position, len) };
    if sent < 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(sent as usize)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::{Read, Write};
    use std::os::fd::AsFd;
    use std::os::unix::net::UnixStream;

    #[test]
    fn send_file_sends_the_slice_and_reports_the_end_of_the_file() {
        let mut file = tempfile::tempfile().expect("temp file");
        file.write_all(b"0123456789").expect("write");
        let (left, mut right) = UnixStream::pair().expect("socket pair");
        assert_eq!(send_file(left.as_fd(), &file, 2, 5).expect("sent"), 5);
        assert_eq!(send_file(left.as_fd(), &file, 10, 5).expect("at end"), 0);
        assert_eq!(send(left.as_fd(), b"!", true).expect("sent"), 1);
        let parts = [
            io::IoSlice::new(b"head;"),
            io::IoSlice::new(b""),
            io::IoSlice::new(b"body"),
        ];
        assert_eq!(send_vectored(left.as_fd(), &parts).expect("sent"), 9);
        drop(left);
        let mut received = String::new();
        right.read_to_string(&mut received).expect("read");
        assert_eq!(received, "23456!head;body");
    }
}
