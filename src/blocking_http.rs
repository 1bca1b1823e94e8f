//! The one small blocking HTTP/1.1 client, for whatever asks an HTTP server without a
//! runtime: `musicd status` and `musicctl health` probing `/readyz`, `purge` banning in
//! varnish, `compare` asking two services. One request per connection, the whole answer
//! read (Content-Length, chunked, or to the close), every step bounded by a timeout.

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream, ToSocketAddrs};
use std::time::Duration;

/// Why no answer came.
#[derive(Debug, thiserror::Error)]
#[error("{method} {url}: {message}")]
pub struct RequestError {
    method: String,
    url: String,
    message: String,
}

/// The usual bound on a request to a service of ours.
pub(crate) const TIMEOUT: Duration = Duration::from_secs(30);

/// A whole reply: the server's status, content type and body.
pub(crate) struct Reply {
    /// The status.
    pub(crate) status: u16,
    /// `Content-Type`, when sent.
    pub(crate) content_type: Option<String>,
    /// The body, de-chunked.
    pub(crate) body: Vec<u8>,
}

/// Sends `method path` with `headers` (`name: value` lines) to `base` (`http://host:port`),
/// bounded by [`TIMEOUT`].
pub(crate) fn request(
    base: &str,
    method: &str,
    path: &str,
    headers: &[(&str, &str)],
) -> Result<Reply, RequestError> {
    request_within(base, method, path, headers, TIMEOUT)
}

/// `GET path` from a listening address (an unspecified one, `0.0.0.0` or `::`, means this
/// machine's loopback), each step within `timeout`.
pub(crate) fn get_from(
    addr: SocketAddr,
    path: &str,
    timeout: Duration,
) -> Result<Reply, RequestError> {
    let mut addr = addr;
    if addr.ip().is_unspecified() {
        addr.set_ip(if addr.is_ipv4() {
            std::net::Ipv4Addr::LOCALHOST.into()
        } else {
            std::net::Ipv6Addr::LOCALHOST.into()
        });
    }
    request_within(&format!("http://{addr}"), "GET", path, &[], timeout)
}

/// [`request`] with each step (connect, write, read) bounded by `timeout`.
pub(crate) fn request_within(
    base: &str,
    method: &str,
    path: &str,
    headers: &[(&str, &str)],
    timeout: Duration,
) -> Result<Reply, RequestError> {
    let fail = |message: String| RequestError {
        method: method.to_string(),
        url: format!("{base}{path}"),
        message,
    };
    let authority = base
        .strip_prefix("http://")
        .ok_or_else(|| fail("only http:// URLs are supported".into()))?
        .trim_end_matches('/');
    let address = authority
        .to_socket_addrs()
        .map_err(|e| fail(e.to_string()))?
        .next()
        .ok_or_else(|| fail("no address".into()))?;
    let mut stream = TcpStream::connect_timeout(&address, timeout.min(Duration::from_secs(5)))
        .map_err(|e| fail(e.to_string()))?;
    stream
        .set_read_timeout(Some(timeout))
        .and_then(|()| stream.set_write_timeout(Some(timeout)))
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
    Ok(Reply {
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
