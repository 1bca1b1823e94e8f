//! One client connection's state machine: read a head, read (and drop) its body, answer,
//! keep the connection or close it, and the clocks that bound each wait.
//!
//! States and their clocks (all from [`Settings`]):
//! * waiting for the first request, or for the rest of a started head:
//!   `header_read_timeout`, counted from accept (first request) or from the head's first
//!   byte, never from a later wake-up;
//! * reading a request body: `body_read_timeout` from the end of its head, whatever
//!   trickles in; past it the request gets a 408 and the connection closes (a head that
//!   does not arrive in time is closed silently, as nginx does: there is no request to
//!   answer);
//! * an idle keep-alive connection: `idle_timeout`;
//! * a response whose client stops taking bytes: `write_timeout` without progress
//!   (`send`).
//!
//! Closing is staged (RFC 9112 §9.6): after an answer that says `connection: close`, or a
//! refusal, the connection half-closes and reads what the client still sends for a moment
//! ([`STAGED_CLOSE_DRAIN`]) before it closes, so unread input does not turn the close into a reset that
//! destroys the answer in flight. A refusal always closes, so a request pipelined after a
//! malformed one is never answered.
//!
//! When the server stops, idle connections close at once, a response in flight finishes
//! (then the connection closes), and a connection accepted just before the stop gets
//! [`FIRST_REQUEST_GRACE`] to send its request.

use std::future::Future;
use std::io;
use std::net::{IpAddr, SocketAddr};
use std::pin::Pin;
use std::sync::Arc;
use std::task::Poll;
use std::time::Duration;

use axum::http::{Method, Version};
use bytes::{Buf, BytesMut};
use tokio::io::{AsyncWriteExt, Interest};
use tokio::net::TcpStream;
use tokio::sync::watch;
use tokio::time::Instant;

use super::Settings;
use super::framing::CONTINUE;
use super::head::{self, HeadError, RequestHead};
use super::proxy_protocol::{self, Proxied};
use super::request_body::BodyReader;
use super::spare;
use crate::http::service::{Answer, Exchange, Pacing, Received, RequestId, Service};

/// How long, once stopping, a connection accepted just before may take to send its first
/// request. Closing it at once would reset a client whose connect raced the stop.
pub(crate) const FIRST_REQUEST_GRACE: Duration = Duration::from_secs(1);

/// Bytes reserved for reading a request head.
const READ_CHUNK: usize = 1024;

/// After an answer that closes the connection, unread input is drained for this long, so
/// the close does not turn into a reset that destroys the answer in flight.
pub(crate) const STAGED_CLOSE_DRAIN: Duration = Duration::from_secs(1);

/// Most bytes drained during a staged close.
const STAGED_CLOSE_BYTES: usize = 1 << 20;

/// Everything the connections of one listener share: the service and the settings.
pub(crate) struct Shared<S> {
    /// What answers the requests.
    pub(crate) service: S,
    /// Timeouts and limits.
    pub(crate) settings: Settings,
}

/// Serves one connection from `peer` until it closes, fails, times out or the server
/// stops.
pub(crate) async fn serve_connection<S: Service>(
    stream: TcpStream,
    peer: SocketAddr,
    shared: Arc<Shared<S>>,
    stop: watch::Receiver<bool>,
) {
    let now = Instant::now();
    let stopping = *stop.borrow();
    let mut signal = stop.clone();
    let timer = Box::pin(tokio::time::sleep_until(
        now + shared.settings.header_read_timeout,
    ));
    let mut connection = Connection {
        stream,
        input: BytesMut::new(),
        output: BytesMut::new(),
        shared,
        stop,
        stop_signal: Box::pin(async move {
            // Also done when the server is gone (sender dropped).
            let _ = signal.wait_for(|stopping| *stopping).await;
        }),
        stop_armed: false,
        timer,
        stopping_since: stopping.then_some(now),
        served: 0,
        accepted: now,
        peer: peer.ip(),
        head_written: None,
        pacing: None,
        paced_since: None,
        last_read: now.into_std(),
        current: None,
    };
    connection.run().await;
}

