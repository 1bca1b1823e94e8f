//! RFC 9112 / RFC 9110 conformance over raw TCP: every MUST a server has, each test named
//! after the rule it checks. Every exchange is read with the strict response reader of
//! `crate::harness::wire_check` (well framed, no body after HEAD/204/304, never more responses
//! than requests), so each test also checks framing.

use std::io::Write;
use std::time::{Duration, Instant};

use crate::harness::raw::{closes_within, connect, exchange, read_responses};
use crate::harness::{TestEnv, corpus, pattern};

/// A musicd with one 300 KiB track (over the in-memory limit: sent from the open file).
async fn server_with_track(
    overrides: &[&str],
) -> (TestEnv, crate::harness::Musicd, String, Vec<u8>) {
    let env = TestEnv::shared_with(overrides).await;
    let bytes = pattern(300 * 1024 + 7, 41);
    let (id, _) = env.track("big.mp3", &bytes).await;
    let server = env.musicd().await;
    (env, server, id.to_hex(), bytes)
}

async fn blocking<T: Send + 'static>(work: impl FnOnce() -> T + Send + 'static) -> T {
    tokio::task::spawn_blocking(work)
        .await
        .expect("client thread")
}

/// RFC 9112 §3.2: "A server MUST respond with a 400 (Bad Request) status code to any
/// HTTP/1.1 request message that lacks a Host header field and to any request message that
/// contains more than one Host header field line or a Host header field with an invalid
/// field value."
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn rfc9112_3_2_host_missing_repeated_or_invalid_is_400() {
    let (_env, server, id, bytes) = server_with_track(&[]).await;
    let addr = server.addr;
    blocking(move || {
        let path = format!("/musicdb/{id}/a.mp3");
        for head in [
            format!("GET {path} HTTP/1.1\r\n\r\n"),
            format!("GET {path} HTTP/1.1\r\nHost: a\r\nHost: a\r\n\r\n"),
            format!("GET {path} HTTP/1.1\r\nHost: a b\r\n\r\n"),
            format!("GET {path} HTTP/1.1\r\nHost: a/b\r\n\r\n"),
            format!("GET {path} HTTP/1.0\r\nHost: a\r\nHost: b\r\n\r\n"),
        ] {
            let answers = exchange(addr, head.as_bytes());
            assert_eq!(answers.len(), 1, "{head:?}");
            assert_eq!(answers[0].status, 400, "{head:?}");
            assert!(String::from_utf8_lossy(&answers[0].body).contains("Host"));
        }
        // HTTP/1.0 needs none; an empty one is valid (a target without authority).
        for head in [
            format!("GET {path} HTTP/1.0\r\n\r\n"),
            format!("GET {path} HTTP/1.1\r\nHost:\r\nConnection: close\r\n\r\n"),
            format!("GET {path} HTTP/1.1\r\nHost: [::1]:8080\r\nConnection: close\r\n\r\n"),
        ] {
            let answers = exchange(addr, head.as_bytes());
            assert_eq!(answers[0].status, 200, "{head:?}");
            assert_eq!(answers[0].body, bytes);
        }
    })
    .await;
}

/// RFC 9112 §3.2.2: "a server MUST accept the absolute-form in requests"; the target's
/// host is not ours to check, its path is routed like any other.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn rfc9112_3_2_2_absolute_form_targets_are_served_like_origin_form() {
    let (_env, server, id, bytes) = server_with_track(&[]).await;
    let addr = server.addr;
    blocking(move || {
        let request = format!(
            "GET http://music.example:8080/musicdb/{id}/a.mp3 HTTP/1.1\r\nHost: x\r\n\r\n\
             GET HTTP://other/musicdb/{id} HTTP/1.1\r\nHost: x\r\nRange: bytes=10-19\r\n\r\n\
             GET http://x/healthz?probe=1 HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n"
        );
        let answers = exchange(addr, request.as_bytes());
        assert_eq!(answers.len(), 3);
        assert_eq!(answers[0].status, 200);
        assert_eq!(answers[0].body, bytes);
        assert_eq!(answers[1].status, 206);
        assert_eq!(answers[1].body, &bytes[10..20]);
        assert_eq!(answers[2].status, 200);
        assert!(String::from_utf8_lossy(&answers[2].body).contains("\"ok\""));
    })
    .await;
}

