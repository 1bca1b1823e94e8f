//! Request heads: one request line and header section out of the connection's buffer.
//!
//! [`parse_head`] reads one head with `httparse` (a zero-copy, fuzzed parser) and keeps only
//! what h1 acts on: the method, the target and its origin form, the body framing
//! (`Content-Length`, `Transfer-Encoding`), `Connection`, `Expect` and the proxy's request
//! id. Every other header is left where it is, in the head's bytes, for the service to read
//! through [`Request`]. Size limits (URL, head) are enforced here, before anything is
//! allocated for the request.
//!
//! The RFC 9112 rules a server MUST apply to a head are decided here, each refusal a
//! [`HeadError`] with its status:
//! * Host (§3.2): an HTTP/1.1 request without Host, any request with two, or with an
//!   invalid value, is a 400;
//! * the target (§3.2): origin form, absolute form (its path is used, its host ignored),
//!   `*` for OPTIONS, anything for CONNECT (answered 501); anything else is a 400;
//! * framing (§6): one `Content-Length` (repeats must agree), or `Transfer-Encoding` whose
//!   one coding is `chunked`; both together, a coding after `chunked`, `chunked` twice,
//!   or any coding in HTTP/1.0 is a 400, other codings before `chunked` a 501;
//! * `Expect` (RFC 9110 §10.1.1): `100-continue` is honoured, any other expectation 417.
//!
//! Every refusal closes the connection: after it, the server can no longer be sure where
//! the next request would start.

use std::net::IpAddr;
use std::time::Instant;

use axum::http::{Method, StatusCode, Version};

use crate::http::service::{Noted, Request};

/// Most header lines a request may have.
pub(crate) const MAX_HEADERS: usize = 100;

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

/// Why a request head is refused. Every one of these closes the connection.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum HeadError {
    /// The request line or a header is not HTTP.
    #[error("malformed request")]
    Malformed,
    /// The request target is neither origin nor absolute form (nor `*` for OPTIONS).
    #[error("invalid request target")]
    Target,
    /// No Host in an HTTP/1.1 request, several, or an invalid one.
    #[error("a request needs exactly one valid Host header")]
    Host,
    /// The request target is longer than allowed.
    #[error("URL too long")]
    UriTooLong,
    /// The head is larger than allowed, or has too many lines.
    #[error("request headers too large")]
    TooLarge,
    /// The body's length cannot be known for sure.
    #[error("request body framing is invalid")]
    BodyFraming,
    /// A transfer coding other than chunked.
    #[error("transfer coding not implemented")]
    UnknownCoding,
    /// A body larger than the server reads.
    #[error("request body too large")]
    BodyTooLarge,
    /// The body did not arrive within `body_read_timeout`.
    #[error("request body not received in time")]
    BodyTimeout,
    /// An expectation other than `100-continue`.
    #[error("expectation not supported")]
    Expectation,
    /// Not HTTP/1.0 or HTTP/1.1.
    #[error("HTTP version not supported")]
    Version,
}

impl HeadError {
    /// The status this refusal is answered with.
    pub(crate) fn status(&self) -> StatusCode {
        match self {
            HeadError::Malformed | HeadError::Target | HeadError::Host | HeadError::BodyFraming => {
                StatusCode::BAD_REQUEST
            }
            HeadError::UriTooLong => StatusCode::URI_TOO_LONG,
            HeadError::TooLarge => StatusCode::REQUEST_HEADER_FIELDS_TOO_LARGE,
            HeadError::UnknownCoding => StatusCode::NOT_IMPLEMENTED,
            HeadError::BodyTooLarge => StatusCode::PAYLOAD_TOO_LARGE,
            HeadError::BodyTimeout => StatusCode::REQUEST_TIMEOUT,
            HeadError::Expectation => StatusCode::EXPECTATION_FAILED,
            HeadError::Version => StatusCode::HTTP_VERSION_NOT_SUPPORTED,
        }
    }
}

/// How the request's body is delimited.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum BodyFraming {
    /// No body.
    None,
    /// `Content-Length` bytes.
    Length(u64),
    /// `Transfer-Encoding: chunked`.
    Chunked,
}

