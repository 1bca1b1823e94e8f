//! Serving one resolved file: conditional requests, ranges, HEAD, MIME, offload.
//!
//! A hot file is answered on the event loop from the file cache ([`from_cache`]: a copy in
//! memory or an open descriptor, proven current by a `stat` begun after the request was
//! read, which one `stat` per loop turn gives a hot file, or by a drain of inotify begun
//! after it, one per loop turn for every watched file: [`inotify`]). Otherwise everything
//! that touches the disk (confining the path, opening, `fstat`, reading a small body)
//! happens in one hop to the blocking pool in [`prepare`]. The decisions in between are
//! the pure functions of [`conditional`] and [`range`]; the answer's header lines are
//! formatted once per file version ([`facts`]). Large bodies are sent from the already-open
//! file (see [`crate::http::h1`]), so a file replaced by rename mid-stream keeps sending the
//! version that was opened.
//!
//! Submodules: [`request`] (what is read from the request), [`conditional`] and [`range`]
//! (RFC 9110 decisions), [`facts`] (header lines per file version), [`cache`] (hot files in memory or open), [`inotify`] (kernel
//! notification that they did not change), and the offload headers.

pub(crate) mod cache;
pub mod conditional;
pub(crate) mod facts;
pub(crate) mod inotify;
mod offload;
pub mod range;
pub(crate) mod request;

use std::fs::File;
use std::io;
use std::os::unix::fs::FileExt;
use std::sync::Arc;

use axum::http::{HeaderMap, HeaderValue, StatusCode, header};
use bytes::{BufMut, Bytes, BytesMut};

use self::cache::{CachedFile, Content, FileCache};
use self::conditional::{Verdict, evaluate};
use self::facts::FileFacts;
use self::range::{RangeDecision, decide};
use self::request::FileRequest;
use super::error::ApiError;
use super::service::{Answer, FileBody, Headers, Pacing, Payload, Segment};
use crate::config::ServeMode;
use crate::http::service::Identity;
use crate::http::service::header_lines::put_headers;
use crate::media::{MediaFile, MediaRoots};

/// Bodies up to this size are read in the same blocking hop that opens the file.
pub(crate) const INLINE_READ_MAX: u64 = 128 * 1024;

/// Settings of the file server, taken from the config once.
pub(crate) struct FileSettings {
    /// Where the files may be.
    pub(crate) roots: MediaRoots,
    /// Direct or offloaded.
    pub(crate) mode: ServeMode,
    /// `Cache-Control` value.
    pub(crate) cache_control: HeaderValue,
    /// Ranges beyond which the whole file is sent.
    pub(crate) max_ranges: usize,
    /// nginx internal location for x-accel-redirect.
    pub(crate) accel_location: String,
    /// Small hot files in memory.
    pub(crate) cache: FileCache,
    /// How fast file bodies leave (`rate_bytes_per_sec` after `rate_after_bytes`).
    pub(crate) pacing: Option<Pacing>,
}

/// Where the bytes of an answer come from.
enum Source {
    /// The whole file, in memory.
    Memory(Bytes),
    /// An open file, and what it was when opened; `inline`: small bodies may be read now
    /// (only on the blocking pool, never on the event loop).
    Disk {
        file: Arc<File>,
        opened: Identity,
        inline: bool,
    },
}

/// The hot path: answers from the file cache (a copy in memory or an open descriptor) when
/// it is still the file on disk. Runs on the event loop (at most one `stat`, no blocking-
/// pool hop); `None` means "open it".
///
/// The answer is prepared first, then proven current. For a hot file the proof waits for
/// one turn of the loop, so the loop's other ready connections read their requests before
/// the `stat` (or the inotify drain) is made: one check then serves them all (see
/// [`cache`]). The wait ends after the loop's next poll of its sockets, so it costs the
/// request a turn of the loop, not a clock; and because every answer of the turn is ready
/// before it, the answers leave back to back after it, where a client's thread wakes once
/// for several of them instead of once for each.
pub(crate) async fn from_cache(
    settings: &FileSettings,
    id: &str,
    raw_path: &str,
    request: &FileRequest,
) -> Option<Result<Answer, ApiError>> {
    let read_at = request.read_at.unwrap_or_else(std::time::Instant::now);
    let cached = settings.cache.get(raw_path)?;
    let answer = match &cached.content {
        Content::Memory(bytes) => {
            let source = Source::Memory(bytes.clone());
            respond(settings, id, &cached.facts, source, request)
        }
        Content::Open(file) => {
            let source = Source::Disk {
                file: Arc::clone(file),
                opened: cached.identity,
                inline: false,
            };
            respond(settings, id, &cached.facts, source, request)
        }
        // The front server evaluates ranges and conditions itself.
        Content::Offload(variants) => Ok(Answer::new(
            StatusCode::OK,
            variants[usize::from(request.download)].clone(),
            Payload::Empty,
        )),
    };
    if settings.cache.worth_waiting(&cached, read_at) {
        tokio::task::yield_now().await;
    }
    // A stale copy's answer is dropped unsent: the file is opened again.
    settings
        .cache
        .is_fresh(raw_path, &cached, read_at)
        .then_some(answer)
}

