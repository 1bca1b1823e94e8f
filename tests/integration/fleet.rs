//! Partitions under load, on the stack the docs tell operators to run: varnish → nginx
//! → three musicd → a Redis Cluster (three masters, three replicas) and a three-member
//! MongoDB replica set, each process in its own network namespace
//! ([`crate::harness::fleet`]).
//!
//! Players fetch cached and uncached ids through varnish, through nginx and from each
//! musicd directly while one fault at a time is held for several seconds and healed. Each
//! fault's figures (requests, failures by kind, the longest wait, the time to recover) are
//! printed as a table row; its assertions are what an operator relies on.
//!
//! Runs as its own step of `scripts/test.sh` (`fleet::`, one test at a time): it needs
//! root (namespaces) and the whole machine's attention.

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use mongodb::bson::{Document, doc, oid::ObjectId};

use crate::harness::fleet::{Fleet, MUSICDS, Programs, write_media};
use crate::harness::procs::{bin, find_binary, repo_root};

/// What one request met.
#[derive(Debug, Clone)]
struct Record {
    started: Instant,
    waited: Duration,
    target: String,
    cached: bool,
    outcome: Result<u16, &'static str>,
}

/// Players: tasks that fetch until told to stop, recording every request.
struct Players {
    records: Arc<Mutex<Vec<Record>>>,
    stop: Arc<AtomicBool>,
    tasks: Vec<tokio::task::JoinHandle<()>>,
    /// Targets players skip (a musicd cut off from its clients).
    skip: Arc<Mutex<Vec<String>>>,
}

/// Ids the players use: `hot` are cached (asked before the faults), `cold` are asked once
/// each, so every one is a miss in Redis.
struct Catalogue {
    hot: Vec<ObjectId>,
    cold: Vec<ObjectId>,
    next_cold: AtomicUsize,
}

const TARGETS: [&str; 5] = ["varnish", "nginx", "m1", "m2", "m3"];

fn base(fleet: &Fleet, target: &str) -> String {
    match target {
        "varnish" => fleet.varnish_base(),
        "nginx" => fleet.nginx_base(),
        m => fleet.musicd_base(m[1..].parse().expect("musicd number")),
    }
}

impl Players {
    fn start(fleet: &Fleet, catalogue: &Arc<Catalogue>, count: usize) -> Players {
        let records = Arc::new(Mutex::new(Vec::new()));
        let stop = Arc::new(AtomicBool::new(false));
        let skip = Arc::new(Mutex::new(Vec::<String>::new()));
        let bases: Arc<BTreeMap<&'static str, String>> =
            Arc::new(TARGETS.iter().map(|t| (*t, base(fleet, t))).collect());
        let client = reqwest::Client::builder()
            .timeout(Duration::from_secs(30))
            .pool_max_idle_per_host(4)
            .build()
            .expect("client");
        let tasks = (0..count)
            .map(|player| {
                let (records, stop, skip, bases, client, catalogue) = (
                    Arc::clone(&records),
                    Arc::clone(&stop),
                    Arc::clone(&skip),
                    Arc::clone(&bases),
                    client.clone(),
                    Arc::clone(catalogue),
                );
                tokio::spawn(async move {
                    let mut n = player;
                    while !stop.load(Ordering::Relaxed) {
                        n += 7;
                        let target = TARGETS[n % TARGETS.len()];
                        if skip.lock().expect("skip").iter().any(|s| s == target) {
                            tokio::task::yield_now().await;
                            continue;
                        }
                        let cold = n % 4 == 0;
                        let id = if cold {
                            let i = catalogue.next_cold.fetch_add(1, Ordering::Relaxed);
                            catalogue.cold[i % catalogue.cold.len()]
                        } else {
                            catalogue.hot[n % catalogue.hot.len()]
                        };
                        let url = format!("{}/musicdb/{}/t.mp3", bases[target], id.to_hex());
                        let started = Instant::now();
                        let outcome = match client.get(&url).send().await {
                            Ok(response) => {
                                let status = response.status().as_u16();
                                match response.bytes().await {
                                    Ok(_) => Ok(status),
                                    Err(_) => Err("short body"),
                                }
                            }
                            Err(e) if e.is_connect() => Err("connect"),
                            Err(e) if e.is_timeout() => Err("timeout"),
                            Err(_) => Err("reset"),
                        };
                        records.lock().expect("records").push(Record {
                            started,
                            waited: started.elapsed(),
                            target: target.to_string(),
                            cached: !cold,
                            outcome,
                        });
                        // Players of a real service pause between tracks; this keeps the
                        // two cores for the fleet instead of the load.
                        tokio::time::sleep(Duration::from_millis(20)).await;
                    }
                })
            })
            .collect();
        Players {
            records,
            stop,
            tasks,
            skip,
        }
    }