/// The bug behind RFC 9112 §6.1 ("A server MUST NOT send a response containing
/// Transfer-Encoding" with Content-Length): a percent-escaped id went through another path
/// that sent both for files from the open-file cache. One path now serves every track
/// URL, and the connection stays in step.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn rfc9112_6_1_percent_escaped_ids_get_one_framing_and_keep_the_connection_in_step() {
    let (_env, server, id, bytes) = server_with_track(&[]).await;
    let addr = server.addr;
    blocking(move || {
        // Escape the last digit: %3X is the ASCII digit X; the hex letters a-f are %61-%66.
        let last = id.chars().last().expect("digit");
        let escaped = format!("{}%{:02x}", &id[..23], last as u32);
        let mut stream = connect(addr);
        for round in 0..3 {
            // The first round opens the file, the next ones answer from the open-file
            // cache, where the wrong framing was.
            let request = format!(
                "GET /musicdb/{escaped}/a.mp3 HTTP/1.1\r\nHost: x\r\n\r\n\
                 GET /musicdb/{escaped}/a.mp3 HTTP/1.1\r\nHost: x\r\nRange: bytes=100-199\r\n\r\n\
                 HEAD /musicdb/{escaped} HTTP/1.1\r\nHost: x\r\n\r\n\
                 GET /musicdb/{id}/plain.mp3 HTTP/1.1\r\nHost: x\r\n\r\n"
            );
            stream.write_all(request.as_bytes()).expect("write");
            let answers = read_responses(&mut stream, 4, &[false, false, true, false]);
            assert_eq!(answers[0].status, 200, "round {round}");
            assert_eq!(answers[0].body, bytes, "round {round}");
            assert_eq!(answers[1].status, 206, "round {round}");
            assert_eq!(answers[1].body, &bytes[100..200], "round {round}");
            assert_eq!(
                answers[2].header("content-length"),
                Some(bytes.len().to_string().as_str())
            );
            assert_eq!(answers[3].body, bytes, "round {round}");
            for answer in &answers {
                assert_eq!(answer.count("transfer-encoding"), 0, "{answer:?}");
                assert_eq!(answer.count("content-length"), 1, "{answer:?}");
            }
        }
        // An escape that is not an id is the usual 400, with no database query.
        let answers = exchange(
            addr,
            b"GET /musicdb/%zz%ff/a.mp3 HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n",
        );
        assert_eq!(answers[0].status, 400);
    })
    .await;
}

/// RFC 9110 §10.1.1: "An origin server MUST, upon receiving an HTTP/1.1 (or later)
/// request that has a method, target URI, and complete header section that contains a
/// 100-continue expectation and an indication that request content will follow, either
/// send an immediate response with a final status code ... or send an immediate 100
/// (Continue) response"; §15.2: "A server MUST NOT send a 1xx response to an HTTP/1.0
/// client"; an expectation it does not meet: 417.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn rfc9110_10_1_1_expect_100_continue_is_answered_before_the_body() {
    let (_env, server, id, bytes) = server_with_track(&[]).await;
    let addr = server.addr;
    blocking(move || {
        let mut stream = connect(addr);
        let head = format!(
            "GET /musicdb/{id}/a.mp3 HTTP/1.1\r\nHost: x\r\nExpect: 100-continue\r\nContent-Length: 5\r\n\r\n"
        );
        stream.write_all(head.as_bytes()).expect("write");
        let interim = read_responses(&mut stream, 1, &[]);
        assert_eq!(interim[0].status, 100, "the client waits for this");
        stream.write_all(b"hello").expect("body");
        let answers = read_responses(&mut stream, 1, &[false]);
        assert_eq!(answers[0].status, 200);
        assert_eq!(answers[0].body, bytes);

        // HTTP/1.0: no 1xx, the final answer once the body is in.
        let mut stream = connect(addr);
        let head = format!(
            "GET /musicdb/{id}/a.mp3 HTTP/1.0\r\nExpect: 100-continue\r\nContent-Length: 5\r\n\r\n"
        );
        stream.write_all(head.as_bytes()).expect("write");
        let (closed, early) = closes_within(&mut stream, Duration::from_millis(300));
        assert!(!closed && early.is_empty(), "nothing before the body: {early:?}");
        stream.write_all(b"hello").expect("body");
        let answers = read_responses(&mut stream, 1, &[false]);
        assert_eq!(answers[0].status, 200);

        let answers = exchange(
            addr,
            b"GET /healthz HTTP/1.1\r\nHost: x\r\nExpect: 200-ok\r\n\r\n",
        );
        assert_eq!(answers[0].status, 417);
    })
    .await;
}

