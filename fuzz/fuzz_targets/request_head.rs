//! Any bytes off a socket: the request-head parser never panics, never claims more bytes
//! than it was given, and routes to the track route only GET/HEAD requests whose path
//! the route matcher accepted.
#![no_main]

use libfuzzer_sys::fuzz_target;
use musicd::http::wire::{HeadLimits, Target, parse_head};

fn track(path: &str) -> Option<&str> {
    path.strip_prefix("/musicdb/")
}

fuzz_target!(|bytes: &[u8]| {
    let limits = HeadLimits {
        max_uri_bytes: 512,
        max_header_bytes: 4096,
    };
    if let Ok(Some(head)) = parse_head(bytes, limits, true, track) {
        assert!(head.len <= bytes.len());
        assert!(head.len <= limits.max_header_bytes);
        assert!(head.body_length <= musicd::http::wire::MAX_DISCARDED_BODY);
        if let Target::Track { .. } = head.target {
            assert!(head.method == "GET" || head.method == "HEAD");
            assert!(head.log_path.starts_with("/musicdb/"));
        }
    }
});
