//! Connection-level limits hyper does not enforce on its own.
//!
//! [`GuardedIo`] wraps each client socket with two clocks:
//! * a **write timeout**: a write that makes no progress for `write_timeout` (a client that
//!   stopped reading, its window full) fails, and the connection is dropped instead of
//!   holding a file and a task forever;
//! * an **idle timeout**: a read that waits with no traffic in either direction for
//!   `idle_timeout` (an idle keep-alive connection) fails the same way. Traffic in either
//!   direction resets it, so a long download never counts as idle.
//!
//! Header-read time (slowloris) and header size are hyper's own settings; the connection
//! cap and the URL length limit live in [`super::serve`] and the access layer.

use std::io;
use std::pin::Pin;
use std::task::{Context, Poll};
use std::time::Duration;

use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::time::{Instant, Sleep};

/// A socket with write-stall and idle deadlines.
pub struct GuardedIo<T> {
    inner: T,
    write_timeout: Duration,
    idle_timeout: Duration,
    last_activity: Instant,
    write_timer: Option<Pin<Box<Sleep>>>,
    idle_timer: Option<Pin<Box<Sleep>>>,
}

impl<T> GuardedIo<T> {
    /// Wraps `inner`.
    pub fn new(inner: T, write_timeout: Duration, idle_timeout: Duration) -> GuardedIo<T> {
        GuardedIo {
            inner,
            write_timeout,
            idle_timeout,
            last_activity: Instant::now(),
            write_timer: None,
            idle_timer: None,
        }
    }

    fn progressed(&mut self) {
        self.last_activity = Instant::now();
        self.write_timer = None;
        self.idle_timer = None;
    }

    /// Progress resets the clocks; a pending write runs the write-stall clock.
    fn after_write(
        &mut self,
        cx: &mut Context<'_>,
        polled: Poll<io::Result<usize>>,
    ) -> Poll<io::Result<usize>> {
        match polled {
            Poll::Ready(result) => {
                self.progressed();
                Poll::Ready(result)
            }
            Poll::Pending => self.poll_write_deadline(cx).map(Err),
        }
    }

    fn poll_write_deadline(&mut self, cx: &mut Context<'_>) -> Poll<io::Error> {
        let deadline = Instant::now() + self.write_timeout;
        let timer = self
            .write_timer
            .get_or_insert_with(|| Box::pin(tokio::time::sleep_until(deadline)));
        match timer.as_mut().poll(cx) {
            Poll::Ready(()) => Poll::Ready(io::Error::new(
                io::ErrorKind::TimedOut,
                "client stopped reading (write timeout)",
            )),
            Poll::Pending => Poll::Pending,
        }
    }
}

use std::future::Future;

impl<T: AsyncRead + Unpin> AsyncRead for GuardedIo<T> {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        let this = &mut *self;
        match Pin::new(&mut this.inner).poll_read(cx, buf) {
            Poll::Ready(result) => {
                this.progressed();
                Poll::Ready(result)
            }
            Poll::Pending => {
                // Idle only while nothing is being written either (a download in progress
                // keeps the connection busy even though the client sends nothing).
                if this.write_timer.is_some() {
                    return Poll::Pending;
                }
                let deadline = this.last_activity + this.idle_timeout;
                let timer = this
                    .idle_timer
                    .get_or_insert_with(|| Box::pin(tokio::time::sleep_until(deadline)));
                match timer.as_mut().poll(cx) {
                    Poll::Ready(()) => Poll::Ready(Err(io::Error::new(
                        io::ErrorKind::TimedOut,
                        "connection idle (keep-alive timeout)",
                    ))),
                    Poll::Pending => Poll::Pending,
                }
            }
        }
    }
}

impl<T: AsyncWrite + Unpin> AsyncWrite for GuardedIo<T> {
    fn poll_write(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        let this = &mut *self;
        let polled = Pin::new(&mut this.inner).poll_write(cx, buf);
        this.after_write(cx, polled)
    }

    fn poll_write_vectored(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        let this = &mut *self;
        let polled = Pin::new(&mut this.inner).poll_write_vectored(cx, bufs);
        this.after_write(cx, polled)
    }

    fn is_write_vectored(&self) -> bool {
        self.inner.is_write_vectored()
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        let this = &mut *self;
        match Pin::new(&mut this.inner).poll_flush(cx) {
            Poll::Ready(result) => Poll::Ready(result),
            Poll::Pending => this.poll_write_deadline(cx).map(Err),
        }
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.inner).poll_shutdown(cx)
    }
}
