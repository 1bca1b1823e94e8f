//! Every default of the configuration, in one place: validation applies them, and
//! `deploy/musicd.toml` states them (a test loads it and an empty file and compares).

/// Default of `listen`.
pub(crate) const LISTEN: &str = "127.0.0.1:23001";
/// Default of `media_roots` (one root).
pub(crate) const MEDIA_ROOT: &str = "/srv/music";
/// Default of `shutdown.drain_delay`: stop accepting at once, as before the setting.
pub(crate) const SHUTDOWN_DRAIN_DELAY: &str = "0s";
/// Default of `route_prefixes`.
pub(crate) const ROUTE_PREFIXES: [&str; 2] = ["/musicdb", "/stream/musicdb"];
/// Default of `accel_location`.
pub(crate) const ACCEL_LOCATION: &str = "/internal";
/// Default of `max_ranges`.
pub(crate) const MAX_RANGES: usize = 16;
/// Default of `mongodb.path_field`.
pub(crate) const MONGODB_PATH_FIELD: &str = "path";
/// Default of `mongodb.uri`.
pub(crate) const MONGODB_URI: &str = "mongodb://127.0.0.1:27017";
/// Default of `mongodb.database`.
pub(crate) const MONGODB_DATABASE: &str = "musicdb";
/// Default of `mongodb.collection`.
pub(crate) const MONGODB_COLLECTION: &str = "tracks";
/// Default of `mongodb.timeout_ms`.
pub(crate) const MONGODB_TIMEOUT_MS: u64 = 2000;
/// Default of `mongodb.watch`.
pub(crate) const MONGODB_WATCH: &str = "auto";
/// Default of `mongodb.watch_lease_ms`: how long a dead follower blocks a successor.
pub(crate) const MONGODB_WATCH_LEASE_MS: u64 = 10_000;
/// Default of `redis.ttl_secs`.
pub(crate) const REDIS_TTL_SECS: u64 = 86_400;
/// Default of `redis.negative_ttl_secs`.
pub(crate) const REDIS_NEGATIVE_TTL_SECS: u64 = 60;
/// Default of `redis.ttl_jitter_percent`.
pub(crate) const REDIS_TTL_JITTER_PERCENT: u8 = 10;
/// Default of `redis.prefix`.
pub(crate) const REDIS_PREFIX: &str = "track_";
/// Default of `redis.url`.
pub(crate) const REDIS_URL: &str = "redis://127.0.0.1:6379";
/// Default of `redis.timeout_ms`.
pub(crate) const REDIS_TIMEOUT_MS: u64 = 250;
/// Default of `daemon.pid_file`.
pub(crate) const DAEMON_PID_FILE: &str = "/run/musicd/musicd.pid";
/// Default of `daemon.log_file`.
pub(crate) const DAEMON_LOG_FILE: &str = "/var/log/musicd/musicd.log";
/// Default of `daemon.state_dir`.
pub(crate) const DAEMON_STATE_DIR: &str = "/var/lib/musicd";
/// Default of `daemon.backoff_max_secs`.
pub(crate) const DAEMON_BACKOFF_MAX_SECS: u64 = 30;
/// Default of `daemon.min_uptime_secs`.
pub(crate) const DAEMON_MIN_UPTIME_SECS: u64 = 10;
/// Default of `daemon.max_restarts`.
pub(crate) const DAEMON_MAX_RESTARTS: u32 = 10;
/// Default of `daemon.restart_window_secs`.
pub(crate) const DAEMON_RESTART_WINDOW_SECS: u64 = 60;
/// Default of `daemon.stop_timeout_secs`.
pub(crate) const DAEMON_STOP_TIMEOUT_SECS: u64 = 30;
/// Default of `daemon.max_rss_mb`.
pub(crate) const DAEMON_MAX_RSS_MB: u64 = 0;
/// Default of `daemon.watchdog_secs`.
pub(crate) const DAEMON_WATCHDOG_SECS: u64 = 30;
/// Default of `cache.id_ttl_ms`.
pub(crate) const CACHE_ID_TTL_MS: u64 = 1000;
/// Default of `cache.id_max_entries`.
pub(crate) const CACHE_ID_MAX_ENTRIES: usize = 100_000;
/// Default of `cache.file_max_bytes`.
pub(crate) const CACHE_FILE_MAX_BYTES: u64 = 256 * 1024;
/// Default of `cache.file_total_bytes`.
pub(crate) const CACHE_FILE_TOTAL_BYTES: u64 = 256 * 1024 * 1024;
/// Default of `cache.open_files`.
pub(crate) const CACHE_OPEN_FILES: usize = 1024;
/// Default of `cache.file_watches`: room for the default `open_files` plus thousands of
/// small files and their directories. Kernels before 5.11 allow 8,192 per user by default
/// (`fs.inotify.max_user_watches`); past that the kernel refuses and those files keep the
/// `stat`.
pub(crate) const CACHE_FILE_WATCHES: usize = 16_384;
/// Default of `limits.header_read_timeout_secs`.
pub(crate) const LIMITS_HEADER_READ_TIMEOUT_SECS: u64 = 10;
/// Default of `limits.body_read_timeout_secs`.
pub(crate) const LIMITS_BODY_READ_TIMEOUT_SECS: u64 = 10;
/// Default of `limits.idle_timeout_secs`.
pub(crate) const LIMITS_IDLE_TIMEOUT_SECS: u64 = 60;
/// Default of `limits.write_timeout_secs`.
pub(crate) const LIMITS_WRITE_TIMEOUT_SECS: u64 = 60;
/// Default of `limits.max_header_bytes`.
pub(crate) const LIMITS_MAX_HEADER_BYTES: usize = 16 * 1024;
/// Default of `limits.max_uri_bytes`.
pub(crate) const LIMITS_MAX_URI_BYTES: usize = 2048;
/// Default of `limits.max_connections`.
pub(crate) const LIMITS_MAX_CONNECTIONS: usize = 10_000;
/// Default of `limits.rate_after_bytes`.
pub(crate) const LIMITS_RATE_AFTER_BYTES: u64 = 0;
/// Default of `limits.rate_bytes_per_sec`.
pub(crate) const LIMITS_RATE_BYTES_PER_SEC: u64 = 0;
/// Default of `limits.socket_unsent_bytes`. Measured (bench/results/large-files.md): from
/// 4 to 32 KiB a 4 MiB file leaves at 1.6-1.7x the speed of an unbounded socket for 0.6x
/// the whole machine's CPU per GB; from 64 KiB on the gain is gone. 16 KiB is the middle of
/// that plateau, and the value Cloudflare recommends for web servers.
pub(crate) const LIMITS_SOCKET_UNSENT_BYTES: u32 = 16 * 1024;
/// Default of `worker_cpu_affinity`. Measured (bench/results/http.md, 4 KiB at 100
/// connections, wrk on the same 2 cores): unpinned, the scheduler at times ran both loops
/// on one core and p99 went to 8-48 ms; pinned, 3.5-6.7 ms in every round, below nginx's.
pub(crate) const WORKER_CPU_AFFINITY: bool = true;
/// Default of `trusted_proxies`.
pub(crate) const TRUSTED_PROXIES: [&str; 2] = ["127.0.0.1/32", "::1/128"];
/// Default of `cors.max_age_secs`.
pub(crate) const CORS_MAX_AGE_SECS: u32 = 86_400;
/// Default of `cache.control`.
pub(crate) const CACHE_CONTROL: &str = "public, max-age=86400";
/// Default of `log_level`.
pub(crate) const LOG_LEVEL: &str = "info";
/// Default of `follow_symlinks`.
pub(crate) const FOLLOW_SYMLINKS: bool = false;
/// Default of `zero_copy`.
pub(crate) const ZERO_COPY: bool = true;
/// Default of `proxy_protocol`.
pub(crate) const PROXY_PROTOCOL: bool = false;
/// Default of `signing.required`.
pub(crate) const SIGNING_REQUIRED: bool = false;
/// Default of `signing.revocation_ttl`: how long a revocation lasts, and so the longest a
/// session-bound link may live.
pub(crate) const SIGNING_REVOCATION_TTL: &str = "30d";
