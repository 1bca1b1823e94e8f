//! Any bytes off a socket: the request-head parser never panics, never claims more bytes
//! than it was given, bounds the bodies it accepts, and routes to the track route only
//! paths the route matcher accepted.
#![no_main]

use libfuzzer_sys::fuzz_target;
use musicd::http::h1::head::{
    BodyFraming, HeadLimits, LogFields, MAX_DISCARDED_BODY, Target, parse_head,
};

fn track(path: &str) -> Option<String> {
    path.strip_prefix("/musicdb/").map(str::to_string)
}

fuzz_target!(|bytes: &[u8]| {
    let limits = HeadLimits {
        max_uri_bytes: 512,
        max_header_bytes: 4096,
    };
    if let Ok(Some(head)) = parse_head(bytes, limits, true, track) {
        assert!(head.len <= bytes.len());
        assert!(head.len <= limits.max_header_bytes);
        if let BodyFraming::Length(length) = head.body {
            assert!(length > 0 && length <= MAX_DISCARDED_BODY);
        }
        let target = LogFields::get(bytes, Some(head.log.target));
        assert!(!target.is_empty() && head.log.target.1 as usize <= head.len);
        if let Target::Track { .. } = head.target {
            let text = String::from_utf8_lossy(target);
            assert!(text.starts_with("/musicdb/") || text.contains("://"), "{text}");
        }
    }
});
