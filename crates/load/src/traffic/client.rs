//! One HTTP/1.1 exchange on its own connection, as a load tool needs it: the time to the
//! first byte and to the last, the status, the body bytes counted (never kept), and, when
//! asked, a body read only in part (an abandoned download) or at a bounded rate (a
//! listener). Written over a plain socket with `httparse` rather than a full client: it
//! holds one small buffer per exchange, so one core keeps thousands of them going.

use std::future::Future;
use std::net::SocketAddr;
use std::time::{Duration, Instant};

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

/// Why an exchange did not complete.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, serde::Serialize)]
#[serde(rename_all = "snake_case")]
pub(crate) enum ErrorKind {
    /// The connection could not be made.
    Connect,
    /// The server went silent past the timeout.
    Timeout,
    /// The connection was reset or broken.
    Reset,
    /// The connection closed before the body's declared end.
    ShortBody,
    /// The answer was not HTTP/1.1 that could be read.
    Protocol,
    /// An answer a player cannot play (not a 2xx).
    Status,
}

impl ErrorKind {
    /// Its name in reports.
    pub(crate) fn as_str(self) -> &'static str {
        match self {
            ErrorKind::Connect => "connect",
            ErrorKind::Timeout => "timeout",
            ErrorKind::Reset => "reset",
            ErrorKind::ShortBody => "short_body",
            ErrorKind::Protocol => "protocol",
            ErrorKind::Status => "status",
        }
    }
}

/// A request to make.
#[derive(Debug, Clone)]
pub(crate) struct Ask<'a> {
    /// `GET` or `HEAD`.
    pub(crate) method: &'a str,
    /// Path and query.
    pub(crate) target: &'a str,
    /// The `Host` header.
    pub(crate) host: &'a str,
    /// A `Range` header, if any.
    pub(crate) range: Option<&'a str>,
    /// Read at most this many body bytes, then close (an abandoned download).
    pub(crate) read_at_most: Option<u64>,
    /// The `User-Agent`.
    pub(crate) agent: &'a str,
}

/// How an exchange went.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Outcome {
    /// The status, when a head arrived.
    pub(crate) status: Option<u16>,
    /// When the first byte of the answer arrived, from the start.
    pub(crate) ttfb: Option<Duration>,
    /// From the start to the end (the last byte read, or the failure).
    pub(crate) latency: Duration,
    /// Body bytes read.
    pub(crate) bytes: u64,
    /// The body's declared length, if any.
    pub(crate) declared: Option<u64>,
    /// The whole file's length, from a 206's `Content-Range`.
    pub(crate) total: Option<u64>,
    /// Why it did not complete.
    pub(crate) error: Option<ErrorKind>,
}

/// Bytes read per step.
const READ_CHUNK: usize = 16 * 1024;

/// Whether to go on reading a body.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Flow {
    /// Read on.
    Continue,
    /// Close the connection now: the player moved on (a seek or a skip). Not an error.
    Stop,
}

thread_local! {
    /// Where body bytes are read to and dropped: one buffer per thread, not one per
    /// exchange, so ten thousand listeners do not hold ten thousand buffers.
    static SCRATCH: std::cell::RefCell<Vec<u8>> = std::cell::RefCell::new(vec![0; 64 * 1024]);
}

/// Largest response head read.
const MAX_HEAD: usize = 32 * 1024;

