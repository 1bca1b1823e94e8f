//! `musicctl compare`: the cut-over check. The same track URLs are fetched from the
//! running musicd and from another server with the same URL scheme (the old Node
//! service), and each answer is compared: status, length, content type and a SHA-256 of
//! the body. The old service's habit of answering an unknown id with `200 "no file"` is
//! flagged for what it is.

use serde::Serialize;
use sha2::{Digest, Sha256};

/// One server's answer to one URL.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Fetched {
    /// The status, or 0 when there was no answer.
    pub status: u16,
    /// Body bytes.
    pub length: u64,
    /// `Content-Type`, when sent.
    pub content_type: Option<String>,
    /// SHA-256 of the body, hex.
    pub sha256: String,
    /// A 200 whose body is the old service's `no file`.
    pub no_file: bool,
    /// Why there was no answer.
    pub error: Option<String>,
}

/// The comparison of one track.
#[derive(Debug, Clone, Serialize)]
pub struct Comparison {
    /// The track id.
    pub id: String,
    /// musicd's answer.
    pub musicd: Fetched,
    /// The other server's.
    pub other: Fetched,
    /// Status, length, type and body all agree.
    pub agree: bool,
    /// What differs.
    pub differences: Vec<String>,
}

/// Compares the answers of `musicd` and `other` (both `http://host:port`) for `path`.
pub fn compare(musicd: &str, other: &str, id: &str, path: &str) -> Comparison {
    let ours = fetch(musicd, path);
    let theirs = fetch(other, path);
    let mut differences = Vec::new();
    if ours.status != theirs.status {
        differences.push(format!("status {} vs {}", ours.status, theirs.status));
    }
    if theirs.no_file {
        differences.push("the other server answered 200 \"no file\"".into());
    }
    if ours.status == theirs.status && ours.status / 100 == 2 {
        if ours.length != theirs.length {
            differences.push(format!("length {} vs {}", ours.length, theirs.length));
        }
        if ours.sha256 != theirs.sha256 {
            differences.push("body differs".into());
        }
        if ours.content_type != theirs.content_type {
            differences.push(format!(
                "content type {} vs {}",
                ours.content_type.as_deref().unwrap_or("-"),
                theirs.content_type.as_deref().unwrap_or("-")
            ));
        }
    }
    Comparison {
        id: id.to_string(),
        agree: differences.is_empty(),
        musicd: ours,
        other: theirs,
        differences,
    }
}

/// GET `base` + `path` ([`crate::blocking_http`]).
pub fn fetch(base: &str, path: &str) -> Fetched {
    match crate::blocking_http::request(base, "GET", path, &[]) {
        Ok(answer) => Fetched {
            status: answer.status,
            length: answer.body.len() as u64,
            no_file: answer.status == 200 && answer.body.trim_ascii() == b"no file",
            sha256: hex(&Sha256::digest(&answer.body)),
            content_type: answer.content_type,
            error: None,
        },
        Err(error) => Fetched {
            status: 0,
            length: 0,
            content_type: None,
            sha256: String::new(),
            no_file: false,
            error: Some(error.to_string()),
        },
    }
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}
