//! One truth across the stack: what the follower writes cannot be undone by a late fill,
//! reaches every musicd's in-process cache by a pushed eviction, and reaches varnish by a
//! ban; a ban a cache does not take is kept and delivered later.

use std::time::{Duration, Instant};

use mongodb::bson::doc;
use mongodb::bson::oid::ObjectId;
use musicd::catalog::backends::Backends;
use reqwest::StatusCode;

use crate::harness::varnish::Varnish;
use crate::harness::{
    Musicd, RedisCluster, Server, TestEnv, fetch_with, free_port, get_body, get_text, metric,
    served_within, shared_redis, shared_replica_set,
};

/// A dead follower is replaced within 1.5 s.
const LEASE: &str = "mongodb.watch_lease_ms=1500";

async fn metrics(server: &Musicd) -> String {
    get_text(&server.url("/metrics")).await
}

/// Waits (10 s at most) until `server` says `series` is at least `value`.
async fn until_metric(server: &Musicd, series: &str, value: f64, what: &str) {
    let deadline = Instant::now() + Duration::from_secs(10);
    while metric(&metrics(server).await, series).unwrap_or(0.0) < value {
        assert!(
            Instant::now() < deadline,
            "{what}: {}",
            server.readyz().await
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

async fn until_following(server: &Musicd) {
    until_metric(server, "musicd_watch_following", 1.0, "never followed").await;
}

/// A world over the shared Redis and replica set (with `settings` beside the lease), and a
/// musicd whose follower follows.
async fn following_world(settings: &[&str]) -> (TestEnv, Musicd) {
    let env = TestEnv::with(
        &shared_redis().redis_url(),
        &shared_replica_set().uri(),
        &[&[LEASE], settings].concat(),
    )
    .await;
    let server = env.musicd().await;
    until_following(&server).await;
    (env, server)
}

/// Polls `url` until it answers `status` (and `body`, when given); how long it took.
async fn served(url: &str, status: StatusCode, body: Option<&[u8]>, within: Duration) -> Duration {
    served_within(url, status, body, within)
        .await
        .unwrap_or_else(|| panic!("{url}: not {status} within {within:?}"))
}

/// A follower's write that arrives late (sent by a follower cut off from Redis, delivered
/// by TCP after the heal) carries an older change's cluster time than what the successor
/// wrote: it is refused, for a path and after a deletion. (The whole story runs in
/// `fleet::partitions_under_load`; this is the script's rule on one server.)
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_follower_write_older_than_the_entry_is_refused() {
    use mongodb::bson::Timestamp;
    use musicd::catalog::cache::{FollowerWrite, change_version};
    let env = TestEnv::with(
        &shared_redis().redis_url(),
        &crate::harness::shared_mongo().mongo_uri(),
        &[],
    )
    .await;
    let cache = Backends::new(&env.config).await.expect("clients").cache;
    let at = |time: u32, increment: u32| change_version(Some(Timestamp { time, increment }));
    let id = ObjectId::new();
    let written = |path: &'static str, version: String| {
        let cache = &cache;
        async move {
            cache
                .apply(&id, FollowerWrite::Path(path), &version)
                .await
                .expect("apply")
        }
    };
    assert!(written("/new", at(2_000_000_000, 1)).await);
    assert!(
        !written("/old", at(1_999_999_999, 7)).await,
        "an older time"
    );
    assert!(
        !written("/old", at(2_000_000_000, 0)).await,
        "an older increment"
    );
    assert_eq!(env.cached(&id).await.as_deref(), Some(b"/new".as_slice()));
    assert!(
        written("/same", at(2_000_000_000, 1)).await,
        "a replay of the same change"
    );
    let forget = cache
        .apply(&id, FollowerWrite::Forget, &at(2_000_000_001, 0))
        .await
        .expect("forget");
    assert!(forget);
    assert!(
        !written("/old", at(2_000_000_000, 5)).await,
        "older than the deletion"
    );
    assert_eq!(env.cached(&id).await, None);
}

/// A follower cut off from Redis whose successor found no resume point rebuilt the index
/// instead of replaying: the cut-off follower's writes, delivered by TCP after the heal,
/// are older than the rebuild and are refused, for an entry it wrote and for one it
/// pruned. (Before: rebuild writes carried no version, and the late write landed.)
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cut_off_followers_write_older_than_its_successors_rebuild_is_refused() {
    use mongodb::bson::Timestamp;
    use musicd::catalog::cache::{FollowerWrite, change_version};
    let env = TestEnv::with(
        &shared_redis().redis_url(),
        &shared_replica_set().uri(),
        &[LEASE],
    )
    .await;
    let cache = Backends::new(&env.config).await.expect("clients").cache;
    let (kept, path) = env.track("kept.mp3", b"kept").await;
    // An entry for a document deleted while nobody followed, written long ago.
    let deleted = ObjectId::new();
    let ancient = change_version(Some(Timestamp {
        time: 1,
        increment: 0,
    }));
    assert!(
        cache
            .apply(&deleted, FollowerWrite::Path("/gone.mp3"), &ancient)
            .await
            .expect("apply")
    );
    // The cut-off follower's writes: for changes that committed before the successor
    // started (a second ago), so before its rebuild read anything.
    let unix_s = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .expect("clock")
        .as_secs()
        - 1;
    let unix_s = u32::try_from(unix_s).expect("time");
    let late = change_version(Some(Timestamp {
        time: unix_s,
        increment: 0,
    }));
    let server = env.musicd().await;
    until_following(&server).await;
    assert_eq!(
        env.cached(&kept).await.as_deref(),
        Some(path.display().to_string().as_bytes()),
        "the rebuild indexed the track"
    );
    assert_eq!(env.cached(&deleted).await, None, "the rebuild pruned it");
    for id in [kept, deleted] {
        let written = cache
            .apply(&id, FollowerWrite::Path("/stale.mp3"), &late)
            .await
            .expect("apply");
        assert!(!written, "{id}: a write older than the rebuild landed");
    }
    assert_eq!(
        env.cached(&kept).await.as_deref(),
        Some(path.display().to_string().as_bytes())
    );
    assert_eq!(env.cached(&deleted).await, None);
}

/// The race of a read-through write-back against the follower, provoked step by step: the
/// lookup reads MongoDB, then the follower applies a change, then the write-back arrives.
/// The write-back must lose, for a move and for an insert after a 404.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_write_back_that_read_before_a_change_never_undoes_it() {
    let (env, server) = following_world(&[]).await;
    let lookup = Backends::new(&env.config).await.expect("clients");

    // A move: the lookup read the old path; the follower writes the new one first.
    let (id, _) = env.track("old.mp3", b"old").await;
    let fill = lookup.cache.begin_fill(&id).await.expect("lease");
    let read = lookup.store.find_path(&id).await.expect("read");
    let Some(musicd::catalog::StoredPath::Path(old)) = read else {
        panic!("{read:?}");
    };
    let moved = env.write_file("new.mp3", b"new");
    env.set_path(&id, &moved).await;
    let new = moved.display().to_string();
    let within = Duration::from_secs(10);
    env.until_cached(
        &id,
        Some(new.as_bytes()),
        within,
        "the follower wrote the move",
    )
    .await;
    let written = lookup.cache.complete_fill(fill, Some(&old)).await;
    assert!(
        !written.expect("fill"),
        "the late write-back was written: {}",
        server.readyz().await
    );
    assert_eq!(env.cached(&id).await.as_deref(), Some(new.as_bytes()));
    assert_eq!(get_body(&server.track_url(&id)).await.1.as_ref(), b"new");

    // An insert after a 404: the lookup read "no such document"; the follower dropped the
    // entry for the insert first. No negative entry may come back.
    let inserts = "musicd_watch_events_total{operation=\"insert\"}";
    let before = metric(&metrics(&server).await, inserts).unwrap_or(0.0);
    let id = ObjectId::new();
    let fill = lookup.cache.begin_fill(&id).await.expect("lease");
    assert_eq!(lookup.store.find_path(&id).await.expect("read"), None);
    let path = env.write_file("inserted.mp3", b"inserted");
    env.tracks
        .insert_one(doc! { "_id": id, "path": path.display().to_string() })
        .await
        .expect("insert");
    until_metric(
        &server,
        inserts,
        before + 1.0,
        "the follower saw the insert",
    )
    .await;
    let written = lookup.cache.complete_fill(fill, None).await;
    assert!(!written.expect("fill"), "a negative entry came back");
    assert_eq!(env.cached(&id).await, None);
    assert_eq!(
        get_body(&server.track_url(&id)).await.1.as_ref(),
        b"inserted"
    );

    // Without a change in between, the write-back is written: the fence is not a no-op.
    let (quiet, path) = env.track("quiet.mp3", b"quiet").await;
    until_metric(
        &server,
        inserts,
        before + 2.0,
        "the follower saw the insert",
    )
    .await;
    let fill = lookup.cache.begin_fill(&quiet).await.expect("lease");
    let path = path.display().to_string();
    assert!(
        lookup
            .cache
            .complete_fill(fill, Some(&path))
            .await
            .expect("fill")
    );
    assert_eq!(env.cached(&quiet).await.as_deref(), Some(path.as_bytes()));
    server.shutdown().await;
}

/// `musicctl reindex` rebuilding the cache while the catalogue changes, provoked step by
/// step: each time a batch is written, tracks of the next batch (already read from the
/// cursor) are moved and the follower writes their new paths; then the rebuild writes
/// that batch. It must leave the follower's paths, not the ones its cursor read (which it
/// wrote back until the entries expired, a day by default). Checked in Redis and through
/// varnish, which had the old files cached.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_reindex_never_undoes_a_change_made_while_it_runs() {
    use musicd::admin::reindex::{RebuildOptions, reindex};
    const TRACKS: usize = 200;
    const BATCH: usize = 40;
    // The tracks moved: two of each batch read while the one before is written.
    let moves = |read: usize| [read - BATCH + 3, read - 5];
    let varnish_port = free_port();
    let ban = format!("http_caches.ban_urls=[\"http://127.0.0.1:{varnish_port}\"]");
    let (env, server) = following_world(&[&ban]).await;
    let varnish = Varnish::start_on(varnish_port, server.addr.port());
    let inserts = "musicd_watch_events_total{operation=\"insert\"}";
    let before = metric(&metrics(&server).await, inserts).unwrap_or(0.0);
    // Inserted in order, so the rebuild's cursor (natural order) reads them in order.
    let ids: Vec<ObjectId> = (0..TRACKS).map(|_| ObjectId::new()).collect();
    let documents: Vec<_> = ids
        .iter()
        .enumerate()
        .map(|(i, id)| {
            let path = env.write_file(&format!("r/{i}.mp3"), b"first");
            doc! { "_id": id, "path": path.display().to_string() }
        })
        .collect();
    env.tracks.insert_many(documents).await.expect("insert");
    until_metric(
        &server,
        inserts,
        before + TRACKS as f64,
        "the follower saw the inserts",
    )
    .await;
    let through_varnish = |i: usize| varnish.url(&format!("/musicdb/{}/{i}.mp3", ids[i].to_hex()));
    let to_move: Vec<usize> = [2, 3, 4]
        .into_iter()
        .flat_map(|k| moves(k * BATCH))
        .collect();
    for &i in &to_move {
        assert_eq!(get_body(&through_varnish(i)).await.1.as_ref(), b"first");
    }

    let backends = Backends::new(&env.config).await.expect("clients");
    let options = RebuildOptions {
        dry_run: false,
        prune: false,
        batch: BATCH,
        versioned: false,
    };
    let handle = tokio::runtime::Handle::current();
    let mut moved: Vec<(ObjectId, String)> = Vec::new();
    let report = reindex(
        &backends,
        &env.config.redis.target,
        env.config.redis.batch_timeout(),
        &options,
        |progress| {
            // `documents` counts the batch read and not yet written: move two of its tracks.
            let read = progress.documents as usize;
            if read >= TRACKS || moved.len() >= 6 {
                return;
            }
            for i in moves(read) {
                let id = ids[i];
                let new = env.write_file(&format!("r/{i}-moved.mp3"), b"moved");
                let new_path = new.display().to_string();
                tokio::task::block_in_place(|| {
                    handle.block_on(async {
                        env.set_path(&id, &new).await;
                        env.until_cached(
                            &id,
                            Some(new_path.as_bytes()),
                            Duration::from_secs(10),
                            "the follower wrote the move",
                        )
                        .await;
                    })
                });
                moved.push((id, new_path));
            }
        },
    )
    .await
    .expect("reindex");
    assert_eq!(moved.len(), 6, "the rebuild had batches to move tracks in");
    for (id, new_path) in &moved {
        assert_eq!(
            env.cached(id).await.as_deref(),
            Some(new_path.as_bytes()),
            "the rebuild undid the move of {id}: {report:?}"
        );
    }
    let summary = report.render();
    assert!(summary.contains("changed meanwhile 6\n"), "{summary}");
    // Through varnish (banned by the follower): the moved files, not the cached ones.
    for &i in &to_move {
        served(
            &through_varnish(i),
            StatusCode::OK,
            Some(b"moved"),
            Duration::from_secs(5),
        )
        .await;
    }
    // Every other track was written by the rebuild.
    let moved_ids: Vec<ObjectId> = moved.iter().map(|(id, _)| *id).collect();
    for (i, id) in ids.iter().enumerate() {
        if !moved_ids.contains(id) {
            let first = env.media.join(format!("r/{i}.mp3")).display().to_string();
            assert_eq!(
                env.cached(id).await.as_deref(),
                Some(first.as_bytes()),
                "{i}"
            );
        }
    }
    server.shutdown().await;
}