/// The answer to `request` from a copy of a cached file's facts and bytes (see
/// [`crate::http::hot`]); whether the copy is current is the caller's to prove.
pub(crate) fn from_copy(
    settings: &FileSettings,
    id: &str,
    facts: &FileFacts,
    bytes: Bytes,
    request: &FileRequest,
) -> Result<Answer, ApiError> {
    respond(settings, id, facts, Source::Memory(bytes), request)
}

/// Opens and evaluates the file for the request, on the blocking pool.
pub(crate) async fn open_and_answer(
    settings: Arc<FileSettings>,
    id: String,
    raw_path: String,
    request: FileRequest,
) -> Result<Answer, ApiError> {
    let task_id = id.clone();
    tokio::task::spawn_blocking(move || prepare(&settings, &task_id, &raw_path, &request))
        .await
        .map_err(|join| ApiError::Io {
            id,
            source: io::Error::other(join),
        })?
}

/// The synchronous part: confine, open, stat, decide, and read a small body (keeping it
/// in the file cache when it fits).
pub(crate) fn prepare(
    settings: &FileSettings,
    id: &str,
    raw_path: &str,
    request: &FileRequest,
) -> Result<Answer, ApiError> {
    let media = settings
        .roots
        .open(raw_path)
        .map_err(|source| ApiError::Media {
            id: id.to_string(),
            source,
        })?;
    let size = media.metadata.len();
    let modified = media.metadata.modified().unwrap_or(std::time::UNIX_EPOCH);
    let facts = FileFacts::new(&media.path, size, modified, &settings.cache_control);
    if settings.mode != ServeMode::Direct {
        let variant = |download: bool| {
            let headers =
                offload::headers(settings, &media, download).map_err(|source| ApiError::Io {
                    id: id.to_string(),
                    source,
                })?;
            let mut lines = BytesMut::new();
            put_headers(&mut lines, &headers);
            Ok::<Bytes, ApiError>(lines.freeze())
        };
        let variants = [variant(false)?, variant(true)?];
        let lines = variants[usize::from(request.download)].clone();
        // The next request for this file answers without the blocking-pool hop, the open
        // and the confinement checks, after the same one `stat` as a hit in direct mode.
        settings.cache.insert(
            raw_path,
            CachedFile::new(Content::Offload(variants), &media.metadata, facts),
        );
        return Ok(Answer::new(StatusCode::OK, lines, Payload::Empty));
    }
    if settings.cache.admits(size)
        && let Some(bytes) = read_whole(&media)
    {
        let content = Content::Memory(bytes.clone());
        let cached = settings
            .cache
            .insert(raw_path, CachedFile::new(content, &media.metadata, facts));
        return respond(settings, id, &cached.facts, Source::Memory(bytes), request);
    }
    let opened = Identity::of(&media.metadata);
    let file = Arc::new(media.file);
    let source = Source::Disk {
        file: Arc::clone(&file),
        opened,
        inline: true,
    };
    if settings.cache.keeps_open() {
        let content = Content::Open(file);
        let cached = settings
            .cache
            .insert(raw_path, CachedFile::new(content, &media.metadata, facts));
        return respond(settings, id, &cached.facts, source, request);
    }
    respond(settings, id, &facts, source, request)
}