/// One parsed request head: what h1 acts on, and where the rest is in the head's bytes.
#[derive(Debug)]
pub struct RequestHead {
    pub(crate) method: Method,
    /// HTTP/1.0 or HTTP/1.1.
    pub(crate) version: Version,
    /// Whether the client keeps the connection open after this exchange.
    pub(crate) keep_alive: bool,
    /// How the body that follows the head is delimited (it is read and discarded).
    pub body: BodyFraming,
    /// The client waits for `100 Continue` before it sends the body.
    pub(crate) expect_continue: bool,
    /// `X-Request-Id` from a proxy, when short and plain.
    pub(crate) request_id: Option<String>,
    /// The request target as received.
    target: Span,
    /// Its origin form: all or part of `target`; `None` when that is `/` without being
    /// written (CONNECT, `http://host?query`).
    origin: Option<Span>,
    /// Where the header fields begin: past the request line, so a reader of the fields
    /// does not look for its end again.
    fields: u32,
    /// Where the values the access log shows are.
    noted: NotedSpans,
    /// Bytes of the buffer the head took.
    pub len: usize,
}

/// A range of the head's bytes.
type Span = (u32, u32);

/// [`Noted`] as spans of the head's bytes.
#[derive(Debug, Default)]
struct NotedSpans {
    user_agent: Option<Span>,
    referer: Option<Span>,
    range: Option<Span>,
    forwarded: bool,
}

impl RequestHead {
    /// The request as the service sees it; `head` holds the bytes this was parsed from.
    pub fn request<'a>(&'a self, head: &'a [u8], peer: IpAddr, read_at: Instant) -> Request<'a> {
        let (start, end) = self.target;
        // One UTF-8 check: the origin form lies within the target.
        let target = head
            .get(start as usize..end as usize)
            .and_then(utf8)
            .unwrap_or_default();
        let origin = self.origin.map_or("/", |(from, to)| {
            let within = from.saturating_sub(start) as usize..to.saturating_sub(start) as usize;
            target.get(within).unwrap_or_default()
        });
        let fields = head.get(self.fields as usize..).unwrap_or_default();
        let value = |span: Option<Span>| {
            span.map(|(from, to)| head.get(from as usize..to as usize).unwrap_or_default())
        };
        let mut request = Request::parsed(
            &self.method,
            self.version,
            target,
            origin,
            peer,
            read_at,
            fields,
        );
        request.noted = Noted {
            user_agent: value(self.noted.user_agent),
            referer: value(self.noted.referer),
            range: value(self.noted.range),
            forwarded: self.noted.forwarded,
        };
        request
    }
}

/// `bytes` as text. Targets are ASCII (RFC 3986): one word-at-a-time check instead of the
/// general UTF-8 decoder, which cost a hundred instructions on a 40-byte target
/// (callgrind); anything else still goes through it.
fn utf8(bytes: &[u8]) -> Option<&str> {
    if bytes.is_ascii() {
        // SAFETY: ASCII bytes are valid UTF-8.
        Some(unsafe { std::str::from_utf8_unchecked(bytes) })
    } else {
        std::str::from_utf8(bytes).ok()
    }
}

