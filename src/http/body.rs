//! Response bodies: in-memory bytes, slices of an open file, or a framework body.
//!
//! A file answer is a list of [`Segment`]s: a range is one file segment, a multipart
//! answer alternates part headers and file segments. The connection sends file segments
//! with `sendfile(2)` (see [`super::conn`]); only when a file answer has to become an axum
//! [`Body`] (the router's own track route) are they read with positional reads on the
//! blocking pool, so the file offset is never shared state.
//!
//! A file that shrinks while it is being sent (truncated, or rewritten in place) fails the
//! transfer instead of padding or hanging: the connection is aborted, so the client sees a
//! short, failed transfer rather than a wrong body with a success status.

use std::collections::VecDeque;
use std::fs::File;
use std::io;
use std::os::unix::fs::FileExt;
use std::sync::Arc;

use axum::body::Body;
use bytes::Bytes;

/// Bytes read per blocking-pool hop.
pub const CHUNK: usize = 256 * 1024;

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
    pub fn len(&self) -> u64 {
        match self {
            Segment::Bytes(b) => b.len() as u64,
            Segment::File { len, .. } => *len,
        }
    }

    /// Whether the segment contributes nothing.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

/// What follows a response head.
pub enum Payload {
    /// Nothing.
    Empty,
    /// Bytes already in memory.
    Bytes(Bytes),
    /// Slices of an open file and in-memory parts, in order.
    File {
        /// The file, opened (and confined) before the head was decided.
        file: Arc<File>,
        /// What to send.
        segments: Vec<Segment>,
        /// The file's identity when it was opened: a transfer that finds it changed is
        /// aborted.
        opened: super::filecache::Identity,
    },
    /// A body produced by the router.
    Body(Body),
}

impl Payload {
    /// The body's length when known before sending.
    pub fn exact_len(&self) -> Option<u64> {
        match self {
            Payload::Empty => Some(0),
            Payload::Bytes(bytes) => Some(bytes.len() as u64),
            Payload::File { segments, .. } => Some(segments.iter().map(Segment::len).sum()),
            Payload::Body(body) => http_body::Body::size_hint(body).exact(),
        }
    }

    /// The payload as an axum body.
    pub fn into_body(self) -> Body {
        match self {
            Payload::Empty => Body::empty(),
            Payload::Bytes(bytes) => Body::from(bytes),
            Payload::File { file, segments, .. } => segments_body(file, segments),
            Payload::Body(body) => body,
        }
    }
}

impl std::fmt::Debug for Payload {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Payload::Empty => f.write_str("Empty"),
            Payload::Bytes(bytes) => write!(f, "Bytes({})", bytes.len()),
            Payload::File { segments, .. } => write!(f, "File({segments:?})"),
            Payload::Body(_) => f.write_str("Body"),
        }
    }
}

/// A streaming body over `segments` of `file`.
pub fn segments_body(file: Arc<File>, segments: Vec<Segment>) -> Body {
    let state = (file, VecDeque::from(segments));
    let stream = futures_util::stream::unfold(state, |(file, mut queue)| async move {
        let segment = queue.pop_front()?;
        match segment {
            Segment::Bytes(bytes) => Some((Ok(bytes), (file, queue))),
            Segment::File { offset, len } => {
                let want = usize::try_from(len).unwrap_or(usize::MAX).min(CHUNK);
                let reader = Arc::clone(&file);
                let read =
                    tokio::task::spawn_blocking(move || read_chunk(&reader, offset, want)).await;
                let chunk = match read {
                    Ok(Ok(chunk)) => chunk,
                    Ok(Err(err)) => return Some((Err(err), (file, VecDeque::new()))),
                    Err(join) => {
                        return Some((Err(io::Error::other(join)), (file, VecDeque::new())));
                    }
                };
                let got = chunk.len() as u64;
                if got < len {
                    queue.push_front(Segment::File {
                        offset: offset + got,
                        len: len - got,
                    });
                }
                Some((Ok(chunk), (file, queue)))
            }
        }
    });
    Body::from_stream(stream)
}

/// Reads exactly `want` bytes at `offset`, or fails if the file ends first.
pub fn read_chunk(file: &File, offset: u64, want: usize) -> io::Result<Bytes> {
    let mut buf = vec![0u8; want];
    let mut filled = 0;
    while filled < want {
        match file.read_at(&mut buf[filled..], offset + filled as u64) {
            Ok(0) => {
                return Err(io::Error::new(
                    io::ErrorKind::UnexpectedEof,
                    "file shrank while being sent",
                ));
            }
            Ok(n) => filled += n,
            Err(err) if err.kind() == io::ErrorKind::Interrupted => {}
            Err(err) => return Err(err),
        }
    }
    Ok(Bytes::from(buf))
}
