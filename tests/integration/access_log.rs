//! The access log as operators read it: standard formats, the real client behind trusted
//! proxies or the PROXY protocol, every request's line after a stop, GoAccess reading it,
//! and the latency histograms and Grafana dashboard over `/metrics`.

use std::io::Write;
use std::path::{Path, PathBuf};

use crate::harness::raw::{connect, exchange, read_to_close};
use crate::harness::{TestEnv, fetch, fetch_with, http_get, pattern};

/// A musicd writing its access log to a file, with these extra settings.
async fn logging_server(
    extra: &[&str],
) -> (
    TestEnv,
    crate::harness::Musicd,
    PathBuf,
    tempfile::TempDir,
    String,
) {
    let scratch = crate::harness::tempdir();
    let path = scratch.path().join("access.log");
    let mut settings = vec![
        format!("access_log.path={}", path.display()),
        "access_log.format=combined".to_string(),
    ];
    settings.extend(extra.iter().map(|s| s.to_string()));
    let settings: Vec<&str> = settings.iter().map(String::as_str).collect();
    let env = TestEnv::shared_with(&settings).await;
    let (id, _) = env.track("song.mp3", &pattern(6000, 9)).await;
    let server = env.musicd().await;
    let url = format!("/musicdb/{}/song.mp3", id.to_hex());
    (env, server, path, scratch, url)
}

fn lines(path: &Path) -> Vec<String> {
    std::fs::read_to_string(path)
        .unwrap_or_default()
        .lines()
        .map(str::to_string)
        .collect()
}

/// The client address of every line, sorted: each event loop writes its own batches, so
/// lines are complete but not in request order.
fn logged_clients(path: &std::path::Path) -> Vec<String> {
    let mut clients: Vec<String> = lines(path)
        .iter()
        .map(|l| l.split(' ').next().unwrap_or_default().to_string())
        .collect();
    clients.sort();
    clients
}

/// N requests, then a graceful stop: exactly N lines, each the NCSA combined format with
/// musicd's fields after it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_request_has_exactly_one_combined_line_after_a_stop() {
    let (_env, server, path, _scratch, url) = logging_server(&[]).await;
    let full = server.url(&url);
    for i in 0..250 {
        let mut headers = vec![("user-agent", "VLC/3.0.20 LibVLC/3.0.20")];
        if i % 5 == 0 {
            headers.push(("range", "bytes=0-99"));
            headers.push(("referer", "https://player.example/q?a=\"b\""));
        }
        fetch_with(&full, &headers).await;
    }
    http_get(server.url("/musicdb/nope/x.mp3")).await;
    server.shutdown().await;
    let lines = lines(&path);
    assert_eq!(
        lines.len(),
        251,
        "one line per request, none lost at the stop"
    );
    let pattern = regex_like_combined();
    for line in &lines {
        assert!(pattern(line), "not combined: {line}");
    }
    let ranged = lines
        .iter()
        .filter(|l| l.contains("\" 206 100 \"https://player.example/q?a=\\x22b\\x22\""))
        .count();
    assert_eq!(ranged, 50);
    assert!(
        lines
            .iter()
            .any(|l| l.contains("\"GET /musicdb/nope/x.mp3 HTTP/1.1\" 400 "))
    );
    assert!(lines[0].starts_with("127.0.0.1 - - ["), "{}", lines[0]);
    assert!(
        lines
            .iter()
            .all(|l| l.contains("\"VLC/3.0.20 LibVLC/3.0.20\"") || l.contains("/nope/"))
    );
}

/// The shape nginx writes: `addr - - [time] "request" status bytes "referer" "agent"`, then
/// request id, cache outcome, latency, time to first byte, complete.
fn regex_like_combined() -> impl Fn(&str) -> bool {
    |line: &str| {
        let Some((client, rest)) = line.split_once(" - - [") else {
            return false;
        };
        let Some((time, rest)) = rest.split_once("] \"") else {
            return false;
        };
        let parts: Vec<&str> = rest.split('"').collect();
        // request, " status bytes ", referer, " ", agent, " id cache latency ttfb complete"
        if parts.len() != 6 || client.parse::<std::net::IpAddr>().is_err() || time.len() != 26 {
            return false;
        }
        let numbers: Vec<&str> = parts[1].split_whitespace().collect();
        let extra: Vec<&str> = parts[5].split_whitespace().collect();
        numbers.len() == 2
            && numbers.iter().all(|n| n.parse::<u64>().is_ok())
            && extra.len() == 5
            && extra[2].parse::<f64>().is_ok()
            && extra[3].parse::<f64>().is_ok()
            && (extra[4] == "1" || extra[4] == "0")
    }
}

