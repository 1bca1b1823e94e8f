//! `musicctl import DIR`: add the audio files under a directory to the catalogue.
//!
//! Idempotent by construction: a unique index on the path field makes MongoDB itself refuse
//! a second document for the same file, and inserts are unordered, so re-running import
//! inserts only what is new and reports the rest as already present. Paths are stored
//! canonical, so the same file reached through two spellings is one document.

use std::io::{Read, Seek, SeekFrom};
use std::path::{Path, PathBuf};
use std::time::UNIX_EPOCH;

use mongodb::IndexModel;
use mongodb::bson::oid::ObjectId;
use mongodb::bson::{DateTime, Document, doc};
use mongodb::error::ErrorKind;
use mongodb::options::IndexOptions;

use super::{AdminError, Backends};
use crate::media::mime::is_audio;
use crate::media::probe::{self, Format};

/// MongoDB error code for a duplicate key.
const DUPLICATE_KEY: i32 = 11000;

/// Documents per `insertMany`.
const BATCH: usize = 1000;

/// One newly inserted track.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Imported {
    /// Its new id.
    pub(crate) id: ObjectId,
    /// Its canonical path.
    pub(crate) path: PathBuf,
}

/// What an import did.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct ImportReport {
    /// Audio files found.
    pub(crate) found: usize,
    /// New documents.
    pub(crate) inserted: Vec<Imported>,
    /// Files that already had a document.
    pub(crate) already_present: usize,
}

impl ImportReport {
    /// One `id<TAB>path` line per new document.
    pub fn render(&self) -> String {
        self.inserted
            .iter()
            .map(|track| format!("{}\t{}\n", track.id.to_hex(), track.path.display()))
            .collect()
    }

    /// The totals, one line.
    pub fn summary(&self) -> String {
        format!(
            "import: {} audio files, {} new, {} already present",
            self.found,
            self.inserted.len(),
            self.already_present
        )
    }
}

/// Imports every audio file under `dir` (which must lie under a media root).
pub async fn import(backends: &Backends, dir: &Path) -> Result<ImportReport, AdminError> {
    let dir = std::fs::canonicalize(dir).map_err(|source| AdminError::Io {
        path: dir.display().to_string(),
        source,
    })?;
    if !backends
        .roots
        .roots()
        .iter()
        .any(|root| dir.starts_with(root))
    {
        return Err(AdminError::Usage(format!(
            "{} is not under any media root ({}); musicd would refuse to serve it",
            dir.display(),
            backends
                .roots
                .roots()
                .iter()
                .map(|r| r.display().to_string())
                .collect::<Vec<_>>()
                .join(", ")
        )));
    }
    let files = audio_files(&dir)?;
    import_files(backends, &files).await
}

/// Imports these files (canonical paths under a media root), as [`import`] does.
pub(crate) async fn import_files(
    backends: &Backends,
    files: &[PathBuf],
) -> Result<ImportReport, AdminError> {
    let collection = backends.store.collection();
    let field = backends.store.path_field();
    collection
        .create_index(
            IndexModel::builder()
                .keys(doc! { field: 1 })
                .options(IndexOptions::builder().unique(true).build())
                .build(),
        )
        .await?;

    let mut report = ImportReport {
        found: files.len(),
        ..ImportReport::default()
    };
    for batch in files.chunks(BATCH) {
        let mut docs = Vec::with_capacity(batch.len());
        let mut ids = Vec::with_capacity(batch.len());
        for path in batch {
            let id = ObjectId::new();
            docs.push(track_document(id, field, path)?);
            ids.push(id);
        }
        let rejected = match collection.insert_many(docs).ordered(false).await {
            Ok(_) => Vec::new(),
            Err(err) => duplicate_indices(&err).ok_or(err)?,
        };
        report.already_present += rejected.len();
        for (index, (id, path)) in ids.into_iter().zip(batch).enumerate() {
            if !rejected.contains(&index) {
                report.inserted.push(Imported {
                    id,
                    path: path.clone(),
                });
            }
        }
    }
    Ok(report)
}

