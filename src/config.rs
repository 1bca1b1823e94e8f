//! Configuration: one [`Config`] shared by `musicd` and `musicctl`.
//!
//! Three layers, later ones winning: the TOML file, `MUSICD_*` environment variables, and
//! `key=value` overrides from command-line flags. All three are merged into one TOML table
//! *before* anything is deserialized, so an unknown key or a malformed value is reported the
//! same way wherever it came from: with its dotted key path and its source. The result is
//! validated once (listen address, media roots that exist, TTLs); the rest of the crate only
//! sees typed values and never reads the environment itself.

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::time::Duration;

use serde::Deserialize;

/// Default location of the configuration file.
pub const DEFAULT_CONFIG_PATH: &str = "/etc/musicd/musicd.toml";

/// Prefix of the environment variables that override the file.
pub const ENV_PREFIX: &str = "MUSICD_";

/// Everything that can go wrong while loading the configuration.
#[derive(Debug, thiserror::Error)]
pub enum ConfigError {
    /// The file named with `--config` could not be read.
    #[error("cannot read config file {path}: {source}")]
    Read {
        /// The file.
        path: PathBuf,
        /// Why.
        source: std::io::Error,
    },
    /// The file is not valid TOML.
    #[error("config file {path} is not valid TOML: {message}")]
    Syntax {
        /// The file.
        path: PathBuf,
        /// The parser's message, with line and column.
        message: String,
    },
    /// A key is unknown or its value has the wrong type.
    #[error("config {source_name}: key `{key}`: {message}")]
    Key {
        /// The file, or the environment / flag that set the key.
        source_name: String,
        /// Dotted key path, e.g. `redis.ttl_secs`.
        key: String,
        /// What is wrong with it.
        message: String,
    },
    /// An override (`--set key=value` or a `MUSICD_*` variable) could not be applied.
    #[error("config override {origin}: {message}")]
    Override {
        /// The variable or flag.
        origin: String,
        /// What is wrong with it.
        message: String,
    },
}

/// How the bytes of a resolved file reach the client.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum ServeMode {
    /// musicd streams the file itself.
    Direct,
    /// Empty body plus `X-Accel-Redirect`: nginx sends the file.
    XAccelRedirect,
    /// Empty body plus `X-Sendfile`: Apache / lighttpd send the file.
    XSendfile,
}

/// What the access log writes.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum AccessLogFormat {
    /// NCSA combined (nginx, Apache), then musicd's own fields.
    Combined,
    /// One JSON object per line.
    Json,
    /// No access log.
    Off,
}

/// The access log.
#[derive(Debug, Clone)]
pub struct AccessLogConfig {
    /// Its format.
    pub format: AccessLogFormat,
    /// The file (appended to, reopened on SIGUSR1); `None`: stderr.
    pub path: Option<PathBuf>,
}

/// Signed links.
#[derive(Debug, Clone, Default)]
pub struct SigningConfig {
    /// Every track request must carry a valid signature.
    pub required: bool,
    /// Key ids and their secrets (read from their files at load).
    pub keys: Vec<(String, Vec<u8>)>,
}

/// CORS for web players.
#[derive(Debug, Clone, Default)]
pub struct CorsConfig {
    /// Origins whose scripts may read track answers (`*`: any; empty: CORS off).
    pub allow_origins: Vec<String>,
    /// How long a browser may cache a preflight's answer.
    pub max_age_secs: u32,
}

/// The validated configuration.
#[derive(Debug, Clone)]
pub struct Config {
    /// Where the file was read from (for messages), if any.
    pub source: Option<PathBuf>,
    /// Address the HTTP server listens on.
    pub listen: SocketAddr,
    /// A separate address for `/metrics` and `/readyz` (and `/healthz`); when set, the
    /// public address answers those two 404.
    pub ops_listen: Option<SocketAddr>,
    /// Canonicalized directories that served files must lie under.
    pub media_roots: Vec<PathBuf>,
    /// How file bytes are delivered.
    pub serve_mode: ServeMode,
    /// URL prefixes of the track routes, e.g. `/musicdb`.
    pub route_prefixes: Vec<String>,
    /// `Cache-Control` value sent with files.
    pub cache_control: String,
    /// A request with more ranges than this gets the whole file (200) instead of a multipart answer.
    pub max_ranges: usize,
    /// Location prefix nginx maps to the media roots in x-accel-redirect mode.
    pub accel_location: String,
    /// Log filter (tracing `EnvFilter` syntax), e.g. `info` or `musicd=debug`.
    pub log_level: String,
    /// Event loops (threads) serving connections; 0 in the file means one per core.
    pub worker_threads: usize,
    /// MongoDB settings.
    pub mongodb: MongoConfig,
    /// Redis settings.
    pub redis: RedisConfig,
    /// Process supervision settings (`musicd start`).
    pub daemon: DaemonConfig,
    /// In-process caches.
    pub cache: CacheConfig,
    /// Limits on what a client may send and hold.
    pub limits: LimitsConfig,
    /// Whether a path may pass through a symlink inside a media root (links out of the
    /// roots are refused either way).
    pub follow_symlinks: bool,
    /// Whether large bodies are sent with `sendfile(2)` (true) or copied at send time.
    pub zero_copy: bool,
    /// The access log.
    pub access_log: AccessLogConfig,
    /// Peers whose `X-Forwarded-For` / `X-Real-IP` name the client.
    pub trusted_proxies: Vec<ipnet::IpNet>,
    /// Every connection starts with a PROXY protocol header (v1 or v2).
    pub proxy_protocol: bool,
    /// Signed links.
    pub signing: SigningConfig,
    /// CORS.
    pub cors: CorsConfig,
    /// `MUSICD_*` environment variables that name no key (ignored; warned about at start).
    pub ignored_env: Vec<String>,
}

