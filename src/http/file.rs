//! Serving one resolved file: conditional requests, ranges, HEAD, MIME, offload.
//!
//! A hot file is answered on the event loop from the file cache ([`from_cache`]: a copy in
//! memory or an open descriptor, one `stat` to prove it is current). Otherwise everything
//! that touches the disk (confining the path, opening, `fstat`, reading a small body)
//! happens in one hop to the blocking pool in [`prepare`]. The decisions in between are
//! the pure functions of [`super::conditional`] and [`super::range`]; the answer's header
//! lines are formatted once per file version ([`FileFacts`]). Large bodies are sent from
//! the already-open file (see [`super::conn`]), so a file replaced by rename mid-stream
//! keeps sending the version that was opened.

use std::fs::File;
use std::path::Path;
use std::sync::Arc;

use axum::http::{HeaderMap, HeaderValue, Method, Response, StatusCode, header};
use bytes::{BufMut, Bytes, BytesMut};
use percent_encoding::{AsciiSet, NON_ALPHANUMERIC, utf8_percent_encode};

use super::body::{Payload, Segment, read_chunk};
use super::conditional::{Preconditions, Validators, Verdict, evaluate};
use super::error::{ApiError, json_status};
use super::filecache::{CachedFile, Content, FileCache, Identity};
use super::mime::content_type;
use super::range::{RangeDecision, decide};
use super::wire::{put_header, put_headers};
use crate::config::ServeMode;
use crate::media::{MediaFile, MediaRoots};

/// Bodies up to this size are read in the same blocking hop that opens the file.
pub const INLINE_READ_MAX: u64 = 128 * 1024;

/// What [`prepare`] needs from the request, owned so it can cross to the blocking pool.
#[derive(Debug, Clone, Default)]
pub struct FileRequest {
    /// HEAD: headers only.
    pub head: bool,
    /// `Range`.
    pub range: Option<String>,
    /// `If-Match`.
    pub if_match: Option<String>,
    /// `If-None-Match`.
    pub if_none_match: Option<String>,
    /// `If-Modified-Since`.
    pub if_modified_since: Option<String>,
    /// `If-Unmodified-Since`.
    pub if_unmodified_since: Option<String>,
    /// `If-Range`.
    pub if_range: Option<String>,
}

impl FileRequest {
    /// Copies the relevant headers out of a request.
    pub fn from_parts(method: &Method, headers: &HeaderMap) -> FileRequest {
        let get = |name: header::HeaderName| {
            headers
                .get(name)
                .and_then(|v| v.to_str().ok())
                .map(str::to_string)
        };
        FileRequest {
            head: method == Method::HEAD,
            range: get(header::RANGE),
            if_match: get(header::IF_MATCH),
            if_none_match: get(header::IF_NONE_MATCH),
            if_modified_since: get(header::IF_MODIFIED_SINCE),
            if_unmodified_since: get(header::IF_UNMODIFIED_SINCE),
            if_range: get(header::IF_RANGE),
        }
    }

    fn preconditions(&self) -> Preconditions<'_> {
        Preconditions {
            if_match: self.if_match.as_deref(),
            if_none_match: self.if_none_match.as_deref(),
            if_modified_since: self.if_modified_since.as_deref(),
            if_unmodified_since: self.if_unmodified_since.as_deref(),
            if_range: self.if_range.as_deref(),
        }
    }
}

/// Settings of the file server, taken from the config once.
pub struct FileSettings {
    /// Where the files may be.
    pub roots: MediaRoots,
    /// Direct or offloaded.
    pub mode: ServeMode,
    /// `Cache-Control` value.
    pub cache_control: HeaderValue,
    /// Ranges beyond which the whole file is sent.
    pub max_ranges: usize,
    /// nginx internal location for x-accel-redirect.
    pub accel_location: String,
    /// Small hot files in memory.
    pub cache: FileCache,
    /// Large bodies with `sendfile(2)` rather than copied (see `zero_copy` in the config).
    pub zero_copy: bool,
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
/// it is still the file on disk. Runs on the event loop (one `stat`, no blocking-pool
/// hop); `None` means "open it".
pub fn from_cache(
    settings: &FileSettings,
    id: &str,
    raw_path: &str,
    request: &FileRequest,
) -> Option<Result<Answer, ApiError>> {
    let cached = settings.cache.get_fresh(raw_path)?;
    let source = match &cached.content {
        Content::Memory(bytes) => Source::Memory(bytes.clone()),
        Content::Open(file) => Source::Disk {
            file: Arc::clone(file),
            opened: cached.identity,
            inline: false,
        },
        // The front server evaluates ranges and conditions itself.
        Content::Offload(lines) => {
            return Some(Ok(Answer {
                status: StatusCode::OK,
                lines: lines.clone(),
                headers: HeaderMap::new(),
                payload: Payload::Empty,
            }));
        }
    };
    Some(respond(settings, id, &cached.facts, source, request))
}

/// Opens and evaluates the file for the request, on the blocking pool.
pub async fn serve(
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
            source: std::io::Error::other(join),
        })?
}