/// The indices of an `insertMany` that failed only on duplicate keys; `None` for any other
/// failure, which the caller reports as an error.
fn duplicate_indices(err: &mongodb::error::Error) -> Option<Vec<usize>> {
    let ErrorKind::InsertMany(failure) = err.kind.as_ref() else {
        return None;
    };
    if failure.write_concern_error.is_some() {
        return None;
    }
    let errors = failure.write_errors.as_ref()?;
    errors
        .iter()
        .map(|e| (e.code == DUPLICATE_KEY).then_some(e.index))
        .collect()
}

fn track_document(id: ObjectId, field: &str, path: &Path) -> Result<Document, AdminError> {
    let io_err = |source| AdminError::Io {
        path: path.display().to_string(),
        source,
    };
    let metadata = std::fs::metadata(path).map_err(io_err)?;
    let mtime = metadata
        .modified()
        .ok()
        .and_then(|t| t.duration_since(UNIX_EPOCH).ok())
        .map_or(0, |d| i64::try_from(d.as_millis()).unwrap_or(i64::MAX));
    let path_text = path
        .to_str()
        .ok_or_else(|| AdminError::Usage(format!("{} is not valid UTF-8", path.display())))?;
    let mut document = doc! {
        "_id": id,
        field: path_text,
        "size": i64::try_from(metadata.len()).unwrap_or(i64::MAX),
        "mtime": DateTime::from_millis(mtime),
    };
    if let Some(stem) = path.file_stem().and_then(|s| s.to_str()) {
        document.insert("title", stem.replace('_', " "));
    }
    // What players and reports need, as the file's own headers declare it. A file symphonia
    // cannot read is still imported (it is served by its extension), without these.
    let extension = path.extension().and_then(|e| e.to_str());
    let mut file = std::fs::File::open(path);
    if let Ok(file) = &mut file
        && let Some(offset) = audio_offset(file, extension, metadata.len())
    {
        document.insert("audio_offset", i64::try_from(offset).unwrap_or(i64::MAX));
    }
    let facts = file
        .map_err(|e| e.to_string())
        .and_then(|file| crate::media::probe::stream_facts(file, extension, metadata.len()));
    if let Ok(facts) = facts {
        if let Some(codec) = facts.codec {
            document.insert("codec", codec);
        }
        if let Some(duration) = facts.duration {
            document.insert("duration", duration);
        }
        if let Some(rate) = facts.sample_rate {
            document.insert("sample_rate", i64::from(rate));
        }
        if let Some(bitrate) = facts.bitrate {
            document.insert("bitrate", i64::try_from(bitrate).unwrap_or(i64::MAX));
        }
    }
    Ok(document)
}

/// Where the first audio frame of `file` (of `len` bytes) starts, in the format its first
/// bytes show (else the one its extension names). Unknown when the file cannot be read: it is
/// imported all the same, and `verify --fix --yes` fills it in later. Leaves `file` at its
/// start, for symphonia.
fn audio_offset(file: &mut std::fs::File, extension: Option<&str>, len: u64) -> Option<u64> {
    let mut head = Vec::with_capacity(HEAD);
    let offset = (&mut *file)
        .take(HEAD as u64)
        .read_to_end(&mut head)
        .ok()
        .and_then(|_| probe::sniff(&head).or_else(|| extension.and_then(Format::of_extension)))
        .and_then(|format| probe::audio_offset(file, len, format).ok().flatten());
    file.seek(SeekFrom::Start(0)).ok()?;
    offset
}

/// Bytes sniffed for the format: enough to see past a small ID3 tag, as `verify` does.
const HEAD: usize = 4096;

/// Audio files under `dir`, sorted, not following symlinked directories (no loops).
pub(crate) fn audio_files(dir: &Path) -> Result<Vec<PathBuf>, AdminError> {
    let mut found = Vec::new();
    let mut pending = vec![dir.to_path_buf()];
    while let Some(current) = pending.pop() {
        let entries = std::fs::read_dir(&current).map_err(|source| AdminError::Io {
            path: current.display().to_string(),
            source,
        })?;
        for entry in entries {
            let entry = entry.map_err(|source| AdminError::Io {
                path: current.display().to_string(),
                source,
            })?;
            let kind = match entry.file_type() {
                Ok(kind) => kind,
                Err(_) => continue,
            };
            let path = entry.path();
            if kind.is_dir() {
                pending.push(path);
            } else if kind.is_file() && is_audio(&path) && path.to_str().is_some() {
                found.push(path);
            }
        }
    }
    found.sort();
    Ok(found)
}