    fn since(&self, from: Instant) -> Vec<Record> {
        self.records
            .lock()
            .expect("records")
            .iter()
            .filter(|r| r.started >= from)
            .cloned()
            .collect()
    }

    async fn stop(self) {
        self.stop.store(true, Ordering::Relaxed);
        for task in self.tasks {
            let _ = task.await;
        }
    }
}

/// One fault's figures.
struct Figures {
    fault: &'static str,
    held: Duration,
    sent: usize,
    failed: BTreeMap<String, usize>,
    longest: Duration,
    recovered: Duration,
    note: String,
}

impl Figures {
    fn of(
        fault: &'static str,
        records: &[Record],
        held: Duration,
        recovered: Duration,
        note: String,
    ) -> Figures {
        let mut failed = BTreeMap::new();
        for r in records {
            let kind = match r.outcome {
                Ok(200) => continue,
                Ok(status) => format!("{status} {}", r.target),
                Err(kind) => format!("{kind} {}", r.target),
            };
            *failed.entry(kind).or_insert(0) += 1;
        }
        Figures {
            fault,
            held,
            sent: records.len(),
            failed,
            longest: records.iter().map(|r| r.waited).max().unwrap_or_default(),
            recovered,
            note,
        }
    }

    fn row(&self) -> String {
        let failed: Vec<String> = self
            .failed
            .iter()
            .map(|(k, n)| format!("{n} {k}"))
            .collect();
        format!(
            "| {} | {:.1} s | {} | {} | {:.2} s | {:.1} s | {} |",
            self.fault,
            self.held.as_secs_f64(),
            self.sent,
            if failed.is_empty() {
                "0".to_string()
            } else {
                failed.join(", ")
            },
            self.longest.as_secs_f64(),
            self.recovered.as_secs_f64(),
            self.note
        )
    }
}

async fn readyz(fleet: &Fleet, musicd: usize) -> Option<serde_json::Value> {
    let url = format!("{}/readyz", fleet.musicd_base(musicd));
    let response = reqwest::Client::new()
        .get(url)
        .timeout(Duration::from_secs(3))
        .send()
        .await
        .ok()?;
    response.json().await.ok()
}

