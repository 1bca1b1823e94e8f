//! Client limits over raw TCP: slowloris headers, idle keep-alive, oversized heads and
//! URLs, the connection cap, and clients that stop reading.

use std::io::{Read, Write};
use std::net::TcpStream;
use std::time::{Duration, Instant};

use crate::harness::{TestEnv, client, http_get, pattern};
use reqwest::StatusCode;

/// Reads until the server closes; returns what arrived and how long it took.
fn read_until_closed(stream: &mut TcpStream, limit: Duration) -> (Vec<u8>, Duration) {
    let started = Instant::now();
    stream.set_read_timeout(Some(limit)).expect("timeout");
    let mut received = Vec::new();
    let mut buf = [0u8; 65536];
    loop {
        match stream.read(&mut buf) {
            Ok(0) | Err(_) => break,
            Ok(n) => received.extend_from_slice(&buf[..n]),
        }
    }
    (received, started.elapsed())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_slowloris_client_and_an_idle_keep_alive_connection_are_closed() {
    let env = TestEnv::shared_with(&[
        "limits.header_read_timeout_secs=1",
        "limits.idle_timeout_secs=2",
    ])
    .await;
    let server = env.musicd().await;
    let addr = server.addr;
    tokio::task::spawn_blocking(move || {
        // Headers that never finish.
        let mut slow = TcpStream::connect(addr).expect("connect");
        slow.write_all(b"GET /healthz HTTP/1.1\r\nHost: x\r\n")
            .expect("write");
        let (_, took) = read_until_closed(&mut slow, Duration::from_secs(10));
        assert!(
            took < Duration::from_secs(4),
            "slowloris held the connection for {took:?}"
        );

        // One request, then silence.
        let mut idle = TcpStream::connect(addr).expect("connect");
        idle.write_all(b"GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n")
            .expect("write");
        let (answer, took) = read_until_closed(&mut idle, Duration::from_secs(10));
        assert!(
            answer.starts_with(b"HTTP/1.1 200"),
            "{}",
            String::from_utf8_lossy(&answer)
        );
        assert!(
            took >= Duration::from_millis(900),
            "closed too early: {took:?}"
        );
        assert!(
            took < Duration::from_secs(5),
            "idle connection kept for {took:?}"
        );
    })
    .await
    .expect("client thread");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn oversized_heads_and_urls_are_refused() {
    let env =
        TestEnv::shared_with(&["limits.max_header_bytes=8192", "limits.max_uri_bytes=512"]).await;
    let server = env.musicd().await;
    let long_url = format!("/musicdb/{}/x.mp3", "a".repeat(600));
    let response = http_get(server.url(&long_url)).await;
    assert_eq!(response.status(), StatusCode::URI_TOO_LONG);
    let response = client()
        .get(server.url("/healthz"))
        .header("x-padding", "p".repeat(20_000))
        .send()
        .await;
    match response {
        Ok(r) => assert_eq!(r.status(), StatusCode::REQUEST_HEADER_FIELDS_TOO_LARGE),
        // hyper may also just close a connection whose head overflows its buffer.
        Err(e) => assert!(!e.is_connect(), "{e}"),
    }
    // The server is fine afterwards.
    assert_eq!(
        http_get(server.url("/healthz")).await.status(),
        StatusCode::OK
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn connections_over_the_cap_get_503_and_the_server_stays_up() {
    let env = TestEnv::shared_with(&["limits.max_connections=5"]).await;
    let server = env.musicd().await;
    let addr = server.addr;
    tokio::task::spawn_blocking(move || {
        // Each held connection proves it has its slot by being answered (and stays open:
        // keep-alive), so the sixth is the one over the cap whatever the loops' timing.
        let held: Vec<TcpStream> = (0..5)
            .map(|_| {
                let mut stream = TcpStream::connect(addr).expect("connect");
                stream
                    .write_all(b"GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n")
                    .expect("write");
                let answered = crate::harness::raw::read_responses(&mut stream, 1, &[false]);
                assert_eq!(answered[0].status, 200);
                stream
            })
            .collect();
        let mut extra = TcpStream::connect(addr).expect("the kernel still accepts");
        let (answer, _) = read_until_closed(&mut extra, Duration::from_secs(5));
        let text = String::from_utf8_lossy(&answer);
        assert!(text.starts_with("HTTP/1.1 503"), "{text}");
        assert!(
            text.to_ascii_lowercase().contains("\r\nretry-after: 1\r\n"),
            "{text}"
        );
        // Framed exactly: the declared length is the body that came (curl's "transfer
        // closed with bytes remaining" was a too-long Content-Length).
        let (head, body) = text.split_once("\r\n\r\n").expect("head and body");
        let declared: usize = head
            .lines()
            .find_map(|l| {
                l.to_ascii_lowercase()
                    .strip_prefix("content-length: ")
                    .map(str::to_string)
            })
            .expect("content-length")
            .parse()
            .expect("number");
        assert_eq!(declared, body.len(), "{text}");
        drop(held);
        // The slots come back as the server sees the closes: a 503 until then.
        let freed = std::time::Instant::now();
        let answer = loop {
            let mut fresh = TcpStream::connect(addr).expect("connect");
            fresh
                .write_all(b"GET /healthz HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
                .expect("write");
            let (answer, _) = read_until_closed(&mut fresh, Duration::from_secs(5));
            if !answer.starts_with(b"HTTP/1.1 503") || freed.elapsed() > Duration::from_secs(5) {
                break answer;
            }
            std::thread::sleep(Duration::from_millis(50));
        };
        assert!(
            answer.starts_with(b"HTTP/1.1 200"),
            "{}",
            String::from_utf8_lossy(&answer)
        );
    })
    .await
    .expect("client thread");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_client_that_stops_reading_is_dropped_after_the_write_timeout() {
    let env =
        TestEnv::shared_with(&["limits.write_timeout_secs=1", "cache.file_total_bytes=0"]).await;
    let (id, _) = env.track("big.mp3", &pattern(64 * 1024 * 1024, 1)).await;
    let server = env.musicd().await;
    let addr = server.addr;
    let metrics_url = server.url("/metrics");
    let mut stalled = TcpStream::connect(addr).expect("connect");
    // A tiny receive window makes the server's writes stall quickly.
    stalled
        .write_all(
            format!(
                "GET /musicdb/{}/x.mp3 HTTP/1.1\r\nHost: x\r\n\r\n",
                id.to_hex()
            )
            .as_bytes(),
        )
        .expect("write");
    let open = |text: &str| -> f64 {
        crate::harness::metric(text, "musicd_open_connections").unwrap_or(-1.0)
    };
    let scrape = || async {
        let text = reqwest::Client::builder()
            .pool_max_idle_per_host(0)
            .build()
            .expect("client")
            .get(&metrics_url)
            .send()
            .await
            .expect("metrics")
            .text()
            .await
            .expect("text");
        open(&text)
    };
    // The download has begun (its first bytes came), so it was accepted and counted; the
    // test then stops reading and waits for the server to give up on it.
    let mut first = [0u8; 1024];
    let began = std::io::Read::read(&mut stalled, &mut first).expect("first bytes");
    assert!(first[..began].starts_with(b"HTTP/1.1 200"));
    let started = Instant::now();
    loop {
        if scrape().await == 1.0 {
            break;
        }
        assert!(
            started.elapsed() < Duration::from_secs(8),
            "the stalled connection was never dropped"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    // The socket is closed on the server side: reading drains what was buffered, then EOF,
    // well short of the 64 MiB the whole answer would be.
    let (rest, _) = read_until_closed(&mut stalled, Duration::from_secs(5));
    assert!(
        began + rest.len() < 64 * 1024 * 1024,
        "the whole file was sent"
    );
    drop(stalled);
}

/// The server's send queue (bytes not yet acknowledged or not yet sent) on the connection
/// from local port `client` to `server`, from `ss`.
fn server_send_queue(server: u16, client: u16) -> Option<u64> {
    let out = std::process::Command::new("ss")
        .args(["-tnH", "state", "established"])
        .arg(format!("( sport = :{server} and dport = :{client} )"))
        .output()
        .ok()?;
    let text = String::from_utf8_lossy(&out.stdout);
    // Columns (with a state filter): Recv-Q Send-Q Local Peer.
    text.lines().next()?.split_whitespace().nth(1)?.parse().ok()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_client_that_reads_slowly_is_not_sent_megabytes_ahead_into_kernel_memory() {
    // Thousands of slow listeners each given megabytes of send buffer pushed the kernel
    // into TCP memory pressure, where it resets connections (TcpExtTCPAbortOnMemory).
    let env = TestEnv::shared_with(&["cache.file_total_bytes=0"]).await;
    let (id, _) = env.track("big.mp3", &pattern(16 * 1024 * 1024, 3)).await;
    let server = env.musicd().await;
    let mut client = TcpStream::connect(server.addr).expect("connect");
    let client_port = client.local_addr().expect("local").port();
    client
        .write_all(
            format!(
                "GET /musicdb/{}/x.mp3 HTTP/1.1\r\nHost: x\r\n\r\n",
                id.to_hex()
            )
            .as_bytes(),
        )
        .expect("write");
    let mut first = [0u8; 1024];
    let began = client.read(&mut first).expect("first bytes");
    assert!(first[..began].starts_with(b"HTTP/1.1 200"));
    // The client stops reading: its receive window fills, and the server sends no more
    // than its socket may hold unsent. Wait until that queue stops moving.
    let port = server.addr.port();
    let mut last = None;
    crate::harness::eventually(Duration::from_secs(10), "the send queue settles", || {
        let now = server_send_queue(port, client_port);
        let settled = now.is_some() && now == last;
        last = now;
        async move {
            tokio::time::sleep(Duration::from_millis(50)).await;
            settled
        }
    })
    .await;
    let queued = last.expect("a queue");
    // The default bound is 16 KiB unsent; one sendfile may pass it by a segment.
    assert!(
        queued <= 256 * 1024,
        "{queued} bytes queued for a client that reads nothing"
    );
    // And the rest still comes once the client reads.
    let mut total = began as u64;
    let mut buffer = vec![0u8; 256 * 1024];
    while total < 16 * 1024 * 1024 {
        match client.read(&mut buffer) {
            Ok(0) | Err(_) => break,
            Ok(n) => total += n as u64,
        }
    }
    assert!(total >= 16 * 1024 * 1024, "{total}");
}

/// A keep-alive connection waiting for its next request closes as soon as the server
/// stops, not when its idle timeout or the stop's deadline (5 s in tests) runs out: the
/// stop wakes every waiting connection, though each registers for it only once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_idle_keep_alive_connection_closes_as_soon_as_the_server_stops() {
    use crate::harness::raw::{connect, read_responses, read_to_close};
    let env = TestEnv::shared_with(&["limits.idle_timeout_secs=600"]).await;
    let server = env.musicd().await;
    let addr = server.addr;
    let mut idle = tokio::task::spawn_blocking(move || {
        let mut idle = connect(addr);
        // Two answers, so the connection has waited between requests and after them.
        for _ in 0..2 {
            idle.write_all(b"GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n")
                .expect("write");
            let answers = read_responses(&mut idle, 1, &[false]);
            assert_eq!(answers[0].status, 200);
        }
        idle
    })
    .await
    .expect("client thread");
    let stopping = tokio::spawn(server.shutdown());
    let (rest, took) = tokio::task::spawn_blocking(move || {
        idle.set_read_timeout(Some(Duration::from_secs(60)))
            .expect("timeout");
        let started = Instant::now();
        let (rest, error) = read_to_close(&mut idle);
        assert!(error.is_none(), "closed with {error:?}, not cleanly");
        (rest, started.elapsed())
    })
    .await
    .expect("client thread");
    assert!(rest.is_empty(), "{}", String::from_utf8_lossy(&rest));
    assert!(
        took < Duration::from_secs(4),
        "the idle connection was closed {took:?} after the stop began"
    );
    stopping.await.expect("stopped");
}
