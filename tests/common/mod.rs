//! The one test harness: private `redis-server` and `mongod` instances on free loopback
//! ports with temp data dirs, an in-process musicd, and helpers to fill the catalogue.
//!
//! Servers are started through one long-lived spawner thread with `PR_SET_PDEATHSIG`, so the
//! kernel kills them when the test process exits, even when a test panics or the harness
//! is interrupted; instances owned by a test are also stopped on drop. Every test gets its
//! own database name and key prefix, so tests run in parallel against shared servers.

#![allow(dead_code)]

pub mod corpus;
pub mod load;
pub mod nginx;
pub mod raw;
pub mod supervised;
pub mod wire_check;

use std::collections::HashSet;
use std::io::{Read, Write};
use std::net::{SocketAddr, TcpListener as StdListener, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{LazyLock, Mutex, mpsc};
use std::time::{Duration, Instant};

use mongodb::bson::oid::ObjectId;
use mongodb::bson::{Document, doc};
use musicd::config::{Config, Sources};
use musicd::http::{AppState, ServeOptions};

/// Where test data lives: inside `target/`, so nothing leaks into the system temp dir.
pub fn scratch_root() -> PathBuf {
    PathBuf::from(env!("CARGO_TARGET_TMPDIR"))
}

/// A temp dir under [`scratch_root`], removed on drop.
pub fn tempdir() -> tempfile::TempDir {
    tempdir_named("musicd-test-")
}

fn tempdir_named(prefix: &str) -> tempfile::TempDir {
    std::fs::create_dir_all(scratch_root()).expect("create scratch root");
    tempfile::Builder::new()
        .prefix(prefix)
        .tempdir_in(scratch_root())
        .expect("tempdir")
}

/// Shared servers live in statics, which are never dropped: their dirs carry the pid, and
/// each run removes those of test processes that are gone.
fn shared_tempdir() -> tempfile::TempDir {
    static SWEEP: std::sync::Once = std::sync::Once::new();
    SWEEP.call_once(|| {
        let Ok(entries) = std::fs::read_dir(scratch_root()) else {
            return;
        };
        for entry in entries.flatten() {
            let name = entry.file_name().to_string_lossy().into_owned();
            let Some(pid) = name
                .strip_prefix("musicd-shared-")
                .and_then(|rest| rest.split('-').next())
                .and_then(|pid| pid.parse::<u32>().ok())
            else {
                continue;
            };
            if !Path::new(&format!("/proc/{pid}")).exists() {
                let _ = std::fs::remove_dir_all(entry.path());
            }
        }
    });
    tempdir_named(&format!("musicd-shared-{}-", std::process::id()))
}

type SpawnRequest = (Command, mpsc::Sender<std::io::Result<Child>>);

/// The thread that spawns every server; it never exits, so `PDEATHSIG` fires only when the
/// whole test process ends (the signal is tied to the spawning *thread*).
static SPAWNER: LazyLock<Mutex<mpsc::Sender<SpawnRequest>>> = LazyLock::new(|| {
    let (tx, rx) = mpsc::channel::<SpawnRequest>();
    std::thread::Builder::new()
        .name("test-spawner".into())
        .spawn(move || {
            for (mut command, reply) in rx {
                let _ = reply.send(spawn_with_death_signal(&mut command));
            }
        })
        .expect("spawner thread");
    Mutex::new(tx)
});

fn spawn_with_death_signal(command: &mut Command) -> std::io::Result<Child> {
    use std::os::unix::process::CommandExt;
    let die_with_parent = || {
        // SAFETY: prctl with integer arguments, async-signal-safe.
        if unsafe { libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL, 0, 0, 0) } != 0 {
            return Err(std::io::Error::last_os_error());
        }
        Ok(())
    };
    // SAFETY: the hook only calls prctl, which is async-signal-safe and touches no memory
    // of the parent; it runs in the child between fork and exec, as pre_exec requires.
    unsafe {
        command.pre_exec(die_with_parent);
    }
    command.spawn()
}

