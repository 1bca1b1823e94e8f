//! One test per bug fixed that only a comment or a commit message remembered, each named
//! after what broke, so it cannot come back unnoticed.

use std::io::Write;
use std::time::Duration;

use crate::harness::raw::{connect, read_responses, read_to_close};
use crate::harness::{TestEnv, clean_command, eventually, metric};

/// `musicctl --config /nonexistent health` printed `No such file or directory (os error
/// 2)` twice on one line: the message quoted its cause, and `{:#}` added the cause again.
#[test]
fn a_config_error_named_its_cause_twice() {
    for binary in ["musicctl", "musicd"] {
        let args: &[&str] = if binary == "musicctl" {
            &["--config", "/nonexistent/musicd.toml", "health"]
        } else {
            &["--config", "/nonexistent/musicd.toml", "check-config"]
        };
        let output = clean_command(binary).args(args).output().expect("run");
        let stderr = String::from_utf8_lossy(&output.stderr);
        assert!(!output.status.success(), "{binary}: {stderr}");
        assert!(
            stderr.contains("/nonexistent/musicd.toml"),
            "{binary}: {stderr}"
        );
        assert_eq!(
            stderr.matches("No such file or directory").count(),
            1,
            "{binary}: {stderr}"
        );
    }
}

/// An unknown `MUSICD_*` variable stopped musicd at start (the environment is ambient:
/// a variable meant for another version, or a typo, must not take the service down).
#[test]
fn an_unknown_musicd_variable_stopped_the_daemon() {
    let media = tempfile::tempdir().expect("media dir");
    let output = clean_command("musicd")
        .arg("check-config")
        .env("MUSICD_MEDIA_ROOTS", media.path())
        .env("MUSICD_LISTEN", "127.0.0.1:23999")
        .env("MUSICD_NOT_A_KEY", "1")
        .output()
        .expect("run");
    let stdout = String::from_utf8_lossy(&output.stdout);
    assert!(
        output.status.success(),
        "{stdout}{}",
        String::from_utf8_lossy(&output.stderr)
    );
    assert!(
        stdout.contains("127.0.0.1:23999"),
        "the known variables still apply: {stdout}"
    );
}

/// A request line split just before its end (`GET / HTTP/1.2`, then `\r\n…`) was
/// refused: httparse judges the version before the line ends, and a later HTTP/1.x minor
/// must be answered as 1.1 once the whole line is there.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_http_1_2_request_line_split_in_two_was_refused() {
    let (_env, server, id, _) = TestEnv::serving("a.mp3", b"split-line").await;
    let addr = server.addr;
    tokio::task::spawn_blocking(move || {
        let mut stream = connect(addr);
        stream.write_all(b"GET /musicdb/").expect("write");
        stream
            .write_all(format!("{id}/a.mp3 HTTP/1.2").as_bytes())
            .expect("write");
        // The first part must reach the server on its own: wait until it has had time to
        // parse it, proved by an answer on another connection that was sent after it.
        let mut probe = connect(addr);
        probe
            .write_all(b"GET /healthz HTTP/1.1\r\nHost: a\r\nConnection: close\r\n\r\n")
            .expect("probe");
        let _ = read_to_close(&mut probe);
        stream
            .write_all(b"\r\nHost: a\r\nConnection: close\r\n\r\n")
            .expect("write");
        let answers = read_responses(&mut stream, 1, &[false]);
        assert_eq!(answers[0].status, 200);
        assert_eq!(answers[0].body, b"split-line");
    })
    .await
    .expect("client");
    server.shutdown().await;
}

/// A connection accepted just before a stop, whose request had not arrived yet, was
/// closed at once: a client whose connect raced the stop got a reset instead of its
/// answer. It now has a moment (`FIRST_REQUEST_GRACE`) to send its request.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_connection_accepted_just_before_a_stop_was_reset() {
    let (_env, server, id, _) = TestEnv::serving("a.mp3", b"raced-the-stop").await;
    let addr = server.addr;
    let mut stream = connect(addr);
    // Accepted: the gauge counts it beside the connection that asks.
    let metrics_url = server.url("/metrics");
    eventually(
        Duration::from_secs(10),
        "the connection is accepted",
        || async {
            let text = crate::harness::get_text(&metrics_url).await;
            metric(&text, "musicd_open_connections").unwrap_or(0.0) >= 2.0
        },
    )
    .await;
    let stopping = tokio::spawn(server.shutdown());
    // The stop has begun once the listener is closed.
    eventually(Duration::from_secs(10), "the listener closes", || async {
        std::net::TcpStream::connect(addr).is_err()
    })
    .await;
    let answer = tokio::task::spawn_blocking(move || {
        stream
            .write_all(format!("GET /musicdb/{id}/a.mp3 HTTP/1.1\r\nHost: a\r\n\r\n").as_bytes())
            .expect("write");
        let answers = read_responses(&mut stream, 1, &[false]);
        answers[0].clone()
    })
    .await
    .expect("client");
    assert_eq!(answer.status, 200);
    assert_eq!(answer.body, b"raced-the-stop");
    assert_eq!(
        answer.header("connection"),
        Some("close"),
        "and then it closes"
    );
    stopping.await.expect("stopped");
}