/// Limits on clients: every one has a safe default.
#[derive(Debug, Clone)]
pub struct LimitsConfig {
    /// Time a client has to send a request's headers (slowloris).
    pub header_read_timeout: Duration,
    /// Time a client has to send a request's body, from the end of its head.
    pub body_read_timeout: Duration,
    /// An idle keep-alive connection is closed after this long.
    pub idle_timeout: Duration,
    /// A response whose client stops reading for this long is dropped.
    pub write_timeout: Duration,
    /// Largest request head (request line + headers) accepted.
    pub max_header_bytes: usize,
    /// Longest URL accepted (longer: 414).
    pub max_uri_bytes: usize,
    /// Connections served at once per process; beyond, new ones get a 503 and are closed.
    pub max_connections: usize,
    /// A response body is sent at full speed for this many bytes, then paced.
    pub rate_after_bytes: u64,
    /// The pace, in bytes per second (0: none).
    pub rate_bytes_per_sec: u64,
}

/// The in-process caches in front of Redis and the disk.
#[derive(Debug, Clone)]
pub struct CacheConfig {
    /// How long an id -> path answer is reused without asking Redis (0 disables). This is
    /// also how long a purge or a changed document can take to reach this process.
    pub id_ttl: Duration,
    /// Most ids held.
    pub id_max_entries: usize,
    /// Files up to this size are kept in memory (revalidated by metadata on every request).
    pub file_max_bytes: u64,
    /// Memory for cached files in all (0 disables the in-memory copies).
    pub file_total_bytes: u64,
    /// Larger files kept open, at most this many (0: opened for every request).
    pub open_files: usize,
}

/// How `musicd start` supervises the server.
#[derive(Debug, Clone)]
pub struct DaemonConfig {
    /// Locked pid file of the supervisor.
    pub pid_file: PathBuf,
    /// Log file of the supervisor and its workers.
    pub log_file: PathBuf,
    /// Directory of the state file (for `status`) and the workers' notify sockets.
    pub state_dir: PathBuf,
    /// A worker that stayed up this long resets the backoff.
    pub min_uptime: Duration,
    /// Cap of the restart backoff (which starts at 100 ms and doubles).
    pub backoff_max: Duration,
    /// More crashes than this within `restart_window` make the supervisor give up.
    pub max_restarts: u32,
    /// See `max_restarts`.
    pub restart_window: Duration,
    /// How long a stopping worker may finish in-flight responses; also the grace of
    /// `musicd run` after SIGTERM.
    pub stop_timeout: Duration,
}

/// The MongoDB catalogue.
#[derive(Debug, Clone)]
pub struct MongoConfig {
    /// Connection string; may name a replica set.
    pub uri: String,
    /// Database name.
    pub database: String,
    /// Collection of track documents.
    pub collection: String,
    /// Field of each document holding the absolute file path.
    pub path_field: String,
    /// How long to wait for a usable server before a lookup fails (then 503).
    pub timeout: Duration,
}

/// Where Redis is.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum RedisTarget {
    /// One server: `redis://host:port/db`.
    Single(String),
    /// A Redis Cluster, given by some of its nodes (the rest are discovered).
    Cluster(Vec<String>),
}

/// The Redis cache in front of MongoDB.
#[derive(Debug, Clone)]
pub struct RedisConfig {
    /// One server or a cluster.
    pub target: RedisTarget,
    /// Key prefix; the key of a track is `{prefix}{objectid-hex}`.
    pub prefix: String,
    /// Lifetime of a positive entry.
    pub ttl: Duration,
    /// Lifetime of a negative (unknown id) entry.
    pub negative_ttl: Duration,
    /// Up to this fraction of `ttl` is added at random so entries do not expire together.
    pub ttl_jitter: f64,
    /// Bound on one Redis command; past it the request is served from MongoDB.
    pub timeout: Duration,
}

