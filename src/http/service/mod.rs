//! The seam between the HTTP/1.1 layer and the application, as hyper's `Service` is: the
//! request h1 read, the answer the application gives back, and the one trait through
//! which h1 calls up.
//!
//! This module is a leaf: it imports nothing from the rest of the crate, so h1
//! ([`super::h1`]) depends on it and on nothing above it, and the application
//! ([`super::app`]) implements [`Service`] without h1 knowing routes, files or logs.
//!
//! * [`Request`]: one request head as h1 read it, borrowed from the connection's buffer
//!   (spans, not copies): method, version, target, and its header lines on demand;
//! * [`Answer`]: the status, header lines and [`Payload`] to send, with its [`Pacing`];
//! * [`Exchange`]: how the exchange went (status, bytes, clocks), handed back to
//!   [`Service::finish`] to count and log;
//! * [`RequestId`], [`Identity`] and header-line formatting, shared by both sides.

mod answer;
pub(crate) mod header_lines;
mod identity;
mod request_id;

use std::fs::File;
use std::future::Future;
use std::net::IpAddr;
use std::time::Instant;

use axum::http::{Method, StatusCode, Version};

pub use answer::{Answer, FileBody, Headers, Pacing, Payload, Segment};
pub use identity::Identity;
pub(crate) use request_id::RequestId;

/// The application as h1 sees it. h1 is generic over it, so each call is monomorphised:
/// no boxing, no dynamic dispatch on the request path.
pub trait Service: Send + Sync + 'static {
    /// What the service keeps from [`Service::call`] until [`Service::finish`] (for musicd:
    /// the route and where the track's path came from).
    type Context: Send;

    /// Answers one request whose head (and any body) has been read.
    fn call(&self, request: &Request<'_>) -> impl Future<Output = (Answer, Self::Context)> + Send;

    /// The exchange is over: sent, failed part-way, or refused before a request could be
    /// read (then `context` is `None`). Called once per answer h1 wrote.
    fn finish(&self, exchange: &Exchange<'_>, context: Option<Self::Context>);

    /// A file being sent was found changed or unreadable: whatever holds it open for
    /// later answers should let it go.
    fn file_changed(&self, file: &File);
}

/// One request head, as read from the connection. Everything is borrowed from the bytes
/// of the head itself.
#[derive(Debug, Clone, Copy)]
pub struct Request<'a> {
    pub(crate) method: &'a Method,
    /// HTTP/1.0 or HTTP/1.1.
    pub(crate) version: Version,
    /// The request target as received (what an access log shows).
    pub target: &'a str,
    /// The target's path in origin form: the path of an absolute-form target, `*` for
    /// `OPTIONS *`.
    pub path: &'a str,
    /// The query, without `?`.
    pub(crate) query: Option<&'a str>,
    /// The peer, or the client a PROXY protocol header named.
    pub(crate) peer: IpAddr,
    /// When the head (and body) had been read in full.
    pub(crate) read_at: Instant,
    /// The head's header fields (past the request line, up to the blank line).
    fields: &'a [u8],
    /// What an access-log line shows of them, noted as the head was parsed.
    pub(crate) noted: Noted<'a>,
}

/// The header values an access-log line shows, noted while the head was parsed so that
/// writing the line does not read the head's lines again (that second pass was a quarter
/// of the line's cost, callgrind). Each is the first line of its name, even an empty one,
/// as nginx's `$http_user_agent` is.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub(crate) struct Noted<'a> {
    /// `User-Agent`.
    pub(crate) user_agent: Option<&'a [u8]>,
    /// `Referer`.
    pub(crate) referer: Option<&'a [u8]>,
    /// `Range`.
    pub(crate) range: Option<&'a [u8]>,
    /// Whether an `X-Forwarded-For` or `X-Real-IP` line came: only then can the client be
    /// anyone but the peer.
    pub(crate) forwarded: bool,
}

impl<'a> Noted<'a> {
    /// Notes one header line; the first of each name counts.
    pub(crate) fn note(&mut self, name: &[u8], value: &'a [u8]) {
        let slot = if name.eq_ignore_ascii_case(b"user-agent") {
            &mut self.user_agent
        } else if name.eq_ignore_ascii_case(b"referer") {
            &mut self.referer
        } else if name.eq_ignore_ascii_case(b"range") {
            &mut self.range
        } else {
            self.forwarded |= name.eq_ignore_ascii_case(b"x-forwarded-for")
                || name.eq_ignore_ascii_case(b"x-real-ip");
            return;
        };
        slot.get_or_insert(value);
    }
}

