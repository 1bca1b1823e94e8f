//! One client connection: read request heads, answer them in order, keep the connection.
//!
//! musicd speaks HTTP/1.1 itself instead of through hyper, for the two things a file
//! server spends its time on:
//! * **large bodies** go out with `sendfile(2)` from the open file ([`super::zerocopy`]):
//!   no copy through user space, no blocking-pool hop per chunk (hyper can only send
//!   bytes it was handed, which cost 5x nginx's CPU per GB);
//! * **small answers** cost one `read` and one `write`: the head is formatted into a
//!   buffer and leaves with the body in one `writev`; pipelined answers leave together.
//!
//! `sendfile` runs on the event loop, like nginx without `aio`: a file that is not in the
//! page cache makes the loop wait for the disk. Hot catalogues live in the page cache; a
//! cold one behind slow disks is better served in `x-accel-redirect` mode with nginx's
//! thread pools.
//!
//! The track route is answered without the router; every other request (ops endpoints,
//! odd methods, unknown paths) goes through the axum [`Router`](axum::Router), so those
//! answers are exactly what the router says.
//!
//! Clocks: a connection waiting for its first request, or for the rest of a started head,
//! has `header_read_timeout`; an idle keep-alive connection has `idle_timeout`; a response
//! whose client stops taking bytes has `write_timeout` without progress. When the server
//! stops, idle connections close at once, a response in flight finishes (then the
//! connection closes), and a connection accepted just before the stop gets
//! [`FIRST_REQUEST_GRACE`] to send its request.

use std::fmt;
use std::fs::File;
use std::future::Future;
use std::io;
use std::os::fd::{AsRawFd, RawFd};
use std::os::unix::fs::FileExt;
use std::pin::Pin;
use std::sync::Arc;
use std::time::Duration;

use axum::body::Body;
use axum::http::{Method, Request, Version};
use bytes::{Buf, BufMut, Bytes, BytesMut};
use http_body_util::BodyExt;
use tokio::io::{AsyncWriteExt, Interest};
use tokio::net::TcpStream;
use tokio::sync::watch;
use tokio::time::Instant;

use super::body::{Payload, Segment};
use super::error::{Outcome, json_status};
use super::file::Answer;
use super::filecache::Identity;
use super::metrics::{self, Metrics};
use super::wire::{
    self, BodyLength, HeadError, HeadLimits, RequestHead, RequestId, ResponseHead, Target,
};
use super::zerocopy;
use super::{App, ServeOptions};
use crate::catalog::CacheOutcome;

/// How long, once stopping, a connection accepted just before may take to send its first
/// request. Closing it at once would reset a client whose connect raced the stop.
pub const FIRST_REQUEST_GRACE: Duration = Duration::from_secs(1);

/// Answers (heads and small bodies) are collected up to this size before a write.
const OUTPUT_COALESCE: usize = 64 * 1024;

/// Bytes read per step when a file body is copied rather than sent with `sendfile`.
const COPY_CHUNK: usize = 256 * 1024;

/// Bytes reserved for reading a request head.
const READ_CHUNK: usize = 1024;

/// After an error answer that closes the connection, unread input is drained for this
/// long, so the close does not turn into a reset that destroys the answer in flight.
const LINGER: Duration = Duration::from_secs(1);

/// Everything the connections of one listener share.
pub struct Shared {
    /// Routes and state.
    pub app: App,
    /// Timeouts and limits.
    pub options: ServeOptions,
    /// Head size limits.
    pub limits: HeadLimits,
}

/// Serves one connection until it closes, fails, times out or the server stops.
pub async fn serve_connection(stream: TcpStream, shared: Arc<Shared>, stop: watch::Receiver<bool>) {
    let now = Instant::now();
    let stopping = *stop.borrow();
    let fd = stream.as_raw_fd();
    let mut signal = stop.clone();
    let timer = Box::pin(tokio::time::sleep_until(
        now + shared.options.header_read_timeout,
    ));
    let mut connection = Connection {
        stream,
        fd,
        input: BytesMut::new(),
        output: BytesMut::new(),
        shared,
        stop,
        stop_signal: Box::pin(async move {
            // Also done when the server is gone (sender dropped).
            let _ = signal.wait_for(|stopping| *stopping).await;
        }),
        timer,
        stopping_since: stopping.then_some(now),
        served: 0,
        head_started: None,
        logging: tracing::enabled!(target: "musicd::access", tracing::Level::INFO),
    };
    connection.run().await;
}

