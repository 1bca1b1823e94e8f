//! Links that name their listener, and taking them back: a link bound to an address plays
//! only from there, one bound to a session stops everywhere within a second of
//! `musicctl revoke` (every musicd, nginx and varnish, whose cached authorization is
//! banned) while every other link keeps playing, and links made before still verify.

use std::sync::Arc;
use std::time::{Duration, Instant};

use musicd::signing::{Binding, SigningKey};
use reqwest::StatusCode;

use crate::harness::daemon::Daemon;
use crate::harness::nginx::Nginx;
use crate::harness::varnish::Varnish;
use crate::harness::{
    TestEnv, fetch_with, free_port, get_text, metric, shared_redis, shared_replica_set,
};

const SECRET: &str = "a secret of more than sixteen bytes";

fn now() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .expect("clock")
        .as_secs()
}

/// The settings of a key `k1` (its file under `dir`), signing required.
fn signing_settings(dir: &std::path::Path) -> Vec<String> {
    let key_file = dir.join("k1.key");
    std::fs::write(&key_file, format!("{SECRET}\n")).expect("key");
    vec![
        format!(
            "signing.keys=[{{ id = \"k1\", secret_file = \"{}\" }}]",
            key_file.display()
        ),
        "signing.required=true".into(),
    ]
}

fn key() -> SigningKey {
    SigningKey::new("k1", SECRET.as_bytes().to_vec())
}

/// The query of a link to `id`, bound as asked.
fn query(id: &mongodb::bson::oid::ObjectId, sid: Option<&str>, ip: Option<&str>) -> String {
    let expires = now() + 3600;
    let sig = key().sign_bound(id, expires, Binding { sid, ip });
    let mut query = format!("expires={expires}&kid=k1&sig={sig}");
    if let Some(sid) = sid {
        query += &format!("&sid={sid}");
    }
    if let Some(ip) = ip {
        query += &format!("&ip={ip}");
    }
    query
}