/// The raw shape of the file; every field optional so that defaults live in one place.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawConfig {
    listen: Option<String>,
    ops_listen: Option<String>,
    media_roots: Option<Vec<PathBuf>>,
    serve_mode: Option<ServeMode>,
    route_prefixes: Option<Vec<String>>,
    cache_control: Option<String>,
    max_ranges: Option<usize>,
    accel_location: Option<String>,
    log_level: Option<String>,
    worker_threads: Option<usize>,
    #[serde(default)]
    mongodb: RawMongo,
    #[serde(default)]
    redis: RawRedis,
    #[serde(default)]
    daemon: RawDaemon,
    #[serde(default)]
    cache: RawCache,
    #[serde(default)]
    limits: RawLimits,
    follow_symlinks: Option<bool>,
    zero_copy: Option<bool>,
    trusted_proxies: Option<Vec<String>>,
    proxy_protocol: Option<bool>,
    #[serde(default)]
    access_log: RawAccessLog,
    #[serde(default)]
    signing: RawSigning,
    #[serde(default)]
    cors: RawCors,
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawSigning {
    required: Option<bool>,
    keys: Option<Vec<RawKey>>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawKey {
    id: String,
    secret_file: PathBuf,
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawCors {
    allow_origins: Option<Vec<String>>,
    max_age_secs: Option<u32>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawAccessLog {
    format: Option<AccessLogFormat>,
    path: Option<PathBuf>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawLimits {
    header_read_timeout_secs: Option<u64>,
    body_read_timeout_secs: Option<u64>,
    idle_timeout_secs: Option<u64>,
    write_timeout_secs: Option<u64>,
    max_header_bytes: Option<usize>,
    max_uri_bytes: Option<usize>,
    max_connections: Option<usize>,
    rate_after_bytes: Option<u64>,
    rate_bytes_per_sec: Option<u64>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawCache {
    id_ttl_ms: Option<u64>,
    id_max_entries: Option<usize>,
    file_max_bytes: Option<u64>,
    file_total_bytes: Option<u64>,
    open_files: Option<usize>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawDaemon {
    pid_file: Option<PathBuf>,
    log_file: Option<PathBuf>,
    state_dir: Option<PathBuf>,
    min_uptime_secs: Option<u64>,
    backoff_max_secs: Option<u64>,
    max_restarts: Option<u32>,
    restart_window_secs: Option<u64>,
    stop_timeout_secs: Option<u64>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawMongo {
    uri: Option<String>,
    database: Option<String>,
    collection: Option<String>,
    path_field: Option<String>,
    timeout_ms: Option<u64>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawRedis {
    url: Option<String>,
    cluster: Option<Vec<String>>,
    prefix: Option<String>,
    ttl_secs: Option<u64>,
    negative_ttl_secs: Option<u64>,
    ttl_jitter_percent: Option<u8>,
    timeout_ms: Option<u64>,
}

/// Tables whose keys may be set from `MUSICD_<TABLE>_<KEY>`.
const TABLES: &[&str] = &[
    "mongodb",
    "redis",
    "daemon",
    "cache",
    "limits",
    "access_log",
];

/// Where the configuration comes from; see [`Config::load`].
#[derive(Debug, Default, Clone)]
pub struct Sources {
    /// The TOML file. `None` means "the default path if it exists, else built-in defaults".
    pub file: Option<PathBuf>,
    /// Environment variables (normally `std::env::vars()`); only `MUSICD_*` ones are read.
    pub env: Vec<(String, String)>,
    /// `key=value` overrides from flags, applied last, e.g. `redis.url=redis://...`.
    pub overrides: Vec<String>,
}

impl Sources {
    /// Sources for a binary: the given file, the process environment, and flag overrides.
    pub fn from_process(file: Option<PathBuf>, overrides: Vec<String>) -> Self {
        Sources {
            file,
            env: std::env::vars().collect(),
            overrides,
        }
    }
}

impl Config {
    /// Loads, merges and validates the configuration.
    pub fn load(sources: &Sources) -> Result<Config, ConfigError> {
        Config::load_with(sources, true)
    }

    /// Like [`Config::load`], but media roots that do not exist (now) are kept as written
    /// instead of failing: `musicd stop` and `status` must work while a media volume is
    /// missing, which is exactly when an operator needs them.
    pub fn load_for_control(sources: &Sources) -> Result<Config, ConfigError> {
        Config::load_with(sources, false)
    }

    fn load_with(sources: &Sources, check_roots: bool) -> Result<Config, ConfigError> {
        let (file, mut table) = read_file(sources.file.as_deref())?;
        let file_name = file
            .as_ref()
            .map(|p| p.display().to_string())
            .unwrap_or_else(|| "(built-in defaults)".to_string());
        let mut origins: BTreeMap<String, String> = BTreeMap::new();

        for (name, value) in &sources.env {
            let Some(rest) = name.strip_prefix(ENV_PREFIX) else {
                continue;
            };
            // Variables that are not configuration keys (test hooks, MUSICD_CONFIG) are skipped.
            if matches!(rest, "CONFIG" | "LOG") || rest.starts_with("TEST_") {
                continue;
            }
            let key = env_key(rest);
            set_key(&mut table, &key, value).map_err(|message| ConfigError::Override {
                origin: name.clone(),
                message,
            })?;
            origins.insert(key, format!("environment variable {name}"));
        }
        for item in &sources.overrides {
            let (key, value) = item.split_once('=').ok_or_else(|| ConfigError::Override {
                origin: item.clone(),
                message: "expected key=value".into(),
            })?;
            let key = key.trim().to_string();
            set_key(&mut table, &key, value).map_err(|message| ConfigError::Override {
                origin: format!("--set {key}"),
                message,
            })?;
            origins.insert(key.clone(), format!("flag --set {key}"));
        }

        // An environment variable that names no key is ignored with a warning, not fatal:
        // the environment is ambient (shells, container images and CI set MUSICD_* for
        // other tools), while a file or a --set flag is written for musicd on purpose, so
        // an unknown key there still stops it.
        let mut ignored_env = Vec::new();
        let raw: RawConfig = loop {
            let attempt: Result<RawConfig, _> =
                serde_path_to_error::deserialize(toml::Value::Table(table.clone()));
            let err = match attempt {
                Ok(raw) => break raw,
                Err(err) => err,
            };
            let key = err.path().to_string();
            let from_env = origins
                .get(&key)
                .filter(|origin| origin.starts_with("environment variable "));
            if let Some(origin) = from_env
                && err.inner().to_string().starts_with("unknown field")
                && remove_key(&mut table, &key)
            {
                ignored_env.push(
                    origin
                        .trim_start_matches("environment variable ")
                        .to_string(),
                );
                continue;
            }
            return Err({
                let key = err.path().to_string();
                let source_name = origins
                    .iter()
                    .find(|(k, _)| key == **k || key.starts_with(&format!("{k}.")))
                    .map(|(_, o)| o.clone())
                    .unwrap_or_else(|| file_name.clone());
                ConfigError::Key {
                    source_name,
                    key,
                    message: err.into_inner().to_string(),
                }
            });
        };
        let err_at = |key: &str, message: String| ConfigError::Key {
            source_name: origins
                .get(key)
                .cloned()
                .unwrap_or_else(|| file_name.clone()),
            key: key.to_string(),
            message,
        };
        let mut config = raw.validate(file, &err_at, check_roots)?;
        config.ignored_env = ignored_env;
        Ok(config)
    }

    /// The configuration a test or the quickstart gets when nothing is set: defaults only.
    pub fn defaults_with_roots(media_roots: Vec<PathBuf>) -> Result<Config, ConfigError> {
        let raw = RawConfig {
            media_roots: Some(media_roots),
            ..RawConfig::default()
        };
        raw.validate(
            None,
            &|key, message| ConfigError::Key {
                source_name: "(built-in defaults)".into(),
                key: key.into(),
                message,
            },
            true,
        )
    }
}

impl RawConfig {
    fn validate(
        self,
        file: Option<PathBuf>,
        err_at: &dyn Fn(&str, String) -> ConfigError,
        check_roots: bool,
    ) -> Result<Config, ConfigError> {
        let listen_text = self.listen.unwrap_or_else(|| "127.0.0.1:23001".into());
        let listen: SocketAddr = listen_text
            .parse()
            .map_err(|e| err_at("listen", format!("`{listen_text}` is not an address: {e}")))?;

        let roots = self
            .media_roots
            .unwrap_or_else(|| vec![PathBuf::from("/srv/music")]);
        if roots.is_empty() {
            return Err(err_at(
                "media_roots",
                "at least one media root is needed".into(),
            ));
        }
        let mut media_roots = Vec::with_capacity(roots.len());
        for root in roots {
            if !root.is_absolute() {
                return Err(err_at(
                    "media_roots",
                    format!("{} is not an absolute path", root.display()),
                ));
            }
            let canonical = match std::fs::canonicalize(&root) {
                Ok(canonical) => canonical,
                Err(_) if !check_roots => root.clone(),
                Err(e) => return Err(err_at("media_roots", format!("{}: {e}", root.display()))),
            };
            if check_roots && !canonical.is_dir() {
                return Err(err_at(
                    "media_roots",
                    format!("{} is not a directory", root.display()),
                ));
            }
            media_roots.push(canonical);
        }

        let route_prefixes = self
            .route_prefixes
            .unwrap_or_else(|| vec!["/musicdb".into(), "/stream/musicdb".into()]);
        for prefix in &route_prefixes {
            if !prefix.starts_with('/') || prefix.ends_with('/') || prefix.contains('{') {
                return Err(err_at(
                    "route_prefixes",
                    format!("`{prefix}` must start with / and not end with /"),
                ));
            }
        }
        let accel_location = self.accel_location.unwrap_or_else(|| "/internal".into());
        if !accel_location.starts_with('/') || accel_location.ends_with('/') {
            return Err(err_at(
                "accel_location",
                "must start with / and not end with /".into(),
            ));
        }
        let max_ranges = self.max_ranges.unwrap_or(16);
        if max_ranges == 0 {
            return Err(err_at("max_ranges", "must be at least 1".into()));
        }

        let mongo = self.mongodb;
        let path_field = mongo.path_field.unwrap_or_else(|| "path".into());
        if path_field.is_empty() || path_field.starts_with('$') || path_field == "_id" {
            return Err(err_at(
                "mongodb.path_field",
                "must name a plain field".into(),
            ));
        }
        let mongodb = MongoConfig {
            uri: mongo
                .uri
                .unwrap_or_else(|| "mongodb://127.0.0.1:27017".into()),
            database: mongo.database.unwrap_or_else(|| "musicdb".into()),
            collection: mongo.collection.unwrap_or_else(|| "tracks".into()),
            path_field,
            timeout: Duration::from_millis(mongo.timeout_ms.unwrap_or(2000).max(1)),
        };
        if !mongodb.uri.starts_with("mongodb://") && !mongodb.uri.starts_with("mongodb+srv://") {
            return Err(err_at(
                "mongodb.uri",
                "must start with mongodb:// or mongodb+srv://".into(),
            ));
        }

        let redis = self.redis;
        let ttl_secs = redis.ttl_secs.unwrap_or(86_400);
        let negative_ttl_secs = redis.negative_ttl_secs.unwrap_or(60);
        if ttl_secs == 0 {
            return Err(err_at("redis.ttl_secs", "must be at least 1".into()));
        }
        if negative_ttl_secs == 0 {
            return Err(err_at(
                "redis.negative_ttl_secs",
                "must be at least 1".into(),
            ));
        }
        let jitter = redis.ttl_jitter_percent.unwrap_or(10);
        if jitter > 100 {
            return Err(err_at("redis.ttl_jitter_percent", "must be 0..=100".into()));
        }
        let prefix = redis.prefix.unwrap_or_else(|| "track_".into());
        if prefix.is_empty() {
            return Err(err_at(
                "redis.prefix",
                "must not be empty (purges match on it)".into(),
            ));
        }
        let cluster = redis.cluster.unwrap_or_default();
        for node in &cluster {
            if redis::parse_redis_url(node).is_none() {
                return Err(err_at(
                    "redis.cluster",
                    format!("`{node}` is not a redis:// URL"),
                ));
            }
        }
        let target = if cluster.is_empty() {
            let url = redis.url.unwrap_or_else(|| "redis://127.0.0.1:6379".into());
            if redis::parse_redis_url(&url).is_none() {
                return Err(err_at(
                    "redis.url",
                    format!("`{url}` is not a redis:// URL"),
                ));
            }
            RedisTarget::Single(url)
        } else {
            if redis.url.is_some() {
                return Err(err_at(
                    "redis.cluster",
                    "set either redis.url or redis.cluster, not both".into(),
                ));
            }
            RedisTarget::Cluster(cluster)
        };
        let redis = RedisConfig {
            target,
            prefix,
            ttl: Duration::from_secs(ttl_secs),
            negative_ttl: Duration::from_secs(negative_ttl_secs),
            ttl_jitter: f64::from(jitter) / 100.0,
            timeout: Duration::from_millis(redis.timeout_ms.unwrap_or(250).max(1)),
        };

        let daemon = self.daemon;
        let mut paths = Vec::new();
        for (key, value, default) in [
            ("daemon.pid_file", daemon.pid_file, "/run/musicd/musicd.pid"),
            (
                "daemon.log_file",
                daemon.log_file,
                "/var/log/musicd/musicd.log",
            ),
            ("daemon.state_dir", daemon.state_dir, "/var/lib/musicd"),
        ] {
            let path = value.unwrap_or_else(|| PathBuf::from(default));
            // The supervisor runs from `/`, so relative paths would move under it.
            if !path.is_absolute() {
                return Err(err_at(
                    key,
                    format!("{} is not an absolute path", path.display()),
                ));
            }
            paths.push(path);
        }
        let [pid_file, log_file, state_dir]: [PathBuf; 3] = paths
            .try_into()
            .map_err(|_| err_at("daemon", "internal: path count".into()))?;
        let backoff_max = Duration::from_secs(daemon.backoff_max_secs.unwrap_or(30));
        if backoff_max < Duration::from_millis(100) {
            return Err(err_at(
                "daemon.backoff_max_secs",
                "must be at least 1".into(),
            ));
        }
        let daemon = DaemonConfig {
            pid_file,
            log_file,
            state_dir,
            min_uptime: Duration::from_secs(daemon.min_uptime_secs.unwrap_or(10)),
            backoff_max,
            max_restarts: daemon.max_restarts.unwrap_or(10),
            restart_window: Duration::from_secs(daemon.restart_window_secs.unwrap_or(60)),
            stop_timeout: Duration::from_secs(daemon.stop_timeout_secs.unwrap_or(30)),
        };

        let cache = CacheConfig {
            id_ttl: Duration::from_millis(self.cache.id_ttl_ms.unwrap_or(1000)),
            id_max_entries: self.cache.id_max_entries.unwrap_or(100_000),
            file_max_bytes: self.cache.file_max_bytes.unwrap_or(256 * 1024),
            file_total_bytes: self.cache.file_total_bytes.unwrap_or(256 * 1024 * 1024),
            open_files: self.cache.open_files.unwrap_or(1024),
        };
        if cache.file_max_bytes > cache.file_total_bytes && cache.file_total_bytes > 0 {
            return Err(err_at(
                "cache.file_max_bytes",
                "must not exceed cache.file_total_bytes".into(),
            ));
        }

        let raw_limits = self.limits;
        let limits = LimitsConfig {
            header_read_timeout: Duration::from_secs(
                raw_limits.header_read_timeout_secs.unwrap_or(10).max(1),
            ),
            body_read_timeout: Duration::from_secs(
                raw_limits.body_read_timeout_secs.unwrap_or(10).max(1),
            ),
            idle_timeout: Duration::from_secs(raw_limits.idle_timeout_secs.unwrap_or(60).max(1)),
            write_timeout: Duration::from_secs(raw_limits.write_timeout_secs.unwrap_or(60).max(1)),
            // Below 8 KiB, ordinary browsers with a few cookies would be refused.
            max_header_bytes: raw_limits.max_header_bytes.unwrap_or(16 * 1024).max(8192),
            max_uri_bytes: raw_limits.max_uri_bytes.unwrap_or(2048).max(64),
            max_connections: raw_limits.max_connections.unwrap_or(10_000).max(1),
            rate_after_bytes: raw_limits.rate_after_bytes.unwrap_or(0),
            rate_bytes_per_sec: raw_limits.rate_bytes_per_sec.unwrap_or(0),
        };

        let mut trusted_proxies = Vec::new();
        let trusted = self
            .trusted_proxies
            .unwrap_or_else(|| vec!["127.0.0.1/32".into(), "::1/128".into()]);
        for text in trusted {
            // A bare address is a network of one.
            let net = text
                .parse::<ipnet::IpNet>()
                .or_else(|_| text.parse::<std::net::IpAddr>().map(ipnet::IpNet::from))
                .map_err(|_| {
                    err_at(
                        "trusted_proxies",
                        format!("`{text}` is not a CIDR network (e.g. 10.0.0.0/8) or an address"),
                    )
                })?;
            trusted_proxies.push(net);
        }
        let access_log = AccessLogConfig {
            format: self.access_log.format.unwrap_or(AccessLogFormat::Combined),
            path: self.access_log.path,
        };
        if let Some(path) = &access_log.path
            && !path.is_absolute()
        {
            return Err(err_at("access_log.path", "must be an absolute path".into()));
        }

        let mut keys = Vec::new();
        for key in self.signing.keys.unwrap_or_default() {
            if key.id.is_empty() || keys.iter().any(|(id, _): &(String, Vec<u8>)| *id == key.id) {
                return Err(err_at(
                    "signing.keys",
                    format!("key id `{}` is empty or repeated", key.id),
                ));
            }
            let text = std::fs::read(&key.secret_file).map_err(|e| {
                err_at(
                    "signing.keys",
                    format!("secret_file {}: {e}", key.secret_file.display()),
                )
            })?;
            // The file's contents without a trailing newline (what `echo > file` adds).
            let secret = text.trim_ascii_end().to_vec();
            if secret.len() < 16 {
                return Err(err_at(
                    "signing.keys",
                    format!("the secret of `{}` is shorter than 16 bytes", key.id),
                ));
            }
            keys.push((key.id, secret));
        }
        let required = self.signing.required.unwrap_or(false);
        if required && keys.is_empty() {
            return Err(err_at(
                "signing.required",
                "signing is required but no key is configured".into(),
            ));
        }
        let signing = SigningConfig { required, keys };
        let cors = CorsConfig {
            allow_origins: self.cors.allow_origins.unwrap_or_default(),
            max_age_secs: self.cors.max_age_secs.unwrap_or(86_400),
        };
        for origin in &cors.allow_origins {
            if origin != "*" && !(origin.starts_with("http://") || origin.starts_with("https://")) {
                return Err(err_at(
                    "cors.allow_origins",
                    format!("`{origin}` is not an origin (scheme://host[:port]) or *"),
                ));
            }
        }

        let ops_listen = match self.ops_listen.as_deref().map(str::trim) {
            None | Some("") => None,
            Some(text) => Some(text.parse::<SocketAddr>().map_err(|_| {
                err_at(
                    "ops_listen",
                    format!("`{text}` is not an address like 127.0.0.1:23002"),
                )
            })?),
        };
        if ops_listen.is_some_and(|ops| ops == listen && ops.port() != 0) {
            return Err(err_at("ops_listen", "must differ from listen".into()));
        }

        Ok(Config {
            source: file,
            listen,
            ops_listen,
            media_roots,
            serve_mode: self.serve_mode.unwrap_or(ServeMode::Direct),
            route_prefixes,
            cache_control: self
                .cache_control
                .unwrap_or_else(|| "public, max-age=86400".into()),
            max_ranges,
            accel_location,
            log_level: self.log_level.unwrap_or_else(|| "info".into()),
            worker_threads: match self.worker_threads.unwrap_or(0) {
                0 => std::thread::available_parallelism().map_or(2, |n| n.get()),
                n => n,
            },
            mongodb,
            redis,
            daemon,
            cache,
            limits,
            follow_symlinks: self.follow_symlinks.unwrap_or(false),
            zero_copy: self.zero_copy.unwrap_or(true),
            access_log,
            trusted_proxies,
            proxy_protocol: self.proxy_protocol.unwrap_or(false),
            signing,
            cors,
            ignored_env: Vec::new(),
        })
    }
}

/// Reads the file (or the default file if present) into a table.
fn read_file(path: Option<&Path>) -> Result<(Option<PathBuf>, toml::Table), ConfigError> {
    let path = match path {
        Some(p) => p.to_path_buf(),
        None => {
            let default = PathBuf::from(DEFAULT_CONFIG_PATH);
            if !default.exists() {
                return Ok((None, toml::Table::new()));
            }
            default
        }
    };
    let text = std::fs::read_to_string(&path).map_err(|source| ConfigError::Read {
        path: path.clone(),
        source,
    })?;
    let table = text
        .parse::<toml::Table>()
        .map_err(|e| ConfigError::Syntax {
            path: path.clone(),
            message: e.to_string(),
        })?;
    Ok((Some(path), table))
}

/// `REDIS_TTL_SECS` -> `redis.ttl_secs`; `MEDIA_ROOTS` -> `media_roots`.
fn env_key(rest: &str) -> String {
    let lower = rest.to_ascii_lowercase();
    for table in TABLES {
        if let Some(key) = lower.strip_prefix(&format!("{table}_")) {
            return format!("{table}.{key}");
        }
    }
    lower
}

/// Removes a dotted key from the table; whether it was there.
fn remove_key(table: &mut toml::Table, key: &str) -> bool {
    let mut parts: Vec<&str> = key.split('.').collect();
    let Some(last) = parts.pop() else {
        return false;
    };
    let mut current = table;
    for part in parts {
        match current.get_mut(part).and_then(toml::Value::as_table_mut) {
            Some(next) => current = next,
            None => return false,
        }
    }
    current.remove(last).is_some()
}

/// Sets a dotted key in the table. The value is read as a TOML value when it is one
/// (`86400`, `true`, `["/a", "/b"]`, `"quoted"`), otherwise taken as a plain string, so
/// `MUSICD_REDIS_URL=redis://x` needs no quoting. A list-valued key also accepts a plain
/// `:`-separated string, like `PATH`.
fn set_key(table: &mut toml::Table, key: &str, raw: &str) -> Result<(), String> {
    let mut value = parse_value(raw);
    let parts: Vec<&str> = key.split('.').collect();
    if parts.iter().any(|p| p.is_empty()) {
        return Err(format!("`{key}` is not a key"));
    }
    if matches!(key, "media_roots" | "route_prefixes")
        && let toml::Value::String(s) = &value
    {
        value = toml::Value::Array(
            s.split(':')
                .filter(|p| !p.is_empty())
                .map(|p| toml::Value::String(p.to_string()))
                .collect(),
        );
    }
    let (last, parents) = parts.split_last().ok_or("empty key")?;
    let mut current = table;
    for part in parents {
        let entry = current
            .entry(part.to_string())
            .or_insert_with(|| toml::Value::Table(toml::Table::new()));
        current = entry
            .as_table_mut()
            .ok_or_else(|| format!("`{part}` is not a table"))?;
    }
    current.insert(last.to_string(), value);
    Ok(())
}

fn parse_value(raw: &str) -> toml::Value {
    let doc = format!("v = {raw}");
    match doc.parse::<toml::Table>() {
        Ok(mut t) => t
            .remove("v")
            .unwrap_or_else(|| toml::Value::String(raw.to_string())),
        Err(_) => toml::Value::String(raw.to_string()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn load_text(
        text: &str,
        env: &[(&str, &str)],
        overrides: &[&str],
    ) -> Result<Config, ConfigError> {
        let dir = tempfile::tempdir().expect("tempdir");
        let file = dir.path().join("musicd.toml");
        let text = text.replace("$ROOT", &dir.path().display().to_string());
        std::fs::write(&file, text).expect("write");
        Config::load(&Sources {
            file: Some(file),
            env: env
                .iter()
                .map(|(k, v)| (k.to_string(), v.to_string()))
                .collect(),
            overrides: overrides.iter().map(|s| s.to_string()).collect(),
        })
    }

    #[test]
    fn defaults_fill_what_the_file_leaves_out() {
        let cfg = load_text("media_roots = [\"$ROOT\"]\n", &[], &[]).expect("valid");
        assert_eq!(cfg.listen.to_string(), "127.0.0.1:23001");
        assert_eq!(cfg.redis.prefix, "track_");
        assert_eq!(cfg.redis.ttl, Duration::from_secs(86_400));
        assert_eq!(cfg.mongodb.path_field, "path");
        assert_eq!(cfg.serve_mode, ServeMode::Direct);
    }

    #[test]
    fn env_overrides_file_and_flags_override_env() {
        let cfg = load_text(
            "media_roots = [\"$ROOT\"]\n[redis]\nttl_secs = 5\nprefix = \"a_\"\n",
            &[
                ("MUSICD_REDIS_TTL_SECS", "7"),
                ("MUSICD_REDIS_PREFIX", "b_"),
                ("MUSICD_SERVE_MODE", "x-accel-redirect"),
                ("HOME", "/root"),
            ],
            &["redis.prefix=c_"],
        )
        .expect("valid");
        assert_eq!(cfg.redis.ttl, Duration::from_secs(7));
        assert_eq!(cfg.redis.prefix, "c_");
        assert_eq!(cfg.serve_mode, ServeMode::XAccelRedirect);
    }

    #[test]
    fn unknown_key_names_the_key_and_the_file() {
        let err = load_text("media_roots = [\"$ROOT\"]\n[redis]\nttl = 5\n", &[], &[])
            .expect_err("unknown key");
        let text = err.to_string();
        assert!(text.contains("redis"), "{text}");
        assert!(text.contains("unknown field `ttl`"), "{text}");
        assert!(text.contains("musicd.toml"), "{text}");
    }

    #[test]
    fn unknown_environment_variables_are_ignored_but_unknown_flags_stop() {
        let cfg = load_text(
            "media_roots = [\"$ROOT\"]\n",
            &[
                ("MUSICD_REDIS_TTL_SECS", "7"),
                ("MUSICD_HOME", "/home/someone"),
                ("MUSICD_REDIS_URLL", "typo"),
            ],
            &[],
        )
        .expect("unknown variables are not fatal");
        assert_eq!(cfg.redis.ttl.as_secs(), 7, "known ones still apply");
        let mut ignored = cfg.ignored_env.clone();
        ignored.sort();
        assert_eq!(ignored, ["MUSICD_HOME", "MUSICD_REDIS_URLL"]);
        let err = load_text("media_roots = [\"$ROOT\"]\n", &[], &["redis.urll=x"])
            .expect_err("an unknown flag is a mistake");
        assert!(err.to_string().contains("--set redis.urll"), "{err}");
    }

    #[test]
    fn malformed_value_names_the_key_and_its_source() {
        let err = load_text(
            "media_roots = [\"$ROOT\"]\n",
            &[("MUSICD_REDIS_TTL_SECS", "soon")],
            &[],
        )
        .expect_err("bad type");
        let text = err.to_string();
        assert!(text.contains("redis.ttl_secs"), "{text}");
        assert!(text.contains("MUSICD_REDIS_TTL_SECS"), "{text}");
    }

    #[test]
    fn missing_media_root_is_a_startup_error() {
        let err = load_text("media_roots = [\"/nonexistent/music/root\"]\n", &[], &[])
            .expect_err("missing root");
        let text = err.to_string();
        assert!(text.contains("media_roots"), "{text}");
        assert!(text.contains("/nonexistent/music/root"), "{text}");
    }

    #[test]
    fn bad_listen_address_is_rejected() {
        let err = load_text(
            "listen = \"localhost\"\nmedia_roots = [\"$ROOT\"]\n",
            &[],
            &[],
        )
        .expect_err("bad listen");
        assert!(err.to_string().contains("listen"));
    }

    #[test]
    fn media_roots_from_env_accept_a_colon_list() {
        let dir = tempfile::tempdir().expect("tempdir");
        let a = dir.path().join("a");
        let b = dir.path().join("b");
        std::fs::create_dir_all(&a).expect("mkdir");
        std::fs::create_dir_all(&b).expect("mkdir");
        let value = format!("{}:{}", a.display(), b.display());
        let cfg = load_text("", &[("MUSICD_MEDIA_ROOTS", &value)], &[]).expect("valid");
        assert_eq!(cfg.media_roots.len(), 2);
    }

    #[test]
    fn the_sample_config_in_deploy_is_valid_and_sets_every_key() {
        let sample = Path::new(env!("CARGO_MANIFEST_DIR")).join("deploy/musicd.toml");
        let text = std::fs::read_to_string(&sample).expect("deploy/musicd.toml");
        let dir = tempfile::tempdir().expect("tempdir");
        let root = dir.path().display().to_string();
        let cfg = Config::load(&Sources {
            file: Some(sample),
            env: vec![("MUSICD_MEDIA_ROOTS".into(), root)],
            overrides: Vec::new(),
        })
        .expect("sample config is valid");
        assert_eq!(cfg.listen.to_string(), "127.0.0.1:23001");
        // Every key the loader knows appears in the sample, so the sample stays the reference.
        // A key without a default (access_log.path: absent means stderr) is shown commented
        // out, `# key = example`; it counts as documented.
        let documented: String = text
            .lines()
            .map(|line| match line.strip_prefix("# ") {
                Some(rest)
                    if rest.split_once(" = ").is_some_and(|(key, _)| {
                        !key.is_empty() && key.bytes().all(|b| b.is_ascii_lowercase() || b == b'_')
                    }) =>
                {
                    rest
                }
                _ => line,
            })
            .collect::<Vec<_>>()
            .join("\n");
        let table: toml::Table = documented.parse().expect("toml");
        let mut keys: Vec<String> = table
            .iter()
            .flat_map(|(k, v)| match v.as_table() {
                Some(t) => t.keys().map(|sub| format!("{k}.{sub}")).collect(),
                None => vec![k.clone()],
            })
            .collect();
        keys.sort();
        toml::from_str::<RawConfig>(&documented).expect("every key is known");
        for (table_name, probe) in [
            ("", "zz_probe = 1"),
            ("mongodb.", "[mongodb]\nzz_probe = 1"),
            ("redis.", "[redis]\nzz_probe = 1"),
            ("daemon.", "[daemon]\nzz_probe = 1"),
            ("cache.", "[cache]\nzz_probe = 1"),
            ("limits.", "[limits]\nzz_probe = 1"),
            ("access_log.", "[access_log]\nzz_probe = 1"),
            ("signing.", "[signing]\nzz_probe = 1"),
            ("cors.", "[cors]\nzz_probe = 1"),
        ] {
            for key in known_keys(probe) {
                let key = format!("{table_name}{key}");
                if matches!(
                    key.as_str(),
                    "mongodb"
                        | "redis"
                        | "daemon"
                        | "cache"
                        | "limits"
                        | "access_log"
                        | "signing"
                        | "cors"
                ) {
                    continue;
                }
                assert!(keys.contains(&key), "deploy/musicd.toml lacks {key}");
            }
        }
    }

    /// The keys serde accepts, read from its "unknown field, expected one of" message.
    fn known_keys(probe: &str) -> Vec<String> {
        let err = toml::from_str::<RawConfig>(probe).expect_err("probe key is unknown");
        let text = err.to_string();
        // serde says "expected one of `a`, `b`", "expected `a` or `b`" or "expected `a`".
        let list = text
            .split("expected one of")
            .nth(1)
            .or_else(|| text.split("expected").nth(1))
            .expect("list of keys")
            .replace(" or ", ",");
        list.split(',')
            .map(|k| {
                k.trim()
                    .trim_matches(|c: char| c == '`' || c.is_whitespace())
                    .to_string()
            })
            .filter(|k| !k.is_empty())
            .collect()
    }
}
