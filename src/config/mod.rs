//! Configuration: one [`Config`] shared by `musicd` and `musicctl`.
//!
//! Three layers, later ones winning: the TOML file, `MUSICD_*` environment variables, and
//! `key=value` overrides from command-line flags. All three are merged into one TOML table
//! *before* anything is deserialized, so an unknown key or a malformed value is reported the
//! same way wherever it came from: with its dotted key path and its source. The result is
//! validated once (listen address, media roots that exist, TTLs); the rest of the crate only
//! sees typed values and never reads the environment itself.
//!
//! This file holds the typed configuration and loading; [`sources`] the layers and their
//! merge, `raw` the raw shapes, `validate` the validation and every default (which
//! `deploy/musicd.toml` states too: a test compares the two).

pub(crate) mod defaults;
mod raw;
pub(crate) mod sources;
mod validate;

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::time::Duration;

use serde::Deserialize;

use self::raw::RawConfig;
pub use self::sources::Sources;
use self::sources::{env_key, read_file, remove_key, set_key};

/// Default location of the configuration file.
pub(crate) const DEFAULT_CONFIG_PATH: &str = "/etc/musicd/musicd.toml";

/// Prefix of the environment variables that override the file.
pub(crate) const ENV_PREFIX: &str = "MUSICD_";

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
pub(crate) enum ServeMode {
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
pub(crate) enum AccessLogFormat {
    /// NCSA combined (nginx, Apache), then musicd's own fields.
    Combined,
    /// One JSON object per line.
    Json,
    /// No access log.
    Off,
}

/// The access log.
#[derive(Debug, Clone)]
pub(crate) struct AccessLogConfig {
    pub(crate) format: AccessLogFormat,
    /// The file (appended to, reopened on SIGUSR1); `None`: stderr.
    pub(crate) path: Option<PathBuf>,
}

/// Signed links.
#[derive(Debug, Clone, Default)]
pub(crate) struct SigningConfig {
    /// Every track request must carry a valid signature.
    pub(crate) required: bool,
    /// Key ids and their secrets (read from their files at load).
    pub(crate) keys: Vec<(String, Vec<u8>)>,
    /// How long a revocation lasts unless told otherwise; no session-bound link may live
    /// longer.
    pub(crate) revocation_ttl: Duration,
}

/// CORS for web players.
#[derive(Debug, Clone, Default)]
pub(crate) struct CorsConfig {
    /// Origins whose scripts may read track answers (`*`: any; empty: CORS off).
    pub(crate) allow_origins: Vec<String>,
    /// How long a browser may cache a preflight's answer.
    pub(crate) max_age_secs: u32,
}

/// The validated configuration.
#[derive(Debug, Clone)]
pub struct Config {
    /// Address the HTTP server listens on.
    pub(crate) listen: SocketAddr,
    /// A separate address for `/metrics` and `/readyz` (and `/healthz`); when set, the
    /// public address answers those two 404.
    pub(crate) ops_listen: Option<SocketAddr>,
    /// Canonicalized directories that served files must lie under.
    pub(crate) media_roots: Vec<PathBuf>,
    /// How file bytes are delivered.
    pub(crate) serve_mode: ServeMode,
    /// URL prefixes of the track routes, e.g. `/musicdb`.
    pub route_prefixes: Vec<String>,
    /// `Cache-Control` value sent with files.
    pub(crate) cache_control: String,
    /// A request with more ranges than this gets the whole file (200) instead of a multipart answer.
    pub(crate) max_ranges: usize,
    /// Location prefix nginx maps to the media roots in x-accel-redirect mode.
    pub(crate) accel_location: String,
    /// Log filter (tracing `EnvFilter` syntax), e.g. `info` or `musicd=debug`.
    pub(crate) log_level: String,
    /// Event loops (threads) serving connections; 0 in the file means one per core.
    pub(crate) worker_threads: usize,
    /// Event loop i runs only on the i-th CPU this process may use (when there are no more
    /// loops than CPUs).
    pub(crate) worker_cpu_affinity: bool,
    /// MongoDB settings.
    pub mongodb: MongoConfig,
    /// Redis settings.
    pub redis: RedisConfig,
    /// Process supervision settings (`musicd start`).
    pub daemon: DaemonConfig,
    /// In-process caches.
    pub(crate) cache: CacheConfig,
    /// Limits on what a client may send and hold.
    pub(crate) limits: LimitsConfig,
    /// Whether a path may pass through a symlink inside a media root (links out of the
    /// roots are refused either way).
    pub(crate) follow_symlinks: bool,
    /// Whether large bodies are sent with `sendfile(2)` (true) or copied at send time.
    pub(crate) zero_copy: bool,
    pub(crate) access_log: AccessLogConfig,
    /// Peers whose `X-Forwarded-For` / `X-Real-IP` name the client.
    pub(crate) trusted_proxies: Vec<ipnet::IpNet>,
    /// Every connection starts with a PROXY protocol header (v1 or v2).
    pub(crate) proxy_protocol: bool,
    /// Signed links.
    pub(crate) signing: SigningConfig,
    pub(crate) cors: CorsConfig,
    /// HTTP caches in front (varnish) that `musicctl purge` bans in too: `http://host:port`.
    pub ban_urls: Vec<String>,
    /// How a stop is taken.
    pub shutdown: ShutdownConfig,
    /// `MUSICD_*` environment variables that name no key (ignored; warned about at start).
    pub(crate) ignored_env: Vec<String>,
}

/// Limits on clients: every one has a safe default.
#[derive(Debug, Clone)]
pub(crate) struct LimitsConfig {
    /// Time a client has to send a request's headers (slowloris).
    pub(crate) header_read_timeout: Duration,
    /// Time a client has to send a request's body, from the end of its head.
    pub(crate) body_read_timeout: Duration,
    /// An idle keep-alive connection is closed after this long.
    pub(crate) idle_timeout: Duration,
    /// A response whose client stops reading for this long is dropped.
    pub(crate) write_timeout: Duration,
    /// Largest request head (request line + headers) accepted.
    pub(crate) max_header_bytes: usize,
    /// Longest URL accepted (longer: 414).
    pub(crate) max_uri_bytes: usize,
    /// Connections served at once per process; beyond, new ones get a 503 and are closed.
    pub(crate) max_connections: usize,
    /// A response body is sent at full speed for this many bytes, then paced.
    pub(crate) rate_after_bytes: u64,
    /// The pace, in bytes per second (0: none).
    pub(crate) rate_bytes_per_sec: u64,
    /// Most bytes a connection's socket holds not yet sent (`TCP_NOTSENT_LOWAT`; 0: the
    /// kernel's default, no bound).
    pub(crate) socket_unsent_bytes: u32,
}

/// The in-process caches in front of Redis and the disk.
#[derive(Debug, Clone)]
pub(crate) struct CacheConfig {
    /// How long an id -> path answer is reused without asking Redis (0 disables). This is
    /// also how long a purge or a changed document can take to reach this process.
    pub(crate) id_ttl: Duration,
    /// Most ids held.
    pub(crate) id_max_entries: usize,
    /// Files up to this size are kept in memory (revalidated by metadata on every request).
    pub(crate) file_max_bytes: u64,
    /// Memory for cached files in all (0 disables the in-memory copies).
    pub(crate) file_total_bytes: u64,
    /// Larger files kept open, at most this many (0: opened for every request).
    pub(crate) open_files: usize,
    /// inotify watches the file cache may hold to skip the per-turn `stat` (0: none).
    pub(crate) file_watches: usize,
}

/// How `musicd run` stops on SIGTERM.
#[derive(Debug, Clone)]
pub struct ShutdownConfig {
    /// How long to keep accepting and serving after the first SIGTERM, with `/readyz`
    /// answering 503 `draining`, before the listeners close: the time a load balancer or
    /// a scheduler takes to stop sending new connections. Zero: close at once.
    pub drain_delay: Duration,
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
    pub(crate) min_uptime: Duration,
    /// Cap of the restart backoff (which starts at 100 ms and doubles).
    pub(crate) backoff_max: Duration,
    /// More crashes than this within `restart_window` make the supervisor give up.
    pub(crate) max_restarts: u32,
    /// See `max_restarts`.
    pub(crate) restart_window: Duration,
    /// How long a stopping worker may finish in-flight responses; also the grace of
    /// `musicd run` after SIGTERM.
    pub stop_timeout: Duration,
    /// A worker that sends no `WATCHDOG=1` for this long (a hung event loop) is killed and
    /// replaced; `None`: no watchdog.
    pub(crate) watchdog: Option<Duration>,
    /// A worker whose resident memory stays above this is replaced gracefully (new worker
    /// ready first, the old one drained), like pm2's `max_memory_restart`.
    pub(crate) max_rss_bytes: Option<u64>,
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
    pub(crate) path_field: String,
    /// How long to wait for a usable server before a lookup fails (then 503).
    pub timeout: Duration,
    /// Whether to follow the collection's change stream (`crate::follow`).
    pub watch: WatchMode,
    /// The follower's lease in Redis: a successor takes over at most this long after the
    /// follower dies.
    pub(crate) watch_lease: Duration,
}

/// `mongodb.watch`: whether this process follows the change stream.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum WatchMode {
    /// Follow when MongoDB is a replica set (change streams need one), else stay off.
    Auto,
    /// Follow; keep retrying (and saying why) while MongoDB is not a replica set.
    On,
    /// Never follow (another process, e.g. `musicctl watch`, does it).
    Off,
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
    pub(crate) ttl: Duration,
    /// Lifetime of a negative (unknown id) entry.
    pub(crate) negative_ttl: Duration,
    /// Up to this fraction of `ttl` is added at random so entries do not expire together.
    pub(crate) ttl_jitter: f64,
    /// Bound on one Redis command; past it the request is served from MongoDB.
    pub timeout: Duration,
}

