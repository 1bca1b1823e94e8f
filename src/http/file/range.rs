//! `Range: bytes=...` parsing and the decision what to send (RFC 9110 §14).
//!
//! Pure functions over the header value and the file size, so they are unit-tested, fuzzed
//! and property-tested without a socket. Syntax errors make the header ignored (a 200 with
//! the whole file), as RFC 9110 allows; only a well-formed set of ranges none of which
//! overlaps the file is a 416.

use std::ops::Range;

/// What to send in answer to a `Range` header.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum RangeDecision {
    /// No (usable) Range header: the whole file, 200.
    Full,
    /// One range, 206 with `Content-Range`.
    Single(Range<u64>),
    /// Several disjoint ranges in ascending order, 206 `multipart/byteranges`.
    Multi(Vec<Range<u64>>),
    /// Nothing satisfiable: 416 with `Content-Range: bytes */size`.
    Unsatisfiable,
}

/// One range as written, before it meets the file size.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Spec {
    /// `a-b` or `a-`.
    From { first: u64, last: Option<u64> },
    /// `-n`: the last n bytes.
    Suffix(u64),
}

/// Decides what to send for `header` (the raw `Range` value) on a file of `size` bytes.
///
/// More than `max_ranges` ranges, or ranges that together ask for more bytes than the file
/// holds (overlapping or repeated ranges: the amplification trick), get the whole file once
/// instead: never more bytes than a plain 200.
pub fn decide(header: &str, size: u64, max_ranges: usize) -> RangeDecision {
    let Some(specs) = parse(header) else {
        return RangeDecision::Full;
    };
    if specs.len() > max_ranges {
        return RangeDecision::Full;
    }
    let mut ranges: Vec<Range<u64>> = specs.iter().filter_map(|s| resolve(*s, size)).collect();
    if ranges.is_empty() {
        return RangeDecision::Unsatisfiable;
    }
    if ranges.len() == 1 {
        return RangeDecision::Single(ranges.remove(0));
    }
    let requested: u64 = ranges
        .iter()
        .map(|r| r.end - r.start)
        .fold(0, u64::saturating_add);
    if requested > size {
        return RangeDecision::Full;
    }
    ranges.sort_by_key(|r| r.start);
    let mut merged: Vec<Range<u64>> = Vec::with_capacity(ranges.len());
    for range in ranges {
        match merged.last_mut() {
            // Adjacent or overlapping: one part instead of two.
            Some(last) if range.start <= last.end => last.end = last.end.max(range.end),
            _ => merged.push(range),
        }
    }
    if merged.len() == 1 {
        RangeDecision::Single(merged.remove(0))
    } else {
        RangeDecision::Multi(merged)
    }
}

/// Parses `bytes=a-b, c-, -n`; `None` for anything malformed or another unit.
fn parse(header: &str) -> Option<Vec<Spec>> {
    let (unit, set) = header.trim().split_once('=')?;
    if !unit.trim().eq_ignore_ascii_case("bytes") {
        return None;
    }
    let mut specs = Vec::new();
    for item in set.split(',') {
        let item = item.trim();
        // Empty list elements are allowed by the ABNF (`1#range-spec` tolerates them).
        if item.is_empty() {
            continue;
        }
        let (first, last) = item.split_once('-')?;
        let (first, last) = (first.trim(), last.trim());
        let spec = if first.is_empty() {
            Spec::Suffix(digits(last)?)
        } else {
            let first = digits(first)?;
            let last = if last.is_empty() {
                None
            } else {
                Some(digits(last)?)
            };
            if last.is_some_and(|l| l < first) {
                return None;
            }
            Spec::From { first, last }
        };
        specs.push(spec);
    }
    if specs.is_empty() { None } else { Some(specs) }
}

fn digits(s: &str) -> Option<u64> {
    if s.is_empty() || !s.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    // More digits than u64 holds still means "past the end": saturate instead of failing.
    Some(s.parse::<u64>().unwrap_or(u64::MAX))
}

/// The byte range a spec selects in a file of `size` bytes, if any.
fn resolve(spec: Spec, size: u64) -> Option<Range<u64>> {
    match spec {
        Spec::From { first, last } => {
            if first >= size {
                return None;
            }
            let end = last.map_or(size, |l| l.saturating_add(1).min(size));
            Some(first..end)
        }
        Spec::Suffix(n) => {
            if n == 0 || size == 0 {
                return None;
            }
            Some(size - n.min(size)..size)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use RangeDecision::*;

    #[test]
    fn the_three_single_range_forms() {
        assert_eq!(decide("bytes=0-99", 1000, 8), Single(0..100));
        assert_eq!(decide("bytes=900-", 1000, 8), Single(900..1000));
        assert_eq!(decide("bytes=-100", 1000, 8), Single(900..1000));
        assert_eq!(decide("bytes=-5000", 1000, 8), Single(0..1000));
        assert_eq!(decide("bytes=990-5000", 1000, 8), Single(990..1000));
    }

    #[test]
    fn unsatisfiable_only_when_nothing_overlaps() {
        assert_eq!(decide("bytes=1000-", 1000, 8), Unsatisfiable);
        assert_eq!(decide("bytes=-0", 1000, 8), Unsatisfiable);
        assert_eq!(decide("bytes=0-", 0, 8), Unsatisfiable);
        assert_eq!(decide("bytes=1000-1100, 5-9", 1000, 8), Single(5..10));
    }

    #[test]
    fn malformed_headers_are_ignored() {
        for header in [
            "bytes=",
            "bytes=a-b",
            "bytes=5-1",
            "items=0-1",
            "bytes 0-1",
            "bytes=--1",
            "0-1",
            "bytes=1-2-3",
            "bytes=+1-2",
        ] {
            assert_eq!(decide(header, 1000, 8), Full, "{header}");
        }
    }

    #[test]
    fn several_ranges_are_sorted_and_coalesced() {
        assert_eq!(
            decide("bytes=500-599, 0-99", 1000, 8),
            Multi(vec![0..100, 500..600])
        );
        assert_eq!(decide("bytes=0-99, 100-199", 1000, 8), Single(0..200));
        assert_eq!(
            decide("bytes=0-99, 50-149, 300-", 1000, 8),
            Multi(vec![0..150, 300..1000])
        );
    }

    #[test]
    fn too_many_or_amplifying_ranges_get_the_whole_file() {
        assert_eq!(decide("bytes=0-0,2-2,4-4", 1000, 2), Full);
        // Ten copies of the whole file would be ten times the bytes of a plain 200.
        let header = format!("bytes={}", ["0-"; 10].join(","));
        assert_eq!(decide(&header, 1000, 16), Full);
    }

    #[test]
    fn huge_numbers_do_not_overflow() {
        assert_eq!(
            decide("bytes=0-99999999999999999999999", 10, 8),
            Single(0..10)
        );
        assert_eq!(
            decide("bytes=99999999999999999999999-", 10, 8),
            Unsatisfiable
        );
        assert_eq!(
            decide("bytes=-99999999999999999999999", 10, 8),
            Single(0..10)
        );
    }
}
