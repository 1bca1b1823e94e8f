//! HTTP/1.1 on the wire: request heads in, response heads out.
//!
//! [`parse_head`] reads one request head out of the connection's buffer with `httparse`
//! (a zero-copy, fuzzed parser) and keeps only what the server acts on: the method, the
//! framing (`Connection`, `Content-Length`), the proxy's request id, and, for the track
//! route, the seven headers [`FileRequest`] needs. Other routes get a full `HeaderMap`,
//! since they go through the axum router. Size limits (URL, head) are enforced here,
//! before anything is allocated for the request.
//!
//! [`write_head`] formats a response head straight into the connection's output buffer.

use std::cell::{Cell, RefCell};
use std::fmt::Write as _;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{SystemTime, UNIX_EPOCH};

use axum::http::{HeaderMap, HeaderName, HeaderValue, Method, StatusCode, Uri, Version};
use bytes::{BufMut, BytesMut};

use super::file::FileRequest;

/// Most header lines a request may have.
pub const MAX_HEADERS: usize = 100;

/// Largest request body read (and discarded): GET and HEAD carry none in practice.
pub const MAX_DISCARDED_BODY: u64 = 64 * 1024;

/// Size limits of a request head.
#[derive(Debug, Clone, Copy)]
pub struct HeadLimits {
    /// Longest request target (414 beyond).
    pub max_uri_bytes: usize,
    /// Largest head, request line included (431 beyond).
    pub max_header_bytes: usize,
}

/// Why a request head is refused. Every one of these closes the connection, since the
/// server can no longer tell where the next request would start.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum HeadError {
    /// The request line or a header is not HTTP.
    #[error("malformed request")]
    Malformed,
    /// The request target is longer than allowed.
    #[error("URL too long")]
    UriTooLong,
    /// The head is larger than allowed, or has too many lines.
    #[error("request headers too large")]
    TooLarge,
    /// A body framed other than by one `Content-Length`.
    #[error("request body needs a single Content-Length")]
    BodyFraming,
    /// A body larger than the server reads.
    #[error("request body too large")]
    BodyTooLarge,
    /// Not HTTP/1.0 or HTTP/1.1.
    #[error("HTTP version not supported")]
    Version,
}

impl HeadError {
    /// The status this refusal is answered with.
    pub fn status(&self) -> StatusCode {
        match self {
            HeadError::Malformed | HeadError::BodyFraming => StatusCode::BAD_REQUEST,
            HeadError::UriTooLong => StatusCode::URI_TOO_LONG,
            HeadError::TooLarge => StatusCode::REQUEST_HEADER_FIELDS_TOO_LARGE,
            HeadError::BodyTooLarge => StatusCode::PAYLOAD_TOO_LARGE,
            HeadError::Version => StatusCode::HTTP_VERSION_NOT_SUPPORTED,
        }
    }
}

/// What the request asks for.
#[derive(Debug)]
pub enum Target {
    /// `GET|HEAD {prefix}/{id}[/{name}]`: served without the router.
    Track {
        /// The id segment, as received.
        id: String,
        /// The headers the file server looks at.
        request: FileRequest,
    },
    /// Anything else, for the axum router.
    Other {
        /// The request target.
        uri: Uri,
        /// Every header.
        headers: HeaderMap,
    },
}

/// One parsed request head.
#[derive(Debug)]
pub struct RequestHead {
    /// The method.
    pub method: Method,
    /// HTTP/1.0 or HTTP/1.1.
    pub version: Version,
    /// Whether the client keeps the connection open after this exchange.
    pub keep_alive: bool,
    /// Bytes of body that follow the head (read and discarded).
    pub body_length: u64,
    /// `X-Request-Id` from a proxy, when short and plain.
    pub request_id: Option<String>,
    /// The path (without query), for the access log; empty unless asked for.
    pub log_path: String,
    /// Routed target.
    pub target: Target,
    /// Bytes of the buffer the head took.
    pub len: usize,
}

