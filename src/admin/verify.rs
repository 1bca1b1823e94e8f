//! `musicctl verify`: the catalogue, the disk and the cache agree, and every file is what
//! its name says.
//!
//! Three walks, each in bounded memory but for an 8-byte key per path named (needed to
//! find duplicates and orphans):
//! * the catalogue, a MongoDB cursor in batches; each batch's files are checked on the
//!   blocking pool (confined to the media roots as the server does, opened, their magic
//!   bytes and headers read: [`crate::media::probe`]) while the next batch is read;
//! * the media roots, for audio files no document names (`orphan`);
//! * the cache, every entry against MongoDB and the disk (`cache_stale`), the scan
//!   `reindex --prune` uses.
//!
//! The shallow pass reads a few KiB per file (up to 256 KiB of an mp3 without a seek
//! table, to see whether its bitrate varies). `--deep` also demuxes every file to its end
//! (`symphonia`): a stream that breaks, or holds fewer sample frames than its container
//! declares, is `truncated` (a FLAC cut short, say, which no header check sees). Each
//! batch is shared between the cores.
//!
//! [`fix`] makes the safe repairs only: it removes stale cache entries (the next request
//! reads the document through), imports orphans, and records the `audio_offset` of
//! documents imported before import recorded it (their ids and offsets are kept until
//! then, 24 bytes each). Anything that needs a decision (a missing file, a duplicate, a
//! mismatched type) is left to the operator.

use std::collections::{BTreeMap, HashMap, HashSet};
use std::io::Read;
use std::path::PathBuf;
use std::time::{Duration, UNIX_EPOCH};

use mongodb::bson::oid::ObjectId;
use mongodb::bson::{Bson, Document, doc};
use serde::Serialize;

use super::{AdminError, Backends};
use crate::catalog::mongo::{StoredPath, stored_path};
use crate::catalog::rebuild::{self, CatalogueBatches, OnStale, RebuildOptions, RebuildReport};
use crate::media::probe::{self, Format};
use crate::media::{MediaError, MediaRoots};
use crate::redis_link::RedisTarget;

/// What a finding is.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize)]
#[serde(rename_all = "snake_case")]
pub(crate) enum Kind {
    /// The document's path does not exist.
    Missing,
    /// The path resolves outside every media root.
    OutsideRoots,
    /// The file cannot be opened by this user.
    Unreadable,
    /// The file is zero bytes.
    Empty,
    /// The content is not what the extension says.
    TypeMismatch,
    /// The file ends before a length its headers declare.
    Truncated,
    /// Two or more documents name one file.
    Duplicate,
    /// An audio file under a media root that no document names.
    Orphan,
    /// A cache entry that disagrees with MongoDB or the disk.
    CacheStale,
    /// Warning: an mp4 whose index comes after its media.
    SlowStart,
    /// Warning: a variable-bitrate mp3 without a seek table.
    NoSeekTable,
    /// Warning: the document's size or mtime disagrees with the file.
    SizeDrift,
}

impl Kind {
    /// Its name in reports.
    pub(crate) fn name(self) -> &'static str {
        match self {
            Kind::Missing => "missing",
            Kind::OutsideRoots => "outside_roots",
            Kind::Unreadable => "unreadable",
            Kind::Empty => "empty",
            Kind::TypeMismatch => "type_mismatch",
            Kind::Truncated => "truncated",
            Kind::Duplicate => "duplicate",
            Kind::Orphan => "orphan",
            Kind::CacheStale => "cache_stale",
            Kind::SlowStart => "slow_start",
            Kind::NoSeekTable => "no_seek_table",
            Kind::SizeDrift => "size_drift",
        }
    }

    /// Warnings do not fail a run unless `--strict`.
    pub(crate) fn is_warning(self) -> bool {
        matches!(self, Kind::SlowStart | Kind::NoSeekTable | Kind::SizeDrift)
    }
}

/// One thing found.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub(crate) struct Finding {
    /// What it is.
    pub(crate) kind: Kind,
    /// The document's id (`None` for an orphan).
    pub(crate) id: Option<String>,
    /// The path concerned.
    pub(crate) path: String,
    /// Specifics.
    pub(crate) detail: String,
}