/// `format = "json"`: one object per line with every field.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn json_lines_carry_every_field() {
    let (_env, server, path, _scratch, url) = logging_server(&["access_log.format=json"]).await;
    let headers = [
        ("range", "bytes=10-19"),
        ("user-agent", "mpv"),
        ("x-request-id", "json-1"),
    ];
    fetch_with(&server.url(&url), &headers).await;
    server.shutdown().await;
    let lines = lines(&path);
    assert_eq!(lines.len(), 1);
    let value: serde_json::Value = serde_json::from_str(&lines[0]).expect("json line");
    for (field, expected) in [
        ("client", serde_json::json!("127.0.0.1")),
        ("method", serde_json::json!("GET")),
        ("path", serde_json::json!(url)),
        ("status", serde_json::json!(206)),
        ("bytes", serde_json::json!(10)),
        ("cache", serde_json::json!("miss")),
        ("range", serde_json::json!("bytes=10-19")),
        ("user_agent", serde_json::json!("mpv")),
        ("referer", serde_json::json!("")),
        ("request_id", serde_json::json!("json-1")),
        ("complete", serde_json::json!(true)),
        ("protocol", serde_json::json!("HTTP/1.1")),
    ] {
        assert_eq!(value[field], expected, "{field}: {}", lines[0]);
    }
    assert!(
        value["latency_ms"].as_f64().expect("latency") >= value["ttfb_ms"].as_f64().expect("ttfb")
    );
    assert!(value["time"].as_str().expect("time").ends_with('Z'));
}

/// Behind trusted proxies the client is the right-most untrusted X-Forwarded-For address;
/// a forged header from an untrusted peer is never believed.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_client_is_taken_from_trusted_proxies_only() {
    // Loopback is trusted by default (nginx and varnish on the same host).
    let (_env, server, path, _scratch, url) = logging_server(&[]).await;
    let addr = server.addr;
    let request = move |headers: &str| {
        let text = format!("GET {url} HTTP/1.1\r\nHost: x\r\n{headers}Connection: close\r\n\r\n");
        exchange(addr, text.as_bytes());
    };
    let send = request.clone();
    tokio::task::spawn_blocking(move || {
        send("X-Forwarded-For: 203.0.113.5\r\n");
        // The client forged the left part; nginx appended the address it saw.
        send("X-Forwarded-For: 6.6.6.6, 198.51.100.4\r\n");
        send("X-Forwarded-For: 6.6.6.6\r\nX-Forwarded-For: 198.51.100.9, 127.0.0.1\r\n");
        send("X-Real-IP: 192.0.2.33\r\n");
    })
    .await
    .expect("client");
    server.shutdown().await;
    let clients = logged_clients(&path);
    assert_eq!(
        clients,
        ["192.0.2.33", "198.51.100.4", "198.51.100.9", "203.0.113.5"]
    );

    // Loopback not trusted: the same headers change nothing.
    let (_env, server, path, _scratch, url) =
        logging_server(&["trusted_proxies=[\"10.0.0.0/8\"]"]).await;
    let addr = server.addr;
    tokio::task::spawn_blocking(move || {
        for forged in [
            "X-Forwarded-For: 203.0.113.5\r\n",
            "X-Real-IP: 192.0.2.33\r\n",
        ] {
            let text =
                format!("GET {url} HTTP/1.1\r\nHost: x\r\n{forged}Connection: close\r\n\r\n");
            exchange(addr, text.as_bytes());
        }
    })
    .await
    .expect("client");
    server.shutdown().await;
    let lines = lines(&path);
    assert_eq!(lines.len(), 2);
    assert!(
        lines.iter().all(|l| l.starts_with("127.0.0.1 ")),
        "{lines:?}"
    );
}

/// `proxy_protocol = true`: the v1 or v2 header names the client; a connection without
/// one is closed unanswered.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_proxy_protocol_names_the_client_and_is_required() {
    let (_env, server, path, _scratch, url) = logging_server(&["proxy_protocol=true"]).await;
    let addr = server.addr;
    tokio::task::spawn_blocking(move || {
        let request = format!("GET {url} HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n");
        let v1 = format!("PROXY TCP4 192.0.2.10 127.0.0.1 40000 80\r\n{request}");
        let mut stream = connect(addr);
        stream.write_all(v1.as_bytes()).expect("write");
        let (answer, _) = read_to_close(&mut stream);
        assert!(
            answer.starts_with(b"HTTP/1.1 200 "),
            "{}",
            String::from_utf8_lossy(&answer)
        );

        let mut v2 = b"\r\n\r\n\0\r\nQUIT\n".to_vec();
        v2.extend_from_slice(&[
            0x21, 0x11, 0, 12, 198, 51, 100, 20, 127, 0, 0, 1, 0x9c, 0x40, 0, 80,
        ]);
        v2.extend_from_slice(request.as_bytes());
        let mut stream = connect(addr);
        stream.write_all(&v2).expect("write");
        let (answer, _) = read_to_close(&mut stream);
        assert!(
            answer.starts_with(b"HTTP/1.1 200 "),
            "{}",
            String::from_utf8_lossy(&answer)
        );

        let mut stream = connect(addr);
        stream.write_all(request.as_bytes()).expect("write");
        let (answer, _) = read_to_close(&mut stream);
        assert!(answer.is_empty(), "no PROXY header: closed, not answered");
    })
    .await
    .expect("client");
    server.shutdown().await;
    let clients = logged_clients(&path);
    assert_eq!(clients, ["192.0.2.10", "198.51.100.20"]);
}