struct Connection {
    stream: TcpStream,
    fd: RawFd,
    input: BytesMut,
    output: BytesMut,
    shared: Arc<Shared>,
    stop: watch::Receiver<bool>,
    /// Completes when the server stops. Kept across waits, so it registers once.
    stop_signal: Pin<Box<dyn Future<Output = ()> + Send>>,
    /// The connection's one timer, re-armed lazily: only when a wait needs an earlier
    /// deadline, or when it fires before the current wait's deadline. Most requests then
    /// touch no timer at all.
    timer: Pin<Box<tokio::time::Sleep>>,
    stopping_since: Option<Instant>,
    served: u64,
    /// When the first byte of the head being read arrived.
    head_started: Option<Instant>,
    /// Whether access-log lines are written (checked once per connection).
    logging: bool,
}

/// How an exchange left the connection.
enum After {
    /// Ready for the next request.
    KeepAlive,
    /// Close it cleanly (the answer said `connection: close`).
    Close,
    /// The answer could not be completed; close without further ado.
    Abort,
}

impl Connection {
    async fn run(&mut self) {
        let logging = self.logging;
        loop {
            let app = &self.shared.app;
            let parsed = wire::parse_head(&self.input, self.shared.limits, logging, |path| {
                app.track_id(path)
            });
            let head = match parsed {
                Ok(Some(head)) => head,
                Ok(None) => {
                    // Pipelined answers wait in `output` until no request is left to read.
                    if self.flush().await.is_err() || !self.read_more().await {
                        return;
                    }
                    continue;
                }
                Err(refusal) => {
                    Box::pin(self.refuse(refusal)).await;
                    return;
                }
            };
            self.input.advance(head.len);
            self.head_started = None;
            if head.body_length > 0 && !self.discard_body(head.body_length).await {
                return;
            }
            // Boxed (as is `refuse`): an exchange's future is a kilobyte and more, held only
            // while it runs instead of by every waiting connection.
            match Box::pin(self.exchange(head)).await {
                After::KeepAlive => {}
                After::Close => {
                    let _ = self.flush().await;
                    let _ = self.stream.shutdown().await;
                    return;
                }
                After::Abort => return,
            }
            self.served += 1;
            if self.input.is_empty() {
                // An idle keep-alive connection holds no buffer (thousands of them wait
                // for every one that is busy); the next request allocates afresh.
                self.input = BytesMut::new();
            }
        }
    }

    fn stopping(&mut self) -> bool {
        // `has_changed` is one atomic load; the only change ever sent is "stop".
        if self.stopping_since.is_none() && self.stop.has_changed().unwrap_or(true) {
            self.stopping_since = Some(Instant::now());
        }
        self.stopping_since.is_some()
    }

    /// Waits for more request bytes. `false`: the connection is done (closed by the
    /// client, timed out, or idle while the server stops).
    async fn read_more(&mut self) -> bool {
        // Every clock runs from when this wait began (or the head's first byte), not from
        // each wake-up: a connection woken by the lazy timer must not extend its own time.
        let waiting_since = Instant::now();
        loop {
            let options = &self.shared.options;
            let mut deadline = if !self.input.is_empty() {
                *self.head_started.get_or_insert(waiting_since) + options.header_read_timeout
            } else if self.served == 0 {
                waiting_since + options.header_read_timeout
            } else {
                waiting_since + options.idle_timeout
            };
            let stopping = self.stopping();
            if let Some(since) = self.stopping_since {
                if self.input.is_empty() && self.served > 0 {
                    return false;
                }
                deadline = deadline.min(since + FIRST_REQUEST_GRACE);
            }
            if self.timer.deadline() > deadline {
                self.timer.as_mut().reset(deadline);
            }
            // Waiting before reserving: an idle connection holds no read buffer.
            tokio::select! {
                biased;
                ready = self.stream.readable() => {
                    if ready.is_err() {
                        return false;
                    }
                }
                () = self.timer.as_mut() => {
                    if Instant::now() >= deadline {
                        return false;
                    }
                    self.timer.as_mut().reset(deadline);
                    continue;
                }
                () = self.stop_signal.as_mut(), if !stopping => {
                    self.stopping_since.get_or_insert_with(Instant::now);
                    continue;
                }
            }
            if self.input.capacity() - self.input.len() < READ_CHUNK / 4 {
                self.input.reserve(READ_CHUNK);
            }
            match self.stream.try_read_buf(&mut self.input) {
                Ok(0) => return false,
                Ok(_) => return true,
                Err(err)
                    if matches!(
                        err.kind(),
                        io::ErrorKind::WouldBlock | io::ErrorKind::Interrupted
                    ) => {}
                Err(_) => return false,
            }
        }
    }