/// Two musicd whose in-process id cache would keep an answer for a minute: a move, a
/// delete and an insert reach both within a fraction of a second, by pushed eviction.
async fn changes_reach_every_musicd_by_eviction(env: &TestEnv) {
    let a = env.musicd().await;
    let b = env.musicd().await;
    for server in [&a, &b] {
        until_metric(
            server,
            "musicd_evictions_subscribed",
            1.0,
            "never subscribed",
        )
        .await;
    }
    // One of them follows (changes made before anyone follows are covered by the first
    // follower's rebuild and its "forget everything", not by per-id evictions).
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let mut following = 0.0;
        for server in [&a, &b] {
            following += metric(&metrics(server).await, "musicd_watch_following").unwrap_or(0.0);
        }
        if following == 1.0 {
            break;
        }
        assert!(Instant::now() < deadline, "nobody follows");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let (moved_id, _) = env.track("m.mp3", b"before").await;
    let (deleted_id, _) = env.track("d.mp3", b"deleted").await;
    let inserted_id = ObjectId::new();
    for server in [&a, &b] {
        assert_eq!(
            get_body(&server.track_url(&moved_id)).await.1.as_ref(),
            b"before"
        );
        assert_eq!(
            get_body(&server.track_url(&deleted_id)).await.0,
            StatusCode::OK
        );
        assert_eq!(
            get_body(&server.track_url(&inserted_id)).await.0,
            StatusCode::NOT_FOUND
        );
    }
    let moved = env.write_file("m2.mp3", b"after");
    env.set_path(&moved_id, &moved).await;
    env.tracks
        .delete_one(doc! { "_id": deleted_id })
        .await
        .expect("delete");
    let path = env.write_file("i.mp3", b"inserted");
    env.tracks
        .insert_one(doc! { "_id": inserted_id, "path": path.display().to_string() })
        .await
        .expect("insert");
    let within = Duration::from_secs(5);
    for server in [&a, &b] {
        served(
            &server.track_url(&moved_id),
            StatusCode::OK,
            Some(b"after"),
            within,
        )
        .await;
        served(
            &server.track_url(&deleted_id),
            StatusCode::NOT_FOUND,
            None,
            within,
        )
        .await;
        served(
            &server.track_url(&inserted_id),
            StatusCode::OK,
            Some(b"inserted"),
            within,
        )
        .await;
        let text = metrics(server).await;
        let evictions: Vec<&str> = text
            .lines()
            .filter(|l| l.starts_with("musicd_evictions"))
            .collect();
        assert!(
            metric(&text, "musicd_evictions_total").unwrap_or(0.0) >= 3.0,
            "{evictions:?}"
        );
    }
    a.shutdown().await;
    b.shutdown().await;
}