/// RFC 9112 §9.5 / RFC 9110 §15.5.9: the head and the body each have their own clock. A
/// head that arrives in two segments after a request whose body came late is answered
/// (it used to inherit the old head's start and be closed), and a body trickled slowly is
/// cut at `body_read_timeout` with a 408.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn rfc9112_9_5_head_and_body_have_separate_clocks() {
    let (_env, server, id, _) = server_with_track(&[
        "limits.header_read_timeout_secs=2",
        "limits.body_read_timeout_secs=2",
    ])
    .await;
    let addr = server.addr;
    blocking(move || {
        let mut stream = connect(addr);
        stream
            .write_all(b"GET /healthz HTTP/1.1\r\nHost: x\r\nContent-Length: 3\r\n\r\n")
            .expect("head");
        std::thread::sleep(Duration::from_millis(500));
        stream.write_all(b"abc").expect("body");
        assert_eq!(read_responses(&mut stream, 1, &[false])[0].status, 200);
        std::thread::sleep(Duration::from_millis(1000));
        stream
            .write_all(format!("GET /musicdb/{id} HTTP/1.1\r\n").as_bytes())
            .expect("first half");
        std::thread::sleep(Duration::from_millis(1200));
        stream.write_all(b"Host: x\r\n\r\n").expect("second half");
        let answers = read_responses(&mut stream, 1, &[false]);
        assert_eq!(answers[0].status, 200, "the second head has its own clock");

        // A body trickled one byte every 200 ms: cut at 2 s, not after its 100 bytes.
        let mut stream = connect(addr);
        stream
            .write_all(b"GET /healthz HTTP/1.1\r\nHost: x\r\nContent-Length: 100\r\n\r\n")
            .expect("head");
        let started = Instant::now();
        let mut answered = Vec::new();
        for _ in 0..40 {
            if stream.write_all(b"x").is_err() {
                break;
            }
            let (closed, sent) = closes_within(&mut stream, Duration::from_millis(200));
            answered.extend(sent);
            if closed {
                break;
            }
        }
        let elapsed = started.elapsed();
        assert!(
            elapsed >= Duration::from_millis(1800) && elapsed < Duration::from_secs(5),
            "closed after {elapsed:?}"
        );
        let text = String::from_utf8_lossy(&answered);
        assert!(text.starts_with("HTTP/1.1 408 "), "{text}");
    })
    .await;
}

/// RFC 9112 §7.1: "A recipient MUST be able to parse and decode the chunked transfer
/// coding": a chunked body (extensions, trailers) is read and dropped, and the request
/// pipelined after it is answered.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn rfc9112_7_1_chunked_request_bodies_are_read_to_their_end() {
    let (_env, server, id, bytes) = server_with_track(&[]).await;
    let addr = server.addr;
    blocking(move || {
        let request = format!(
            "GET /healthz HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n\
             5;name=value\r\nGET /\r\n3\r\nabc\r\n0\r\nTrailer: 1\r\n\r\n\
             GET /musicdb/{id}/a.mp3 HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n"
        );
        let answers = exchange(addr, request.as_bytes());
        assert_eq!(answers.len(), 2, "the chunk data is not a request");
        assert_eq!(answers[0].status, 200);
        assert_eq!(answers[1].body, bytes);
    })
    .await;
}

