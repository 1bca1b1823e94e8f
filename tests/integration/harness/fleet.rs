//! The stack an operator runs, in network namespaces: varnish → nginx → three `musicd run`
//! → a Redis Cluster of three masters with a replica each, and a MongoDB replica set of
//! three. Every process sits in its own namespace, so a link can be cut the way a network
//! fails: packets vanish, nothing refuses, nothing resets.
//!
//! This file is self-contained (std, tokio, the mongodb driver): the integration tests use
//! it as a harness module, and `examples/fleet.rs` (`scripts/fleet.sh`) includes it so a
//! person can bring the same fleet up, cut links by name and heal them.
//!
//! # The network
//! Three segments, each a bridge in a switch namespace (`{p}-sw`), each a /24 of
//! 10.213.0.0/16 chosen by the fleet's index (`16 * index + segment`):
//! * `front`: varnish (.5), nginx (.10), the musicds (.21-.23);
//! * `redis`: the six Redis nodes (.11-.16), the musicds (.21-.23);
//! * `mongo`: the three mongods (.11-.13), the musicds (.21-.23).
//!
//! The host (the test process, or the person's shell) has an address on each (.1), to
//! play, to administer and to measure. Roles get no default route, so they reach nothing
//! but the fleet.
//!
//! **Guard route first.** Before any link exists, the host gets a `blackhole` route for
//! the fleet's /20 at a high metric: if a host-side link went down, its connected route
//! would go and the default route would carry fleet traffic off the machine. With the
//! guard, it goes nowhere.
//!
//! **A cut** takes a port of the switch down (`ip link set … down` in the switch
//! namespace). The role behind it keeps its address and route, and every neighbour is a
//! permanent ARP entry, so nobody learns anything: packets to and from it are dropped at
//! the bridge, a connect times out, an open connection just stops. [`Fleet::cut`] checks
//! that before it returns: a connect from the far side must time out.

use std::fmt::Write as _;
use std::io::Write as _;
use std::net::{Ipv4Addr, SocketAddr, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use mongodb::bson::doc;

/// A segment of the fleet's network.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Segment {
    /// varnish, nginx, the musicds.
    Front = 1,
    /// The Redis Cluster and the musicds.
    Redis = 2,
    /// The replica set and the musicds.
    Mongo = 3,
}

impl Segment {
    const ALL: [Segment; 3] = [Segment::Front, Segment::Redis, Segment::Mongo];

    fn name(self) -> &'static str {
        match self {
            Segment::Front => "front",
            Segment::Redis => "redis",
            Segment::Mongo => "mongo",
        }
    }

    /// The device name of the segment, inside a role's namespace and for the bridge.
    fn dev(self) -> &'static str {
        match self {
            Segment::Front => "F",
            Segment::Redis => "R",
            Segment::Mongo => "D",
        }
    }
}

/// One process's place: its namespace name, and its host number on each segment it joins.
#[derive(Debug, Clone)]
struct Role {
    name: String,
    host: u8,
    segments: Vec<Segment>,
}

/// The programs the fleet runs.
#[derive(Debug, Clone)]
pub struct Programs {
    /// `musicd`.
    pub musicd: PathBuf,
    /// `musicctl`.
    pub musicctl: PathBuf,
    /// `mongod` 6.0.
    pub mongod: PathBuf,
    /// `redis-server`.
    pub redis_server: PathBuf,
    /// `redis-cli`.
    pub redis_cli: PathBuf,
    /// `nginx`.
    pub nginx: PathBuf,
    /// `varnishd`.
    pub varnishd: PathBuf,
    /// The repository, for `deploy/`.
    pub repo: PathBuf,
}

impl Programs {
    /// For the examples (`examples/fleet.rs`, `examples/soak.rs`): `musicd` and `musicctl`
    /// built beside the running example, `mongod` from `.tools/` when installed there, the
    /// rest from `PATH`.
    #[allow(dead_code)] // The tests find their programs through the harness.
    pub fn beside_this_example() -> Programs {
        let repo = PathBuf::from(env!("CARGO_MANIFEST_DIR"));
        // target/<profile>/examples/NAME → target/<profile>/musicd
        let built = std::env::current_exe()
            .ok()
            .and_then(|exe| Some(exe.parent()?.parent()?.to_path_buf()))
            .unwrap_or_else(|| repo.join("target/debug"));
        let mongod = repo.join(".tools/bin/mongod");
        Programs {
            musicd: built.join("musicd"),
            musicctl: built.join("musicctl"),
            mongod: if mongod.is_file() {
                mongod
            } else {
                on_path("mongod")
            },
            redis_server: on_path("redis-server"),
            redis_cli: on_path("redis-cli"),
            nginx: on_path("nginx"),
            varnishd: on_path("varnishd"),
            repo,
        }
    }
}

/// `name` as `PATH` finds it (the bare name when it does not).
fn on_path(name: &str) -> PathBuf {
    std::env::var_os("PATH")
        .and_then(|paths| {
            std::env::split_paths(&paths)
                .map(|dir| dir.join(name))
                .find(|candidate| candidate.is_file())
        })
        .unwrap_or_else(|| PathBuf::from(name))
}

