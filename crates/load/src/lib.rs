//! Traffic tools for musicd: real traffic against a service and what it saw, and what the
//! access logs say was played.
//!
//! `musicctl replay`, `players` and `plays` run them; the `musicd` daemon never does, so
//! they live in a crate of their own that only `musicctl` links.
//!
//! * [`replay`] sends the requests of access logs again, at their pace or faster, to one
//!   service or two side by side;
//! * [`players`] simulates listeners who probe, buffer, play, seek and skip, paced at a
//!   bitrate, and counts their stalls;
//! * [`plays`] counts the plays in access logs, by the rules rights holders audit;
//! * `traffic` is what both share: reading logs, one timed exchange, the counts,
//!   histograms and per-second timeline, and the HTML report.

#![deny(missing_docs)]

pub mod players;
pub mod plays;
pub mod replay;
mod traffic;

/// Why a run could not start or finish.
#[derive(Debug, thiserror::Error)]
pub enum LoadError {
    /// The arguments do not make sense.
    #[error("{0}")]
    Usage(String),
    /// A file could not be read.
    #[error("{path}: {source}")]
    Io {
        /// Which file.
        path: String,
        /// Why.
        source: std::io::Error,
    },
    /// A worker task stopped before it finished.
    #[error("a worker task failed: {0}")]
    Task(#[from] tokio::task::JoinError),
}