/// Reads a request head from the start of `buf`. `Ok(None)`: not complete yet.
///
/// `track_id` recognises the track route: given the path, it returns the id segment.
pub fn parse_head(
    buf: &[u8],
    limits: HeadLimits,
    log_path: bool,
    track_id: impl Fn(&str) -> Option<&str>,
) -> Result<Option<RequestHead>, HeadError> {
    let mut slots = [httparse::EMPTY_HEADER; MAX_HEADERS];
    let mut request = httparse::Request::new(&mut slots);
    let len = match request.parse(buf) {
        Ok(httparse::Status::Complete(len)) => len,
        Ok(httparse::Status::Partial) => {
            // A partial request line already over the URL limit will not get shorter.
            if buf.len() > limits.max_header_bytes {
                return Err(HeadError::TooLarge);
            }
            if request.path.is_none()
                && !buf.contains(&b'\n')
                && buf.len() > limits.max_uri_bytes + 32
            {
                return Err(HeadError::UriTooLong);
            }
            return Ok(None);
        }
        Err(httparse::Error::TooManyHeaders) => return Err(HeadError::TooLarge),
        Err(_) => return Err(HeadError::Malformed),
    };
    let (Some(method), Some(target), Some(minor)) = (request.method, request.path, request.version)
    else {
        return Err(HeadError::Malformed);
    };
    if target.len() > limits.max_uri_bytes {
        return Err(HeadError::UriTooLong);
    }
    if len > limits.max_header_bytes {
        return Err(HeadError::TooLarge);
    }
    let version = match minor {
        0 => Version::HTTP_10,
        1 => Version::HTTP_11,
        _ => return Err(HeadError::Version),
    };
    let method = Method::from_bytes(method.as_bytes()).map_err(|_| HeadError::Malformed)?;
    let headers = &*request.headers;

    let mut close = false;
    let mut keep = false;
    let mut body_length: Option<u64> = None;
    let mut request_id = None;
    for header in headers {
        let name = header.name;
        if name.eq_ignore_ascii_case("connection") {
            for token in header.value.split(|b| *b == b',') {
                let token = token.trim_ascii();
                close |= token.eq_ignore_ascii_case(b"close");
                keep |= token.eq_ignore_ascii_case(b"keep-alive");
            }
        } else if name.eq_ignore_ascii_case("content-length") {
            let value = std::str::from_utf8(header.value.trim_ascii())
                .ok()
                .filter(|v| !v.is_empty() && v.bytes().all(|b| b.is_ascii_digit()))
                .and_then(|v| v.parse::<u64>().ok())
                .ok_or(HeadError::BodyFraming)?;
            if body_length.is_some_and(|seen| seen != value) {
                return Err(HeadError::BodyFraming);
            }
            body_length = Some(value);
        } else if name.eq_ignore_ascii_case("transfer-encoding") {
            // Chunked request bodies have no use here, and ambiguous framing is how
            // request smuggling through a proxy starts.
            return Err(HeadError::BodyFraming);
        } else if name.eq_ignore_ascii_case("x-request-id") {
            request_id = plain_request_id(header.value);
        }
    }
    let body_length = body_length.unwrap_or(0);
    if body_length > MAX_DISCARDED_BODY {
        return Err(HeadError::BodyTooLarge);
    }
    let keep_alive = match version {
        Version::HTTP_10 => keep && !close,
        _ => !close,
    };
    let path = target.split_once('?').map_or(target, |(path, _)| path);
    let log_path = if log_path {
        path.chars().take(256).collect()
    } else {
        String::new()
    };

    let track = (method == Method::GET || method == Method::HEAD)
        .then(|| track_id(path))
        .flatten();
    let target = match track {
        Some(id) => Target::Track {
            id: id.to_string(),
            request: file_request(&method, headers),
        },
        None => {
            let uri = Uri::try_from(target).map_err(|_| HeadError::Malformed)?;
            let mut map = HeaderMap::with_capacity(headers.len());
            for header in headers {
                let name = HeaderName::from_bytes(header.name.as_bytes())
                    .map_err(|_| HeadError::Malformed)?;
                let value =
                    HeaderValue::from_bytes(header.value).map_err(|_| HeadError::Malformed)?;
                map.append(name, value);
            }
            Target::Other { uri, headers: map }
        }
    };
    Ok(Some(RequestHead {
        method,
        version,
        keep_alive,
        body_length,
        request_id,
        log_path,
        target,
        len,
    }))
}

