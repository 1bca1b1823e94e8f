//! The raw shapes of the configuration: every field optional, so that "not set" is seen
//! and defaults are applied in one place ([`super::validate`]); unknown fields are
//! refused wherever they come from.

use std::path::PathBuf;

use serde::Deserialize;

use super::{AccessLogFormat, ServeMode};

/// The raw shape of the file; every field optional so that defaults live in one place.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct RawConfig {
    pub(super) listen: Option<String>,
    pub(super) ops_listen: Option<String>,
    pub(super) media_roots: Option<Vec<PathBuf>>,
    pub(super) serve_mode: Option<ServeMode>,
    pub(super) route_prefixes: Option<Vec<String>>,
    pub(super) cache_control: Option<String>,
    pub(super) max_ranges: Option<usize>,
    pub(super) accel_location: Option<String>,
    pub(super) log_level: Option<String>,
    pub(super) worker_threads: Option<usize>,
    pub(super) worker_cpu_affinity: Option<bool>,
    #[serde(default)]
    pub(super) mongodb: RawMongo,
    #[serde(default)]
    pub(super) redis: RawRedis,
    #[serde(default)]
    pub(super) daemon: RawDaemon,
    #[serde(default)]
    pub(super) cache: RawCache,
    #[serde(default)]
    pub(super) limits: RawLimits,
    pub(super) follow_symlinks: Option<bool>,
    pub(super) zero_copy: Option<bool>,
    pub(super) trusted_proxies: Option<Vec<String>>,
    pub(super) proxy_protocol: Option<bool>,
    #[serde(default)]
    pub(super) access_log: RawAccessLog,
    #[serde(default)]
    pub(super) signing: RawSigning,
    #[serde(default)]
    pub(super) cors: RawCors,
    #[serde(default)]
    pub(super) http_caches: RawHttpCaches,
    #[serde(default)]
    pub(super) shutdown: RawShutdown,
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct RawShutdown {
    pub(super) drain_delay: Option<RawDuration>,
}

/// A duration as a number of seconds or a text such as `"5s"` or `"1m 30s"`.
#[derive(Debug, Deserialize)]
#[serde(untagged)]
pub(super) enum RawDuration {
    Secs(u64),
    Text(String),
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct RawSigning {
    pub(super) required: Option<bool>,
    pub(super) keys: Option<Vec<RawKey>>,
    pub(super) revocation_ttl: Option<RawDuration>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct RawKey {
    pub(super) id: String,
    pub(super) secret_file: PathBuf,
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct RawHttpCaches {
    pub(super) ban_urls: Option<Vec<String>>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct RawCors {
    pub(super) allow_origins: Option<Vec<String>>,
    pub(super) max_age_secs: Option<u32>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct RawAccessLog {
    pub(super) format: Option<AccessLogFormat>,
    pub(super) path: Option<PathBuf>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct RawLimits {
    pub(super) header_read_timeout_secs: Option<u64>,
    pub(super) body_read_timeout_secs: Option<u64>,
    pub(super) idle_timeout_secs: Option<u64>,
    pub(super) write_timeout_secs: Option<u64>,
    pub(super) max_header_bytes: Option<usize>,
    pub(super) max_uri_bytes: Option<usize>,
    pub(super) max_connections: Option<usize>,
    pub(super) rate_after_bytes: Option<u64>,
    pub(super) rate_bytes_per_sec: Option<u64>,
    pub(super) socket_unsent_bytes: Option<u32>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct RawCache {
    pub(super) id_ttl_ms: Option<u64>,
    pub(super) id_max_entries: Option<usize>,
    pub(super) file_max_bytes: Option<u64>,
    pub(super) file_total_bytes: Option<u64>,
    pub(super) open_files: Option<usize>,
    pub(super) file_watches: Option<usize>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct RawDaemon {
    pub(super) pid_file: Option<PathBuf>,
    pub(super) log_file: Option<PathBuf>,
    pub(super) state_dir: Option<PathBuf>,
    pub(super) min_uptime_secs: Option<u64>,
    pub(super) backoff_max_secs: Option<u64>,
    pub(super) max_restarts: Option<u32>,
    pub(super) restart_window_secs: Option<u64>,
    pub(super) stop_timeout_secs: Option<u64>,
    pub(super) watchdog_secs: Option<u64>,
    pub(super) max_rss_mb: Option<u64>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct RawMongo {
    pub(super) uri: Option<String>,
    pub(super) database: Option<String>,
    pub(super) collection: Option<String>,
    pub(super) path_field: Option<String>,
    pub(super) timeout_ms: Option<u64>,
    pub(super) watch: Option<String>,
    pub(super) watch_lease_ms: Option<u64>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct RawRedis {
    pub(super) url: Option<String>,
    pub(super) cluster: Option<Vec<String>>,
    pub(super) prefix: Option<String>,
    pub(super) ttl_secs: Option<u64>,
    pub(super) negative_ttl_secs: Option<u64>,
    pub(super) ttl_jitter_percent: Option<u8>,
    pub(super) timeout_ms: Option<u64>,
}