/// The real GoAccess reads every line musicd writes (`--log-format=COMBINED`): no failed
/// line, and as many requests as were made.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn goaccess_reads_every_line() {
    let (_env, server, path, scratch, url) = logging_server(&[]).await;
    for i in 0..120 {
        let target = if i % 10 == 0 {
            "/musicdb/nope/x.mp3".to_string()
        } else {
            url.clone()
        };
        let headers = [
            ("user-agent", "Mozilla/5.0 (X11; Linux x86_64) Chrome/120.0"),
            ("referer", "https://player.example/"),
        ];
        fetch_with(&server.url(&target), &headers).await;
    }
    server.shutdown().await;
    let report = scratch.path().join("report.json");
    let output = std::process::Command::new("goaccess")
        .arg(&path)
        .args(["--log-format=COMBINED", "--no-global-config", "-o"])
        .arg(&report)
        .output()
        .expect("goaccess runs (scripts/install-deps.sh installs it)");
    crate::harness::succeeded(&output);
    let report: serde_json::Value =
        serde_json::from_slice(&std::fs::read(&report).expect("report")).expect("json report");
    let general = &report["general"];
    assert_eq!(general["total_requests"], 120, "{general}");
    assert_eq!(general["valid_requests"], 120, "{general}");
    assert_eq!(general["failed_requests"], 0, "{general}");
}

/// `/metrics` has the request duration and time-to-first-byte histograms, and every
/// metric `deploy/grafana/musicd.json` queries exists there.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_grafana_dashboard_queries_only_metrics_that_exist() {
    let (_env, server, _path, _scratch, url) = logging_server(&[]).await;
    fetch(&server.url(&url)).await;
    http_get(server.url("/musicdb/nope/x")).await;
    let expected = [
        "musicd_request_duration_seconds_bucket{route=\"track\",status=\"2xx\",le=\"+Inf\"} 1",
        "musicd_request_duration_seconds_count{route=\"track\",status=\"4xx\"} 1",
        "musicd_ttfb_seconds_count{route=\"track\",status=\"2xx\"} 1",
    ];
    // A request is counted as its exchange ends, which can be after its client has read
    // the whole answer (seen: the 200 not yet counted when the scrape came): wait for it.
    crate::harness::eventually(
        std::time::Duration::from_secs(5),
        "both requests counted",
        || async {
            let metrics = server.metrics().await;
            expected.iter().all(|series| metrics.contains(series))
        },
    )
    .await;
    let metrics = server.metrics().await;
    for series in expected {
        assert!(metrics.contains(series), "{series} missing:\n{metrics}");
    }
    let dashboard: serde_json::Value = serde_json::from_str(
        &std::fs::read_to_string(
            Path::new(env!("CARGO_MANIFEST_DIR")).join("deploy/grafana/musicd.json"),
        )
        .expect("deploy/grafana/musicd.json"),
    )
    .expect("dashboard is JSON");
    let mut queried = Vec::new();
    collect_exprs(&dashboard, &mut queried);
    assert!(queried.len() >= 8, "{queried:?}");
    let names: std::collections::BTreeSet<String> =
        queried.iter().flat_map(|expr| metric_names(expr)).collect();
    assert!(names.len() >= 8, "{names:?}");
    for name in &names {
        let family = ["_bucket", "_sum", "_count"]
            .iter()
            .find_map(|suffix| name.strip_suffix(suffix))
            .unwrap_or(name);
        assert!(
            metrics.contains(&format!("# TYPE {family} "))
                || metrics.contains(&format!("# TYPE {name} ")),
            "the dashboard queries {name}, which /metrics does not have"
        );
    }
}

fn collect_exprs(value: &serde_json::Value, out: &mut Vec<String>) {
    match value {
        serde_json::Value::Object(map) => {
            for (key, item) in map {
                if key == "expr"
                    && let Some(text) = item.as_str()
                {
                    out.push(text.to_string());
                }
                collect_exprs(item, out);
            }
        }
        serde_json::Value::Array(items) => items.iter().for_each(|i| collect_exprs(i, out)),
        _ => {}
    }
}

