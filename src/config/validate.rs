//! Validation: raw shapes in, typed [`Config`] out, with every default applied here and
//! every refusal naming its key. `deploy/musicd.toml` states the same defaults (a test
//! loads it and an empty file and compares the two). One function per section, checked
//! in the order of the file, so the first refusal is the first wrong key.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::time::Duration;

use super::defaults::*;
use super::raw::{
    RawAccessLog, RawCache, RawConfig, RawCors, RawDaemon, RawDuration, RawLimits, RawMongo,
    RawRedis, RawSigning,
};
use super::*;

/// Makes the error of a key: `err_at("redis.url", why)`.
type ErrAt<'a> = &'a dyn Fn(&str, String) -> ConfigError;

impl RawConfig {
    pub(super) fn validate(
        self,
        err_at: ErrAt<'_>,
        check_roots: bool,
    ) -> Result<Config, ConfigError> {
        let listen_text = self.listen.unwrap_or_else(|| LISTEN.into());
        let listen: SocketAddr = listen_text
            .parse()
            .map_err(|e| err_at("listen", format!("`{listen_text}` is not an address: {e}")))?;
        let media_roots = media_roots(self.media_roots, err_at, check_roots)?;
        let route_prefixes = route_prefixes(self.route_prefixes, err_at)?;
        let accel_location = self.accel_location.unwrap_or_else(|| ACCEL_LOCATION.into());
        if !accel_location.starts_with('/') || accel_location.ends_with('/') {
            return Err(err_at(
                "accel_location",
                "must start with / and not end with /".into(),
            ));
        }
        let max_ranges = self.max_ranges.unwrap_or(MAX_RANGES);
        if max_ranges == 0 {
            return Err(err_at("max_ranges", "must be at least 1".into()));
        }
        let mongodb = self.mongodb.validate(err_at)?;
        let redis = self.redis.validate(err_at)?;
        let daemon = self.daemon.validate(err_at)?;
        let cache = self.cache.validate(err_at)?;
        let limits = self.limits.validate();
        let trusted_proxies = trusted_proxies(self.trusted_proxies, err_at)?;
        let access_log = self.access_log.validate(err_at)?;
        let signing = self.signing.validate(err_at)?;
        let cors = self.cors.validate(err_at)?;
        let ops_listen = ops_listen(self.ops_listen.as_deref(), listen, err_at)?;
        let shutdown = shutdown(self.shutdown.drain_delay, err_at)?;
        Ok(Config {
            listen,
            ops_listen,
            media_roots,
            serve_mode: self.serve_mode.unwrap_or(ServeMode::Direct),
            route_prefixes,
            cache_control: self.cache_control.unwrap_or_else(|| CACHE_CONTROL.into()),
            max_ranges,
            accel_location,
            log_level: self.log_level.unwrap_or_else(|| LOG_LEVEL.into()),
            worker_threads: match self.worker_threads.unwrap_or(0) {
                0 => std::thread::available_parallelism().map_or(2, |n| n.get()),
                n => n,
            },
            worker_cpu_affinity: self.worker_cpu_affinity.unwrap_or(WORKER_CPU_AFFINITY),
            mongodb,
            redis,
            daemon,
            cache,
            limits,
            follow_symlinks: self.follow_symlinks.unwrap_or(FOLLOW_SYMLINKS),
            zero_copy: self.zero_copy.unwrap_or(ZERO_COPY),
            access_log,
            trusted_proxies,
            proxy_protocol: self.proxy_protocol.unwrap_or(PROXY_PROTOCOL),
            signing,
            cors,
            ban_urls: ban_urls(self.http_caches.ban_urls, err_at)?,
            shutdown,
            ignored_env: Vec::new(),
        })
    }
}

fn media_roots(
    roots: Option<Vec<PathBuf>>,
    err_at: ErrAt<'_>,
    check_roots: bool,
) -> Result<Vec<PathBuf>, ConfigError> {
    let roots = roots.unwrap_or_else(|| vec![PathBuf::from(MEDIA_ROOT)]);
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
    Ok(media_roots)
}

fn route_prefixes(
    prefixes: Option<Vec<String>>,
    err_at: ErrAt<'_>,
) -> Result<Vec<String>, ConfigError> {
    let route_prefixes =
        prefixes.unwrap_or_else(|| ROUTE_PREFIXES.iter().map(|p| p.to_string()).collect());
    for prefix in &route_prefixes {
        if !prefix.starts_with('/') || prefix.ends_with('/') || prefix.contains('{') {
            return Err(err_at(
                "route_prefixes",
                format!("`{prefix}` must start with / and not end with /"),
            ));
        }
    }
    Ok(route_prefixes)
}

