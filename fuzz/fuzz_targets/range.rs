//! Any Range header against any file size: never panics, and every range it returns lies
//! inside the file, sorted and disjoint, with no more bytes than the file has.
#![no_main]

use libfuzzer_sys::fuzz_target;
use musicd::http::file::range::{RangeDecision, decide};

fuzz_target!(|input: (&str, u32, u8)| {
    let (header, size, max) = input;
    let size = u64::from(size);
    match decide(header, size, usize::from(max).max(1)) {
        RangeDecision::Full | RangeDecision::Unsatisfiable => {}
        RangeDecision::Single(r) => assert!(r.start < r.end && r.end <= size),
        RangeDecision::Multi(ranges) => {
            assert!(ranges.len() >= 2);
            let mut end = 0;
            let mut total = 0;
            for (i, r) in ranges.iter().enumerate() {
                assert!(r.start < r.end && r.end <= size);
                assert!(i == 0 || r.start > end, "overlapping or adjacent parts");
                end = r.end;
                total += r.end - r.start;
            }
            assert!(total <= size);
        }
    }
});
