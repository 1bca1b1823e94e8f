//! Faults under a bounded load with every response checked: Redis restarted, MongoDB
//! stopped, files replaced and truncated while being served.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use crate::harness::load::{Check, hammer_checked};
use crate::harness::{Server, TestEnv, http_get, pattern, shared_mongo, shared_redis};
use mongodb::bson::oid::ObjectId;
use reqwest::StatusCode;

/// Every answer must be 200 with the exact bytes of its track.
/// Four keep-alive clients fetch `tracks` until `total` requests or `stop`, every answer
/// checked against its track's bytes.
fn hammer_exact(
    tracks: Vec<(String, Vec<u8>)>,
    total: u64,
    stop: &Arc<AtomicBool>,
) -> tokio::task::JoinHandle<crate::harness::load::LoadReport> {
    let urls: Vec<String> = tracks.iter().map(|(u, _)| u.clone()).collect();
    tokio::spawn(hammer_checked(
        urls,
        exact(tracks),
        total,
        4,
        Arc::clone(stop),
        true,
    ))
}

fn exact(tracks: Vec<(String, Vec<u8>)>) -> Check {
    let tracks: std::collections::HashMap<String, Vec<u8>> = tracks.into_iter().collect();
    Arc::new(move |url, status, _, body| {
        if status != StatusCode::OK {
            return Err(format!("status {status}"));
        }
        if tracks.get(url).map(Vec::as_slice) != Some(body) {
            return Err(format!("wrong body ({} bytes)", body.len()));
        }
        Ok(())
    })
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn redis_restarted_during_load_fails_no_request() {
    let mut redis = Server::redis();
    // No in-process id cache: every request goes through Redis, so the restart is felt.
    let env = TestEnv::with(
        &redis.redis_url(),
        &shared_mongo().mongo_uri(),
        &["cache.id_ttl_ms=0"],
    )
    .await;
    let server = env.musicd().await;
    let mut tracks = Vec::new();
    for i in 0..20 {
        let bytes = pattern(5000 + i * 100, i as u64);
        let (id, _) = env.track(&format!("t{i}.mp3"), &bytes).await;
        tracks.push((server.track_url(&id), bytes));
    }
    let stop = Arc::new(AtomicBool::new(false));
    let load = hammer_exact(tracks, 6000, &stop);
    tokio::time::sleep(Duration::from_millis(300)).await;
    tokio::task::block_in_place(|| redis.kill());
    tokio::time::sleep(Duration::from_millis(500)).await;
    tokio::task::block_in_place(|| redis.restart());
    let report = load.await.expect("load");
    eprintln!("Redis restarted under load: {report:?}");
    assert_eq!(
        (report.failed, report.refused, report.retried),
        (0, 0, 0),
        "{:?}",
        report.samples
    );
    assert_eq!(report.ok, 6000);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn mongodb_stopped_during_load_keeps_cached_ids_and_503s_the_rest() {
    let mut mongo = Server::mongo();
    let env = TestEnv::with(
        &shared_redis().redis_url(),
        &mongo.mongo_uri(),
        &["cache.id_ttl_ms=0"],
    )
    .await;
    let server = env.musicd().await;
    let mut cached = Vec::new();
    for i in 0..10 {
        let bytes = pattern(3000 + i * 10, 100 + i as u64);
        let (id, _) = env.track(&format!("c{i}.mp3"), &bytes).await;
        let url = server.track_url(&id);
        assert_eq!(http_get(&url).await.status(), StatusCode::OK);
        cached.push((url, bytes));
    }
    let mut uncached = Vec::new();
    for i in 0..30 {
        let (id, _) = env.track(&format!("u{i}.mp3"), b"uncached").await;
        uncached.push(server.track_url(&id));
    }
    env.make_durable().await;

    let stop = Arc::new(AtomicBool::new(false));
    let load = hammer_exact(cached, 1_000_000, &stop);
    tokio::time::sleep(Duration::from_millis(200)).await;
    tokio::task::block_in_place(|| mongo.kill());
    let mut during = 0;
    for url in &uncached[..10] {
        let response = http_get(url).await;
        assert_eq!(response.status(), StatusCode::SERVICE_UNAVAILABLE);
        assert_eq!(
            response
                .headers()
                .get("retry-after")
                .and_then(|v| v.to_str().ok()),
            Some("5")
        );
        during += 1;
    }
    tokio::task::block_in_place(|| mongo.restart());
    // Back without restarting musicd.
    let mut recovered = false;
    for _ in 0..100 {
        let response = http_get(&uncached[20]).await;
        match response.status() {
            StatusCode::OK => {
                recovered = true;
                break;
            }
            StatusCode::SERVICE_UNAVAILABLE => tokio::time::sleep(Duration::from_millis(100)).await,
            other => panic!("unexpected {other}"),
        }
    }
    assert!(recovered, "MongoDB came back but musicd did not");
    stop.store(true, Ordering::Relaxed);
    let report = load.await.expect("load");
    eprintln!(
        "MongoDB stopped under load: cached ids {report:?}; uncached 503 during the outage: {during}"
    );
    assert_eq!(
        (report.failed, report.refused, report.retried),
        (0, 0, 0),
        "{:?}",
        report.samples
    );
    assert!(report.ok > 100);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn files_replaced_and_truncated_during_load_never_give_a_mixed_body() {
    // (settings, whether files are also truncated in place). sendfile sends the page cache
    // as it is when the bytes leave, so only replacement by rename is safe with it; the
    // copying mode (zero_copy = false) must survive in-place truncation too.
    let cases: [(&[&str], bool); 5] = [
        (&["cache.file_max_bytes=8388608"], true),
        (&["zero_copy=false"], true),
        (
            &[
                "cache.file_total_bytes=0",
                "cache.open_files=0",
                "zero_copy=false",
            ],
            true,
        ),
        (&["zero_copy=true"], false),
        (
            &[
                "cache.file_total_bytes=0",
                "cache.open_files=0",
                "zero_copy=true",
            ],
            false,
        ),
    ];
    for (settings, truncate) in cases {
        let env = TestEnv::with(
            &shared_redis().redis_url(),
            &shared_mongo().mongo_uri(),
            settings,
        )
        .await;
        let v1 = pattern(1024 * 1024, 7);
        let v2 = pattern(1024 * 1024 + 4096, 8);
        let (id, path) = env.track("swap.mp3", &v1).await;
        let server = env.musicd().await;
        let url = server.track_url(&id);
        // A 200 must be exactly one version of the file as it was at some moment.
        let versions: Vec<Vec<u8>> = vec![
            v1.clone(),
            v2.clone(),
            v1[..v1.len() / 2].to_vec(),
            v2[..v2.len() / 2].to_vec(),
        ];
        let check: Check = Arc::new(move |_, status, headers, body| {
            if status != StatusCode::OK {
                return Err(format!("status {status}"));
            }
            let length: usize = headers
                .get("content-length")
                .and_then(|v| v.to_str().ok()?.parse().ok())
                .ok_or("no content-length")?;
            if length != body.len() || !versions.iter().any(|v| v.as_slice() == body) {
                return Err(format!("a mixed or corrupted body of {} bytes", body.len()));
            }
            Ok(())
        });
        let stop = Arc::new(AtomicBool::new(false));
        let load = tokio::spawn(hammer_checked(
            vec![url.clone()],
            check,
            1_000_000,
            4,
            stop.clone(),
            true,
        ));
        let mutator = tokio::task::spawn_blocking(move || {
            for round in 0..40 {
                let next = if round % 2 == 0 { &v2 } else { &v1 };
                let tmp = path.with_extension("tmp");
                std::fs::write(&tmp, next).expect("write");
                std::fs::rename(&tmp, &path).expect("rename");
                std::thread::sleep(Duration::from_millis(20));
                if truncate && round % 4 == 1 {
                    // Cut in place to half, as a crashed copy would leave it.
                    std::fs::OpenOptions::new()
                        .write(true)
                        .open(&path)
                        .and_then(|f| f.set_len(next.len() as u64 / 2))
                        .expect("truncate");
                    std::thread::sleep(Duration::from_millis(20));
                }
            }
        });
        mutator.await.expect("mutator");
        stop.store(true, Ordering::Relaxed);
        let report = load.await.expect("load");
        eprintln!("{settings:?} truncate={truncate}: files swapped under load: {report:?}");
        // Never a wrong body. A transfer cut because its file was truncated under it is
        // the right answer to that (the client sees a failed download), and under load
        // the retry can be cut too; without truncation nothing may fail at all.
        assert_eq!(report.wrong, 0, "{:?}", report.samples);
        if !truncate {
            assert_eq!(report.failed, 0, "{:?}", report.samples);
        }
        assert!(report.failed * 20 <= report.sent, "{report:?}");
        assert!(report.ok > 50, "{report:?}");
        // The server is still there.
        let unknown = http_get(server.track_url(&ObjectId::new())).await;
        assert_eq!(unknown.status(), StatusCode::NOT_FOUND);
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_request_sent_after_a_rename_never_gets_the_old_file_under_load() {
    // The file cache checks a hot file once for every request read before the check
    // began (a `stat`, or an inotify drain for an armed copy), not once per request. The
    // promise stays "never stale": a request sent after a rename completed gets that
    // version or a later one. Small files (memory) and large ones (open descriptors, as
    // with the memory budget at 0), with eight keep-alive clients on the one file, so that
    // the server's event loops have several of its requests ready in each turn.
    const VERSIONS: u64 = 150;
    for settings in [&[][..], &["cache.file_total_bytes=0"][..]] {
        let env = TestEnv::shared_with(settings).await;
        let version = move |g: u64| {
            let mut bytes = pattern(4096, g);
            bytes[..8].copy_from_slice(&g.to_le_bytes());
            bytes
        };
        let (id, path) = env.track("renamed.mp3", &version(0)).await;
        let server = env.musicd().await;
        let url = server.track_url(&id);
        let published = Arc::new(std::sync::atomic::AtomicU64::new(0));
        // Answers checked by all clients: the writer paces its renames by them, not by a
        // clock, so a slow machine still sees requests between every two versions.
        let answered = Arc::new(std::sync::atomic::AtomicU64::new(0));
        let done = Arc::new(AtomicBool::new(false));
        let clients: Vec<_> = (0..8)
            .map(|_| {
                let (url, published, answered, done) = (
                    url.clone(),
                    Arc::clone(&published),
                    Arc::clone(&answered),
                    Arc::clone(&done),
                );
                tokio::spawn(async move {
                    let client = crate::harness::client();
                    let (mut checked, mut newer) = (0u64, 0u64);
                    while !done.load(Ordering::SeqCst) {
                        let floor = published.load(Ordering::SeqCst);
                        let response = client.get(&url).send().await.expect("GET");
                        assert_eq!(response.status(), StatusCode::OK);
                        let body = response.bytes().await.expect("body");
                        let got = u64::from_le_bytes(body[..8].try_into().expect("8 bytes"));
                        assert!(
                            got >= floor,
                            "version {got} served to a request sent after version {floor} was in place"
                        );
                        assert_eq!(body, version(got), "the body of version {got}");
                        checked += 1;
                        answered.fetch_add(1, Ordering::SeqCst);
                        newer += u64::from(got > floor);
                    }
                    (checked, newer)
                })
            })
            .collect();
        let writer = {
            let (path, published, answered) =
                (path.clone(), Arc::clone(&published), Arc::clone(&answered));
            tokio::task::spawn_blocking(move || {
                for g in 1..=VERSIONS {
                    let tmp = path.with_extension("tmp");
                    std::fs::write(&tmp, version(g)).expect("write");
                    std::fs::rename(&tmp, &path).expect("rename");
                    published.store(g, Ordering::SeqCst);
                    // The next rename once three more answers were checked (a client that
                    // failed stops answering: its panic is reported when it is awaited).
                    let (wanted, deadline) = (
                        answered.load(Ordering::SeqCst) + 3,
                        std::time::Instant::now() + Duration::from_secs(30),
                    );
                    while answered.load(Ordering::SeqCst) < wanted
                        && std::time::Instant::now() < deadline
                    {
                        std::thread::sleep(Duration::from_millis(1));
                    }
                }
            })
        };
        writer.await.expect("writer");
        done.store(true, Ordering::SeqCst);
        let mut total = 0;
        for client in clients {
            let (checked, _) = client.await.expect("client");
            total += checked;
        }
        eprintln!("{settings:?}: {total} answers checked against the version in place");
        assert!(
            total > VERSIONS * 2,
            "too few requests to prove anything: {total}"
        );
    }
}