    /// Reads and drops a (small, bounded by the parser) request body.
    async fn discard_body(&mut self, mut remaining: u64) -> bool {
        loop {
            let here = remaining.min(self.input.len() as u64) as usize;
            self.input.advance(here);
            remaining -= here as u64;
            if remaining == 0 {
                return true;
            }
            self.head_started = Some(Instant::now());
            if !self.read_more().await {
                return false;
            }
        }
    }

    /// Answers one request.
    async fn exchange(&mut self, head: RequestHead) -> After {
        // The clock is read only for the access log's latency field.
        let started = self.logging.then(std::time::Instant::now);
        let shared = Arc::clone(&self.shared);
        let state = &shared.app.state;
        let metrics = &state.metrics;
        metrics.response_started();
        let keep_alive = head.keep_alive && !self.stopping();
        let is_head = head.method == Method::HEAD;
        let request_id = match head.request_id {
            Some(given) => RequestId::Given(given),
            None => RequestId::next(),
        };
        let (route, outcome, response) = match head.target {
            Target::Track { id, request } => {
                let (outcome, result) = super::track_response(state, id, request).await;
                let answer = result.unwrap_or_else(|error| {
                    Answer::from_response(
                        axum::response::IntoResponse::into_response(error).map(Payload::Body),
                    )
                });
                ("track", outcome, answer)
            }
            Target::Other { uri, headers } => {
                let route = match uri.path() {
                    "/healthz" => "healthz",
                    "/readyz" => "readyz",
                    "/metrics" => "metrics",
                    _ => "other",
                };
                let mut request = Request::new(Body::empty());
                *request.method_mut() = head.method.clone();
                *request.uri_mut() = uri;
                *request.version_mut() = head.version;
                *request.headers_mut() = headers;
                // Boxed, like the resolver's remote path: kept out of every connection's
                // resting size.
                let response = Box::pin(shared.app.route(request)).await;
                let (route, outcome) = match response.extensions().get::<Outcome>() {
                    Some(Outcome(outcome)) => ("track", *outcome),
                    None => (route, CacheOutcome::None),
                };
                (
                    route,
                    outcome,
                    Answer::from_response(response.map(Payload::Body)),
                )
            }
        };
        let status = response.status;
        let sent = self
            .respond(response, is_head, keep_alive, head.version, &request_id)
            .await;
        let (bytes, complete, after) = match sent {
            Ok((bytes, true)) => (bytes, true, After::Close),
            Ok((bytes, false)) if keep_alive => (bytes, true, After::KeepAlive),
            Ok((bytes, false)) => (bytes, true, After::Close),
            Err(bytes) => (bytes, false, After::Abort),
        };
        finish(
            metrics,
            Finished {
                route,
                status: status.as_u16(),
                bytes,
                cache: outcome,
                complete,
                method: &head.method,
                path: &head.log_path,
                request_id: &request_id,
                started,
            },
        );
        after
    }

    /// Sends a response. `Ok((body bytes, must close))`, or `Err(body bytes sent)` when the
    /// transfer failed part-way and the connection must be dropped.
    async fn respond(
        &mut self,
        answer: Answer,
        is_head: bool,
        mut keep_alive: bool,
        version: Version,
        request_id: &RequestId,
    ) -> Result<(u64, bool), u64> {
        let Answer {
            status,
            lines,
            headers,
            payload,
        } = answer;
        let length = if !wire::has_body(status, false) {
            BodyLength::None
        } else {
            match payload.exact_len() {
                Some(len) => BodyLength::Known(len),
                None if version == Version::HTTP_11 => BodyLength::Chunked,
                None => {
                    keep_alive = false;
                    BodyLength::UntilClose
                }
            }
        };
        wire::write_head(
            &mut self.output,
            &ResponseHead {
                status,
                lines: &lines,
                headers: &headers,
                length,
                keep_alive,
                version,
                request_id,
            },
        );
        if !wire::has_body(status, is_head) {
            return Ok((0, !keep_alive));
        }
        let sent = match payload {
            Payload::Empty => Ok(0),
            Payload::Bytes(bytes) => self.send_bytes(bytes).await,
            Payload::File {
                file,
                segments,
                opened,
            } => self.send_file(&file, segments, opened).await,
            Payload::Body(body) => self.send_body(body, length == BodyLength::Chunked).await,
        };
        sent.map(|bytes| (bytes, !keep_alive))
    }

