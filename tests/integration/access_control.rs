//! Who may play what: signed expiring links (checked before any lookup, in direct and
//! offload modes, against an independent HMAC from `openssl`), `musicctl sign`, CORS with
//! a real Chromium page on another origin, `?download`, and pacing.

use std::process::Command;
use std::time::{Duration, Instant};

use crate::harness::{TestEnv, client, fetch, fetch_with, http_get, metric, pattern};
use mongodb::bson::oid::ObjectId;
use reqwest::StatusCode;

const SECRET: &str = "a secret of more than sixteen bytes";

/// A key file with [`SECRET`] (and the newline `echo` adds) and the settings naming it.
fn key_settings(dir: &tempfile::TempDir, required: bool) -> Vec<String> {
    let path = dir.path().join("k1.key");
    std::fs::write(&path, format!("{SECRET}\n")).expect("key file");
    vec![
        format!(
            "signing.keys=[{{ id = \"k1\", secret_file = \"{}\" }}]",
            path.display()
        ),
        format!("signing.required={required}"),
    ]
}

async fn env_with(settings: &[String]) -> TestEnv {
    let settings: Vec<&str> = settings.iter().map(String::as_str).collect();
    TestEnv::shared_with(&settings).await
}

/// The signature computed by `openssl`, not by musicd: HMAC-SHA256 in unpadded base64url.
fn openssl_sig(id: &ObjectId, expires: u64) -> String {
    let message = format!("{}\n{expires}", id.to_hex());
    let mut child = Command::new("sh")
        .arg("-c")
        .arg("openssl dgst -sha256 -hmac \"$KEY\" -binary | base64 -w0 | tr '+/' '-_' | tr -d '='")
        .env("KEY", SECRET)
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .spawn()
        .expect("openssl");
    use std::io::Write;
    child
        .stdin
        .take()
        .expect("stdin")
        .write_all(message.as_bytes())
        .expect("write");
    let out = child.wait_with_output().expect("openssl output");
    assert!(out.status.success());
    String::from_utf8(out.stdout)
        .expect("ascii")
        .trim()
        .to_string()
}

fn now() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .expect("clock")
        .as_secs()
}

async fn error_of(response: reqwest::Response) -> (StatusCode, String) {
    let status = response.status();
    let body: serde_json::Value = response.json().await.expect("JSON error body");
    (
        status,
        body["error"].as_str().unwrap_or_default().to_string(),
    )
}

