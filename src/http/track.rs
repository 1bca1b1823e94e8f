//! The track route: an id in, a file answer out.
//!
//! [`answer`] parses the id ([`parse_track_id`]: exactly 24 hex digits, no database query
//! for anything else), checks a signed link ([`crate::signing`]), resolves it through the
//! [`Resolver`](crate::catalog::Resolver), and answers from the file cache or from the disk
//! ([`super::file`]). Failures are `ApiError`s, each with its JSON answer.

use std::borrow::Cow;
use std::net::IpAddr;
use std::sync::Arc;

use mongodb::bson::oid::ObjectId;

use super::error::ApiError;
use super::file::{self, request::FileRequest};
use super::service::{Answer, Payload};
use super::{AppState, hot};
use crate::catalog::{CacheOutcome, ResolveError};
use crate::signing::LinkParams;
use crate::timing::unix_secs;

/// Checks the link, resolves `id` and answers with its file; an error is turned into its
/// answer by the caller (`ApiError::into_answer`), so that this future is the only one
/// between the route and the file.
pub(crate) async fn answer(
    state: &AppState,
    id: Cow<'_, str>,
    request: FileRequest,
    link: &LinkParams,
    client: impl FnOnce() -> IpAddr,
) -> (CacheOutcome, Result<Answer, ApiError>) {
    let Some(oid) = parse_track_id(&id) else {
        let id = id.into_owned();
        return (CacheOutcome::None, Err(ApiError::InvalidId { id }));
    };
    // Before any lookup: a refused link costs no Redis or MongoDB query. Only a link's
    // expiry reads the clock: an unsigned request is decided without it.
    let now = if link.present() { unix_secs() } else { 0 };
    if let Err(source) = state.access.signing.check(&oid, link, now, client) {
        let id = id.into_owned();
        return (CacheOutcome::None, Err(ApiError::Signature { id, source }));
    }
    if request.authorize_only {
        return (CacheOutcome::None, Ok(authorized(link, now)));
    }
    if let Some(answer) = hot::answer(state, &oid, &id, &request).await {
        // Counted as what it stands for: an id found in process, a file cache hit.
        state.metrics.observe_resolve(std::time::Duration::ZERO);
        state.metrics.file_cache(true);
        return (CacheOutcome::Local, answer);
    }
    let read_at = request.read_at.unwrap_or_else(std::time::Instant::now);
    let resolution = match state.resolver.resolve(&oid, read_at).await {
        Ok(r) => r,
        Err(source) => {
            if matches!(source, ResolveError::StoreUnavailable(_)) {
                state.metrics.mongodb_error();
            }
            let id = id.into_owned();
            return (CacheOutcome::None, Err(ApiError::Resolve { id, source }));
        }
    };
    state.metrics.observe_resolve(resolution.elapsed);
    let Some(path) = resolution.path else {
        let id = id.into_owned();
        return (resolution.outcome, Err(ApiError::UnknownId { id }));
    };
    if let Some(answer) = file::from_cache(&state.files, &id, &path, &request).await {
        state.metrics.file_cache(true);
        let small = |answer: &Answer| matches!(&answer.payload, Payload::Bytes(b) if b.len() <= hot::MOST_FILE_BYTES);
        if resolution.outcome == CacheOutcome::Local && answer.as_ref().is_ok_and(small) {
            hot::keep(state, oid, &path, read_at);
        }
        return (resolution.outcome, answer);
    }
    state.metrics.file_cache(false);
    let served = Box::pin(file::open_and_answer(
        Arc::clone(&state.files),
        id.into_owned(),
        path.to_string(),
        request,
    ))
    .await;
    (resolution.outcome, served)
}

/// The longest a shared cache may reuse an authorization: a key removed from the
/// configuration, or `signing.required` turned on, is obeyed within it.
const AUTHORIZATION_TTL: u64 = 60;

/// The answer to a shared cache's authorization probe for a link that may play: no body,
/// reusable by the cache for this exact URL until the link expires (to the second, a
/// minute at most), so a hit costs varnish a lookup, not a round trip to musicd.
fn authorized(link: &LinkParams, now: u64) -> Answer {
    let left = link
        .expires
        .as_deref()
        .and_then(|e| e.parse::<u64>().ok())
        .map_or(AUTHORIZATION_TTL, |expires| expires.saturating_sub(now));
    let lines = match left.min(AUTHORIZATION_TTL) {
        0 => "Cache-Control: no-store\r\n".to_string(),
        // The second now ending counts as spent: never reused past `expires`.
        secs => format!("Cache-Control: max-age={}\r\n", secs.saturating_sub(1)),
    };
    Answer::new(
        axum::http::StatusCode::NO_CONTENT,
        bytes::Bytes::from(lines),
        crate::http::service::Payload::Empty,
    )
}

/// The ObjectId in a track URL segment: exactly 24 hexadecimal digits (either case).
pub fn parse_track_id(segment: &str) -> Option<ObjectId> {
    // Decoded by hand: the bson parser collects into a Vec first, on every request. A
    // table and one check at the end, not a branch per digit.
    let digits: &[u8; 24] = segment.as_bytes().try_into().ok()?;
    let mut bytes = [0u8; 12];
    let mut invalid = 0u8;
    for (byte, pair) in bytes.iter_mut().zip(digits.chunks_exact(2)) {
        let (high, low) = (
            HEX_VALUES[usize::from(pair[0])],
            HEX_VALUES[usize::from(pair[1])],
        );
        invalid |= high | low;
        *byte = (high << 4) | (low & 0x0f);
    }
    (invalid & NOT_HEX == 0).then(|| ObjectId::from_bytes(bytes))
}

/// Marks a byte that is not a hexadecimal digit in [`HEX_VALUES`].
const NOT_HEX: u8 = 0x10;

/// Each byte's value as a hexadecimal digit, or [`NOT_HEX`].
const HEX_VALUES: [u8; 256] = {
    let mut values = [NOT_HEX; 256];
    let mut b = 0;
    while b < 256 {
        values[b] = match b as u8 {
            digit @ b'0'..=b'9' => digit - b'0',
            digit @ b'a'..=b'f' => digit - b'a' + 10,
            digit @ b'A'..=b'F' => digit - b'A' + 10,
            _ => NOT_HEX,
        };
        b += 1;
    }
    values
};

#[cfg(test)]
mod tests {
    use super::parse_track_id;

    #[test]
    fn track_ids_are_exactly_24_hex_digits() {
        let id = parse_track_id("6b0dc37d3ba0d873deac9381").expect("valid");
        assert_eq!(id.to_hex(), "6b0dc37d3ba0d873deac9381");
        assert_eq!(parse_track_id("6B0DC37D3BA0D873DEAC9381"), Some(id));
        for bad in [
            "",
            "6b0dc37d3ba0d873deac938",
            "6b0dc37d3ba0d873deac93811",
            "zb0dc37d3ba0d873deac9381",
            "6b0dc37d3ba0d873deac938é",
        ] {
            assert!(parse_track_id(bad).is_none(), "{bad}");
        }
        // Every ASCII byte at the first and the last place: only the 22 digits pass.
        for b in 0..128u8 {
            let digit = b.is_ascii_hexdigit();
            for at in [0, 23] {
                let mut text = *b"6b0dc37d3ba0d873deac9381";
                text[at] = b;
                let text = std::str::from_utf8(&text).expect("ascii");
                assert_eq!(parse_track_id(text).is_some(), digit, "{text:?}");
                if digit {
                    assert_eq!(
                        parse_track_id(text).map(|id| id.to_hex()),
                        Some(text.to_ascii_lowercase())
                    );
                }
            }
        }
    }
}
