//! `musicctl reindex`: the fenced rebuild of [`crate::catalog::rebuild`], run by hand, and
//! its report.

use std::time::Duration;

use super::{AdminError, Backends};
pub use crate::catalog::rebuild::{RebuildOptions, RebuildProgress, RebuildReport};
use crate::redis_link::RedisTarget;

/// Rebuilds the cache from MongoDB (and prunes it when asked).
pub async fn reindex(
    backends: &Backends,
    target: &RedisTarget,
    timeout: Duration,
    options: &RebuildOptions,
    progress: impl FnMut(RebuildProgress),
) -> Result<RebuildReport, AdminError> {
    Ok(crate::catalog::rebuild::rebuild(backends, target, timeout, options, progress).await?)
}

impl RebuildReport {
    /// 0 unless a write failed.
    pub fn exit_code(&self) -> u8 {
        u8::from(self.write_failed > 0)
    }

    /// The report for a terminal.
    pub fn render(&self) -> String {
        let verb = if self.dry_run {
            "would index"
        } else {
            "indexed"
        };
        let mut out = format!(
            "reindex: {} documents in {:.2}s ({:.0}/s): {verb} {}, missing file {}, outside roots {}, invalid document {}, write failed {}, changed meanwhile {}\n",
            self.documents,
            self.seconds,
            self.documents as f64 / self.seconds.max(1e-9),
            self.indexed,
            self.missing_file,
            self.outside_roots,
            self.invalid_document,
            self.write_failed,
            self.changed_meanwhile
        );
        if self.prune {
            let verb = if self.dry_run {
                "would prune"
            } else {
                "pruned"
            };
            out.push_str(&format!(
                "prune: {} cache entries examined, {verb} {}\n",
                self.cache_entries, self.pruned
            ));
        }
        if self.leases_revoked > 0 {
            out.push_str(&format!(
                "leases: {} lookups under way will not write back (they fill on their next miss)\n",
                self.leases_revoked
            ));
        }
        out
    }
}
