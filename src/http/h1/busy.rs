//! The answer to a connection over `max_connections`: a 503 with `Retry-After`, framed by
//! the same head writer as every other answer, then a staged close.

use std::time::Duration;

use axum::http::{HeaderValue, StatusCode, Version, header};
use bytes::BytesMut;
use tokio::io::AsyncWriteExt;
use tokio::net::TcpStream;

use super::conn::staged_close;
use super::framing::{self, ResponseHead};
use crate::http::service::{Answer, Payload, RequestId};

/// Seconds an over-capacity client is told to wait.
pub(crate) const BUSY_RETRY_AFTER_SECS: u32 = 1;

/// The bytes of the over-capacity answer.
pub(crate) fn busy_response() -> BytesMut {
    let mut answer = Answer::json_error(StatusCode::SERVICE_UNAVAILABLE, "too many connections");
    answer.headers.insert(
        header::RETRY_AFTER,
        HeaderValue::from(BUSY_RETRY_AFTER_SECS),
    );
    let Payload::Bytes(body) = answer.payload else {
        return BytesMut::new();
    };
    let mut out = BytesMut::new();
    let decision = framing::decide(
        answer.status,
        false,
        Some(body.len() as u64),
        Version::HTTP_11,
        false,
    );
    framing::write_head(
        &mut out,
        &ResponseHead {
            status: answer.status,
            lines: &answer.lines,
            headers: &answer.headers,
            decision,
            version: Version::HTTP_11,
            request_id: &RequestId::next(),
            at: std::time::Instant::now(),
        },
    );
    out.extend_from_slice(&body);
    out
}

/// Answers a connection over the cap with 503 and closes it: the answer is written at
/// once, then the request (whatever the client sent) is drained briefly, so the close
/// does not reset the answer away.
pub(crate) async fn refuse_over_cap(mut stream: TcpStream) {
    let answer = busy_response();
    let written = tokio::time::timeout(Duration::from_secs(1), stream.write_all(&answer)).await;
    if !matches!(written, Ok(Ok(()))) {
        return;
    }
    staged_close(&mut stream, &mut BytesMut::new(), 64 * 1024).await;
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_busy_answer_declares_exactly_its_body() {
        let bytes = busy_response();
        let text = String::from_utf8(bytes.to_vec()).expect("ascii");
        let (head, body) = text.split_once("\r\n\r\n").expect("head and body");
        assert!(
            head.starts_with("HTTP/1.1 503 Service Unavailable\r\n"),
            "{head}"
        );
        assert!(head.contains("\r\nretry-after: 1\r\n"), "{head}");
        assert!(head.contains("\r\nconnection: close"), "{head}");
        let length: usize = head
            .lines()
            .find_map(|l| l.strip_prefix("content-length: "))
            .expect("length")
            .parse()
            .expect("number");
        assert_eq!(length, body.len());
        assert_eq!(body, r#"{"error":"too many connections"}"#);
    }
}
