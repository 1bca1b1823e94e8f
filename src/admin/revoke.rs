//! `musicctl revoke`: takes back every link of a session or of a signing key, at every
//! musicd and in the caches in front, within a second ([`crate::signing::revoked`]); lists
//! and ends revocations.

use serde::Serialize;

use super::{AdminError, Backends};
use crate::config::Config;
use crate::signing::revoked::{self, Subject};
use crate::signing::valid_session;
use crate::timing::unix_secs;

/// What to do.
#[derive(Debug, Clone)]
pub enum RevokeAction {
    /// Revoke a session (`sid`) or a key (`kid`), until a time (default: for as long as
    /// a session link may live, `signing.revocation_ttl`).
    Add {
        /// `sid:S` or `kid:K`.
        subject: String,
        /// Unix seconds.
        until: Option<u64>,
    },
    /// End a revocation now.
    Remove {
        /// `sid:S` or `kid:K`.
        subject: String,
    },
    /// Every revocation in force.
    List,
}

/// One revocation in force.
#[derive(Debug, Clone, Serialize)]
pub struct Listed {
    /// `sid:S` or `kid:K`.
    pub subject: String,
    /// When it ends, Unix seconds.
    pub until: u64,
}

/// What `musicctl revoke` did.
#[derive(Debug, Clone, Serialize)]
pub struct RevokeReport {
    /// `revoke`, `remove` or `list`.
    pub action: &'static str,
    /// What was revoked or restored.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub subject: Option<String>,
    /// When the revocation ends.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub until: Option<u64>,
    /// The processes subscribed to the announcement (every musicd, and a follower).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub heard_by: Option<u64>,
    /// With `remove`: whether there was a revocation to end.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub removed: Option<bool>,
    /// With `list`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub revocations: Option<Vec<Listed>>,
}

impl RevokeReport {
    /// Always 0: a revocation that could not be recorded is an error (2).
    pub fn exit_code(&self) -> u8 {
        0
    }

    /// For a terminal.
    pub fn render(&self) -> String {
        match (&self.revocations, &self.subject) {
            (Some(list), _) => {
                let mut out = format!("{} revocations in force\n", list.len());
                for entry in list {
                    out.push_str(&format!("  {}  until {}\n", entry.subject, entry.until));
                }
                out
            }
            (None, Some(subject)) if self.action == "remove" => format!(
                "{subject}: {}\n",
                if self.removed == Some(true) {
                    "restored"
                } else {
                    "was not revoked"
                }
            ),
            (None, Some(subject)) => format!(
                "{subject}: revoked until {} (heard by {} subscribers now; caches in front follow within a second)\n",
                self.until.unwrap_or(0),
                self.heard_by.unwrap_or(0)
            ),
            (None, None) => String::new(),
        }
    }
}

/// `sid:S` or `kid:K` as a subject, or why not.
fn subject(text: &str) -> Result<Subject, AdminError> {
    Subject::parse(text).ok_or_else(|| {
        AdminError::Usage(match text.split_once(':') {
            Some(("sid", sid)) if !valid_session(sid) => {
                format!("`{sid}` is not a session id: 1 to 128 of A-Z a-z 0-9 - . _ ~")
            }
            _ => format!("`{text}` names no session or key"),
        })
    })
}

/// Does `action` against the index's Redis.
pub async fn revoke(
    config: &Config,
    backends: &Backends,
    action: RevokeAction,
) -> Result<RevokeReport, AdminError> {
    let link = backends.cache.link();
    let prefix = backends.cache.prefix();
    let now = unix_secs();
    match action {
        RevokeAction::Add {
            subject: text,
            until,
        } => {
            let subject = subject(&text)?;
            let until = until.unwrap_or(now + config.signing.revocation_ttl.as_secs());
            if until <= now {
                return Err(AdminError::Usage(format!(
                    "--until {until} is not in the future"
                )));
            }
            let heard = revoked::revoke(link, prefix, &subject, until, now).await?;
            Ok(RevokeReport {
                action: "revoke",
                subject: Some(subject.member()),
                until: Some(until),
                heard_by: Some(heard),
                removed: None,
                revocations: None,
            })
        }
        RevokeAction::Remove { subject: text } => {
            let subject = subject(&text)?;
            let removed = revoked::unrevoke(link, prefix, &subject).await?;
            Ok(RevokeReport {
                action: "remove",
                subject: Some(subject.member()),
                until: None,
                heard_by: None,
                removed: Some(removed),
                revocations: None,
            })
        }
        RevokeAction::List => {
            let listed = revoked::list(link, prefix, now).await?;
            Ok(RevokeReport {
                action: "list",
                subject: None,
                until: None,
                heard_by: None,
                removed: None,
                revocations: Some(
                    listed
                        .into_iter()
                        .map(|(subject, until)| Listed {
                            subject: subject.member(),
                            until,
                        })
                        .collect(),
                ),
            })
        }
    }
}
