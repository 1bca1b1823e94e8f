//! The MongoDB side of the catalogue: the source of truth for id -> path.
//!
//! Only the configured path field is ever read (a projection), so large documents with tags
//! and artwork cost nothing. The client is created without connecting: musicd starts and
//! serves cached ids while MongoDB is still down, and each query is bounded by the
//! configured timeout (server selection), after which the caller answers 503.

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
}

/// What a document says about its file.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum StoredPath {
    /// The path field is a string.
    Path(String),
    /// The document exists but its path field is missing or not a string.
    Invalid(String),
}

/// The tracks collection.
#[derive(Clone)]
pub struct TrackStore {
    client: Client,
    database: Database,
    collection: Collection<Document>,
    path_field: String,
}

impl TrackStore {
    /// Builds a client for `config`; does not connect yet.
    pub async fn new(config: &MongoConfig) -> Result<TrackStore, StoreError> {
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
        })
    }

    /// The collection, for admin commands that walk or fill it.
    pub fn collection(&self) -> &Collection<Document> {
        &self.collection
    }

    /// The field holding the path.
    pub fn path_field(&self) -> &str {
        &self.path_field
    }

    /// The client, for shutting it down.
    pub fn client(&self) -> &Client {
        &self.client
    }

    /// Looks a track up by id; `None` when no document has this id.
    pub async fn find_path(&self, id: &ObjectId) -> Result<Option<StoredPath>, StoreError> {
        let found = self
            .collection
            .find_one(doc! { "_id": id })
            .projection(doc! { &self.path_field: 1 })
            .await?;
        Ok(found.map(|document| stored_path(&document, &self.path_field)))
    }

    /// Round-trip time of a `ping` to the database.
    pub async fn ping(&self) -> Result<Duration, StoreError> {
        let started = Instant::now();
        self.database.run_command(doc! { "ping": 1 }).await?;
        Ok(started.elapsed())
    }
}

/// Reads the path field of a document.
pub fn stored_path(document: &Document, field: &str) -> StoredPath {
    match document.get(field) {
        Some(Bson::String(path)) => StoredPath::Path(path.clone()),
        Some(other) => StoredPath::Invalid(format!(
            "field `{field}` is a {:?}, not a string",
            other.element_type()
        )),
        None => StoredPath::Invalid(format!("field `{field}` is missing")),
    }
}
