//! The integration tests: one binary over one harness, a module per feature (the way
//! ripgrep does it), so the crate is linked once instead of once per file.
//!
//! Every module drives real servers (`redis-server`, `mongod`, nginx, Chromium, GoAccess)
//! that [`harness`] starts privately on free loopback ports; tests run in parallel.

mod harness;

mod access_control;
mod access_log;
mod allocations;
mod binaries;
mod boundaries;
mod conformance;
mod deploy;
mod docs;
mod drain;
mod faults;
mod fleet;
mod health_reindex;
mod history;
mod http_contract;
mod image;
mod limits;
mod nginx;
mod package;
mod pgo;
mod players;
mod plays;
mod purge;
mod regression;
mod replay;
mod resolver_faults;
mod revoke;
mod rollout;
mod supervisor;
mod truth;
mod varnish;
mod verify;
mod watch;
mod wire;