/// The `musicd_*` names in a PromQL expression.
fn metric_names(expr: &str) -> Vec<String> {
    let mut names = Vec::new();
    let mut rest = expr;
    while let Some(at) = rest.find("musicd_") {
        let tail = &rest[at..];
        let end = tail
            .find(|c: char| !(c.is_ascii_alphanumeric() || c == '_'))
            .unwrap_or(tail.len());
        names.push(tail[..end].to_string());
        rest = &tail[end..];
    }
    names
}

/// Polls `/metrics` until `series` reaches `at_least`, for at most 15 s; its last value.
async fn metric_reaches(base: &str, series: &str, at_least: f64) -> f64 {
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(15);
    loop {
        let text = crate::harness::get_text(&format!("{base}/metrics")).await;
        let value = crate::harness::metric(&text, series).unwrap_or(-1.0);
        if value >= at_least || std::time::Instant::now() > deadline {
            return value;
        }
        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
    }
}

/// A sink that fails every write (`/dev/full`, a full disk): every request is still served,
/// every lost line is counted in `/metrics`, and the application log says so once, not
/// once a batch.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_log_that_cannot_be_written_costs_lines_not_requests() {
    let env = TestEnv::shared_with(&[]).await;
    let (id, _) = env.track("full.mp3", &pattern(3000, 4)).await;
    let daemon = crate::harness::daemon::Daemon::start_with(
        &env,
        &["access_log.path=/dev/full", "access_log.format=combined"],
    )
    .await;
    let url = format!("{}/musicdb/{}/full.mp3", daemon.base, id.to_hex());
    for round in 1..=2 {
        for _ in 0..40 {
            assert_eq!(http_get(&url).await.status(), 200);
        }
        let dropped = metric_reaches(
            &daemon.base,
            "musicd_access_log_dropped_lines_total",
            f64::from(40 * round),
        )
        .await;
        // The /metrics requests themselves are lines too.
        assert!(
            dropped >= f64::from(40 * round),
            "round {round}: {dropped} dropped"
        );
    }
    let text = crate::harness::get_text(&format!("{}/metrics", daemon.base)).await;
    assert_eq!(
        crate::harness::metric(&text, "musicd_access_log_lines_total"),
        Some(0.0)
    );
    let log = daemon.log_text();
    assert_eq!(
        log.matches("access log lines are being dropped").count(),
        1,
        "said once, not per batch:\n{log}"
    );
}

/// A sink that blocks (a pipe nobody reads): the event loops never wait on it. Requests
/// are served, lines past what the writer can hold (4 MiB) are dropped and counted, and a
/// graceful stop still ends promptly.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_log_pipe_nobody_reads_never_stalls_serving() {
    let env = TestEnv::shared_with(&[]).await;
    let (id, _) = env.track("pipe.mp3", &pattern(2000, 5)).await;
    let fifo = env.dir.path().join("access.fifo");
    let c_path = std::ffi::CString::new(fifo.as_os_str().as_encoded_bytes()).expect("path");
    // SAFETY: mkfifo(3) on a NUL-terminated path we own; no memory is shared.
    assert_eq!(unsafe { libc::mkfifo(c_path.as_ptr(), 0o600) }, 0, "mkfifo");
    // SAFETY: open(2) on the same path.
    let reader = unsafe { libc::open(c_path.as_ptr(), libc::O_RDONLY | libc::O_NONBLOCK) };
    assert!(reader >= 0, "fifo read end");
    let set_path = format!("access_log.path={}", fifo.display());
    let mut daemon = crate::harness::daemon::Daemon::start_with(
        &env,
        &[&set_path, "access_log.format=combined"],
    )
    .await;
    // Lines of about 6 KiB: 1,500 of them are twice what the pipe and the queue hold.
    let agent = "a".repeat(6000);
    let url = format!("{}/musicdb/{}/pipe.mp3", daemon.base, id.to_hex());
    let client = crate::harness::client();
    for i in 0..1500 {
        let response = tokio::time::timeout(
            std::time::Duration::from_secs(10),
            client.get(&url).header("user-agent", &agent).send(),
        )
        .await
        .unwrap_or_else(|_| panic!("request {i} waited on the log"))
        .expect("served");
        assert_eq!(response.status(), 200, "request {i}");
        response.bytes().await.expect("body");
    }
    let dropped = metric_reaches(&daemon.base, "musicd_access_log_dropped_lines_total", 1.0).await;
    assert!(
        dropped >= 1.0,
        "lines past the queue are counted: {dropped}"
    );
    daemon.signal(libc::SIGTERM);
    let stopped = daemon.wait(std::time::Duration::from_secs(20));
    assert!(
        stopped.is_some_and(|s| s.success()),
        "a blocked log does not hold the stop up: {stopped:?}\n{}",
        daemon.log_text()
    );
    // SAFETY: closing the fd this test opened.
    unsafe { libc::close(reader) };
}