/// Reads the whole file if it did not change while being read (else `None`: stream it).
fn read_whole(media: &MediaFile) -> Option<Bytes> {
    let size = usize::try_from(media.metadata.len()).ok()?;
    let bytes = read_chunk(&media.file, 0, size).ok()?;
    let after = media.file.metadata().ok()?;
    (Identity::of(&after) == Identity::of(&media.metadata)).then_some(bytes)
}

/// Builds the answer: conditional requests, ranges, headers, body.
fn respond(
    settings: &FileSettings,
    id: &str,
    facts: &FileFacts,
    source: Source,
    request: &FileRequest,
) -> Result<Answer, ApiError> {
    let size = facts.size;
    let verdict = evaluate(&request.preconditions(), &facts.validators);
    match verdict {
        Verdict::NotModified => {
            return Ok(Answer::new(
                StatusCode::NOT_MODIFIED,
                facts.validator_lines.clone(),
                Payload::Empty,
            ));
        }
        Verdict::PreconditionFailed => {
            return Ok(Answer::json_error(
                StatusCode::PRECONDITION_FAILED,
                "precondition failed",
            ));
        }
        Verdict::Proceed | Verdict::IgnoreRange => {}
    }

    let decision = match (&request.range, verdict) {
        (Some(range), Verdict::Proceed) => decide(range, size, settings.max_ranges),
        _ => RangeDecision::Full,
    };
    let mut headers = HeaderMap::new();
    let (status, segments) = match decision {
        RangeDecision::Unsatisfiable => {
            let mut answer =
                Answer::json_error(StatusCode::RANGE_NOT_SATISFIABLE, "range not satisfiable");
            let value = HeaderValue::from_str(&format!("bytes */{size}"))
                .map_err(|e| internal(id, e.into()))?;
            answer.headers.insert(header::CONTENT_RANGE, value);
            return Ok(answer);
        }
        RangeDecision::Full => {
            // The hot path: no header to format, no segment list for an in-memory file.
            // HEAD keeps the body GET would send (never read from disk) so that the
            // head writer declares its length; the connection does not send it.
            let payload = match source {
                _ if size == 0 => Payload::Empty,
                Source::Memory(bytes) => Payload::Bytes(bytes),
                Source::Disk {
                    file,
                    opened,
                    inline,
                } => {
                    let whole = vec![Segment::File {
                        offset: 0,
                        len: size,
                    }];
                    let inline = inline && !request.head;
                    inline_or_stream(file, opened, whole, size, inline).map_err(|source| {
                        ApiError::Io {
                            id: id.to_string(),
                            source,
                        }
                    })?
                }
            };
            return Ok(Answer::new(
                StatusCode::OK,
                facts.lines(request.download).full.clone(),
                payload,
            ));
        }
        RangeDecision::Single(range) => {
            headers.insert(header::CONTENT_TYPE, HeaderValue::from_static(facts.mime));
            let value = format!("bytes {}-{}/{}", range.start, range.end - 1, size);
            headers.insert(
                header::CONTENT_RANGE,
                HeaderValue::from_str(&value).map_err(|e| internal(id, e.into()))?,
            );
            (
                StatusCode::PARTIAL_CONTENT,
                vec![Segment::File {
                    offset: range.start,
                    len: range.end - range.start,
                }],
            )
        }
        RangeDecision::Multi(ranges) => {
            let boundary = format!("musicd-{:016x}", rand::random::<u64>());
            let value = format!("multipart/byteranges; boundary={boundary}");
            headers.insert(
                header::CONTENT_TYPE,
                HeaderValue::from_str(&value).map_err(|e| internal(id, e.into()))?,
            );
            (
                StatusCode::PARTIAL_CONTENT,
                multipart(&ranges, size, facts.mime, &boundary),
            )
        }
    };
    let length: u64 = segments.iter().map(Segment::len).sum();
    let payload = if length == 0 {
        Payload::Empty
    } else {
        match source {
            Source::Memory(bytes) => Payload::Bytes(from_bytes(&bytes, segments)),
            Source::Disk {
                file,
                opened,
                inline,
            } => inline_or_stream(file, opened, segments, length, inline && !request.head)
                .map_err(|source| ApiError::Io {
                    id: id.to_string(),
                    source,
                })?,
        }
    };
    let mut answer = Answer::new(status, facts.lines(request.download).body.clone(), payload);
    answer.headers = Headers::from(headers);
    Ok(answer)
}

