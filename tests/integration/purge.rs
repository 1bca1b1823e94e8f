//! `musicctl purge` against real Redis: 200,000 keys with awkward bytes, a Redis Cluster,
//! dry runs, the `*` guard, and purging while musicd serves.

use std::sync::Arc;
use std::sync::atomic::AtomicBool;

use crate::harness::load::hammer;
use crate::harness::{RedisCluster, Server, TestEnv, http_get, pattern, shared_mongo};
use mongodb::bson::oid::ObjectId;
use redis::AsyncCommands;

/// Keys no shell pipeline survives.
fn awkward(prefix: &str) -> Vec<Vec<u8>> {
    let mut keys: Vec<Vec<u8>> = [
        "it's",
        "\"double\"",
        "with space",
        "new\nline",
        "tab\tand\\slash",
        "*star*",
        "[br]",
    ]
    .iter()
    .map(|s| format!("{prefix}{s}").into_bytes())
    .collect();
    let mut invalid = prefix.as_bytes().to_vec();
    invalid.extend_from_slice(&[0xff, 0xfe, 0x00, 0x80]);
    keys.push(invalid);
    keys
}

async fn fill(conn: &mut impl redis::aio::ConnectionLike, keys: impl Iterator<Item = Vec<u8>>) {
    let keys: Vec<Vec<u8>> = keys.collect();
    for chunk in keys.chunks(10_000) {
        let mut pipe = redis::pipe();
        for key in chunk {
            pipe.cmd("SET").arg(key.as_slice()).arg("/x.mp3").ignore();
        }
        pipe.query_async::<()>(conn).await.expect("fill");
    }
}