/// RFC 9112 §6.1: "A server that receives a request message with a transfer coding it
/// does not understand SHOULD respond with 501"; RFC 9110 §15.6.2: a method the server
/// does not implement is a 501; §15.5.6: "The origin server MUST generate an Allow header
/// field in a 405 response".
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn rfc9110_15_6_2_unknown_codings_and_methods_are_501_and_405s_say_allow() {
    let (_env, server, id, _) = server_with_track(&[]).await;
    let addr = server.addr;
    blocking(move || {
        let answers = exchange(
            addr,
            b"GET /healthz HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: gzip, chunked\r\n\r\n0\r\n\r\n",
        );
        assert_eq!(answers[0].status, 501);
        for method in ["BREW", "CONNECT"] {
            let target = if method == "CONNECT" { "x:443".to_string() } else { format!("/musicdb/{id}") };
            let answers = exchange(
                addr,
                format!("{method} {target} HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n").as_bytes(),
            );
            assert_eq!(answers[0].status, 501, "{method}");
        }
        for path in [format!("/musicdb/{id}/a.mp3"), "/healthz".to_string()] {
            let answers = exchange(
                addr,
                format!("DELETE {path} HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n").as_bytes(),
            );
            assert_eq!(answers[0].status, 405, "{path}");
            let allow = answers[0].header("allow").expect("Allow").to_ascii_uppercase();
            assert!(allow.contains("GET") && allow.contains("HEAD"), "{allow}");
        }
        let answers = exchange(addr, b"OPTIONS * HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n");
        assert_eq!(answers[0].status, 200);
        assert!(answers[0].header("allow").is_some());
    })
    .await;
}

/// RFC 9112 §9.6: a server that receives "close" "MUST initiate closure of the connection
/// after it sends the final response" and "MUST NOT process any further requests"; §9.6
/// also warns that closing with unread input can reset the answer away, so the close is
/// staged (half-close, drain, close). The same holds after an error answer.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn rfc9112_9_6_close_is_staged_and_later_requests_are_not_answered() {
    let (_env, server, id, bytes) = server_with_track(&[]).await;
    let addr = server.addr;
    blocking(move || {
        // 256 KiB of pipelined requests after the one that says close: unread input the
        // server must drain rather than reset.
        let after = format!("GET /musicdb/{id}/a.mp3 HTTP/1.1\r\nHost: x\r\n\r\n").repeat(4000);
        for first in [
            format!("GET /musicdb/{id}/a.mp3 HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n"),
            format!("GET /musicdb/{id}/a.mp3 HTTP/1.1\r\n\r\n"),
        ] {
            let input = format!("{first}{after}");
            let answers = exchange(addr, input.as_bytes());
            assert_eq!(answers.len(), 1, "nothing after the close is answered");
            assert!(
                answers[0]
                    .header("connection")
                    .is_some_and(|v| v.contains("close"))
            );
            if answers[0].status == 200 {
                assert_eq!(answers[0].body, bytes);
            } else {
                assert_eq!(answers[0].status, 400, "no Host");
            }
        }
    })
    .await;
}

/// RFC 9112 §6.3 rule 1 and RFC 9110 §9.3.2, §15.4.5: a response to HEAD and a 304 end at
/// their head; HEAD says the length GET would send. The request pipelined after each is
/// read from the right place.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn rfc9112_6_3_head_and_304_answers_have_no_body() {
    let (_env, server, id, bytes) = server_with_track(&[]).await;
    let addr = server.addr;
    blocking(move || {
        let mut stream = connect(addr);
        let get = format!("GET /musicdb/{id}/a.mp3 HTTP/1.1\r\nHost: x\r\n\r\n");
        stream.write_all(get.as_bytes()).expect("write");
        let etag = read_responses(&mut stream, 1, &[false])[0]
            .header("etag")
            .expect("etag")
            .to_string();
        let batch = format!(
            "HEAD /musicdb/{id}/a.mp3 HTTP/1.1\r\nHost: x\r\n\r\n\
             GET /musicdb/{id}/a.mp3 HTTP/1.1\r\nHost: x\r\nIf-None-Match: {etag}\r\n\r\n\
             HEAD /healthz HTTP/1.1\r\nHost: x\r\n\r\n\
             {get}"
        );
        stream.write_all(batch.as_bytes()).expect("write");
        let answers = read_responses(&mut stream, 4, &[true, false, true, false]);
        assert_eq!(answers[0].status, 200);
        assert_eq!(
            answers[0].header("content-length"),
            Some(bytes.len().to_string().as_str())
        );
        assert_eq!(answers[1].status, 304);
        assert_eq!(answers[1].count("content-length"), 0);
        assert_eq!(answers[2].status, 200);
        let healthz_length: usize = answers[2]
            .header("content-length")
            .expect("HEAD /healthz says its length")
            .parse()
            .expect("number");
        assert!(healthz_length > 10);
        assert_eq!(answers[3].body, bytes, "the stream stayed in step");
    })
    .await;
}