/// One connection. The senders (`send`) are its other `impl` block.
pub(super) struct Connection<S> {
    pub(super) stream: TcpStream,
    input: BytesMut,
    /// Answers (heads and small bodies) waiting to be written together.
    pub(super) output: BytesMut,
    pub(super) shared: Arc<Shared<S>>,
    stop: watch::Receiver<bool>,
    /// Completes when the server stops. Kept across waits, so it registers once.
    stop_signal: Pin<Box<dyn Future<Output = ()> + Send>>,
    /// Whether `stop_signal` has been polled and holds this task's waker.
    stop_armed: bool,
    /// The connection's one timer, re-armed lazily: only when a wait needs an earlier
    /// deadline, or when it fires before the current wait's deadline. Most requests then
    /// touch no timer at all.
    timer: Pin<Box<tokio::time::Sleep>>,
    stopping_since: Option<Instant>,
    served: u64,
    accepted: Instant,
    /// The peer, or the client a PROXY protocol header named.
    peer: IpAddr,
    /// When the current response's head was written (time to first byte).
    pub(super) head_written: Option<std::time::Instant>,
    /// The current response's pacing, if it has any.
    pub(super) pacing: Option<Pacing>,
    /// When the current response's pacing began (its free start sent).
    pub(super) paced_since: Option<std::time::Instant>,
    /// When the last read that brought request bytes returned: when a head (and body)
    /// read from it had been read in full, as nginx's `$request_time` counts.
    last_read: std::time::Instant,
    /// The last clock read, while it is still the present for the connection's clocks:
    /// nothing but non-blocking calls has happened since. Forgotten at every wait. Each
    /// clock read saved is about 20 ns, a request made four and now makes two.
    pub(super) current: Option<std::time::Instant>,
}

/// What a wait for input is for, and so which clock bounds it.
#[derive(Debug, Clone, Copy)]
enum Wait {
    /// The first request's head (or its rest), counted from accept.
    FirstHead,
    /// The rest of a later head whose first byte came at this instant.
    Head(Instant),
    /// A request body whose head ended at this instant.
    Body(Instant),
    /// A keep-alive connection between requests.
    Idle,
}

/// How a wait for input ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Read {
    /// Bytes arrived.
    Data,
    /// The wait's clock ran out.
    TimedOut,
    /// The client closed, the socket failed, or the server stops.
    Gone,
}

/// How an exchange left the connection.
pub(super) enum After {
    /// Ready for the next request.
    KeepAlive,
    /// Close it cleanly (the answer said `connection: close`).
    Close,
    /// The answer could not be completed; close without further ado.
    Abort,
}

impl<S: Service> Connection<S> {
    async fn run(&mut self) {
        if self.shared.settings.proxy_protocol && !self.read_proxy_header().await {
            return;
        }
        let mut head_started: Option<Instant> = None;
        loop {
            let parsed = head::parse_head(&self.input, self.shared.settings.head_limits);
            let head = match parsed {
                Ok(Some(head)) => head,
                Ok(None) => {
                    // Pipelined answers wait in `output` until no request is left to read.
                    if self.flush().await.is_err() {
                        return;
                    }
                    let wait = if self.served == 0 {
                        Wait::FirstHead
                    } else if self.input.is_empty() {
                        Wait::Idle
                    } else {
                        Wait::Head(*head_started.get_or_insert_with(Instant::now))
                    };
                    if self.read_more(wait).await != Read::Data {
                        return;
                    }
                    continue;
                }
                Err(refusal) => {
                    // The method may still be readable: a refused HEAD gets no body either.
                    let start = self.input.iter().position(|b| !b"\r\n".contains(b));
                    let is_head = start.is_some_and(|at| self.input[at..].starts_with(b"HEAD "));
                    Box::pin(self.refuse(refusal, is_head)).await;
                    return;
                }
            };
            head_started = None;
            let after = match BodyReader::new(head.body) {
                // Nearly every request: the head is read where it lies, and the buffer
                // then moves past it. Splitting it off (below) shares the buffer: an
                // allocation and three locked counts a request.
                None => {
                    let input = std::mem::take(&mut self.input);
                    let len = head.len;
                    // Not boxed (`refuse` and the body path are): a box per request, its
                    // allocation and the kilobyte-and-more copy of the future into it, cost
                    // 2-3 % of the CPU per request (paired rounds, 4 KiB and 1,000 files).
                    // Held inline, the future makes a waiting connection 0.9 KiB larger
                    // (3.5 -> 4.5 KiB of RSS each, 5,000 idle connections): a trade for a
                    // server whose connections are mostly streaming, not waiting.
                    let after = self.exchange(head, &input[..len]).await;
                    self.input = input;
                    self.input.advance(len);
                    after
                }
                Some(body) => {
                    // The head's bytes stay shared (not copied) while the body is read
                    // past them and the service reads them.
                    let raw = self.input.split_to(head.len).freeze();
                    match self.read_body(body, head.expect_continue).await {
                        Ok(Read::Data) => {}
                        Ok(Read::Gone) => return,
                        Ok(Read::TimedOut) => {
                            let refusal = HeadError::BodyTimeout;
                            Box::pin(self.refuse(refusal, head.method == Method::HEAD)).await;
                            return;
                        }
                        Err(refusal) => {
                            Box::pin(self.refuse(refusal, head.method == Method::HEAD)).await;
                            return;
                        }
                    }
                    Box::pin(self.exchange(head, &raw)).await
                }
            };
            match after {
                After::KeepAlive => {}
                After::Close => {
                    if self.flush().await.is_ok() {
                        self.linger().await;
                    }
                    return;
                }
                After::Abort => return,
            }
            self.served += 1;
            if self.input.is_empty() {
                // An idle keep-alive connection holds no buffer (thousands of them wait
                // for every one that is busy): it goes back to the loop's spares (whole
                // again: any head split from it was dropped with its exchange).
                spare::give(std::mem::take(&mut self.input));
            }
        }
    }

