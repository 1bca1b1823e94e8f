//! Response heads, and the one decision of how a response body is delimited.
//!
//! [`decide`] picks the framing from the status, the method, the body's length and the
//! request's version (RFC 9112 §6.3): no body and no length for 1xx, 204 and 304; for HEAD
//! the length GET would send, and no body; `Content-Length` when the length is known;
//! otherwise chunked for HTTP/1.1, and for HTTP/1.0 a body that ends with the connection.
//! [`write_head`] is the only writer of `Content-Length`, `Transfer-Encoding` and
//! `Connection`: it drops them from what a handler gave, so a response with both framings
//! cannot be written (RFC 9112 §6.1: a server MUST NOT send both).

use std::cell::RefCell;
use std::time::{Duration, Instant, UNIX_EPOCH};

use axum::http::{HeaderMap, StatusCode, Version, header};
use bytes::{BufMut, BytesMut};

use crate::http::service::RequestId;
use crate::http::service::header_lines::put_header;
use crate::timing::unix_second_at;

/// How the body after a response head is delimited.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Framing {
    /// `Content-Length`.
    Length(u64),
    /// `Transfer-Encoding: chunked`.
    Chunked,
    /// No length: the body ends when the connection closes (HTTP/1.0 clients).
    UntilClose,
    /// No body and no length (1xx, 204, 304, or HEAD of a body of unknown length).
    None,
}

/// How one response goes out.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Decision {
    /// What the head says about the body.
    pub(crate) framing: Framing,
    /// Whether body bytes follow the head (not for HEAD, whatever the framing says).
    pub(crate) send_body: bool,
    /// Whether the connection stays open after the response.
    pub(crate) keep_alive: bool,
}

/// Whether a response with this status may carry a body at all.
pub(crate) fn status_has_body(status: StatusCode) -> bool {
    !status.is_informational()
        && status != StatusCode::NO_CONTENT
        && status != StatusCode::NOT_MODIFIED
}

/// The framing of a response with `status` to a request (`head`: HEAD) of `version`,
/// whose body is `len` bytes when known.
pub(crate) fn decide(
    status: StatusCode,
    head: bool,
    len: Option<u64>,
    version: Version,
    keep_alive: bool,
) -> Decision {
    let framing = if !status_has_body(status) {
        Framing::None
    } else {
        match len {
            Some(len) => Framing::Length(len),
            None if head => Framing::None,
            None if version == Version::HTTP_11 => Framing::Chunked,
            None => Framing::UntilClose,
        }
    };
    Decision {
        framing,
        send_body: !head && framing != Framing::None,
        keep_alive: keep_alive && framing != Framing::UntilClose,
    }
}

/// What a response head says.
pub(crate) struct ResponseHead<'a> {
    pub(crate) status: StatusCode,
    /// Preformatted header lines (`name: value\r\n`), written first; never framing.
    pub(crate) lines: &'a [u8],
    /// Further headers (framing ones among them are dropped).
    pub(crate) headers: &'a HeaderMap,
    /// The body's framing and the connection's fate.
    pub(crate) decision: Decision,
    /// The request's version (HTTP/1.0 needs an explicit keep-alive).
    pub(crate) version: Version,
    /// The `x-request-id` value.
    pub(crate) request_id: &'a RequestId,
    /// When the head is written: its `Date`.
    pub(crate) at: Instant,
}

/// Bytes of a response head beyond its preformatted lines: the status line, the framing
/// and connection lines, the date and the request id.
pub(super) const HEAD_ROOM: usize = 192;

/// Writes a response head into `out`.
pub(crate) fn write_head(out: &mut BytesMut, head: &ResponseHead<'_>) {
    let ResponseHead {
        status,
        lines,
        headers,
        decision,
        version,
        request_id,
        at,
    } = *head;
    debug_assert!(
        !has_framing_line(lines),
        "preformatted lines must not carry framing"
    );
    // Room for the whole head at once (the buffer is empty between requests).
    out.reserve(lines.len() + HEAD_ROOM);
    out.put_slice(b"HTTP/1.1 ");
    out.put_slice(status.as_str().as_bytes());
    out.put_u8(b' ');
    out.put_slice(status.canonical_reason().unwrap_or("Unknown").as_bytes());
    out.put_slice(b"\r\n");
    out.put_slice(lines);
    for (name, value) in headers {
        if name != header::CONTENT_LENGTH
            && name != header::TRANSFER_ENCODING
            && name != header::CONNECTION
        {
            put_header(out, name.as_str(), value.as_bytes());
        }
    }
    match decision.framing {
        Framing::Length(len) => {
            out.put_slice(b"content-length: ");
            out.put_slice(itoa::Buffer::new().format(len).as_bytes());
            out.put_slice(b"\r\n");
        }
        Framing::Chunked => out.put_slice(b"transfer-encoding: chunked\r\n"),
        Framing::UntilClose | Framing::None => {}
    }
    out.put_slice(b"date: ");
    with_http_date(at, |date| out.put_slice(date));
    out.put_slice(b"\r\nx-request-id: ");
    request_id.write_to(out);
    out.put_slice(b"\r\n");
    if !decision.keep_alive {
        out.put_slice(b"connection: close\r\n");
    } else if version == Version::HTTP_10 {
        out.put_slice(b"connection: keep-alive\r\n");
    }
    out.put_slice(b"\r\n");
}