async fn error_of(url: &str, headers: &[(&str, &str)]) -> (StatusCode, String) {
    let (status, _, body) = fetch_with(url, headers).await;
    let error = serde_json::from_slice::<serde_json::Value>(&body)
        .ok()
        .and_then(|v| v["error"].as_str().map(str::to_string))
        .unwrap_or_default();
    (status, error)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_bound_link_plays_only_from_its_address_and_links_made_before_still_verify() {
    let scratch = crate::harness::tempdir();
    let settings = signing_settings(scratch.path());
    let settings: Vec<&str> = settings.iter().map(String::as_str).collect();
    let env = TestEnv::shared_with(&settings).await;
    let (id, _) = env.track("bound.mp3", b"bound bytes").await;
    let server = env.musicd().await;
    let track = |query: &str| server.url(&format!("/musicdb/{}/bound.mp3?{query}", id.to_hex()));
    let from = |ip: &'static str| [("x-forwarded-for", ip)];

    // A link made the old way verifies exactly as before.
    let plain = track(&query(&id, None, None));
    assert_eq!(fetch_with(&plain, &[]).await.0, StatusCode::OK);
    // Bound to an address: from there (as a trusted proxy says) and nowhere else.
    let bound = track(&query(&id, Some("listener-1"), Some("203.0.113.7")));
    assert_eq!(
        fetch_with(&bound, &from("203.0.113.7")).await.0,
        StatusCode::OK
    );
    assert_eq!(
        error_of(&bound, &from("203.0.113.8")).await,
        (
            StatusCode::FORBIDDEN,
            "link bound to another address".into()
        )
    );
    // An IPv6 address binds its /64.
    let v6 = track(&query(&id, None, Some("2001:db8:1:2::a")));
    assert_eq!(
        fetch_with(&v6, &from("2001:db8:1:2:9:9:9:9")).await.0,
        StatusCode::OK
    );
    assert_eq!(
        fetch_with(&v6, &from("2001:db8:1:3::a")).await.0,
        StatusCode::FORBIDDEN
    );
    // A binding added to, or removed from, a signed link breaks it; a malformed one that
    // was signed is named.
    for tampered in [
        format!("{plain}&sid=someone"),
        format!("{plain}&ip=203.0.113.7"),
        bound.replace("&ip=203.0.113.7", ""),
        bound.replace("listener-1", "listener-2"),
    ] {
        assert_eq!(
            error_of(&tampered, &from("203.0.113.7")).await,
            (StatusCode::FORBIDDEN, "invalid signature".into()),
            "{tampered}"
        );
    }
    let malformed = track(&query(&id, None, Some("203.0.113.0/40")));
    assert_eq!(
        error_of(&malformed, &[]).await,
        (StatusCode::FORBIDDEN, "invalid ip binding".into())
    );
    // `musicctl sign` makes the same links.
    let output = env
        .command("musicctl")
        .args([
            "sign",
            &id.to_hex(),
            "--sid",
            "listener-9",
            "--ip",
            "198.51.100.0/24",
        ])
        .arg("--base")
        .arg(server.url(""))
        .output()
        .expect("musicctl sign");
    let signed = String::from_utf8_lossy(&output.stdout).trim().to_string();
    assert!(
        signed.contains("&sid=listener-9&ip=198.51.100.0/24"),
        "{signed}"
    );
    assert_eq!(
        fetch_with(&signed, &from("198.51.100.77")).await.0,
        StatusCode::OK
    );
    assert_eq!(
        fetch_with(&signed, &from("198.51.101.1")).await.0,
        StatusCode::FORBIDDEN
    );
    server.shutdown().await;

    // A client that is not a trusted proxy is the client whatever it forwards.
    let mut untrusted = settings.clone();
    untrusted.push("trusted_proxies=[]");
    let env = TestEnv::shared_with(&untrusted).await;
    let (id, _) = env.track("bound.mp3", b"bound bytes").await;
    let server = env.musicd().await;
    let bound = server.url(&format!(
        "/musicdb/{}/bound.mp3?{}",
        id.to_hex(),
        query(&id, None, Some("203.0.113.7"))
    ));
    assert_eq!(
        error_of(&bound, &from("203.0.113.7")).await,
        (
            StatusCode::FORBIDDEN,
            "link bound to another address".into()
        )
    );
    server.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn revocations_are_listed_removed_and_heard_by_a_musicd_started_after_them() {
    let scratch = crate::harness::tempdir();
    let settings = signing_settings(scratch.path());
    let settings: Vec<&str> = settings.iter().map(String::as_str).collect();
    let env = TestEnv::shared_with(&settings).await;
    let (id, _) = env.track("r.mp3", b"revocable").await;
    let link = |server: &crate::harness::Musicd, sid: Option<&str>| {
        server.url(&format!(
            "/musicdb/{}/r.mp3?{}",
            id.to_hex(),
            query(&id, sid, None)
        ))
    };
    let run = |args: &[&str]| {
        let args: Vec<String> = args.iter().map(|a| a.to_string()).collect();
        let env = &env;
        tokio::task::block_in_place(move || env.musicctl_json(&args))
    };
    let (code, report) = run(&["revoke", "--sid", "gone-1"]);
    assert_eq!(code, Some(0), "{report}");
    assert_eq!(report["subject"], "sid:gone-1");
    // Started after the revocation: it reads the set when it subscribes.
    let server = env.musicd().await;
    let deadline = Instant::now() + Duration::from_secs(5);
    while fetch_with(&link(&server, Some("gone-1")), &[]).await.0 != StatusCode::FORBIDDEN {
        assert!(
            Instant::now() < deadline,
            "a new musicd never read the revocation"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    assert_eq!(
        error_of(&link(&server, Some("gone-1")), &[]).await,
        (StatusCode::FORBIDDEN, "link revoked".into())
    );
    assert_eq!(
        fetch_with(&link(&server, Some("kept-1")), &[]).await.0,
        StatusCode::OK
    );
    let (_, listed) = run(&["revoke", "--list"]);
    let subjects: Vec<&str> = listed["revocations"]
        .as_array()
        .expect("list")
        .iter()
        .filter_map(|r| r["subject"].as_str())
        .collect();
    assert!(subjects.contains(&"sid:gone-1"), "{listed}");
    // Removed: it plays again, at once.
    let (code, removed) = run(&["revoke", "--sid", "gone-1", "--remove"]);
    assert_eq!(
        (code, &removed["removed"]),
        (Some(0), &true.into()),
        "{removed}"
    );
    let deadline = Instant::now() + Duration::from_secs(1);
    while fetch_with(&link(&server, Some("gone-1")), &[]).await.0 != StatusCode::OK {
        assert!(Instant::now() < deadline, "the removal was not heard");
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    // A key: every link it signed, bound or not, made before or after.
    let (code, _) = run(&["revoke", "--kid", "k1", "--until", "1h"]);
    assert_eq!(code, Some(0));
    let deadline = Instant::now() + Duration::from_secs(1);
    while fetch_with(&link(&server, None), &[]).await.0 != StatusCode::FORBIDDEN {
        assert!(
            Instant::now() < deadline,
            "the key's revocation was not heard"
        );
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    assert_eq!(
        fetch_with(&link(&server, Some("kept-1")), &[]).await.0,
        StatusCode::FORBIDDEN
    );
    run(&["revoke", "--kid", "k1", "--remove"]);
    server.shutdown().await;

    // Without Redis: one line, exit 2.
    let output = env
        .command("musicctl")
        .args([
            "--set",
            "redis.url=redis://127.0.0.1:1",
            "--set",
            "redis.timeout_ms=300",
        ])
        .args(["revoke", "--sid", "x"])
        .output()
        .expect("musicctl");
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert_eq!(output.status.code(), Some(2), "{stderr}");
    assert_eq!(stderr.trim().lines().count(), 1, "{stderr}");
    // A session id no link can carry is refused before anything is written.
    let (code, _) = env_error(&env, &["revoke", "--sid", "a b"]);
    assert_eq!(code, Some(2));
}

fn env_error(env: &TestEnv, args: &[&str]) -> (Option<i32>, String) {
    let output = env
        .command("musicctl")
        .args(args)
        .output()
        .expect("musicctl");
    (
        output.status.code(),
        String::from_utf8_lossy(&output.stderr).into_owned(),
    )
}

/// varnish → nginx → two musicd, 10,000 session links playing: each of 20 sessions,
/// its authorization cached in varnish first, is revoked, and no layer lets it through
/// later than a second after the start of `musicctl revoke` (each layer asked round and
/// round for 1.2 s), while no other link is refused. Without the follower's ban, varnish keeps
/// playing it from its cached authorization for up to a minute.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_revoked_session_stops_at_every_layer_within_a_second_while_the_others_play() {
    let scratch = crate::harness::tempdir();
    let varnish_port = free_port();
    let mut settings = signing_settings(scratch.path());
    settings.push(format!(
        "http_caches.ban_urls=[\"http://127.0.0.1:{varnish_port}\"]"
    ));
    settings.push("mongodb.watch_lease_ms=1500".into());
    let settings: Vec<&str> = settings.iter().map(String::as_str).collect();
    let env = TestEnv::with(
        &shared_redis().redis_url(),
        &shared_replica_set().uri(),
        &settings,
    )
    .await;
    let (id, _) = env.track("stack.mp3", b"stack bytes").await;
    let a = Daemon::start(&env).await;
    let b = Daemon::start(&env).await;
    let upstreams = [
        a.base.trim_start_matches("http://").to_string(),
        b.base.trim_start_matches("http://").to_string(),
    ];
    let upstreams: Vec<&str> = upstreams.iter().map(String::as_str).collect();
    let nginx = Nginx::start_deploy_config_over(&upstreams, &env.media);
    let varnish = Varnish::start_on(varnish_port, nginx.port);
    // One of the two follows (and so bans).
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        let mut following = 0.0;
        for base in [&a.base, &b.base] {
            let text = get_text(&format!("{base}/metrics")).await;
            following += metric(&text, "musicd_watch_following").unwrap_or(0.0);
        }
        if following == 1.0 {
            break;
        }
        assert!(Instant::now() < deadline, "nobody follows");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let path = |query: &str| format!("/musicdb/{}/stack.mp3?{query}", id.to_hex());
    let layers = [
        varnish.url(""),
        nginx.url(""),
        a.base.clone(),
        b.base.clone(),
    ];
    // The others: 10,000 links of their own sessions, played through varnish throughout.
    let others: Arc<Vec<String>> = Arc::new(
        (0..10_000)
            .map(|n| varnish.url(&path(&query(&id, Some(&format!("other-{n}")), None))))
            .collect(),
    );
    let stop = Arc::new(std::sync::atomic::AtomicBool::new(false));
    let players = {
        let (others, stop) = (Arc::clone(&others), Arc::clone(&stop));
        tokio::spawn(async move {
            let (mut played, mut refused) = (0usize, Vec::new());
            for url in others.iter().cycle() {
                if stop.load(std::sync::atomic::Ordering::Relaxed) && played >= others.len() {
                    break;
                }
                let (status, _, body) = fetch_with(url, &[]).await;
                if status != StatusCode::OK || body.as_ref() != b"stack bytes" {
                    refused.push(format!("{url}: {status}"));
                }
                played += 1;
            }
            (played, refused)
        })
    };
    let mut delays = Vec::new();
    for n in 0..20 {
        let sid = format!("leaked-{n}");
        let urls: Vec<String> = layers
            .iter()
            .map(|base| format!("{base}{}", path(&query(&id, Some(&sid), None))))
            .collect();
        // Played first, so varnish holds musicd's authorization for it.
        for url in &urls {
            assert_eq!(fetch_with(url, &[]).await.0, StatusCode::OK, "{url}");
        }
        assert_eq!(fetch_with(&urls[0], &[]).await.0, StatusCode::OK);
        let asked = Instant::now();
        let (code, report) =
            tokio::task::block_in_place(|| env.musicctl_json(["revoke", "--sid", sid.as_str()]));
        assert_eq!(code, Some(0), "{report}");
        // Every layer, round and round for 1.2 s: when each last let the link through.
        // (nginx balances over both musicd, so one 403 there says nothing of the other.)
        let mut last_played = [Duration::ZERO; 4];
        let mut last_answer = [StatusCode::OK; 4];
        while asked.elapsed() < Duration::from_millis(1200) {
            for (layer, url) in urls.iter().enumerate() {
                let (status, error) = error_of(url, &[]).await;
                match status {
                    StatusCode::OK => last_played[layer] = asked.elapsed(),
                    StatusCode::FORBIDDEN => assert_eq!(error, "link revoked", "{url}"),
                    other => panic!("{url}: {other}"),
                }
                last_answer[layer] = status;
            }
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
        for (layer, url) in urls.iter().enumerate() {
            assert_eq!(last_answer[layer], StatusCode::FORBIDDEN, "{url} plays on");
            delays.push(last_played[layer]);
        }
    }
    stop.store(true, std::sync::atomic::Ordering::Relaxed);
    let (played, refused) = players.await.expect("players");
    delays.sort();
    let p99 = delays[(delays.len() * 99).div_ceil(100) - 1];
    eprintln!(
        "revocation to the last answer that played, at every layer, {} samples: p50 {:?}, p99 {:?}, max {:?}; {played} other requests",
        delays.len(),
        delays[delays.len() / 2],
        p99,
        delays[delays.len() - 1]
    );
    assert!(
        refused.is_empty(),
        "other links refused: {:?}",
        &refused[..refused.len().min(5)]
    );
    assert!(played >= others.len(), "{played}");
    assert!(p99 <= Duration::from_secs(1), "p99 {p99:?}");
    // No answer for a revoked session came later than a second after its revocation.
    let latest = delays[delays.len() - 1];
    assert!(
        latest <= Duration::from_secs(1),
        "an answer {latest:?} after"
    );
}

/// A revocation owed to a varnish that is down is kept (and shown) until it is back.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_revocation_owed_to_a_varnish_that_is_down_is_shown_and_delivered_later() {
    let scratch = crate::harness::tempdir();
    let varnish_port = free_port();
    let cache_url = format!("http://127.0.0.1:{varnish_port}");
    let mut settings = signing_settings(scratch.path());
    settings.push(format!("http_caches.ban_urls=[\"{cache_url}\"]"));
    settings.push("mongodb.watch_lease_ms=1500".into());
    let settings: Vec<&str> = settings.iter().map(String::as_str).collect();
    let env = TestEnv::with(
        &shared_redis().redis_url(),
        &shared_replica_set().uri(),
        &settings,
    )
    .await;
    let server = Daemon::start(&env).await;
    let deadline = Instant::now() + Duration::from_secs(20);
    while metric(
        &get_text(&format!("{}/metrics", server.base)).await,
        "musicd_watch_following",
    ) != Some(1.0)
    {
        assert!(Instant::now() < deadline, "not following");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let sent = format!("musicd_watch_bans_total{{cache=\"{cache_url}\",result=\"ok\"}}");
    let (code, _) =
        tokio::task::block_in_place(|| env.musicctl_json(["revoke", "--sid", "owed-1"]));
    assert_eq!(code, Some(0));
    // Owed, and shown by `musicctl health`.
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let (_, health) = tokio::task::block_in_place(|| env.musicctl_json(["health"]));
        let owed = health["checks"].as_array().is_some_and(|checks| {
            checks.iter().any(|c| {
                c["name"] == "bans"
                    && c["state"] == "degraded"
                    && c["detail"].as_str().is_some_and(|d| d.contains(&cache_url))
            })
        });
        let readyz: serde_json::Value =
            serde_json::from_str(&get_text(&format!("{}/readyz", server.base)).await)
                .unwrap_or_default();
        let pending = readyz["watch"]["bans"][0]["pending"].as_u64().unwrap_or(0);
        if owed && pending > 0 {
            break;
        }
        assert!(Instant::now() < deadline, "nothing owed: {readyz}");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    // The cache comes back: what it is owed arrives.
    let _varnish = Varnish::start_on(varnish_port, free_port());
    let deadline = Instant::now() + Duration::from_secs(20);
    while metric(&get_text(&format!("{}/metrics", server.base)).await, &sent).unwrap_or(0.0) < 1.0 {
        assert!(Instant::now() < deadline, "the owed ban was never sent");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}