    /// Sends `output` now, whatever it holds.
    async fn flush(&mut self) -> io::Result<()> {
        if self.output.is_empty() {
            return Ok(());
        }
        let output = std::mem::take(&mut self.output);
        // Once written the buffer is dropped, not kept: `flush` runs before the connection
        // waits for its next request, and a waiting connection should hold nothing.
        self.send_all(&output, false).await
    }

    async fn send_bytes(&mut self, bytes: Bytes) -> Result<u64, u64> {
        let len = bytes.len() as u64;
        // Tiny bodies join the head; larger ones go out with it in one vectored write.
        if bytes.len() <= 1024 && self.output.len() + bytes.len() <= OUTPUT_COALESCE {
            self.output.put_slice(&bytes);
            return Ok(len);
        }
        let result = self.write_head_and(&bytes).await;
        result.map(|()| len).map_err(|_| 0)
    }

    /// Writes `output` and then `body` with vectored writes, without copying the body.
    async fn write_head_and(&mut self, body: &[u8]) -> io::Result<()> {
        let output = std::mem::take(&mut self.output);
        let mut head = &output[..];
        let mut rest = body;
        while !head.is_empty() || !rest.is_empty() {
            let slices = [io::IoSlice::new(head), io::IoSlice::new(rest)];
            match self.stream.try_write_vectored(&slices) {
                Ok(0) => return Err(io::ErrorKind::WriteZero.into()),
                Ok(mut n) => {
                    let from_head = n.min(head.len());
                    head = &head[from_head..];
                    n -= from_head;
                    rest = &rest[n..];
                }
                Err(err) if err.kind() == io::ErrorKind::WouldBlock => self.wait_writable().await?,
                Err(err) if err.kind() == io::ErrorKind::Interrupted => {}
                Err(err) => return Err(err),
            }
        }
        Ok(())
    }

    /// The head (with `MSG_MORE`, so it shares the first packet with the body), then every
    /// segment: file slices with `sendfile` (or copied, without `zero_copy`), part headers
    /// from memory. A file found changed since it was opened aborts the transfer.
    async fn send_file(
        &mut self,
        file: &File,
        segments: Vec<Segment>,
        opened: Identity,
    ) -> Result<u64, u64> {
        let zero_copy = self.shared.app.state.files.zero_copy;
        let mut sent = 0u64;
        let output = std::mem::take(&mut self.output);
        let head = self.send_all(&output, true).await;
        head.map_err(|_| 0u64)?;
        for segment in segments {
            let result = match segment {
                Segment::Bytes(bytes) => {
                    let written = self.send_all(&bytes, true).await;
                    sent += if written.is_ok() {
                        bytes.len() as u64
                    } else {
                        0
                    };
                    written.map_err(FileSendError::Client)
                }
                Segment::File { offset, len } if zero_copy => {
                    self.send_file_slice(file, offset, len, &mut sent).await
                }
                Segment::File { offset, len } => {
                    self.copy_file_slice(file, opened, offset, len, &mut sent)
                        .await
                }
            };
            match result {
                Ok(()) => {}
                Err(FileSendError::File(err)) => {
                    tracing::warn!(error = %err, "file transfer aborted");
                    return Err(sent);
                }
                Err(FileSendError::Client(err)) => {
                    // Players seek and skip: a client leaving mid-file is routine.
                    tracing::debug!(error = %err, "client left during a file transfer");
                    return Err(sent);
                }
            }
        }
        if zero_copy && changed_since(file, opened) {
            // sendfile reads the page cache as the bytes leave: a file rewritten in place
            // meanwhile may have sent changed bytes. A reset makes the client discard the
            // transfer instead of keeping a body with a success status.
            tracing::warn!("file changed while it was being sent; resetting the connection");
            let _ = socket2::SockRef::from(&self.stream).set_linger(Some(Duration::ZERO));
            return Err(sent);
        }
        Ok(sent)
    }

