//! `musicctl replay` against a real `musicd`: a generated log of known requests (whole
//! downloads, abandoned ones, ranges, unknown ids, lines that are not tracks) replayed in
//! both log formats, one of them gzipped.

use std::io::Write;

use crate::harness::{TestEnv, get_body, pattern};

/// A combined-format line at `second` past the log's start.
fn combined(second: u64, method: &str, target: &str, status: u16, bytes: u64) -> String {
    let minute = second / 60;
    let second = second % 60;
    format!(
        "10.0.0.1 - - [01/Dec/2026:08:{minute:02}:{second:02} +0000] \"{method} {target} HTTP/1.1\" {status} {bytes} \"-\" \"VLC/3.0\"\n"
    )
}

/// A musicd JSON line at `second` past the log's start.
fn json(second: u64, path: &str, range: &str, status: u16, bytes: u64) -> String {
    let minute = second / 60;
    let second = second % 60;
    serde_json::json!({
        "time": format!("2026-12-01T08:{minute:02}:{second:02}Z"),
        "client": "10.0.0.2", "method": "GET", "path": path, "query": "", "protocol": "HTTP/1.1",
        "status": status, "bytes": bytes, "latency_ms": 1.0, "ttfb_ms": 0.5, "cache": "redis",
        "range": range, "user_agent": "Safari", "referer": "", "request_id": "r", "complete": true,
    })
    .to_string()
        + "\n"
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_generated_log_is_replayed_with_its_counts_ranges_abandons_and_timing() {
    let env = TestEnv::new().await;
    let size = 200_000u64;
    let mut ids = Vec::new();
    for n in 0..3u64 {
        let (id, _) = env
            .track(&format!("t{n}.mp3"), &pattern(size as usize, n))
            .await;
        ids.push(id.to_hex());
    }
    let server = env.musicd().await;
    let unknown = "6b0dc37d3ba0d873deac9381";
    let (status, not_found) = get_body(&server.url(&format!("/musicdb/{unknown}/x.mp3"))).await;
    assert_eq!(status.as_u16(), 404);
    let not_found = not_found.len() as u64;

    // 40 s of traffic, one request a second, every kind; at --speed 10 it takes 4 s.
    let mut plain = String::new();
    let mut json_lines = String::new();
    let mut expected_bytes = 0u64;
    let (mut twos, mut fours) = (0u64, 0u64);
    for second in 0..=40u64 {
        let id = &ids[(second % 3) as usize];
        let track = format!("/musicdb/{id}/song%20{second}.mp3");
        match second % 5 {
            // A whole download.
            0 => {
                plain += &combined(second, "GET", &track, 200, size);
                expected_bytes += size;
                twos += 1;
            }
            // Abandoned after 5,000 bytes: read that far, then closed.
            1 => {
                plain += &combined(second, "GET", &track, 200, 5_000);
                expected_bytes += 5_000;
                twos += 1;
            }
            // A range, which only the JSON log records.
            2 => {
                json_lines += &json(
                    second,
                    &format!("/musicdb/{id}/a.mp3"),
                    "bytes=1000-1999",
                    206,
                    1000,
                );
                expected_bytes += 1000;
                twos += 1;
            }
            // An id nobody has.
            3 => {
                plain += &combined(second, "GET", &format!("/musicdb/{unknown}/x.mp3"), 404, 60);
                expected_bytes += not_found;
                fours += 1;
            }
            // Not a track, or not a request: not replayed.
            _ => {
                plain += &combined(second, "GET", "/healthz", 200, 50);
                plain += "garbage that is no log line\n";
            }
        }
    }
    let plain_path = env.write_file("logs/access.log", plain.as_bytes());
    let gz_path = plain_path.with_file_name("access.json.gz");
    let mut gz = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::fast());
    gz.write_all(json_lines.as_bytes()).expect("gzip");
    std::fs::write(&gz_path, gz.finish().expect("gzip")).expect("write gz");

    let page = plain_path.with_file_name("report.html");
    let (code, report) = env.musicctl_json(args(&[
        &"replay",
        &plain_path,
        &gz_path,
        &"--target",
        &server.url(""),
        &"--speed",
        &"10",
        &"--report",
        &page,
    ]));
    assert_eq!(code, Some(0), "{report}");
    assert_eq!(report["requests"], twos + fours, "{report}");
    assert_eq!(report["statuses"]["2xx"], twos, "{report}");
    assert_eq!(report["statuses"]["4xx"], fours, "{report}");
    assert_eq!(report["log_statuses"], report["statuses"], "{report}");
    assert_eq!(report["errors"], serde_json::json!({}), "{report}");
    assert_eq!(report["bytes"], expected_bytes, "{report}");
    assert_eq!(
        report["skipped_lines"], 16,
        "8 health checks and 8 garbage lines: {report}"
    );
    let duration = report["duration_s"].as_f64().expect("duration");
    assert!(
        (3.6..=4.4).contains(&duration),
        "40 s of log at --speed 10 took {duration} s"
    );
    for field in ["latency_ms", "ttfb_ms"] {
        for p in ["p50", "p90", "p99", "max"] {
            assert!(
                report[field][p].as_f64().is_some_and(|v| v > 0.0),
                "{field}.{p}: {report}"
            );
        }
    }

    // The page renders in a real browser, and each of its plots has a line with data.
    let page_url = format!("file://{}", page.display());
    let rendered =
        tokio::task::spawn_blocking(move || crate::harness::chromium::dom_result(&page_url))
            .await
            .expect("chromium");
    assert_plots(&rendered, 3);

    // The same traffic to a second musicd side by side: both answer alike.
    let other = env.musicd().await;
    // Each log replayed against the first musicd and `against` side by side, at full speed.
    let side_by_side = |logs: &[&dyn AsRef<std::ffi::OsStr>], against: String| {
        let target = server.url("");
        let mut argv: Vec<&dyn AsRef<std::ffi::OsStr>> = vec![&"replay"];
        argv.extend_from_slice(logs);
        argv.extend_from_slice(&[&"--target", &target, &"--against", &against]);
        argv.extend_from_slice(&[&"--speed", &"max"]);
        env.musicctl_json(args(&argv))
    };
    let (code, report) = side_by_side(&[&plain_path, &gz_path], other.url(""));
    assert_eq!(code, Some(0), "{report}");
    assert_eq!(
        report["against"]["statuses"], report["statuses"],
        "{report}"
    );
    assert_eq!(report["against"]["bytes"], expected_bytes, "{report}");
    assert_eq!(report["differing"], 0, "{report}");
    other.shutdown().await;

    // A service that does not have the tracks: every replayed track differs, and it says so.
    let empty = TestEnv::new().await.musicd().await;
    let (code, report) = side_by_side(&[&plain_path], empty.url(""));
    assert_eq!(code, Some(1), "{report}");
    let whole_and_abandoned = report["statuses"]["2xx"].as_u64().unwrap_or(0);
    assert_eq!(report["differing"], whole_and_abandoned, "{report}");
    assert_eq!(report["differences"][0]["against"], 404, "{report}");
    empty.shutdown().await;
    server.shutdown().await;
}

/// Checks a report page's `data-result` (`plots=N lines=L points=P`): `plots` plots, each
/// line drawn with points.
pub(crate) fn assert_plots(result: &str, plots: usize) {
    let field = |name: &str| {
        result
            .split_whitespace()
            .find_map(|pair| pair.strip_prefix(name)?.strip_prefix('='))
            .and_then(|v| v.parse::<usize>().ok())
            .unwrap_or(0)
    };
    assert_eq!(field("plots"), plots, "{result}");
    assert!(
        field("lines") >= plots,
        "every plot has a line drawn: {result}"
    );
    assert!(field("points") > 2 * plots, "{result}");
}

/// Command-line arguments of mixed kinds (text, paths).
fn args(parts: &[&dyn AsRef<std::ffi::OsStr>]) -> Vec<std::ffi::OsString> {
    parts
        .iter()
        .map(|part| part.as_ref().to_os_string())
        .collect()
}