/// Minute-long in-process entries, so only an eviction can make a change show in seconds.
const LONG_LOCAL: &str = "cache.id_ttl_ms=60000";

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn changes_reach_every_musicd_by_pushed_eviction_on_a_single_redis() {
    let env = TestEnv::with(
        &shared_redis().redis_url(),
        &shared_replica_set().uri(),
        &[LEASE, LONG_LOCAL],
    )
    .await;
    changes_reach_every_musicd_by_eviction(&env).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn changes_reach_every_musicd_by_pushed_eviction_on_a_redis_cluster() {
    let cluster = RedisCluster::start();
    let env = TestEnv::with_cluster(
        &cluster.urls(),
        &shared_replica_set().uri(),
        &[LEASE, LONG_LOCAL],
    )
    .await;
    changes_reach_every_musicd_by_eviction(&env).await;
}

/// A hot id is read from Redis again before its in-process entry runs out, off the
/// request path, and that renewal does not stretch how long a change can go unseen: a move
/// written to Redis alone (its eviction lost) is served once the TTL has run, though the
/// id is requested all along and answered from a loop's copy.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn hot_ids_are_read_again_ahead_and_a_lost_eviction_still_ends_with_the_ttl() {
    let env = TestEnv::with(
        &shared_redis().redis_url(),
        &crate::harness::shared_mongo().mongo_uri(),
        &["cache.id_ttl_ms=400"],
    )
    .await;
    let (id, _) = env.track("a.mp3", b"before").await;
    let server = env.musicd().await;
    let url = server.track_url(&id);
    let deadline = Instant::now() + Duration::from_secs(20);
    while metric(&metrics(&server).await, "musicd_id_refreshes_total").unwrap_or(0.0) < 3.0 {
        assert!(Instant::now() < deadline, "a hot id was never read ahead");
        assert_eq!(get_body(&url).await.1.as_ref(), b"before");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    // The follower's write without its eviction: only the TTL can bring it.
    let moved = env.write_file("b.mp3", b"after");
    let mut redis = env
        .redis
        .get_multiplexed_async_connection()
        .await
        .expect("redis connection");
    let () = redis::cmd("SET")
        .arg(env.key(&id))
        .arg(moved.display().to_string())
        .query_async(&mut redis)
        .await
        .expect("redis SET");
    served(
        &url,
        StatusCode::OK,
        Some(b"after"),
        Duration::from_secs(10),
    )
    .await;
    server.shutdown().await;
}

/// While evictions cannot arrive (Redis is down), a long in-process TTL falls back to a
/// second; when they are heard again, the in-process cache starts empty.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn without_evictions_in_process_answers_live_a_second_and_are_cleared_on_resubscribing() {
    let mut redis = Server::redis();
    let env = TestEnv::with(
        &redis.redis_url(),
        &shared_replica_set().uri(),
        &[LONG_LOCAL, LEASE],
    )
    .await;
    let (id, _) = env.track("a.mp3", b"before").await;
    let server = env.musicd().await;
    until_metric(
        &server,
        "musicd_evictions_subscribed",
        1.0,
        "never subscribed",
    )
    .await;
    assert_eq!(get_body(&server.track_url(&id)).await.1.as_ref(), b"before");
    redis.kill();
    let deadline = Instant::now() + Duration::from_secs(10);
    while metric(&metrics(&server).await, "musicd_evictions_subscribed") != Some(0.0) {
        assert!(
            Instant::now() < deadline,
            "the lost subscription went unnoticed"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    // Nobody can tell this musicd about the move: its own TTL (now 1 s) must end it.
    let moved = env.write_file("b.mp3", b"after");
    env.set_path(&id, &moved).await;
    let took = served(
        &server.track_url(&id),
        StatusCode::OK,
        Some(b"after"),
        Duration::from_secs(5),
    )
    .await;
    assert!(took <= Duration::from_millis(2500), "{took:?}");
    let clears = metric(&metrics(&server).await, "musicd_evictions_clears_total").unwrap_or(0.0);
    redis.restart();
    until_metric(
        &server,
        "musicd_evictions_subscribed",
        1.0,
        "never resubscribed",
    )
    .await;
    until_metric(
        &server,
        "musicd_evictions_clears_total",
        clears + 1.0,
        "not cleared on resubscribing",
    )
    .await;
    server.shutdown().await;
}

/// varnish in front of musicd, told nothing but by the follower: a move and a delete made
/// in MongoDB reach varnish's cache at once, not after its day-long TTL.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_follower_bans_changed_tracks_in_varnish() {
    let varnish_port = free_port();
    let ban = format!("http_caches.ban_urls=[\"http://127.0.0.1:{varnish_port}\"]");
    let env = TestEnv::with(
        &shared_redis().redis_url(),
        &shared_replica_set().uri(),
        &[LEASE, &ban],
    )
    .await;
    let server = env.musicd().await;
    until_following(&server).await;
    let varnish = Varnish::start_on(varnish_port, server.addr.port());
    let (moved_id, _) = env.track("m.mp3", b"before").await;
    let (deleted_id, _) = env.track("d.mp3", b"deleted").await;
    let moved_url = varnish.url(&format!("/musicdb/{}/m.mp3", moved_id.to_hex()));
    let deleted_url = varnish.url(&format!("/stream/musicdb/{}", deleted_id.to_hex()));
    for url in [&moved_url, &deleted_url] {
        get_body(url).await;
        let (_, headers, _) = fetch_with(url, &[]).await;
        assert_eq!(
            headers.get("x-cache").map(|v| v.as_bytes()),
            Some(&b"HIT"[..])
        );
    }
    let moved = env.write_file("m2.mp3", b"after");
    env.set_path(&moved_id, &moved).await;
    env.tracks
        .delete_one(doc! { "_id": deleted_id })
        .await
        .expect("delete");
    let within = Duration::from_secs(5);
    let took = served(&moved_url, StatusCode::OK, Some(b"after"), within).await;
    served(&deleted_url, StatusCode::NOT_FOUND, None, within).await;
    eprintln!("move -> served through varnish in {took:?}");
    let text = metrics(&server).await;
    let sent = format!(
        "musicd_watch_bans_total{{cache=\"http://127.0.0.1:{varnish_port}\",result=\"ok\"}}"
    );
    let first = metric(&text, &sent).unwrap_or(0.0);
    assert!(first >= 1.0, "{text}");
    // Each ban goes out again a moment later (EARLY_ECHO_AFTER, then ECHO_AFTER).
    until_metric(&server, &sent, first + 1.0, "the ban was not sent again").await;
    server.shutdown().await;
}

/// A ban the cache does not take is retried, kept in Redis (where `musicctl health` sees
/// it), and sent by the next follower once the cache is back: never lost silently.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_ban_no_cache_took_is_kept_in_redis_and_sent_by_the_next_follower() {
    let varnish_port = free_port();
    let cache_url = format!("http://127.0.0.1:{varnish_port}");
    let ban = format!("http_caches.ban_urls=[\"{cache_url}\"]");
    let env = TestEnv::with(
        &shared_redis().redis_url(),
        &shared_replica_set().uri(),
        &[LEASE, &ban],
    )
    .await;
    let (id, _) = env.track("a.mp3", b"a").await;
    let first = env.musicd().await;
    until_following(&first).await;
    let moved = env.write_file("b.mp3", b"b");
    env.set_path(&id, &moved).await;
    let failed = format!("musicd_watch_bans_total{{cache=\"{cache_url}\",result=\"failed\"}}");
    until_metric(&first, &failed, 1.0, "the ban never failed").await;
    let key = musicd::follow::bans::handover_key(&env.config.redis.prefix, &cache_url);
    let mut conn = env
        .redis
        .get_multiplexed_async_connection()
        .await
        .expect("redis");
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let kept: Vec<String> = redis::cmd("SMEMBERS")
            .arg(&key)
            .query_async(&mut conn)
            .await
            .expect("SMEMBERS");
        // The id, or every track (the first follower of an index rebuilt it, and a
        // rebuild bans everything).
        if kept.contains(&id.to_hex()) || kept.iter().any(|k| k == "*") {
            break;
        }
        assert!(Instant::now() < deadline, "not kept in Redis: {kept:?}");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let output = env
        .command("musicctl")
        .arg("health")
        .output()
        .expect("musicctl health");
    let text = String::from_utf8_lossy(&output.stdout);
    // The id, and the ban of every cached authorization a follower sends when it takes the
    // lease (for links revoked while nobody followed): both owed.
    assert!(
        text.lines().any(|l| l.starts_with("bans")
            && l.contains("degraded")
            && l.contains("2 undelivered")),
        "{text}"
    );
    let readyz = first.readyz().await;
    assert!(
        readyz["watch"]["bans"][0]["failed"].as_u64().unwrap_or(0) >= 1,
        "{readyz}"
    );
    first.shutdown().await;

    // The cache comes back; the next follower sends what the first one owed.
    let _varnish = Varnish::start_on(varnish_port, free_port());
    let second = env.musicd().await;
    let sent = format!("musicd_watch_bans_total{{cache=\"{cache_url}\",result=\"ok\"}}");
    until_metric(&second, &sent, 1.0, "the kept ban was never sent").await;
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let left: u64 = redis::cmd("SCARD")
            .arg(&key)
            .query_async(&mut conn)
            .await
            .expect("SCARD");
        if left == 0 {
            break;
        }
        assert!(Instant::now() < deadline, "{left} bans still kept");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    second.shutdown().await;
}

