//! The HTTP contract (docs/http.md), row by row, over real TCP against real Redis and
//! MongoDB.

use std::time::{Duration, SystemTime};

use crate::harness::{TestEnv, client, fetch_with, http_get, pattern};
use mongodb::bson::oid::ObjectId;
use reqwest::StatusCode;
use reqwest::header::{self, HeaderMap};

fn h<'a>(headers: &'a HeaderMap, name: &str) -> &'a str {
    headers
        .get(name)
        .and_then(|v| v.to_str().ok())
        .unwrap_or_else(|| panic!("missing header {name}"))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_track_is_served_whole_with_its_validators_and_cached() {
    let bytes = pattern(300_000, 1);
    let (env, server, id, path) = TestEnv::serving("album/One Song.mp3", &bytes).await;

    let response = http_get(server.track_url(&id)).await;
    assert_eq!(response.status(), StatusCode::OK);
    let headers = response.headers().clone();
    assert_eq!(h(&headers, "content-type"), "audio/mpeg");
    assert_eq!(h(&headers, "content-length"), "300000");
    assert_eq!(h(&headers, "accept-ranges"), "bytes");
    assert_eq!(h(&headers, "cache-control"), "public, max-age=86400");
    assert_eq!(
        h(&headers, "content-disposition"),
        "inline; filename=\"One Song.mp3\""
    );
    assert!(h(&headers, "etag").starts_with('"'));
    let modified = std::fs::metadata(&path)
        .expect("stat")
        .modified()
        .expect("mtime");
    let last_modified = httpdate::parse_http_date(h(&headers, "last-modified")).expect("date");
    assert!(modified.duration_since(last_modified).expect("not later") < Duration::from_secs(1));
    assert!(!h(&headers, "x-request-id").is_empty());
    assert_eq!(
        response.bytes().await.expect("body").as_ref(),
        bytes.as_slice()
    );

    // The lookup went through to MongoDB and was written back to Redis.
    let cached = env.cached(&id).await.expect("cache entry written");
    assert_eq!(cached, path.display().to_string().into_bytes());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_route_form_serves_the_same_track() {
    let env = TestEnv::new().await;
    let bytes = pattern(1000, 2);
    let (id, _) = env.track("a.mp3", &bytes).await;
    let server = env.musicd().await;
    let hex = id.to_hex();
    for path in [
        format!("/musicdb/{hex}/whatever-name.mp3"),
        format!("/musicdb/{hex}"),
        format!("/stream/musicdb/{hex}/x.mp3"),
        format!("/stream/musicdb/{hex}"),
    ] {
        let response = http_get(server.url(&path)).await;
        assert_eq!(response.status(), StatusCode::OK, "{path}");
        assert_eq!(
            response.bytes().await.expect("body").as_ref(),
            bytes.as_slice(),
            "{path}"
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn head_answers_the_headers_of_get_without_a_body() {
    let env = TestEnv::new().await;
    let (id, _) = env.track("a.flac", &pattern(5000, 3)).await;
    let server = env.musicd().await;
    let get = http_get(server.track_url(&id)).await;
    let head = client()
        .head(server.track_url(&id))
        .send()
        .await
        .expect("HEAD");
    assert_eq!(head.status(), StatusCode::OK);
    for name in [
        "content-type",
        "content-length",
        "etag",
        "last-modified",
        "accept-ranges",
    ] {
        assert_eq!(h(head.headers(), name), h(get.headers(), name), "{name}");
    }
    assert_eq!(h(head.headers(), "content-type"), "audio/flac");
    assert!(head.bytes().await.expect("body").is_empty());

    let ranged = client()
        .head(server.track_url(&id))
        .header(header::RANGE, "bytes=10-19")
        .send()
        .await
        .expect("HEAD range");
    assert_eq!(ranged.status(), StatusCode::PARTIAL_CONTENT);
    assert_eq!(h(ranged.headers(), "content-length"), "10");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn single_ranges_answer_206_with_the_exact_bytes() {
    let env = TestEnv::new().await;
    let bytes = pattern(1_000_000, 4);
    let (id, _) = env.track("big.mp3", &bytes).await;
    let server = env.musicd().await;
    let cases: [(&str, usize, usize); 4] = [
        ("bytes=0-99", 0, 100),
        ("bytes=999000-", 999_000, 1_000_000),
        ("bytes=-500", 999_500, 1_000_000),
        ("bytes=100000-700000", 100_000, 700_001),
    ];
    for (range, start, end) in cases {
        let (status, headers, body) = fetch_with(&server.track_url(&id), &[("range", range)]).await;
        assert_eq!(status, StatusCode::PARTIAL_CONTENT, "{range}");
        assert_eq!(
            h(&headers, "content-range"),
            format!("bytes {start}-{}/1000000", end - 1),
            "{range}"
        );
        assert_eq!(h(&headers, "content-length"), (end - start).to_string());
        assert_eq!(body.as_ref(), &bytes[start..end], "{range}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn several_ranges_answer_multipart_byteranges() {
    let env = TestEnv::new().await;
    let bytes = pattern(10_000, 5);
    let (id, _) = env.track("m.ogg", &bytes).await;
    let server = env.musicd().await;
    let (status, headers, body) = fetch_with(
        &server.track_url(&id),
        &[("range", "bytes=5000-5099, 0-9, 20-29, 25-39")],
    )
    .await;
    assert_eq!(status, StatusCode::PARTIAL_CONTENT);
    let content_type = h(&headers, "content-type").to_string();
    let boundary = content_type
        .strip_prefix("multipart/byteranges; boundary=")
        .expect("multipart type")
        .to_string();
    let length: usize = h(&headers, "content-length").parse().expect("length");
    assert_eq!(body.len(), length);

    // Parts come sorted, overlapping ones (20-29, 25-39) merged.
    let expected = [(0usize, 10usize), (20, 40), (5000, 5100)];
    let mut rest: &[u8] = &body;
    for (start, end) in expected {
        let head = format!(
            "\r\n--{boundary}\r\nContent-Type: audio/ogg\r\nContent-Range: bytes {start}-{}/10000\r\n\r\n",
            end - 1
        );
        assert!(
            rest.starts_with(head.as_bytes()),
            "part header for {start}-{end}"
        );
        rest = &rest[head.len()..];
        assert_eq!(&rest[..end - start], &bytes[start..end]);
        rest = &rest[end - start..];
    }
    assert_eq!(rest, format!("\r\n--{boundary}--\r\n").as_bytes());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn unsatisfiable_and_abusive_ranges() {
    let env = TestEnv::new().await;
    let bytes = pattern(1000, 6);
    let (id, _) = env.track("u.mp3", &bytes).await;
    let server = env.musicd().await;

    let (status, headers, _) =
        fetch_with(&server.track_url(&id), &[("range", "bytes=1000-")]).await;
    assert_eq!(status, StatusCode::RANGE_NOT_SATISFIABLE);
    assert_eq!(h(&headers, "content-range"), "bytes */1000");

    // More ranges than max_ranges (16) or overlapping ranges summing past the file: 200 whole.
    let many = (0..20)
        .map(|i| format!("{}-{}", i * 10, i * 10 + 1))
        .collect::<Vec<_>>()
        .join(",");
    let overlapping = ["0-999"; 3].join(",");
    for range in [
        format!("bytes={many}"),
        format!("bytes={overlapping}"),
        "bytes=oops".into(),
    ] {
        let (status, _, body) = fetch_with(&server.track_url(&id), &[("range", &range)]).await;
        assert_eq!(status, StatusCode::OK, "{range}");
        assert_eq!(body.as_ref(), bytes.as_slice());
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn conditional_requests_give_304_412_and_if_range_falls_back_to_200() {
    let env = TestEnv::new().await;
    let bytes = pattern(2000, 7);
    let (id, _) = env.track("c.m4a", &bytes).await;
    let server = env.musicd().await;
    let url = server.track_url(&id);
    let first = http_get(&url).await;
    assert_eq!(h(first.headers(), "content-type"), "audio/mp4");
    let etag = h(first.headers(), "etag").to_string();
    let last_modified = h(first.headers(), "last-modified").to_string();
    let long_ago = httpdate::fmt_http_date(SystemTime::UNIX_EPOCH + Duration::from_secs(1_000_000));

    let status = |name: &'static str, value: String, range: Option<&'static str>| {
        let url = url.clone();
        async move {
            let mut request = client().get(&url).header(name, value);
            if let Some(range) = range {
                request = request.header(header::RANGE, range);
            }
            let response = request.send().await.expect("GET");
            let status = response.status();
            let body = response.bytes().await.expect("body");
            (status, body)
        }
    };

    let (s, body) = status("if-none-match", etag.clone(), None).await;
    assert_eq!(s, StatusCode::NOT_MODIFIED);
    assert!(body.is_empty());
    assert_eq!(
        status("if-none-match", "\"other\"".into(), None).await.0,
        StatusCode::OK
    );
    assert_eq!(
        status("if-modified-since", last_modified.clone(), None)
            .await
            .0,
        StatusCode::NOT_MODIFIED
    );
    assert_eq!(
        status("if-modified-since", long_ago.clone(), None).await.0,
        StatusCode::OK
    );
    assert_eq!(
        status("if-match", "\"other\"".into(), None).await.0,
        StatusCode::PRECONDITION_FAILED
    );
    assert_eq!(
        status("if-match", etag.clone(), None).await.0,
        StatusCode::OK
    );
    assert_eq!(
        status("if-unmodified-since", long_ago.clone(), None)
            .await
            .0,
        StatusCode::PRECONDITION_FAILED
    );

    // If-Range: a current validator keeps the range, a stale one gets the whole new file.
    let (s, body) = status("if-range", etag.clone(), Some("bytes=0-9")).await;
    assert_eq!((s, body.len()), (StatusCode::PARTIAL_CONTENT, 10));
    let (s, body) = status("if-range", last_modified.clone(), Some("bytes=0-9")).await;
    assert_eq!((s, body.len()), (StatusCode::PARTIAL_CONTENT, 10));
    let (s, body) = status("if-range", "\"stale\"".into(), Some("bytes=0-9")).await;
    assert_eq!(s, StatusCode::OK);
    assert_eq!(body.as_ref(), bytes.as_slice());
    let (s, _) = status("if-range", long_ago, Some("bytes=0-9")).await;
    assert_eq!(s, StatusCode::OK);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_replaced_file_gets_a_new_etag_and_stale_if_range_gets_the_new_bytes() {
    let env = TestEnv::new().await;
    let (id, path) = env.track("r.mp3", &pattern(4000, 8)).await;
    let server = env.musicd().await;
    let url = server.track_url(&id);
    let old = http_get(&url).await;
    let old_etag = h(old.headers(), "etag").to_string();

    let new_bytes = pattern(4100, 9);
    let tmp = path.with_extension("tmp");
    std::fs::write(&tmp, &new_bytes).expect("write");
    std::fs::rename(&tmp, &path).expect("rename");

    let (status, headers, body) =
        fetch_with(&url, &[("range", "bytes=4000-"), ("if-range", &old_etag)]).await;
    assert_eq!(status, StatusCode::OK);
    assert_ne!(h(&headers, "etag"), old_etag);
    assert_eq!(body.as_ref(), new_bytes.as_slice());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_invalid_id_is_400_and_an_unknown_id_is_404_with_json_and_a_negative_entry() {
    let env = TestEnv::new().await;
    let server = env.musicd().await;

    for bad in [
        "not-an-id",
        "0123456789abcdef0123456",
        "zz23456789abcdef01234567",
    ] {
        let response = http_get(server.url(&format!("/musicdb/{bad}/x.mp3"))).await;
        assert_eq!(response.status(), StatusCode::BAD_REQUEST, "{bad}");
        assert_eq!(h(response.headers(), "content-type"), "application/json");
        let body: serde_json::Value = response.json().await.expect("json");
        assert_eq!(body["id"], bad);
        let error = body["error"].as_str().unwrap_or_default();
        assert!(error.contains("invalid"), "{body}");
    }

    let unknown = ObjectId::new();
    let response = http_get(server.track_url(&unknown)).await;
    assert_eq!(response.status(), StatusCode::NOT_FOUND);
    let body: serde_json::Value = response.json().await.expect("json");
    assert_eq!(body["id"], unknown.to_hex());
    assert_eq!(
        env.cached(&unknown).await,
        Some(Vec::new()),
        "negative entry cached"
    );

    let response = http_get(server.url("/nope")).await;
    assert_eq!(response.status(), StatusCode::NOT_FOUND);
    let response = client()
        .post(server.track_url(&unknown))
        .send()
        .await
        .expect("POST");
    assert_eq!(response.status(), StatusCode::METHOD_NOT_ALLOWED);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_id_inserted_after_its_negative_entry_is_served_once_the_entry_expires() {
    let env = TestEnv::with(
        &crate::harness::shared_redis().redis_url(),
        &crate::harness::shared_mongo().mongo_uri(),
        &["redis.negative_ttl_secs=1"],
    )
    .await;
    let server = env.musicd().await;
    let id = ObjectId::new();
    let response = http_get(server.track_url(&id)).await;
    assert_eq!(response.status(), StatusCode::NOT_FOUND);

    let path = env.write_file("late.mp3", b"late bytes");
    env.tracks
        .insert_one(mongodb::bson::doc! { "_id": id, "path": path.display().to_string() })
        .await
        .expect("insert");
    // Still negative right away: the entry protects MongoDB from repeated bad ids.
    let response = http_get(server.track_url(&id)).await;
    assert_eq!(response.status(), StatusCode::NOT_FOUND);

    tokio::time::sleep(Duration::from_millis(1300)).await;
    let response = http_get(server.track_url(&id)).await;
    assert_eq!(response.status(), StatusCode::OK);
    assert_eq!(
        response.bytes().await.expect("body").as_ref(),
        b"late bytes"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn paths_outside_the_media_roots_are_refused_with_403() {
    let env = TestEnv::new().await;
    let secret = env.dir.path().join("secret.mp3");
    std::fs::write(&secret, b"top secret").expect("write");
    let server = env.musicd().await;

    let dotdot = env
        .insert(&format!("{}/../secret.mp3", env.media.display()))
        .await;
    let link = env.media.join("link.mp3");
    std::os::unix::fs::symlink(&secret, &link).expect("symlink");
    let via_symlink = env.insert(&link.display().to_string()).await;
    let absolute_outside = env.insert(&secret.display().to_string()).await;
    let relative = env.insert("relative/path.mp3").await;

    for id in [dotdot, via_symlink, absolute_outside, relative] {
        let response = http_get(server.track_url(&id)).await;
        assert_eq!(response.status(), StatusCode::FORBIDDEN, "{id}");
        let body = response.text().await.expect("body");
        assert!(!body.contains("top secret"));
        let json: serde_json::Value = serde_json::from_str(&body).expect("json");
        assert_eq!(json["id"], id.to_hex());
        // The client learns nothing about our disk layout.
        assert!(!body.contains(&env.media.display().to_string()));
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_file_deleted_after_it_was_cached_is_404_not_500() {
    let env = TestEnv::new().await;
    let (id, path) = env.track("gone.mp3", b"soon gone").await;
    let dir_id = env.insert(&env.media.display().to_string()).await;
    let server = env.musicd().await;
    assert_eq!(
        http_get(server.track_url(&id)).await.status(),
        StatusCode::OK
    );
    std::fs::remove_file(&path).expect("delete");
    let response = http_get(server.track_url(&id)).await;
    assert_eq!(response.status(), StatusCode::NOT_FOUND);
    let body: serde_json::Value = response.json().await.expect("json");
    assert!(body["error"].as_str().expect("text").contains("missing"));

    let response = http_get(server.track_url(&dir_id)).await;
    assert_eq!(
        response.status(),
        StatusCode::NOT_FOUND,
        "a directory is not a track"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_document_without_a_string_path_is_404() {
    let env = TestEnv::new().await;
    let id = ObjectId::new();
    env.tracks
        .insert_one(mongodb::bson::doc! { "_id": id, "path": 42 })
        .await
        .expect("insert");
    let server = env.musicd().await;
    let response = http_get(server.track_url(&id)).await;
    assert_eq!(response.status(), StatusCode::NOT_FOUND);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn audio_types_by_extension() {
    let env = TestEnv::new().await;
    let server = env.musicd().await;
    for (name, expected) in [
        ("a.mp3", "audio/mpeg"),
        ("a.m4a", "audio/mp4"),
        ("a.aac", "audio/aac"),
        ("a.flac", "audio/flac"),
        ("a.oga", "audio/ogg"),
        ("a.opus", "audio/ogg; codecs=opus"),
        ("a.wav", "audio/wav"),
        ("a.webm", "audio/webm"),
        ("a.bin", "application/octet-stream"),
    ] {
        let (id, _) = env.track(name, b"x").await;
        let response = http_get(server.track_url(&id)).await;
        assert_eq!(h(response.headers(), "content-type"), expected, "{name}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_file_truncated_while_streaming_ends_the_response_and_the_server_lives() {
    let env = TestEnv::new().await;
    let bytes = pattern(16 * 1024 * 1024, 10);
    let (id, path) = env.track("trunc.mp3", &bytes).await;
    let server = env.musicd().await;

    let mut response = http_get(server.track_url(&id)).await;
    assert_eq!(response.status(), StatusCode::OK);
    let first = response
        .chunk()
        .await
        .expect("first chunk")
        .expect("some bytes");
    assert!(!first.is_empty());
    std::fs::OpenOptions::new()
        .write(true)
        .open(&path)
        .and_then(|f| f.set_len(1000))
        .expect("truncate");
    let mut received = first.len();
    let mut failed = false;
    loop {
        match response.chunk().await {
            Ok(Some(chunk)) => received += chunk.len(),
            Ok(None) => break,
            Err(_) => {
                failed = true;
                break;
            }
        }
    }
    // The client must notice: either an error or fewer bytes than Content-Length promised.
    assert!(
        failed || received < bytes.len(),
        "a truncated file looked complete"
    );

    let (other, _) = env.track("after.mp3", b"still here").await;
    let response = http_get(server.track_url(&other)).await;
    assert_eq!(response.status(), StatusCode::OK);
    assert_eq!(
        response.bytes().await.expect("body").as_ref(),
        b"still here"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn offload_modes_answer_with_the_internal_redirect_header() {
    let redis = crate::harness::shared_redis().redis_url();
    let mongo = crate::harness::shared_mongo().mongo_uri();
    let env = TestEnv::with(&redis, &mongo, &["serve_mode=x-accel-redirect"]).await;
    let (id, _) = env.track("Artist/My Song #1.mp3", &pattern(100, 11)).await;
    let server = env.musicd().await;
    let response = http_get(server.track_url(&id)).await;
    assert_eq!(response.status(), StatusCode::OK);
    assert_eq!(
        h(response.headers(), "x-accel-redirect"),
        "/internal/0/Artist/My%20Song%20%231.mp3"
    );
    assert_eq!(h(response.headers(), "content-type"), "audio/mpeg");
    assert!(response.bytes().await.expect("body").is_empty());

    let env = TestEnv::with(&redis, &mongo, &["serve_mode=x-sendfile"]).await;
    let (id, path) = env.track("s.mp3", b"abc").await;
    let server = env.musicd().await;
    let response = http_get(server.track_url(&id)).await;
    assert_eq!(
        h(response.headers(), "x-sendfile"),
        path.display().to_string()
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn healthz_and_readyz_report_json() {
    let env = TestEnv::new().await;
    let server = env.musicd().await;
    let response = http_get(server.url("/healthz")).await;
    assert_eq!(response.status(), StatusCode::OK);
    let body: serde_json::Value = response.json().await.expect("json");
    assert_eq!(body["status"], "ok");
    let response = http_get(server.url("/readyz")).await;
    assert_eq!(response.status(), StatusCode::OK);
    let body: serde_json::Value = response.json().await.expect("json");
    assert_eq!(body["status"], "ready");
    assert_eq!(body["redis"]["ok"], true);
    assert_eq!(body["mongodb"]["ok"], true);
}

/// Many different hot files: after the `stat` that arms each, one drain of inotify per
/// loop turn vouches for all of them (`cache.file_watches`), and a file replaced by rename
/// is still never served stale. With the watcher off, the same requests cost a `stat` each.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn hot_files_are_proven_current_by_one_drain_not_a_stat_each() {
    const FILES: u64 = 40;
    const ROUNDS: u64 = 8;
    for (settings, watched) in [(&[][..], true), (&["cache.file_watches=0"][..], false)] {
        let env = TestEnv::shared_with(settings).await;
        let mut tracks = Vec::new();
        for f in 0..FILES {
            tracks.push(env.track(&format!("hot{f}.mp3"), &pattern(2048, f)).await);
        }
        let server = env.musicd().await;
        let client = crate::harness::client();
        // (stat checks, mount-table changes): another program mounting something (the
        // suite's soaks run beside it) makes every copy be checked with a stat again.
        let stats = || async {
            let text = crate::harness::get_text(&server.url("/metrics")).await;
            let metric = |name: &str| crate::harness::metric(&text, name).expect(name);
            (
                metric("musicd_file_cache_checks_total{by=\"stat\"}"),
                metric("musicd_file_cache_mount_changes_total"),
            )
        };
        let (before, mounts_before) = stats().await;
        let started = std::time::Instant::now();
        for round in 0..ROUNDS {
            for (f, (id, path)) in tracks.iter().enumerate() {
                let f = f as u64;
                let expected = if round >= 4 && f == 0 {
                    pattern(2048, 99)
                } else {
                    pattern(2048, f)
                };
                let body = client
                    .get(server.track_url(id))
                    .send()
                    .await
                    .expect("GET")
                    .bytes()
                    .await
                    .expect("body");
                assert_eq!(body, expected, "round {round}, file {f}");
                if round == 3 && f == 0 {
                    let tmp = path.with_extension("tmp");
                    std::fs::write(&tmp, pattern(2048, 99)).expect("write");
                    std::fs::rename(&tmp, path).expect("rename");
                }
            }
        }
        let (after, mounts_after) = stats().await;
        let made = after - before;
        let mount_changes = mounts_after - mounts_before;
        let requests = (FILES * ROUNDS) as f64;
        if watched {
            // One to arm each file, a few more for the renamed one, and one per file for
            // each second the rounds took (an armed copy is still `stat`ed once a second).
            let seconds = started.elapsed().as_secs_f64().ceil();
            let allowed = FILES as f64 * (1.0 + seconds + mount_changes) + 5.0;
            assert!(
                made <= allowed.min(requests / 2.0 + FILES as f64 * mount_changes),
                "{made} stats for {requests} requests in {seconds} s, {mount_changes} mount changes"
            );
        } else {
            assert!(
                made >= requests - 2.0 * FILES as f64,
                "only {made} stats without watches"
            );
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn metrics_count_requests_cache_outcomes_files_and_bytes() {
    let env = TestEnv::new().await;
    let (id, _) = env.track("m.mp3", &pattern(1000, 12)).await;
    let server = env.musicd().await;
    for _ in 0..3 {
        let response = http_get(server.track_url(&id)).await;
        response.bytes().await.expect("body");
    }
    let unknown = ObjectId::new();
    http_get(server.track_url(&unknown)).await;
    http_get(server.url("/musicdb/bad/x.mp3")).await;
    // Let the connection count the last answer (it counts once the body is written).
    tokio::time::sleep(Duration::from_millis(50)).await;

    let response = http_get(server.url("/metrics")).await;
    assert_eq!(response.status(), StatusCode::OK);
    assert!(h(response.headers(), "content-type").starts_with("text/plain; version=0.0.4"));
    let text = response.text().await.expect("text");
    let value = |series: &str| -> f64 {
        crate::harness::metric(&text, series)
            .unwrap_or_else(|| panic!("{series} missing in\n{text}"))
    };
    assert_eq!(
        value("musicd_requests_total{route=\"track\",status=\"200\"}"),
        3.0
    );
    assert_eq!(
        value("musicd_requests_total{route=\"track\",status=\"404\"}"),
        1.0
    );
    assert_eq!(
        value("musicd_requests_total{route=\"track\",status=\"400\"}"),
        1.0
    );
    assert_eq!(value("musicd_id_cache_total{outcome=\"miss\"}"), 2.0);
    assert_eq!(value("musicd_id_cache_total{outcome=\"local\"}"), 2.0);
    assert_eq!(value("musicd_file_cache_total{result=\"hit\"}"), 2.0);
    assert_eq!(value("musicd_file_cache_total{result=\"miss\"}"), 1.0);
    assert!(value("musicd_sent_bytes_total") >= 3000.0);
    assert_eq!(value("musicd_resolve_seconds_count"), 4.0);
    assert_eq!(
        value("musicd_in_flight_responses"),
        1.0,
        "only the /metrics answer itself"
    );
}

/// A file system mounted over a hot file's directory changes what its path names without
/// any inotify event; the mount table's change tells the watcher, so the next request,
/// sent after the mount returned, gets the file the path names now, not the copy in memory.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_mount_over_a_hot_files_directory_serves_what_the_path_names_now() {
    /// Unmounts what it mounted, however the test ends.
    struct Mounted(std::path::PathBuf);
    impl Drop for Mounted {
        fn drop(&mut self) {
            let _ = std::process::Command::new("umount")
                .arg("-l")
                .arg(&self.0)
                .status();
        }
    }
    let env = TestEnv::shared_with(&[]).await;
    let (before, after) = (pattern(3000, 1), pattern(3000, 2));
    let (id, path) = env.track("mounted-over/a.mp3", &before).await;
    let server = env.musicd().await;
    let client = crate::harness::client();
    // Enough requests for every loop to keep a copy, proven current by inotify's drains.
    for _ in 0..8 {
        let body = client
            .get(server.track_url(&id))
            .send()
            .await
            .expect("get")
            .bytes()
            .await
            .expect("body");
        assert_eq!(&body[..], &before[..]);
    }
    let mount_changes = || async {
        let text = crate::harness::get_text(&server.url("/metrics")).await;
        crate::harness::metric(&text, "musicd_file_cache_mount_changes_total").expect("metric")
    };
    let changes_before = mount_changes().await;
    let directory = path.parent().expect("its directory").to_path_buf();
    let mounted = std::process::Command::new("mount")
        .args(["-t", "tmpfs", "-o", "size=1m", "tmpfs"])
        .arg(&directory)
        .status()
        .expect("run mount");
    assert!(mounted.success(), "mount a tmpfs over {directory:?}");
    let _mounted = Mounted(directory);
    std::fs::write(&path, &after).expect("the file under the mount");
    for _ in 0..4 {
        let body = client
            .get(server.track_url(&id))
            .send()
            .await
            .expect("get")
            .bytes()
            .await
            .expect("body");
        assert_eq!(
            &body[..],
            &after[..],
            "served the copy of the file mounted over"
        );
    }
    assert!(
        mount_changes().await > changes_before,
        "the watcher saw the mount table change"
    );
}