    /// Sends a file slice by copying it through a buffer, checking after each read that
    /// the file is still the one opened, so a changed chunk is never sent.
    async fn copy_file_slice(
        &mut self,
        file: &File,
        opened: Identity,
        mut offset: u64,
        len: u64,
        sent: &mut u64,
    ) -> Result<(), FileSendError> {
        let mut buffer = vec![0u8; usize::try_from(len).unwrap_or(COPY_CHUNK).min(COPY_CHUNK)];
        let mut left = len;
        while left > 0 {
            let want = usize::try_from(left)
                .unwrap_or(usize::MAX)
                .min(buffer.len());
            let chunk = &mut buffer[..want];
            file.read_exact_at(chunk, offset).map_err(|err| {
                FileSendError::File(if err.kind() == io::ErrorKind::UnexpectedEof {
                    io::Error::new(io::ErrorKind::UnexpectedEof, "file shrank while being sent")
                } else {
                    err
                })
            })?;
            // A truncation updates the size before it zeroes pages, and a write the
            // modification time before it copies: a chunk read during either shows here.
            if changed_since(file, opened) {
                return Err(FileSendError::File(io::Error::other(
                    "file changed while being sent",
                )));
            }
            self.send_all(chunk, false)
                .await
                .map_err(FileSendError::Client)?;
            *sent += want as u64;
            offset += want as u64;
            left -= want as u64;
            tokio::task::consume_budget().await;
        }
        Ok(())
    }

    async fn send_file_slice(
        &mut self,
        file: &File,
        mut offset: u64,
        len: u64,
        sent: &mut u64,
    ) -> Result<(), FileSendError> {
        let fd = self.fd;
        let mut left = len;
        while left > 0 {
            // One call moves at most what the socket buffer takes; the cap only keeps the
            // count within what sendfile accepts.
            let want = usize::try_from(left).unwrap_or(usize::MAX).min(1 << 30);
            match self.stream.try_io(Interest::WRITABLE, || {
                zerocopy::send_file(fd, file, offset, want)
            }) {
                Ok(0) => {
                    return Err(FileSendError::File(io::Error::new(
                        io::ErrorKind::UnexpectedEof,
                        "file shrank while being sent",
                    )));
                }
                Ok(n) => {
                    *sent += n as u64;
                    offset += n as u64;
                    left -= n as u64;
                    // A fast client must not keep the other connections of this loop
                    // waiting for a whole large file.
                    tokio::task::consume_budget().await;
                }
                Err(err) if err.kind() == io::ErrorKind::WouldBlock => {
                    self.wait_writable().await.map_err(FileSendError::Client)?
                }
                Err(err) if err.kind() == io::ErrorKind::Interrupted => {}
                // sendfile reports the socket's errors and the file's alike; a file that
                // cannot be read is the rare one.
                Err(err) if err.kind() == io::ErrorKind::InvalidInput => {
                    return Err(FileSendError::File(err));
                }
                Err(err) => return Err(FileSendError::Client(err)),
            }
        }
        Ok(())
    }

    /// Streams a router body, chunked when its length was not known up front.
    async fn send_body(&mut self, mut body: Body, chunked: bool) -> Result<u64, u64> {
        let mut sent = 0u64;
        loop {
            let frame = match body.frame().await {
                None => break,
                Some(Ok(frame)) => frame,
                Some(Err(err)) => {
                    tracing::debug!(error = %err, "response body failed");
                    return Err(sent);
                }
            };
            let Ok(data) = frame.into_data() else {
                continue;
            };
            if data.is_empty() {
                continue;
            }
            if chunked {
                let _ =
                    fmt::Write::write_fmt(&mut self.output, format_args!("{:x}\r\n", data.len()));
            }
            self.output.put_slice(&data);
            if chunked {
                self.output.put_slice(b"\r\n");
            }
            sent += data.len() as u64;
            if self.output.len() > OUTPUT_COALESCE && self.flush().await.is_err() {
                return Err(sent);
            }
        }
        if chunked {
            self.output.put_slice(b"0\r\n\r\n");
        }
        Ok(sent)
    }

    /// Sends all of `data`; with `more`, the kernel holds a partial packet back for what
    /// follows (`MSG_MORE`).
    async fn send_all(&mut self, mut data: &[u8], more: bool) -> io::Result<()> {
        let fd = self.fd;
        while !data.is_empty() {
            match self
                .stream
                .try_io(Interest::WRITABLE, || zerocopy::send(fd, data, more))
            {
                Ok(0) => return Err(io::ErrorKind::WriteZero.into()),
                Ok(n) => data = &data[n..],
                Err(err) if err.kind() == io::ErrorKind::WouldBlock => self.wait_writable().await?,
                Err(err) if err.kind() == io::ErrorKind::Interrupted => {}
                Err(err) => return Err(err),
            }
        }
        Ok(())
    }

