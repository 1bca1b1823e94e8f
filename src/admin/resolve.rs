//! `musicctl resolve ID`: what the cache, the database and the disk say about one track.

use mongodb::bson::oid::ObjectId;
use serde::Serialize;

use super::{AdminError, Backends};
use crate::catalog::{Cached, StoredPath};

/// The answer of each layer for one id.
#[derive(Debug, Serialize)]
pub struct ResolveReport {
    /// The id.
    pub(crate) id: String,
    /// The Redis key.
    pub(crate) key: String,
    /// `path`, `negative`, `absent` or `error: ...`.
    pub(crate) cache: String,
    /// The cached path, if any.
    pub(crate) cached_path: Option<String>,
    /// `found`, `not found`, `invalid: ...` or `error: ...`.
    pub(crate) database: String,
    /// The document's path, if any.
    pub(crate) database_path: Option<String>,
    /// The canonical file, when it would be served.
    pub(crate) file: Option<String>,
    /// Why it would not be served, if so.
    pub(crate) problem: Option<String>,
    /// Whether musicd would serve the id.
    pub(crate) servable: bool,
}

impl ResolveReport {
    /// 0 when musicd would serve the id, else 1.
    pub fn exit_code(&self) -> u8 {
        u8::from(!self.servable)
    }

    /// The report for a terminal, one line per place looked.
    pub fn render(&self) -> String {
        let file = match (&self.file, &self.problem) {
            (Some(file), _) => format!("{file} (served)"),
            (None, Some(problem)) => format!("not served: {problem}"),
            (None, None) => "not served".into(),
        };
        format!(
            "id        {}\nkey       {}\nredis     {} {}\nmongodb   {} {}\nfile      {file}\n",
            self.id,
            self.key,
            self.cache,
            self.cached_path.as_deref().unwrap_or(""),
            self.database,
            self.database_path.as_deref().unwrap_or(""),
        )
    }
}

/// Inspects one id in Redis, MongoDB and on disk.
pub async fn resolve(backends: &Backends, id: &str) -> Result<ResolveReport, AdminError> {
    let oid = ObjectId::parse_str(id)
        .map_err(|_| AdminError::Usage(format!("`{id}` is not a 24-digit hex ObjectId")))?;
    let (cache, cached_path) = match backends.cache.get(&oid).await {
        Ok(Cached::Path(p)) => ("path".to_string(), Some(p)),
        Ok(Cached::Absent) => ("negative".to_string(), None),
        Ok(Cached::Unknown) => ("absent".to_string(), None),
        Err(e) => (format!("error: {e}"), None),
    };
    let (database, database_path) = match backends.store.find_path(&oid).await {
        Ok(Some(StoredPath::Path(p))) => ("found".to_string(), Some(p)),
        Ok(Some(StoredPath::Invalid(why))) => (format!("invalid: {why}"), None),
        Ok(None) => ("not found".to_string(), None),
        Err(e) => (format!("error: {e}"), None),
    };
    // musicd serves what the cache says first, so check that path when there is one.
    let effective = cached_path.clone().or_else(|| database_path.clone());
    let (file, problem) = match &effective {
        None => (None, Some("no path known for this id".to_string())),
        Some(raw) => match backends.roots.open(raw) {
            Ok(media) => (Some(media.path.display().to_string()), None),
            Err(e) => (None, Some(e.to_string())),
        },
    };
    Ok(ResolveReport {
        id: oid.to_hex(),
        key: backends.cache.key(&oid),
        servable: file.is_some(),
        cache,
        cached_path,
        database,
        database_path,
        file,
        problem,
    })
}