/// What a verify run found.
#[derive(Debug, Clone, Default, Serialize)]
pub(crate) struct VerifyReport {
    /// Documents checked.
    pub(crate) checked: u64,
    /// Findings by kind.
    pub(crate) counts: BTreeMap<&'static str, u64>,
    /// Every finding, by kind then path.
    pub(crate) findings: Vec<Finding>,
    /// Documents without an `audio_offset` whose files say it: not a finding (nothing is
    /// wrong with them), a backfill for [`fix`].
    #[serde(skip)]
    pub(crate) backfill: Vec<(ObjectId, u64)>,
}

impl VerifyReport {
    /// 0: nothing but warnings (nothing at all with `strict`); 1: findings.
    pub(crate) fn exit_code(&self, strict: bool) -> u8 {
        let failing = self.findings.iter().any(|f| strict || !f.kind.is_warning());
        u8::from(failing)
    }

    /// A table for a terminal.
    pub(crate) fn render(&self) -> String {
        let mut out = String::new();
        for finding in &self.findings {
            out.push_str(&format!(
                "{:<14} {:<24} {}  {}\n",
                finding.kind.name(),
                finding.id.as_deref().unwrap_or("-"),
                finding.path,
                finding.detail
            ));
        }
        let counts: Vec<String> = self
            .counts
            .iter()
            .map(|(k, n)| format!("{k} {n}"))
            .collect();
        out.push_str(&format!(
            "verify: {} documents checked, {}\n",
            self.checked,
            if counts.is_empty() {
                "no findings".to_string()
            } else {
                counts.join(", ")
            }
        ));
        out
    }
}

/// What [`fix`] did.
#[derive(Debug, Clone, Default, Serialize)]
pub(crate) struct Fixed {
    /// Stale cache entries removed.
    pub(crate) pruned: u64,
    /// Orphans imported.
    pub(crate) imported: u64,
    /// Documents given the `audio_offset` their files say.
    pub(crate) backfilled: u64,
}

impl VerifyReport {
    /// The safe repairs `fix` would make: stale entries to remove, orphans to import.
    pub(crate) fn repairs(&self) -> (Vec<ObjectId>, Vec<PathBuf>) {
        let stale = self
            .findings
            .iter()
            .filter(|f| f.kind == Kind::CacheStale)
            .filter_map(|f| f.id.as_deref().and_then(|id| ObjectId::parse_str(id).ok()))
            .collect();
        let orphans = self
            .findings
            .iter()
            .filter(|f| f.kind == Kind::Orphan)
            .map(|f| PathBuf::from(&f.path))
            .collect();
        (stale, orphans)
    }

    /// The exit code once `fixed` was done: repaired findings no longer count.
    pub(crate) fn exit_code_after(&self, fixed: &Fixed, strict: bool) -> u8 {
        let (stale, orphans) = self.repairs();
        let repaired = |kind: Kind| match kind {
            Kind::CacheStale => fixed.pruned >= stale.len() as u64,
            Kind::Orphan => fixed.imported >= orphans.len() as u64,
            _ => false,
        };
        let failing = self
            .findings
            .iter()
            .any(|f| !repaired(f.kind) && (strict || !f.kind.is_warning()));
        u8::from(failing)
    }
}

/// What to do about the safe repairs a check finds.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Repairs {
    /// Nothing.
    Ignore,
    /// Say what `--fix --yes` would do (`--fix`).
    Show,
    /// Make them (`--fix --yes`).
    Make,
}

/// A check and what was done about it.
#[derive(Debug, Clone, Serialize)]
pub struct Verified {
    /// The check.
    #[serde(flatten)]
    pub(crate) report: VerifyReport,
    /// What the repairs did, when they were made.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(crate) fixed: Option<Fixed>,
    #[serde(skip)]
    repairs: Repairs,
}

impl Verified {
    /// 0 when nothing but warnings is left (with `strict`, nothing at all), else 1.
    pub fn exit_code(&self, strict: bool) -> u8 {
        match &self.fixed {
            Some(fixed) => self.report.exit_code_after(fixed, strict),
            None => self.report.exit_code(strict),
        }
    }

