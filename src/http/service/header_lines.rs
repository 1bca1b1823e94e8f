//! Header lines as bytes: `name: value\r\n`, appended to a buffer.
//!
//! A leaf shared by the file answers (which format their lines once per file version) and
//! the HTTP/1.1 head writer, so neither depends on the other.

use axum::http::HeaderMap;
use bytes::{BufMut, BytesMut};

/// Appends one header line, `name: value\r\n`.
pub(crate) fn put_header(out: &mut BytesMut, name: &str, value: &[u8]) {
    out.put_slice(name.as_bytes());
    out.put_slice(b": ");
    out.put_slice(value);
    out.put_slice(b"\r\n");
}

/// Appends every header of `headers` as a line.
pub(crate) fn put_headers(out: &mut BytesMut, headers: &HeaderMap) {
    for (name, value) in headers {
        put_header(out, name.as_str(), value.as_bytes());
    }
}