/// Musicds in the fleet.
pub const MUSICDS: usize = 3;
/// Redis nodes: three masters, three replicas.
pub const REDIS_NODES: usize = 6;
/// Replica-set members.
pub const MONGODS: usize = 3;

/// The follower's lease in the fleet: short, so a standby takes over in seconds.
pub const WATCH_LEASE: Duration = Duration::from_secs(3);

/// A running fleet; dropping it stops every process it started and removes every
/// namespace, link and route it made.
pub struct Fleet {
    /// Its index: the namespaces' prefix `mf{index}` and the subnets `10.213.{16 index + s}`.
    pub index: u8,
    /// Where configs, data and logs live.
    pub dir: PathBuf,
    /// The media root the musicds serve.
    pub media: PathBuf,
    programs: Programs,
    processes: Vec<(String, Child)>,
    network_up: bool,
    /// A tmpfs of this many MiB under each musicd's access log (`m{i}/logs`), so a soak
    /// can fill the disk; `None`: the logs live on the fleet's own disk.
    log_disk_mb: Option<u32>,
    /// Appended to every musicd's config (a soak's own settings).
    musicd_extra: String,
}

/// Runs a command, failing with its output.
fn run(program: &str, args: &[&str]) -> Result<String, String> {
    let output = Command::new(program)
        .args(args)
        .stdin(Stdio::null())
        .output()
        .map_err(|e| format!("{program}: {e}"))?;
    if output.status.success() {
        Ok(String::from_utf8_lossy(&output.stdout).into_owned())
    } else {
        Err(format!(
            "{program} {}: {}{}",
            args.join(" "),
            String::from_utf8_lossy(&output.stdout),
            String::from_utf8_lossy(&output.stderr)
        ))
    }
}

fn ip(args: &[&str]) {
    if let Err(err) = run("ip", args) {
        panic!("{err}");
    }
}

/// The first fleet index not in use on this machine (no namespace `mf{i}-sw`, no route
/// in its /20), from `from`.
pub fn free_index(from: u8) -> u8 {
    let namespaces = run("ip", &["netns", "list"]).unwrap_or_default();
    let routes = run("ip", &["route", "show", "table", "all"]).unwrap_or_default();
    (from..15)
        .find(|i| {
            !namespaces.contains(&format!("mf{i}-sw"))
                && !routes.contains(&format!("10.213.{}.", 16 * u16::from(*i)))
        })
        .expect("a free fleet index")
}

impl Fleet {
    fn prefix(&self) -> String {
        format!("mf{}", self.index)
    }

    /// The namespace of a role.
    pub fn namespace(&self, role: &str) -> String {
        format!("{}-{role}", self.prefix())
    }

    fn switch(&self) -> String {
        self.namespace("sw")
    }

    fn guard(&self) -> String {
        format!("10.213.{}.0/20", 16 * u16::from(self.index))
    }

    /// An address on a segment.
    pub fn addr(&self, segment: Segment, host: u8) -> Ipv4Addr {
        Ipv4Addr::new(10, 213, 16 * self.index + segment as u8, host)
    }

    fn mac(&self, segment: Segment, host: u8) -> String {
        format!(
            "02:13:{:02x}:{:02x}:00:{host:02x}",
            self.index, segment as u8
        )
    }

    fn roles() -> Vec<Role> {
        let mut roles = vec![
            Role {
                name: "varnish".into(),
                host: 5,
                segments: vec![Segment::Front],
            },
            Role {
                name: "nginx".into(),
                host: 10,
                segments: vec![Segment::Front],
            },
        ];
        for i in 1..=MUSICDS as u8 {
            roles.push(Role {
                name: format!("m{i}"),
                host: 20 + i,
                segments: Segment::ALL.to_vec(),
            });
        }
        for i in 1..=REDIS_NODES as u8 {
            roles.push(Role {
                name: format!("r{i}"),
                host: 10 + i,
                segments: vec![Segment::Redis],
            });
        }
        for i in 1..=MONGODS as u8 {
            roles.push(Role {
                name: format!("d{i}"),
                host: 10 + i,
                segments: vec![Segment::Mongo],
            });
        }
        roles
    }

    /// The links that can be cut, by name: `{role}-{segment}` (`m1-redis`, `r2-redis`,
    /// `d1-mongo`, `nginx-front`, ...).
    #[allow(dead_code)] // The tests name their links; `examples/fleet.rs` lists them.
    pub fn links() -> Vec<String> {
        Fleet::roles()
            .iter()
            .flat_map(|r| {
                r.segments
                    .iter()
                    .map(move |s| format!("{}-{}", r.name, s.name()))
            })
            .collect()
    }