    /// The findings, the totals, and the repairs made or possible.
    pub fn render(&self) -> String {
        let mut out = self.report.render();
        let (stale, orphans) = self.report.repairs();
        match (&self.fixed, self.repairs) {
            (Some(fixed), _) => out.push_str(&format!(
                "fixed: removed {} stale cache entries, imported {} orphans, backfilled {} audio offsets\n",
                fixed.pruned, fixed.imported, fixed.backfilled
            )),
            (None, Repairs::Show) => out.push_str(&format!(
                "--fix would remove {} stale cache entries, import {} orphans and backfill {} audio offsets (add --yes to do it)\n",
                stale.len(),
                orphans.len(),
                self.report.backfill.len()
            )),
            (None, _) => {}
        }
        out
    }
}

/// Checks the catalogue ([`verify`]), then deals with the safe repairs as `repairs` says.
pub async fn verify_and_repair(
    backends: &Backends,
    target: &RedisTarget,
    timeout: Duration,
    options: &VerifyOptions,
    repairs: Repairs,
    progress: impl FnMut(VerifyProgress),
) -> Result<Verified, AdminError> {
    let report = verify(backends, target, timeout, options, progress).await?;
    let fixed = match repairs {
        Repairs::Make => Some(fix(backends, &report).await?),
        Repairs::Ignore | Repairs::Show => None,
    };
    Ok(Verified {
        report,
        fixed,
        repairs,
    })
}

/// Makes the safe repairs of a report: removes its stale cache entries (deleting an entry
/// is always safe: the next request reads the document through), imports its orphans and
/// backfills audio offsets.
pub(crate) async fn fix(backends: &Backends, report: &VerifyReport) -> Result<Fixed, AdminError> {
    let (stale, orphans) = report.repairs();
    let mut fixed = Fixed::default();
    for id in &stale {
        backends
            .cache
            .forget(id)
            .await
            .map_err(|crate::catalog::cache::CacheError::Link(err)| AdminError::Redis(err))?;
        fixed.pruned += 1;
    }
    if !orphans.is_empty() {
        let imported = super::import::import_files(backends, &orphans).await?;
        fixed.imported = (imported.inserted.len() + imported.already_present) as u64;
    }
    let collection = backends.store.collection();
    for (id, offset) in &report.backfill {
        // Only where the field is still absent: a value written since the check is kept.
        let set = collection
            .update_one(
                doc! { "_id": id, "audio_offset": { "$exists": false } },
                doc! { "$set": { "audio_offset": i64::try_from(*offset).unwrap_or(i64::MAX) } },
            )
            .await?;
        fixed.backfilled += set.modified_count;
    }
    Ok(fixed)
}

/// How to verify.
#[derive(Debug, Clone)]
pub struct VerifyOptions {
    /// Documents per batch.
    pub batch: usize,
    /// Also demux every file to its end (`--deep`).
    pub deep: bool,
}

/// Progress, for a progress line.
#[derive(Debug, Clone, Copy)]
pub struct VerifyProgress {
    /// Documents checked so far.
    pub checked: u64,
    /// Findings so far.
    pub findings: u64,
}

/// One document's file, as the catalogue pass saw it.
struct Checked {
    findings: Vec<Finding>,
    /// The canonical path's [`path_key`], when the file is under a root (for duplicates
    /// and orphans).
    canonical: Option<u64>,
    id: ObjectId,
    /// The file's audio offset, when the document has none.
    backfill: Option<u64>,
}

/// A canonical path as 8 bytes: what the catalogue names is remembered for the whole run
/// (to find duplicates and orphans), and a path is ~100 bytes. A 64-bit collision could
/// hide one orphan in 2^64; duplicates are confirmed on their real paths.
fn path_key(path: &std::path::Path) -> u64 {
    use std::hash::{Hash, Hasher};
    let mut hasher = std::hash::DefaultHasher::new();
    path.hash(&mut hasher);
    hasher.finish()
}