/// Waits (at most `within`) until `check` holds; how long it took.
async fn until<F, Fut>(within: Duration, what: &str, mut check: F) -> Duration
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = bool>,
{
    let started = Instant::now();
    loop {
        if check().await {
            return started.elapsed();
        }
        assert!(started.elapsed() < within, "never: {what}");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

async fn follower(fleet: &Fleet) -> Option<usize> {
    for i in 1..=MUSICDS {
        if let Some(body) = readyz(fleet, i).await
            && body["watch"]["state"] == "following"
        {
            return Some(i);
        }
    }
    None
}

fn entry(fleet: &Fleet, id: &ObjectId) -> String {
    // `-c` follows the cluster's redirections from any node that answers.
    for node in 1..=6 {
        let out = fleet.redis_cli(node, &["-c", "GET", &format!("track_{}", id.to_hex())]);
        if !out.is_empty() {
            return out.trim().to_string();
        }
    }
    String::new()
}

fn programs() -> Programs {
    Programs {
        musicd: bin("musicd"),
        musicctl: bin("musicctl"),
        mongod: find_binary(
            "MUSICD_TEST_MONGOD",
            "mongod",
            &[repo_root().join(".tools/bin/mongod")],
        ),
        redis_server: find_binary("MUSICD_TEST_REDIS_SERVER", "redis-server", &[]),
        redis_cli: find_binary("MUSICD_TEST_REDIS_CLI", "redis-cli", &[]),
        nginx: find_binary("MUSICD_TEST_NGINX", "nginx", &[]),
        varnishd: find_binary("MUSICD_TEST_VARNISHD", "varnishd", &[]),
        repo: repo_root(),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn partitions_under_load() {
    // SAFETY: geteuid has no preconditions.
    let euid = unsafe { libc::geteuid() };
    assert_eq!(
        euid, 0,
        "the fleet needs root for network namespaces (CI runs as root)"
    );
    let dir = crate::harness::tempdir();
    let index = crate::harness::fleet::free_index(3);
    let fleet = Fleet::up(index, dir.path(), &programs()).await;
    let client = mongodb::Client::with_uri_str(fleet.mongo_uri())
        .await
        .expect("mongo client");
    let tracks = client.database("fleet").collection::<Document>("tracks");
    let mut hot = Vec::new();
    let mut cold = Vec::new();
    let mut documents = Vec::new();
    for i in 0..1200 {
        let path = write_media(
            &fleet,
            &format!("t{i}.mp3"),
            format!("track {i}").as_bytes(),
        );
        let id = ObjectId::new();
        documents.push(doc! { "_id": id, "path": path.display().to_string() });
        if i < 200 { hot.push(id) } else { cold.push(id) }
    }
    tracks.insert_many(documents).await.expect("catalogue");
    let catalogue = Arc::new(Catalogue {
        hot,
        cold,
        next_cold: AtomicUsize::new(0),
    });
    // Warm: every hot id in Redis and in varnish.
    let warm = reqwest::Client::new();
    for id in &catalogue.hot {
        for target in ["varnish", "m1"] {
            let url = format!("{}/musicdb/{}/t.mp3", base(&fleet, target), id.to_hex());
            let status = warm.get(url).send().await.expect("warm").status();
            assert_eq!(status, 200);
        }
    }
    let first_follower = until(Duration::from_secs(30), "one musicd follows", || async {
        follower(&fleet).await.is_some()
    })
    .await;
    let _ = first_follower;
    let players = Players::start(&fleet, &catalogue, 8);
    let mut table = Vec::new();
    let hold = Duration::from_secs(5);

    // 1. One musicd cut off from Redis: it serves from MongoDB, then uses Redis again.
    {
        let from = Instant::now();
        fleet.cut("m2-redis");
        let health = fleet.musicctl(2, &["health"]);
        let report = String::from_utf8_lossy(&health.stdout).into_owned();
        assert!(
            report
                .lines()
                .any(|l| l.starts_with("redis") && l.contains("hung")),
            "musicctl health on m2 names Redis as hung:\n{report}"
        );
        tokio::time::sleep(hold.saturating_sub(from.elapsed())).await;
        let during = players.since(from);
        fleet.heal("m2-redis");
        let healed = Instant::now();
        until(Duration::from_secs(20), "m2 uses Redis again", || async {
            readyz(&fleet, 2)
                .await
                .is_some_and(|b| b["redis"]["state"] == "up")
        })
        .await;
        let figures = Figures::of("m2 ↮ Redis", &during, hold, healed.elapsed(), String::new());
        assert!(figures.failed.is_empty(), "{}", figures.row());
        assert!(
            figures.longest < Duration::from_secs(3),
            "{}",
            figures.row()
        );
        table.push(figures);
    }

    // 2. One musicd cut off from MongoDB: cached ids served, others 503 within the timeout.
    {
        let from = Instant::now();
        fleet.cut("m3-mongo");
        tokio::time::sleep(hold).await;
        let during = players.since(from);
        fleet.heal("m3-mongo");
        let healed = Instant::now();
        let probe = catalogue.cold[catalogue.cold.len() - 1];
        until(
            Duration::from_secs(20),
            "m3 answers uncached ids again",
            || async {
                let url = format!("{}/musicdb/{}/t.mp3", fleet.musicd_base(3), probe.to_hex());
                reqwest::get(url).await.is_ok_and(|r| r.status() == 200)
            },
        )
        .await;
        let direct: Vec<&Record> = during.iter().filter(|r| r.target == "m3").collect();
        for r in &direct {
            match (r.cached, r.outcome) {
                (true, Ok(200)) | (false, Ok(503)) | (false, Ok(200)) => {}
                other => panic!("m3 cut from MongoDB answered {other:?}"),
            }
            assert!(r.waited < Duration::from_secs(3), "waited {:?}", r.waited);
        }
        assert!(
            direct.iter().any(|r| !r.cached && r.outcome == Ok(503)),
            "no uncached id met the cut"
        );
        let figures = Figures::of(
            "m3 ↮ MongoDB",
            &during,
            hold,
            healed.elapsed(),
            "503s are uncached ids asked of m3".into(),
        );
        assert!(
            figures.failed.keys().all(|k| k.starts_with("503")),
            "{}",
            figures.row()
        );
        table.push(figures);
    }

    // 3. The MongoDB primary cut off: a new one is elected, the old one steps down.
    {
        let old = fleet.primary().await.expect("a primary");
        let link = format!("d{old}-mongo");
        let from = Instant::now();
        fleet.cut(&link);
        let elected = until(Duration::from_secs(30), "a new primary", || async {
            fleet.primary().await.is_some_and(|p| p != old)
        })
        .await;
        tokio::time::sleep(hold.saturating_sub(elected)).await;
        let during = players.since(from);
        fleet.heal(&link);
        let healed = Instant::now();
        until(
            Duration::from_secs(30),
            "the old primary is a secondary",
            || async { fleet.is_primary(old).await == Some(false) },
        )
        .await;
        let probe = catalogue.cold[catalogue.cold.len() - 2];
        until(Duration::from_secs(30), "uncached ids served", || async {
            let url = format!("{}/musicdb/{}/t.mp3", fleet.nginx_base(), probe.to_hex());
            reqwest::get(url).await.is_ok_and(|r| r.status() == 200)
        })
        .await;
        until(
            Duration::from_secs(30),
            "a musicd follows again",
            || async { follower(&fleet).await.is_some() },
        )
        .await;
        let figures = Figures::of(
            "MongoDB primary isolated",
            &during,
            from.elapsed() - healed.elapsed(),
            healed.elapsed(),
            format!("new primary in {:.1} s", elected.as_secs_f64()),
        );
        assert!(
            figures.failed.keys().all(|k| k.starts_with("503")),
            "{}",
            figures.row()
        );
        assert!(
            during
                .iter()
                .filter(|r| r.cached)
                .all(|r| r.outcome == Ok(200)),
            "a cached id failed: {}",
            figures.row()
        );
        table.push(figures);
    }

    // 4. A Redis master cut off from its replica and its clients: failover by timeout.
    {
        let roles = fleet.redis_roles();
        let master = roles.iter().position(|r| r == "master").expect("a master") as u8 + 1;
        let replicas_before = roles.iter().filter(|r| r.as_str() == "slave").count();
        let link = format!("r{master}-redis");
        let from = Instant::now();
        fleet.cut(&link);
        let promoted = until(Duration::from_secs(30), "a replica promoted", || async {
            fleet
                .redis_roles()
                .iter()
                .filter(|r| r.as_str() == "master")
                .count()
                == 3
                && fleet
                    .redis_roles()
                    .iter()
                    .filter(|r| r.as_str() == "slave")
                    .count()
                    == replicas_before - 1
        })
        .await;
        tokio::time::sleep(hold.saturating_sub(promoted)).await;
        let during = players.since(from);
        fleet.heal(&link);
        let healed = Instant::now();
        until(
            Duration::from_secs(30),
            "the old master rejoins as a replica",
            || async { fleet.redis_cli(master, &["role"]).starts_with("slave") },
        )
        .await;
        until(
            Duration::from_secs(30),
            "a musicd follows again",
            || async { follower(&fleet).await.is_some() },
        )
        .await;
        let figures = Figures::of(
            "Redis master isolated",
            &during,
            from.elapsed() - healed.elapsed(),
            healed.elapsed(),
            format!("replica promoted in {:.1} s", promoted.as_secs_f64()),
        );
        assert!(figures.failed.is_empty(), "{}", figures.row());
        table.push(figures);
    }

    // 5. The follower cut off from Redis, still reading MongoDB: a standby takes the
    // lease; after the heal the old follower writes nothing, and no change is lost. The
    // cut comes while changes stream in, so the old follower has writes on the wire: TCP
    // delivers them after the heal, and they must not undo what the successor wrote.
    {
        let old = follower(&fleet).await.expect("a follower");
        let link = format!("m{old}-redis");
        let moved: Vec<ObjectId> = catalogue.hot[..20].to_vec();
        let churning = Arc::new(AtomicBool::new(true));
        let churn = {
            let (tracks, moved, media, churning) = (
                tracks.clone(),
                moved.clone(),
                fleet.media.clone(),
                Arc::clone(&churning),
            );
            tokio::spawn(async move {
                let mut round = 0usize;
                while churning.load(Ordering::Relaxed) {
                    let path = media.join(format!("churn/{round}.mp3"));
                    std::fs::create_dir_all(media.join("churn")).expect("dir");
                    std::fs::write(&path, format!("churn {round}")).expect("file");
                    // Writes may fail while nothing is primary; the next round goes on.
                    let _ = tracks
                        .update_one(
                            doc! { "_id": moved[round % moved.len()] },
                            doc! { "$set": { "path": path.display().to_string() } },
                        )
                        .await;
                    round += 1;
                    tokio::time::sleep(Duration::from_millis(5)).await;
                }
                round
            })
        };
        // Let the old follower write for a moment, then cut it off mid-stream.
        tokio::time::sleep(Duration::from_millis(300)).await;
        let from = Instant::now();
        fleet.cut(&link);
        let taken = until(Duration::from_secs(30), "a standby follows", || async {
            follower(&fleet).await.is_some_and(|f| f != old)
        })
        .await;
        churning.store(false, Ordering::Relaxed);
        let churned = churn.await.expect("churn");
        // The last word for each id, written by the successor.
        for (n, id) in moved.iter().enumerate() {
            let path = write_media(
                &fleet,
                &format!("moved/{n}.mp3"),
                format!("m{n}").as_bytes(),
            );
            tracks
                .update_one(
                    doc! { "_id": id },
                    doc! { "$set": { "path": path.display().to_string() } },
                )
                .await
                .expect("move");
        }
        tokio::time::sleep(hold.saturating_sub(from.elapsed())).await;
        let during = players.since(from);
        let on_the_wire = fleet.unacked_bytes(&format!("m{old}"), 6379);
        fleet.heal(&link);
        let healed = Instant::now();
        let new = follower(&fleet).await.expect("a follower");
        until(
            Duration::from_secs(30),
            "the old follower stands by",
            || async {
                readyz(&fleet, old).await.is_some_and(|b| {
                    b["watch"]["state"] == "standby" && b["redis"]["state"] == "up"
                })
            },
        )
        .await;
        // Every byte the old follower had on the wire is delivered (or given up) ...
        until(
            Duration::from_secs(60),
            "the old follower's writes drained",
            || async { fleet.unacked_bytes(&format!("m{old}"), 6379) == 0 },
        )
        .await;
        let recovered = healed.elapsed();
        // ... and every entry is MongoDB's latest path (or none: read through).
        let mut expected = Vec::new();
        for id in &moved {
            let document = tracks
                .find_one(doc! { "_id": id })
                .await
                .expect("find")
                .expect("document");
            expected.push(document.get_str("path").expect("path").to_string());
        }
        until(
            Duration::from_secs(10),
            "entries agree with MongoDB",
            || async {
                moved
                    .iter()
                    .zip(&expected)
                    .all(|(id, path)| matches!(entry(&fleet, id), e if e.is_empty() || e == *path))
            },
        )
        .await;
        for (id, path) in moved.iter().zip(&expected) {
            let url = format!("{}/musicdb/{}/t.mp3", fleet.nginx_base(), id.to_hex());
            let body = reqwest::get(url)
                .await
                .expect("fetch")
                .bytes()
                .await
                .expect("body");
            let on_disk = std::fs::read(path).expect("file");
            assert_eq!(
                body.as_ref(),
                on_disk.as_slice(),
                "{id} not served as moved"
            );
        }
        let figures = Figures::of(
            "follower ↮ Redis",
            &during,
            hold,
            recovered,
            format!(
                "m{new} took the lease in {:.1} s; {churned} changes streamed; {on_the_wire} bytes of m{old}'s writes on the wire at the heal",
                taken.as_secs_f64()
            ),
        );
        assert!(figures.failed.is_empty(), "{}", figures.row());
        table.push(figures);
    }

    // 6. One musicd cut off from nginx (and every client): nginx routes around it.
    {
        let follower_now = follower(&fleet).await;
        let cut = (1..=MUSICDS)
            .find(|i| Some(*i) != follower_now)
            .expect("a musicd");
        let target = format!("m{cut}");
        players.skip.lock().expect("skip").push(target.clone());
        let link = format!("{target}-front");
        let from = Instant::now();
        fleet.cut(&link);
        tokio::time::sleep(hold).await;
        let during = players.since(from);
        fleet.heal(&link);
        let healed = Instant::now();
        players.skip.lock().expect("skip").clear();
        until(
            Duration::from_secs(20),
            "the musicd answers again",
            || async { readyz(&fleet, cut).await.is_some() },
        )
        .await;
        let figures = Figures::of(
            "musicd ↮ nginx",
            &during,
            hold,
            healed.elapsed(),
            format!("{target} skipped by direct players"),
        );
        assert!(figures.failed.is_empty(), "{}", figures.row());
        table.push(figures);
    }

    players.stop().await;
    println!(
        "| fault | held | requests | failed (by kind and target) | longest wait | recovered after heal | note |"
    );
    println!("|---|---|---|---|---|---|---|");
    for figures in &table {
        println!("{}", figures.row());
    }
}
