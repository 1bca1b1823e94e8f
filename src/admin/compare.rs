//! `musicctl compare`: the cut-over check. The same track URLs are fetched from the
//! running musicd and from another server with the same URL scheme (the old Node
//! service), and each answer is compared: status, length, content type and a SHA-256 of
//! the body. The old service's habit of answering an unknown id with `200 "no file"` is
//! flagged for what it is.

use percent_encoding::{NON_ALPHANUMERIC, utf8_percent_encode};
use rand::RngExt;
use serde::Serialize;
use sha2::{Digest, Sha256};

use super::{AdminError, Backends};
use crate::config::Config;

/// One server's answer to one URL.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub(crate) struct Fetched {
    /// The status, or 0 when there was no answer.
    pub(crate) status: u16,
    /// Body bytes.
    pub(crate) length: u64,
    /// `Content-Type`, when sent.
    pub(crate) content_type: Option<String>,
    /// SHA-256 of the body, hex.
    pub(crate) sha256: String,
    /// A 200 whose body is the old service's `no file`.
    pub(crate) no_file: bool,
    /// Why there was no answer.
    pub(crate) error: Option<String>,
}

/// The comparison of one track.
#[derive(Debug, Clone, Serialize)]
pub(crate) struct Comparison {
    /// The track id.
    pub(crate) id: String,
    /// musicd's answer.
    pub(crate) musicd: Fetched,
    /// The other server's.
    pub(crate) other: Fetched,
    /// Status, length, type and body all agree.
    pub(crate) agree: bool,
    /// What differs.
    pub(crate) differences: Vec<String>,
}

/// A comparison over a sample of the catalogue.
#[derive(Debug, Clone, Serialize)]
pub struct CompareReport {
    /// Tracks compared.
    pub(crate) compared: usize,
    /// Tracks both servers answered alike.
    pub(crate) agree: usize,
    /// Tracks they answered differently.
    pub(crate) disagree: usize,
    /// Tracks the other server answered `200 "no file"`.
    pub(crate) no_file_with_200: usize,
    /// Each track.
    pub(crate) tracks: Vec<Comparison>,
}

impl CompareReport {
    /// 0 when every track agrees, else 1.
    pub fn exit_code(&self) -> u8 {
        u8::from(self.disagree > 0)
    }

    /// One line per track, then the totals.
    pub fn render(&self) -> String {
        let mut out = String::new();
        for track in &self.tracks {
            if track.agree {
                out.push_str(&format!(
                    "{}  agree  {} {} bytes\n",
                    track.id, track.musicd.status, track.musicd.length
                ));
            } else {
                out.push_str(&format!(
                    "{}  DIFFER {}\n",
                    track.id,
                    track.differences.join("; ")
                ));
            }
        }
        out.push_str(&format!(
            "compare: {} tracks, {} agree, {} differ ({} answered 200 \"no file\" by the other server)\n",
            self.compared, self.agree, self.disagree, self.no_file_with_200
        ));
        out
    }
}

/// Compares musicd at `base` (default: the configured `listen`) with the server at
/// `against`, on every track of the catalogue or a uniform random `sample` of it (drawn
/// by reservoir sampling, so the catalogue is never held whole).
pub async fn compare_catalogue(
    config: &Config,
    backends: &Backends,
    against: &str,
    base: Option<String>,
    sample: Option<usize>,
) -> Result<CompareReport, AdminError> {
    let base = base.unwrap_or_else(|| format!("http://{}", config.listen));
    let prefix = config.track_prefix().to_string();
    let mut picked: Vec<(String, String)> = Vec::new();
    let mut seen = 0usize;
    let mut rng = rand::rng();
    super::list::list(backends, None, |track| {
        let name = track.path.file_name();
        let encoded = utf8_percent_encode(&name, NON_ALPHANUMERIC);
        let entry = (
            track.id.to_hex(),
            format!("{prefix}/{}/{encoded}", track.id.to_hex()),
        );
        seen += 1;
        match sample {
            Some(n) if picked.len() >= n => {
                let at = rng.random_range(0..seen);
                if at < n {
                    picked[at] = entry;
                }
            }
            _ => picked.push(entry),
        }
    })
    .await?;
    let against = against.to_string();
    let tracks: Vec<Comparison> = tokio::task::spawn_blocking(move || {
        picked
            .iter()
            .map(|(id, path)| compare(&base, &against, id, path))
            .collect()
    })
    .await?;
    let disagree = tracks.iter().filter(|c| !c.agree).count();
    Ok(CompareReport {
        compared: tracks.len(),
        agree: tracks.len() - disagree,
        disagree,
        no_file_with_200: tracks.iter().filter(|c| c.other.no_file).count(),
        tracks,
    })
}

/// Compares the answers of `musicd` and `other` (both `http://host:port`) for `path`.
pub(crate) fn compare(musicd: &str, other: &str, id: &str, path: &str) -> Comparison {
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
pub(crate) fn fetch(base: &str, path: &str) -> Fetched {
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
