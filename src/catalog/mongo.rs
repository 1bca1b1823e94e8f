//! The MongoDB side of the catalogue: the source of truth for id -> path.
//!
//! Only the configured path field is ever read (a projection), so large documents with tags
//! and artwork cost nothing. The client is created without connecting: musicd starts and
//! serves cached ids while MongoDB is still down, and each lookup is bounded by the
//! configured timeout as a whole (selection, connecting, and the query on a connection
//! already open, which nothing else bounds), after which the caller answers 503.

use std::time::{Duration, Instant};

use mongodb::bson::oid::ObjectId;
use mongodb::bson::{Bson, Document, doc};
use mongodb::options::ClientOptions;
use mongodb::{Client, Collection, Database};

use crate::config::MongoConfig;

/// Why MongoDB could not answer.
#[derive(Debug, thiserror::Error)]
pub enum StoreError {
    /// The connection string is invalid.
    #[error("invalid mongodb uri: {0}")]
    Uri(#[source] mongodb::error::Error),
    /// No server answered, or the query failed.
    #[error("mongodb: {0}")]
    Query(#[from] mongodb::error::Error),
    /// The task running the query died.
    #[error("lookup task failed: {0}")]
    Task(String),
    /// No answer within the configured timeout (a hung server, or packets lost on a
    /// connection already open: the driver's own timeouts bound selecting a server and
    /// connecting, not a query on a pooled connection).
    #[error("mongodb: no answer within {0:?}")]
    Timeout(Duration),
    /// Too many lookups already wait on MongoDB (it hangs, or cannot keep up).
    #[error("mongodb busy: {0} lookups already waiting")]
    Busy(usize),
}

impl StoreError {
    /// Whether MongoDB hangs (no answer within the timeout) rather than refusing or
    /// failing: what `/readyz` and `musicctl health` tell an operator.
    pub(crate) fn is_hang(&self) -> bool {
        match self {
            StoreError::Timeout(_) | StoreError::Busy(_) => true,
            // The driver's own deadline (selecting a server the monitor cannot reach)
            // can fire first; its text is what tells a silence from a refusal.
            StoreError::Query(err) => err.to_string().contains("timed out"),
            StoreError::Uri(_) | StoreError::Task(_) => false,
        }
    }
}

/// What a document says about its file.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum StoredPath {
    /// The path field is a string.
    Path(String),
    /// The document exists but its path field is missing or not a string.
    Invalid(String),
}

impl StoredPath {
    /// The name a link gives the track: its file's name, or `track` without one.
    pub fn file_name(&self) -> String {
        match self {
            StoredPath::Path(p) => std::path::Path::new(p)
                .file_name()
                .map_or_else(|| "track".into(), |n| n.to_string_lossy().into_owned()),
            StoredPath::Invalid(_) => "track".into(),
        }
    }
}

/// The tracks collection.
#[derive(Clone)]
pub struct TrackStore {
    client: Client,
    database: Database,
    collection: Collection<Document>,
    path_field: String,
    timeout: Duration,
    /// Whether the last lookup timed out, to log the transitions once each.
    timing_out: std::sync::Arc<std::sync::atomic::AtomicBool>,
    /// Lookups waiting on MongoDB now: bounded, so a hung server cannot gather requests.
    waiting: std::sync::Arc<std::sync::atomic::AtomicUsize>,
}

/// Lookups that may wait on MongoDB at once while it answers: past this, a request gets
/// 503 at once rather than queueing behind the driver's pool.
const MAX_WAITING: usize = 1024;

/// The same while the last lookup timed out (MongoDB hangs, or a partition): a few
/// lookups keep probing it, and the first answer lifts the bound back to [`MAX_WAITING`].
/// Without it, every uncached id asked during a hang holds a connection and its memory for
/// the whole timeout.
const WAITING_WHILE_HUNG: usize = 8;

/// A lookup's place among the waiting; given back on drop.
pub(crate) struct Waiting(std::sync::Arc<std::sync::atomic::AtomicUsize>);

impl Drop for Waiting {
    fn drop(&mut self) {
        self.0.fetch_sub(1, std::sync::atomic::Ordering::AcqRel);
    }
}

impl TrackStore {
    /// Builds a client for `config`; does not connect yet.
    pub(crate) async fn new(config: &MongoConfig) -> Result<TrackStore, StoreError> {
        let mut options = ClientOptions::parse(&config.uri)
            .await
            .map_err(StoreError::Uri)?;
        options.app_name.get_or_insert_with(|| "musicd".to_string());
        options.server_selection_timeout = Some(config.timeout);
        options.connect_timeout = Some(config.timeout);
        let client = Client::with_options(options).map_err(StoreError::Uri)?;
        let database = client.database(&config.database);
        let collection = database.collection::<Document>(&config.collection);
        Ok(TrackStore {
            client,
            database,
            collection,
            path_field: config.path_field.clone(),
            timeout: config.timeout,
            timing_out: std::sync::Arc::default(),
            waiting: std::sync::Arc::default(),
        })
    }