fn run_purge(env: &TestEnv, args: &[&str]) -> (Option<i32>, serde_json::Value, String) {
    let output = env
        .command("musicctl")
        .arg("purge")
        .args(args)
        .output()
        .expect("musicctl");
    let json = serde_json::from_slice(&output.stdout).unwrap_or(serde_json::Value::Null);
    (
        output.status.code(),
        json,
        String::from_utf8_lossy(&output.stderr).into_owned(),
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn purge_removes_200k_keys_with_any_bytes_and_nothing_else() {
    let redis = Server::redis();
    let env = TestEnv::with(&redis.redis_url(), &shared_mongo().mongo_uri(), &[]).await;
    let prefix = env.config.redis.prefix.clone();
    let mut conn = env
        .redis
        .get_multiplexed_async_connection()
        .await
        .expect("redis");
    let matching = (0..200_000)
        .map(|i| format!("{prefix}{i:024x}").into_bytes())
        .chain(awkward(&prefix));
    fill(&mut conn, matching).await;
    // Neighbours that must survive: another prefix, and one that differs only after the glob.
    let survivors = (0..1000)
        .map(|i| format!("other_{i}").into_bytes())
        .chain(awkward("keep_"));
    fill(&mut conn, survivors).await;
    let total: u64 = crate::harness::dbsize(&mut conn).await;
    assert_eq!(total, 200_000 + 8 + 1000 + 8);

    let glob = format!("{prefix}*");
    let (code, dry, _) = run_purge(&env, &[&glob, "--dry-run", "--json"]);
    assert_eq!(code, Some(0));
    assert_eq!(dry["matched"], 200_008);
    assert_eq!(dry["removed"], 0);
    let after_dry: u64 = crate::harness::dbsize(&mut conn).await;
    assert_eq!(after_dry, total, "a dry run deletes nothing");

    let (code, report, stderr) = run_purge(&env, &[&glob, "--json", "--batch", "500"]);
    assert_eq!(code, Some(0), "{stderr}");
    assert_eq!(report["removed"], 200_008, "{report}");
    assert_eq!(report["failed"], 0);
    let left: u64 = crate::harness::dbsize(&mut conn).await;
    assert_eq!(left, 1008, "only the non-matching keys are left");
    for key in awkward("keep_") {
        let exists: bool = conn.exists(key.as_slice()).await.expect("exists");
        assert!(exists, "{:?} was removed", String::from_utf8_lossy(&key));
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn purge_refuses_a_match_everything_pattern_without_force_and_purges_one_id() {
    let redis = Server::redis();
    let env = TestEnv::with(&redis.redis_url(), &shared_mongo().mongo_uri(), &[]).await;
    let mut conn = env
        .redis
        .get_multiplexed_async_connection()
        .await
        .expect("redis");
    fill(&mut conn, (0..10).map(|i| format!("k{i}").into_bytes())).await;
    let (code, _, stderr) = run_purge(&env, &["*"]);
    assert_eq!(code, Some(2));
    assert!(stderr.contains("--force"), "{stderr}");
    let size: u64 = crate::harness::dbsize(&mut conn).await;
    assert_eq!(size, 10);
    let (code, report, _) = run_purge(&env, &["*", "--force", "--json"]);
    assert_eq!((code, report["removed"].as_u64()), (Some(0), Some(10)));

    let (id, _) = env.track("one.mp3", b"1").await;
    let key = env.key(&id);
    let _: () = conn.set(&key, "/x").await.expect("set");
    let (code, report, _) = run_purge(&env, &["--id", &id.to_hex(), "--json"]);
    assert_eq!(code, Some(0));
    assert_eq!(report["removed"], true);
    let exists: bool = conn.exists(&key).await.expect("exists");
    assert!(!exists);
    let (code, _, _) = run_purge(&env, &["--id", "nope"]);
    assert_eq!(code, Some(2));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn purge_scans_every_master_of_a_redis_cluster() {
    let cluster = RedisCluster::start();
    let env = TestEnv::with_cluster(&cluster.urls(), &shared_mongo().mongo_uri(), &[]).await;
    let prefix = env.config.redis.prefix.clone();
    let client = redis::cluster::ClusterClient::new(cluster.urls()).expect("cluster client");
    let conn = client
        .get_async_connection()
        .await
        .expect("cluster connection");
    let keys: Vec<Vec<u8>> = (0..30_000)
        .map(|i| format!("{prefix}{i}").into_bytes())
        .chain(awkward(&prefix))
        .collect();
    let others: Vec<Vec<u8>> = (0..300)
        .map(|i| format!("other_{i}").into_bytes())
        .collect();
    // The cluster connection multiplexes concurrent commands, each routed to its slot.
    for chunk in keys.chunks(2000).chain(others.chunks(2000)) {
        let writes = chunk.iter().map(|key| {
            let mut conn = conn.clone();
            async move { conn.set::<_, _, ()>(key.as_slice(), "/x.mp3").await }
        });
        futures_util::future::try_join_all(writes)
            .await
            .expect("set");
    }
    let sizes = cluster.sizes();
    assert!(
        sizes.iter().all(|&n| n > 5000),
        "keys spread over the masters: {sizes:?}"
    );

    let (code, report, stderr) = run_purge(&env, &[&format!("{prefix}*"), "--json"]);
    assert_eq!(code, Some(0), "{stderr}");
    assert_eq!(report["nodes"], 3);
    assert_eq!(report["removed"], 30_008, "{report}");
    assert_eq!(cluster.sizes().iter().sum::<u64>(), 300);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn purge_while_musicd_serves_costs_no_request_and_the_cache_refills() {
    let env = TestEnv::new().await;
    let bytes = Arc::new(pattern(20_000, 4));
    let (id, path) = env.track("hot.mp3", &bytes).await;
    let server = env.musicd().await;
    let stop = Arc::new(AtomicBool::new(false));
    let load = tokio::spawn(hammer(
        server.track_url(&id),
        bytes.clone(),
        1500,
        4,
        stop.clone(),
    ));
    let glob = format!("{}*", env.config.redis.prefix);
    for _ in 0..5 {
        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
        let (code, _, stderr) = tokio::task::block_in_place(|| run_purge(&env, &[&glob, "--json"]));
        assert_eq!(code, Some(0), "{stderr}");
    }
    let report = load.await.expect("load");
    assert_eq!(
        (report.ok, report.failed, report.refused),
        (1500, 0, 0),
        "{:?}",
        report.samples
    );
    // Once the in-process answer (1 s) runs out, the next request refills Redis from MongoDB.
    let mut refilled = false;
    for _ in 0..30 {
        let response = http_get(server.track_url(&id)).await;
        assert_eq!(response.status(), reqwest::StatusCode::OK);
        if env.cached(&id).await == Some(path.display().to_string().into_bytes()) {
            refilled = true;
            break;
        }
        tokio::time::sleep(std::time::Duration::from_millis(100)).await;
    }
    assert!(refilled, "the cache was not repopulated from MongoDB");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_purge_reaches_every_running_musicd_within_a_second() {
    let env = TestEnv::new().await;
    let (id, old_path) = env.track("v1.mp3", b"old version").await;
    let new_path = env.write_file("v2.mp3", b"new version");
    let servers = [env.musicd().await, env.musicd().await];
    for server in &servers {
        let (_, _, body) = crate::harness::fetch(&server.track_url(&id)).await;
        assert_eq!(body.as_ref(), b"old version");
    }
    // The catalogue moves the track; the operator purges its cache entry.
    env.set_path(&id, &new_path).await;
    let purged_at = std::time::Instant::now();
    let (code, _, _) = tokio::task::block_in_place(|| run_purge(&env, &["--id", &id.to_hex()]));
    assert_eq!(code, Some(0));
    for server in &servers {
        loop {
            let (_, _, body) = crate::harness::fetch(&server.track_url(&id)).await;
            if body.as_ref() == b"new version" {
                break;
            }
            assert_eq!(body.as_ref(), b"old version");
            assert!(
                purged_at.elapsed() < std::time::Duration::from_millis(1100),
                "the purge did not reach a musicd within 1 s"
            );
            tokio::time::sleep(std::time::Duration::from_millis(20)).await;
        }
    }
    let _ = old_path;
}

/// Bug: a purge removed the entries but not the fill leases of lookups under way, so a
/// lookup that read MongoDB before the operator's change put the old answer back after the
/// purge, until its TTL. A purge by glob and one by id now revoke them.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_purge_revokes_the_leases_of_lookups_under_way() {
    let env = TestEnv::with(
        &crate::harness::shared_redis().redis_url(),
        &shared_mongo().mongo_uri(),
        &[],
    )
    .await;
    let cache = musicd::catalog::backends::Backends::new(&env.config)
        .await
        .expect("clients")
        .cache;
    let (by_glob, by_id) = (ObjectId::new(), ObjectId::new());
    // Two lookups missed and took their leases, then read MongoDB (before the change).
    let glob_fill = cache.begin_fill(&by_glob).await.expect("lease");
    let id_fill = cache.begin_fill(&by_id).await.expect("lease");

    let (code, report, stderr) = run_purge(
        &env,
        &[
            &format!("{}{}*", env.config.redis.prefix, by_glob.to_hex()),
            "--json",
        ],
    );
    assert_eq!(code, Some(0), "{stderr}");
    let (code, _, stderr) = run_purge(&env, &["--id", &by_id.to_hex(), "--json"]);
    assert_eq!(code, Some(0), "{stderr}");

    for (id, fill) in [(by_glob, glob_fill), (by_id, id_fill)] {
        let written = cache
            .complete_fill(fill, Some("/old.mp3"))
            .await
            .expect("write-back");
        assert!(!written, "{id}: the write-back landed after the purge");
        assert_eq!(env.cached(&id).await, None);
    }
    assert_eq!(report["leases_revoked"], 1, "{report}");
}