/// Signed links through `deploy/varnish.vcl` with signing required: varnish asks musicd
/// before answering from its copy, so an expired, tampered, unknown-key or unsigned link
/// is refused even when the track is cached, and every valid signature shares one copy.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn signed_links_are_checked_on_every_request_and_share_one_cached_copy() {
    let scratch = crate::harness::tempdir();
    let key_file = scratch.path().join("k1.key");
    std::fs::write(&key_file, "a secret of more than sixteen bytes\n").expect("key");
    let keys = format!(
        "signing.keys=[{{ id = \"k1\", secret_file = \"{}\" }}]",
        key_file.display()
    );
    let env = TestEnv::shared_with(&[keys.as_str(), "signing.required=true"]).await;
    let (id, _) = env.track("s.mp3", b"signed bytes").await;
    let server = env.musicd().await;
    let varnish = Varnish::start_on(free_port(), server.addr.port());
    let key =
        musicd::signing::SigningKey::new("k1", b"a secret of more than sixteen bytes".to_vec());
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .expect("clock")
        .as_secs();
    let link = |expires: u64, kid: &str, sig: &str| {
        varnish.url(&format!(
            "/musicdb/{}/s.mp3?expires={expires}&kid={kid}&sig={sig}",
            id.to_hex()
        ))
    };
    let cache_of = |headers: &reqwest::header::HeaderMap| {
        headers
            .get("x-cache")
            .and_then(|v| v.to_str().ok())
            .unwrap_or_default()
            .to_string()
    };
    // Many signatures for one track: one miss, then hits.
    let signatures = 50u64;
    let mut hits = 0;
    for n in 0..signatures {
        let expires = now + 600 + n;
        let (status, headers, body) =
            fetch_with(&link(expires, "k1", &key.sign(&id, expires)), &[]).await;
        assert_eq!(
            (status, body.as_ref()),
            (StatusCode::OK, &b"signed bytes"[..])
        );
        hits += u64::from(cache_of(&headers) == "HIT");
    }
    eprintln!("{signatures} signatures for one track through varnish: {hits} hits");
    assert_eq!(hits, signatures - 1, "one copy for every signature");
    // A signature asked again is authorized from varnish's own copy of musicd's 204.
    let authorizations = "musicd_requests_total{route=\"track\",status=\"204\"}";
    let asked = metric(&metrics(&server).await, authorizations).unwrap_or(0.0);
    assert_eq!(asked, signatures as f64, "one authorization per signature");
    let again = link(now + 600, "k1", &key.sign(&id, now + 600));
    for _ in 0..3 {
        assert_eq!(fetch_with(&again, &[]).await.0, StatusCode::OK);
    }
    assert_eq!(
        metric(&metrics(&server).await, authorizations),
        Some(asked),
        "a repeated signature costs musicd nothing"
    );
    // An authorization is kept no longer than its link lives: one that expires in two
    // seconds plays now and is refused once that time has passed, cached or not.
    let soon = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .expect("clock")
        .as_secs()
        + 2;
    let short = link(soon, "k1", &key.sign(&id, soon));
    assert_eq!(fetch_with(&short, &[]).await.0, StatusCode::OK);
    while std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .expect("clock")
        .as_secs()
        <= soon
    {
        assert_eq!(
            fetch_with(&short, &[]).await.0,
            StatusCode::OK,
            "before it expired"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert_eq!(
        fetch_with(&short, &[]).await.0,
        StatusCode::FORBIDDEN,
        "expired"
    );
    // The track is cached; none of these may be answered from it.
    let expired = now - 10;
    let refused = [
        link(expired, "k1", &key.sign(&id, expired)),
        link(
            now + 600,
            "k1",
            "AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA",
        ),
        link(now + 600, "k2", &key.sign(&id, now + 600)),
        varnish.url(&format!("/musicdb/{}/s.mp3", id.to_hex())),
    ];
    for url in &refused {
        let (status, headers, _) = fetch_with(url, &[]).await;
        assert_eq!(status, StatusCode::FORBIDDEN, "{url}");
        assert_ne!(cache_of(&headers), "HIT", "{url}");
    }
    // The same track asked in absolute form (musicd routes it by its path) is authorized
    // too, not answered from the cache.
    let addr: std::net::SocketAddr = format!("127.0.0.1:{}", varnish.port).parse().expect("addr");
    let track = id.to_hex();
    let answers = tokio::task::spawn_blocking(move || {
        ["https", "http"].map(|scheme| {
            let head = format!(
                "GET {scheme}://cdn.invalid/musicdb/{track}/s.mp3 HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n"
            );
            crate::harness::raw::exchange(addr, head.as_bytes())[0].status
        })
    })
    .await
    .expect("raw client");
    assert_eq!(answers, [403, 403], "absolute-form targets skip no check");
    server.shutdown().await;
}
