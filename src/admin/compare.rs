//! `musicctl compare`: the cut-over check. The same track URLs are fetched from the
//! running musicd and from another server with the same URL scheme (the old Node
//! service), and each answer is compared: status, length, content type and a SHA-256 of
//! the body. The old service's habit of answering an unknown id with `200 "no file"` is
//! flagged for what it is.

use std::io::{Read, Write};
use std::net::{TcpStream, ToSocketAddrs};
use std::time::Duration;

use serde::Serialize;
use sha2::{Digest, Sha256};

use super::AdminError;

/// One server's answer to one URL.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Fetched {
    /// The status, or 0 when there was no answer.
    pub status: u16,
    /// Body bytes.
    pub length: u64,
    /// `Content-Type`, when sent.
    pub content_type: Option<String>,
    /// SHA-256 of the body, hex.
    pub sha256: String,
    /// A 200 whose body is the old service's `no file`.
    pub no_file: bool,
    /// Why there was no answer.
    pub error: Option<String>,
}

/// The comparison of one track.
#[derive(Debug, Clone, Serialize)]
pub struct Comparison {
    /// The track id.
    pub id: String,
    /// musicd's answer.
    pub musicd: Fetched,
    /// The other server's.
    pub other: Fetched,
    /// Status, length, type and body all agree.
    pub agree: bool,
    /// What differs.
    pub differences: Vec<String>,
}

/// Compares the answers of `musicd` and `other` (both `http://host:port`) for `path`.
pub fn compare(musicd: &str, other: &str, id: &str, path: &str) -> Comparison {
    let ours = fetch(musicd, path);
    let theirs = fetch(other, path);
    let mut differences = Vec::new();
    if ours.status != theirs.status {
        differences.push(format!("status {} vs {}", ours.status, theirs.status));
    }
    if theirs.no_file {
        differences.push("the other server answered 200 \"no file\"".into());
    }
    if ours.status == theirs.status && ours.status / 100 == 2 {
        if ours.length != theirs.length {
            differences.push(format!("length {} vs {}", ours.length, theirs.length));
        }
        if ours.sha256 != theirs.sha256 {
            differences.push("body differs".into());
        }
        if ours.content_type != theirs.content_type {
            differences.push(format!(
                "content type {} vs {}",
                ours.content_type.as_deref().unwrap_or("-"),
                theirs.content_type.as_deref().unwrap_or("-")
            ));
        }
    }
    Comparison {
        id: id.to_string(),
        agree: differences.is_empty(),
        musicd: ours,
        other: theirs,
        differences,
    }
}

/// GET `base` + `path` with a plain HTTP/1.1 client (one request per connection).
pub fn fetch(base: &str, path: &str) -> Fetched {
    match get(base, path) {
        Ok((status, content_type, body)) => Fetched {
            status,
            length: body.len() as u64,
            no_file: status == 200 && body.trim_ascii() == b"no file",
            sha256: hex(&Sha256::digest(&body)),
            content_type,
            error: None,
        },
        Err(error) => Fetched {
            status: 0,
            length: 0,
            content_type: None,
            sha256: String::new(),
            no_file: false,
            error: Some(error.to_string()),
        },
    }
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

fn get(base: &str, path: &str) -> Result<(u16, Option<String>, Vec<u8>), AdminError> {
    let fail = |message: String| AdminError::Usage(format!("{base}{path}: {message}"));
    let authority = base
        .strip_prefix("http://")
        .ok_or_else(|| fail("only http:// URLs can be compared".into()))?
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
    let request = format!("GET {path} HTTP/1.1\r\nHost: {authority}\r\nConnection: close\r\n\r\n");
    stream
        .write_all(request.as_bytes())
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
    let status = response.code.unwrap_or(0);
    let header = |name: &str| {
        response
            .headers
            .iter()
            .find(|h| h.name.eq_ignore_ascii_case(name))
            .map(|h| String::from_utf8_lossy(h.value).trim().to_string())
    };
    let content_type = header("content-type");
    let chunked = header("transfer-encoding").is_some_and(|v| v.eq_ignore_ascii_case("chunked"));
    let body = &raw[head..];
    let body = if chunked {
        dechunk(body).ok_or_else(|| fail("a chunked body that does not decode".into()))?
    } else {
        match header("content-length").and_then(|v| v.parse::<usize>().ok()) {
            Some(length) if body.len() >= length => body[..length].to_vec(),
            Some(length) => {
                return Err(fail(format!(
                    "body cut at {} of {length} bytes",
                    body.len()
                )));
            }
            None => body.to_vec(),
        }
    };
    Ok((status, content_type, body))
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