impl<'a> Request<'a> {
    /// A request over `head`, the whole bytes of a head (request line and fields) that
    /// has been validated.
    #[cfg(test)]
    #[allow(clippy::too_many_arguments)]
    pub(crate) fn new(
        method: &'a Method,
        version: Version,
        target: &'a str,
        origin: &'a str,
        peer: IpAddr,
        read_at: Instant,
        head: &'a [u8],
    ) -> Request<'a> {
        let start = head.iter().position(|b| !b"\r\n".contains(b));
        let rest = start.map_or(&[][..], |at| &head[at..]);
        // Past the request line.
        let fields = memchr::memchr(b'\n', rest).map_or(&[][..], |end| &rest[end + 1..]);
        let mut request = Request::parsed(method, version, target, origin, peer, read_at, fields);
        for (name, value) in request.headers() {
            request.noted.note(name, value);
        }
        request
    }

    /// A request whose header fields are `fields`: the bytes of a parsed and validated
    /// head past its request line.
    #[allow(clippy::too_many_arguments)]
    pub(crate) fn parsed(
        method: &'a Method,
        version: Version,
        target: &'a str,
        origin: &'a str,
        peer: IpAddr,
        read_at: Instant,
        fields: &'a [u8],
    ) -> Request<'a> {
        let (path, query) = split_at_byte(origin, b'?');
        Request {
            method,
            version,
            target,
            path,
            query,
            peer,
            read_at,
            fields,
            noted: Noted::default(),
        }
    }

    /// Every header line, in order, as (name, value) with the value trimmed. The head was
    /// validated when it was parsed, so each line is `name: value`; this only splits it.
    pub fn headers(&self) -> impl Iterator<Item = (&'a [u8], &'a [u8])> + 'a {
        let mut rest = self.fields;
        std::iter::from_fn(move || {
            let end = memchr::memchr(b'\n', rest)?;
            let line = &rest[..end];
            rest = &rest[end + 1..];
            let line = line.strip_suffix(b"\r").unwrap_or(line);
            // A name is a few bytes: a plain scan beats setting up a vector search.
            let colon = line.iter().position(|&b| b == b':')?;
            Some((&line[..colon], line[colon + 1..].trim_ascii()))
        })
    }

    /// The first value of header `name` (ASCII case-insensitive).
    #[cfg(test)]
    pub(crate) fn header(&self, name: &str) -> Option<&'a [u8]> {
        self.headers()
            .find(|(n, _)| n.eq_ignore_ascii_case(name.as_bytes()))
            .map(|(_, value)| value)
    }

    /// Whether this is a HEAD request.
    pub(crate) fn is_head(&self) -> bool {
        *self.method == Method::HEAD
    }
}

/// `text` before and after the first `byte` (`None` after: no such byte), found with the
/// memchr crate: `str::split_once` runs std's generic loop, which costs more on the short
/// texts of a request (callgrind). `byte` must be ASCII, so both sides are UTF-8 and the
/// slicing cannot panic.
pub(crate) fn split_at_byte(text: &str, byte: u8) -> (&str, Option<&str>) {
    debug_assert!(byte.is_ascii());
    match memchr::memchr(byte, text.as_bytes()) {
        Some(at) => (&text[..at], Some(&text[at + 1..])),
        None => (text, None),
    }
}

/// What was received, as far as the exchange's record is concerned.
#[derive(Debug, Clone, Copy)]
pub(crate) enum Received<'a> {
    /// A request that was read and answered.
    Request(&'a Request<'a>),
    /// Input that was refused before a request could be read; `head`: it looked like a
    /// HEAD request (so the refusal had no body).
    Refused {
        /// The peer, or the client a PROXY protocol header named.
        peer: IpAddr,
        /// Whether the refused input began with `HEAD `.
        head: bool,
    },
}

/// How one exchange went, for counting and logging.
#[derive(Debug)]
pub struct Exchange<'a> {
    /// What was received.
    pub(crate) received: Received<'a>,
    /// The request's id, as sent in `X-Request-Id`.
    pub(crate) request_id: &'a RequestId,
    /// The status sent.
    pub(crate) status: StatusCode,
    /// Body bytes sent.
    pub(crate) bytes: u64,
    /// Whether the whole response left.
    pub(crate) complete: bool,
    /// When the exchange began (its head had been read).
    pub(crate) started: Instant,
    /// When its response head was written, if it was.
    pub(crate) head_written: Option<Instant>,
    /// When it ended: its last byte handed to the kernel, or its refusal.
    pub(crate) ended: Instant,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn header_lines_are_split_from_the_head_itself() {
        let head =
            b"\r\nGET /a?b=1 HTTP/1.1\r\nHost: h\r\nRange:  bytes=0-1 \r\nX-A:\r\nrange: x\n\r\n";
        let method = Method::GET;
        let request = Request::new(
            &method,
            Version::HTTP_11,
            "/a?b=1",
            "/a?b=1",
            IpAddr::from([127, 0, 0, 1]),
            Instant::now(),
            head,
        );
        assert_eq!((request.path, request.query), ("/a", Some("b=1")));
        let lines: Vec<_> = request.headers().collect();
        assert_eq!(
            lines,
            [
                (&b"Host"[..], &b"h"[..]),
                (b"Range", b"bytes=0-1"),
                (b"X-A", b""),
                (b"range", b"x"),
            ]
        );
        assert_eq!(request.header("RANGE"), Some(&b"bytes=0-1"[..]));
        assert_eq!(request.header("referer"), None);
    }
}