/// Walks the catalogue, the media roots and the cache.
pub(crate) async fn verify(
    backends: &Backends,
    target: &RedisTarget,
    timeout: Duration,
    options: &VerifyOptions,
    mut progress: impl FnMut(VerifyProgress),
) -> Result<VerifyReport, AdminError> {
    let batch_size = options.batch.max(1);
    let field = backends.store.path_field().to_string();
    let mut report = VerifyReport::default();
    let mut named: HashMap<u64, Vec<ObjectId>> = HashMap::new();
    let projection = doc! { &field: 1, "size": 1, "mtime": 1, "audio_offset": 1 };
    let mut batches = CatalogueBatches::open(backends, projection, batch_size, false).await?;
    let cores = std::thread::available_parallelism().map_or(1, std::num::NonZero::get);
    // One batch is checked while the next is read from the cursor.
    let mut checking: Option<tokio::task::JoinHandle<Result<Vec<Checked>, String>>> = None;
    while !batches.exhausted() || checking.is_some() {
        let mut next = None;
        if !batches.exhausted() {
            let batch = batches.next().await?;
            report.checked += batch.len() as u64;
            if !batch.is_empty() {
                let (roots, field) = (backends.roots.clone(), field.clone());
                next = Some(tokio::spawn(check_batch(
                    roots,
                    field,
                    batch,
                    options.deep,
                    cores,
                )));
            }
        }
        if let Some(previous) = checking.take() {
            let checked = previous
                .await
                .map_err(|e| e.to_string())
                .and_then(|checked| checked)
                .map_err(|e| AdminError::Usage(format!("file check failed: {e}")))?;
            for file in checked {
                report.findings.extend(file.findings);
                if let Some(canonical) = file.canonical {
                    named.entry(canonical).or_default().push(file.id);
                }
                if let Some(offset) = file.backfill {
                    report.backfill.push((file.id, offset));
                }
            }
            progress(VerifyProgress {
                checked: report.checked,
                findings: report.findings.len() as u64,
            });
        }
        checking = next;
    }
    let shared: Vec<ObjectId> = named
        .values()
        .filter(|ids| ids.len() > 1)
        .flatten()
        .copied()
        .collect();
    report
        .findings
        .extend(duplicates(backends, &field, shared).await?);
    let roots = backends.roots.clone();
    let known: HashSet<u64> = named.into_keys().collect();
    let orphans = tokio::task::spawn_blocking(move || orphans(&roots, &known))
        .await
        .map_err(|e| AdminError::Usage(format!("walking the media roots failed: {e}")))??;
    report.findings.extend(orphans);
    let mut stale = Vec::new();
    let scan = RebuildOptions {
        dry_run: true,
        prune: true,
        batch: batch_size,
        versioned: false,
    };
    rebuild::scan_stale(
        backends,
        target,
        timeout,
        &scan,
        &mut RebuildReport::default(),
        &mut |_| {},
        OnStale::Collect(&mut stale),
    )
    .await?;
    report
        .findings
        .extend(stale.into_iter().map(|entry| Finding {
            kind: Kind::CacheStale,
            id: Some(entry.id.to_hex()),
            path: String::from_utf8_lossy(&entry.value).into_owned(),
            detail: entry.reason.to_string(),
        }));
    report
        .findings
        .sort_by(|a, b| (a.kind, &a.path, &a.id).cmp(&(b.kind, &b.path, &b.id)));
    for finding in &report.findings {
        *report.counts.entry(finding.kind.name()).or_default() += 1;
    }
    Ok(report)
}

/// A batch's files, checked on the blocking pool in one share per core: the work is
/// opening and reading files (and with `deep`, demuxing them), which parallelises.
async fn check_batch(
    roots: MediaRoots,
    field: String,
    batch: Vec<Document>,
    deep: bool,
    cores: usize,
) -> Result<Vec<Checked>, String> {
    let share = batch.len().div_ceil(cores.max(1)).max(1);
    let roots = std::sync::Arc::new(roots);
    let field = std::sync::Arc::new(field);
    let mut batch = batch;
    let mut shares = Vec::new();
    while !batch.is_empty() {
        let rest = batch.split_off(share.min(batch.len()));
        let mine = std::mem::replace(&mut batch, rest);
        let (roots, field) = (std::sync::Arc::clone(&roots), std::sync::Arc::clone(&field));
        shares.push(tokio::task::spawn_blocking(move || {
            mine.iter()
                .filter_map(|document| check_document(&roots, &field, document, deep))
                .collect::<Vec<_>>()
        }));
    }
    let mut checked = Vec::new();
    for share in shares {
        checked.extend(share.await.map_err(|e| e.to_string())?);
    }
    Ok(checked)
}