/// RFC 9112 §6.3, §11.2 (request smuggling), §2.2, §5.1, §5.2: every head whose framing or
/// syntax is in doubt is refused with its status and the connection closed, so the request
/// smuggled after it is never answered.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn rfc9112_11_2_smuggling_vectors_are_refused_and_close_the_connection() {
    let (_env, server, id, _) = server_with_track(&[]).await;
    let addr = server.addr;
    blocking(move || {
        let vectors = corpus::refused(&format!("/musicdb/{id}/a.mp3"));
        assert!(vectors.len() >= 40);
        for vector in vectors {
            let answers = exchange(addr, &vector.input);
            assert_eq!(
                answers.len(),
                1,
                "{}: the smuggled request was answered",
                vector.name
            );
            assert_eq!(answers[0].status, vector.status, "{}", vector.name);
            assert!(
                answers[0]
                    .header("connection")
                    .is_some_and(|v| v.contains("close")),
                "{}",
                vector.name
            );
        }
    })
    .await;
}

/// The odd-but-valid corpus, and random mutations of it, of the refused corpus and of the
/// `connection` fuzz target's seeds: whatever comes in, what goes out is well framed and
/// never more than the requests. This is the suite's share of that fuzz target (same
/// checker, same seeds, a live backend); `scripts/fuzz.sh` runs the coverage-guided fuzzer
/// for longer. `MUSICD_MUTATION_ROUNDS` runs more rounds.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn any_bytes_get_well_framed_answers_and_never_more_than_asked() {
    let (_env, server, id, _) = server_with_track(&[]).await;
    let addr = server.addr;
    blocking(move || {
        let track = format!("/musicdb/{id}/a.mp3");
        for (name, input) in corpus::odd(&track) {
            let answers = exchange(addr, &input);
            assert!(!answers.is_empty(), "{name}: no answer");
        }
        let mut seeds: Vec<Vec<u8>> = corpus::odd(&track).into_iter().map(|(_, i)| i).collect();
        seeds.extend(corpus::refused(&track).into_iter().map(|v| v.input));
        seeds.extend(fuzz_seeds(&id));
        let rounds: usize = std::env::var("MUSICD_MUTATION_ROUNDS")
            .ok()
            .and_then(|rounds| rounds.parse().ok())
            .unwrap_or(5000);
        let mut state = 0x9e37_79b9_7f4a_7c15u64;
        let mut next = move || {
            state ^= state << 13;
            state ^= state >> 7;
            state ^= state << 17;
            state
        };
        for round in 0..rounds {
            let mut input = seeds[(next() as usize) % seeds.len()].clone();
            for _ in 0..=(next() % 4) {
                let at = (next() as usize) % (input.len() + 1);
                match next() % 4 {
                    0 if at < input.len() => input[at] = next() as u8,
                    1 if at < input.len() => {
                        input.remove(at);
                    }
                    2 => input.insert(at, b"\r\n:; \t0"[(next() % 7) as usize]),
                    _ => {
                        let other = &seeds[(next() as usize) % seeds.len()];
                        let cut = (next() as usize) % (other.len() + 1);
                        input.splice(at..at, other[..cut].iter().copied());
                    }
                }
            }
            let (output, _) = crate::harness::raw::send_and_read(addr, &input);
            if let Err(violation) = crate::harness::wire_check::check_exchange(&input, &output) {
                panic!(
                    "round {round}: {violation}\ninput: {:?}\noutput: {:?}",
                    String::from_utf8_lossy(&input),
                    String::from_utf8_lossy(&output)
                );
            }
        }
        // And the server is still there.
        let answers = exchange(
            addr,
            b"GET /healthz HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n",
        );
        assert_eq!(answers[0].status, 200);
    })
    .await;
}

