//! Real nginx in front of musicd with `deploy/nginx.conf`: x-accel-redirect offload (nginx
//! sends the bytes) and plain proxying.

use crate::harness::nginx::Nginx;
use crate::harness::{TestEnv, client, fetch_with, http_get, pattern, shared_mongo, shared_redis};
use mongodb::bson::oid::ObjectId;
use reqwest::StatusCode;

fn header(response: &reqwest::Response, name: &str) -> String {
    response
        .headers()
        .get(name)
        .and_then(|v| v.to_str().ok())
        .unwrap_or_default()
        .to_string()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn x_accel_redirect_through_nginx_serves_200_206_and_passes_errors() {
    let env = TestEnv::with(
        &shared_redis().redis_url(),
        &shared_mongo().mongo_uri(),
        &["serve_mode=x-accel-redirect"],
    )
    .await;
    let bytes = pattern(200_000, 1);
    let (id, path) = env.track("Artist/My Song #1.mp3", &bytes).await;
    let server = env.musicd().await;
    let nginx = Nginx::start_deploy_config(&server.addr.to_string(), &env.media);
    let url = nginx.url(&format!("/musicdb/{}/song.mp3", id.to_hex()));

    let response = http_get(&url).await;
    assert_eq!(response.status(), StatusCode::OK);
    assert_eq!(
        header(&response, "content-type"),
        "audio/mpeg",
        "musicd's type is kept"
    );
    assert_eq!(
        header(&response, "content-disposition"),
        "inline; filename=\"My Song #1.mp3\""
    );
    assert_eq!(header(&response, "cache-control"), "public, max-age=86400");
    assert!(header(&response, "server").starts_with("nginx"));
    assert_eq!(
        response.bytes().await.expect("body").as_ref(),
        bytes.as_slice()
    );

    let (status, headers, body) = fetch_with(&url, &[("range", "bytes=1000-1999")]).await;
    assert_eq!(status, StatusCode::PARTIAL_CONTENT);
    assert_eq!(headers["content-range"], "bytes 1000-1999/200000");
    assert_eq!(body.as_ref(), &bytes[1000..2000]);

    let stream_url = nginx.url(&format!("/stream/musicdb/{}", id.to_hex()));
    assert_eq!(http_get(&stream_url).await.status(), StatusCode::OK);

    let unknown =
        http_get(nginx.url(&format!("/musicdb/{}/x.mp3", ObjectId::new().to_hex()))).await;
    assert_eq!(unknown.status(), StatusCode::NOT_FOUND);
    let body: serde_json::Value = unknown.json().await.expect("musicd's JSON body");
    assert_eq!(body["error"], "unknown track id");
    let invalid = http_get(nginx.url("/musicdb/nope/x.mp3")).await;
    assert_eq!(invalid.status(), StatusCode::BAD_REQUEST);

    // musicd caches the offload answer after the first request, but never past its file.
    // (Asked directly: nginx's own open_file_cache may keep the old file open for
    // `open_file_cache_valid`, which is nginx's choice, documented in deploy/nginx.conf.)
    let direct_url = server.track_url(&id);
    let offload = |response: &reqwest::Response| header(response, "x-accel-redirect");
    let before = http_get(&direct_url).await;
    assert_eq!(before.status(), StatusCode::OK);
    assert_eq!(offload(&before), "/internal/0/Artist/My%20Song%20%231.mp3");
    let tmp = path.with_extension("tmp");
    std::fs::write(&tmp, pattern(150_000, 2)).expect("write");
    std::fs::rename(&tmp, &path).expect("rename");
    let replaced = http_get(&direct_url).await;
    assert_eq!(offload(&replaced), offload(&before));
    std::fs::remove_file(&path).expect("rm");
    let gone = http_get(&url).await;
    assert_eq!(
        gone.status(),
        StatusCode::NOT_FOUND,
        "deleted: a 404 through nginx"
    );
    let metrics = server.metrics().await;
    let hits = crate::harness::metric(&metrics, "musicd_file_cache_total{result=\"hit\"}")
        .expect("file cache hits");
    assert!(
        hits >= 2.0,
        "offload answers come from the file cache: {hits}"
    );

    // The internal location cannot be fetched directly.
    let direct = http_get(nginx.url("/internal/0/Artist/My%20Song%20%231.mp3")).await;
    assert_eq!(direct.status(), StatusCode::NOT_FOUND);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn plain_proxying_through_nginx_keeps_ranges_and_validators() {
    let bytes = pattern(50_000, 2);
    let (env, server, id, _) = TestEnv::serving("p.flac", &bytes).await;
    let nginx = Nginx::start_deploy_config(&server.addr.to_string(), &env.media);
    let url = nginx.url(&format!("/musicdb/{}/p.flac", id.to_hex()));
    let response = http_get(&url).await;
    assert_eq!(response.status(), StatusCode::OK);
    assert_eq!(header(&response, "content-type"), "audio/flac");
    let etag = header(&response, "etag");
    assert_eq!(
        response.bytes().await.expect("body").as_ref(),
        bytes.as_slice()
    );
    let response = client()
        .get(&url)
        .header("range", "bytes=-10")
        .header("if-range", &etag)
        .send()
        .await
        .expect("GET");
    assert_eq!(response.status(), StatusCode::PARTIAL_CONTENT);
    assert_eq!(
        response.bytes().await.expect("body").as_ref(),
        &bytes[49_990..]
    );
    let healthz = http_get(nginx.url("/healthz")).await;
    assert_eq!(healthz.status(), StatusCode::OK);
}

/// The same odd and hostile raw requests straight to musicd and through
/// `deploy/nginx.conf` to musicd: every answer on both paths is well framed, and neither
/// ever returns more responses than requests were sent. Then ordinary requests through
/// nginx's kept-alive upstream connections still get the right bytes (no desync left
/// behind).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn hostile_requests_are_answered_well_framed_directly_and_through_nginx() {
    let env = TestEnv::new().await;
    let bytes = pattern(300 * 1024 + 3, 7);
    let (id, _) = env.track("d.mp3", &bytes).await;
    let server = env.musicd().await;
    let nginx = Nginx::start_deploy_config(&server.addr.to_string(), &env.media);
    let direct = server.addr;
    let proxied: std::net::SocketAddr = format!("127.0.0.1:{}", nginx.port)
        .parse()
        .expect("nginx address");
    let track = format!("/musicdb/{}/d.mp3", id.to_hex());
    let url = nginx.url(&track);
    tokio::task::spawn_blocking(move || {
        let mut inputs: Vec<(String, Vec<u8>)> = crate::harness::corpus::refused(&track)
            .into_iter()
            .map(|v| (v.name.to_string(), v.input))
            .collect();
        inputs.extend(
            crate::harness::corpus::odd(&track)
                .into_iter()
                .map(|(name, input)| (name.to_string(), input)),
        );
        for (name, input) in &inputs {
            for (path, addr) in [("direct", direct), ("nginx", proxied)] {
                // Straight to musicd the strict check (requests as musicd frames them);
                // through nginx, which skips field lines musicd refuses, the lenient one.
                let checked = if path == "direct" {
                    let output = crate::harness::raw::send_and_read(addr, input).0;
                    (
                        crate::harness::wire_check::check_exchange(input, &output),
                        output,
                    )
                } else {
                    let quiet = std::time::Duration::from_secs(3);
                    let output = crate::harness::raw::send_and_read_open(addr, input, quiet);
                    (
                        crate::harness::wire_check::check_exchange_lenient(input, &output),
                        output,
                    )
                };
                if let (Err(violation), output) = checked {
                    panic!(
                        "{name} ({path}): {violation}\noutput: {:?}",
                        String::from_utf8_lossy(&output)
                    );
                }
            }
        }
        inputs.len()
    })
    .await
    .expect("client");
    for _ in 0..20 {
        let (status, _, body) = fetch_with(&url, &[("range", "bytes=1000-1999")]).await;
        assert_eq!(status, StatusCode::PARTIAL_CONTENT);
        assert_eq!(body.as_ref(), &bytes[1000..2000]);
    }
}