    /// The collection, for admin commands that walk or fill it.
    pub fn collection(&self) -> &Collection<Document> {
        &self.collection
    }

    /// The field holding the path.
    pub(crate) fn path_field(&self) -> &str {
        &self.path_field
    }

    /// The client, for shutting it down.
    pub(crate) fn client(&self) -> &Client {
        &self.client
    }

    /// Looks a track up by id; `None` when no document has this id. Bounded by the
    /// configured timeout whatever the state of the connection.
    pub async fn find_path(&self, id: &ObjectId) -> Result<Option<StoredPath>, StoreError> {
        let turn = self.wait_turn()?;
        self.find_path_in_turn(id, turn).await
    }

    /// [`TrackStore::find_path`] with a place among the waiting already taken
    /// ([`TrackStore::wait_turn`]), so a caller can be refused before doing anything else.
    pub(crate) async fn find_path_in_turn(
        &self,
        id: &ObjectId,
        _turn: Waiting,
    ) -> Result<Option<StoredPath>, StoreError> {
        let query = self
            .collection
            .find_one(doc! { "_id": id })
            .projection(doc! { &self.path_field: 1 });
        let found = match tokio::time::timeout(self.timeout, query).await {
            // Only an answer lifts the bound on waiting lookups: a driver error of its own
            // (no server selectable) during an outage is not one.
            Ok(Ok(found)) => {
                if self
                    .timing_out
                    .swap(false, std::sync::atomic::Ordering::Relaxed)
                {
                    tracing::info!("mongodb answers lookups again");
                }
                found
            }
            Ok(Err(err)) => return Err(StoreError::Query(err)),
            Err(_) => {
                if !self
                    .timing_out
                    .swap(true, std::sync::atomic::Ordering::Relaxed)
                {
                    tracing::warn!(
                        timeout = ?self.timeout,
                        "mongodb lookups time out: ids not in Redis get 503 + Retry-After"
                    );
                }
                return Err(StoreError::Timeout(self.timeout));
            }
        };
        Ok(found.map(|document| stored_path(&document, &self.path_field)))
    }

    /// Takes a place among the lookups waiting on MongoDB, or says it is busy.
    pub(crate) fn wait_turn(&self) -> Result<Waiting, StoreError> {
        use std::sync::atomic::Ordering;
        let bound = if self.timing_out.load(Ordering::Relaxed) {
            WAITING_WHILE_HUNG
        } else {
            MAX_WAITING
        };
        let before = self.waiting.fetch_add(1, Ordering::AcqRel);
        let turn = Waiting(std::sync::Arc::clone(&self.waiting));
        if before >= bound {
            return Err(StoreError::Busy(before));
        }
        Ok(turn)
    }

    /// Lookups waiting on MongoDB now (for `/metrics`).
    pub(crate) fn waiting(&self) -> usize {
        self.waiting.load(std::sync::atomic::Ordering::Relaxed)
    }

    /// Round-trip time of a `ping` to the database, bounded by the configured timeout.
    pub(crate) async fn ping(&self) -> Result<Duration, StoreError> {
        let started = Instant::now();
        tokio::time::timeout(self.timeout, self.database.run_command(doc! { "ping": 1 }))
            .await
            .map_err(|_| StoreError::Timeout(self.timeout))??;
        Ok(started.elapsed())
    }
}

/// Reads the path field of a document.
pub(crate) fn stored_path(document: &Document, field: &str) -> StoredPath {
    match document.get(field) {
        Some(Bson::String(path)) => StoredPath::Path(path.clone()),
        Some(other) => StoredPath::Invalid(format!(
            "field `{field}` is a {:?}, not a string",
            other.element_type()
        )),
        None => StoredPath::Invalid(format!("field `{field}` is missing")),
    }
}