/// `required = true`: only a correctly signed, unexpired link plays, whatever its name;
/// refusals cost no lookup.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn signed_links_are_checked_before_any_lookup() {
    let keys = crate::harness::tempdir();
    let env = env_with(&key_settings(&keys, true)).await;
    let bytes = pattern(3000, 5);
    let (id, _) = env.track("s.mp3", &bytes).await;
    let server = env.musicd().await;
    let http = client();
    let base = server.url(&format!("/musicdb/{}", id.to_hex()));
    let expires = now() + 600;
    let sig = openssl_sig(&id, expires);

    let good = http
        .get(format!(
            "{base}/renamed-by-the-client.mp3?expires={expires}&kid=k1&sig={sig}"
        ))
        .send()
        .await
        .expect("GET");
    assert_eq!(
        good.status(),
        StatusCode::OK,
        "a signature from openssl is accepted"
    );
    assert_eq!(good.bytes().await.expect("body").as_ref(), bytes.as_slice());

    let lookups = |text: &str| -> f64 {
        ["local", "hit", "miss", "negative", "bypass"]
            .iter()
            .map(|o| {
                metric(text, &format!("musicd_id_cache_total{{outcome=\"{o}\"}}")).unwrap_or(0.0)
            })
            .sum()
    };
    // The good link's own lookup is counted as its exchange ends, which can be after its
    // client has read the body: wait for it, so it is not taken for a refused link's.
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(5);
    let mut before = lookups(&server.metrics().await);
    while before < 1.0 {
        assert!(
            std::time::Instant::now() < deadline,
            "the good link's lookup was never counted"
        );
        tokio::time::sleep(std::time::Duration::from_millis(10)).await;
        before = lookups(&server.metrics().await);
    }
    let past = now() - 10;
    let past_sig = openssl_sig(&id, past);
    let other = ObjectId::new();
    for (url, expected) in [
        (format!("{base}/a.mp3"), "invalid signature"),
        (
            format!("{base}/a.mp3?expires={expires}&kid=k1&sig=AAAA"),
            "invalid signature",
        ),
        (
            format!("{base}/a.mp3?expires={}&kid=k1&sig={sig}", expires + 1),
            "invalid signature",
        ),
        (
            format!("{base}/a.mp3?expires={expires}&kid=k1"),
            "invalid signature",
        ),
        (
            format!("{base}/a.mp3?expires={past}&kid=k1&sig={past_sig}"),
            "link expired",
        ),
        (
            format!("{base}/a.mp3?expires={expires}&kid=k9&sig={sig}"),
            "unknown signing key",
        ),
        (
            server.url(&format!(
                "/musicdb/{}/a.mp3?expires={expires}&kid=k1&sig={sig}",
                other.to_hex()
            )),
            "invalid signature",
        ),
    ] {
        let (status, error) = error_of(http.get(&url).send().await.expect("GET")).await;
        assert_eq!(
            (status, error.as_str()),
            (StatusCode::FORBIDDEN, expected),
            "{url}"
        );
    }
    let after = lookups(&server.metrics().await);
    assert_eq!(before, after, "refused links reached the resolver");

    // `musicctl sign` makes links the server accepts.
    let output = env
        .command("musicctl")
        .args(["sign", &id.to_hex(), "--ttl", "5m", "--base"])
        .arg(server.url(""))
        .args(["--name", "song.mp3"])
        .output()
        .expect("musicctl sign");
    crate::harness::succeeded(&output);
    let url = String::from_utf8(output.stdout)
        .expect("utf-8")
        .trim()
        .to_string();
    assert!(url.contains("/song.mp3?expires="), "{url}");
    let signed = http.get(&url).send().await.expect("GET");
    assert_eq!(signed.status(), StatusCode::OK, "{url}");
}

/// `required = false`: unsigned requests play, a wrong signature does not; and the same
/// check holds in x-accel-redirect mode.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn optional_signatures_and_offload_modes_check_the_same_way() {
    let keys = crate::harness::tempdir();
    for mode in ["direct", "x-accel-redirect", "x-sendfile"] {
        let mut settings = key_settings(&keys, mode != "direct");
        settings.push(format!("serve_mode={mode}"));
        let env = env_with(&settings).await;
        let (id, _) = env.track("o.mp3", &pattern(2000, 6)).await;
        let server = env.musicd().await;
        let http = client();
        let base = server.url(&format!("/musicdb/{}/o.mp3", id.to_hex()));
        let expires = now() + 60;
        let sig = openssl_sig(&id, expires);
        let unsigned = http.get(&base).send().await.expect("GET").status();
        let expected = if mode == "direct" {
            StatusCode::OK
        } else {
            StatusCode::FORBIDDEN
        };
        assert_eq!(unsigned, expected, "{mode}: unsigned");
        let signed = |sig: &str| format!("{base}?expires={expires}&kid=k1&sig={sig}");
        let (wrong, _, _) = fetch(&signed("bad")).await;
        assert_eq!(wrong, StatusCode::FORBIDDEN, "{mode}: wrong");
        let (good, headers, _) = fetch(&signed(&sig)).await;
        assert_eq!(good, StatusCode::OK, "{mode}: good");
        let offload = match mode {
            "x-sendfile" => Some("x-sendfile"),
            "x-accel-redirect" => Some("x-accel-redirect"),
            _ => None,
        };
        if let Some(header) = offload {
            assert!(headers.get(header).is_some(), "{mode}");
        }
    }
}