/// The synchronous part: confine, open, stat, decide, and read a small body (keeping it
/// in the file cache when it fits).
pub fn prepare(
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
        let answer = Answer::from_response(offload(settings, &media));
        if answer.status == StatusCode::OK {
            // The next request for this file answers without the blocking-pool hop, the
            // open and the confinement checks, after the same one `stat` as a hit in
            // direct mode.
            let mut lines = BytesMut::new();
            put_headers(&mut lines, &answer.headers);
            let content = Content::Offload(lines.freeze());
            settings
                .cache
                .insert(raw_path, CachedFile::new(content, &media.metadata, facts));
        }
        return Ok(answer);
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

/// What every answer about one version of a file says, computed once per version (kept in
/// the file cache for hot files, so a hit formats no header at all).
#[derive(Debug, Clone)]
pub struct FileFacts {
    /// Size in bytes.
    pub size: u64,
    /// ETag and Last-Modified.
    pub validators: Validators,
    /// MIME type by extension.
    pub mime: &'static str,
    /// `etag`, `last-modified`, `cache-control` lines: what a 304 says.
    validator_lines: Bytes,
    /// The validator lines plus `accept-ranges` and `content-disposition`: what every
    /// answer with a body says.
    body_lines: Bytes,
    /// The body lines plus `content-type` and `content-length`: a whole 200, complete.
    full_lines: Bytes,
}

impl FileFacts {
    /// Facts of the file at `path` with this size and modification time, answered with
    /// this `Cache-Control`.
    pub fn new(
        path: &Path,
        size: u64,
        modified: std::time::SystemTime,
        cache_control: &HeaderValue,
    ) -> FileFacts {
        let validators = Validators::new(size, modified);
        let mime = content_type(path);
        let mut lines = BytesMut::with_capacity(320);
        let line = |lines: &mut BytesMut, name: &str, value: &[u8]| {
            put_header(lines, name, value);
            lines.len()
        };
        line(&mut lines, "etag", validators.etag.as_bytes());
        let last_modified = validators.last_modified_header();
        line(&mut lines, "last-modified", last_modified.as_bytes());
        let validator_len = line(&mut lines, "cache-control", cache_control.as_bytes());
        line(&mut lines, "accept-ranges", b"bytes");
        // `content_disposition` escapes everything outside visible ASCII.
        let disposition = content_disposition(path);
        let body_len = line(&mut lines, "content-disposition", disposition.as_bytes());
        line(&mut lines, "content-type", mime.as_bytes());
        line(&mut lines, "content-length", size.to_string().as_bytes());
        let full_lines = lines.freeze();
        FileFacts {
            size,
            validator_lines: full_lines.slice(..validator_len),
            body_lines: full_lines.slice(..body_len),
            full_lines,
            validators,
            mime,
        }
    }
}

/// A file answer: the status, header lines formatted once per file version, any further
/// headers (ranges), and the body. The connection writes the lines as they are.
#[derive(Debug)]
pub struct Answer {
    /// The status.
    pub status: StatusCode,
    /// Complete header lines (`name: value\r\n`), written first.
    pub lines: Bytes,
    /// Headers written after the lines.
    pub headers: HeaderMap,
    /// The body.
    pub payload: Payload,
}

impl Answer {
    /// An answer made from a framework response (errors, offload headers).
    pub fn from_response(response: Response<Payload>) -> Answer {
        let (parts, payload) = response.into_parts();
        Answer {
            status: parts.status,
            lines: Bytes::new(),
            headers: parts.headers,
            payload,
        }
    }

    /// The answer as an axum response (for the router's track route).
    pub fn into_response(self) -> Response<axum::body::Body> {
        let mut response = Response::new(self.payload.into_body());
        *response.status_mut() = self.status;
        let headers = response.headers_mut();
        for line in self.lines.split(|b| *b == b'\n') {
            let line = line.strip_suffix(b"\r").unwrap_or(line);
            let Some(colon) = line.iter().position(|b| *b == b':') else {
                continue;
            };
            let name = header::HeaderName::from_bytes(&line[..colon]);
            let value = HeaderValue::from_bytes(line[colon + 1..].trim_ascii_start());
            if let (Ok(name), Ok(value)) = (name, value) {
                headers.append(name, value);
            }
        }
        headers.extend(self.headers);
        response
    }
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
            return Ok(Answer {
                status: StatusCode::NOT_MODIFIED,
                lines: facts.validator_lines.clone(),
                headers: HeaderMap::new(),
                payload: Payload::Empty,
            });
        }
        Verdict::PreconditionFailed => {
            return Ok(Answer::from_response(
                json_status(StatusCode::PRECONDITION_FAILED, "precondition failed")
                    .map(Payload::Body),
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
                json_status(StatusCode::RANGE_NOT_SATISFIABLE, "range not satisfiable");
            if let Ok(value) = HeaderValue::from_str(&format!("bytes */{size}")) {
                answer.headers_mut().insert(header::CONTENT_RANGE, value);
            }
            return Ok(Answer::from_response(answer.map(Payload::Body)));
        }
        RangeDecision::Full => {
            // The hot path: no header to format, no segment list for an in-memory file.
            let payload = match source {
                _ if request.head || size == 0 => Payload::Empty,
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
                    inline_or_stream(file, opened, whole, size, inline).map_err(|source| {
                        ApiError::Io {
                            id: id.to_string(),
                            source,
                        }
                    })?
                }
            };
            return Ok(Answer {
                status: StatusCode::OK,
                lines: facts.full_lines.clone(),
                headers,
                payload,
            });
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
    headers.insert(header::CONTENT_LENGTH, HeaderValue::from(length));

    let payload = if request.head || length == 0 {
        Payload::Empty
    } else {
        match source {
            Source::Memory(bytes) => Payload::Bytes(from_bytes(&bytes, segments)),
            Source::Disk {
                file,
                opened,
                inline,
            } => inline_or_stream(file, opened, segments, length, inline).map_err(|source| {
                ApiError::Io {
                    id: id.to_string(),
                    source,
                }
            })?,
        }
    };
    Ok(Answer {
        status,
        lines: facts.body_lines.clone(),
        headers,
        payload,
    })
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
        return Ok(Payload::File {
            file,
            segments,
            opened,
        });
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

/// Characters left as they are in the offload URI: unreserved ones and `/`.
const OFFLOAD_KEEP: &AsciiSet = &NON_ALPHANUMERIC
    .remove(b'/')
    .remove(b'-')
    .remove(b'_')
    .remove(b'.')
    .remove(b'~');

/// An empty answer telling the front server which file to send.
fn offload(settings: &FileSettings, media: &MediaFile) -> Response<Payload> {
    let mut response = Response::builder()
        .header(header::CONTENT_TYPE, content_type(&media.path))
        .header(header::CACHE_CONTROL, settings.cache_control.clone())
        .header(
            header::CONTENT_DISPOSITION,
            content_disposition(&media.path),
        );
    response = match settings.mode {
        ServeMode::XSendfile => response.header("X-Sendfile", media.path.display().to_string()),
        _ => {
            let relative = settings
                .roots
                .relative(media)
                .map(|p| p.to_string_lossy().into_owned())
                .unwrap_or_default();
            let uri = format!(
                "{}/{}/{}",
                settings.accel_location,
                media.root_index,
                utf8_percent_encode(&relative, OFFLOAD_KEEP)
            );
            response.header("X-Accel-Redirect", uri)
        }
    };
    response.body(Payload::Empty).unwrap_or_else(|_| {
        json_status(StatusCode::INTERNAL_SERVER_ERROR, "bad offload header").map(Payload::Body)
    })
}

/// `inline; filename="..."` with an RFC 8187 `filename*` for names that are not plain ASCII.
pub fn content_disposition(path: &Path) -> String {
    let name = path
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default();
    let ascii: String = name
        .chars()
        .map(|c| {
            if c.is_ascii_graphic() && c != '"' && c != '\\' || c == ' ' {
                c
            } else {
                '_'
            }
        })
        .collect();
    if ascii == name {
        format!("inline; filename=\"{name}\"")
    } else {
        let encoded = utf8_percent_encode(&name, NON_ALPHANUMERIC);
        format!("inline; filename=\"{ascii}\"; filename*=UTF-8''{encoded}")
    }
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
            cache: FileCache::new(0, 0, 0),
            zero_copy: true,
        }
    }

    fn body_bytes(response: Response<axum::body::Body>) -> Bytes {
        let runtime = tokio::runtime::Builder::new_current_thread()
            .build()
            .expect("runtime");
        runtime.block_on(async {
            use http_body_util::BodyExt;
            response
                .into_body()
                .collect()
                .await
                .expect("body")
                .to_bytes()
        })
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
            let facts = FileFacts::new(Path::new("/m/x.mp3"), size as u64, std::time::UNIX_EPOCH, &HeaderValue::from_static("public"));
            let request = FileRequest { range: Some(header.clone()), ..FileRequest::default() };
            let response = respond(&settings(), "id", &facts, Source::Memory(file.clone()), &request)
                .expect("an answer")
                .into_response();
            let status = response.status();
            let headers = response.headers().clone();
            let body = body_bytes(response);
            if let Some(length) = headers.get(header::CONTENT_LENGTH) {
                let length: usize = length.to_str().expect("ascii").parse().expect("number");
                prop_assert_eq!(length, body.len());
            }
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

    #[test]
    fn disposition_quotes_plain_names_and_encodes_others() {
        assert_eq!(
            content_disposition(Path::new("/m/Song 1.mp3")),
            "inline; filename=\"Song 1.mp3\""
        );
        let d = content_disposition(Path::new("/m/Café \"x\".mp3"));
        assert!(
            d.starts_with("inline; filename=\"Caf_ _x_.mp3\"; filename*=UTF-8''Caf%C3%A9"),
            "{d}"
        );
    }
}
