//! A small blocking HTTP/1.1 client for the commands that talk to HTTP servers (`purge`
//! banning in varnish, `compare` asking two services): one request per connection, the
//! whole answer read, Content-Length or chunked.

use std::io::{Read, Write};
use std::net::{TcpStream, ToSocketAddrs};
use std::time::Duration;

use super::AdminError;

/// A whole answer.
pub struct Answer {
    /// The status.
    pub status: u16,
    /// `Content-Type`, when sent.
    pub content_type: Option<String>,
    /// The body, de-chunked.
    pub body: Vec<u8>,
}

/// Sends `method path` with `headers` (`name: value` lines) to `base` (`http://host:port`).
pub fn request(
    base: &str,
    method: &str,
    path: &str,
    headers: &[(&str, &str)],
) -> Result<Answer, AdminError> {
    let fail = |message: String| AdminError::Usage(format!("{method} {base}{path}: {message}"));
    let authority = base
        .strip_prefix("http://")
        .ok_or_else(|| fail("only http:// URLs are supported".into()))?
        .trim_end_matches('/');
    let address = authority
        .to_socket_addrs()
        .map_err(|e| fail(e.to_string()))?
        .next()
        .ok_or_else(|| fail("no address".into()))?;
    let mut stream = TcpStream::connect_timeout(&address, Duration::from_secs(5))
        .map_err(|e| fail(e.to_string()))?;
    stream
        .set_read_timeout(Some(Duration::from_secs(30)))
        .map_err(|e| fail(e.to_string()))?;
    let mut text = format!("{method} {path} HTTP/1.1\r\nHost: {authority}\r\n");
    for (name, value) in headers {
        text.push_str(&format!("{name}: {value}\r\n"));
    }
    text.push_str("Connection: close\r\n\r\n");
    stream
        .write_all(text.as_bytes())
        .map_err(|e| fail(e.to_string()))?;
    let mut raw = Vec::new();
    stream
        .read_to_end(&mut raw)
        .map_err(|e| fail(e.to_string()))?;
    let mut slots = [httparse::EMPTY_HEADER; 64];
    let mut response = httparse::Response::new(&mut slots);
    let head = match response.parse(&raw) {
        Ok(httparse::Status::Complete(len)) => len,
        _ => return Err(fail("not an HTTP response".into())),
    };
    let header = |name: &str| {
        response
            .headers
            .iter()
            .find(|h| h.name.eq_ignore_ascii_case(name))
            .map(|h| String::from_utf8_lossy(h.value).trim().to_string())
    };
    let chunked = header("transfer-encoding").is_some_and(|v| v.eq_ignore_ascii_case("chunked"));
    let rest = &raw[head..];
    let body = if chunked {
        dechunk(rest).ok_or_else(|| fail("a chunked body that does not decode".into()))?
    } else {
        match header("content-length").and_then(|v| v.parse::<usize>().ok()) {
            Some(length) if rest.len() >= length => rest[..length].to_vec(),
            Some(length) => {
                return Err(fail(format!(
                    "body cut at {} of {length} bytes",
                    rest.len()
                )));
            }
            None => rest.to_vec(),
        }
    };
    Ok(Answer {
        status: response.code.unwrap_or(0),
        content_type: header("content-type"),
        body,
    })
}

fn dechunk(mut bytes: &[u8]) -> Option<Vec<u8>> {
    let mut body = Vec::new();
    loop {
        let (used, size) = match httparse::parse_chunk_size(bytes).ok()? {
            httparse::Status::Complete(found) => found,
            httparse::Status::Partial => return None,
        };
        bytes = &bytes[used..];
        if size == 0 {
            return Some(body);
        }
        let size = usize::try_from(size).ok()?;
        body.extend_from_slice(bytes.get(..size)?);
        bytes = bytes.get(size + 2..)?;
    }
}
