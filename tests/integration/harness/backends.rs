//! Private `redis-server` and `mongod` instances (single, Redis Cluster, MongoDB replica
//! set) on free loopback ports, and the ones shared by every test of the process.

use std::io::{Read, Write};
use std::net::TcpStream;
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::sync::LazyLock;
use std::time::{Duration, Instant};

use super::procs::{find_binary, free_port, repo_root, shared_tempdir, spawn, tempdir, wait_until};
use mongodb::bson::doc;

pub(crate) fn redis_ping(port: u16) -> bool {
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

pub(crate) fn accepts(port: u16) -> bool {
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
pub(crate) enum Kind {
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
