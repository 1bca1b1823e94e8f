//! The one test harness: private `redis-server` and `mongod` instances on free loopback
//! ports with temp data dirs, an in-process musicd, and helpers to fill the catalogue.
//!
//! Servers are started through one long-lived spawner thread with `PR_SET_PDEATHSIG`, so the
//! kernel kills them when the test process exits, even when a test panics or the harness
//! is interrupted; instances owned by a test are also stopped on drop. Every test gets its
//! own database name and key prefix, so tests run in parallel against shared servers.

pub mod backends;
pub mod chromium;
pub mod corpus;
pub mod daemon;
pub mod env;
pub mod fleet;
pub mod http;
pub mod load;
pub mod nginx;
pub mod procs;
pub mod raw;
pub mod server;
pub mod supervised;
pub mod varnish;
pub mod wire_check;

pub use backends::*;
pub use env::*;
pub use http::*;
pub use procs::*;
pub use server::*;