/// The `connection` fuzz target's seeds (`fuzz/seeds/connection`), each track id in them
/// replaced by `id` so that their requests reach a track that exists.
fn fuzz_seeds(id: &str) -> Vec<Vec<u8>> {
    let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("fuzz/seeds/connection");
    let mut seeds = Vec::new();
    for entry in std::fs::read_dir(&dir).expect("fuzz/seeds/connection") {
        let bytes = std::fs::read(entry.expect("seed").path()).expect("read seed");
        let mut seed = Vec::with_capacity(bytes.len());
        let mut rest = &bytes[..];
        while let Some(at) = rest.windows(9).position(|w| w == b"/musicdb/") {
            let start = at + 9;
            seed.extend_from_slice(&rest[..start]);
            let hex = rest[start..]
                .iter()
                .take(24)
                .take_while(|b| b.is_ascii_hexdigit())
                .count();
            if hex == 24 {
                seed.extend_from_slice(id.as_bytes());
            } else {
                seed.extend_from_slice(&rest[start..start + hex]);
            }
            rest = &rest[start + hex..];
        }
        seed.extend_from_slice(rest);
        seeds.push(seed);
    }
    assert!(seeds.len() >= 9, "the fuzz seeds are missing from {dir:?}");
    assert!(
        seeds
            .iter()
            .any(|seed| seed.windows(id.len()).any(|w| w == id.as_bytes())),
        "no fuzz seed names a track"
    );
    seeds
}

/// RFC 9112 §3: a request line that is not `method SP request-target SP HTTP-version`
/// is a malformed message: 400, not 505 (RFC 9110 §15.6.6 keeps 505 for a major version the
/// server does not support). RFC 9110 §2.5: a later 1.x minor version is answered as the
/// highest 1.x musicd speaks. RFC 9112 §3.2: no request target carries a fragment, and an
/// IP literal in an absolute-form authority must be a valid address.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn rfc9112_3_request_lines_malformed_400_later_minor_served_fragments_refused() {
    let (_env, server, id, bytes) = server_with_track(&[]).await;
    let addr = server.addr;
    blocking(move || {
        let path = format!("/musicdb/{id}/a.mp3");
        let status_of = |head: String| {
            let answers = exchange(addr, head.as_bytes());
            assert_eq!(answers.len(), 1, "{head:?}");
            answers[0].status
        };
        for line in [
            format!("G ET {path} HTTP/1.0"),
            format!("GET {path}  HTTP/1.1"),
            format!("GET {path} HTTP/10.0"),
            format!("GET {path} HTTP/1.32"),
            format!("GET {path} HTTP/\r\r1.1"),
        ] {
            assert_eq!(
                status_of(format!("{line}\r\nHost: a\r\n\r\n")),
                400,
                "{line:?}"
            );
        }
        assert_eq!(
            status_of(format!("GET {path} HTTP/2.0\r\nHost: a\r\n\r\n")),
            505
        );
        for target in [
            format!("{path}#t=10"),
            format!("http://[4712::abcd::]{path}"),
        ] {
            assert_eq!(
                status_of(format!("GET {target} HTTP/1.1\r\nHost: a\r\n\r\n")),
                400,
                "{target}"
            );
        }
        let answers = exchange(
            addr,
            format!("GET {path} HTTP/1.2\r\nHost: a\r\nConnection: close\r\n\r\n").as_bytes(),
        );
        assert_eq!(answers[0].status, 200);
        assert_eq!(answers[0].body, bytes);
    })
    .await;
}
