//! Any conditional headers: evaluation never panics, and a validator matching the current
//! ETag exactly always behaves as the RFC says.
#![no_main]

use std::time::{Duration, UNIX_EPOCH};

use libfuzzer_sys::fuzz_target;
use musicd::http::file::conditional::{Preconditions, Validators, Verdict, evaluate};

fuzz_target!(|input: (&str, &str, &str, &str, &str, u32, u32)| {
    let (a, b, c, d, e, size, secs) = input;
    let current = Validators::new(u64::from(size), UNIX_EPOCH + Duration::from_secs(u64::from(secs)));
    let pre = Preconditions {
        if_match: Some(a),
        if_none_match: Some(b),
        if_modified_since: Some(c),
        if_unmodified_since: Some(d),
        if_range: Some(e),
    };
    let _ = evaluate(&pre, &current);
    let exact = Preconditions {
        if_none_match: Some(&current.etag),
        if_range: Some(&current.etag),
        ..Preconditions::default()
    };
    assert_eq!(evaluate(&exact, &current), Verdict::NotModified);
    let range = Preconditions {
        if_match: Some(&current.etag),
        if_range: Some(&current.etag),
        ..Preconditions::default()
    };
    assert_eq!(evaluate(&range, &current), Verdict::Proceed);
});