/// Makes one exchange with `addr`. `timeout` bounds the connect and every silence;
/// `pace(bytes_so_far, declared_length)` is awaited before each read of the body: a
/// listener's playback buffer holds reads back there, or stops the transfer; a plain
/// download passes `|_, _| async { Flow::Continue }`.
pub(crate) async fn exchange<F, Fut>(
    addr: SocketAddr,
    ask: &Ask<'_>,
    timeout: Duration,
    mut pace: F,
) -> Outcome
where
    F: FnMut(u64, Option<u64>) -> Fut,
    Fut: Future<Output = Flow>,
{
    let started = Instant::now();
    let mut outcome = Outcome {
        status: None,
        ttfb: None,
        latency: Duration::ZERO,
        bytes: 0,
        declared: None,
        total: None,
        error: None,
    };
    let fail = |mut outcome: Outcome, kind: ErrorKind| {
        outcome.error = Some(kind);
        outcome.latency = started.elapsed();
        outcome
    };
    let mut stream = match tokio::time::timeout(timeout, TcpStream::connect(addr)).await {
        Ok(Ok(stream)) => stream,
        Ok(Err(_)) | Err(_) => return fail(outcome, ErrorKind::Connect),
    };
    let _ = stream.set_nodelay(true);
    let mut request = format!(
        "{} {} HTTP/1.1\r\nHost: {}\r\nUser-Agent: {}\r\nConnection: close\r\n",
        ask.method, ask.target, ask.host, ask.agent
    );
    if let Some(range) = ask.range {
        request.push_str(&format!("Range: {range}\r\n"));
    }
    request.push_str("\r\n");
    if stream.write_all(request.as_bytes()).await.is_err() {
        return fail(outcome, ErrorKind::Reset);
    }
    let mut buffer = Vec::with_capacity(READ_CHUNK);
    let (head_len, status, framing) = loop {
        let read = match read_some(&mut stream, &mut buffer, timeout).await {
            Ok(read) => read,
            Err(kind) => return fail(outcome, kind),
        };
        if read == 0 {
            return fail(outcome, ErrorKind::Reset);
        }
        outcome.ttfb.get_or_insert_with(|| started.elapsed());
        let mut headers = [httparse::EMPTY_HEADER; 64];
        let mut response = httparse::Response::new(&mut headers);
        match response.parse(&buffer) {
            Ok(httparse::Status::Complete(len)) => {
                let status = response.code.unwrap_or(0);
                outcome.total = response
                    .headers
                    .iter()
                    .find(|h| h.name.eq_ignore_ascii_case("content-range"))
                    .and_then(|h| std::str::from_utf8(h.value).ok())
                    .and_then(|v| v.rsplit_once('/'))
                    .and_then(|(_, total)| total.trim().parse().ok());
                break (
                    len,
                    status,
                    Framing::of(&response, ask.method == "HEAD", status),
                );
            }
            Ok(httparse::Status::Partial) if buffer.len() < MAX_HEAD => {}
            _ => return fail(outcome, ErrorKind::Protocol),
        }
    };
    outcome.status = Some(status);
    let mut body = buffer.split_off(head_len);
    let limit = ask.read_at_most.unwrap_or(u64::MAX);
    let result = match framing {
        Framing::None => Ok(()),
        Framing::Length(length) => {
            outcome.declared = Some(length);
            read_counted(
                &mut stream,
                &mut body,
                length.min(limit),
                timeout,
                &mut outcome,
                &mut pace,
                true,
            )
            .await
        }
        Framing::Chunked => {
            read_chunked(&mut stream, &mut body, limit, timeout, &mut outcome).await
        }
        Framing::UntilClose => {
            read_counted(
                &mut stream,
                &mut body,
                limit,
                timeout,
                &mut outcome,
                &mut pace,
                false,
            )
            .await
        }
    };
    outcome.latency = started.elapsed();
    if let Err(kind) = result {
        outcome.error = Some(kind);
    }
    outcome
}

/// How the answer's body is delimited.
enum Framing {
    None,
    Length(u64),
    Chunked,
    UntilClose,
}

impl Framing {
    fn of(response: &httparse::Response<'_, '_>, head: bool, status: u16) -> Framing {
        if head || status == 204 || status == 304 || (100..200).contains(&status) {
            return Framing::None;
        }
        let header = |name: &str| {
            response
                .headers
                .iter()
                .find(|h| h.name.eq_ignore_ascii_case(name))
                .map(|h| h.value)
        };
        if header("transfer-encoding").is_some_and(|v| v.eq_ignore_ascii_case(b"chunked")) {
            return Framing::Chunked;
        }
        match header("content-length")
            .and_then(|v| std::str::from_utf8(v).ok())
            .and_then(|v| v.trim().parse().ok())
        {
            Some(length) => Framing::Length(length),
            None => Framing::UntilClose,
        }
    }
}

/// Reads up to `at_most` bytes into the thread's scratch buffer, dropping them.
/// `Ok(None)`: nothing came by `wake` (the caller looks at its clock and asks again).
async fn read_dropped(
    stream: &mut TcpStream,
    at_most: u64,
    wake: tokio::time::Instant,
) -> Result<Option<usize>, ErrorKind> {
    loop {
        match tokio::time::timeout_at(wake, stream.readable()).await {
            Ok(Ok(())) => {}
            Ok(Err(_)) => return Err(ErrorKind::Reset),
            Err(_) => return Ok(None),
        }
        let read = SCRATCH.with(|scratch| {
            let mut scratch = scratch.borrow_mut();
            let room = usize::try_from(at_most)
                .unwrap_or(usize::MAX)
                .min(scratch.len());
            stream.try_read(&mut scratch[..room])
        });
        match read {
            Ok(read) => return Ok(Some(read)),
            Err(err) if err.kind() == std::io::ErrorKind::WouldBlock => {}
            Err(_) => return Err(ErrorKind::Reset),
        }
    }
}

