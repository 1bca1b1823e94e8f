//! `deploy/varnish.vcl` with the real varnishd, in both topologies the Node service used:
//! varnish -> musicd, and varnish -> nginx (`deploy/nginx.conf`, x-accel) -> musicd.
//! Tracks are cached and ranges answered from the cache, errors and ops endpoints are
//! not cached, the client address reaches musicd's access log, and `musicctl purge`
//! reaches varnish (`[http_caches] ban_urls`).

use std::path::PathBuf;

use crate::harness::nginx::Nginx;
use crate::harness::varnish::Varnish;
use crate::harness::{TestEnv, fetch_with, pattern};
use mongodb::bson::oid::ObjectId;
use reqwest::StatusCode;

/// Status, `X-Cache` and body.
async fn get(url: &str, headers: &[(&str, &str)]) -> (StatusCode, String, Vec<u8>) {
    let (status, headers, body) = fetch_with(url, headers).await;
    let cache = headers
        .get("x-cache")
        .and_then(|v| v.to_str().ok())
        .unwrap_or_default()
        .to_string();
    (status, cache, body.to_vec())
}

/// The checks both topologies pass, `front` being varnish's URL maker.
async fn cached_and_purged(env: &TestEnv, varnish: &Varnish, bytes: &[u8], id: &ObjectId) {
    let track = varnish.url(&format!("/musicdb/{}/song.mp3", id.to_hex()));
    let (status, cache, body) = get(&track, &[]).await;
    assert_eq!((status, cache.as_str()), (StatusCode::OK, "MISS"));
    assert_eq!(body, bytes);
    let (status, cache, body) = get(&track, &[]).await;
    assert_eq!(
        (status, cache.as_str()),
        (StatusCode::OK, "HIT"),
        "the second request is a hit"
    );
    assert_eq!(body, bytes);
    let (status, cache, body) = get(&track, &[("range", "bytes=1000-1999")]).await;
    assert_eq!(
        (status, cache.as_str()),
        (StatusCode::PARTIAL_CONTENT, "HIT")
    );
    assert_eq!(body, &bytes[1000..2000]);

    // Errors and ops endpoints are never served from the cache.
    let unknown = varnish.url(&format!("/musicdb/{}/x.mp3", ObjectId::new().to_hex()));
    for _ in 0..2 {
        let (status, cache, _) = get(&unknown, &[]).await;
        assert_eq!((status, cache.as_str()), (StatusCode::NOT_FOUND, "MISS"));
    }
    for _ in 0..2 {
        let (status, cache, _) = get(&varnish.url("/healthz"), &[]).await;
        assert_eq!((status, cache.as_str()), (StatusCode::OK, "MISS"));
    }

    // `musicctl purge --id` and `musicctl purge PATTERN` reach varnish.
    let purge = |args: Vec<String>| {
        let output = env
            .command("musicctl")
            .arg("purge")
            .args(args)
            .output()
            .expect("musicctl purge");
        crate::harness::succeeded(&output);
        String::from_utf8_lossy(&output.stdout).to_string()
    };
    let out = purge(vec!["--id".into(), id.to_hex()]);
    assert!(out.contains("-> 200"), "{out}");
    let (_, cache, body) = get(&track, &[]).await;
    assert_eq!(cache, "MISS", "the request after a purge is a miss");
    assert_eq!(body, bytes);
    assert_eq!(get(&track, &[]).await.1, "HIT");
    let out = purge(vec![format!("{}*", env.config.redis.prefix)]);
    assert!(out.contains("-> 200"), "{out}");
    assert_eq!(get(&track, &[]).await.1, "MISS", "a pattern purge bans too");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn varnish_in_front_of_musicd_caches_tracks_and_obeys_purges() {
    // The varnish port is known only once it runs; musicd and musicctl share one env.
    let varnish_port_holder = crate::harness::free_port();
    let scratch = crate::harness::tempdir();
    let log: PathBuf = scratch.path().join("access.log");
    let settings = [
        format!("http_caches.ban_urls=[\"http://127.0.0.1:{varnish_port_holder}\"]"),
        format!("access_log.path={}", log.display()),
        "access_log.format=combined".to_string(),
    ];
    let settings: Vec<&str> = settings.iter().map(String::as_str).collect();
    let env = TestEnv::shared_with(&settings).await;
    let bytes = pattern(100_000, 21);
    let (id, _) = env.track("v.mp3", &bytes).await;
    let server = env.musicd().await;
    let varnish = Varnish::start_on(varnish_port_holder, server.addr.port());
    cached_and_purged(&env, &varnish, &bytes, &id).await;

    // The client behind varnish reaches the access log (X-Forwarded-For, appended by
    // varnish, believed from loopback).
    let fresh = varnish.url(&format!("/musicdb/{}/other.mp3?x=1", id.to_hex()));
    get(&fresh, &[("x-forwarded-for", "203.0.113.7")]).await;
    server.shutdown().await;
    let lines = std::fs::read_to_string(&log).expect("access log");
    assert!(
        lines
            .lines()
            .any(|l| l.starts_with("203.0.113.7 ") && l.contains("/other.mp3?x=1")),
        "{lines}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn varnish_in_front_of_nginx_in_front_of_musicd_caches_tracks_and_obeys_purges() {
    let varnish_port = crate::harness::free_port();
    let setting = format!("http_caches.ban_urls=[\"http://127.0.0.1:{varnish_port}\"]");
    let env = TestEnv::shared_with(&[setting.as_str(), "serve_mode=x-accel-redirect"]).await;
    let bytes = pattern(100_000, 22);
    let (id, _) = env.track("n.mp3", &bytes).await;
    let server = env.musicd().await;
    let nginx = Nginx::start_deploy_config(&server.addr.to_string(), &env.media);
    let varnish = Varnish::start_on(varnish_port, nginx.port);
    cached_and_purged(&env, &varnish, &bytes, &id).await;
}
