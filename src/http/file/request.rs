//! What the file server reads from a track request: HEAD or not, and the six headers of
//! ranges and conditional requests, owned so the request can cross to the blocking pool.

use super::conditional::Preconditions;
use crate::http::service::Request;

/// What the file server needs from the request. The header values are boxed `str`s, not
/// `String`s: it moves by value from the route to the file answer, and within 128 bytes
/// (120) each move is a few vector moves, not a call to `memcpy` (at 168 it was).
#[derive(Debug, Clone, Default)]
pub(crate) struct FileRequest {
    /// HEAD: the answer GET would give, whose body is not sent (and not read).
    pub(crate) head: bool,
    pub(crate) range: Option<Box<str>>,
    /// `If-Match`.
    pub(crate) if_match: Option<Box<str>>,
    /// `If-None-Match`.
    pub(crate) if_none_match: Option<Box<str>>,
    /// `If-Modified-Since`.
    pub(crate) if_modified_since: Option<Box<str>>,
    /// `If-Unmodified-Since`.
    pub(crate) if_unmodified_since: Option<Box<str>>,
    /// `If-Range`.
    pub(crate) if_range: Option<Box<str>>,
    /// `?download`: `Content-Disposition: attachment` instead of `inline`.
    pub(crate) download: bool,
    /// `X-Musicd-Authorize: 1`, sent by a shared cache in front (`deploy/varnish.vcl`)
    /// before it answers from its copy: only the access check runs, and a passing link
    /// gets 204 with no body (no lookup, no file).
    pub(crate) authorize_only: bool,
    /// When the request had been read in full (an instant after the read that completed
    /// it): a file-cache check begun later covers it. `None`: check now.
    pub(crate) read_at: Option<std::time::Instant>,
}

impl FileRequest {
    /// The file server's part of a track request: HEAD or not, and the headers of ranges,
    /// conditions and the authorization probe (`download` comes from the query, elsewhere).
    #[cfg(test)]
    pub(crate) fn read(request: &Request<'_>) -> FileRequest {
        let mut file_request = FileRequest::of(request);
        for (name, value) in request.headers() {
            file_request.take_header(name, value);
        }
        file_request
    }

    /// A request without any of the file server's headers yet (see [`Self::take_header`]).
    pub(crate) fn of(request: &Request<'_>) -> FileRequest {
        FileRequest {
            head: request.is_head(),
            read_at: Some(request.read_at),
            ..FileRequest::default()
        }
    }

    /// Keeps header `name` if it is one of the file server's: `false` when it is not, so
    /// that one pass over the head can offer each line to each reader in turn.
    pub(crate) fn take_header(&mut self, name: &[u8], value: &[u8]) -> bool {
        if name.len() == 18 && name.eq_ignore_ascii_case(b"x-musicd-authorize") {
            self.authorize_only = value == b"1";
            return true;
        }
        let slot = match name.len() {
            5 if name.eq_ignore_ascii_case(b"range") => &mut self.range,
            8 if name.eq_ignore_ascii_case(b"if-match") => &mut self.if_match,
            8 if name.eq_ignore_ascii_case(b"if-range") => &mut self.if_range,
            13 if name.eq_ignore_ascii_case(b"if-none-match") => &mut self.if_none_match,
            17 if name.eq_ignore_ascii_case(b"if-modified-since") => &mut self.if_modified_since,
            19 if name.eq_ignore_ascii_case(b"if-unmodified-since") => {
                &mut self.if_unmodified_since
            }
            _ => return false,
        };
        // Like `HeaderValue::to_str`: a value that is not visible ASCII is ignored.
        if let Ok(text) = std::str::from_utf8(value)
            && text
                .bytes()
                .all(|b| b == b'\t' || (b' '..=b'~').contains(&b))
            && slot.is_none()
        {
            *slot = Some(text.into());
        }
        true
    }

    /// The conditional headers, borrowed for evaluation.
    pub(crate) fn preconditions(&self) -> Preconditions<'_> {
        Preconditions {
            if_match: self.if_match.as_deref(),
            if_none_match: self.if_none_match.as_deref(),
            if_modified_since: self.if_modified_since.as_deref(),
            if_unmodified_since: self.if_unmodified_since.as_deref(),
            if_range: self.if_range.as_deref(),
        }
    }
}

#[cfg(test)]
mod tests {
    use std::net::IpAddr;
    use std::time::Instant;

    use axum::http::{Method, Version};

    use super::*;

    /// It moves by value from the route to the file answer: past 128 bytes each move is a
    /// call to `memcpy`.
    #[test]
    fn a_file_request_stays_small_enough_to_move_inline() {
        assert!(
            size_of::<FileRequest>() <= 128,
            "{} bytes",
            size_of::<FileRequest>()
        );
    }

    #[test]
    fn a_track_request_keeps_the_first_plain_value_of_each_header_the_file_server_reads() {
        let head = "HEAD /t/abc HTTP/1.1\r\nHost: h\r\nrange: bytes=0-1\r\nRange: bytes=5-\r\n\
If-None-Match: \"e\"\r\nIf-Match: caf\u{e9}\r\nX-Musicd-Authorize: 1\r\n\r\n";
        let method = Method::HEAD;
        let request = Request::new(
            &method,
            Version::HTTP_11,
            "/t/abc",
            "/t/abc",
            IpAddr::from([127, 0, 0, 1]),
            Instant::now(),
            head.as_bytes(),
        );
        let file_request = FileRequest::read(&request);
        assert!(file_request.head);
        assert!(file_request.authorize_only);
        assert_eq!(file_request.range.as_deref(), Some("bytes=0-1"));
        assert_eq!(file_request.if_none_match.as_deref(), Some("\"e\""));
        assert_eq!(file_request.if_match, None, "not visible ASCII: ignored");
        assert_eq!(file_request.read_at, Some(request.read_at));
    }
}
