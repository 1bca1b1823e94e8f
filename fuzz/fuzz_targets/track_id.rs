//! Any URL segment: the id parser never panics and accepts exactly 24 hex digits, which
//! round-trip to the same (lower-case) id.
#![no_main]

use libfuzzer_sys::fuzz_target;
use musicd::http::parse_track_id;

fuzz_target!(|segment: &str| {
    let parsed = parse_track_id(segment);
    let shaped = segment.len() == 24 && segment.bytes().all(|b| b.is_ascii_hexdigit());
    assert_eq!(parsed.is_some(), shaped);
    if let Some(id) = parsed {
        assert_eq!(id.to_hex(), segment.to_ascii_lowercase());
    }
});
