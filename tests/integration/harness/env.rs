//! One test's world ([`TestEnv`]): a media root, a config with its own database and key
//! prefix over the shared servers, and helpers to fill the catalogue.

use std::path::PathBuf;
use std::process::Command;
use std::sync::atomic::{AtomicU64, Ordering};

use super::backends::{shared_mongo, shared_redis};
use super::procs::{clean_command, tempdir};
use super::server::Musicd;
use mongodb::bson::oid::ObjectId;
use mongodb::bson::{Document, doc};
use musicd::config::{Config, Sources};

pub(crate) static NEXT_TEST: AtomicU64 = AtomicU64::new(1);

/// One test's world: a media root, a config naming unique database and key prefix, and
/// clients to fill MongoDB and inspect Redis.
pub struct TestEnv {
    /// Temp dir holding the media root and the config file.
    pub dir: tempfile::TempDir,
    /// The media root (canonical).
    pub media: PathBuf,
    /// The config file written for this test.
    pub config_file: PathBuf,
    /// The loaded config.
    pub config: Config,
    /// MongoDB collection of this test.
    pub tracks: mongodb::Collection<Document>,
    /// Redis client for assertions.
    pub redis: redis::Client,
    /// The `key=value` overrides the config was loaded with (passed on to binaries).
    pub overrides: Vec<String>,
}

impl TestEnv {
    /// A world over the shared servers.
    pub async fn new() -> TestEnv {
        TestEnv::with(
            &shared_redis().redis_url(),
            &shared_mongo().mongo_uri(),
            &[],
        )
        .await
    }

    /// A world whose directory every user can reach (under `/tmp`, mode 0755), for a test
    /// that runs a program as another user: the checkout may sit under a directory only
    /// root enters (`/root`, or a `mktemp -d`), where `nobody` reaches nothing.
    pub async fn open_to_all() -> TestEnv {
        use std::os::unix::fs::PermissionsExt;
        let dir = tempfile::Builder::new()
            .prefix("musicd-open-")
            .tempdir_in("/tmp")
            .expect("tempdir");
        std::fs::set_permissions(dir.path(), std::fs::Permissions::from_mode(0o755))
            .expect("chmod");
        let redis_url = shared_redis().redis_url();
        let line = format!("url = \"{redis_url}\"");
        TestEnv::with_redis_in(dir, &line, &redis_url, &shared_mongo().mongo_uri(), &[]).await
    }

    /// A world over the shared servers with `key=value` config overrides (as `--set`).
    pub async fn shared_with(overrides: &[&str]) -> TestEnv {
        TestEnv::with(
            &shared_redis().redis_url(),
            &shared_mongo().mongo_uri(),
            overrides,
        )
        .await
    }

    /// Makes MongoDB's writes so far durable (fsync), so a mongod killed with SIGKILL and
    /// restarted still has them, as long-written catalogue entries would be.
    pub async fn make_durable(&self) {
        self.tracks
            .client()
            .database("admin")
            .run_command(doc! { "fsync": 1 })
            .await
            .expect("fsync");
    }

    /// A world over the given servers, with `key=value` config overrides (as `--set`).
    pub async fn with(redis_url: &str, mongo_uri: &str, overrides: &[&str]) -> TestEnv {
        TestEnv::with_redis(
            &format!("url = \"{redis_url}\""),
            redis_url,
            mongo_uri,
            overrides,
        )
        .await
    }

    /// A world over a Redis Cluster given by its nodes.
    pub async fn with_cluster(nodes: &[String], mongo_uri: &str, overrides: &[&str]) -> TestEnv {
        let list = nodes
            .iter()
            .map(|n| format!("\"{n}\""))
            .collect::<Vec<_>>()
            .join(", ");
        TestEnv::with_redis(
            &format!("cluster = [{list}]"),
            &nodes[0],
            mongo_uri,
            overrides,
        )
        .await
    }

    async fn with_redis(
        redis_line: &str,
        redis_url: &str,
        mongo_uri: &str,
        overrides: &[&str],
    ) -> TestEnv {
        TestEnv::with_redis_in(tempdir(), redis_line, redis_url, mongo_uri, overrides).await
    }

    async fn with_redis_in(
        dir: tempfile::TempDir,
        redis_line: &str,
        redis_url: &str,
        mongo_uri: &str,
        overrides: &[&str],
    ) -> TestEnv {
        let media = dir.path().join("media");
        std::fs::create_dir_all(&media).expect("media dir");
        let media = std::fs::canonicalize(&media).expect("canonical media");
        let n = NEXT_TEST.fetch_add(1, Ordering::Relaxed);
        let unique = format!("{}_{}_{n}", std::process::id(), rand::random::<u32>());
        // The access log is off unless a test turns it on (`access_log.format=...`): test
        // output stays readable.
        let text = format!(
            "listen = \"127.0.0.1:0\"\nmedia_roots = [\"{media}\"]\n\
             [mongodb]\nuri = \"{mongo_uri}\"\ndatabase = \"musicd_t{unique}\"\ntimeout_ms = 1000\n\n\
             [redis]\n{redis_line}\nprefix = \"track_t{unique}_\"\n\n\
             [access_log]\nformat = \"off\"\n\n\
             [daemon]\npid_file = \"{dir}/run/musicd.pid\"\nlog_file = \"{dir}/log/musicd.log\"\n\
             state_dir = \"{dir}/state\"\n",
            media = media.display(),
            dir = dir.path().display(),
        );
        let config_file = dir.path().join("musicd.toml");
        std::fs::write(&config_file, text).expect("write config");
        let config = Config::load(&Sources {
            file: Some(config_file.clone()),
            env: Vec::new(),
            overrides: overrides.iter().map(|s| s.to_string()).collect(),
        })
        .expect("test config is valid");
        let overrides = overrides.iter().map(|s| s.to_string()).collect();
        let client = mongodb::Client::with_uri_str(mongo_uri)
            .await
            .expect("mongo client");
        let tracks = client
            .database(&config.mongodb.database)
            .collection::<Document>(&config.mongodb.collection);
        let redis = redis::Client::open(redis_url).expect("redis client");
        TestEnv {
            dir,
            media,
            config_file,
            config,
            tracks,
            redis,
            overrides,
        }
    }