/// The body from an in-memory file: zero-copy slices for one part, one buffer for several.
fn from_bytes(file: &Bytes, segments: Vec<Segment>) -> Bytes {
    let slice = |offset: u64, len: u64| {
        let start = usize::try_from(offset)
            .unwrap_or(usize::MAX)
            .min(file.len());
        let end = start
            .saturating_add(usize::try_from(len).unwrap_or(usize::MAX))
            .min(file.len());
        file.slice(start..end)
    };
    if let [Segment::File { offset, len }] = segments.as_slice() {
        return slice(*offset, *len);
    }
    let total: u64 = segments.iter().map(Segment::len).sum();
    let mut out = BytesMut::with_capacity(usize::try_from(total).unwrap_or(0));
    for segment in segments {
        match segment {
            Segment::Bytes(bytes) => out.put(bytes),
            Segment::File { offset, len } => out.put(slice(offset, len)),
        }
    }
    out.freeze()
}

/// Small bodies are read now when `inline` (in the blocking hop that opened the file);
/// everything else is sent from the open file by the connection.
fn inline_or_stream(
    file: Arc<File>,
    opened: Identity,
    segments: Vec<Segment>,
    length: u64,
    inline: bool,
) -> std::io::Result<Payload> {
    if length > INLINE_READ_MAX || !inline {
        return Ok(Payload::File(Box::new(FileBody {
            file,
            segments,
            opened,
        })));
    }
    let mut out = BytesMut::with_capacity(length as usize);
    for segment in segments {
        match segment {
            Segment::Bytes(bytes) => out.put(bytes),
            Segment::File { offset, len } => out.put(read_chunk(&file, offset, len as usize)?),
        }
    }
    Ok(Payload::Bytes(out.freeze()))
}

/// The parts of a `multipart/byteranges` body.
fn multipart(
    ranges: &[std::ops::Range<u64>],
    size: u64,
    mime: &str,
    boundary: &str,
) -> Vec<Segment> {
    let mut segments = Vec::with_capacity(ranges.len() * 2 + 1);
    for range in ranges {
        let head = format!(
            "\r\n--{boundary}\r\nContent-Type: {mime}\r\nContent-Range: bytes {}-{}/{size}\r\n\r\n",
            range.start,
            range.end - 1
        );
        segments.push(Segment::Bytes(Bytes::from(head)));
        segments.push(Segment::File {
            offset: range.start,
            len: range.end - range.start,
        });
    }
    segments.push(Segment::Bytes(Bytes::from(format!(
        "\r\n--{boundary}--\r\n"
    ))));
    segments
}