impl RawMongo {
    fn validate(self, err_at: ErrAt<'_>) -> Result<MongoConfig, ConfigError> {
        let mongo = self;
        let path_field = mongo
            .path_field
            .unwrap_or_else(|| MONGODB_PATH_FIELD.into());
        if path_field.is_empty() || path_field.starts_with('$') || path_field == "_id" {
            return Err(err_at(
                "mongodb.path_field",
                "must name a plain field".into(),
            ));
        }
        let mongodb = MongoConfig {
            uri: mongo.uri.unwrap_or_else(|| MONGODB_URI.into()),
            database: mongo.database.unwrap_or_else(|| MONGODB_DATABASE.into()),
            collection: mongo
                .collection
                .unwrap_or_else(|| MONGODB_COLLECTION.into()),
            path_field,
            timeout: Duration::from_millis(mongo.timeout_ms.unwrap_or(MONGODB_TIMEOUT_MS).max(1)),
            watch: match mongo.watch.as_deref().unwrap_or(MONGODB_WATCH) {
                "auto" => WatchMode::Auto,
                "on" => WatchMode::On,
                "off" => WatchMode::Off,
                other => {
                    return Err(err_at(
                        "mongodb.watch",
                        format!("`{other}`: must be \"auto\", \"on\" or \"off\""),
                    ));
                }
            },
            watch_lease: Duration::from_millis(
                mongo.watch_lease_ms.unwrap_or(MONGODB_WATCH_LEASE_MS),
            ),
        };
        if mongodb.watch_lease < Duration::from_millis(300) {
            return Err(err_at(
                "mongodb.watch_lease_ms",
                "must be at least 300 (it is renewed every third of it)".into(),
            ));
        }
        if !mongodb.uri.starts_with("mongodb://") && !mongodb.uri.starts_with("mongodb+srv://") {
            return Err(err_at(
                "mongodb.uri",
                "must start with mongodb:// or mongodb+srv://".into(),
            ));
        }

        Ok(mongodb)
    }
}

