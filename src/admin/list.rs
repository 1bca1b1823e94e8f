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