/// Reads exactly `want` bytes at `offset`, or fails if the file ends first.
pub(crate) fn read_chunk(file: &File, offset: u64, want: usize) -> io::Result<Bytes> {
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

fn internal(id: &str, err: axum::http::Error) -> ApiError {
    ApiError::Io {
        id: id.to_string(),
        source: std::io::Error::other(err),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    use proptest::prelude::*;

    fn settings() -> FileSettings {
        FileSettings {
            roots: MediaRoots::new(Vec::new()),
            mode: ServeMode::Direct,
            cache_control: HeaderValue::from_static("public"),
            max_ranges: 16,
            accel_location: "/internal".into(),
            cache: FileCache::new(0, 0, 0, 0),
            pacing: None,
        }
    }

    /// Status, headers (lines and map) and the body bytes an answer would send.
    fn flatten(answer: Answer) -> (StatusCode, HeaderMap, Bytes) {
        let mut headers = HeaderMap::new();
        for line in answer.lines.split(|b| *b == b'\n') {
            let line = line.strip_suffix(b"\r").unwrap_or(line);
            if let Some(colon) = line.iter().position(|b| *b == b':') {
                let name = header::HeaderName::from_bytes(&line[..colon]).expect("name");
                let value = HeaderValue::from_bytes(line[colon + 1..].trim_ascii()).expect("value");
                headers.append(name, value);
            }
        }
        headers.extend(answer.headers.into_map());
        let body = match answer.payload {
            Payload::Empty => Bytes::new(),
            Payload::Bytes(bytes) => bytes,
            Payload::File(body) => {
                let mut out = BytesMut::new();
                for segment in body.segments {
                    match segment {
                        Segment::Bytes(bytes) => out.put(bytes),
                        Segment::File { offset, len } => {
                            out.put(read_chunk(&body.file, offset, len as usize).expect("read"))
                        }
                    }
                }
                out.freeze()
            }
            Payload::Body(_) => panic!("file answers have no router body"),
        };
        (answer.status, headers, body)
    }

    fn content_range(text: &str) -> (usize, usize, usize) {
        let rest = text.strip_prefix("bytes ").expect("bytes unit");
        let (range, size) = rest.split_once('/').expect("size");
        let (first, last) = range.split_once('-').expect("range");
        (
            first.parse().expect("first"),
            last.parse().expect("last"),
            size.parse().expect("size"),
        )
    }

    proptest! {
        /// Whatever the Range header, a 206 carries exactly the file's bytes at the offsets
        /// its Content-Range headers name, a 200 the whole file, a 416 nothing.
        #[test]
        fn every_range_answer_has_exactly_the_bytes_of_the_file_slice(
            size in 0usize..3000,
            specs in prop::collection::vec((0u64..4000, 0u64..4000, 0u8..3), 1..6),
        ) {
            let file: Bytes = (0..size).map(|i| (i * 7 % 251) as u8).collect::<Vec<_>>().into();
            let header = format!("bytes={}", specs.iter().map(|&(a, b, kind)| match kind {
                0 => format!("{}-{}", a.min(b), a.max(b)),
                1 => format!("{a}-"),
                _ => format!("-{b}"),
            }).collect::<Vec<_>>().join(", "));
            let facts = FileFacts::new(std::path::Path::new("/m/x.mp3"), size as u64, std::time::UNIX_EPOCH, &HeaderValue::from_static("public"));
            let request = FileRequest { range: Some(header.as_str().into()), ..FileRequest::default() };
            let answer = respond(&settings(), "id", &facts, Source::Memory(file.clone()), &request)
                .expect("an answer");
            let (status, headers, body) = flatten(answer);
            prop_assert!(headers.get(header::CONTENT_LENGTH).is_none(), "framing is the head writer's");
            match status {
                StatusCode::OK => prop_assert_eq!(&body, &file),
                StatusCode::RANGE_NOT_SATISFIABLE => {
                    let expected = format!("bytes */{size}");
                    prop_assert_eq!(headers[header::CONTENT_RANGE].to_str().expect("ascii"), expected.as_str());
                }
                StatusCode::PARTIAL_CONTENT => {
                    let kind = headers[header::CONTENT_TYPE].to_str().expect("ascii").to_string();
                    if let Some(boundary) = kind.strip_prefix("multipart/byteranges; boundary=") {
                        let text = body.to_vec();
                        let delimiter = format!("\r\n--{boundary}");
                        let mut parts = 0;
                        let mut rest = text.as_slice();
                        while let Some(at) = find(rest, delimiter.as_bytes()) {
                            rest = &rest[at + delimiter.len()..];
                            if rest.starts_with(b"--") {
                                break;
                            }
                            let head_end = find(rest, b"\r\n\r\n").expect("part head");
                            let head = std::str::from_utf8(&rest[..head_end]).expect("ascii");
                            let range_line = head.lines().find_map(|l| l.strip_prefix("Content-Range: ")).expect("part range");
                            let (first, last, total) = content_range(range_line);
                            prop_assert_eq!(total, size);
                            let data = &rest[head_end + 4..head_end + 4 + (last - first + 1)];
                            prop_assert_eq!(data, &file[first..=last]);
                            rest = &rest[head_end + 4 + (last - first + 1)..];
                            parts += 1;
                        }
                        prop_assert!(parts >= 2, "{header}");
                    } else {
                        let (first, last, total) = content_range(headers[header::CONTENT_RANGE].to_str().expect("ascii"));
                        prop_assert_eq!(total, size);
                        prop_assert_eq!(&body[..], &file[first..=last]);
                    }
                }
                other => prop_assert!(false, "unexpected status {other} for {header}"),
            }
        }
    }

    fn find(haystack: &[u8], needle: &[u8]) -> Option<usize> {
        haystack.windows(needle.len()).position(|w| w == needle)
    }
}