impl RawRedis {
    fn validate(self, err_at: ErrAt<'_>) -> Result<RedisConfig, ConfigError> {
        let redis = self;
        let ttl_secs = redis.ttl_secs.unwrap_or(REDIS_TTL_SECS);
        let negative_ttl_secs = redis.negative_ttl_secs.unwrap_or(REDIS_NEGATIVE_TTL_SECS);
        if ttl_secs == 0 {
            return Err(err_at("redis.ttl_secs", "must be at least 1".into()));
        }
        if negative_ttl_secs == 0 {
            return Err(err_at(
                "redis.negative_ttl_secs",
                "must be at least 1".into(),
            ));
        }
        let jitter = redis.ttl_jitter_percent.unwrap_or(REDIS_TTL_JITTER_PERCENT);
        if jitter > 100 {
            return Err(err_at("redis.ttl_jitter_percent", "must be 0..=100".into()));
        }
        let prefix = redis.prefix.unwrap_or_else(|| REDIS_PREFIX.into());
        if prefix.is_empty() {
            return Err(err_at(
                "redis.prefix",
                "must not be empty (purges match on it)".into(),
            ));
        }
        // A fill lease must share its entry's Cluster slot (catalog::cache::fill_key): a
        // brace in the prefix is allowed only as a whole hash tag, `{tag}`.
        let proper_tag = prefix
            .find('{')
            .is_some_and(|open| prefix[open + 1..].find('}').is_some_and(|close| close > 0));
        let braces = prefix.contains('{') || prefix.contains('}');
        let lone_close = prefix.find('}') < prefix.find('{').or(Some(usize::MAX));
        if braces && (!proper_tag || lone_close) {
            return Err(err_at(
                "redis.prefix",
                "may hold braces only as one hash tag, like `{musicd}track_`".into(),
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
            let url = redis.url.unwrap_or_else(|| REDIS_URL.into());
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
        Ok(RedisConfig {
            target,
            prefix,
            ttl: Duration::from_secs(ttl_secs),
            negative_ttl: Duration::from_secs(negative_ttl_secs),
            ttl_jitter: f64::from(jitter) / 100.0,
            timeout: Duration::from_millis(redis.timeout_ms.unwrap_or(REDIS_TIMEOUT_MS).max(1)),
        })
    }
}

impl RawDaemon {
    fn validate(self, err_at: ErrAt<'_>) -> Result<DaemonConfig, ConfigError> {
        let daemon = self;
        let mut paths = Vec::new();
        for (key, value, default) in [
            ("daemon.pid_file", daemon.pid_file, DAEMON_PID_FILE),
            ("daemon.log_file", daemon.log_file, DAEMON_LOG_FILE),
            ("daemon.state_dir", daemon.state_dir, DAEMON_STATE_DIR),
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
        let backoff_max =
            Duration::from_secs(daemon.backoff_max_secs.unwrap_or(DAEMON_BACKOFF_MAX_SECS));
        if backoff_max < Duration::from_millis(100) {
            return Err(err_at(
                "daemon.backoff_max_secs",
                "must be at least 1".into(),
            ));
        }
        Ok(DaemonConfig {
            pid_file,
            log_file,
            state_dir,
            min_uptime: Duration::from_secs(
                daemon.min_uptime_secs.unwrap_or(DAEMON_MIN_UPTIME_SECS),
            ),
            backoff_max,
            max_restarts: daemon.max_restarts.unwrap_or(DAEMON_MAX_RESTARTS),
            restart_window: Duration::from_secs(
                daemon
                    .restart_window_secs
                    .unwrap_or(DAEMON_RESTART_WINDOW_SECS),
            ),
            stop_timeout: Duration::from_secs(
                daemon.stop_timeout_secs.unwrap_or(DAEMON_STOP_TIMEOUT_SECS),
            ),
            max_rss_bytes: match daemon.max_rss_mb.unwrap_or(DAEMON_MAX_RSS_MB) {
                0 => None,
                mb => Some(mb.saturating_mul(1024 * 1024)),
            },
            watchdog: match daemon.watchdog_secs.unwrap_or(DAEMON_WATCHDOG_SECS) {
                0 => None,
                secs => Some(Duration::from_secs(secs.max(2))),
            },
        })
    }
}

impl RawCache {
    fn validate(self, err_at: ErrAt<'_>) -> Result<CacheConfig, ConfigError> {
        let cache = CacheConfig {
            id_ttl: Duration::from_millis(self.id_ttl_ms.unwrap_or(CACHE_ID_TTL_MS)),
            id_max_entries: self.id_max_entries.unwrap_or(CACHE_ID_MAX_ENTRIES),
            file_max_bytes: self.file_max_bytes.unwrap_or(CACHE_FILE_MAX_BYTES),
            file_total_bytes: self.file_total_bytes.unwrap_or(CACHE_FILE_TOTAL_BYTES),
            open_files: self.open_files.unwrap_or(CACHE_OPEN_FILES),
            file_watches: self.file_watches.unwrap_or(CACHE_FILE_WATCHES),
        };
        if cache.file_max_bytes > cache.file_total_bytes && cache.file_total_bytes > 0 {
            return Err(err_at(
                "cache.file_max_bytes",
                "must not exceed cache.file_total_bytes".into(),
            ));
        }

        Ok(cache)
    }
}

impl RawLimits {
    fn validate(self) -> LimitsConfig {
        let raw_limits = self;
        LimitsConfig {
            header_read_timeout: Duration::from_secs(
                raw_limits
                    .header_read_timeout_secs
                    .unwrap_or(LIMITS_HEADER_READ_TIMEOUT_SECS)
                    .max(1),
            ),
            body_read_timeout: Duration::from_secs(
                raw_limits
                    .body_read_timeout_secs
                    .unwrap_or(LIMITS_BODY_READ_TIMEOUT_SECS)
                    .max(1),
            ),
            idle_timeout: Duration::from_secs(
                raw_limits
                    .idle_timeout_secs
                    .unwrap_or(LIMITS_IDLE_TIMEOUT_SECS)
                    .max(1),
            ),
            write_timeout: Duration::from_secs(
                raw_limits
                    .write_timeout_secs
                    .unwrap_or(LIMITS_WRITE_TIMEOUT_SECS)
                    .max(1),
            ),
            // Below 8 KiB, ordinary browsers with a few cookies would be refused.
            max_header_bytes: raw_limits
                .max_header_bytes
                .unwrap_or(LIMITS_MAX_HEADER_BYTES)
                .max(8192),
            max_uri_bytes: raw_limits
                .max_uri_bytes
                .unwrap_or(LIMITS_MAX_URI_BYTES)
                .max(64),
            max_connections: raw_limits
                .max_connections
                .unwrap_or(LIMITS_MAX_CONNECTIONS)
                .max(1),
            rate_after_bytes: raw_limits
                .rate_after_bytes
                .unwrap_or(LIMITS_RATE_AFTER_BYTES),
            rate_bytes_per_sec: raw_limits
                .rate_bytes_per_sec
                .unwrap_or(LIMITS_RATE_BYTES_PER_SEC),
            socket_unsent_bytes: raw_limits
                .socket_unsent_bytes
                .unwrap_or(LIMITS_SOCKET_UNSENT_BYTES),
        }
    }
}

fn trusted_proxies(
    trusted: Option<Vec<String>>,
    err_at: ErrAt<'_>,
) -> Result<Vec<ipnet::IpNet>, ConfigError> {
    let mut trusted_proxies = Vec::new();
    let trusted =
        trusted.unwrap_or_else(|| TRUSTED_PROXIES.iter().map(|p| p.to_string()).collect());
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
    Ok(trusted_proxies)
}

impl RawAccessLog {
    fn validate(self, err_at: ErrAt<'_>) -> Result<AccessLogConfig, ConfigError> {
        let access_log = AccessLogConfig {
            format: self.format.unwrap_or(AccessLogFormat::Combined),
            path: self.path,
        };
        if let Some(path) = &access_log.path
            && !path.is_absolute()
        {
            return Err(err_at("access_log.path", "must be an absolute path".into()));
        }

        Ok(access_log)
    }
}

impl RawSigning {
    fn validate(self, err_at: ErrAt<'_>) -> Result<SigningConfig, ConfigError> {
        let mut keys = Vec::new();
        for key in self.keys.unwrap_or_default() {
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
        let required = self.required.unwrap_or(SIGNING_REQUIRED);
        if required && keys.is_empty() {
            return Err(err_at(
                "signing.required",
                "signing is required but no key is configured".into(),
            ));
        }
        let revocation_ttl = duration(
            self.revocation_ttl,
            SIGNING_REVOCATION_TTL,
            "signing.revocation_ttl",
            err_at,
        )?;
        if !(Duration::from_secs(60)..=Duration::from_secs(366 * 86_400)).contains(&revocation_ttl)
        {
            return Err(err_at(
                "signing.revocation_ttl",
                "must be from 1 minute to a year".into(),
            ));
        }
        Ok(SigningConfig {
            required,
            keys,
            revocation_ttl,
        })
    }
}

impl RawCors {
    fn validate(self, err_at: ErrAt<'_>) -> Result<CorsConfig, ConfigError> {
        let cors = CorsConfig {
            allow_origins: self.allow_origins.unwrap_or_default(),
            max_age_secs: self.max_age_secs.unwrap_or(CORS_MAX_AGE_SECS),
        };
        for origin in &cors.allow_origins {
            if origin != "*" && !(origin.starts_with("http://") || origin.starts_with("https://")) {
                return Err(err_at(
                    "cors.allow_origins",
                    format!("`{origin}` is not an origin (scheme://host[:port]) or *"),
                ));
            }
        }

        Ok(cors)
    }
}

fn ops_listen(
    text: Option<&str>,
    listen: SocketAddr,
    err_at: ErrAt<'_>,
) -> Result<Option<SocketAddr>, ConfigError> {
    let ops_listen = match text.map(str::trim) {
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

    Ok(ops_listen)
}

fn shutdown(
    drain_delay: Option<RawDuration>,
    err_at: ErrAt<'_>,
) -> Result<ShutdownConfig, ConfigError> {
    let drain_delay = duration(
        drain_delay,
        SHUTDOWN_DRAIN_DELAY,
        "shutdown.drain_delay",
        err_at,
    )?;
    shutdown_within_bounds(drain_delay, err_at)
}

/// A duration key: a bare number is seconds (as the `_secs` keys), text is "5s", "30d".
fn duration(
    raw: Option<RawDuration>,
    default: &str,
    key: &str,
    err_at: ErrAt<'_>,
) -> Result<Duration, ConfigError> {
    let text = match raw {
        Some(RawDuration::Secs(secs)) => return Ok(Duration::from_secs(secs)),
        Some(RawDuration::Text(text)) => text,
        None => default.into(),
    };
    let parsed = match text.trim().parse::<u64>() {
        Ok(secs) => Ok(Duration::from_secs(secs)),
        Err(_) => humantime::parse_duration(text.trim()),
    };
    parsed.map_err(|e| err_at(key, format!("`{text}` is not a duration like \"5s\": {e}")))
}

fn shutdown_within_bounds(
    drain_delay: Duration,
    err_at: ErrAt<'_>,
) -> Result<ShutdownConfig, ConfigError> {
    if drain_delay > Duration::from_secs(3600) {
        return Err(err_at(
            "shutdown.drain_delay",
            "must be at most an hour".into(),
        ));
    }
    Ok(ShutdownConfig { drain_delay })
}

fn ban_urls(urls: Option<Vec<String>>, err_at: ErrAt<'_>) -> Result<Vec<String>, ConfigError> {
    let urls = urls.unwrap_or_default();
    if let Some(bad) = urls.iter().find(|u| !u.starts_with("http://")) {
        return Err(err_at(
            "http_caches.ban_urls",
            format!("`{bad}` is not an http://host:port URL"),
        ));
    }
    Ok(urls)
}
