//! `musicctl list`: the tracks in the catalogue, streamed from a cursor.

use futures_util::TryStreamExt;
use mongodb::bson::doc;
use mongodb::bson::oid::ObjectId;

use super::{AdminError, Backends};
use crate::catalog::mongo::{StoredPath, stored_path};

/// One catalogue entry.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Listed {
    /// The id.
    pub(crate) id: ObjectId,
    /// The path field (or why it is unusable).
    pub(crate) path: StoredPath,
}

/// Calls `each` for up to `limit` tracks in id order, without holding them all in memory.
pub(crate) async fn list(
    backends: &Backends,
    limit: Option<u64>,
    mut each: impl FnMut(Listed),
) -> Result<u64, AdminError> {
    let field = backends.store.path_field().to_string();
    let mut find = backends
        .store
        .collection()
        .find(doc! {})
        .projection(doc! { &field: 1 })
        .sort(doc! { "_id": 1 });
    if let Some(limit) = limit {
        find = find.limit(i64::try_from(limit).unwrap_or(i64::MAX));
    }
    let mut cursor = find.await?;
    let mut count = 0;
    while let Some(document) = cursor.try_next().await? {
        // Documents whose _id is not an ObjectId cannot be requested by URL: skip them.
        let Ok(id) = document.get_object_id("_id") else {
            continue;
        };
        each(Listed {
            id,
            path: stored_path(&document, &field),
        });
        count += 1;
    }
    Ok(count)
}

/// Every track's id and the name its links give it (the file's name), for `musicctl
/// players`.
pub async fn ids_and_names(backends: &Backends) -> Result<Vec<(String, String)>, AdminError> {
    let mut tracks = Vec::new();
    list(backends, None, |listed| {
        tracks.push((listed.id.to_hex(), listed.path.file_name()));
    })
    .await?;
    Ok(tracks)
}

/// Writes up to `limit` tracks to `out`, one `id<TAB>path` line each (an unusable path as
/// `(invalid: why)`); a write that fails (a closed pipe) stops the listing with its error.
pub async fn write_tsv(
    backends: &Backends,
    limit: Option<u64>,
    out: &mut impl std::io::Write,
) -> Result<u64, AdminError> {
    let mut write_error = None;
    let count = list(backends, limit, |track| {
        if write_error.is_some() {
            return;
        }
        let path = match track.path {
            StoredPath::Path(p) => p,
            StoredPath::Invalid(why) => format!("(invalid: {why})"),
        };
        if let Err(err) = writeln!(out, "{}\t{path}", track.id.to_hex()) {
            write_error = Some(err);
        }
    })
    .await?;
    let io = |source| AdminError::Io {
        path: "standard output".into(),
        source,
    };
    if let Some(err) = write_error {
        return Err(io(err));
    }
    out.flush().map_err(io)?;
    Ok(count)
}

/// What the catalogue records of a track that counting plays needs (`musicctl plays`).
#[derive(Debug, Clone, PartialEq, serde::Serialize)]
pub struct TrackFacts {
    /// The id, 24 hex digits.
    pub id: String,
    /// Bytes.
    pub size: Option<u64>,
    /// Bits per second.
    pub bitrate: Option<u64>,
    /// Seconds.
    pub duration: Option<f64>,
    /// Where the first audio frame starts.
    pub audio_offset: Option<u64>,
}

/// Calls `each` with every track's facts, in id order, from a cursor.
pub async fn facts(
    backends: &Backends,
    mut each: impl FnMut(TrackFacts),
) -> Result<u64, AdminError> {
    let mut cursor = backends
        .store
        .collection()
        .find(doc! {})
        .projection(doc! { "size": 1, "bitrate": 1, "duration": 1, "audio_offset": 1 })
        .sort(doc! { "_id": 1 })
        .await?;
    // Numbers were written by import as integers or doubles, and by hand as anything:
    // what is not a non-negative number is unknown.
    let whole = |document: &mongodb::bson::Document, key: &str| match document.get(key) {
        Some(mongodb::bson::Bson::Int32(n)) => u64::try_from(*n).ok(),
        Some(mongodb::bson::Bson::Int64(n)) => u64::try_from(*n).ok(),
        Some(mongodb::bson::Bson::Double(n)) if n.is_finite() && *n >= 0.0 => Some(*n as u64),
        _ => None,
    };
    let mut count = 0;
    while let Some(document) = cursor.try_next().await? {
        let Ok(id) = document.get_object_id("_id") else {
            continue;
        };
        let duration = match document.get("duration") {
            Some(mongodb::bson::Bson::Double(n)) if n.is_finite() && *n >= 0.0 => Some(*n),
            _ => whole(&document, "duration").map(|n| n as f64),
        };
        each(TrackFacts {
            id: id.to_hex(),
            size: whole(&document, "size"),
            bitrate: whole(&document, "bitrate"),
            duration,
            audio_offset: whole(&document, "audio_offset"),
        });
        count += 1;
    }
    Ok(count)
}

/// `musicctl list --facts`: every track's facts as JSON lines, the `--facts` file of
/// `musicctl plays`.
pub async fn write_facts(
    backends: &Backends,
    out: &mut impl std::io::Write,
) -> Result<u64, AdminError> {
    let mut write_error = None;
    let count = facts(backends, |track| {
        if write_error.is_some() {
            return;
        }
        let written = serde_json::to_writer(&mut *out, &track)
            .map_err(std::io::Error::from)
            .and_then(|()| out.write_all(b"\n"));
        if let Err(err) = written {
            write_error = Some(err);
        }
    })
    .await?;
    let io = |source| AdminError::Io {
        path: "standard output".into(),
        source,
    };
    if let Some(err) = write_error {
        return Err(io(err));
    }
    out.flush().map_err(io)?;
    Ok(count)
}
