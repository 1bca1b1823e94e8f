//! musicd: serve a music catalogue over HTTP, by track id.
//!
//! A request's path through the crate, and who owns each step:
//!
//! 1. [`server::Server`] is the front door: built from a [`config::Config`], it runs one
//!    event loop per core. `http::accept` accepts connections up to the cap (beyond, the
//!    503 of `http::h1::busy`) and spreads them over the loops.
//! 2. `http::h1` speaks HTTP/1.1 on each connection (RFC 9112: heads, framing, Host,
//!    Expect, clocks, staged close) and knows no route: it hands each request to the
//!    application through the one trait of [`http::service`], and sends the answer it gets
//!    back (`writev`, `sendfile`, pacing).
//! 3. `http::endpoint` is that application: `http::dispatch` picks the handler (the track
//!    route, `/healthz`, the axum router for the other ops endpoints) and applies the rules
//!    every route shares: 405/501, CORS (`http::access::cors`), listener roles. Then the
//!    endpoint counts the exchange in [`http::metrics`] and builds its access-log line
//!    (`http::access_log`).
//! 4. `http::track` answers the track route: it checks a signed link ([`signing`], before
//!    any lookup), then [`catalog::Resolver`] turns the ObjectId into a path: the in-process
//!    cache, Redis (`catalog::cache`), MongoDB on a miss (`catalog::mongo`), written back
//!    under a lease the follower can revoke, concurrent misses coalesced. [`redis_link`]
//!    keeps Redis optional; `catalog::evictions` empties the in-process cache of what the
//!    follower changed.
//! 5. [`media`] confines the path to the media roots and opens the file.
//! 6. [`http::file`] answers with the file's bytes: conditional requests
//!    (`http::file::conditional`), ranges ([`http::file::range`]), HEAD, offload headers for
//!    nginx; hot files from its cache.
//!
//! Beside the requests, [`follow`] keeps the Redis index current from MongoDB's change
//! stream (one follower per index, under a lease in Redis), tells every musicd, and bans
//! what changed in the HTTP caches in front (`follow::bans`, through [`varnish`]). When
//! the stream cannot be resumed it runs the fenced rebuild of [`catalog::rebuild`], the
//! same one `musicctl reindex` runs.
//!
//! [`admin`] holds what `musicctl` does, one file per command, each returning a report the
//! binary prints: `admin::purge` purges Redis, every musicd's in-process cache and (through
//! [`varnish`]) the HTTP caches; `admin::sign` makes the links [`signing`] checks.
//! [`blocking_http`] is the small client for asking an HTTP server without a runtime
//! (`musicd status`, `compare`); [`varnish`] sends the one kind of request the caches in
//! front take, asynchronously. [`daemon`] runs the server (foreground, or supervised
//! forever-style) and [`cli`] holds what both binaries share on the command line;
//! [`allocator`] is the daemon's global allocator.
//!
//! The layers, lowest first; a module imports only from its own layer or below, and
//! `tests/integration/boundaries.rs` checks it:
//!
//! | layer | modules |
//! |---|---|
//! | base | [`allocator`], [`config`], [`media`], [`signing`], [`redis_link`], [`blocking_http`], [`varnish`], [`timing`], [`cli`] |
//! | catalogue | [`catalog`]: id to path, fenced fills, the rebuild |
//! | follower | [`follow`] |
//! | HTTP | [`http`], then [`server`] |
//! | process | [`daemon`] |
//! | operator | [`admin`], then the binaries |

#![deny(missing_docs)]
// Most of the crate is `pub(crate)`: its docs are read with `--document-private-items`,
// where these links resolve.
#![allow(rustdoc::private_intra_doc_links)]

pub mod admin;
pub mod allocator;
pub mod blocking_http;
pub mod catalog;
pub mod cli;
pub mod config;
pub mod daemon;
pub mod follow;
pub mod http;
pub mod media;
pub mod redis_link;
pub mod server;
pub mod signing;
pub mod timing;
pub mod varnish;