/// Spawns a child that dies with the test process.
pub fn spawn(command: Command) -> Child {
    let (tx, rx) = mpsc::channel();
    SPAWNER
        .lock()
        .unwrap_or_else(|p| p.into_inner())
        .send((command, tx))
        .expect("spawner alive");
    rx.recv().expect("spawner reply").expect("spawn server")
}

static HANDED_OUT: LazyLock<Mutex<HashSet<u16>>> = LazyLock::new(|| Mutex::new(HashSet::new()));

/// A loopback port that was free a moment ago and that no other test of this process got.
pub fn free_port() -> u16 {
    loop {
        let port = StdListener::bind("127.0.0.1:0")
            .and_then(|l| l.local_addr())
            .expect("bind probe")
            .port();
        if HANDED_OUT
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .insert(port)
        {
            return port;
        }
    }
}

fn find_binary(env: &str, name: &str, fallback: &[PathBuf]) -> PathBuf {
    if let Ok(path) = std::env::var(env) {
        return PathBuf::from(path);
    }
    if let Some(paths) = std::env::var_os("PATH") {
        for dir in std::env::split_paths(&paths) {
            let candidate = dir.join(name);
            if candidate.is_file() {
                return candidate;
            }
        }
    }
    for candidate in fallback {
        if candidate.is_file() {
            return candidate.clone();
        }
    }
    panic!("{name} not found: install it (scripts/install-deps.sh) or set {env}");
}

fn repo_root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