    /// Builds the network: guard route, switch, bridges, one port per role and segment,
    /// addresses and permanent neighbours.
    pub fn build_network(index: u8, dir: &Path, programs: &Programs) -> Fleet {
        let fleet = Fleet {
            index,
            dir: dir.to_path_buf(),
            media: dir.join("media"),
            programs: programs.clone(),
            processes: Vec::new(),
            network_up: true,
            log_disk_mb: None,
            musicd_extra: String::new(),
        };
        std::fs::create_dir_all(&fleet.media).expect("media dir");
        // The guard, before any link.
        ip(&[
            "route",
            "add",
            "blackhole",
            &fleet.guard(),
            "metric",
            "4000",
        ]);
        let switch = fleet.switch();
        ip(&["netns", "add", &switch]);
        ip(&["-n", &switch, "link", "set", "lo", "up"]);
        for segment in Segment::ALL {
            ip(&[
                "-n",
                &switch,
                "link",
                "add",
                segment.dev(),
                "type",
                "bridge",
            ]);
            ip(&["-n", &switch, "link", "set", segment.dev(), "up"]);
        }
        // Members of each segment: (namespace or None for the host, host number).
        let mut members: Vec<(Segment, Option<String>, u8)> = Vec::new();
        for segment in Segment::ALL {
            let host_dev = fleet.host_dev(segment);
            let port = format!("host-{}", segment.dev());
            ip(&[
                "link",
                "add",
                &host_dev,
                "address",
                &fleet.mac(segment, 1),
                "type",
                "veth",
                "peer",
                "name",
                &port,
                "netns",
                &switch,
            ]);
            fleet.attach(&port, segment);
            let cidr = format!("{}/24", fleet.addr(segment, 1));
            ip(&["addr", "add", &cidr, "dev", &host_dev]);
            ip(&["link", "set", &host_dev, "up"]);
            members.push((segment, None, 1));
        }
        for role in Fleet::roles() {
            let ns = fleet.namespace(&role.name);
            ip(&["netns", "add", &ns]);
            ip(&["-n", &ns, "link", "set", "lo", "up"]);
            for segment in &role.segments {
                let port = format!("{}-{}", role.name, segment.dev());
                ip(&[
                    "link",
                    "add",
                    segment.dev(),
                    "netns",
                    &ns,
                    "address",
                    &fleet.mac(*segment, role.host),
                    "type",
                    "veth",
                    "peer",
                    "name",
                    &port,
                    "netns",
                    &switch,
                ]);
                fleet.attach(&port, *segment);
                let cidr = format!("{}/24", fleet.addr(*segment, role.host));
                ip(&["-n", &ns, "addr", "add", &cidr, "dev", segment.dev()]);
                ip(&["-n", &ns, "link", "set", segment.dev(), "up"]);
                members.push((*segment, Some(ns.clone()), role.host));
            }
        }
        // Permanent neighbours: a cut peer is never "unreachable" by ARP, only silent.
        for (segment, ns, _) in &members {
            let mut batch = String::new();
            for (other_segment, _, other_host) in &members {
                if other_segment != segment {
                    continue;
                }
                let _ = writeln!(
                    batch,
                    "neigh replace {} lladdr {} dev {} nud permanent",
                    fleet.addr(*segment, *other_host),
                    fleet.mac(*segment, *other_host),
                    match ns {
                        Some(_) => segment.dev().to_string(),
                        None => fleet.host_dev(*segment),
                    }
                );
            }
            let path = fleet.dir.join("neigh.batch");
            std::fs::write(&path, batch).expect("neigh batch");
            let path = path.display().to_string();
            match ns {
                Some(ns) => ip(&["-n", ns, "-batch", &path]),
                None => ip(&["-batch", &path]),
            }
        }
        fleet
    }

    fn host_dev(&self, segment: Segment) -> String {
        format!("{}-{}", self.prefix(), segment.dev())
    }

    fn attach(&self, port: &str, segment: Segment) {
        let switch = self.switch();
        ip(&["-n", &switch, "link", "set", port, "master", segment.dev()]);
        ip(&["-n", &switch, "link", "set", port, "up"]);
    }

    /// Cuts a link (see [`Fleet::links`]) and checks the cut: a connect from the host to
    /// the role's address on that segment must time out.
    pub fn cut(&self, link: &str) {
        set_link(self.index, link, false).unwrap_or_else(|e| panic!("{e}"));
        check_cut(self.index, link).unwrap_or_else(|e| panic!("{e}"));
    }

    /// Heals a cut link.
    pub fn heal(&self, link: &str) {
        set_link(self.index, link, true).unwrap_or_else(|e| panic!("{e}"));
    }

    /// Starts a program in a role's namespace, its output in `{dir}/{role}.out`.
    fn spawn_in(&mut self, role: &str, program: &Path, args: &[String]) {
        let out = std::fs::File::create(self.dir.join(format!("{role}.out"))).expect("out file");
        let err = out.try_clone().expect("out file");
        let mut command = Command::new("ip");
        command
            .args(["netns", "exec", &self.namespace(role)])
            .arg(program)
            .args(args)
            .env_clear()
            .env("PATH", std::env::var_os("PATH").unwrap_or_default())
            .stdin(Stdio::null())
            .stdout(out)
            .stderr(err);
        let child = command
            .spawn()
            .unwrap_or_else(|e| panic!("{}: {e}", program.display()));
        self.processes.push((role.to_string(), child));
    }

