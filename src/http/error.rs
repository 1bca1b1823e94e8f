//! The one place where errors become HTTP answers.
//!
//! Every failure a track request can meet is an [`ApiError`]; [`ApiError::into_answer`]
//! picks the status and writes a small JSON body `{"error": "...", "id": "..."}` so players
//! and operators get a reason instead of an empty page. Errors that point at a problem on
//! our side (a document outside the roots, a file missing on disk) are logged here too.
//! Refusals of the HTTP/1.1 layer map to their status in [`crate::http::h1::head`].

use axum::Json;
use axum::http::{HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};

use super::service::Answer;
use crate::catalog::ResolveError;
use crate::media::MediaError;

/// Seconds a client is told to wait when the catalogue is down.
pub(crate) const RETRY_AFTER_SECS: u32 = 5;

/// Why a request failed.
#[derive(Debug, thiserror::Error)]
pub(crate) enum ApiError {
    /// The id in the URL is not a 24-digit hex ObjectId.
    #[error("invalid track id")]
    InvalidId {
        /// The id as received.
        id: String,
    },
    /// No document has this id.
    #[error("unknown track id")]
    UnknownId { id: String },
    /// The link's signature is missing, wrong or expired.
    #[error("{source}")]
    Signature {
        id: String,
        /// Why.
        source: crate::signing::SignatureError,
    },
    /// The id could not be resolved (MongoDB down, invalid document).
    #[error("{source}")]
    Resolve {
        id: String,
        /// Why.
        source: ResolveError,
    },
    /// The document's path cannot be served.
    #[error("{source}")]
    Media {
        id: String,
        /// Why.
        source: MediaError,
    },
    /// Reading the file failed for another reason.
    #[error("file could not be read")]
    Io {
        id: String,
        /// Why.
        source: std::io::Error,
    },
}

impl ApiError {
    /// The status this error maps to.
    pub(crate) fn status(&self) -> StatusCode {
        match self {
            ApiError::InvalidId { .. } => StatusCode::BAD_REQUEST,
            ApiError::UnknownId { .. } => StatusCode::NOT_FOUND,
            ApiError::Signature { .. } => StatusCode::FORBIDDEN,
            ApiError::Resolve { source, .. } => match source {
                ResolveError::StoreUnavailable(_) => StatusCode::SERVICE_UNAVAILABLE,
                ResolveError::InvalidDocument(_) => StatusCode::NOT_FOUND,
            },
            ApiError::Media { source, .. } => match source {
                MediaError::NotAbsolute | MediaError::OutsideRoots | MediaError::Symlink => {
                    StatusCode::FORBIDDEN
                }
                MediaError::Missing | MediaError::NotAFile => StatusCode::NOT_FOUND,
                MediaError::Unreadable(_) => StatusCode::FORBIDDEN,
                MediaError::Exhausted(_) => StatusCode::SERVICE_UNAVAILABLE,
            },
            ApiError::Io { .. } => StatusCode::INTERNAL_SERVER_ERROR,
        }
    }

    /// The message shown to the client. Internal detail (paths, driver errors) stays in
    /// the log: the client learns what happened, not how our disks are laid out.
    fn public_message(&self) -> &'static str {
        match self {
            ApiError::InvalidId { .. } => "invalid track id: expected 24 hexadecimal digits",
            ApiError::UnknownId { .. } => "unknown track id",
            ApiError::Signature { source, .. } => source.message(),
            ApiError::Resolve { source, .. } => match source {
                ResolveError::StoreUnavailable(_) => "track catalogue unavailable, retry later",
                ResolveError::InvalidDocument(_) => "track has no playable file",
            },
            ApiError::Media { source, .. } => match source {
                MediaError::NotAbsolute
                | MediaError::OutsideRoots
                | MediaError::Symlink
                | MediaError::Unreadable(_) => "access to this track's file is refused",
                MediaError::Missing => "track file is missing",
                MediaError::Exhausted(_) => "server busy, retry later",
                MediaError::NotAFile => "track file is not a regular file",
            },
            ApiError::Io { .. } => "track file could not be read",
        }
    }

    fn id(&self) -> &str {
        match self {
            ApiError::InvalidId { id }
            | ApiError::UnknownId { id }
            | ApiError::Signature { id, .. }
            | ApiError::Resolve { id, .. }
            | ApiError::Media { id, .. }
            | ApiError::Io { id, .. } => id,
        }
    }

    fn log(&self) {
        match self {
            ApiError::InvalidId { .. }
            | ApiError::UnknownId { .. }
            | ApiError::Signature { .. } => {}
            ApiError::Resolve { id, source } => {
                tracing::warn!(%id, error = %source, "cannot resolve track")
            }
            ApiError::Media { id, source } => {
                tracing::warn!(%id, error = %source, "refusing track file")
            }
            ApiError::Io { id, source } => {
                tracing::error!(%id, error = %source, "reading track file failed")
            }
        }
    }
}

impl ApiError {
    /// The answer the client gets (and the log line we keep).
    pub(crate) fn into_answer(self) -> Answer {
        self.log();
        let status = self.status();
        // Echo at most a sane length of the id back; it is attacker-controlled.
        let id: String = self.id().chars().take(64).collect();
        let mut answer = Answer::json(
            status,
            &serde_json::json!({ "error": self.public_message(), "id": id }),
        );
        if status == StatusCode::SERVICE_UNAVAILABLE {
            answer
                .headers
                .insert(header::RETRY_AFTER, HeaderValue::from(RETRY_AFTER_SECS));
        }
        answer
    }
}

/// A JSON error body from the router (its 404 and the ops endpoints' failures).
pub(crate) fn json_status(status: StatusCode, message: &str) -> Response {
    (status, Json(serde_json::json!({ "error": message }))).into_response()
}