/// Waits until `ready` is true or the child exits; false if it exited or timed out.
fn wait_until(child: &mut Child, timeout: Duration, mut ready: impl FnMut() -> bool) -> bool {
    let deadline = Instant::now() + timeout;
    while Instant::now() < deadline {
        if let Ok(Some(_)) = child.try_wait() {
            return false;
        }
        if ready() {
            return true;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    false
}

fn redis_ping(port: u16) -> bool {
    let Ok(mut stream) = TcpStream::connect(("127.0.0.1", port)) else {
        return false;
    };
    let _ = stream.set_read_timeout(Some(Duration::from_millis(500)));
    if stream.write_all(b"PING\r\n").is_err() {
        return false;
    }
    let mut buf = [0u8; 7];
    stream.read_exact(&mut buf).is_ok() && &buf == b"+PONG\r\n"
}

fn accepts(port: u16) -> bool {
    TcpStream::connect(("127.0.0.1", port)).is_ok()
}

/// A private server process on a loopback port.
pub struct Server {
    /// Its port.
    pub port: u16,
    child: Option<Child>,
    kind: Kind,
    dir: PathBuf,
    _owned_dir: Option<tempfile::TempDir>,
}

#[derive(Clone, Copy)]
enum Kind {
    Redis,
    ClusterNode,
    Mongo,
    ReplicaSet,
}

impl Server {
    /// Starts a private redis-server.
    pub fn redis() -> Server {
        Server::start(Kind::Redis, tempdir())
    }

    /// Starts a private mongod.
    pub fn mongo() -> Server {
        Server::start(Kind::Mongo, tempdir())
    }

    fn start(kind: Kind, dir: tempfile::TempDir) -> Server {
        let path = dir.path().to_path_buf();
        let mut server = Server {
            port: 0,
            child: None,
            kind,
            dir: path,
            _owned_dir: Some(dir),
        };
        for _attempt in 0..5 {
            server.port = free_port();
            if server.launch() {
                return server;
            }
        }
        panic!("could not start {}", server.name());
    }

    fn name(&self) -> &'static str {
        match self.kind {
            Kind::Redis | Kind::ClusterNode => "redis-server",
            Kind::Mongo | Kind::ReplicaSet => "mongod",
        }
    }

    fn command(&self) -> Command {
        let port = self.port.to_string();
        match self.kind {
            Kind::Redis | Kind::ClusterNode => {
                let mut cmd =
                    Command::new(find_binary("MUSICD_TEST_REDIS_SERVER", "redis-server", &[]));
                cmd.args([
                    "--port",
                    &port,
                    "--bind",
                    "127.0.0.1",
                    "--save",
                    "",
                    "--appendonly",
                    "no",
                ])
                .args(["--protected-mode", "no", "--daemonize", "no"])
                .arg("--dir")
                .arg(&self.dir)
                .arg("--logfile")
                .arg(self.dir.join("redis.log"));
                if matches!(self.kind, Kind::ClusterNode) {
                    cmd.args(["--cluster-enabled", "yes", "--cluster-node-timeout", "5000"])
                        .arg("--cluster-config-file")
                        .arg(self.dir.join("nodes.conf"));
                }
                cmd
            }
            Kind::Mongo | Kind::ReplicaSet => {
                let mut cmd = Command::new(find_binary(
                    "MUSICD_TEST_MONGOD",
                    "mongod",
                    &[repo_root().join(".tools/bin/mongod")],
                ));
                let db = self.dir.join("db");
                let _ = std::fs::create_dir_all(&db);
                cmd.arg("--dbpath")
                    .arg(&db)
                    .args(["--port", &port, "--bind_ip", "127.0.0.1", "--nounixsocket"])
                    .args(["--wiredTigerCacheSizeGB", "0.25"])
                    .args(["--setParameter", "diagnosticDataCollectionEnabled=false"])
                    .arg("--logpath")
                    .arg(self.dir.join("mongod.log"));
                if matches!(self.kind, Kind::ReplicaSet) {
                    cmd.args(["--replSet", "rs0"]);
                }
                cmd
            }
        }
    }

    fn launch(&mut self) -> bool {
        let mut cmd = self.command();
        cmd.stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null());
        let mut child = spawn(cmd);
        let port = self.port;
        let up = match self.kind {
            Kind::Redis | Kind::ClusterNode => {
                wait_until(&mut child, Duration::from_secs(10), || redis_ping(port))
            }
            Kind::Mongo | Kind::ReplicaSet => {
                wait_until(&mut child, Duration::from_secs(60), || accepts(port))
            }
        };
        if up {
            self.child = Some(child);
        } else {
            let _ = child.kill();
            let _ = child.wait();
        }
        up
    }

    /// Kills the server (SIGKILL), as a crash would.
    pub fn kill(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }

    /// Starts the server again on the same port with the same data.
    pub fn restart(&mut self) {
        self.kill();
        let deadline = Instant::now() + Duration::from_secs(30);
        while !self.launch() {
            assert!(
                Instant::now() < deadline,
                "{} did not come back",
                self.name()
            );
            std::thread::sleep(Duration::from_millis(200));
        }
    }

    /// `redis://127.0.0.1:PORT`.
    pub fn redis_url(&self) -> String {
        format!("redis://127.0.0.1:{}", self.port)
    }

    /// `mongodb://127.0.0.1:PORT`.
    pub fn mongo_uri(&self) -> String {
        format!("mongodb://127.0.0.1:{}/?directConnection=true", self.port)
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        self.kill();
    }
}

/// A 3-master Redis Cluster on loopback.
pub struct RedisCluster {
    /// The nodes.
    pub nodes: Vec<Server>,
}