/// One document: where its path leads, and what its file is. `None` for a document
/// without an id (nothing can name it in a report).
fn check_document(
    roots: &MediaRoots,
    field: &str,
    document: &Document,
    deep: bool,
) -> Option<Checked> {
    let id = document.get_object_id("_id").ok()?;
    let finding = |kind: Kind, path: &str, detail: String| Finding {
        kind,
        id: Some(id.to_hex()),
        path: path.to_string(),
        detail,
    };
    let path = match stored_path(document, field) {
        StoredPath::Path(path) => path,
        StoredPath::Invalid(why) => {
            return Some(Checked {
                findings: vec![finding(Kind::Missing, "", format!("no usable path: {why}"))],
                canonical: None,
                id,
                backfill: None,
            });
        }
    };
    let mut checked = Checked {
        findings: Vec::new(),
        canonical: None,
        id,
        backfill: None,
    };
    let mut file = match roots.open(&path) {
        Ok(file) => file,
        Err(err) => {
            let kind = match &err {
                MediaError::OutsideRoots | MediaError::NotAbsolute | MediaError::Symlink => {
                    Kind::OutsideRoots
                }
                MediaError::Missing | MediaError::NotAFile => Kind::Missing,
                MediaError::Unreadable(_) | MediaError::Exhausted(_) => {
                    // Unreadable files still count for duplicates and orphans.
                    checked.canonical = roots.confine(&path).ok().map(|(p, _)| path_key(&p));
                    Kind::Unreadable
                }
            };
            checked.findings.push(finding(kind, &path, err.to_string()));
            return Some(checked);
        }
    };
    checked.canonical = Some(path_key(&file.path));
    let len = file.metadata.len();
    if let Some(drift) = drift(document, &file.metadata) {
        checked
            .findings
            .push(finding(Kind::SizeDrift, &path, drift));
    }
    if len == 0 {
        checked
            .findings
            .push(finding(Kind::Empty, &path, "0 bytes".into()));
        return Some(checked);
    }
    let mut head = [0u8; 4096];
    let got = match read_head(&mut file.file, &mut head) {
        Ok(got) => got,
        Err(err) => {
            checked
                .findings
                .push(finding(Kind::Unreadable, &path, err.to_string()));
            return Some(checked);
        }
    };
    let promised = file
        .path
        .extension()
        .and_then(|e| e.to_str())
        .and_then(Format::of_extension);
    let found = probe::sniff(&head[..got]);
    let format = match (promised, found) {
        (Some(promised), Some(found)) if promised == found => Some(found),
        (Some(promised), found) => {
            let what = found.map_or("nothing audio recognised", Format::name);
            checked.findings.push(finding(
                Kind::TypeMismatch,
                &path,
                format!("named {}, content is {what}", promised.name()),
            ));
            found
        }
        (None, found) => found,
    };
    // As import reads it: the content's format, else the name's.
    if !document.contains_key("audio_offset")
        && let Some(format) = found.or(promised)
    {
        checked.backfill = probe::audio_offset(&mut file.file, len, format)
            .ok()
            .flatten();
    }
    if let Some(format) = format {
        match probe::headers(&mut file.file, len, format) {
            Ok(headers) => {
                let deep_truncation = if deep && headers.truncated.is_none() {
                    demuxed_truncation(&file)
                } else {
                    None
                };
                if let Some(declared) = headers.truncated.or(deep_truncation) {
                    checked
                        .findings
                        .push(finding(Kind::Truncated, &path, declared));
                }
                if headers.slow_start {
                    checked.findings.push(finding(
                        Kind::SlowStart,
                        &path,
                        "moov after mdat: players fetch the end before playing".into(),
                    ));
                }
                if headers.no_seek_table {
                    checked.findings.push(finding(
                        Kind::NoSeekTable,
                        &path,
                        "variable bitrate without a Xing, Info or VBRI header: seeking is a guess"
                            .into(),
                    ));
                }
            }
            Err(err) => checked
                .findings
                .push(finding(Kind::Unreadable, &path, err.to_string())),
        }
    }
    Some(checked)
}

/// `--deep`: every packet read to the end; a stream that breaks, or holds fewer sample
/// frames than its container declares, is truncated.
fn demuxed_truncation(file: &crate::media::MediaFile) -> Option<String> {
    use std::io::Seek;
    let mut handle = file.file.try_clone().ok()?;
    handle.seek(std::io::SeekFrom::Start(0)).ok()?;
    let extension = file.path.extension().and_then(|e| e.to_str());
    match probe::demux_to_end(handle, extension) {
        Ok((demuxed, largest)) => demuxed.truncation(largest),
        // A format symphonia does not read (WavPack, APE, DSD, MIDI, AMR, AC-3) is not
        // judged by it.
        Err(_) => None,
    }
}

