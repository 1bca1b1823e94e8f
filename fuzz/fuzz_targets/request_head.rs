//! Any bytes off a socket: the request-head parser never panics, never claims more bytes
//! than it was given, bounds the bodies it accepts, and the header lines the service reads
//! from the head's bytes are exactly the ones httparse parsed.
#![no_main]

use std::net::IpAddr;
use std::time::Instant;

use libfuzzer_sys::fuzz_target;
use musicd::http::h1::head::{BodyFraming, HeadLimits, MAX_DISCARDED_BODY, parse_head};

fuzz_target!(|bytes: &[u8]| {
    let limits = HeadLimits {
        max_uri_bytes: 512,
        max_header_bytes: 4096,
    };
    let Ok(Some(head)) = parse_head(bytes, limits) else {
        return;
    };
    assert!(head.len <= bytes.len());
    assert!(head.len <= limits.max_header_bytes);
    if let BodyFraming::Length(length) = head.body {
        assert!(length > 0 && length <= MAX_DISCARDED_BODY);
    }
    let raw = &bytes[..head.len];
    let request = head.request(raw, IpAddr::from([127, 0, 0, 1]), Instant::now());
    assert!(!request.target.is_empty());
    assert!(request.path == "*" || request.path.starts_with('/'), "{}", request.path);
    let mut slots = [httparse::EMPTY_HEADER; 100];
    let mut parsed = httparse::Request::new(&mut slots);
    // A later HTTP/1.x minor is parsed as 1.1 by musicd; httparse refuses it, so those
    // heads are compared only when httparse takes them as they are.
    if let Ok(httparse::Status::Complete(_)) = parsed.parse(raw) {
        let expected: Vec<(&[u8], &[u8])> = parsed
            .headers
            .iter()
            .map(|h| (h.name.as_bytes(), h.value))
            .collect();
        let got: Vec<(&[u8], &[u8])> = request.headers().collect();
        assert_eq!(got, expected);
    }
});
