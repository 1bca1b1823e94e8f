//! What a handler answers before it goes on the wire: a status, header lines, a body.
//!
//! Every answer musicd sends, file or error or ops endpoint, is an [`Answer`]; the HTTP/1.1
//! layer alone decides how its body is delimited, so no handler writes `Content-Length` or
//! `Transfer-Encoding` itself.
//!
//! A file body is a list of [`Segment`]s: a range is one file segment, a multipart answer
//! alternates part headers and file segments. The connection sends file segments with
//! `sendfile(2)` (or copies them, without `zero_copy`) from the file opened when the answer
//! was decided, so a file replaced by rename mid-stream keeps sending the version opened.

use std::fs::File;
use std::num::NonZeroU64;
use std::ops::Deref;
use std::sync::{Arc, LazyLock};

use axum::body::Body;
use axum::http::{HeaderMap, HeaderValue, StatusCode, header};
use axum::response::Response;
use bytes::Bytes;

use super::Identity;

/// A piece of a response body.
#[derive(Debug, Clone)]
pub enum Segment {
    /// Bytes already in memory (a small file, multipart headers).
    Bytes(Bytes),
    /// `len` bytes of the file starting at `offset`.
    File {
        /// Where the slice starts.
        offset: u64,
        /// How long it is.
        len: u64,
    },
}

impl Segment {
    /// How many bytes this segment contributes.
    pub(crate) fn len(&self) -> u64 {
        match self {
            Segment::Bytes(b) => b.len() as u64,
            Segment::File { len, .. } => *len,
        }
    }
}

/// What follows a response head.
pub enum Payload {
    /// Nothing.
    Empty,
    /// Bytes already in memory.
    Bytes(Bytes),
    /// Slices of an open file and in-memory parts, in order. Boxed: it is three times
    /// the size of the other kinds, and every answer would carry (and copy) its size.
    File(Box<FileBody>),
    /// A body produced by the axum router (ops endpoints).
    Body(Body),
}

/// A body sent from an open file.
#[derive(Debug)]
pub struct FileBody {
    /// The file, opened (and confined) before the head was decided.
    pub file: Arc<File>,
    /// What to send.
    pub segments: Vec<Segment>,
    /// The file's identity when it was opened: a transfer that finds it changed is
    /// aborted.
    pub opened: Identity,
}

impl Payload {
    /// The body's length when known before sending.
    pub(crate) fn exact_len(&self) -> Option<u64> {
        match self {
            Payload::Empty => Some(0),
            Payload::Bytes(bytes) => Some(bytes.len() as u64),
            Payload::File(body) => Some(body.segments.iter().map(Segment::len).sum()),
            Payload::Body(body) => http_body::Body::size_hint(body).exact(),
        }
    }
}

impl std::fmt::Debug for Payload {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Payload::Empty => f.write_str("Empty"),
            Payload::Bytes(bytes) => write!(f, "Bytes({})", bytes.len()),
            Payload::File(body) => write!(f, "File({:?})", body.segments),
            Payload::Body(_) => f.write_str("Body"),
        }
    }
}

/// An answer: the status, header lines formatted once per file version, further headers,
/// and the body. Neither `lines` nor `headers` carries framing (`Content-Length`,
/// `Transfer-Encoding`, `Connection`): the head writer adds it from the payload.
#[derive(Debug)]
pub struct Answer {
    /// The status.
    pub status: StatusCode,
    /// Complete header lines (`name: value\r\n`), written first.
    pub lines: Bytes,
    /// Headers written after the lines.
    pub headers: Headers,
    /// The body.
    pub payload: Payload,
    /// For a HEAD answer made by the router: the length GET would have sent, which the
    /// router's emptied body no longer tells.
    pub declared_len: Option<u64>,
    /// How fast the body may leave; `None`: as fast as the client takes it.
    pub pacing: Option<Pacing>,
}

/// Headers an answer adds after its lines: none for nearly every answer, so the map is
/// boxed only once one is added. Unboxed, its 96 bytes were more than a third of every
/// [`Answer`], which moves by value from the handler to the connection several times a
/// request: at 248 bytes each move was a call to `memcpy`, at 120 a few vector moves.
#[derive(Debug, Default)]
pub struct Headers(Option<Box<HeaderMap>>);

/// What an answer without headers reads as.
static NO_HEADERS: LazyLock<HeaderMap> = LazyLock::new(HeaderMap::new);

