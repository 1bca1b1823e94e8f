//! Raw TCP to a server: bytes in, responses out, read with [`super::wire_check`].

use std::io::{Read, Write};
use std::net::{Shutdown, SocketAddr, TcpStream};
use std::time::{Duration, Instant};

use super::wire_check::{self, Response};

/// A connection with a read timeout, so a test never hangs on a silent server.
pub fn connect(addr: SocketAddr) -> TcpStream {
    let stream = TcpStream::connect(addr).expect("connect");
    stream
        .set_read_timeout(Some(Duration::from_secs(10)))
        .expect("read timeout");
    let _ = stream.set_nodelay(true);
    stream
}

/// Reads until the server closes. The error, if the read ended in one (a reset).
pub fn read_to_close(stream: &mut TcpStream) -> (Vec<u8>, Option<std::io::Error>) {
    let mut all = Vec::new();
    let mut chunk = [0u8; 65536];
    loop {
        match stream.read(&mut chunk) {
            Ok(0) => return (all, None),
            Ok(n) => all.extend_from_slice(&chunk[..n]),
            Err(err) => return (all, Some(err)),
        }
    }
}

/// Sends `input`, half-closes, reads everything the server sends until it closes, and
/// checks it ([`wire_check::check_exchange`]); the read must end in a clean close, not a
/// reset. The final responses.
pub fn exchange(addr: SocketAddr, input: &[u8]) -> Vec<Response> {
    let (output, error) = send_and_read(addr, input);
    assert!(
        error.is_none(),
        "the answer was lost to {error:?}; got {:?}",
        String::from_utf8_lossy(&output)
    );
    checked(input, &output)
}

/// Sends `input`, half-closes and reads until the server closes: what it sent, and the
/// error the read ended in, if any.
pub fn send_and_read(addr: SocketAddr, input: &[u8]) -> (Vec<u8>, Option<std::io::Error>) {
    let mut stream = connect(addr);
    // A server that refuses early may close before it read everything: not our failure.
    let _ = stream.write_all(input);
    let _ = stream.shutdown(Shutdown::Write);
    read_to_close(&mut stream)
}

/// Sends `input` without half-closing (a proxy like nginx may take a half-close for a
/// client that left and cut the answer) and reads until the server closes or is silent
/// for `quiet`.
pub fn send_and_read_open(addr: SocketAddr, input: &[u8], quiet: Duration) -> Vec<u8> {
    let mut stream = connect(addr);
    stream.set_read_timeout(Some(quiet)).expect("timeout");
    let _ = stream.write_all(input);
    let (output, _) = read_to_close(&mut stream);
    output
}

/// [`wire_check::check_exchange`], panicking with both sides on a violation.
pub fn checked(input: &[u8], output: &[u8]) -> Vec<Response> {
    match wire_check::check_exchange(input, output) {
        Ok(finals) => finals,
        Err(violation) => panic!(
            "{violation}\ninput: {:?}\noutput: {:?}",
            String::from_utf8_lossy(input),
            String::from_utf8_lossy(output)
        ),
    }
}

/// Reads until `count` responses (interim ones included) are complete; `head[i]`: the
/// i-th final response answers a HEAD. Panics if the server closes first.
pub fn read_responses(stream: &mut TcpStream, count: usize, head: &[bool]) -> Vec<Response> {
    let mut buffer = Vec::new();
    let mut chunk = [0u8; 65536];
    loop {
        let (responses, _) =
            wire_check::leading_responses(&buffer, |i| head.get(i).copied().unwrap_or(false))
                .unwrap_or_else(|violation| panic!("{violation}"));
        if responses.len() >= count {
            return responses;
        }
        let n = stream.read(&mut chunk).expect("read");
        assert!(
            n > 0,
            "closed after {} responses: {:?}",
            responses.len(),
            String::from_utf8_lossy(&buffer)
        );
        buffer.extend_from_slice(&chunk[..n]);
    }
}

/// Whether the server closed the connection within `within` (reading and dropping what it
/// sends meanwhile); what it sent.
pub fn closes_within(stream: &mut TcpStream, within: Duration) -> (bool, Vec<u8>) {
    let deadline = Instant::now() + within;
    let mut all = Vec::new();
    let mut chunk = [0u8; 4096];
    while Instant::now() < deadline {
        let left = deadline.saturating_duration_since(Instant::now());
        stream
            .set_read_timeout(Some(left.max(Duration::from_millis(1))))
            .expect("timeout");
        match stream.read(&mut chunk) {
            Ok(0) => return (true, all),
            Ok(n) => all.extend_from_slice(&chunk[..n]),
            Err(err)
                if err.kind() == std::io::ErrorKind::WouldBlock
                    || err.kind() == std::io::ErrorKind::TimedOut => {}
            Err(_) => return (true, all),
        }
    }
    (false, all)
}