/// Reads a request head from the start of `buf`. `Ok(None)`: not complete yet.
pub fn parse_head(buf: &[u8], limits: HeadLimits) -> Result<Option<RequestHead>, HeadError> {
    // Between requests the buffer is empty: nothing to hand the parser.
    if buf.is_empty() {
        return Ok(None);
    }
    // Uninitialised: zeroing a hundred header slots on every parse showed in profiles.
    let mut slots =
        [const { std::mem::MaybeUninit::<httparse::Header<'_>>::uninit() }; MAX_HEADERS];
    let mut request = httparse::Request::new(&mut []);
    let len = match request.parse_with_uninit_headers(buf, &mut slots) {
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
        Err(httparse::Error::Version) => {
            // httparse judges the version before the line ends: wait for the whole line.
            if !buf.contains(&b'\n') {
                return if buf.len() > limits.max_uri_bytes + 32 {
                    Err(HeadError::UriTooLong)
                } else {
                    Ok(None)
                };
            }
            return match request_line_version(buf) {
                // RFC 9110 §2.5: a later 1.x minor is answered as the highest we speak.
                Some((1, minor)) if minor > 1 => {
                    let mut as_11 = buf.to_vec();
                    let at = version_offset(buf).ok_or(HeadError::Malformed)?;
                    as_11[at..at + 8].copy_from_slice(b"HTTP/1.1");
                    parse_head(&as_11, limits)
                }
                // RFC 9110 §15.6.6: 505 is for a major version we do not speak.
                Some((major, _)) if major != 1 => Err(HeadError::Version),
                // RFC 9112 §3: anything else is not a request line.
                _ => Err(HeadError::Malformed),
            };
        }
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
    let fields = Fields::read(headers, version)?;
    let keep_alive = match version {
        Version::HTTP_10 => fields.keep && !fields.close,
        _ => !fields.close,
    };

    let span_of = |part: &[u8]| -> Span {
        let start = (part.as_ptr() as usize).saturating_sub(buf.as_ptr() as usize);
        (start as u32, (start + part.len()) as u32)
    };
    let span = |part: &str| span_of(part.as_bytes());
    let noted = NotedSpans {
        user_agent: fields.noted.user_agent.map(span_of),
        referer: fields.noted.referer.map(span_of),
        range: fields.noted.range.map(span_of),
        forwarded: fields.noted.forwarded,
    };
    let origin = if method == Method::CONNECT {
        // Answered 501 whatever its (authority-form) target says.
        None
    } else {
        origin_form(target, &method)?.map(span)
    };
    Ok(Some(RequestHead {
        method,
        version,
        keep_alive,
        body: fields.body,
        expect_continue: fields.expect_continue,
        request_id: fields.request_id,
        target: span(target),
        origin,
        fields: headers
            .first()
            .map_or(len as u32, |first| span(first.name).0),
        noted,
        len,
    }))
}

/// The header fields that decide framing, persistence and validity, and those the access
/// log shows.
struct Fields<'h> {
    close: bool,
    keep: bool,
    body: BodyFraming,
    expect_continue: bool,
    request_id: Option<String>,
    noted: Noted<'h>,
}

impl<'h> Fields<'h> {
    fn read(headers: &[httparse::Header<'h>], version: Version) -> Result<Fields<'h>, HeadError> {
        let mut close = false;
        let mut keep = false;
        let mut content_length: Option<u64> = None;
        let mut codings = Codings::default();
        let mut expect_continue = false;
        let mut hosts = 0usize;
        let mut request_id = None;
        let mut noted = Noted::default();
        for header in headers {
            let name = header.name;
            let value = header.value;
            if name.eq_ignore_ascii_case("host") {
                hosts += 1;
                if !valid_host(value.trim_ascii()) {
                    return Err(HeadError::Host);
                }
            } else if name.eq_ignore_ascii_case("connection") {
                for token in value.split(|b| *b == b',') {
                    let token = token.trim_ascii();
                    close |= token.eq_ignore_ascii_case(b"close");
                    keep |= token.eq_ignore_ascii_case(b"keep-alive");
                }
            } else if name.eq_ignore_ascii_case("content-length") {
                let length = std::str::from_utf8(value.trim_ascii())
                    .ok()
                    .filter(|v| !v.is_empty() && v.bytes().all(|b| b.is_ascii_digit()))
                    .and_then(|v| v.parse::<u64>().ok())
                    .ok_or(HeadError::BodyFraming)?;
                if content_length.is_some_and(|seen| seen != length) {
                    return Err(HeadError::BodyFraming);
                }
                content_length = Some(length);
            } else if name.eq_ignore_ascii_case("transfer-encoding") {
                codings.add(value)?;
            } else if name.eq_ignore_ascii_case("expect") {
                for token in value.split(|b| *b == b',') {
                    let token = token.trim_ascii();
                    if token.eq_ignore_ascii_case(b"100-continue") {
                        expect_continue = true;
                    } else if !token.is_empty() {
                        return Err(HeadError::Expectation);
                    }
                }
            } else if name.eq_ignore_ascii_case("x-request-id") {
                request_id = plain_request_id(value);
            } else {
                noted.note(name.as_bytes(), value.trim_ascii());
            }
        }
        if hosts > 1 || (hosts == 0 && version == Version::HTTP_11) {
            return Err(HeadError::Host);
        }
        let body = match (codings.seen, content_length) {
            (false, None | Some(0)) => BodyFraming::None,
            (false, Some(length)) if length > MAX_DISCARDED_BODY => {
                return Err(HeadError::BodyTooLarge);
            }
            (false, Some(length)) => BodyFraming::Length(length),
            // Both framings at once is how request smuggling through a proxy starts, and
            // HTTP/1.0 has no transfer codings: neither can be framed with confidence.
            (true, Some(_)) => return Err(HeadError::BodyFraming),
            (true, None) if version == Version::HTTP_10 => return Err(HeadError::BodyFraming),
            (true, None) => codings.framing()?,
        };
        Ok(Fields {
            close,
            keep,
            body,
            // RFC 9110 §10.1.1: an HTTP/1.0 client's expectation is ignored.
            expect_continue: expect_continue
                && version == Version::HTTP_11
                && body != BodyFraming::None,
            request_id,
            noted,
        })
    }
}

/// The transfer codings of a request, across all its `Transfer-Encoding` lines.
#[derive(Default)]
struct Codings {
    seen: bool,
    chunked: usize,
    last_is_chunked: bool,
    unknown: bool,
}

impl Codings {
    fn add(&mut self, value: &[u8]) -> Result<(), HeadError> {
        self.seen = true;
        for coding in value.split(|b| *b == b',') {
            let coding = coding.trim_ascii();
            // Strict on purpose: empty elements, parameters and odd bytes are what
            // obfuscated codings that two parsers read differently look like.
            if coding.is_empty() || !coding.iter().all(|b| is_tchar(*b)) {
                return Err(HeadError::BodyFraming);
            }
            self.last_is_chunked = coding.eq_ignore_ascii_case(b"chunked");
            if self.last_is_chunked {
                self.chunked += 1;
            } else {
                self.unknown = true;
            }
        }
        Ok(())
    }

    fn framing(&self) -> Result<BodyFraming, HeadError> {
        // RFC 9112 §6.3: chunked not last (or twice) leaves the length unknowable: 400.
        if !self.last_is_chunked || self.chunked != 1 {
            return Err(HeadError::BodyFraming);
        }
        // §6.1: a coding the server does not understand: 501.
        if self.unknown {
            return Err(HeadError::UnknownCoding);
        }
        Ok(BodyFraming::Chunked)
    }
}

/// RFC 9110 §5.6.2 token characters.
fn is_tchar(b: u8) -> bool {
    b.is_ascii_alphanumeric() || b"!#$%&'*+-.^_`|~".contains(&b)
}

/// The version of a well-formed request line (`method SP target SP HTTP/d.d CRLF`, single
/// spaces, one digit each side of the dot), as (major, minor); `None` when the line is not
/// one.
fn request_line_version(buf: &[u8]) -> Option<(u8, u8)> {
    let at = version_offset(buf)?;
    match &buf[at..] {
        [b'H', b'T', b'T', b'P', b'/', major, b'.', minor, rest @ ..]
            if major.is_ascii_digit()
                && minor.is_ascii_digit()
                && (rest.starts_with(b"\r\n") || rest.starts_with(b"\n")) =>
        {
            Some((major - b'0', minor - b'0'))
        }
        _ => None,
    }
}

/// Where the version starts in a request line made of three parts separated by single
/// spaces (a method token, a target without spaces or controls).
fn version_offset(buf: &[u8]) -> Option<usize> {
    let line_end = buf.iter().position(|b| *b == b'\n')?;
    let line = &buf[..line_end];
    let first = line.iter().position(|b| *b == b' ')?;
    let second = first + 1 + line[first + 1..].iter().position(|b| *b == b' ')?;
    let method = &line[..first];
    let target = &line[first + 1..second];
    let token = |b: &u8| b.is_ascii_alphanumeric() || b"!#$%&'*+-.^_`|~".contains(b);
    let visible = |b: &u8| b.is_ascii_graphic();
    (!method.is_empty()
        && method.iter().all(token)
        && !target.is_empty()
        && target.iter().all(visible))
    .then_some(second + 1)
}

/// The origin form of a request target: as it is, or the path and query of an absolute
/// form (RFC 9112 §3.2.2: a server MUST accept it; its host is not ours to check), or `*`
/// for OPTIONS. `None`: `/`, which the target does not spell out.
fn origin_form<'t>(target: &'t str, method: &Method) -> Result<Option<&'t str>, HeadError> {
    // RFC 9112 §3.2: no form of request target carries a fragment.
    // The memchr crate's search, not `str::contains`: every request goes through here.
    if memchr::memchr(b'#', target.as_bytes()).is_some() {
        return Err(HeadError::Target);
    }
    if target.starts_with('/') {
        return Ok(Some(target));
    }
    if target == "*" {
        return if method == Method::OPTIONS {
            Ok(Some(target))
        } else {
            Err(HeadError::Target)
        };
    }
    let scheme_end = target.find("://").ok_or(HeadError::Target)?;
    let scheme = &target[..scheme_end];
    if !scheme.eq_ignore_ascii_case("http") && !scheme.eq_ignore_ascii_case("https") {
        return Err(HeadError::Target);
    }
    let rest = &target[scheme_end + 3..];
    let authority_end = rest.find(['/', '?']).unwrap_or(rest.len());
    let authority = &rest[..authority_end];
    // RFC 9110 §4.2.4: userinfo in an http(s) URI is to be treated as an error.
    if authority.is_empty() || !valid_host(authority.as_bytes()) {
        return Err(HeadError::Target);
    }
    match &rest[authority_end..] {
        path if path.starts_with('/') => Ok(Some(path)),
        // `http://host` or `http://host?query`: the path is empty, which means `/`; the
        // query only mattered to a route that takes one, and none does.
        _ => Ok(None),
    }
}

/// RFC 9112 §3.2 / RFC 3986 §3.2.2: `uri-host [ ":" port ]`, or empty.
fn valid_host(value: &[u8]) -> bool {
    let (host, port) = if let Some(literal) = value.strip_prefix(b"[") {
        let Some(close) = literal.iter().position(|b| *b == b']') else {
            return false;
        };
        let inside = &literal[..close];
        // RFC 3986 §3.2.2: an IPv6 address (IPvFuture is not served here).
        let address = std::str::from_utf8(inside)
            .ok()
            .and_then(|text| text.parse::<std::net::Ipv6Addr>().ok());
        if address.is_none() {
            return false;
        }
        match &literal[close + 1..] {
            [] => return true,
            [b':', port @ ..] => (&b""[..], port),
            _ => return false,
        }
    } else {
        // One pass: reg-name bytes up to the first ':' (not one of them), then the port.
        let name_len = value
            .iter()
            .position(|b| !REG_NAME[usize::from(*b)])
            .unwrap_or(value.len());
        match &value[name_len..] {
            [] => return true,
            [b':', port @ ..] => (&b""[..], port),
            _ => return false,
        }
    };
    let reg_name = host.iter().all(|b| REG_NAME[usize::from(*b)]);
    reg_name && port.iter().all(u8::is_ascii_digit)
}

/// The bytes of a host's reg-name (RFC 3986 §3.2.2: unreserved, pct-encoded, sub-delims),
/// looked up rather than searched for on every request.
const REG_NAME: [bool; 256] = {
    let mut table = [false; 256];
    let mut b = 0;
    while b < 256 {
        let byte = b as u8;
        table[b] = byte.is_ascii_alphanumeric();
        b += 1;
    }
    let others = b"-._~%!$&'()*+,;=";
    let mut i = 0;
    while i < others.len() {
        table[others[i] as usize] = true;
        i += 1;
    }
    table
};

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

#[cfg(test)]
mod tests {
    use super::*;

    const LIMITS: HeadLimits = HeadLimits {
        max_uri_bytes: 64,
        max_header_bytes: 512,
    };

    fn parse(text: &str) -> Result<Option<RequestHead>, HeadError> {
        parse_head(text.as_bytes(), LIMITS)
    }

    /// The path and query the service would see.
    fn origin(text: &str) -> (String, Option<String>) {
        let head = complete(text);
        let request = head.request(
            text.as_bytes(),
            IpAddr::from([127, 0, 0, 1]),
            Instant::now(),
        );
        (request.path.to_string(), request.query.map(str::to_string))
    }

    fn complete(text: &str) -> RequestHead {
        parse(text).expect("valid").expect("complete")
    }

    #[test]
    fn a_head_ends_where_the_next_request_starts_and_keeps_its_headers_in_place() {
        let text = "GET /t/abc?x=1 HTTP/1.1\r\nHost: h\r\nRange: bytes=0-1\r\n\
X-Request-Id: req-1\r\n\r\nGET /next";
        let head = complete(text);
        assert!(head.keep_alive);
        assert_eq!(head.request_id.as_deref(), Some("req-1"));
        assert_eq!(
            Some(head.len),
            text.find("GET /next"),
            "the head ends where the next request starts"
        );
        let request = head.request(
            &text.as_bytes()[..head.len],
            IpAddr::from([127, 0, 0, 1]),
            Instant::now(),
        );
        assert_eq!(request.target, "/t/abc?x=1");
        assert_eq!(request.header("range"), Some(&b"bytes=0-1"[..]));
        assert!(request.headers().all(|(name, _)| name != b"GET"));
    }

    #[test]
    fn the_values_an_access_log_shows_are_noted_as_the_head_is_parsed() {
        let peer = IpAddr::from([127, 0, 0, 1]);
        let noted = |text: &str, expected: Noted<'_>| {
            let head = complete(text);
            let request = head.request(text.as_bytes(), peer, Instant::now());
            // What a reader of the head's lines finds, after the fact.
            let reread = Request::new(
                request.method,
                request.version,
                request.target,
                request.path,
                peer,
                request.read_at,
                text.as_bytes(),
            );
            assert_eq!(request.noted, reread.noted, "{text}");
            assert_eq!(request.noted, expected, "{text}");
        };
        // The first line of each name counts, even empty; values are trimmed.
        noted(
            "GET / HTTP/1.1\r\nHost: h\r\nUser-Agent:\r\nuser-agent: second\r\n\
             Referer:  http://r/ \r\nRANGE: bytes=1-\r\nRange: bytes=2-\r\n\r\n",
            Noted {
                user_agent: Some(&b""[..]),
                referer: Some(&b"http://r/"[..]),
                range: Some(&b"bytes=1-"[..]),
                forwarded: false,
            },
        );
        noted("GET / HTTP/1.1\r\nHost: h\r\n\r\n", Noted::default());
        for line in ["X-Forwarded-For: 192.0.2.1", "x-real-ip: 192.0.2.1"] {
            let text = format!("GET / HTTP/1.1\r\nHost: h\r\n{line}\r\n\r\n");
            let forwarded = Noted {
                forwarded: true,
                ..Noted::default()
            };
            noted(&text, forwarded);
        }
    }

    #[test]
    fn absolute_form_targets_give_their_path() {
        assert_eq!(
            origin("GET http://elsewhere:81/t/abc?x HTTP/1.1\r\nHost: h\r\n\r\n"),
            ("/t/abc".into(), Some("x".into()))
        );
        assert_eq!(
            origin("GET HTTPS://h HTTP/1.1\r\nHost: h\r\n\r\n"),
            ("/".into(), None)
        );
        assert_eq!(
            origin("GET http://h?q=1 HTTP/1.1\r\nHost: h\r\n\r\n"),
            ("/".into(), None)
        );
        assert_eq!(
            origin("OPTIONS * HTTP/1.1\r\nHost: h\r\n\r\n"),
            ("*".into(), None)
        );
        assert_eq!(
            origin("CONNECT h:443 HTTP/1.1\r\nHost: h:443\r\n\r\n"),
            ("/".into(), None)
        );
        for bad in [
            "GET ftp://h/t/abc HTTP/1.1\r\nHost: h\r\n\r\n",
            "GET http:///t/abc HTTP/1.1\r\nHost: h\r\n\r\n",
            "GET http://u@h/t/abc HTTP/1.1\r\nHost: h\r\n\r\n",
            "GET h:80 HTTP/1.1\r\nHost: h\r\n\r\n",
            "GET * HTTP/1.1\r\nHost: h\r\n\r\n",
        ] {
            assert_eq!(parse(bad).err(), Some(HeadError::Target), "{bad}");
        }
    }

    #[test]
    fn host_is_required_once_and_valid() {
        for good in [
            "GET / HTTP/1.1\r\nHost: example.com\r\n\r\n",
            "GET / HTTP/1.1\r\nHost: 127.0.0.1:8080\r\n\r\n",
            "GET / HTTP/1.1\r\nHost: [::1]:80\r\n\r\n",
            "GET / HTTP/1.1\r\nHost:\r\n\r\n",
            "GET / HTTP/1.0\r\n\r\n",
        ] {
            assert!(parse(good).is_ok(), "{good}");
        }
        for bad in [
            "GET / HTTP/1.1\r\n\r\n",
            "GET / HTTP/1.1\r\nHost: a\r\nHost: a\r\n\r\n",
            "GET / HTTP/1.0\r\nHost: a\r\nHost: b\r\n\r\n",
            "GET / HTTP/1.1\r\nHost: a b\r\n\r\n",
            "GET / HTTP/1.1\r\nHost: a/b\r\n\r\n",
            "GET / HTTP/1.1\r\nHost: user@a\r\n\r\n",
            "GET / HTTP/1.1\r\nHost: a:80x\r\n\r\n",
            "GET / HTTP/1.1\r\nHost: a:1:2\r\n\r\n",
            "GET / HTTP/1.1\r\nHost: [zz]\r\n\r\n",
        ] {
            assert_eq!(parse(bad).err(), Some(HeadError::Host), "{bad}");
        }
    }

    #[test]
    fn keep_alive_follows_the_version_and_the_connection_header() {
        let keep = |text: &str| complete(text).keep_alive;
        assert!(keep("GET / HTTP/1.1\r\nHost: h\r\n\r\n"));
        assert!(!keep(
            "GET / HTTP/1.1\r\nHost: h\r\nConnection: Close\r\n\r\n"
        ));
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
            parse_head(many.as_bytes(), limits).err(),
            Some(HeadError::TooLarge)
        );
        assert_eq!(
            parse("GET / HTTP/2.0\r\n\r\n").err(),
            Some(HeadError::Version)
        );
        // Malformed request lines are 400, not 505 (RFC 9112 §3).
        for line in [
            "G ET / HTTP/1.0",
            "GET /  HTTP/1.1",
            "GET / HTTP/10.0",
            "GET / HTTP/1.32",
            "GET / HTTP/\r\r1.1",
        ] {
            assert_eq!(
                parse(&format!("{line}\r\nHost: h\r\n\r\n")).err(),
                Some(HeadError::Malformed),
                "{line}"
            );
        }
        // A later 1.x is answered as 1.1 (RFC 9110 §2.5).
        let head = parse("GET / HTTP/1.2\r\nHost: h\r\n\r\n")
            .expect("parsed")
            .expect("complete");
        assert_eq!(head.version, Version::HTTP_11);
        // No fragment in a target, no invalid IPv6 literal in an authority (RFC 9112 §3.2).
        for target in ["/musicdb/x/y.mp3#t=10", "http://[4712::abcd::]/musicdb/x"] {
            assert_eq!(
                parse(&format!("GET {target} HTTP/1.1\r\nHost: h\r\n\r\n")).err(),
                Some(HeadError::Target),
                "{target}"
            );
        }
        assert!(parse("GET http://[::1]:8080/x HTTP/1.1\r\nHost: h\r\n\r\n").is_ok());
        // A later minor version split across reads is waited for, not refused.
        assert!(matches!(parse("GET / HTTP/1.2"), Ok(None)));
    }

    #[test]
    fn bodies_are_framed_by_one_length_or_by_chunked_alone() {
        let body = |text: &str| parse(text).map(|h| h.expect("complete").body);
        let h = "GET / HTTP/1.1\r\nHost: h\r\n";
        assert_eq!(body(&format!("{h}\r\n")), Ok(BodyFraming::None));
        assert_eq!(
            body(&format!("{h}Content-Length: 0\r\n\r\n")),
            Ok(BodyFraming::None)
        );
        assert_eq!(
            body(&format!("{h}Content-Length: 5\r\n\r\n")),
            Ok(BodyFraming::Length(5))
        );
        assert_eq!(
            body(&format!(
                "{h}Content-Length: 5\r\nContent-Length: 5\r\n\r\n"
            )),
            Ok(BodyFraming::Length(5))
        );
        assert_eq!(
            body(&format!("{h}Transfer-Encoding: Chunked\r\n\r\n")),
            Ok(BodyFraming::Chunked)
        );
        for bad in [
            "Content-Length: 5\r\nContent-Length: 6\r\n",
            "Content-Length: -1\r\n",
            "Content-Length: 5, 5\r\n",
            "Content-Length: +5\r\n",
            "Content-Length: 5\r\nTransfer-Encoding: chunked\r\n",
            "Transfer-Encoding: chunked\r\nContent-Length: 5\r\n",
            "Transfer-Encoding: chunked, chunked\r\n",
            "Transfer-Encoding: chunked\r\nTransfer-Encoding: chunked\r\n",
            "Transfer-Encoding: chunked, gzip\r\n",
            "Transfer-Encoding: xchunked\r\n",
            "Transfer-Encoding: chunked,\r\n",
            "Transfer-Encoding: ,chunked\r\n",
            "Transfer-Encoding: chunked;q=1\r\n",
            "Transfer-Encoding: \"chunked\"\r\n",
            "Transfer-Encoding: identity\r\n",
        ] {
            assert_eq!(
                body(&format!("{h}{bad}\r\n")),
                Err(HeadError::BodyFraming),
                "{bad}"
            );
        }
        assert_eq!(
            body("GET / HTTP/1.0\r\nTransfer-Encoding: chunked\r\n\r\n"),
            Err(HeadError::BodyFraming)
        );
        assert_eq!(
            body(&format!("{h}Transfer-Encoding: gzip, chunked\r\n\r\n")),
            Err(HeadError::UnknownCoding)
        );
        assert_eq!(
            body(&format!("{h}Content-Length: 9999999\r\n\r\n")),
            Err(HeadError::BodyTooLarge)
        );
        assert_eq!(
            parse("GET / HTTP/1.1\r\nBad Header: x\r\n\r\n").err(),
            Some(HeadError::Malformed)
        );
    }

    #[test]
    fn only_100_continue_is_expected_and_only_with_a_body_in_http_11() {
        let expect = |text: &str| parse(text).map(|h| h.expect("complete").expect_continue);
        let h = "GET / HTTP/1.1\r\nHost: h\r\n";
        assert_eq!(
            expect(&format!(
                "{h}Expect: 100-Continue\r\nContent-Length: 3\r\n\r\n"
            )),
            Ok(true)
        );
        assert_eq!(
            expect(&format!("{h}Expect: 100-continue\r\n\r\n")),
            Ok(false)
        );
        assert_eq!(
            expect("GET / HTTP/1.0\r\nExpect: 100-continue\r\nContent-Length: 3\r\n\r\n"),
            Ok(false)
        );
        assert_eq!(
            expect(&format!("{h}Expect: 200-ok\r\n\r\n")),
            Err(HeadError::Expectation)
        );
    }

    #[test]
    fn unsafe_request_ids_are_replaced() {
        let id = |value: &str| {
            complete(&format!(
                "GET / HTTP/1.1\r\nHost: h\r\nX-Request-Id: {value}\r\n\r\n"
            ))
            .request_id
        };
        assert_eq!(id("abc-1.2:3_x").as_deref(), Some("abc-1.2:3_x"));
        assert_eq!(id("a b"), None);
        assert_eq!(id(&"a".repeat(65)), None);
    }
}