impl RedisCluster {
    /// Starts three cluster-enabled servers and joins them (`redis-cli --cluster create`).
    pub fn start() -> RedisCluster {
        let nodes: Vec<Server> = (0..3)
            .map(|_| Server::start(Kind::ClusterNode, tempdir()))
            .collect();
        let mut create = Command::new("redis-cli");
        create.arg("--cluster").arg("create");
        for node in &nodes {
            create.arg(format!("127.0.0.1:{}", node.port));
        }
        let output = create
            .args(["--cluster-replicas", "0", "--cluster-yes"])
            .output()
            .expect("redis-cli --cluster create");
        assert!(
            output.status.success(),
            "{}",
            String::from_utf8_lossy(&output.stdout)
        );
        let deadline = Instant::now() + Duration::from_secs(30);
        for node in &nodes {
            loop {
                let info = Command::new("redis-cli")
                    .args(["-p", &node.port.to_string(), "cluster", "info"])
                    .output()
                    .expect("cluster info");
                if String::from_utf8_lossy(&info.stdout).contains("cluster_state:ok") {
                    break;
                }
                assert!(Instant::now() < deadline, "cluster did not form");
                std::thread::sleep(Duration::from_millis(50));
            }
        }
        RedisCluster { nodes }
    }

    /// `redis://` URLs of the nodes.
    pub fn urls(&self) -> Vec<String> {
        self.nodes.iter().map(Server::redis_url).collect()
    }

    /// Keys on each node (DBSIZE), in node order.
    pub fn sizes(&self) -> Vec<u64> {
        self.nodes
            .iter()
            .map(|node| {
                let out = Command::new("redis-cli")
                    .args(["-p", &node.port.to_string(), "dbsize"])
                    .output()
                    .expect("dbsize");
                String::from_utf8_lossy(&out.stdout)
                    .trim()
                    .parse()
                    .expect("number")
            })
            .collect()
    }
}

/// A single-node MongoDB replica set (`rs0`), initiated and primary.
pub async fn mongo_replica_set() -> Server {
    let server = tokio::task::block_in_place(|| Server::start(Kind::ReplicaSet, tempdir()));
    let direct = format!("mongodb://127.0.0.1:{}/?directConnection=true", server.port);
    {
        let client = mongodb::Client::with_uri_str(&direct)
            .await
            .expect("client");
        let admin = client.database("admin");
        let config = doc! { "_id": "rs0", "members": [ { "_id": 0, "host": format!("127.0.0.1:{}", server.port) } ] };
        admin
            .run_command(doc! { "replSetInitiate": config })
            .await
            .expect("replSetInitiate");
        let deadline = Instant::now() + Duration::from_secs(60);
        loop {
            let hello = admin.run_command(doc! { "hello": 1 }).await.expect("hello");
            if hello.get_bool("isWritablePrimary").unwrap_or(false) {
                break;
            }
            assert!(Instant::now() < deadline, "replica set never got a primary");
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }
    server
}

/// Redis shared by the tests of this process (each uses its own key prefix).
pub fn shared_redis() -> &'static Server {
    static REDIS: LazyLock<Server> = LazyLock::new(|| Server::start(Kind::Redis, shared_tempdir()));
    &REDIS
}

/// mongod shared by the tests of this process (each uses its own database).
pub fn shared_mongo() -> &'static Server {
    static MONGO: LazyLock<Server> = LazyLock::new(|| Server::start(Kind::Mongo, shared_tempdir()));
    &MONGO
}

static NEXT_TEST: AtomicU64 = AtomicU64::new(1);

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
        let dir = tempdir();
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

    /// Raw Redis value of an id's key.
    pub async fn cached(&self, id: &ObjectId) -> Option<Vec<u8>> {
        let mut conn = self
            .redis
            .get_multiplexed_async_connection()
            .await
            .expect("redis connection");
        redis::cmd("GET")
            .arg(self.key(id))
            .query_async(&mut conn)
            .await
            .expect("redis GET")
    }

    /// Starts musicd in-process with this env's config.
    pub async fn musicd(&self) -> Musicd {
        Musicd::start(&self.config).await
    }
}

/// The value of one series (name and labels, as printed) in a `/metrics` text.
pub fn metric(text: &str, series: &str) -> Option<f64> {
    text.lines()
        .find_map(|line| line.strip_prefix(series)?.trim().parse().ok())
}

