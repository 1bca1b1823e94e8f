//! Any bytes on a connection: musicd answers with well-framed responses (never
//! Content-Length and Transfer-Encoding together, no body after HEAD, 204 or 304), never
//! more of them than the input held complete requests (plus one refusal), and stays up.
//!
//! The server is the real one (`musicd::server::Server`) on a loopback port, with backends
//! that are down (Redis and MongoDB on port 1): a valid track id gets its 503 quickly, and
//! everything else is decided before any backend is asked. The response checker is the
//! one the conformance tests use.
#![no_main]

use std::io::{Read, Write};
use std::net::{Shutdown, SocketAddr, TcpStream};
use std::sync::LazyLock;
use std::time::Duration;

use libfuzzer_sys::fuzz_target;

#[path = "../../tests/integration/harness/wire_check.rs"]
mod wire_check;

static SERVER: LazyLock<SocketAddr> = LazyLock::new(start_server);

fn start_server() -> SocketAddr {
    let media = std::env::temp_dir().join(format!("musicd-fuzz-{}", std::process::id()));
    std::fs::create_dir_all(&media).expect("media dir");
    let media = std::fs::canonicalize(&media).expect("canonical media");
    let mut config = musicd::config::Config::defaults_with_roots(vec![media]).expect("config");
    config.redis.target = musicd::redis_link::RedisTarget::Single("redis://127.0.0.1:1".into());
    config.redis.timeout = Duration::from_millis(20);
    config.mongodb.uri = "mongodb://127.0.0.1:1/".into();
    config.mongodb.timeout = Duration::from_millis(20);
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
            let server = musicd::server::Server::build(&config).await.expect("server");
            let listeners = musicd::server::Listeners {
                http: listener,
                ops: None,
            };
            let _ = server.serve(listeners, std::future::pending()).await;
        });
    });
    rx.recv().expect("server address")
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
    let addr = *SERVER;
    let output = exchange(addr, input);
    if let Err(violation) = wire_check::check_exchange(input, &output) {
        panic!(
            "{violation}\ninput: {:?}\noutput: {:?}",
            String::from_utf8_lossy(input),
            String::from_utf8_lossy(&output)
        );
    }
    let alive = exchange(
        addr,
        b"GET /healthz HTTP/1.1\r\nHost: fuzz\r\nConnection: close\r\n\r\n",
    );
    assert!(alive.starts_with(b"HTTP/1.1 200 "), "the server stopped answering");
});
