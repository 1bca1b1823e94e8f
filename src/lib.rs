//! musicd: serve a music catalogue over HTTP, by track id.
//!
//! A request's path through the crate:
//!
//! 1. [`http::server`] accepts the connection; [`http::h1`] reads the request head and
//!    any body (RFC 9112: framing, Host, Expect, clocks) and frames every answer.
//! 2. [`http::routes`] names the route: the track route `{prefix}/{id}[/{name}]` goes to
//!    [`http::track`], the ops endpoints (`/healthz`, `/readyz`, `/metrics`) to the axum
//!    [`http::router`].
//! 3. [`catalog::Resolver`] turns the ObjectId into a path: the in-process 1 s cache,
//!    Redis ([`catalog::cache`]), MongoDB on a miss ([`catalog::mongo`]), with the answer
//!    written back under a lease the follower can revoke, and concurrent misses coalesced.
//!    [`redis_link`] keeps Redis optional; [`catalog::evictions`] empties the in-process
//!    cache of what the follower changed.
//! 4. [`media`] confines the path to the media roots and opens the file.
//! 5. [`http::file`] answers with the file's bytes: conditional requests, ranges, HEAD,
//!    offload headers for nginx; hot files from its cache.
//! 6. `http::access_log` counts the exchange in [`http::metrics`] and logs it.
//!
//! Beside the requests, [`watch`] keeps the Redis index current from MongoDB's change
//! stream (one follower per index, under a lease in Redis), tells every musicd, and bans
//! what changed in the HTTP caches in front ([`watch::bans`]). Signed links are checked in
//! [`http::track`] with [`signing`], also for varnish's authorization probe.
//!
//! [`blocking_http`] is the one small client for asking an HTTP server without a runtime
//! (`musicd status`, `musicctl health`, bans and `compare`).
//!
//! [`config`] is read once by either binary ([`cli`] holds the command-line parts they
//! share); [`admin`] holds what `musicctl` does, and [`daemon`] runs the server
//! (foreground, per-core event loops, or supervised).

#![deny(missing_docs)]

pub mod admin;
pub mod blocking_http;
pub mod catalog;
pub mod cli;
pub mod config;
pub mod daemon;
pub mod http;
pub mod media;
pub mod redis_link;
pub mod server;
pub mod signing;
pub mod watch;
