//! What one change-stream event means for the Redis index: a pure function, so every rule
//! is tested without a server.
//!
//! | event | index |
//! |---|---|
//! | insert | drop the id's entry (a negative one, cached when a player asked too early), so the new track plays at once; the next request reads it through |
//! | update setting the path field | write the new path (usual TTL) |
//! | update removing the path field | drop the entry (the next request reads the bad document and answers accordingly) |
//! | update not touching the path | nothing (the server-side filter does not even send it) |
//! | replace | write the document's path, or drop the entry when it has none |
//! | delete | a negative entry |
//! | drop, rename, dropDatabase | a full rebuild (`reindex --prune`) |
//! | invalidate | the stream ends: continue after it, rebuild |

use mongodb::bson::oid::ObjectId;
use mongodb::bson::{Bson, Document, doc};
use mongodb::change_stream::event::{ChangeStreamEvent, OperationType};

/// What to do to the index for one event.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum IndexChange {
    /// Cache this path for this id.
    Path(ObjectId, String),
    /// Remove the id's entry.
    Forget(ObjectId),
    /// Cache "this id does not exist".
    Absent(ObjectId),
    /// Rebuild the whole index from the collection.
    Rebuild,
    /// The stream is over: reopen it after this event, then rebuild.
    Invalidated,
    /// Nothing to write.
    Nothing,
}

/// The operations counted by `musicd_watch_events_total`.
pub(crate) const OPERATIONS: [&str; 6] =
    ["insert", "update", "replace", "delete", "rebuild", "other"];

/// The index in [`OPERATIONS`] an event's operation is counted under.
pub(crate) fn operation_index(operation: &OperationType) -> u8 {
    match operation {
        OperationType::Insert => 0,
        OperationType::Update => 1,
        OperationType::Replace => 2,
        OperationType::Delete => 3,
        OperationType::Drop
        | OperationType::Rename
        | OperationType::DropDatabase
        | OperationType::Invalidate => 4,
        _ => 5,
    }
}

/// The index change `event` calls for, `path_field` being the document's path field.
pub(crate) fn index_change(event: &ChangeStreamEvent<Document>, path_field: &str) -> IndexChange {
    let id = || {
        event
            .document_key
            .as_ref()
            .and_then(|key| key.get_object_id("_id").ok())
    };
    match &event.operation_type {
        OperationType::Insert => id().map_or(IndexChange::Nothing, IndexChange::Forget),
        OperationType::Delete => id().map_or(IndexChange::Nothing, IndexChange::Absent),
        OperationType::Replace => match id() {
            Some(id) => match event.full_document.as_ref().and_then(|d| d.get(path_field)) {
                Some(Bson::String(path)) => IndexChange::Path(id, path.clone()),
                _ => IndexChange::Forget(id),
            },
            None => IndexChange::Nothing,
        },
        OperationType::Update => {
            let (Some(id), Some(update)) = (id(), event.update_description.as_ref()) else {
                return IndexChange::Nothing;
            };
            match update.updated_fields.get(path_field) {
                Some(Bson::String(path)) => IndexChange::Path(id, path.clone()),
                Some(_) => IndexChange::Forget(id),
                None if update.removed_fields.iter().any(|f| f == path_field) => {
                    IndexChange::Forget(id)
                }
                None => IndexChange::Nothing,
            }
        }
        OperationType::Drop | OperationType::Rename | OperationType::DropDatabase => {
            IndexChange::Rebuild
        }
        OperationType::Invalidate => IndexChange::Invalidated,
        _ => IndexChange::Nothing,
    }
}