/// The interim answer to `Expect: 100-continue`.
pub(crate) const CONTINUE: &[u8] = b"HTTP/1.1 100 Continue\r\n\r\n";

fn has_framing_line(lines: &[u8]) -> bool {
    lines.split(|b| *b == b'\n').any(|line| {
        let name = line.split(|b| *b == b':').next().unwrap_or_default();
        name.eq_ignore_ascii_case(b"content-length")
            || name.eq_ignore_ascii_case(b"transfer-encoding")
            || name.eq_ignore_ascii_case(b"connection")
    })
}

thread_local! {
    /// The `Date` value of the current second, formatted once per second per thread.
    static HTTP_DATE: RefCell<(u64, [u8; 29])> = const { RefCell::new((u64::MAX, [b' '; 29])) };
}

fn with_http_date(at: Instant, write: impl FnOnce(&[u8])) {
    let second = unix_second_at(at);
    HTTP_DATE.with(|cell| {
        let mut cached = cell.borrow_mut();
        if cached.0 != second {
            let text = httpdate::fmt_http_date(UNIX_EPOCH + Duration::from_secs(second));
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
    use axum::http::HeaderValue;

    fn head_text(
        status: StatusCode,
        headers: &HeaderMap,
        decision: Decision,
        version: Version,
    ) -> String {
        let mut out = BytesMut::new();
        write_head(
            &mut out,
            &ResponseHead {
                status,
                lines: b"etag: \"x\"\r\n",
                headers,
                decision,
                version,
                request_id: &RequestId::Given("r-1".into()),
                at: Instant::now(),
            },
        );
        String::from_utf8(out.to_vec()).expect("ascii")
    }

    #[test]
    fn framing_follows_status_method_length_and_version() {
        let v11 = Version::HTTP_11;
        let ok = StatusCode::OK;
        let d = |status, head, len, version| decide(status, head, len, version, true);
        assert_eq!(d(ok, false, Some(5), v11).framing, Framing::Length(5));
        assert_eq!(d(ok, false, None, v11).framing, Framing::Chunked);
        let old = d(ok, false, None, Version::HTTP_10);
        assert_eq!(old.framing, Framing::UntilClose);
        assert!(
            !old.keep_alive,
            "a body ended by the close ends the connection"
        );
        let head = d(ok, true, Some(5), v11);
        assert_eq!((head.framing, head.send_body), (Framing::Length(5), false));
        assert_eq!(d(ok, true, None, v11).framing, Framing::None);
        for status in [
            StatusCode::NOT_MODIFIED,
            StatusCode::NO_CONTENT,
            StatusCode::CONTINUE,
        ] {
            let none = d(status, false, Some(5), v11);
            assert_eq!(
                (none.framing, none.send_body),
                (Framing::None, false),
                "{status}"
            );
        }
    }

    #[test]
    fn a_head_never_carries_two_framings_whatever_the_handler_said() {
        let mut headers = HeaderMap::new();
        headers.insert("content-length", HeaderValue::from_static("99"));
        headers.insert("transfer-encoding", HeaderValue::from_static("chunked"));
        headers.insert("connection", HeaderValue::from_static("keep-alive"));
        headers.insert("content-range", HeaderValue::from_static("bytes 0-6/9"));
        let decision = decide(
            StatusCode::PARTIAL_CONTENT,
            false,
            Some(7),
            Version::HTTP_11,
            false,
        );
        let text = head_text(
            StatusCode::PARTIAL_CONTENT,
            &headers,
            decision,
            Version::HTTP_11,
        );
        assert!(
            text.starts_with("HTTP/1.1 206 Partial Content\r\netag: \"x\"\r\n"),
            "{text}"
        );
        let lower = text.to_ascii_lowercase();
        assert_eq!(lower.matches("content-length").count(), 1, "{text}");
        assert!(lower.contains("\r\ncontent-length: 7\r\n"), "{text}");
        assert!(!lower.contains("transfer-encoding"), "{text}");
        assert!(
            text.contains("\r\ncontent-range: bytes 0-6/9\r\n"),
            "{text}"
        );
        assert!(text.contains("\r\nx-request-id: r-1\r\n"), "{text}");
        assert_eq!(lower.matches("connection").count(), 1, "{text}");
        assert!(text.contains("\r\nconnection: close\r\n"), "{text}");
        assert!(text.ends_with("\r\n\r\n"), "{text}");
        let date = text
            .lines()
            .find_map(|l| l.strip_prefix("date: "))
            .expect("date");
        assert!(httpdate::parse_http_date(date).is_ok(), "{date}");

        let chunked = decide(StatusCode::OK, false, None, Version::HTTP_11, true);
        let text = head_text(StatusCode::OK, &headers, chunked, Version::HTTP_11);
        assert!(
            !text.to_ascii_lowercase().contains("content-length"),
            "{text}"
        );
        assert!(text.contains("transfer-encoding: chunked\r\n"), "{text}");

        let not_modified = decide(
            StatusCode::NOT_MODIFIED,
            false,
            Some(3),
            Version::HTTP_10,
            true,
        );
        let text = head_text(
            StatusCode::NOT_MODIFIED,
            &HeaderMap::new(),
            not_modified,
            Version::HTTP_10,
        );
        assert!(!text.contains("content-length"), "{text}");
        assert!(text.contains("\r\nconnection: keep-alive\r\n"), "{text}");
    }
}