    /// Reads the PROXY protocol header the connection must start with, and takes the
    /// client from it. `false`: there is none (the connection is closed).
    async fn read_proxy_header(&mut self) -> bool {
        loop {
            match proxy_protocol::parse(&self.input) {
                Proxied::Header { source, len } => {
                    if let Some(client) = source {
                        self.peer = client;
                    }
                    self.input.advance(len);
                    return true;
                }
                Proxied::Invalid => {
                    tracing::debug!(peer = %self.peer, "connection without a valid PROXY header");
                    return false;
                }
                Proxied::Incomplete => {
                    if self.read_more(Wait::FirstHead).await != Read::Data {
                        return false;
                    }
                }
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

    /// Reads a request body to its end, dropping it. `Ok(Read::Data)`: it ended;
    /// `Err`: the body cannot be framed, refuse.
    async fn read_body(
        &mut self,
        mut body: BodyReader,
        expect_continue: bool,
    ) -> Result<Read, HeadError> {
        let started = Instant::now();
        let mut asked = false;
        loop {
            if body.consume(&mut self.input)? {
                return Ok(Read::Data);
            }
            if expect_continue && !asked {
                // RFC 9110 §10.1.1: the client waits for this before it sends the body.
                // Earlier pipelined answers go first, in order.
                asked = true;
                self.output.extend_from_slice(CONTINUE);
                if self.flush().await.is_err() {
                    return Ok(Read::Gone);
                }
            }
            match self.read_more(Wait::Body(started)).await {
                Read::Data => {}
                other => return Ok(other),
            }
        }
    }

    /// Waits for more request bytes, for at most the clock of `wait` (or, idle, until the
    /// server stops).
    async fn read_more(&mut self, wait: Wait) -> Read {
        // Every clock runs from a fixed instant (accept, the head's first byte, the body's
        // start, this wait's start), not from each wake-up: a connection woken by the lazy
        // timer must not extend its own time. An idle wait starts when the last answer
        // left, read then if nothing has waited since.
        let current = self.current.take();
        let waiting_since = match wait {
            Wait::Idle => current.map_or_else(Instant::now, Instant::from_std),
            _ => Instant::now(),
        };
        loop {
            let settings = &self.shared.settings;
            let mut deadline = match wait {
                Wait::FirstHead => self.accepted + settings.header_read_timeout,
                Wait::Head(started) => started + settings.header_read_timeout,
                Wait::Body(started) => started + settings.body_read_timeout,
                Wait::Idle => waiting_since + settings.idle_timeout,
            };
            let stopping = self.stopping();
            if let Some(since) = self.stopping_since {
                if matches!(wait, Wait::Idle) {
                    return Read::Gone;
                }
                deadline = deadline.min(since + FIRST_REQUEST_GRACE);
            }
            if self.timer.deadline() > deadline {
                self.timer.as_mut().reset(deadline);
            }
            if !stopping && !self.stop_armed {
                // Polled once, the stop signal holds this task's waker, which never
                // changes: the stop wakes the task, and the last branch below sees it
                // with one atomic load. Polled at every wait, it took a lock shared by
                // every loop's connections once a request.
                let signal =
                    std::future::poll_fn(|cx| Poll::Ready(self.stop_signal.as_mut().poll(cx)));
                if signal.await.is_ready() {
                    self.stopping_since.get_or_insert_with(Instant::now);
                    continue;
                }
                self.stop_armed = true;
            }
            // Waiting before reserving: an idle connection holds no read buffer.
            tokio::select! {
                biased;
                // Not `readable()`: its future joins a list of waiters under a lock, and
                // leaves it under the lock again, where this keeps the one reader's waker.
                ready = std::future::poll_fn(|cx| self.stream.poll_read_ready(cx)) => {
                    if ready.is_err() {
                        return Read::Gone;
                    }
                }
                () = self.timer.as_mut() => {
                    if Instant::now() >= deadline {
                        return Read::TimedOut;
                    }
                    self.timer.as_mut().reset(deadline);
                    continue;
                }
                () = std::future::poll_fn(|_| {
                    if self.stop.has_changed().unwrap_or(true) { Poll::Ready(()) } else { Poll::Pending }
                }), if !stopping => {
                    continue;
                }
            }
            if self.input.capacity() == 0 {
                self.input = spare::take(READ_CHUNK);
            } else if self.input.capacity() - self.input.len() < READ_CHUNK / 4 {
                self.input.reserve(READ_CHUNK);
            }
            let room = self.input.capacity() - self.input.len();
            match self.stream.try_read_buf(&mut self.input) {
                Ok(0) => return Read::Gone,
                Ok(read) => {
                    let now = std::time::Instant::now();
                    self.last_read = now;
                    self.current = Some(now);
                    if read < room {
                        // A read that did not fill the buffer emptied the socket: forget
                        // its readiness, so the next wait goes to the event loop's poll
                        // instead of a read that finds nothing (a third of the reads under
                        // load did). Bytes arriving later raise a new edge, and a closed
                        // peer stays ready (tokio keeps "read closed").
                        let _ = self.stream.try_io(Interest::READABLE, || {
                            Err::<(), _>(io::ErrorKind::WouldBlock.into())
                        });
                    }
                    return Read::Data;
                }
                Err(err)
                    if matches!(
                        err.kind(),
                        io::ErrorKind::WouldBlock | io::ErrorKind::Interrupted
                    ) => {}
                Err(_) => return Read::Gone,
            }
        }
    }

    /// Answers one request; `raw` holds its head's bytes.
    async fn exchange(&mut self, mut head: RequestHead, raw: &[u8]) -> After {
        let started = self.last_read;
        self.head_written = None;
        let keep_alive = head.keep_alive && !self.stopping();
        let request_id = RequestId::given_or_next(head.request_id.take());
        let request = head.request(raw, self.peer, started);
        // `self.shared` is borrowed, not cloned: a clone is a locked add and a locked
        // subtract per request on a count every connection of every loop shares.
        let (answer, context) = self.shared.service.call(&request).await;
        // The service may have waited (a lookup): `respond` reads the clock again.
        self.current = None;
        let status = answer.status;
        let sent = self
            .respond(
                answer,
                request.is_head(),
                keep_alive,
                head.version,
                &request_id,
            )
            .await;
        let (bytes, complete, after) = match sent {
            Ok((bytes, true)) => (bytes, true, After::KeepAlive),
            Ok((bytes, false)) => (bytes, true, After::Close),
            Err(bytes) => (bytes, false, After::Abort),
        };
        let exchange = Exchange {
            received: Received::Request(&request),
            request_id: &request_id,
            status,
            bytes,
            complete,
            started,
            head_written: self.head_written,
            ended: self.current.unwrap_or_else(std::time::Instant::now),
        };
        self.shared.service.finish(&exchange, Some(context));
        after
    }

    /// Answers a request that cannot be served, then closes (staged).
    async fn refuse(&mut self, refusal: HeadError, is_head: bool) {
        let started = std::time::Instant::now();
        self.head_written = None;
        let shared = Arc::clone(&self.shared);
        let request_id = RequestId::next();
        let answer = Answer::json_error(refusal.status(), &refusal.to_string());
        let status = answer.status;
        let sent = self
            .respond(answer, is_head, false, Version::HTTP_11, &request_id)
            .await;
        let bytes = match sent {
            Ok((bytes, _)) | Err(bytes) => bytes,
        };
        let flushed = self.flush().await.is_ok();
        let exchange = Exchange {
            received: Received::Refused {
                peer: self.peer,
                head: is_head,
            },
            request_id: &request_id,
            status,
            bytes,
            complete: flushed,
            started,
            head_written: self.head_written,
            ended: std::time::Instant::now(),
        };
        shared.service.finish(&exchange, None);
        if flushed {
            self.linger().await;
        }
    }

    /// Half-closes and reads what the client still sends, briefly: closing a socket with
    /// unread input makes the kernel send a reset, which can destroy the answer before the
    /// client has read it.
    async fn linger(&mut self) {
        // The input buffer, not an array: a buffer held across an await would sit in every
        // connection's future.
        staged_close(&mut self.stream, &mut self.input, STAGED_CLOSE_BYTES).await;
    }
}

/// Half-closes `stream` and reads (into `buffer`, dropped) what the client still sends,
/// for at most [`STAGED_CLOSE_DRAIN`] and `limit` bytes, so the close does not reset an answer away.
pub(super) async fn staged_close(stream: &mut TcpStream, buffer: &mut BytesMut, limit: usize) {
    let _ = stream.shutdown().await;
    let deadline = Instant::now() + STAGED_CLOSE_DRAIN;
    let mut drained = 0usize;
    while drained < limit {
        let read = tokio::time::timeout_at(deadline, stream.readable()).await;
        if !matches!(read, Ok(Ok(()))) {
            return;
        }
        buffer.clear();
        buffer.reserve(READ_CHUNK);
        match stream.try_read_buf(buffer) {
            Ok(0) => return,
            Ok(n) => drained += n,
            Err(err) if err.kind() == io::ErrorKind::WouldBlock => {}
            Err(_) => return,
        }
    }
}
