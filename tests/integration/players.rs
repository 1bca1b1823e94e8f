//! `musicctl players` against a real `musicd`: listeners at 320 kbps are held without a
//! stall by a musicd that sends as fast as it can, and stall against one paced below the
//! bitrate.

use crate::harness::{TestEnv, pattern};

/// Runs `musicctl players` with `args` against `url` over `ids`: its exit code and report.
fn players(
    env: &TestEnv,
    url: &str,
    ids: &std::path::Path,
    args: &[&str],
) -> (Option<i32>, serde_json::Value) {
    let mut all: Vec<std::ffi::OsString> = ["players", "--target", url, "--ids"]
        .iter()
        .map(Into::into)
        .collect();
    all.push(ids.into());
    all.extend(args.iter().map(Into::into));
    env.musicctl_json(all)
}

/// Three tracks of 10 s at 320 kbps, and a file naming them as `musicctl list` does.
async fn library(env: &TestEnv) -> std::path::PathBuf {
    let mut list = String::new();
    for n in 0..3u64 {
        let (id, path) = env.track(&format!("t{n}.mp3"), &pattern(400_000, n)).await;
        list += &format!("{}\t{}\n", id.to_hex(), path.display());
    }
    env.write_file("ids.tsv", list.as_bytes())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn listeners_are_held_without_a_stall_by_a_fast_musicd() {
    let env = TestEnv::new().await;
    let ids = library(&env).await;
    let server = env.musicd().await;
    let url = server.url("");
    let page = ids.with_file_name("players.html");
    let page_arg = page.display().to_string();
    // The world (and the page in it) stays until the browser has read the page.
    let ((code, report), _env) = tokio::task::spawn_blocking(move || {
        let ran = players(
            &env,
            &url,
            &ids,
            &[
                "--report",
                &page_arg,
                "--listeners",
                "20",
                "--duration",
                "6s",
                // A stall would take 3 s without a byte: a loaded machine is not mistaken
                // for a slow server.
                "--prebuffer",
                "3s",
                "--buffer",
                "4s",
                "--seek-rate",
                "6",
                "--probe",
                "range",
            ],
        );
        (ran, env)
    })
    .await
    .expect("players");
    assert_eq!(report["listeners"], 20, "{report}");
    assert_eq!(report["held"], 20, "{report}");
    assert_eq!(report["stalls"], 0, "{report}");
    assert_eq!(report["errors"], serde_json::json!({}), "{report}");
    assert_eq!(code, Some(0), "{report}");
    let page_url = format!("file://{}", page.display());
    let rendered =
        tokio::task::spawn_blocking(move || crate::harness::chromium::dom_result(&page_url))
            .await
            .expect("chromium");
    crate::replay::assert_plots(&rendered, 4);
    // Every listener probed and streamed: 6 s of playback at 320 kbps each at least, and
    // no more than the playback plus the 4 s read-ahead, once more for each seek.
    assert!(report["requests"].as_u64().unwrap_or(0) >= 40, "{report}");
    let bytes = report["bytes"].as_u64().unwrap_or(0);
    assert!(bytes >= 20 * 6 * 40_000, "{report}");
    assert!(bytes <= 20 * 2 * 400_000, "{report}");
    assert!(
        report["start_ms"]["p50"].as_f64().is_some_and(|v| v > 0.0),
        "{report}"
    );
    assert!(report["tool_cpu_s"].as_f64().is_some(), "{report}");
    server.shutdown().await;
}

/// Five listeners at 320 kbps, with a 1 s prebuffer and `args`, against a musicd with
/// `settings` (its pace): the exit code and report.
async fn against_a_paced_musicd(
    settings: &[&str],
    args: &'static [&'static str],
) -> (Option<i32>, serde_json::Value) {
    let env = TestEnv::shared_with(settings).await;
    let ids = library(&env).await;
    let server = env.musicd().await;
    let url = server.url("");
    let ran = tokio::task::spawn_blocking(move || {
        let mut all = vec!["--listeners", "5", "--prebuffer", "1s"];
        all.extend_from_slice(args);
        players(&env, &url, &ids, &all)
    })
    .await
    .expect("players");
    server.shutdown().await;
    ran
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn listeners_stall_against_a_musicd_paced_below_their_bitrate() {
    // 20,000 bytes/s against 40,000 bytes/s of playback: a 1 s prebuffer lasts 2 s.
    let (code, report) = against_a_paced_musicd(
        &[
            "limits.rate_bytes_per_sec=20000",
            "limits.rate_after_bytes=0",
        ],
        &["--duration", "8s", "--probe", "none"],
    )
    .await;
    assert!(report["stalls"].as_u64().unwrap_or(0) >= 5, "{report}");
    assert_eq!(report["stalled_listeners"], 5, "{report}");
    assert_eq!(code, Some(1), "{report}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn listeners_are_held_by_a_musicd_pacing_in_large_sends_above_their_bitrate() {
    // 60,000 bytes/s after a free start of 4 s of playback: the pace sends 80,000 bytes
    // (1.3 s of it) at a time, half the free start, so each listener's buffer dips to 2 s
    // of audio at worst before the next send comes.
    let (code, report) = against_a_paced_musicd(
        &[
            "limits.rate_bytes_per_sec=60000",
            "limits.rate_after_bytes=160000",
        ],
        &[
            "--duration",
            "6s",
            "--seek-rate",
            "0",
            "--skip-rate",
            "0",
            "--probe",
            "none",
        ],
    )
    .await;
    assert_eq!(report["held"], 5, "{report}");
    assert_eq!(report["stalls"], 0, "{report}");
    assert_eq!(report["errors"], serde_json::json!({}), "{report}");
    assert_eq!(code, Some(0), "{report}");
}
