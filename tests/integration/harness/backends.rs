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

    /// Its pid, while it runs.
    pub fn pid(&self) -> Option<i32> {
        self.child.as_ref().and_then(|c| i32::try_from(c.id()).ok())
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
        RedisCluster::start_nodes(3, 0)
    }

    /// Three masters with a replica each (six servers), for failover.
    pub fn start_with_replicas() -> RedisCluster {
        let cluster = RedisCluster::start_nodes(6, 1);
        let deadline = Instant::now() + Duration::from_secs(30);
        while cluster
            .roles()
            .iter()
            .filter(|r| r.as_str() == "slave")
            .count()
            < 3
        {
            assert!(Instant::now() < deadline, "replicas never attached");
            std::thread::sleep(Duration::from_millis(100));
        }
        cluster
    }

    fn cli(port: u16, args: &[&str]) -> String {
        let output = Command::new("redis-cli")
            .arg("-p")
            .arg(port.to_string())
            .args(args)
            .output()
            .expect("redis-cli");
        String::from_utf8_lossy(&output.stdout).into_owned()
    }

    /// Each node's role (`master` or `slave`, as `ROLE` says), in node order.
    pub fn roles(&self) -> Vec<String> {
        self.nodes
            .iter()
            .map(|n| {
                RedisCluster::cli(n.port, &["role"])
                    .lines()
                    .next()
                    .unwrap_or_default()
                    .to_string()
            })
            .collect()
    }

    /// Promotes a replica with `CLUSTER FAILOVER` (its master hands over without losing
    /// a write) and waits until it is master; its port.
    pub fn fail_over_one_master(&self) -> u16 {
        let replica = self
            .nodes
            .iter()
            .zip(self.roles())
            .find(|(_, role)| role == "slave")
            .map(|(n, _)| n.port)
            .expect("a replica");
        // A manual failover that cannot finish in time (the replica did not reach the
        // master's offset under load) is aborted by Redis, not retried: ask again.
        for _attempt in 0..3 {
            let answer = RedisCluster::cli(replica, &["cluster", "failover"]);
            assert!(answer.contains("OK"), "CLUSTER FAILOVER: {answer}");
            let deadline = Instant::now() + Duration::from_secs(15);
            while Instant::now() < deadline {
                if RedisCluster::cli(replica, &["role"]).lines().next() == Some("master") {
                    return replica;
                }
                std::thread::sleep(Duration::from_millis(50));
            }
        }
        panic!("the replica was never promoted")
    }

    fn start_nodes(count: usize, replicas: usize) -> RedisCluster {
        let nodes: Vec<Server> = (0..count)
            .map(|_| Server::start(Kind::ClusterNode, tempdir()))
            .collect();
        let mut create = Command::new("redis-cli");
        create.arg("--cluster").arg("create");
        for node in &nodes {
            create.arg(format!("127.0.0.1:{}", node.port));
        }
        let output = create
            .args(["--cluster-replicas", &replicas.to_string(), "--cluster-yes"])
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

/// A MongoDB replica set (`rs0`) of mongods on loopback, initiated, with a primary.
pub struct ReplicaSet {
    /// The members, in member-id order.
    pub members: Vec<Server>,
}

impl ReplicaSet {
    /// Starts `count` members and initiates the set. Elections are tuned for tests
    /// (`electionTimeoutMillis` 2 s, heartbeats every 500 ms) so a lost primary is replaced
    /// in seconds, not the production 10 s.
    pub async fn start(count: usize) -> ReplicaSet {
        ReplicaSet::start_in(count, tempdir).await
    }

    async fn start_in(count: usize, dir: fn() -> tempfile::TempDir) -> ReplicaSet {
        let members: Vec<Server> = tokio::task::block_in_place(|| {
            std::thread::scope(|scope| {
                let starting: Vec<_> = (0..count)
                    .map(|_| scope.spawn(|| Server::start(Kind::ReplicaSet, dir())))
                    .collect();
                starting
                    .into_iter()
                    .map(|s| s.join().expect("mongod started"))
                    .collect()
            })
        });
        let set = ReplicaSet { members };
        let hosts: Vec<_> = set
            .members
            .iter()
            .enumerate()
            .map(|(i, m)| doc! { "_id": i as i32, "host": format!("127.0.0.1:{}", m.port) })
            .collect();
        let config = doc! {
            "_id": "rs0",
            "members": hosts,
            "settings": { "electionTimeoutMillis": 2000, "heartbeatIntervalMillis": 500 },
        };
        set.direct(0)
            .await
            .database("admin")
            .run_command(doc! { "replSetInitiate": config })
            .await
            .expect("replSetInitiate");
        let deadline = Instant::now() + Duration::from_secs(60);
        while set.primary().await.is_none() {
            assert!(Instant::now() < deadline, "replica set never got a primary");
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        // Every member must be readable as a secondary before a test takes one away.
        let deadline = Instant::now() + Duration::from_secs(60);
        'members: loop {
            for i in 0..set.members.len() {
                let hello = set.hello(i).await;
                let ok = hello.as_ref().is_some_and(|h| {
                    h.get_bool("isWritablePrimary").unwrap_or(false)
                        || h.get_bool("secondary").unwrap_or(false)
                });
                if !ok {
                    assert!(Instant::now() < deadline, "member {i} never joined");
                    tokio::time::sleep(Duration::from_millis(100)).await;
                    continue 'members;
                }
            }
            break;
        }
        set
    }

    /// The connection string clients use (`?replicaSet=rs0`, every member as a seed).
    pub fn uri(&self) -> String {
        let hosts: Vec<_> = self
            .members
            .iter()
            .map(|m| format!("127.0.0.1:{}", m.port))
            .collect();
        format!("mongodb://{}/?replicaSet=rs0", hosts.join(","))
    }

    async fn direct(&self, member: usize) -> mongodb::Client {
        let uri = format!(
            "mongodb://127.0.0.1:{}/?directConnection=true&serverSelectionTimeoutMS=2000",
            self.members[member].port
        );
        mongodb::Client::with_uri_str(&uri).await.expect("client")
    }

    async fn hello(&self, member: usize) -> Option<mongodb::bson::Document> {
        self.direct(member)
            .await
            .database("admin")
            .run_command(doc! { "hello": 1 })
            .await
            .ok()
    }

    /// The member that is primary now, if any.
    pub async fn primary(&self) -> Option<usize> {
        for i in 0..self.members.len() {
            if let Some(hello) = self.hello(i).await
                && hello.get_bool("isWritablePrimary").unwrap_or(false)
            {
                return Some(i);
            }
        }
        None
    }

    /// Waits (up to 30 s) for a primary that is not `old`; its index.
    pub async fn wait_for_primary_other_than(&self, old: usize) -> usize {
        let deadline = Instant::now() + Duration::from_secs(30);
        loop {
            match self.primary().await {
                Some(p) if p != old => return p,
                _ => {}
            }
            assert!(Instant::now() < deadline, "no new primary");
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }

    /// `replSetStepDown` on the primary: it steps down at once (after a secondary caught
    /// up) and may not be re-elected for `seconds`; returns the member that stepped down.
    pub async fn step_down(&self, seconds: i32) -> usize {
        let primary = self.primary().await.expect("a primary to step down");
        // The server closes the connection as it steps down: the error is expected.
        let _ = self
            .direct(primary)
            .await
            .database("admin")
            .run_command(doc! { "replSetStepDown": seconds, "secondaryCatchUpPeriodSecs": 5 })
            .await;
        primary
    }
}

/// A single-node replica set shared by the tests of this process that need a change
/// stream (each uses its own database and key prefix).
pub fn shared_replica_set() -> &'static ReplicaSet {
    static SET: LazyLock<ReplicaSet> = LazyLock::new(|| {
        std::thread::spawn(|| {
            tokio::runtime::Builder::new_multi_thread()
                .worker_threads(1)
                .enable_all()
                .build()
                .expect("runtime")
                .block_on(ReplicaSet::start_in(1, shared_tempdir))
        })
        .join()
        .expect("replica set started")
    });
    &SET
}

/// Keys in the database `conn` is on (`DBSIZE`).
pub async fn dbsize(conn: &mut impl redis::aio::ConnectionLike) -> u64 {
    redis::cmd("DBSIZE")
        .query_async(conn)
        .await
        .expect("DBSIZE")
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