    /// A `musicd`/`musicctl` command with this env's config file and overrides.
    ///
    /// The environment is cleared (only `PATH` is kept): what the caller of the test suite
    /// has set (a `MUSICD_*` variable, `RUST_LOG`, `NOTIFY_SOCKET`) must not change what
    /// the binaries do; a test sets what it needs.
    pub fn command(&self, binary: &str) -> Command {
        let mut command = clean_command(binary);
        command.arg("--config").arg(&self.config_file);
        for item in &self.overrides {
            command.arg("--set").arg(item);
        }
        command
    }

    /// Waits until Redis holds `expected` for `id` (`None`: no entry), failing with `what`
    /// after `within`; how long it took.
    pub async fn until_cached(
        &self,
        id: &ObjectId,
        expected: Option<&[u8]>,
        within: std::time::Duration,
        what: &str,
    ) -> std::time::Duration {
        let started = std::time::Instant::now();
        while self.cached(id).await.as_deref() != expected {
            assert!(started.elapsed() < within, "{what}");
            tokio::time::sleep(std::time::Duration::from_millis(5)).await;
        }
        started.elapsed()
    }

    /// Runs `musicctl ARGS --json` on this world's config: its exit code and JSON report.
    pub fn musicctl_json<I, A>(&self, args: I) -> (Option<i32>, serde_json::Value)
    where
        I: IntoIterator<Item = A>,
        A: AsRef<std::ffi::OsStr>,
    {
        let output = self
            .command("musicctl")
            .args(args)
            .arg("--json")
            .output()
            .expect("musicctl runs");
        let stdout = String::from_utf8_lossy(&output.stdout);
        let report = serde_json::from_str(&stdout).unwrap_or_else(|err| {
            panic!("{err}: {stdout}{}", String::from_utf8_lossy(&output.stderr))
        });
        (output.status.code(), report)
    }

    /// Writes a file under the media root.
    pub fn write_file(&self, relative: &str, bytes: &[u8]) -> PathBuf {
        let path = self.media.join(relative);
        if let Some(parent) = path.parent() {
            std::fs::create_dir_all(parent).expect("mkdir");
        }
        std::fs::write(&path, bytes).expect("write media file");
        path
    }

    /// Inserts a track document with this path and returns its id.
    pub async fn insert(&self, path: &str) -> ObjectId {
        let id = ObjectId::new();
        self.tracks
            .insert_one(doc! { "_id": id, "path": path, "title": "test" })
            .await
            .expect("insert track");
        id
    }

    /// Writes a file and inserts its document.
    pub async fn track(&self, relative: &str, bytes: &[u8]) -> (ObjectId, PathBuf) {
        let path = self.write_file(relative, bytes);
        let id = self.insert(&path.display().to_string()).await;
        (id, path)
    }

    /// The Redis key of an id.
    pub fn key(&self, id: &ObjectId) -> String {
        format!("{}{}", self.config.redis.prefix, id.to_hex())
    }

    /// Raw Redis value of any key.
    pub async fn redis_get(&self, key: &str) -> Option<Vec<u8>> {
        let mut conn = self
            .redis
            .get_multiplexed_async_connection()
            .await
            .expect("redis connection");
        redis::cmd("GET")
            .arg(key)
            .query_async(&mut conn)
            .await
            .expect("redis GET")
    }

    /// Raw Redis value of an id's key.
    pub async fn cached(&self, id: &ObjectId) -> Option<Vec<u8>> {
        self.redis_get(&self.key(id)).await
    }

    /// The most common start: a world over the shared servers holding one track, and
    /// musicd serving it.
    pub async fn serving(name: &str, bytes: &[u8]) -> (TestEnv, Musicd, ObjectId, PathBuf) {
        let env = TestEnv::new().await;
        let (id, path) = env.track(name, bytes).await;
        let server = env.musicd().await;
        (env, server, id, path)
    }

    /// Points a track's document at another path (a move, as the catalogue makes it).
    pub async fn set_path(&self, id: &ObjectId, path: &std::path::Path) {
        self.tracks
            .update_one(
                doc! { "_id": id },
                doc! { "$set": { "path": path.display().to_string() } },
            )
            .await
            .expect("update the path");
    }

    /// Starts musicd in-process with this env's config.
    pub async fn musicd(&self) -> Musicd {
        Musicd::start(&self.config).await
    }
}