/// The headers of a track request the file server evaluates.
fn file_request(method: &Method, headers: &[httparse::Header<'_>]) -> FileRequest {
    let mut request = FileRequest {
        head: method == Method::HEAD,
        ..FileRequest::default()
    };
    for header in headers {
        let slot = match header.name.len() {
            5 if header.name.eq_ignore_ascii_case("range") => &mut request.range,
            8 if header.name.eq_ignore_ascii_case("if-match") => &mut request.if_match,
            8 if header.name.eq_ignore_ascii_case("if-range") => &mut request.if_range,
            13 if header.name.eq_ignore_ascii_case("if-none-match") => &mut request.if_none_match,
            17 if header.name.eq_ignore_ascii_case("if-modified-since") => {
                &mut request.if_modified_since
            }
            19 if header.name.eq_ignore_ascii_case("if-unmodified-since") => {
                &mut request.if_unmodified_since
            }
            _ => continue,
        };
        // Like `HeaderValue::to_str`: a value that is not visible ASCII is ignored.
        if let Ok(text) = std::str::from_utf8(header.value)
            && text
                .bytes()
                .all(|b| b == b'\t' || (b' '..=b'~').contains(&b))
            && slot.is_none()
        {
            *slot = Some(text.to_string());
        }
    }
    request
}

/// A proxy's request id is kept so one request can be followed through nginx/varnish and
/// musicd, but only if it is short and plain (it goes into our logs and headers).
fn plain_request_id(value: &[u8]) -> Option<String> {
    let plain = !value.is_empty()
        && value.len() <= 64
        && value
            .iter()
            .all(|b| b.is_ascii_alphanumeric() || b"-_.:".contains(b));
    plain
        .then(|| std::str::from_utf8(value).ok().map(str::to_string))
        .flatten()
}

/// Whether a response with this status to this method carries a body.
pub fn has_body(status: StatusCode, head: bool) -> bool {
    !head
        && !status.is_informational()
        && status != StatusCode::NO_CONTENT
        && status != StatusCode::NOT_MODIFIED
}

/// How the body after a response head is delimited.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum BodyLength {
    /// `Content-Length`, written by [`write_head`] unless the headers have one.
    Known(u64),
    /// `Transfer-Encoding: chunked`.
    Chunked,
    /// No length: the body ends when the connection closes (HTTP/1.0 clients).
    UntilClose,
    /// No body may follow (HEAD, 304, 204); the headers are written as they are.
    None,
}

/// What a response head says.
pub struct ResponseHead<'a> {
    /// The status.
    pub status: StatusCode,
    /// Preformatted header lines (`name: value\r\n`), written first.
    pub lines: &'a [u8],
    /// Further headers.
    pub headers: &'a HeaderMap,
    /// How the body is delimited.
    pub length: BodyLength,
    /// Whether the connection stays open.
    pub keep_alive: bool,
    /// The request's version (HTTP/1.0 needs an explicit keep-alive).
    pub version: Version,
    /// The `x-request-id` value.
    pub request_id: &'a RequestId,
}

/// A request's id: the proxy's, or ours (formatted only when written).
#[derive(Debug)]
pub enum RequestId {
    /// Sent by a proxy (already checked to be short and plain).
    Given(String),
    /// Ours: a per-process random prefix and a counter.
    Generated(u64),
}

/// Random per process, so ids from several musicd processes do not collide in one log.
static REQUEST_PREFIX: std::sync::LazyLock<u32> = std::sync::LazyLock::new(rand::random);
static REQUEST_BLOCKS: AtomicU64 = AtomicU64::new(0);
/// Ids handed out per visit to the shared counter: each event loop counts on its own, so
/// the request path touches no cache line another core writes.
const REQUEST_BLOCK: u64 = 4096;

thread_local! {
    static NEXT_REQUEST: Cell<(u64, u64)> = const { Cell::new((0, 0)) };
}

impl RequestId {
    /// A fresh id of ours.
    pub fn next() -> RequestId {
        let n = NEXT_REQUEST.with(|slot| {
            let (mut next, mut end) = slot.get();
            if next == end {
                next = REQUEST_BLOCKS.fetch_add(1, Ordering::Relaxed) * REQUEST_BLOCK + 1;
                end = next + REQUEST_BLOCK;
            }
            slot.set((next + 1, end));
            next
        });
        RequestId::Generated(n)
    }

