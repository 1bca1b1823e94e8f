//! What every answer about one version of a file says, formatted once per version.
//!
//! Hot files keep their [`FileFacts`] in the file cache, so a cache hit formats no header
//! but `Content-Length`, which the HTTP/1.1 layer writes from the body it frames.

use std::path::Path;

use axum::http::HeaderValue;
use bytes::{Bytes, BytesMut};
use percent_encoding::{AsciiSet, NON_ALPHANUMERIC, utf8_percent_encode};

use super::conditional::Validators;
use crate::http::service::header_lines::put_header;
use crate::media::mime::content_type;

/// The validators and header lines of one version of a file.
#[derive(Debug, Clone)]
pub(crate) struct FileFacts {
    /// Size in bytes.
    pub(crate) size: u64,
    /// ETag and Last-Modified.
    pub(crate) validators: Validators,
    /// MIME type by extension.
    pub(crate) mime: &'static str,
    /// `etag`, `last-modified`, `cache-control` lines: what a 304 says.
    pub(crate) validator_lines: Bytes,
    /// With `Content-Disposition: inline` (played).
    pub(crate) inline: Lines,
    /// With `Content-Disposition: attachment` (`?download`: saved).
    pub(crate) attachment: Lines,
}

/// The header lines of answers with a body, for one disposition.
#[derive(Debug, Clone)]
pub(crate) struct Lines {
    /// The validator lines plus `accept-ranges` and `content-disposition`: what every
    /// answer with a body says.
    pub(crate) body: Bytes,
    /// The body lines plus `content-type`: a whole 200.
    pub(crate) full: Bytes,
}

impl FileFacts {
    /// A copy of these facts and of `body` that shares no allocation with them (so no
    /// count another thread moves), for an event loop's own copy of a hot file
    /// (`crate::http::hot`). Lines and body share one allocation: an answer counts its
    /// lines and its body on one line of memory, not two missed ones.
    pub(crate) fn copied_with(&self, body: &[u8]) -> (FileFacts, Bytes) {
        let (inline, attachment) = (&self.inline.full, &self.attachment.full);
        let mut all = BytesMut::with_capacity(inline.len() + attachment.len() + body.len());
        all.extend_from_slice(inline);
        all.extend_from_slice(attachment);
        all.extend_from_slice(body);
        let all = all.freeze();
        let lines = |start: usize, lines: &Lines| Lines {
            body: all.slice(start..start + lines.body.len()),
            full: all.slice(start..start + lines.full.len()),
        };
        // Each original is a prefix of the inline (or attachment) lines it was cut from.
        debug_assert!(inline.starts_with(&self.validator_lines));
        let facts = FileFacts {
            size: self.size,
            validators: self.validators.clone(),
            mime: self.mime,
            validator_lines: all.slice(..self.validator_lines.len()),
            inline: lines(0, &self.inline),
            attachment: lines(inline.len(), &self.attachment),
        };
        let body = all.slice(inline.len() + attachment.len()..);
        (facts, body)
    }

    /// The lines for a request that does (`download`) or does not want to save the file.
    pub(crate) fn lines(&self, download: bool) -> &Lines {
        if download {
            &self.attachment
        } else {
            &self.inline
        }
    }
}

impl FileFacts {
    /// Facts of the file at `path` with this size and modification time, answered with
    /// this `Cache-Control`.
    pub(crate) fn new(
        path: &Path,
        size: u64,
        modified: std::time::SystemTime,
        cache_control: &HeaderValue,
    ) -> FileFacts {
        let validators = Validators::new(size, modified);
        let mime = content_type(path);
        let mut common = BytesMut::with_capacity(160);
        put_header(&mut common, "etag", validators.etag.as_bytes());
        let last_modified = validators.last_modified_header();
        put_header(&mut common, "last-modified", last_modified.as_bytes());
        put_header(&mut common, "cache-control", cache_control.as_bytes());
        let validator_len = common.len();
        put_header(&mut common, "accept-ranges", b"bytes");
        let lines = |attachment: bool| {
            let mut lines = BytesMut::with_capacity(common.len() + 160);
            lines.extend_from_slice(&common);
            // `content_disposition` escapes everything outside visible ASCII.
            let disposition = content_disposition(path, attachment);
            put_header(&mut lines, "content-disposition", disposition.as_bytes());
            let body_len = lines.len();
            put_header(&mut lines, "content-type", mime.as_bytes());
            let full = lines.freeze();
            Lines {
                body: full.slice(..body_len),
                full,
            }
        };
        let inline = lines(false);
        FileFacts {
            size,
            validator_lines: inline.full.slice(..validator_len),
            attachment: lines(true),
            inline,
            validators,
            mime,
        }
    }
}

/// What RFC 8187 `attr-char` leaves unescaped in `filename*`.
const ATTR_CHAR: &AsciiSet = &NON_ALPHANUMERIC
    .remove(b'!')
    .remove(b'#')
    .remove(b'$')
    .remove(b'&')
    .remove(b'+')
    .remove(b'-')
    .remove(b'.')
    .remove(b'^')
    .remove(b'_')
    .remove(b'`')
    .remove(b'|')
    .remove(b'~');

/// `inline; filename="..."` (or `attachment; ...`) with an RFC 8187 `filename*` for names
/// that are not plain ASCII.
pub(crate) fn content_disposition(path: &Path, attachment: bool) -> String {
    let kind = if attachment { "attachment" } else { "inline" };
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
        format!("{kind}; filename=\"{name}\"")
    } else {
        let encoded = utf8_percent_encode(&name, ATTR_CHAR);
        format!("{kind}; filename=\"{ascii}\"; filename*=UTF-8''{encoded}")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn disposition_quotes_plain_names_and_encodes_others() {
        assert_eq!(
            content_disposition(Path::new("/m/Song 1.mp3"), false),
            "inline; filename=\"Song 1.mp3\""
        );
        assert_eq!(
            content_disposition(Path::new("/m/Song 1.mp3"), true),
            "attachment; filename=\"Song 1.mp3\""
        );
        let d = content_disposition(Path::new("/m/Café \"x\".mp3"), false);
        assert!(
            d.starts_with("inline; filename=\"Caf_ _x_.mp3\"; filename*=UTF-8''Caf%C3%A9"),
            "{d}"
        );
    }

    #[test]
    fn a_copy_with_its_body_says_every_line_the_original_says() {
        let facts = FileFacts::new(
            Path::new("/m/Café.mp3"),
            5,
            std::time::UNIX_EPOCH,
            &HeaderValue::from_static("public, max-age=60"),
        );
        let (copy, body) = facts.copied_with(b"12345");
        assert_eq!(&body[..], b"12345");
        assert_eq!(copy.validator_lines, facts.validator_lines);
        for download in [false, true] {
            let (original, copied) = (facts.lines(download), copy.lines(download));
            assert_eq!(copied.body, original.body);
            assert_eq!(copied.full, original.full);
            assert!(!copied.full.is_empty());
        }
        assert_eq!((copy.size, copy.mime), (facts.size, facts.mime));
        assert_eq!(copy.validators.etag, facts.validators.etag);
    }

    #[test]
    fn lines_carry_no_framing() {
        let facts = FileFacts::new(
            Path::new("/m/a.mp3"),
            1234,
            std::time::UNIX_EPOCH,
            &HeaderValue::from_static("public"),
        );
        let text = String::from_utf8(facts.inline.full.to_vec()).expect("ascii");
        assert!(text.contains("content-type: audio/mpeg\r\n"), "{text}");
        assert!(
            !text.to_ascii_lowercase().contains("content-length"),
            "{text}"
        );
    }
}