    /// Waits until `addr` accepts a connection from the host.
    fn wait_accepting(&mut self, role: &str, addr: SocketAddr, within: Duration) {
        let deadline = Instant::now() + within;
        loop {
            if TcpStream::connect_timeout(&addr, Duration::from_millis(500)).is_ok() {
                return;
            }
            if let Some((_, child)) = self.processes.iter_mut().find(|(r, _)| r == role)
                && let Ok(Some(status)) = child.try_wait()
            {
                panic!("{role} exited ({status}): {}", self.output(role));
            }
            assert!(
                Instant::now() < deadline,
                "{role} never accepted on {addr}: {}",
                self.output(role)
            );
            std::thread::sleep(Duration::from_millis(50));
        }
    }

    /// What a role printed (its `.out` file).
    pub fn output(&self, role: &str) -> String {
        std::fs::read_to_string(self.dir.join(format!("{role}.out"))).unwrap_or_default()
    }

    /// Bytes a role has sent to `port` that the peer has not acknowledged (`ss` Send-Q
    /// over its sockets): what TCP will still deliver, or give up on.
    pub fn unacked_bytes(&self, role: &str, port: u16) -> u64 {
        let peer = format!(":{port}");
        run(
            "ip",
            &["netns", "exec", &self.namespace(role), "ss", "-tnH"],
        )
        .unwrap_or_default()
        .lines()
        .filter_map(|line| {
            let fields: Vec<&str> = line.split_whitespace().collect();
            // State Recv-Q Send-Q Local Peer
            let peer_addr = fields.get(4)?;
            peer_addr
                .ends_with(&peer)
                .then(|| fields.get(2)?.parse::<u64>().ok())?
        })
        .sum()
    }

    /// Brings the whole fleet up: network, replica set, Redis Cluster, musicds, nginx,
    /// varnish. Returns once each answers.
    pub async fn up(index: u8, dir: &Path, programs: &Programs) -> Fleet {
        Fleet::up_with_log_disks(index, dir, programs, None, "").await
    }

    /// [`Fleet::up`], with each musicd's access log on a tmpfs of `log_disk_mb` MiB and
    /// `musicd_extra` appended to each musicd's config.
    pub async fn up_with_log_disks(
        index: u8,
        dir: &Path,
        programs: &Programs,
        log_disk_mb: Option<u32>,
        musicd_extra: &str,
    ) -> Fleet {
        let mut fleet = Fleet::build_network(index, dir, programs);
        fleet.log_disk_mb = log_disk_mb;
        fleet.musicd_extra = musicd_extra.to_string();
        fleet.start_mongods().await;
        fleet.start_redis();
        for i in 1..=MUSICDS {
            fleet.start_musicd(i);
        }
        fleet.start_nginx();
        fleet.start_varnish();
        fleet
    }

    /// `mongodb://…/?replicaSet=rs0` over the members' addresses.
    pub fn mongo_uri(&self) -> String {
        let hosts: Vec<String> = (1..=MONGODS as u8)
            .map(|i| format!("{}:27017", self.addr(Segment::Mongo, 10 + i)))
            .collect();
        format!("mongodb://{}/?replicaSet=rs0", hosts.join(","))
    }

    async fn direct(&self, member: u8) -> mongodb::Client {
        let uri = format!(
            "mongodb://{}:27017/?directConnection=true&serverSelectionTimeoutMS=1000&connectTimeoutMS=1000",
            self.addr(Segment::Mongo, 10 + member)
        );
        mongodb::Client::with_uri_str(&uri).await.expect("client")
    }

    /// Whether member `member` (1-based) says it is the writable primary; `None` when it
    /// does not answer within a second.
    pub async fn is_primary(&self, member: u8) -> Option<bool> {
        let hello = tokio::time::timeout(
            Duration::from_secs(2),
            self.direct(member)
                .await
                .database("admin")
                .run_command(doc! { "hello": 1 }),
        )
        .await
        .ok()?
        .ok()?;
        Some(hello.get_bool("isWritablePrimary").unwrap_or(false))
    }

    /// The member that is primary now (1-based), as the members reachable say.
    pub async fn primary(&self) -> Option<u8> {
        for member in 1..=MONGODS as u8 {
            if self.is_primary(member).await == Some(true) {
                return Some(member);
            }
        }
        None
    }