impl RedisConfig {
    /// Bound on an operator's step over the whole keyspace (a `SCAN` page, connecting to
    /// each master), or on the follower's last round trips at a stop: a few commands, so
    /// a few command timeouts.
    pub fn batch_timeout(&self) -> Duration {
        self.timeout * 4
    }
}

impl Config {
    /// The route prefix links are made under: the first configured one.
    pub fn track_prefix(&self) -> &str {
        self.route_prefixes
            .first()
            .map_or(defaults::ROUTE_PREFIXES[0], String::as_str)
    }

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
        let mut config = raw.validate(&err_at, check_roots)?;
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
            &|key, message| ConfigError::Key {
                source_name: "(built-in defaults)".into(),
                key: key.into(),
                message,
            },
            true,
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::path::Path;

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
    fn a_key_prefix_holds_braces_only_as_one_hash_tag() {
        let with = |prefix: &str| {
            load_text(
                "media_roots = [\"$ROOT\"]\n",
                &[],
                &[&format!("redis.prefix=\"{prefix}\"")],
            )
        };
        for fine in ["track_", "{musicd}track_", "app{t}_"] {
            assert!(with(fine).is_ok(), "{fine}");
        }
        for refused in ["a}b_", "a{b_", "a{}b_", "}{x}_"] {
            let err = with(refused).expect_err(refused).to_string();
            assert!(err.contains("hash tag"), "{refused}: {err}");
        }
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
                ("MUSICD_CORS_MAX_AGE_SECS", "60"),
            ],
            &[],
        )
        .expect("unknown variables are not fatal");
        assert_eq!(cfg.redis.ttl.as_secs(), 7, "known ones still apply");
        assert_eq!(
            cfg.cors.max_age_secs, 60,
            "every table can be set from the environment"
        );
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

    /// `deploy/musicd.toml` says every key's default: loading it must give exactly the
    /// configuration that loading nothing gives (media roots aside, which have no default).
    #[test]
    fn the_sample_config_states_the_defaults_the_code_has() {
        let sample = Path::new(env!("CARGO_MANIFEST_DIR")).join("deploy/musicd.toml");
        let dir = tempfile::tempdir().expect("tempdir");
        let root = dir.path().display().to_string();
        let env = vec![("MUSICD_MEDIA_ROOTS".to_string(), root.clone())];
        let from_sample = Config::load(&Sources {
            file: Some(sample),
            env: env.clone(),
            overrides: Vec::new(),
        })
        .expect("sample config is valid");
        let empty = dir.path().join("empty.toml");
        std::fs::write(&empty, "").expect("write");
        let from_nothing = Config::load(&Sources {
            file: Some(empty),
            env,
            overrides: Vec::new(),
        })
        .expect("defaults are valid");
        let shown = |config: &Config| format!("{config:#?}");
        assert_eq!(
            shown(&from_sample),
            shown(&from_nothing),
            "deploy/musicd.toml and the code disagree on a default"
        );
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
            ("http_caches.", "[http_caches]\nzz_probe = 1"),
            ("shutdown.", "[shutdown]\nzz_probe = 1"),
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
                        | "http_caches"
                        | "shutdown"
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
