//! Any bytes on a connection: musicd answers with well-framed responses (never
//! Content-Length and Transfer-Encoding together, no body after HEAD, 204 or 304), never
//! more of them than the input held complete requests (plus one refusal), and stays up.
//!
//! Each input goes to two servers on loopback ports, and both are checked by the response
//! checker the conformance tests use:
//! * the real one (`musicd::server::Server`), with backends that are down (Redis and
//!   MongoDB on port 1): a valid track id gets its 503 quickly, and everything else is
//!   decided before any backend is asked;
//! * h1 alone, behind a stub service whose answers take every form a payload can
//!   (memory, file segments, a streamed body of unknown length, paced bytes), chosen by
//!   the request's path, so the framing of each is fuzzed without the application.
#![no_main]

use std::io::{Read, Write};
use std::net::{Shutdown, SocketAddr, TcpStream};
use std::sync::{Arc, LazyLock};
use std::time::Duration;

use axum::http::StatusCode;
use bytes::Bytes;
use libfuzzer_sys::fuzz_target;
use musicd::http::accept::{Admission, accept_loop};
use musicd::http::h1::Settings;
use musicd::http::service::{
    Answer, Exchange, Identity, Pacing, Payload, Request, Segment, Service,
};

#[path = "../../tests/integration/harness/wire_check.rs"]
mod wire_check;

static SERVER: LazyLock<SocketAddr> = LazyLock::new(start_server);
static STUB: LazyLock<SocketAddr> = LazyLock::new(start_stub);

/// Answers by the path's last segment, never looking anything up.
struct Stub {
    file: Arc<std::fs::File>,
    opened: Identity,
}

impl Service for Stub {
    type Context = ();

    async fn call(&self, request: &Request<'_>) -> (Answer, ()) {
        let status = StatusCode::OK;
        let lines = Bytes::new();
        let answer = match request.path.rsplit('/').next().unwrap_or_default() {
            "file" => Answer::new(
                status,
                lines,
                Payload::File {
                    file: Arc::clone(&self.file),
                    segments: vec![
                        Segment::Bytes(Bytes::from_static(b"--part\r\n")),
                        Segment::File {
                            offset: 10,
                            len: 100,
                        },
                    ],
                    opened: self.opened,
                },
            ),
            "stream" => {
                let chunks = request.headers().count();
                let frames = (0..chunks).map(|i| {
                    Ok::<_, std::convert::Infallible>(http_body::Frame::data(Bytes::from(
                        format!("{i};"),
                    )))
                });
                let body = http_body_util::StreamBody::new(futures_util::stream::iter(frames));
                Answer::new(status, lines, Payload::Body(axum::body::Body::new(body)))
            }
            "paced" => {
                let mut answer =
                    Answer::new(status, lines, Payload::Bytes(Bytes::from(vec![b'p'; 3000])));
                answer.pacing = Pacing::new(1 << 20, 1000);
                answer
            }
            "empty" => Answer::new(StatusCode::NO_CONTENT, lines, Payload::Empty),
            _ => Answer::new(
                status,
                lines,
                Payload::Bytes(Bytes::copy_from_slice(request.target.as_bytes())),
            ),
        };
        (answer, ())
    }

    fn finish(&self, _: &Exchange<'_>, _: Option<()>) {}

    fn file_changed(&self, _: &std::fs::File) {}
}

fn start_stub() -> SocketAddr {
    let path = std::env::temp_dir().join(format!("musicd-fuzz-stub-{}", std::process::id()));
    std::fs::write(&path, vec![b'f'; 4096]).expect("stub file");
    let file = std::fs::File::open(&path).expect("open stub file");
    let opened = Identity::of(&file.metadata().expect("metadata"));
    let stub = Stub {
        file: Arc::new(file),
        opened,
    };
    let config = musicd::config::Config::defaults_with_roots(vec![std::env::temp_dir()])
        .expect("config");
    on_loopback(move |listener| async move {
        let (settings, admission) = (
            Settings::from_config(&config),
            Admission::from_config(&config),
        );
        accept_loop(listener, stub, settings, admission, std::future::pending()).await;
    })
}

/// Runs `serve` on a listener bound to a free loopback port, on a thread of its own; the
/// port.
fn on_loopback<F, Fut>(serve: F) -> SocketAddr
where
    F: FnOnce(tokio::net::TcpListener) -> Fut + Send + 'static,
    Fut: std::future::Future<Output = ()>,
{
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .expect("runtime");
        runtime.block_on(async move {
            let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
                .await
                .expect("bind");
            tx.send(listener.local_addr().expect("addr")).expect("send addr");
            serve(listener).await;
        });
    });
    rx.recv().expect("server address")
}

fn start_server() -> SocketAddr {
    let media = std::env::temp_dir().join(format!("musicd-fuzz-{}", std::process::id()));
    std::fs::create_dir_all(&media).expect("media dir");
    let media = std::fs::canonicalize(&media).expect("canonical media");
    let mut config = musicd::config::Config::defaults_with_roots(vec![media]).expect("config");
    config.redis.target = musicd::redis_link::RedisTarget::Single("redis://127.0.0.1:1".into());
    config.redis.timeout = Duration::from_millis(20);
    config.mongodb.uri = "mongodb://127.0.0.1:1/".into();
    config.mongodb.timeout = Duration::from_millis(20);
    on_loopback(move |listener| async move {
        let server = musicd::server::Server::build(&config).await.expect("server");
        let listeners = musicd::server::Listeners {
            http: listener,
            ops: None,
        };
        let _ = server.serve(listeners, std::future::pending()).await;
    })
}

fn exchange(addr: SocketAddr, input: &[u8]) -> Vec<u8> {
    let mut stream = TcpStream::connect(addr).expect("connect");
    stream
        .set_read_timeout(Some(Duration::from_secs(10)))
        .expect("timeout");
    let _ = stream.write_all(input);
    let _ = stream.shutdown(Shutdown::Write);
    let mut output = Vec::new();
    let _ = stream.read_to_end(&mut output);
    output
}

fuzz_target!(|input: &[u8]| {
    for addr in [*SERVER, *STUB] {
        let output = exchange(addr, input);
        if let Err(violation) = wire_check::check_exchange(input, &output) {
            panic!(
                "{violation}\nserver: {}\ninput: {:?}\noutput: {:?}",
                if addr == *SERVER { "musicd" } else { "stub" },
                String::from_utf8_lossy(input),
                String::from_utf8_lossy(&output)
            );
        }
        let alive = exchange(
            addr,
            b"GET /healthz HTTP/1.1\r\nHost: fuzz\r\nConnection: close\r\n\r\n",
        );
        assert!(alive.starts_with(b"HTTP/1.1 200 "), "the server stopped answering");
    }
});