    /// Appends the id to `out` (what `Display` prints, without the formatting machinery).
    pub fn write_to(&self, out: &mut BytesMut) {
        match self {
            RequestId::Given(id) => out.put_slice(id.as_bytes()),
            RequestId::Generated(n) => {
                put_hex(out, u64::from(*REQUEST_PREFIX), 8);
                out.put_u8(b'-');
                put_hex(out, *n, 1);
            }
        }
    }
}

/// `value` in lowercase hex, at least `width` digits.
fn put_hex(out: &mut BytesMut, value: u64, width: usize) {
    let digits = (16 - value.leading_zeros() as usize / 4).max(width);
    for shift in (0..digits).rev() {
        out.put_u8(b"0123456789abcdef"[((value >> (shift * 4)) & 0xf) as usize]);
    }
}

impl std::fmt::Display for RequestId {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let mut text = BytesMut::with_capacity(32);
        self.write_to(&mut text);
        f.write_str(std::str::from_utf8(&text).unwrap_or("?"))
    }
}

/// Writes a response head into `out`.
pub fn write_head(out: &mut BytesMut, head: &ResponseHead<'_>) {
    let ResponseHead {
        status,
        lines,
        headers,
        length,
        keep_alive,
        version,
        request_id,
    } = *head;
    // One allocation for the whole head (the buffer is empty between requests).
    out.reserve(lines.len() + 192);
    out.put_slice(b"HTTP/1.1 ");
    out.put_slice(status.as_str().as_bytes());
    out.put_u8(b' ');
    out.put_slice(status.canonical_reason().unwrap_or("Unknown").as_bytes());
    out.put_slice(b"\r\n");
    let mut has_length = lines
        .split(|b| *b == b'\n')
        .any(|line| line.len() > 15 && line[..15].eq_ignore_ascii_case(b"content-length:"));
    out.put_slice(lines);
    has_length |= headers.contains_key(axum::http::header::CONTENT_LENGTH);
    put_headers(out, headers);
    match length {
        BodyLength::Known(len) if !has_length => {
            let _ = write!(out, "content-length: {len}\r\n");
        }
        BodyLength::Chunked => out.put_slice(b"transfer-encoding: chunked\r\n"),
        _ => {}
    }
    out.put_slice(b"date: ");
    with_http_date(|date| out.put_slice(date));
    out.put_slice(b"\r\nx-request-id: ");
    request_id.write_to(out);
    out.put_slice(b"\r\n");
    if !keep_alive {
        out.put_slice(b"connection: close\r\n");
    } else if version == Version::HTTP_10 {
        out.put_slice(b"connection: keep-alive\r\n");
    }
    out.put_slice(b"\r\n");
}

/// Appends one header line, `name: value\r\n`.
pub fn put_header(out: &mut BytesMut, name: &str, value: &[u8]) {
    out.put_slice(name.as_bytes());
    out.put_slice(b": ");
    out.put_slice(value);
    out.put_slice(b"\r\n");
}

/// Appends every header of `headers` as a line.
pub fn put_headers(out: &mut BytesMut, headers: &HeaderMap) {
    for (name, value) in headers {
        put_header(out, name.as_str(), value.as_bytes());
    }
}

thread_local! {
    /// The `Date` value of the current second, formatted once per second per thread.
    static HTTP_DATE: RefCell<(u64, [u8; 29])> = const { RefCell::new((u64::MAX, [b' '; 29])) };
}

fn with_http_date(write: impl FnOnce(&[u8])) {
    let now = SystemTime::now();
    let second = now.duration_since(UNIX_EPOCH).map_or(0, |d| d.as_secs());
    HTTP_DATE.with(|cell| {
        let mut cached = cell.borrow_mut();
        if cached.0 != second {
            let text = httpdate::fmt_http_date(now);
            if text.len() == 29 {
                cached.1.copy_from_slice(text.as_bytes());
                cached.0 = second;
            }
        }
        write(&cached.1);
    });
}

#[cfg(test)]
mod tests {
    use super::*;