    /// Waits until the socket takes bytes again, for at most the write timeout: a client
    /// that stopped reading is dropped instead of holding a file and a task forever.
    async fn wait_writable(&mut self) -> io::Result<()> {
        match tokio::time::timeout(self.shared.options.write_timeout, self.stream.writable()).await
        {
            Ok(ready) => ready,
            Err(_) => Err(io::Error::new(
                io::ErrorKind::TimedOut,
                "client stopped reading",
            )),
        }
    }

    /// Answers a head that cannot be served, then closes.
    async fn refuse(&mut self, refusal: HeadError) {
        let started = self.logging.then(std::time::Instant::now);
        let metrics = Arc::clone(&self.shared.app.state.metrics);
        metrics.response_started();
        let request_id = RequestId::next();
        let response = Answer::from_response(
            json_status(refusal.status(), &refusal.to_string()).map(Payload::Body),
        );
        let status = response.status;
        let sent = self
            .respond(response, false, false, Version::HTTP_11, &request_id)
            .await;
        let bytes = match sent {
            Ok((bytes, _)) | Err(bytes) => bytes,
        };
        let flushed = self.flush().await.is_ok();
        finish(
            &metrics,
            Finished {
                route: "other",
                status: status.as_u16(),
                bytes,
                cache: CacheOutcome::None,
                complete: flushed,
                method: &Method::GET,
                path: "",
                request_id: &request_id,
                started,
            },
        );
        if flushed {
            self.linger().await;
        }
    }

    /// Half-closes and reads what the client still sends, briefly: closing a socket with
    /// unread input makes the kernel send a reset, which can destroy the answer before the
    /// client has read it.
    async fn linger(&mut self) {
        let _ = self.stream.shutdown().await;
        let deadline = Instant::now() + LINGER;
        let mut drained = 0usize;
        while drained < 1 << 20 {
            let read = tokio::time::timeout_at(deadline, self.stream.readable()).await;
            if !matches!(read, Ok(Ok(()))) {
                return;
            }
            // The input buffer, not an array: a buffer held across an await would sit in
            // every connection's future.
            self.input.clear();
            self.input.reserve(READ_CHUNK);
            match self.stream.try_read_buf(&mut self.input) {
                Ok(0) => return,
                Ok(n) => drained += n,
                Err(err) if err.kind() == io::ErrorKind::WouldBlock => {}
                Err(_) => return,
            }
        }
    }
}

/// Why a file body could not be sent to the end.
enum FileSendError {
    /// The file changed, shrank or could not be read: worth a warning.
    File(io::Error),
    /// The client went away or stopped reading: routine.
    Client(io::Error),
}

/// Whether `file` is no longer what it was when opened (or cannot be checked).
fn changed_since(file: &File, opened: Identity) -> bool {
    file.metadata()
        .map_or(true, |now| Identity::of(&now) != opened)
}

struct Finished<'a> {
    route: &'static str,
    status: u16,
    bytes: u64,
    cache: CacheOutcome,
    complete: bool,
    method: &'a Method,
    path: &'a str,
    request_id: &'a RequestId,
    started: Option<std::time::Instant>,
}

/// Counts the exchange and writes its access-log line.
fn finish(metrics: &Metrics, done: Finished<'_>) {
    metrics.response_finished(
        metrics::route_index(done.route),
        done.status,
        done.bytes,
        done.cache,
    );
    // `%` fields print without quotes, so the line stays grep- and awk-friendly.
    tracing::info!(
        target: "musicd::access",
        id = %done.request_id,
        method = %done.method,
        path = %done.path,
        status = done.status,
        bytes = done.bytes,
        latency_ms = format_args!(
            "{:.3}",
            done.started.map_or(0.0, |t| t.elapsed().as_secs_f64() * 1000.0)
        ),
        cache = %done.cache.as_str(),
        complete = done.complete,
    );
}

/// Answers a connection over the cap with 503 and closes it.
pub async fn refuse_over_cap(mut stream: TcpStream) {
    const BUSY: &[u8] = b"HTTP/1.1 503 Service Unavailable\r\nRetry-After: 1\r\n\
Content-Type: application/json\r\nContent-Length: 37\r\nConnection: close\r\n\r\n\
{\"error\":\"too many connections\"}\n";
    let _ = tokio::time::timeout(Duration::from_secs(1), stream.write_all(BUSY)).await;
    let _ = stream.shutdown().await;
}