    async fn start_mongods(&mut self) {
        for i in 1..=MONGODS as u8 {
            let db = self.dir.join(format!("d{i}"));
            std::fs::create_dir_all(&db).expect("db dir");
            let args = vec![
                "--replSet".into(),
                "rs0".into(),
                "--bind_ip".into(),
                self.addr(Segment::Mongo, 10 + i).to_string(),
                "--port".into(),
                "27017".into(),
                "--nounixsocket".into(),
                "--dbpath".into(),
                db.display().to_string(),
                "--wiredTigerCacheSizeGB".into(),
                "0.25".into(),
                "--setParameter".into(),
                "diagnosticDataCollectionEnabled=false".into(),
                "--logpath".into(),
                db.join("mongod.log").display().to_string(),
            ];
            let mongod = self.programs.mongod.clone();
            self.spawn_in(&format!("d{i}"), &mongod, &args);
        }
        for i in 1..=MONGODS as u8 {
            let addr = SocketAddr::from((self.addr(Segment::Mongo, 10 + i), 27017));
            self.wait_accepting(&format!("d{i}"), addr, Duration::from_secs(60));
        }
        let members: Vec<_> = (1..=MONGODS as u8)
            .map(|i| {
                doc! {
                    "_id": i32::from(i),
                    "host": format!("{}:27017", self.addr(Segment::Mongo, 10 + i)),
                    // Member 1 is preferred, so the set starts where a test expects it.
                    "priority": if i == 1 { 2 } else { 1 },
                }
            })
            .collect();
        let config = doc! {
            "_id": "rs0",
            "members": members,
            "settings": { "electionTimeoutMillis": 2000, "heartbeatIntervalMillis": 500 },
        };
        self.direct(1)
            .await
            .database("admin")
            .run_command(doc! { "replSetInitiate": config })
            .await
            .expect("replSetInitiate");
        let deadline = Instant::now() + Duration::from_secs(90);
        loop {
            let mut healthy = 0;
            for member in 1..=MONGODS as u8 {
                let hello = self
                    .direct(member)
                    .await
                    .database("admin")
                    .run_command(doc! { "hello": 1 })
                    .await
                    .ok();
                if hello.is_some_and(|h| {
                    h.get_bool("isWritablePrimary").unwrap_or(false)
                        || h.get_bool("secondary").unwrap_or(false)
                }) {
                    healthy += 1;
                }
            }
            if healthy == MONGODS && self.primary().await.is_some() {
                break;
            }
            assert!(Instant::now() < deadline, "the replica set never formed");
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
    }

    /// A `redis-cli` against a node (1-based), from the host.
    pub fn redis_cli(&self, node: u8, args: &[&str]) -> String {
        let host = self.addr(Segment::Redis, 10 + node).to_string();
        let cli = self.programs.redis_cli.display().to_string();
        // A node that is cut off never answers: `timeout` bounds the wait.
        let mut all = vec!["2", cli.as_str(), "-h", host.as_str(), "-p", "6379"];
        all.extend_from_slice(args);
        run("timeout", &all).unwrap_or_default()
    }

    /// Each Redis node's role (`master`, `slave`, or empty when it does not answer).
    pub fn redis_roles(&self) -> Vec<String> {
        (1..=REDIS_NODES as u8)
            .map(|n| {
                self.redis_cli(n, &["role"])
                    .lines()
                    .next()
                    .unwrap_or_default()
                    .to_string()
            })
            .collect()
    }

    fn start_redis(&mut self) {
        for i in 1..=REDIS_NODES as u8 {
            let dir = self.dir.join(format!("r{i}"));
            std::fs::create_dir_all(&dir).expect("redis dir");
            let args: Vec<String> = [
                "--bind",
                &self.addr(Segment::Redis, 10 + i).to_string(),
                "--port",
                "6379",
                "--save",
                "",
                "--appendonly",
                "no",
                "--protected-mode",
                "no",
                "--daemonize",
                "no",
                "--cluster-enabled",
                "yes",
                // Failover by timeout in seconds, not the default 15.
                "--cluster-node-timeout",
                "2000",
                "--cluster-config-file",
                &dir.join("nodes.conf").display().to_string(),
                "--dir",
                &dir.display().to_string(),
                "--logfile",
                &dir.join("redis.log").display().to_string(),
            ]
            .iter()
            .map(|s| s.to_string())
            .collect();
            let server = self.programs.redis_server.clone();
            self.spawn_in(&format!("r{i}"), &server, &args);
        }
        for i in 1..=REDIS_NODES as u8 {
            let addr = SocketAddr::from((self.addr(Segment::Redis, 10 + i), 6379));
            self.wait_accepting(&format!("r{i}"), addr, Duration::from_secs(20));
        }
        let nodes: Vec<String> = (1..=REDIS_NODES as u8)
            .map(|i| format!("{}:6379", self.addr(Segment::Redis, 10 + i)))
            .collect();
        let mut args: Vec<&str> = vec!["--cluster", "create"];
        args.extend(nodes.iter().map(String::as_str));
        args.extend(["--cluster-replicas", "1", "--cluster-yes"]);
        if let Err(err) = run(&self.programs.redis_cli.display().to_string(), &args) {
            panic!("cluster create: {err}");
        }
        let deadline = Instant::now() + Duration::from_secs(30);
        loop {
            let ok = (1..=REDIS_NODES as u8).all(|n| {
                self.redis_cli(n, &["cluster", "info"])
                    .contains("cluster_state:ok")
            });
            let replicas = self
                .redis_roles()
                .iter()
                .filter(|r| r.as_str() == "slave")
                .count();
            if ok && replicas == 3 {
                break;
            }
            assert!(Instant::now() < deadline, "the Redis Cluster never formed");
            std::thread::sleep(Duration::from_millis(100));
        }
    }

    /// `http://` base URL of musicd `i` (1-based) on the front segment.
    pub fn musicd_base(&self, i: usize) -> String {
        format!("http://{}:8080", self.addr(Segment::Front, 20 + i as u8))
    }

    /// `http://` base URL of nginx.
    pub fn nginx_base(&self) -> String {
        format!("http://{}:8080", self.addr(Segment::Front, 10))
    }

    /// `http://` base URL of varnish.
    pub fn varnish_base(&self) -> String {
        format!("http://{}:6081", self.addr(Segment::Front, 5))
    }

    /// The musicd config every instance shares but for its listen address and files.
    pub fn musicd_config(&self, i: usize) -> String {
        let redis: Vec<String> = (1..=REDIS_NODES as u8)
            .map(|n| format!("\"redis://{}:6379\"", self.addr(Segment::Redis, 10 + n)))
            .collect();
        let own = self.dir.join(format!("m{i}"));
        format!(
            "listen = \"{listen}:8080\"\nmedia_roots = [\"{media}\"]\n\
             trusted_proxies = [\"{front}/24\"]\n\n\
             [access_log]\nformat = \"combined\"\npath = \"{own}/logs/access.log\"\n\n\
             [http_caches]\nban_urls = [\"{varnish}\"]\n\n\
             [mongodb]\nuri = \"{mongo}\"\ndatabase = \"fleet\"\ntimeout_ms = 1000\nwatch_lease_ms = {lease}\n\n\
             [redis]\ncluster = [{redis}]\nprefix = \"track_\"\ntimeout_ms = 250\n\n\
             [daemon]\npid_file = \"{own}/musicd.pid\"\nlog_file = \"{own}/musicd.log\"\nstate_dir = \"{own}/state\"\n",
            listen = self.addr(Segment::Front, 20 + i as u8),
            media = self.media.display(),
            front = self.addr(Segment::Front, 0),
            own = own.display(),
            varnish = self.varnish_base(),
            mongo = self.mongo_uri(),
            lease = WATCH_LEASE.as_millis(),
            redis = redis.join(", "),
        )
    }

    fn start_musicd(&mut self, i: usize) {
        self.spawn_musicd(i);
        let addr = SocketAddr::from((self.addr(Segment::Front, 20 + i as u8), 8080));
        self.wait_accepting(&format!("m{i}"), addr, Duration::from_secs(30));
    }

    /// Starts musicd `i` (1-based) without waiting for it: its config is written again,
    /// and its log disk mounted the first time.
    pub fn spawn_musicd(&mut self, i: usize) {
        self.spawn_musicd_with(i, "");
    }

    /// [`Fleet::spawn_musicd`] with `extra` appended to its config.
    pub fn spawn_musicd_with(&mut self, i: usize, extra: &str) {
        let own = self.dir.join(format!("m{i}"));
        let logs = own.join("logs");
        std::fs::create_dir_all(&logs).expect("musicd dir");
        if let Some(mb) = self.log_disk_mb
            && run("mountpoint", &["-q", &logs.display().to_string()]).is_err()
        {
            let size = format!("size={mb}m");
            let target = logs.display().to_string();
            if let Err(err) = run("mount", &["-t", "tmpfs", "-o", &size, "tmpfs", &target]) {
                panic!("{err}");
            }
        }
        let config = own.join("musicd.toml");
        let text = format!("{}{}{extra}", self.musicd_config(i), self.musicd_extra);
        std::fs::write(&config, text).expect("musicd config");
        let musicd = self.programs.musicd.clone();
        let args = vec![
            "--config".into(),
            config.display().to_string(),
            "run".into(),
        ];
        self.spawn_in(&format!("m{i}"), &musicd, &args);
    }

    /// The pid of a role's process (the program itself: `ip netns exec` execs it).
    #[allow(dead_code)] // `examples/soak.rs` samples and signals roles; the tests cut links.
    pub fn pid(&self, role: &str) -> Option<i32> {
        self.processes
            .iter()
            .rev()
            .find(|(r, _)| r == role)
            .and_then(|(_, child)| i32::try_from(child.id()).ok())
    }

    /// Whether a role's newest process has exited.
    #[allow(dead_code)] // As `pid`.
    pub fn exited(&mut self, role: &str) -> bool {
        self.processes
            .iter_mut()
            .rev()
            .find(|(r, _)| r == role)
            .is_none_or(|(_, child)| !matches!(child.try_wait(), Ok(None)))
    }

    /// Sends `signal` to a role's process; for SIGTERM, SIGINT and SIGKILL, waits for it
    /// to exit (SIGKILL after 10 s) and forgets it.
    #[allow(dead_code)] // As `pid`.
    pub fn signal_role(&mut self, role: &str, signal: i32) {
        let Some(at) = self.processes.iter().rposition(|(r, _)| r == role) else {
            return;
        };
        if let Ok(pid) = i32::try_from(self.processes[at].1.id()) {
            // SAFETY: kill(2) on the pid of a child this fleet spawned and has not reaped.
            unsafe { libc::kill(pid, signal) };
        }
        if ![libc::SIGTERM, libc::SIGINT, libc::SIGKILL].contains(&signal) {
            return;
        }
        let (_, mut child) = self.processes.remove(at);
        let deadline = Instant::now() + Duration::from_secs(10);
        while Instant::now() < deadline {
            if let Ok(Some(_)) = child.try_wait() {
                return;
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        let _ = child.kill();
        let _ = child.wait();
    }

    /// The musicctl command for musicd `i`'s config, run in its namespace.
    pub fn musicctl(&self, i: usize, args: &[&str]) -> std::process::Output {
        let config = self.dir.join(format!("m{i}/musicd.toml"));
        Command::new("ip")
            .args(["netns", "exec", &self.namespace(&format!("m{i}"))])
            .arg(&self.programs.musicctl)
            .arg("--config")
            .arg(config)
            .args(args)
            .env_clear()
            .env("PATH", std::env::var_os("PATH").unwrap_or_default())
            .output()
            .expect("musicctl")
    }

    fn start_nginx(&mut self) {
        let site = std::fs::read_to_string(self.programs.repo.join("deploy/nginx.conf"))
            .expect("deploy/nginx.conf");
        let servers: Vec<String> = (1..=MUSICDS)
            .map(|i| {
                format!(
                    "server {}:8080 max_fails=1 fail_timeout=5s;",
                    self.addr(Segment::Front, 20 + i as u8)
                )
            })
            .collect();
        let listen = format!("listen {}:8080;", self.addr(Segment::Front, 10));
        let site = site
            .replace(
                "server 127.0.0.1:23001 max_fails=1 fail_timeout=5s;",
                &servers.join("\n    "),
            )
            .replace("listen 8080;", &listen)
            .replace(
                "alias /srv/music/;",
                &format!("alias {}/;", self.media.display()),
            );
        assert!(
            site.contains(&servers[0]) && site.contains(&listen),
            "deploy/nginx.conf changed: the fleet's substitutions failed"
        );
        let dir = self.dir.join("nginx");
        std::fs::create_dir_all(&dir).expect("nginx dir");
        std::fs::write(dir.join("site.conf"), site).expect("site");
        let d = dir.display();
        let main = format!(
            "user root;\nmaster_process off;\nworker_processes 1;\npid {d}/nginx.pid;\n\
             error_log {d}/error.log warn;\nevents {{ worker_connections 4096; }}\n\
             http {{\n  access_log {d}/access.log;\n  include /etc/nginx/mime.types;\n\
             client_body_temp_path {d}/body;\n  proxy_temp_path {d}/proxy;\n\
             fastcgi_temp_path {d}/fastcgi;\n  uwsgi_temp_path {d}/uwsgi;\n  scgi_temp_path {d}/scgi;\n\
             include {d}/site.conf;\n}}\n"
        );
        std::fs::write(dir.join("nginx.conf"), main).expect("nginx.conf");
        let args = vec![
            "-p".into(),
            d.to_string(),
            "-c".into(),
            format!("{d}/nginx.conf"),
            "-g".into(),
            "daemon off;".into(),
        ];
        let nginx = self.programs.nginx.clone();
        self.spawn_in("nginx", &nginx, &args);
        let addr = SocketAddr::from((self.addr(Segment::Front, 10), 8080));
        self.wait_accepting("nginx", addr, Duration::from_secs(20));
    }

    fn start_varnish(&mut self) {
        let vcl = std::fs::read_to_string(self.programs.repo.join("deploy/varnish.vcl"))
            .expect("deploy/varnish.vcl");
        let front = self.addr(Segment::Front, 0);
        let vcl = vcl
            .replacen(
                ".host = \"127.0.0.1\";",
                &format!(".host = \"{}\";", self.addr(Segment::Front, 10)),
                1,
            )
            .replace(".port = \"23001\";", ".port = \"8080\";")
            .replace(
                "acl purgers {\n    \"127.0.0.1\";",
                &format!("acl purgers {{\n    \"127.0.0.1\";\n    \"{front}\"/24;"),
            );
        assert!(
            vcl.contains(&format!("\"{front}\"/24;")) && vcl.contains(".port = \"8080\";"),
            "deploy/varnish.vcl changed: the fleet's substitutions failed"
        );
        let dir = self.dir.join("varnish");
        std::fs::create_dir_all(&dir).expect("varnish dir");
        std::fs::write(dir.join("musicd.vcl"), vcl).expect("vcl");
        let args = vec![
            "-F".into(),
            "-j".into(),
            "none".into(),
            "-a".into(),
            format!("{}:6081", self.addr(Segment::Front, 5)),
            "-f".into(),
            dir.join("musicd.vcl").display().to_string(),
            "-n".into(),
            dir.join("state").display().to_string(),
            "-s".into(),
            "malloc,64m".into(),
            "-T".into(),
            "127.0.0.1:0".into(),
        ];
        let varnishd = self.programs.varnishd.clone();
        self.spawn_in("varnish", &varnishd, &args);
        let addr = SocketAddr::from((self.addr(Segment::Front, 5), 6081));
        self.wait_accepting("varnish", addr, Duration::from_secs(30));
    }

    /// Stops every process (SIGTERM, then SIGKILL after 5 s) and removes the network.
    pub fn down(&mut self) {
        for (_, child) in &mut self.processes {
            if let Ok(pid) = i32::try_from(child.id()) {
                // SAFETY: kill(2) on the pid of a child this fleet spawned and has not reaped.
                unsafe { libc::kill(pid, libc::SIGCONT) };
                // SAFETY: as above.
                unsafe { libc::kill(pid, libc::SIGTERM) };
            }
        }
        let deadline = Instant::now() + Duration::from_secs(5);
        for (_, child) in &mut self.processes {
            while Instant::now() < deadline {
                if let Ok(Some(_)) = child.try_wait() {
                    break;
                }
                std::thread::sleep(Duration::from_millis(20));
            }
            let _ = child.kill();
            let _ = child.wait();
        }
        self.processes.clear();
        if self.log_disk_mb.is_some() {
            for i in 1..=MUSICDS {
                let logs = self.dir.join(format!("m{i}/logs"));
                let _ = run("umount", &["-l", &logs.display().to_string()]);
            }
        }
        if self.network_up {
            remove_network(self.index);
            self.network_up = false;
        }
    }
}

/// The switch port of a link, its segment, and the role's host number.
fn port_of(link: &str) -> Option<(String, Segment, u8)> {
    let (role, segment) = link.rsplit_once('-')?;
    let segment = Segment::ALL.into_iter().find(|s| s.name() == segment)?;
    let role = Fleet::roles()
        .into_iter()
        .find(|r| r.name == role && r.segments.contains(&segment))?;
    Some((
        format!("{}-{}", role.name, segment.dev()),
        segment,
        role.host,
    ))
}

/// Takes a link of fleet `index` down (a cut) or up (a heal), at the switch: the role
/// behind it keeps its address and routes, and hears nothing.
pub fn set_link(index: u8, link: &str, up: bool) -> Result<(), String> {
    let (port, _, _) = port_of(link).ok_or_else(|| format!("no link {link}"))?;
    let switch = format!("mf{index}-sw");
    run(
        "ip",
        &[
            "-n",
            &switch,
            "link",
            "set",
            &port,
            if up { "up" } else { "down" },
        ],
    )
    .map(|_| ())
}

/// Checks a cut: a connect from the host to the role's address on the link's segment
/// must time out (not be refused, not succeed).
pub fn check_cut(index: u8, link: &str) -> Result<(), String> {
    let (_, segment, host) = port_of(link).ok_or_else(|| format!("no link {link}"))?;
    let addr = Ipv4Addr::new(10, 213, 16 * index + segment as u8, host);
    let target = SocketAddr::from((addr, 9));
    match TcpStream::connect_timeout(&target, Duration::from_millis(700)) {
        Err(err) if err.kind() == std::io::ErrorKind::TimedOut => Ok(()),
        other => Err(format!(
            "the cut of {link} does not hold: a connect to {target} gave {other:?}"
        )),
    }
}

/// Removes fleet `index`'s namespaces (their links go with them), the host's links and the
/// guard route. Quiet about what is already gone.
pub fn remove_network(index: u8) {
    let prefix = format!("mf{index}-");
    for ns in run("ip", &["netns", "list"])
        .unwrap_or_default()
        .lines()
        .filter_map(|l| l.split_whitespace().next())
        .filter(|n| n.starts_with(&prefix))
    {
        // Whatever still runs in the fleet's own namespaces was started by the fleet
        // (after a crash of the process that brought it up): stopped by pid.
        for pid in run("ip", &["netns", "pids", ns])
            .unwrap_or_default()
            .split_whitespace()
            .filter_map(|p| p.parse::<i32>().ok())
        {
            // SAFETY: kill(2) on a pid running inside a namespace this fleet created.
            unsafe { libc::kill(pid, libc::SIGKILL) };
        }
        let _ = run("ip", &["netns", "delete", ns]);
    }
    for segment in Segment::ALL {
        let _ = run(
            "ip",
            &["link", "delete", &format!("mf{index}-{}", segment.dev())],
        );
    }
    let guard = format!("10.213.{}.0/20", 16 * u16::from(index));
    let _ = run(
        "ip",
        &["route", "delete", "blackhole", &guard, "metric", "4000"],
    );
}

impl Drop for Fleet {
    fn drop(&mut self) {
        self.down();
    }
}

/// Writes `bytes` under the media root and returns the absolute path.
pub fn write_media(fleet: &Fleet, relative: &str, bytes: &[u8]) -> PathBuf {
    let path = fleet.media.join(relative);
    if let Some(parent) = path.parent() {
        std::fs::create_dir_all(parent).expect("media subdir");
    }
    let mut file = std::fs::File::create(&path).expect("media file");
    file.write_all(bytes).expect("media bytes");
    path
}