fn read_head(file: &mut std::fs::File, head: &mut [u8]) -> std::io::Result<usize> {
    let mut filled = 0;
    while filled < head.len() {
        match file.read(&mut head[filled..]) {
            Ok(0) => break,
            Ok(n) => filled += n,
            Err(err) if err.kind() == std::io::ErrorKind::Interrupted => {}
            Err(err) => return Err(err),
        }
    }
    Ok(filled)
}

/// The document's `size` and `mtime` (what `import` records) against the file's.
fn drift(document: &Document, metadata: &std::fs::Metadata) -> Option<String> {
    let mut drifted = Vec::new();
    let recorded_size = match document.get("size") {
        Some(Bson::Int64(n)) => Some(*n),
        Some(Bson::Int32(n)) => Some(i64::from(*n)),
        _ => None,
    };
    let size = i64::try_from(metadata.len()).unwrap_or(i64::MAX);
    if let Some(recorded) = recorded_size
        && recorded != size
    {
        drifted.push(format!("size {recorded} recorded, {size} on disk"));
    }
    let recorded_mtime = match document.get("mtime") {
        Some(Bson::DateTime(at)) => Some(at.timestamp_millis()),
        Some(Bson::Int64(ms)) => Some(*ms),
        _ => None,
    };
    let mtime = metadata
        .modified()
        .ok()
        .and_then(|t| t.duration_since(UNIX_EPOCH).ok())
        .and_then(|d| i64::try_from(d.as_millis()).ok());
    if let (Some(recorded), Some(mtime)) = (recorded_mtime, mtime)
        && recorded != mtime
    {
        drifted.push(format!("mtime {recorded} ms recorded, {mtime} ms on disk"));
    }
    (!drifted.is_empty()).then(|| drifted.join("; "))
}

/// The documents whose files other documents name too, confirmed on their canonical paths
/// (read again: only their keys were kept), one finding each.
async fn duplicates(
    backends: &Backends,
    field: &str,
    ids: Vec<ObjectId>,
) -> Result<Vec<Finding>, AdminError> {
    if ids.is_empty() {
        return Ok(Vec::new());
    }
    let wanted: Vec<Bson> = ids.into_iter().map(Bson::ObjectId).collect();
    let mut found = backends
        .store
        .collection()
        .find(doc! { "_id": { "$in": wanted } })
        .projection(doc! { field: 1 })
        .await?;
    let mut by_file: HashMap<PathBuf, Vec<(ObjectId, String)>> = HashMap::new();
    while let Some(document) = futures_util::TryStreamExt::try_next(&mut found).await? {
        let (Ok(id), StoredPath::Path(path)) =
            (document.get_object_id("_id"), stored_path(&document, field))
        else {
            continue;
        };
        if let Ok((canonical, _)) = backends.roots.confine(&path) {
            by_file.entry(canonical).or_default().push((id, path));
        }
    }
    let mut findings = Vec::new();
    for (canonical, documents) in by_file.into_iter().filter(|(_, d)| d.len() > 1) {
        let ids: Vec<String> = documents.iter().map(|(id, _)| id.to_hex()).collect();
        for (id, path) in &documents {
            findings.push(Finding {
                kind: Kind::Duplicate,
                id: Some(id.to_hex()),
                path: path.clone(),
                detail: format!(
                    "{} documents name {}: {}",
                    documents.len(),
                    canonical.display(),
                    ids.join(", ")
                ),
            });
        }
    }
    Ok(findings)
}

/// Audio files under the roots that no document names.
fn orphans(roots: &MediaRoots, known: &HashSet<u64>) -> Result<Vec<Finding>, AdminError> {
    let mut found = Vec::new();
    for root in roots.roots() {
        for path in super::import::audio_files(root)? {
            let canonical = std::fs::canonicalize(&path).unwrap_or_else(|_| path.clone());
            if !known.contains(&path_key(&canonical)) {
                found.push(Finding {
                    kind: Kind::Orphan,
                    id: None,
                    path: path.display().to_string(),
                    detail: "no document names this file".into(),
                });
            }
        }
    }
    Ok(found)
}
