//! HTTP/1.1 as musicd speaks it on the wire, over raw TCP: pipelining, HTTP/1.0, request
//! bodies, and large files sent from the open-file cache with sendfile or copied.

use std::io::Write;

use crate::harness::raw::{connect, read_responses, read_to_close};
use crate::harness::{TestEnv, fetch_with, http_get, pattern};
use reqwest::StatusCode;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pipelined_requests_are_answered_in_order_in_one_stream() {
    let env = TestEnv::new().await;
    let small = pattern(3000, 1);
    let big = pattern(3 * 1024 * 1024 + 17, 2);
    let (small_id, _) = env.track("small.mp3", &small).await;
    let (big_id, _) = env.track("big.mp3", &big).await;
    let server = env.musicd().await;
    let addr = server.addr;
    tokio::task::spawn_blocking(move || {
        let mut stream = connect(addr);
        // Five requests in one write: memory file, sendfile range, HEAD, router, 404.
        let batch = format!(
            "GET /musicdb/{small_id}/a.mp3 HTTP/1.1\r\nHost: x\r\n\r\n\
             GET /musicdb/{big_id}/b.mp3 HTTP/1.1\r\nHost: x\r\nRange: bytes=1000000-2999999\r\n\r\n\
             HEAD /musicdb/{big_id}/b.mp3 HTTP/1.1\r\nHost: x\r\n\r\n\
             GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n\
             GET /musicdb/{}/c.mp3 HTTP/1.1\r\nHost: x\r\n\r\n",
            mongodb::bson::oid::ObjectId::new()
        );
        stream.write_all(batch.as_bytes()).expect("write");
        let answers = read_responses(&mut stream, 5, &[false, false, true, false, false]);
        assert_eq!(answers[0].status, 200);
        assert_eq!(answers[0].body, small);
        assert_eq!(answers[1].status, 206);
        assert_eq!(answers[1].body, &big[1_000_000..3_000_000]);
        assert_eq!(
            answers[1].header("content-range"),
            Some(format!("bytes 1000000-2999999/{}", big.len()).as_str())
        );
        assert_eq!(answers[2].status, 200);
        assert_eq!(
            answers[2].header("content-length"),
            Some(big.len().to_string().as_str())
        );
        assert!(answers[2].body.is_empty());
        assert_eq!(answers[3].status, 200);
        assert!(String::from_utf8_lossy(&answers[3].body).contains("\"ok\""));
        assert_eq!(answers[4].status, 404);
        // Every answer has its own id.
        let ids: std::collections::HashSet<_> =
            answers.iter().filter_map(|a| a.header("x-request-id")).collect();
        assert_eq!(ids.len(), 5);
        // And the connection is still usable.
        stream
            .write_all(format!("GET /musicdb/{small_id}/a.mp3 HTTP/1.1\r\nHost: x\r\n\r\n").as_bytes())
            .expect("write");
        assert_eq!(read_responses(&mut stream, 1, &[false])[0].body, small);
    })
    .await
    .expect("client");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn http_1_0_closes_unless_asked_and_bodies_are_framed_safely() {
    let small = pattern(2000, 3);
    let (_env, server, id, _) = TestEnv::serving("one.mp3", &small).await;
    let addr = server.addr;
    tokio::task::spawn_blocking(move || {
        // HTTP/1.0 without keep-alive: one answer, then the server closes.
        let mut stream = connect(addr);
        stream
            .write_all(format!("GET /musicdb/{id}/a.mp3 HTTP/1.0\r\n\r\n").as_bytes())
            .expect("write");
        let all = read_to_close(&mut stream).0;
        assert!(
            all.starts_with(b"HTTP/1.1 200"),
            "{}",
            String::from_utf8_lossy(&all)
        );
        assert!(all.ends_with(&small));
        assert!(String::from_utf8_lossy(&all).contains("connection: close"));

        // HTTP/1.0 with keep-alive: two answers on one connection.
        let mut stream = connect(addr);
        let request = format!("GET /musicdb/{id}/a.mp3 HTTP/1.0\r\nConnection: keep-alive\r\n\r\n");
        stream.write_all(request.as_bytes()).expect("write");
        let first = read_responses(&mut stream, 1, &[false]);
        assert_eq!(first[0].header("connection"), Some("keep-alive"));
        stream.write_all(request.as_bytes()).expect("write");
        assert_eq!(read_responses(&mut stream, 1, &[false])[0].body, small);

        // A GET with a small body: the body is skipped, the next request is read correctly.
        let mut stream = connect(addr);
        stream
            .write_all(
                format!(
                    "GET /musicdb/{id}/a.mp3 HTTP/1.1\r\nHost: m\r\nContent-Length: 5\r\n\r\nhello\
                     GET /musicdb/{id}/a.mp3 HTTP/1.1\r\nHost: m\r\n\r\n"
                )
                .as_bytes(),
            )
            .expect("write");
        let answers = read_responses(&mut stream, 2, &[false, false]);
        assert!(answers.iter().all(|a| a.status == 200 && a.body == small));

        // Conflicting framing: 400 and close (no smuggling).
        for framing in [
            "Transfer-Encoding: chunked\r\nContent-Length: 5\r\n",
            "Content-Length: 3\r\nContent-Length: 4\r\n",
        ] {
            let mut stream = connect(addr);
            stream
                .write_all(
                    format!("GET /healthz HTTP/1.1\r\nHost: m\r\n{framing}\r\n0\r\n\r\n")
                        .as_bytes(),
                )
                .expect("write");
            let all = String::from_utf8_lossy(&read_to_close(&mut stream).0).to_string();
            assert!(all.starts_with("HTTP/1.1 400"), "{framing}: {all}");
            assert!(all.contains("connection: close"), "{all}");
        }

        // Not HTTP at all.
        let mut stream = connect(addr);
        stream
            .write_all(b"\x16\x03\x01 hello\r\n\r\n")
            .expect("write");
        let all = String::from_utf8_lossy(&read_to_close(&mut stream).0).to_string();
        assert!(all.starts_with("HTTP/1.1 400"), "{all}");
    })
    .await
    .expect("client");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn large_files_from_the_open_file_cache_follow_replacements() {
    // Both ways of sending a large body: sendfile (default) and copying.
    for zero_copy in ["zero_copy=true", "zero_copy=false"] {
        let env = TestEnv::shared_with(&[zero_copy]).await;
        let v1 = pattern(2 * 1024 * 1024 + 5, 4);
        let v2 = pattern(1024 * 1024 + 3, 5);
        let (id, path) = env.track("large.mp3", &v1).await;
        let server = env.musicd().await;
        let url = server.track_url(&id);
        for _ in 0..3 {
            let body = http_get(&url).await;
            assert_eq!(body.status(), StatusCode::OK);
            assert_eq!(body.bytes().await.expect("body"), v1, "{zero_copy}");
        }
        // Replaced by rename: the open descriptor still points at v1; the cache must see
        // the new inode and open v2.
        let tmp = path.with_extension("tmp");
        std::fs::write(&tmp, &v2).expect("write");
        std::fs::rename(&tmp, &path).expect("rename");
        let response = http_get(&url).await;
        assert_eq!(
            response.headers()["content-length"],
            v2.len().to_string().as_str()
        );
        assert_eq!(response.bytes().await.expect("body"), v2, "{zero_copy}");
        // A range of the new version.
        let (status, _, body) = fetch_with(&url, &[("range", "bytes=-1000")]).await;
        assert_eq!(status, StatusCode::PARTIAL_CONTENT);
        assert_eq!(body, &v2[v2.len() - 1000..]);
        // Gone: 404, not the descriptor's old bytes.
        std::fs::remove_file(&path).expect("rm");
        let gone = http_get(&url).await;
        assert_eq!(gone.status(), StatusCode::NOT_FOUND, "{zero_copy}");
    }
}