/// deterministic pseudo-random bytes, so every offset has a distinct value to check.
pub fn pattern(len: usize, seed: u64) -> Vec<u8> {
    let mut x = seed
        .wrapping_mul(6364136223846793005)
        .wrapping_add(1442695040888963407)
        | 1;
    (0..len)
        .map(|_| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            (x >> 24) as u8
        })
        .collect()
}

/// musicd running in this test's runtime.
pub struct Musicd {
    /// Where it listens.
    pub addr: SocketAddr,
    stop: Option<tokio::sync::oneshot::Sender<()>>,
    task: Option<tokio::task::JoinHandle<std::io::Result<()>>>,
}

impl Musicd {
    /// Binds a free port and serves `config` on it.
    pub async fn start(config: &Config) -> Musicd {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
            .await
            .expect("bind");
        let addr = listener.local_addr().expect("addr");
        let state = AppState::new(config).await.expect("app state");
        let metrics = std::sync::Arc::clone(&state.metrics);
        let app = musicd::http::app(state, &config.route_prefixes);
        let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
        let options = ServeOptions {
            grace: Duration::from_secs(5),
            metrics: Some(metrics),
            ..ServeOptions::from_config(config)
        };
        let task = tokio::spawn(musicd::http::serve(
            listener,
            app,
            async {
                let _ = stopped.await;
            },
            options,
        ));
        Musicd {
            addr,
            stop: Some(stop),
            task: Some(task),
        }
    }

    /// `http://addr{path}`.
    pub fn url(&self, path: &str) -> String {
        format!("http://{}{path}", self.addr)
    }

    /// The canonical track URL of an id.
    pub fn track_url(&self, id: &ObjectId) -> String {
        self.url(&format!("/musicdb/{}/song.mp3", id.to_hex()))
    }

    /// Stops accepting and drains.
    pub async fn shutdown(mut self) {
        if let Some(stop) = self.stop.take() {
            let _ = stop.send(());
        }
        if let Some(task) = self.task.take() {
            let _ = task.await;
        }
    }
}

impl Drop for Musicd {
    fn drop(&mut self) {
        if let Some(stop) = self.stop.take() {
            let _ = stop.send(());
        }
    }
}

/// An HTTP client that does not follow redirects or decompress.
pub fn client() -> reqwest::Client {
    reqwest::Client::builder()
        .redirect(reqwest::redirect::Policy::none())
        .timeout(Duration::from_secs(30))
        .build()
        .expect("http client")
}

/// GET `url` with extra headers: status, headers and the whole body.
pub async fn fetch_with(
    url: &str,
    headers: &[(&str, &str)],
) -> (
    reqwest::StatusCode,
    reqwest::header::HeaderMap,
    bytes::Bytes,
) {
    let mut request = client().get(url);
    for (name, value) in headers {
        request = request.header(*name, *value);
    }
    let response = request.send().await.expect("request sent");
    let status = response.status();
    let headers = response.headers().clone();
    let body = response.bytes().await.expect("body");
    (status, headers, body)
}

/// GET `url`: status, headers and the whole body.
pub async fn fetch(
    url: &str,
) -> (
    reqwest::StatusCode,
    reqwest::header::HeaderMap,
    bytes::Bytes,
) {
    fetch_with(url, &[]).await
}

/// A command for one of this package's binaries with a clean environment (only `PATH`).
pub fn clean_command(binary: &str) -> Command {
    let mut command = Command::new(bin(binary));
    command.env_clear();
    if let Some(path) = std::env::var_os("PATH") {
        command.env("PATH", path);
    }
    command
}

/// Path to a built binary of this package.
pub fn bin(name: &str) -> PathBuf {
    match name {
        "musicd" => PathBuf::from(env!("CARGO_BIN_EXE_musicd")),
        "musicctl" => PathBuf::from(env!("CARGO_BIN_EXE_musicctl")),
        other => panic!("no binary {other}"),
    }
}

/// Whether a path exists (for readable assertions).
pub fn exists(path: &Path) -> bool {
    path.exists()
}