    const LIMITS: HeadLimits = HeadLimits {
        max_uri_bytes: 64,
        max_header_bytes: 512,
    };

    fn track(path: &str) -> Option<&str> {
        path.strip_prefix("/t/")
    }

    fn parse(text: &str) -> Result<Option<RequestHead>, HeadError> {
        parse_head(text.as_bytes(), LIMITS, true, track)
    }

    #[test]
    fn a_track_request_keeps_only_what_the_file_server_needs() {
        let head = parse(
            "GET /t/abc?x=1 HTTP/1.1\r\nHost: h\r\nRange: bytes=0-1\r\nIf-None-Match: \"e\"\r\n\
X-Request-Id: req-1\r\n\r\nGET /next",
        )
        .expect("valid")
        .expect("complete");
        assert!(head.keep_alive);
        assert_eq!(head.request_id.as_deref(), Some("req-1"));
        assert_eq!(head.log_path, "/t/abc");
        let Target::Track { id, request } = head.target else {
            panic!("not the track route");
        };
        assert_eq!(id, "abc");
        assert_eq!(request.range.as_deref(), Some("bytes=0-1"));
        assert_eq!(request.if_none_match.as_deref(), Some("\"e\""));
        assert!(!request.head);
        assert_eq!(head.len, 95, "the head ends before the next request");
    }

    #[test]
    fn other_routes_and_methods_get_every_header() {
        for text in [
            "GET /healthz HTTP/1.1\r\nA: 1\r\nA: 2\r\n\r\n",
            "POST /t/abc HTTP/1.1\r\nA: 1\r\nA: 2\r\n\r\n",
        ] {
            let head = parse(text).expect("valid").expect("complete");
            let Target::Other { headers, .. } = head.target else {
                panic!("routed as a track: {text}");
            };
            assert_eq!(headers.get_all("a").iter().count(), 2);
        }
    }

    #[test]
    fn keep_alive_follows_the_version_and_the_connection_header() {
        let keep = |text: &str| parse(text).expect("valid").expect("complete").keep_alive;
        assert!(keep("GET / HTTP/1.1\r\n\r\n"));
        assert!(!keep("GET / HTTP/1.1\r\nConnection: Close\r\n\r\n"));
        assert!(!keep("GET / HTTP/1.0\r\n\r\n"));
        assert!(keep("GET / HTTP/1.0\r\nConnection: keep-alive\r\n\r\n"));
        assert!(!keep(
            "GET / HTTP/1.0\r\nConnection: keep-alive, close\r\n\r\n"
        ));
    }

    #[test]
    fn incomplete_heads_wait_and_oversized_ones_are_refused() {
        assert!(
            parse("GET /t/abc HTTP/1.1\r\nHost:")
                .expect("valid")
                .is_none()
        );
        let long_url = format!("GET /{} HTTP/1.1\r\n\r\n", "a".repeat(100));
        assert_eq!(parse(&long_url).err(), Some(HeadError::UriTooLong));
        let long_line = format!("GET /{}", "a".repeat(200));
        assert_eq!(parse(&long_line).err(), Some(HeadError::UriTooLong));
        let big = format!("GET / HTTP/1.1\r\nX: {}\r\n\r\n", "p".repeat(600));
        assert_eq!(parse(&big).err(), Some(HeadError::TooLarge));
        let partial_big = format!("GET / HTTP/1.1\r\nX: {}", "p".repeat(600));
        assert_eq!(parse(&partial_big).err(), Some(HeadError::TooLarge));
        let many = format!(
            "GET / HTTP/1.1\r\n{}\r\n",
            "A: 1\r\n".repeat(MAX_HEADERS + 1)
        );
        let limits = HeadLimits {
            max_header_bytes: 4096,
            ..LIMITS
        };
        assert_eq!(
            parse_head(many.as_bytes(), limits, false, track).err(),
            Some(HeadError::TooLarge)
        );
    }

