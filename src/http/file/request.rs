//! What the file server reads from a track request: HEAD or not, and the six headers of
//! ranges and conditional requests, owned so the request can cross to the blocking pool.

use super::conditional::Preconditions;

/// What the file server needs from the request.
#[derive(Debug, Clone, Default)]
pub struct FileRequest {
    /// HEAD: the answer GET would give, whose body is not sent (and not read).
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
    /// `?download`: `Content-Disposition: attachment` instead of `inline`.
    pub download: bool,
    /// `X-Musicd-Authorize: 1`, sent by a shared cache in front (`deploy/varnish.vcl`)
    /// before it answers from its copy: only the access check runs, and a passing link
    /// gets 204 with no body (no lookup, no file).
    pub authorize_only: bool,
    /// When the request had been read in full (an instant after the read that completed
    /// it): a file-cache check begun later covers it. `None`: check now.
    pub read_at: Option<std::time::Instant>,
}

impl FileRequest {
    /// The conditional headers, borrowed for evaluation.
    pub fn preconditions(&self) -> Preconditions<'_> {
        Preconditions {
            if_match: self.if_match.as_deref(),
            if_none_match: self.if_none_match.as_deref(),
            if_modified_since: self.if_modified_since.as_deref(),
            if_unmodified_since: self.if_unmodified_since.as_deref(),
            if_range: self.if_range.as_deref(),
        }
    }
}