/// The server-side stages: only events that can change the index leave MongoDB, and of a
/// document only its path field (tracks may carry tags and artwork). `_id`,
/// `operationType` and `ns` stay: the driver needs them to resume.
pub(crate) fn pipeline(path_field: &str) -> Vec<Document> {
    let updated = format!("updateDescription.updatedFields.{path_field}");
    let full_path = format!("fullDocument.{path_field}");
    vec![
        doc! { "$match": { "$or": [
            { "operationType": { "$in": [
                "insert", "replace", "delete", "drop", "rename", "dropDatabase", "invalidate"
            ] } },
            { "operationType": "update", "$or": [
                { &updated: { "$exists": true } },
                { "updateDescription.removedFields": path_field },
            ] },
        ] } },
        doc! { "$project": {
            "operationType": 1, "ns": 1, "to": 1, "documentKey": 1, "clusterTime": 1,
            "wallTime": 1, "updateDescription": 1, &full_path: 1,
        } },
    ]
}

#[cfg(test)]
mod tests {
    use super::*;

    fn event(json: Document) -> ChangeStreamEvent<Document> {
        let mut json = json;
        json.insert("_id", doc! { "_data": "00" });
        mongodb::bson::deserialize_from_document(json).expect("event")
    }

    fn id() -> ObjectId {
        ObjectId::parse_str("64b7f0c2a1b2c3d4e5f60718").expect("oid")
    }

    #[test]
    fn an_update_of_the_path_writes_the_new_path() {
        let e = event(doc! {
            "operationType": "update", "documentKey": { "_id": id() },
            "updateDescription": { "updatedFields": { "path": "/m/new.mp3", "plays": 3 }, "removedFields": [] },
        });
        assert_eq!(
            index_change(&e, "path"),
            IndexChange::Path(id(), "/m/new.mp3".into())
        );
    }

    #[test]
    fn an_update_of_other_fields_writes_nothing() {
        let e = event(doc! {
            "operationType": "update", "documentKey": { "_id": id() },
            "updateDescription": { "updatedFields": { "plays": 3 }, "removedFields": ["genre"] },
        });
        assert_eq!(index_change(&e, "path"), IndexChange::Nothing);
    }

    #[test]
    fn removing_the_path_or_making_it_a_non_string_forgets_the_entry() {
        let removed = event(doc! {
            "operationType": "update", "documentKey": { "_id": id() },
            "updateDescription": { "updatedFields": {}, "removedFields": ["path"] },
        });
        assert_eq!(index_change(&removed, "path"), IndexChange::Forget(id()));
        let number = event(doc! {
            "operationType": "update", "documentKey": { "_id": id() },
            "updateDescription": { "updatedFields": { "path": 7 }, "removedFields": [] },
        });
        assert_eq!(index_change(&number, "path"), IndexChange::Forget(id()));
    }

    #[test]
    fn inserts_forget_deletes_cache_absence_replaces_write_the_path() {
        let insert = event(doc! {
            "operationType": "insert", "documentKey": { "_id": id() },
            "fullDocument": { "_id": id(), "path": "/m/a.mp3" },
        });
        assert_eq!(index_change(&insert, "path"), IndexChange::Forget(id()));
        let delete = event(doc! { "operationType": "delete", "documentKey": { "_id": id() } });
        assert_eq!(index_change(&delete, "path"), IndexChange::Absent(id()));
        let replace = event(doc! {
            "operationType": "replace", "documentKey": { "_id": id() },
            "fullDocument": { "_id": id(), "file": "/m/b.mp3" },
        });
        assert_eq!(
            index_change(&replace, "file"),
            IndexChange::Path(id(), "/m/b.mp3".into())
        );
        assert_eq!(index_change(&replace, "path"), IndexChange::Forget(id()));
    }

    #[test]
    fn collection_level_events_rebuild() {
        for op in ["drop", "rename", "dropDatabase"] {
            assert_eq!(
                index_change(&event(doc! { "operationType": op }), "path"),
                IndexChange::Rebuild
            );
        }
        assert_eq!(
            index_change(&event(doc! { "operationType": "invalidate" }), "path"),
            IndexChange::Invalidated
        );
    }

    #[test]
    fn a_document_key_that_is_not_an_object_id_is_ignored() {
        let e = event(doc! { "operationType": "delete", "documentKey": { "_id": "slug" } });
        assert_eq!(index_change(&e, "path"), IndexChange::Nothing);
    }
}