    #[test]
    fn bodies_need_one_content_length_and_stay_small() {
        let length = |text: &str| parse(text).map(|h| h.expect("complete").body_length);
        assert_eq!(length("GET / HTTP/1.1\r\nContent-Length: 5\r\n\r\n"), Ok(5));
        assert_eq!(
            length("GET / HTTP/1.1\r\nContent-Length: 5\r\nContent-Length: 5\r\n\r\n"),
            Ok(5)
        );
        for bad in [
            "GET / HTTP/1.1\r\nContent-Length: 5\r\nContent-Length: 6\r\n\r\n",
            "GET / HTTP/1.1\r\nContent-Length: -1\r\n\r\n",
            "GET / HTTP/1.1\r\nContent-Length: 5\r\nTransfer-Encoding: chunked\r\n\r\n",
        ] {
            assert_eq!(length(bad), Err(HeadError::BodyFraming), "{bad}");
        }
        assert_eq!(
            length("GET / HTTP/1.1\r\nContent-Length: 9999999\r\n\r\n"),
            Err(HeadError::BodyTooLarge)
        );
        assert_eq!(
            parse("GET / HTTP/1.1\r\nBad Header: x\r\n\r\n").err(),
            Some(HeadError::Malformed)
        );
    }

    #[test]
    fn unsafe_request_ids_are_replaced() {
        let id = |value: &str| {
            parse(&format!("GET / HTTP/1.1\r\nX-Request-Id: {value}\r\n\r\n"))
                .expect("valid")
                .expect("complete")
                .request_id
        };
        assert_eq!(id("abc-1.2:3_x").as_deref(), Some("abc-1.2:3_x"));
        assert_eq!(id("a b"), None);
        assert_eq!(id(&"a".repeat(65)), None);
    }

    #[test]
    fn generated_request_ids_are_unique_hex() {
        let ids: std::collections::HashSet<String> =
            (0..10_000).map(|_| RequestId::next().to_string()).collect();
        assert_eq!(ids.len(), 10_000);
        for id in ids.iter().take(5) {
            let (prefix, counter) = id.split_once('-').expect("prefix-counter");
            assert_eq!(prefix.len(), 8, "{id}");
            assert!(u32::from_str_radix(prefix, 16).is_ok(), "{id}");
            assert!(u64::from_str_radix(counter, 16).is_ok(), "{id}");
        }
        let mut out = BytesMut::new();
        put_hex(&mut out, 0xab, 8);
        put_hex(&mut out, 0, 1);
        put_hex(&mut out, u64::MAX, 1);
        assert_eq!(&out[..], b"000000ab0ffffffffffffffff");
    }

    #[test]
    fn response_heads_carry_length_date_id_and_connection() {
        let mut out = BytesMut::new();
        let mut headers = HeaderMap::new();
        headers.insert("content-range", HeaderValue::from_static("bytes 0-6/9"));
        write_head(
            &mut out,
            &ResponseHead {
                status: StatusCode::PARTIAL_CONTENT,
                lines: b"etag: \"x\"\r\n",
                headers: &headers,
                length: BodyLength::Known(7),
                keep_alive: false,
                version: Version::HTTP_11,
                request_id: &RequestId::Given("r-1".into()),
            },
        );
        let text = String::from_utf8(out.to_vec()).expect("ascii");
        assert!(
            text.starts_with("HTTP/1.1 206 Partial Content\r\netag: \"x\"\r\n"),
            "{text}"
        );
        assert!(text.contains("\r\ncontent-length: 7\r\n"), "{text}");
        assert!(text.contains("\r\nx-request-id: r-1\r\n"), "{text}");
        assert!(text.contains("\r\nconnection: close\r\n"), "{text}");
        assert!(text.ends_with("\r\n\r\n"), "{text}");
        let date = text
            .lines()
            .find_map(|l| l.strip_prefix("date: "))
            .expect("date");
        assert!(httpdate::parse_http_date(date).is_ok(), "{date}");

        out.clear();
        write_head(
            &mut out,
            &ResponseHead {
                status: StatusCode::NOT_MODIFIED,
                lines: b"",
                headers: &HeaderMap::new(),
                length: BodyLength::None,
                keep_alive: true,
                version: Version::HTTP_10,
                request_id: &RequestId::Given("r-2".into()),
            },
        );
        let text = String::from_utf8(out.to_vec()).expect("ascii");
        assert!(!text.contains("content-length"), "{text}");
        assert!(text.contains("\r\nconnection: keep-alive\r\n"), "{text}");
    }
}