/// `?download` saves the file under its own name; ranges and conditionals are unchanged.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn download_links_are_attachments_with_the_files_name() {
    let env = TestEnv::new().await;
    let bytes = pattern(400 * 1024, 7);
    let (id, _) = env.track("Artist/Café Song.mp3", &bytes).await;
    let server = env.musicd().await;
    let http = client();
    let url = server.url(&format!("/musicdb/{}/x.mp3", id.to_hex()));
    for round in 0..2 {
        let play = http.get(&url).send().await.expect("GET");
        let disposition = play.headers()["content-disposition"]
            .to_str()
            .expect("ascii")
            .to_string();
        assert!(disposition.starts_with("inline; "), "{disposition}");
        let save = http
            .get(format!("{url}?download=1"))
            .send()
            .await
            .expect("GET");
        let disposition = save.headers()["content-disposition"]
            .to_str()
            .expect("ascii")
            .to_string();
        assert_eq!(
            disposition,
            "attachment; filename=\"Caf_ Song.mp3\"; filename*=UTF-8''Caf%C3%A9%20Song.mp3",
            "round {round}"
        );
        assert_eq!(save.bytes().await.expect("body").len(), bytes.len());
        let (status, headers, body) =
            fetch_with(&format!("{url}?download"), &[("range", "bytes=100-199")]).await;
        assert_eq!(status, StatusCode::PARTIAL_CONTENT);
        let disposition = headers["content-disposition"].to_str().expect("ascii");
        assert!(disposition.starts_with("attachment; "), "{disposition}");
        assert_eq!(body.as_ref(), &bytes[100..200]);
    }
}

/// `rate_after_bytes = 512 KiB`, `rate_bytes_per_sec = 1 MiB`: a 4 MiB download takes
/// 3.5 s (the first 512 KiB at once, then 3.5 MiB at 1 MiB/s), ± 10 %; offload modes
/// hand the rate to nginx.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn paced_downloads_take_the_time_the_rate_says() {
    let settings = [
        "limits.rate_after_bytes=524288",
        "limits.rate_bytes_per_sec=1048576",
    ];
    let env = TestEnv::shared_with(&settings).await;
    let bytes = pattern(4 * 1024 * 1024, 8);
    let (id, _) = env.track("big.mp3", &bytes).await;
    let server = env.musicd().await;
    let url = server.url(&format!("/musicdb/{}/big.mp3", id.to_hex()));
    for round in 0..2 {
        // Round 0 opens the file, round 1 sends it from the open-file cache.
        let started = Instant::now();
        let body = http_get(&url).await.bytes().await.expect("body");
        let took = started.elapsed();
        assert_eq!(body.len(), bytes.len());
        assert!(
            took >= Duration::from_millis(3150) && took <= Duration::from_millis(3850),
            "round {round}: {took:?}"
        );
    }
    // A small file is under rate_after_bytes: not paced.
    let (small, _) = env.track("small.mp3", &pattern(100_000, 9)).await;
    let started = Instant::now();
    http_get(server.url(&format!("/musicdb/{}/s.mp3", small.to_hex())))
        .await
        .bytes()
        .await
        .expect("body");
    assert!(started.elapsed() < Duration::from_secs(1));

    let mut accel = settings.to_vec();
    accel.push("serve_mode=x-accel-redirect");
    let env = TestEnv::shared_with(&accel).await;
    let (id, _) = env.track("a.mp3", &pattern(1000, 1)).await;
    let server = env.musicd().await;
    let response = http_get(server.url(&format!("/musicdb/{}/a.mp3", id.to_hex()))).await;
    assert_eq!(response.headers()["x-accel-limit-rate"], "1048576");
}

