//! The resolver under faults: Redis or MongoDB killed mid-test, and concurrent misses.

use std::time::Duration;

use crate::harness::{Server, TestEnv, client, fetch, shared_mongo, shared_redis};
use mongodb::bson::doc;
use mongodb::bson::oid::ObjectId;
use reqwest::StatusCode;

async fn readyz(server: &crate::harness::Musicd) -> (StatusCode, serde_json::Value) {
    crate::harness::get_json(&server.url("/readyz")).await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn redis_killed_mid_test_degrades_to_mongodb_and_recovers() {
    let mut redis = Server::redis();
    let env = TestEnv::with(&redis.redis_url(), &shared_mongo().mongo_uri(), &[]).await;
    let (cached, _) = env.track("cached.mp3", b"cached bytes").await;
    let (uncached, _) = env.track("uncached.mp3", b"uncached bytes").await;
    let server = env.musicd().await;
    assert_eq!(fetch(&server.track_url(&cached)).await.0, StatusCode::OK);
    assert!(env.cached(&cached).await.is_some());

    redis.kill();
    for _ in 0..20 {
        let (status, _, body) = fetch(&server.track_url(&cached)).await;
        assert_eq!(
            (status, body.as_ref()),
            (StatusCode::OK, b"cached bytes".as_slice())
        );
    }
    let (status, _, body) = fetch(&server.track_url(&uncached)).await;
    assert_eq!(
        (status, body.as_ref()),
        (StatusCode::OK, b"uncached bytes".as_slice())
    );
    let (status, unknown_body) = {
        let (s, _, b) = fetch(&server.track_url(&ObjectId::new())).await;
        (s, b)
    };
    assert_eq!(
        status,
        StatusCode::NOT_FOUND,
        "{}",
        String::from_utf8_lossy(&unknown_body)
    );
    let (status, body) = readyz(&server).await;
    assert_eq!(status, StatusCode::OK);
    assert_eq!(body["status"], "degraded");
    assert_eq!(body["redis"]["ok"], false);

    // Back: the cache is used again without restarting musicd (the restarted Redis is empty,
    // so the next request misses and writes the entry back).
    redis.restart();
    let mut rewritten = false;
    for _ in 0..50 {
        assert_eq!(fetch(&server.track_url(&uncached)).await.0, StatusCode::OK);
        if env.cached(&uncached).await.is_some() {
            rewritten = true;
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert!(rewritten, "musicd never wrote to the restarted Redis");
    assert_eq!(readyz(&server).await.1["status"], "ready");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn mongodb_killed_mid_test_serves_cached_ids_and_503s_the_rest() {
    let mut mongo = Server::mongo();
    let env = TestEnv::with(&shared_redis().redis_url(), &mongo.mongo_uri(), &[]).await;
    let (cached, _) = env.track("cached.mp3", b"cached bytes").await;
    let (uncached, _) = env.track("uncached.mp3", b"uncached bytes").await;
    let server = env.musicd().await;
    assert_eq!(fetch(&server.track_url(&cached)).await.0, StatusCode::OK);

    // The documents were written a moment ago: make them durable, as catalogue entries long
    // written would be, so that the restart below brings them back.
    env.make_durable().await;
    mongo.kill();
    let (status, _, body) = fetch(&server.track_url(&cached)).await;
    assert_eq!(
        (status, body.as_ref()),
        (StatusCode::OK, b"cached bytes".as_slice())
    );
    let (status, headers, body) = fetch(&server.track_url(&uncached)).await;
    assert_eq!(status, StatusCode::SERVICE_UNAVAILABLE);
    assert_eq!(
        headers.get("retry-after").and_then(|v| v.to_str().ok()),
        Some("5")
    );
    let json: serde_json::Value = serde_json::from_slice(&body).expect("json body");
    assert_eq!(json["id"], uncached.to_hex());
    assert!(
        env.cached(&uncached).await.is_none(),
        "a failure must not be cached"
    );
    let (status, body) = readyz(&server).await;
    assert_eq!(status, StatusCode::SERVICE_UNAVAILABLE);
    assert_eq!(body["mongodb"]["ok"], false);

    mongo.restart();
    let mut served = false;
    for _ in 0..100 {
        let (status, _, body) = fetch(&server.track_url(&uncached)).await;
        if status == StatusCode::OK {
            assert_eq!(body.as_ref(), b"uncached bytes");
            served = true;
            break;
        }
        assert_eq!(status, StatusCode::SERVICE_UNAVAILABLE);
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert!(served, "musicd did not reconnect to the restarted MongoDB");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn concurrent_misses_for_one_id_cost_one_mongodb_query() {
    let env = TestEnv::new().await;
    let (id, _) = env.track("hot.mp3", b"hot").await;
    let unknown = ObjectId::new();
    let database = env.tracks.client().database(&env.config.mongodb.database);
    database
        .run_command(doc! { "profile": 2 })
        .await
        .expect("profiler on");
    let server = env.musicd().await;
    let http = client();
    // Open the connections first so that the burst below really arrives at once.
    let warm: Vec<_> = (0..50)
        .map(|_| http.get(server.url("/healthz")).send())
        .collect();
    for r in futures_util::future::join_all(warm).await {
        r.expect("warm-up");
    }

    for target in [id, unknown] {
        let burst: Vec<_> = (0..50)
            .map(|_| http.get(server.track_url(&target)).send())
            .collect();
        for response in futures_util::future::join_all(burst).await {
            let response = response.expect("burst request");
            assert!(matches!(
                response.status(),
                StatusCode::OK | StatusCode::NOT_FOUND
            ));
        }
        let namespace = format!(
            "{}.{}",
            env.config.mongodb.database, env.config.mongodb.collection
        );
        let queries = database
            .collection::<mongodb::bson::Document>("system.profile")
            .count_documents(doc! { "ns": namespace, "op": "query", "command.filter._id": target })
            .await
            .expect("count profile");
        assert_eq!(
            queries, 1,
            "50 concurrent misses for {target} should share one query"
        );
    }
    database
        .run_command(doc! { "profile": 0 })
        .await
        .expect("profiler off");
}

/// A MongoDB that accepts and never answers (SIGSTOP): the query on a connection already
/// open is bounded by `mongodb.timeout_ms` too. Ids not in Redis get 503 + `Retry-After`
/// within it, cached ids keep playing, `/readyz` says MongoDB is the one that hangs, and
/// everything recovers on SIGCONT.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_hung_mongodb_costs_uncached_ids_a_503_within_the_timeout() {
    use crate::harness::supervised::{freeze, signal};
    let mongo = Server::mongo();
    let env = TestEnv::with(&shared_redis().redis_url(), &mongo.mongo_uri(), &[]).await;
    let (cached, _) = env.track("cached.mp3", b"cached bytes").await;
    let (uncached, _) = env.track("uncached.mp3", b"uncached bytes").await;
    let server = env.musicd().await;
    // Asked once: in Redis, and a pooled connection to MongoDB is open.
    assert_eq!(fetch(&server.track_url(&cached)).await.0, StatusCode::OK);
    let pid = mongo.pid().expect("mongod runs");
    freeze(pid).await;
    let asked = std::time::Instant::now();
    let (status, headers, _) = fetch(&server.track_url(&uncached)).await;
    let waited = asked.elapsed();
    assert_eq!(status, StatusCode::SERVICE_UNAVAILABLE);
    assert!(headers.get("retry-after").is_some());
    // timeout_ms = 1000 in the test config; the rest is slack for a loaded machine.
    assert!(waited <= Duration::from_millis(2500), "waited {waited:?}");
    // A burst of distinct uncached ids during the hang: every one gets its 503, and no more
    // than 8 wait on the hung server at any moment (the rest are answered at once).
    let burst: Vec<_> = (0..100)
        .map(|_| {
            let url = server.track_url(&ObjectId::new());
            tokio::spawn(async move { fetch(&url).await.0 })
        })
        .collect();
    let mut most_waiting = 0.0f64;
    while !burst.iter().all(tokio::task::JoinHandle::is_finished) {
        let text = crate::harness::get_text(&server.url("/metrics")).await;
        let waiting = crate::harness::metric(&text, "musicd_mongodb_waiting").expect("gauge");
        most_waiting = most_waiting.max(waiting);
    }
    for request in burst {
        assert_eq!(
            request.await.expect("joined"),
            StatusCode::SERVICE_UNAVAILABLE
        );
    }
    assert!(
        most_waiting <= 8.0,
        "{most_waiting} lookups waited on a hung MongoDB"
    );
    for _ in 0..5 {
        let (status, _, body) = fetch(&server.track_url(&cached)).await;
        assert_eq!(
            (status, body.as_ref()),
            (StatusCode::OK, b"cached bytes".as_slice())
        );
    }
    let asked = std::time::Instant::now();
    let (status, body) = readyz(&server).await;
    assert_eq!(status, StatusCode::SERVICE_UNAVAILABLE, "{body}");
    assert_eq!(body["mongodb"]["state"], "hung", "{body}");
    assert_eq!(body["redis"]["state"], "up", "{body}");
    assert!(asked.elapsed() <= Duration::from_millis(2500));
    signal(pid, libc::SIGCONT);
    let deadline = std::time::Instant::now() + Duration::from_secs(20);
    loop {
        let (status, _, body) = fetch(&server.track_url(&uncached)).await;
        if status == StatusCode::OK {
            assert_eq!(body.as_ref(), b"uncached bytes");
            break;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "never recovered: {status}"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// A Redis that accepts and never answers (SIGSTOP). Every id is served, from MongoDB,
/// and the hang is paid once per reconnect attempt, not once per request: after the first
/// timeout the link fails fast, so requests do not pile up behind the hung server.
/// `/readyz` and `musicctl health` name Redis as the backend that hangs, and the cache is
/// used again on SIGCONT.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_hung_redis_is_waited_for_once_not_per_request() {
    use crate::harness::supervised::{freeze, signal};
    let redis = Server::redis();
    let env = TestEnv::with(&redis.redis_url(), &shared_mongo().mongo_uri(), &[]).await;
    let mut ids = Vec::new();
    for i in 0..100 {
        ids.push(
            env.track(&format!("t{i}.mp3"), format!("track {i}").as_bytes())
                .await
                .0,
        );
    }
    let server = env.musicd().await;
    assert_eq!(fetch(&server.track_url(&ids[0])).await.0, StatusCode::OK);
    let pid = redis.pid().expect("redis runs");
    freeze(pid).await;
    // Every id (none of them but the first is in this process's memory) is served.
    let asked = std::time::Instant::now();
    for (i, id) in ids.iter().enumerate() {
        let (status, _, body) = fetch(&server.track_url(id)).await;
        assert_eq!(status, StatusCode::OK, "id {i}");
        assert_eq!(body.as_ref(), format!("track {i}").as_bytes());
    }
    let took = asked.elapsed();
    // redis.timeout_ms is 250 ms by default; reconnects are tried every 500 ms. Waiting the
    // timeout on each of 100 requests would take 25 s; failing fast takes well under 10.
    assert!(
        took < Duration::from_secs(10),
        "100 requests took {took:?}: they waited on the hung Redis one by one"
    );
    let (status, body) = readyz(&server).await;
    assert_eq!(status, StatusCode::OK, "{body}");
    assert_eq!(body["status"], "degraded", "{body}");
    assert_eq!(body["redis"]["state"], "hung", "{body}");
    assert_eq!(body["mongodb"]["state"], "up", "{body}");
    let health = env
        .command("musicctl")
        .arg("health")
        .output()
        .expect("musicctl health");
    let report = String::from_utf8_lossy(&health.stdout);
    let redis_row = report
        .lines()
        .find(|l| l.starts_with("redis"))
        .unwrap_or_else(|| panic!("no redis row:\n{report}"));
    assert!(
        redis_row.contains("degraded") && redis_row.contains("hung"),
        "{report}"
    );
    signal(pid, libc::SIGCONT);
    let deadline = std::time::Instant::now() + Duration::from_secs(20);
    loop {
        let (_, body) = readyz(&server).await;
        if body["redis"]["state"] == "up" {
            break;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "Redis never used again: {body}"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// A Redis that never answered since the start (a wrong address, or not up yet) keeps a new
/// musicd out of the pool: `/readyz` is 503 naming Redis. Once Redis has answered, losing it
/// only degrades: the instance keeps serving from MongoDB and stays ready.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_redis_never_reached_is_not_ready_and_one_lost_later_is_degraded() {
    let mut redis = Server::redis();
    redis.kill();
    let env = TestEnv::with(&redis.redis_url(), &shared_mongo().mongo_uri(), &[]).await;
    let server = env.musicd().await;
    let (status, body) = readyz(&server).await;
    assert_eq!(status, StatusCode::SERVICE_UNAVAILABLE, "{body}");
    assert_eq!(body["status"], "unavailable", "{body}");
    assert!(
        body["reason"].as_str().is_some_and(|r| r.contains("redis")),
        "{body}"
    );
    assert_eq!(body["redis"]["ok"], false, "{body}");

    redis.restart();
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(20);
    loop {
        let (status, body) = readyz(&server).await;
        if status == StatusCode::OK {
            assert_eq!(body["status"], "ready", "{body}");
            break;
        }
        assert!(std::time::Instant::now() < deadline, "never ready: {body}");
        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
    }

    redis.kill();
    let (status, body) = readyz(&server).await;
    assert_eq!(status, StatusCode::OK, "{body}");
    assert_eq!(body["status"], "degraded", "{body}");
    server.shutdown().await;
}