/// How often a body read with nothing arriving goes back to its pace: a player's buffer
/// runs dry while the server is silent, and a stall must be seen then, not at the next byte.
const QUIET_CHECK: Duration = Duration::from_millis(250);

async fn read_some(
    stream: &mut TcpStream,
    buffer: &mut Vec<u8>,
    timeout: Duration,
) -> Result<usize, ErrorKind> {
    buffer.reserve(READ_CHUNK);
    match tokio::time::timeout(timeout, stream.read_buf(buffer)).await {
        Ok(Ok(read)) => Ok(read),
        Ok(Err(_)) => Err(ErrorKind::Reset),
        Err(_) => Err(ErrorKind::Timeout),
    }
}

/// Reads `want` body bytes (counting what `body` already holds); `to_end`: the body has a
/// declared length, so a close before `want` is a short body rather than the end of a
/// read-until-close body.
#[allow(clippy::too_many_arguments)]
async fn read_counted<F, Fut>(
    stream: &mut TcpStream,
    body: &mut Vec<u8>,
    want: u64,
    timeout: Duration,
    outcome: &mut Outcome,
    pace: &mut F,
    to_end: bool,
) -> Result<(), ErrorKind>
where
    F: FnMut(u64, Option<u64>) -> Fut,
    Fut: Future<Output = Flow>,
{
    let mut got = (body.len() as u64).min(want);
    outcome.bytes = got;
    *body = Vec::new();
    let mut last_data = tokio::time::Instant::now();
    while got < want {
        if pace(got, to_end.then_some(want)).await == Flow::Stop {
            return Ok(());
        }
        let wake = (tokio::time::Instant::now() + QUIET_CHECK).min(last_data + timeout);
        let Some(read) = read_dropped(stream, want - got, wake).await? else {
            if tokio::time::Instant::now() >= last_data + timeout {
                return Err(ErrorKind::Timeout);
            }
            continue;
        };
        last_data = tokio::time::Instant::now();
        if read == 0 {
            return if to_end {
                Err(ErrorKind::ShortBody)
            } else {
                Ok(())
            };
        }
        got = (got + read as u64).min(want);
        outcome.bytes = got;
    }
    Ok(())
}

/// Reads a chunked body, counting its data bytes, up to `limit`.
async fn read_chunked(
    stream: &mut TcpStream,
    buffer: &mut Vec<u8>,
    limit: u64,
    timeout: Duration,
    outcome: &mut Outcome,
) -> Result<(), ErrorKind> {
    let mut at = 0usize;
    loop {
        // A size line.
        let line_end = loop {
            if let Some(end) = buffer[at..].windows(2).position(|w| w == b"\r\n") {
                break at + end;
            }
            if read_some(stream, buffer, timeout).await? == 0 {
                return Err(ErrorKind::ShortBody);
            }
        };
        let size_text =
            std::str::from_utf8(&buffer[at..line_end]).map_err(|_| ErrorKind::Protocol)?;
        let size_text = size_text.split(';').next().unwrap_or_default().trim();
        let size = u64::from_str_radix(size_text, 16).map_err(|_| ErrorKind::Protocol)?;
        at = line_end + 2;
        if size == 0 {
            return Ok(());
        }
        let mut left = size.checked_add(2).ok_or(ErrorKind::Protocol)?;
        while left > 0 {
            let available = (buffer.len() - at) as u64;
            let take = available.min(left);
            let data = take.min(left.saturating_sub(2));
            outcome.bytes += data;
            left -= take;
            at += take as usize;
            if outcome.bytes >= limit {
                return Ok(());
            }
            if left > 0 {
                buffer.drain(..at);
                at = 0;
                if read_some(stream, buffer, timeout).await? == 0 {
                    return Err(ErrorKind::ShortBody);
                }
            }
        }
        buffer.drain(..at);
        at = 0;
    }
}