/// CORS headers and preflights, then a real browser: a page on one origin reads a Range
/// of a track from musicd on another with `fetch`, and cannot from a page on an origin
/// that is not allowed.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_web_player_on_another_origin_can_seek_with_fetch() {
    let pages = crate::harness::tempdir();
    let page_port = crate::harness::free_port();
    let allowed = format!("http://127.0.0.1:{page_port}");
    let setting = format!("cors.allow_origins=[\"{allowed}\"]");
    let env = TestEnv::shared_with(&[setting.as_str()]).await;
    let bytes = pattern(10_000, 10);
    let (id, _) = env.track("c.mp3", &bytes).await;
    let server = env.musicd().await;
    let track = server.url(&format!("/musicdb/{}/c.mp3", id.to_hex()));
    let http = client();

    let response = http
        .get(&track)
        .header("origin", &allowed)
        .header("range", "bytes=0-9")
        .send()
        .await
        .expect("GET");
    let h = response.headers();
    assert_eq!(h["access-control-allow-origin"], allowed.as_str());
    assert!(
        h["access-control-expose-headers"]
            .to_str()
            .expect("ascii")
            .contains("Content-Range")
    );
    assert_eq!(h["vary"], "Origin");
    let other = http
        .get(&track)
        .header("origin", "http://evil.example")
        .send()
        .await
        .expect("GET");
    assert!(other.headers().get("access-control-allow-origin").is_none());
    let preflight = http
        .request(reqwest::Method::OPTIONS, &track)
        .header("origin", &allowed)
        .header("access-control-request-method", "GET")
        .header("access-control-request-headers", "range")
        .send()
        .await
        .expect("OPTIONS");
    assert_eq!(preflight.status(), StatusCode::NO_CONTENT);
    let h = preflight.headers();
    assert_eq!(h["access-control-allow-methods"], "GET, HEAD");
    assert!(
        h["access-control-allow-headers"]
            .to_str()
            .expect("ascii")
            .contains("range")
    );
    assert!(h.get("access-control-max-age").is_some());

    // The page, served by a plain static server on its own origin.
    let page = format!(
        "<html><body><div id=out>pending</div><script>\
         fetch('{track}', {{headers: {{Range: 'bytes=100-109'}}}})\
           .then(r => r.arrayBuffer().then(b => [r.status, r.headers.get('Content-Range'), Array.from(new Uint8Array(b)).join(',')]))\
           .then(v => {{ document.getElementById('out').setAttribute('data-result', v.join('|')); }})\
           .catch(e => {{ document.getElementById('out').setAttribute('data-result', 'blocked'); }});\
         </script></body></html>"
    );
    std::fs::write(pages.path().join("player.html"), page).expect("page");
    let mut static_server = crate::harness::spawn({
        let mut command = Command::new("python3");
        command
            .args([
                "-m",
                "http.server",
                &page_port.to_string(),
                "--bind",
                "127.0.0.1",
                "--directory",
            ])
            .arg(pages.path())
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::null());
        command
    });
    let deadline = Instant::now() + Duration::from_secs(10);
    while std::net::TcpStream::connect(("127.0.0.1", page_port)).is_err() {
        assert!(Instant::now() < deadline, "page server did not start");
        std::thread::sleep(Duration::from_millis(50));
    }
    let expected: Vec<String> = bytes[100..110].iter().map(u8::to_string).collect();
    let result = crate::harness::chromium::dom_result(&format!("{allowed}/player.html"));
    assert_eq!(
        result,
        format!("206|bytes 100-109/{}|{}", bytes.len(), expected.join(",")),
        "the allowed origin reads the range"
    );
    // The same page from an origin that is not allowed (localhost is another origin).
    let result =
        crate::harness::chromium::dom_result(&format!("http://localhost:{page_port}/player.html"));
    assert_eq!(
        result, "blocked",
        "a foreign origin must not read the track"
    );
    let _ = static_server.kill();
    let _ = static_server.wait();
}