impl Headers {
    /// The map, made on first use.
    fn map(&mut self) -> &mut HeaderMap {
        self.0.get_or_insert_default()
    }

    /// Sets `name` to `value`, replacing what it had.
    pub fn insert(&mut self, name: header::HeaderName, value: HeaderValue) {
        self.map().insert(name, value);
    }

    /// Adds `value` to `name`'s values.
    pub fn append(&mut self, name: header::HeaderName, value: HeaderValue) {
        self.map().append(name, value);
    }

    /// Removes `name`.
    pub fn remove(&mut self, name: header::HeaderName) {
        if let Some(map) = &mut self.0 {
            map.remove(name);
        }
    }

    /// The headers as a map of their own.
    pub fn into_map(self) -> HeaderMap {
        self.0.map(|map| *map).unwrap_or_default()
    }
}

impl From<HeaderMap> for Headers {
    fn from(map: HeaderMap) -> Headers {
        Headers((!map.is_empty()).then(|| Box::new(map)))
    }
}

impl Deref for Headers {
    type Target = HeaderMap;

    fn deref(&self) -> &HeaderMap {
        self.0.as_deref().unwrap_or(&NO_HEADERS)
    }
}

/// A body sent at a bounded rate after a free start, so a listener's player buffers ahead
/// without one download taking the whole link.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Pacing {
    /// Body bytes per second once paced (never 0: `Option<Pacing>` then needs no tag of
    /// its own).
    pub rate_bytes_per_sec: NonZeroU64,
    /// Bytes sent at full speed before pacing starts.
    pub after_bytes: u64,
}

impl Pacing {
    /// Pacing at `rate` after `after` bytes; `None` when `rate` is 0 (off).
    pub fn new(rate: u64, after: u64) -> Option<Pacing> {
        Some(Pacing {
            rate_bytes_per_sec: NonZeroU64::new(rate)?,
            after_bytes: after,
        })
    }
}

impl Answer {
    /// An answer with these lines and body, no further headers.
    pub fn new(status: StatusCode, lines: Bytes, payload: Payload) -> Answer {
        Answer {
            status,
            lines,
            headers: Headers::default(),
            payload,
            declared_len: None,
            pacing: None,
        }
    }

    /// `{"error": message}` with this status.
    pub(crate) fn json_error(status: StatusCode, message: &str) -> Answer {
        Answer::json(status, &serde_json::json!({ "error": message }))
    }

    /// A JSON body with this status.
    pub(crate) fn json(status: StatusCode, body: &serde_json::Value) -> Answer {
        let text = Bytes::from(body.to_string());
        let mut answer = Answer::new(status, Bytes::new(), Payload::Bytes(text));
        answer.headers.insert(
            header::CONTENT_TYPE,
            HeaderValue::from_static("application/json"),
        );
        answer
    }

    /// An answer made from an axum response (the ops endpoints, the router's 404/405).
    pub(crate) fn from_response(response: Response) -> Answer {
        let (mut parts, body) = response.into_parts();
        let declared_len = parts
            .headers
            .remove(header::CONTENT_LENGTH)
            .and_then(|v| v.to_str().ok()?.parse().ok());
        parts.headers.remove(header::TRANSFER_ENCODING);
        Answer {
            status: parts.status,
            lines: Bytes::new(),
            headers: Headers::from(parts.headers),
            payload: Payload::Body(body),
            declared_len,
            pacing: None,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Every answer moves by value from its handler to the connection; past 128 bytes
    /// each move is a call to `memcpy` (callgrind: 24 calls a cached GET at 248 bytes).
    #[test]
    fn an_answer_stays_small_enough_to_move_inline() {
        assert!(size_of::<Answer>() <= 128, "{} bytes", size_of::<Answer>());
        assert!(size_of::<Result<Answer, crate::http::error::ApiError>>() <= 128);
    }

    #[test]
    fn headers_are_boxed_only_once_one_is_added() {
        let mut headers = Headers::default();
        headers.remove(header::VARY);
        assert!(headers.0.is_none() && headers.is_empty());
        assert!(Headers::from(HeaderMap::new()).0.is_none());
        headers.append(header::VARY, HeaderValue::from_static("Origin"));
        headers.append(header::VARY, HeaderValue::from_static("Accept"));
        assert_eq!(headers.get_all(header::VARY).iter().count(), 2);
        headers.insert(header::VARY, HeaderValue::from_static("Origin"));
        assert_eq!(headers.into_map()[header::VARY], "Origin");
    }
}
