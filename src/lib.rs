//! musicd: serve a music catalogue over HTTP, by track id.
//!
//! A request's path through the crate:
//!
//! 1. [`http`] accepts the connection, routes `GET /musicdb/{id}/{name}`, and logs the
//!    request (id, status, bytes, latency, cache outcome) when its body has been sent.
//! 2. [`catalog::Resolver`] turns the ObjectId into a path: Redis first
//!    ([`catalog::cache`]), MongoDB on a miss ([`catalog::mongo`]), with the answer written
//!    back and concurrent misses coalesced. [`redis_link`] keeps Redis optional.
//! 3. [`media`] confines the path to the media roots and opens the file.
//! 4. [`http::file`] answers with the file's bytes: conditional requests
//!    ([`http::conditional`]), ranges ([`http::range`]), MIME types ([`http::mime`]), or an
//!    offload header for nginx.
//!
//! [`config`] is read once by either binary; [`admin`] holds what `musicctl` does, and
//! [`daemon`] runs the server in the foreground with signal handling.

#![deny(missing_docs)]

pub mod admin;
pub mod catalog;
pub mod config;
pub mod daemon;
pub mod http;
pub mod media;
pub mod redis_link;
