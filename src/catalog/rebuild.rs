//! The fenced rebuild: the Redis index written again from MongoDB, and optionally pruned.
//! `musicctl reindex` runs it, and so does the change-stream follower when its stream
//! cannot be resumed (`crate::follow`); neither imports the other.
//!
//! Documents stream from a cursor in batches (memory stays flat for any collection size);
//! each batch's paths are checked on the blocking pool (exists, regular file, under a
//! media root: the same rule the server applies) while the next batch is fetched, and the
//! good ones are written with the configured TTL in one pipelined round trip per batch.
//! `--prune` then scans the cache (every master of a cluster) and removes entries whose id
//! is gone from MongoDB, whose file is gone, or whose path no longer matches the document.

use std::collections::HashMap;
use std::time::{Duration, Instant};

use futures_util::TryStreamExt;
use mongodb::bson::oid::ObjectId;
use mongodb::bson::{Bson, Document, doc};
use serde::Serialize;

use super::backends::Backends;
use super::cache::Fill;
use super::mongo::{StoredPath, stored_path};
use crate::media::{MediaError, MediaRoots};
use crate::redis_link::{self, RedisTarget};

/// Why a rebuild stopped.
#[derive(Debug, thiserror::Error)]
pub enum RebuildError {
    /// MongoDB failed (the cursor, or a batch read again).
    #[error("mongodb: {0}")]
    Mongo(#[from] mongodb::error::Error),
    /// Redis failed (listing the masters, a scan).
    #[error(transparent)]
    Redis(#[from] redis_link::LinkError),
    /// A batch's file check stopped before it finished.
    #[error("a path check failed: {0}")]
    Check(#[from] tokio::task::JoinError),
}

/// How to rebuild.
#[derive(Debug, Clone)]
pub struct RebuildOptions {
    /// Check everything, write nothing.
    pub dry_run: bool,
    /// Also remove stale cache entries.
    pub prune: bool,
    /// Documents per batch (and keys per prune step).
    pub batch: usize,
    /// Fence the writes as the follower's are ([`crate::catalog::cache`]): each carries
    /// the cluster time read before the documents, so a write of a follower that was cut
    /// off (older than this rebuild, delivered by TCP after it) cannot undo it. The
    /// follower's rebuild sets it; an operator's `reindex` does not, since each entry
    /// written then keeps a version key for 30 minutes.
    pub versioned: bool,
}

/// What a reindex did (or, in a dry run, would do).
#[derive(Debug, Default, Clone, Serialize)]
pub struct RebuildReport {
    /// Documents read.
    pub(crate) documents: u64,
    /// Cache entries written.
    pub(crate) indexed: u64,
    /// Documents whose file does not exist (or is not a regular file).
    pub(crate) missing_file: u64,
    /// Documents whose path resolves outside the media roots.
    pub(crate) outside_roots: u64,
    /// Documents without a usable id or path.
    pub(crate) invalid_document: u64,
    /// Entries whose write failed.
    pub(crate) write_failed: u64,
    /// Entries not written because the change-stream follower changed them while this
    /// batch was read (its write stands), or whose document was deleted meanwhile.
    pub(crate) changed_meanwhile: u64,
    /// Cache entries examined by `--prune`.
    pub(crate) cache_entries: u64,
    /// Stale cache entries removed by `--prune`.
    pub(crate) pruned: u64,
    /// Fill leases of lookups under way, revoked at the start (their next miss fills).
    pub(crate) leases_revoked: u64,
    /// Wall time in seconds.
    pub(crate) seconds: f64,
    /// Whether this was a dry run.
    pub(crate) dry_run: bool,
    /// Whether stale cache entries were looked for.
    #[serde(skip)]
    pub(crate) prune: bool,
}

/// Progress, for a progress line.
#[derive(Debug, Clone, Copy)]
pub struct RebuildProgress {
    /// Documents read so far.
    pub documents: u64,
    /// Entries written so far.
    pub indexed: u64,
    /// Cache entries pruned so far.
    pub pruned: u64,
}

enum Verdict {
    Index(ObjectId, String),
    Missing,
    Outside,
    Invalid,
}

/// Rebuilds the cache from MongoDB (and prunes it when asked).
pub async fn rebuild(
    backends: &Backends,
    target: &RedisTarget,
    timeout: Duration,
    options: &RebuildOptions,
    mut progress: impl FnMut(RebuildProgress),
) -> Result<RebuildReport, RebuildError> {
    let started = Instant::now();
    let batch_size = options.batch.max(1);
    let field = backends.store.path_field().to_string();
    let mut report = RebuildReport {
        dry_run: options.dry_run,
        prune: options.prune,
        ..RebuildReport::default()
    };
    if !options.dry_run {
        // Leases first: a lookup that took one earlier may have read MongoDB before what
        // this rebuild was run for (a document deleted while the follower was down), and
        // its fill, landing after the prune, would bring the entry back. Revoked after,
        // a lease used up by its fill would be missed. The rebuild's own come later.
        let mut glob = escape_glob(backends.cache.prefix().as_bytes());
        glob.push(b'*');
        report.leases_revoked = super::cache::revoke_leases(target, timeout, &glob)
            .await
            .map_err(|super::cache::CacheError::Link(err)| RebuildError::Redis(err))?;
    }
    let version = match options.versioned && !options.dry_run {
        true => read_version(backends).await?,
        false => None,
    };
    let primary = version.is_some();
    let mut batches =
        CatalogueBatches::open(backends, doc! { &field: 1 }, batch_size, primary).await?;
    // One batch is checked on the blocking pool while the next is read from the cursor.
    let mut checking: Option<tokio::task::JoinHandle<Checked>> = None;
    while !batches.exhausted() || checking.is_some() {
        let mut next = None;
        if !batches.exhausted() {
            let batch = batches.next().await?;
            report.documents += batch.len() as u64;
            if !batch.is_empty() {
                let leased =
                    lease_and_reread(backends, &field, batch, options.dry_run, primary).await?;
                let roots = backends.roots.clone();
                let field = field.clone();
                next = Some(tokio::task::spawn_blocking(move || Checked {
                    verdicts: classify(&roots, &field, leased.documents),
                    fills: leased.fills,
                    gone: leased.gone,
                }));
            }
        }
        if let Some(previous) = checking.take() {
            let checked = previous.await.map_err(RebuildError::Check)?;
            write_batch(
                backends,
                checked,
                options.dry_run,
                version.as_deref(),
                &mut report,
            )
            .await;
            progress(RebuildProgress {
                documents: report.documents,
                indexed: report.indexed,
                pruned: 0,
            });
        }
        checking = next;
    }
    if options.prune {
        scan_stale(
            backends,
            target,
            timeout,
            options,
            &mut report,
            &mut progress,
            OnStale::Remove(version.as_deref()),
        )
        .await?;
    }
    report.seconds = started.elapsed().as_secs_f64();
    Ok(report)
}

/// The cluster time of a read made on the primary before the rebuild's first: every
/// change at or before it is in what the rebuild reads (from the primary too, whatever the
/// URI's read preference: a lagging secondary could miss some), and every change after it
/// is replayed by the stream opened before the rebuild, with a newer version. `None`
/// without a replica set (no follower runs there).
async fn read_version(backends: &Backends) -> Result<Option<String>, RebuildError> {
    let mut session = backends.store.client().start_session().await?;
    backends
        .store
        .collection()
        .find_one(doc! {})
        .projection(doc! { "_id": 1 })
        .selection_criteria(primary_only())
        .session(&mut session)
        .await?;
    Ok(session
        .operation_time()
        .map(|time| super::cache::change_version(Some(time))))
}

fn primary_only() -> mongodb::options::SelectionCriteria {
    mongodb::options::SelectionCriteria::ReadPreference(mongodb::options::ReadPreference::Primary)
}

/// The whole catalogue, read from one cursor a batch at a time: memory stays flat for
/// any collection size (`reindex`, `verify`).
pub(crate) struct CatalogueBatches {
    cursor: mongodb::Cursor<Document>,
    size: usize,
    exhausted: bool,
}

impl CatalogueBatches {
    /// A cursor over every document, with only the fields of `projection`; from the
    /// primary when `primary`, whatever the URI's read preference.
    pub(crate) async fn open(
        backends: &Backends,
        projection: Document,
        size: usize,
        primary: bool,
    ) -> Result<CatalogueBatches, RebuildError> {
        let find = backends
            .store
            .collection()
            .find(doc! {})
            .projection(projection)
            .batch_size(u32::try_from(size).unwrap_or(u32::MAX));
        let cursor = match primary {
            true => find.selection_criteria(primary_only()).await?,
            false => find.await?,
        };
        Ok(CatalogueBatches {
            cursor,
            size: size.max(1),
            exhausted: false,
        })
    }

    /// Whether the last batch was read.
    pub(crate) fn exhausted(&self) -> bool {
        self.exhausted
    }

    /// The next batch: full, or short (and then the last).
    pub(crate) async fn next(&mut self) -> Result<Vec<Document>, RebuildError> {
        let mut batch = Vec::with_capacity(self.size);
        while batch.len() < self.size {
            match self.cursor.try_next().await? {
                Some(document) => batch.push(document),
                None => break,
            }
        }
        self.exhausted = batch.len() < self.size;
        Ok(batch)
    }
}

fn classify(roots: &MediaRoots, field: &str, batch: Vec<Document>) -> Vec<Verdict> {
    batch
        .into_iter()
        .map(|document| {
            let Ok(id) = document.get_object_id("_id") else {
                return Verdict::Invalid;
            };
            let StoredPath::Path(path) = stored_path(&document, field) else {
                return Verdict::Invalid;
            };
            match roots.open(&path) {
                Ok(_) => Verdict::Index(id, path),
                Err(MediaError::OutsideRoots | MediaError::NotAbsolute) => Verdict::Outside,
                Err(_) => Verdict::Missing,
            }
        })
        .collect()
}

/// A batch read again under fill leases.
struct Leased {
    /// The documents as read after the leases were taken.
    documents: Vec<Document>,
    /// Each id's lease; empty in a dry run, or when Redis refused the leases.
    fills: HashMap<ObjectId, Fill>,
    /// Ids deleted between the cursor's read and this one.
    gone: u64,
}

/// A batch whose files were checked.
struct Checked {
    verdicts: Vec<Verdict>,
    fills: HashMap<ObjectId, Fill>,
    gone: u64,
}

/// Takes a fill lease for every id of `batch`, then reads their documents again: what is
/// written is what MongoDB said after the lease, so a change the follower applies later
/// revokes it and the follower's write stands ([`crate::catalog::cache`]). The cursor's
/// read alone came too early: a change applied between it and the write was undone, until
/// the entry's TTL. A dry run writes nothing, so it keeps the cursor's documents.
async fn lease_and_reread(
    backends: &Backends,
    field: &str,
    batch: Vec<Document>,
    dry_run: bool,
    primary: bool,
) -> Result<Leased, RebuildError> {
    let unleased = |documents| Leased {
        documents,
        fills: HashMap::new(),
        gone: 0,
    };
    if dry_run {
        return Ok(unleased(batch));
    }
    let ids: Vec<ObjectId> = batch
        .iter()
        .filter_map(|document| document.get_object_id("_id").ok())
        .collect();
    let fills = match backends.cache.begin_fills(&ids).await {
        Ok(fills) => fills,
        Err(err) => {
            // Nothing can be written without a lease; the batch is still checked and counted.
            tracing::warn!(error = %err, entries = ids.len(), "cache leases failed");
            return Ok(unleased(batch));
        }
    };
    let invalid: Vec<Document> = batch
        .into_iter()
        .filter(|document| document.get_object_id("_id").is_err())
        .collect();
    let find = backends
        .store
        .collection()
        .find(doc! { "_id": { "$in": &ids } })
        .projection(doc! { field: 1 });
    let found = match primary {
        true => find.selection_criteria(primary_only()).await?,
        false => find.await?,
    };
    let mut documents: Vec<Document> = found.try_collect().await?;
    let gone = (ids.len() - documents.len().min(ids.len())) as u64;
    documents.extend(invalid);
    Ok(Leased {
        documents,
        fills: ids.into_iter().zip(fills).collect(),
        gone,
    })
}

async fn write_batch(
    backends: &Backends,
    checked: Checked,
    dry_run: bool,
    version: Option<&str>,
    report: &mut RebuildReport,
) {
    let Checked {
        verdicts,
        mut fills,
        gone,
    } = checked;
    report.changed_meanwhile += gone;
    let mut entries = Vec::with_capacity(verdicts.len());
    for verdict in verdicts {
        match verdict {
            Verdict::Index(id, path) => entries.push((id, path)),
            Verdict::Missing => report.missing_file += 1,
            Verdict::Outside => report.outside_roots += 1,
            Verdict::Invalid => report.invalid_document += 1,
        }
    }
    if dry_run {
        report.indexed += entries.len() as u64;
        return;
    }
    let wanted = entries.len() as u64;
    let leased: Vec<(Fill, String)> = entries
        .into_iter()
        .filter_map(|(id, path)| Some((fills.remove(&id)?, path)))
        .collect();
    // The leases of what is not written (no file, outside the roots, deleted meanwhile).
    let unused: Vec<Fill> = fills.into_values().collect();
    if let Err(err) = backends.cache.release_fills(unused).await {
        tracing::debug!(error = %err, "unused leases not released: they expire");
    }
    let count = leased.len() as u64;
    // Without a lease (Redis refused them), an entry is not written.
    report.write_failed += wanted - count;
    if count == 0 {
        return;
    }
    match backends.cache.complete_fills(leased, version).await {
        Ok(written) => {
            report.indexed += written;
            report.changed_meanwhile += count - written;
        }
        Err(err) => {
            tracing::warn!(error = %err, entries = count, "cache write failed");
            report.write_failed += count;
        }
    }
}

/// A cache entry that disagrees with MongoDB or the disk.
#[derive(Debug, Clone)]
pub(crate) struct StaleEntry {
    /// The id its key names.
    pub(crate) id: ObjectId,
    /// What it holds: a path, or empty for a negative entry.
    pub(crate) value: Vec<u8>,
    /// Why it is stale.
    pub(crate) reason: &'static str,
}

/// What to do with the stale entries a scan finds.
pub(crate) enum OnStale<'a> {
    /// Remove them (count only, with `dry_run`), revoking their fill leases, fenced by
    /// this version when there is one ([`RebuildOptions::versioned`]).
    Remove(Option<&'a str>),
    /// Keep them for a report.
    Collect(&'a mut Vec<StaleEntry>),
}

/// Scans every cache entry (each master of a cluster) and checks it against MongoDB and
/// the disk: `reindex --prune` removes what disagrees, `verify` reports it.
pub(crate) async fn scan_stale(
    backends: &Backends,
    target: &RedisTarget,
    timeout: Duration,
    options: &RebuildOptions,
    report: &mut RebuildReport,
    progress: &mut impl FnMut(RebuildProgress),
    mut on_stale: OnStale<'_>,
) -> Result<(), RebuildError> {
    let prefix = backends.cache.prefix().as_bytes().to_vec();
    let mut pattern = escape_glob(&prefix);
    pattern.push(b'*');
    for master in redis_link::masters(target, timeout).await? {
        let mut conn = redis_link::connect_node(&master, timeout).await?;
        let mut cursor: u64 = 0;
        loop {
            let (next, keys): (u64, Vec<Vec<u8>>) = redis::cmd("SCAN")
                .arg(cursor)
                .arg("MATCH")
                .arg(pattern.as_slice())
                .arg("COUNT")
                .arg(options.batch)
                .query_async(&mut conn)
                .await
                .map_err(redis_link::LinkError::from)?;
            report.cache_entries += keys.len() as u64;
            let stale = stale_keys(backends, &mut conn, &prefix, keys).await?;
            match &mut on_stale {
                OnStale::Collect(found) => {
                    report.pruned += stale.len() as u64;
                    found.extend(stale.into_iter().map(|(_, entry)| entry));
                }
                OnStale::Remove(_) if options.dry_run => report.pruned += stale.len() as u64,
                OnStale::Remove(version) if !stale.is_empty() => {
                    let version_ttl = crate::timing::redis_ms(super::cache::VERSION_TTL);
                    let mut pipe = redis::pipe();
                    for (key, _) in &stale {
                        // Entry, lease and version share a slot: one script per key.
                        let key = String::from_utf8_lossy(key);
                        pipe.cmd("EVAL")
                            .arg(super::cache::PRUNE_SOURCE)
                            .arg(3)
                            .arg(key.as_bytes())
                            .arg(super::cache::fill_key(&key))
                            .arg(super::cache::version_key(&key))
                            .arg(version.unwrap_or(""))
                            .arg(version_ttl);
                    }
                    let removed: Vec<u64> = pipe
                        .query_async(&mut conn)
                        .await
                        .map_err(redis_link::LinkError::from)?;
                    report.pruned += removed.iter().sum::<u64>();
                }
                OnStale::Remove(_) => {}
            }
            progress(RebuildProgress {
                documents: report.documents,
                indexed: report.indexed,
                pruned: report.pruned,
            });
            cursor = next;
            if cursor == 0 {
                break;
            }
        }
    }
    Ok(())
}

/// The keys of a SCAN step that no longer tell the truth, with why.
async fn stale_keys(
    backends: &Backends,
    conn: &mut redis::aio::MultiplexedConnection,
    prefix: &[u8],
    keys: Vec<Vec<u8>>,
) -> Result<Vec<(Vec<u8>, StaleEntry)>, RebuildError> {
    let mut parsed = Vec::with_capacity(keys.len());
    for key in keys {
        // Keys under the prefix that are not `{prefix}{objectid}` are not ours: left alone.
        let id = std::str::from_utf8(&key[prefix.len().min(key.len())..])
            .ok()
            .and_then(|hex| ObjectId::parse_str(hex).ok());
        if let Some(id) = id {
            parsed.push((key, id));
        }
    }
    if parsed.is_empty() {
        return Ok(Vec::new());
    }
    let mut pipe = redis::pipe();
    for (key, _) in &parsed {
        pipe.cmd("GET").arg(key.as_slice());
    }
    let values: Vec<Option<Vec<u8>>> = pipe
        .query_async(conn)
        .await
        .map_err(redis_link::LinkError::from)?;
    let ids: Vec<Bson> = parsed.iter().map(|(_, id)| Bson::ObjectId(*id)).collect();
    let field = backends.store.path_field().to_string();
    let mut truth: HashMap<ObjectId, StoredPath> = HashMap::with_capacity(ids.len());
    let mut found = backends
        .store
        .collection()
        .find(doc! { "_id": { "$in": ids } })
        .projection(doc! { &field: 1 })
        .await?;
    while let Some(document) = found.try_next().await? {
        if let Ok(id) = document.get_object_id("_id") {
            truth.insert(id, stored_path(&document, &field));
        }
    }
    let roots = backends.roots.clone();
    let checks: Vec<(Vec<u8>, ObjectId, Option<Vec<u8>>)> = parsed
        .into_iter()
        .zip(values)
        .map(|((key, id), value)| (key, id, value))
        .collect();
    let stale = tokio::task::spawn_blocking(move || {
        checks
            .into_iter()
            .filter_map(|(key, id, value)| {
                // Expired between SCAN and GET: nothing to do.
                let value = value?;
                let reason = match (value.as_slice(), truth.get(&id)) {
                    (&[], Some(_)) => "a negative entry for a document that exists",
                    (&[], None) => return None,
                    (_, None) => "an entry for a deleted document",
                    (cached, Some(StoredPath::Path(path))) if cached != path.as_bytes() => {
                        "the entry's path differs from the document's"
                    }
                    (_, Some(StoredPath::Path(path))) => {
                        roots.open(path).err()?;
                        "the entry's file is gone"
                    }
                    (_, Some(StoredPath::Invalid(_))) => "the document has no usable path",
                };
                Some((key, StaleEntry { id, value, reason }))
            })
            .collect::<Vec<_>>()
    })
    .await
    .map_err(RebuildError::Check)?;
    Ok(stale)
}

/// Escapes glob metacharacters so a prefix matches literally in `SCAN MATCH`.
pub(crate) fn escape_glob(literal: &[u8]) -> Vec<u8> {
    let mut out = Vec::with_capacity(literal.len());
    for &b in literal {
        if matches!(b, b'*' | b'?' | b'[' | b']' | b'\\') {
            out.push(b'\\');
        }
        out.push(b);
    }
    out
}
