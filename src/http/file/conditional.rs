//! Validators (ETag, Last-Modified) and conditional request evaluation (RFC 9110 §13).
//!
//! [`evaluate`] applies the preconditions in the order §13.2.2 prescribes: If-Match, else
//! If-Unmodified-Since (412 on failure); If-None-Match, else If-Modified-Since (304 for
//! GET/HEAD); then If-Range decides whether a Range header is honoured at all. A stale
//! If-Range validator means the client's partial copy is of another version of the file,
//! so it must get the whole current file (200), never a 206 it would splice into old bytes.

use std::time::{Duration, SystemTime, UNIX_EPOCH};

/// The validators of one version of a file.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Validators {
    /// Strong entity tag, quoted: `"<mtime-ns hex>-<size hex>"`.
    pub etag: String,
    /// Modification time truncated to whole seconds (HTTP dates have no more).
    pub last_modified: SystemTime,
}

impl Validators {
    /// Validators from a file's size and modification time.
    pub fn new(size: u64, modified: SystemTime) -> Validators {
        let since_epoch = modified
            .duration_since(UNIX_EPOCH)
            .unwrap_or(Duration::ZERO);
        Validators {
            etag: format!("\"{:x}-{:x}\"", since_epoch.as_nanos(), size),
            last_modified: UNIX_EPOCH + Duration::from_secs(since_epoch.as_secs()),
        }
    }

    /// `Last-Modified` header value.
    pub(crate) fn last_modified_header(&self) -> String {
        httpdate::fmt_http_date(self.last_modified)
    }
}

/// The conditional headers of a request, as raw values.
#[derive(Debug, Default, Clone, Copy)]
pub struct Preconditions<'a> {
    /// `If-Match`.
    pub if_match: Option<&'a str>,
    /// `If-None-Match`.
    pub if_none_match: Option<&'a str>,
    /// `If-Modified-Since`.
    pub if_modified_since: Option<&'a str>,
    /// `If-Unmodified-Since`.
    pub if_unmodified_since: Option<&'a str>,
    /// `If-Range`.
    pub if_range: Option<&'a str>,
}

/// What the preconditions say.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Verdict {
    /// Serve, honouring a Range header.
    Proceed,
    /// Serve the whole file: If-Range did not match, so any Range header is ignored.
    IgnoreRange,
    /// 304 Not Modified.
    NotModified,
    /// 412 Precondition Failed.
    PreconditionFailed,
}

/// Evaluates the preconditions of a GET or HEAD request against the current validators.
pub fn evaluate(pre: &Preconditions<'_>, current: &Validators) -> Verdict {
    if let Some(if_match) = pre.if_match {
        if !etag_list_matches(if_match, &current.etag, Comparison::Strong) {
            return Verdict::PreconditionFailed;
        }
    } else if let Some(date) = pre.if_unmodified_since.and_then(parse_date)
        && current.last_modified > date
    {
        return Verdict::PreconditionFailed;
    }

    if let Some(if_none_match) = pre.if_none_match {
        if etag_list_matches(if_none_match, &current.etag, Comparison::Weak) {
            return Verdict::NotModified;
        }
    } else if let Some(date) = pre.if_modified_since.and_then(parse_date)
        && current.last_modified <= date
    {
        return Verdict::NotModified;
    }

    match pre.if_range {
        Some(value) if !if_range_matches(value.trim(), current) => Verdict::IgnoreRange,
        _ => Verdict::Proceed,
    }
}

#[derive(Clone, Copy, PartialEq, Eq)]
enum Comparison {
    Strong,
    Weak,
}

/// `*` or a comma-separated list of entity tags, compared with `etag`.
fn etag_list_matches(list: &str, etag: &str, comparison: Comparison) -> bool {
    if list.trim() == "*" {
        return true;
    }
    list.split(',').map(str::trim).any(|candidate| {
        let (weak, opaque) = match candidate.strip_prefix("W/") {
            Some(rest) => (true, rest),
            None => (false, candidate),
        };
        if weak && comparison == Comparison::Strong {
            return false;
        }
        opaque == etag.trim_start_matches("W/")
    })
}

/// If-Range carries one validator: a strong ETag, or a date that must equal Last-Modified.
fn if_range_matches(value: &str, current: &Validators) -> bool {
    if value.starts_with('"') {
        return value == current.etag;
    }
    if value.starts_with("W/") {
        // A weak tag can never match for If-Range (§13.1.5).
        return false;
    }
    parse_date(value).is_some_and(|date| date == current.last_modified)
}

fn parse_date(value: &str) -> Option<SystemTime> {
    httpdate::parse_http_date(value.trim()).ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn current() -> Validators {
        Validators::new(1234, UNIX_EPOCH + Duration::from_millis(1_700_000_000_500))
    }

    fn verdict(pre: Preconditions<'_>) -> Verdict {
        evaluate(&pre, &current())
    }

    fn date(offset_secs: i64) -> String {
        let base = UNIX_EPOCH + Duration::from_secs(1_700_000_000);
        let t = if offset_secs >= 0 {
            base + Duration::from_secs(offset_secs as u64)
        } else {
            base - Duration::from_secs((-offset_secs) as u64)
        };
        httpdate::fmt_http_date(t)
    }

    #[test]
    fn etag_changes_with_size_and_mtime_and_last_modified_drops_subseconds() {
        let a = current();
        let b = Validators::new(1235, UNIX_EPOCH + Duration::from_millis(1_700_000_000_500));
        let c = Validators::new(1234, UNIX_EPOCH + Duration::from_millis(1_700_000_000_600));
        assert_ne!(a.etag, b.etag);
        assert_ne!(a.etag, c.etag);
        assert!(a.etag.starts_with('"') && a.etag.ends_with('"'));
        assert_eq!(a.last_modified_header(), date(0));
    }

    #[test]
    fn if_none_match_gives_304_with_weak_comparison() {
        let etag = current().etag;
        let weak = format!("W/{etag}");
        let list = format!("\"other\", {etag}");
        assert_eq!(
            verdict(Preconditions {
                if_none_match: Some(&etag),
                ..Default::default()
            }),
            Verdict::NotModified
        );
        assert_eq!(
            verdict(Preconditions {
                if_none_match: Some(&weak),
                ..Default::default()
            }),
            Verdict::NotModified
        );
        assert_eq!(
            verdict(Preconditions {
                if_none_match: Some(&list),
                ..Default::default()
            }),
            Verdict::NotModified
        );
        assert_eq!(
            verdict(Preconditions {
                if_none_match: Some("*"),
                ..Default::default()
            }),
            Verdict::NotModified
        );
        assert_eq!(
            verdict(Preconditions {
                if_none_match: Some("\"x\""),
                ..Default::default()
            }),
            Verdict::Proceed
        );
    }

    #[test]
    fn if_modified_since_gives_304_unless_if_none_match_is_present() {
        let same = date(0);
        let earlier = date(-10);
        assert_eq!(
            verdict(Preconditions {
                if_modified_since: Some(&same),
                ..Default::default()
            }),
            Verdict::NotModified
        );
        assert_eq!(
            verdict(Preconditions {
                if_modified_since: Some(&earlier),
                ..Default::default()
            }),
            Verdict::Proceed
        );
        // If-None-Match takes precedence even when it does not match.
        assert_eq!(
            verdict(Preconditions {
                if_none_match: Some("\"x\""),
                if_modified_since: Some(&same),
                ..Default::default()
            }),
            Verdict::Proceed
        );
        assert_eq!(
            verdict(Preconditions {
                if_modified_since: Some("garbage"),
                ..Default::default()
            }),
            Verdict::Proceed
        );
    }

    #[test]
    fn if_match_and_if_unmodified_since_give_412() {
        let etag = current().etag;
        let weak = format!("W/{etag}");
        assert_eq!(
            verdict(Preconditions {
                if_match: Some(&etag),
                ..Default::default()
            }),
            Verdict::Proceed
        );
        assert_eq!(
            verdict(Preconditions {
                if_match: Some("*"),
                ..Default::default()
            }),
            Verdict::Proceed
        );
        assert_eq!(
            verdict(Preconditions {
                if_match: Some("\"x\""),
                ..Default::default()
            }),
            Verdict::PreconditionFailed
        );
        assert_eq!(
            verdict(Preconditions {
                if_match: Some(&weak),
                ..Default::default()
            }),
            Verdict::PreconditionFailed
        );
        let earlier = date(-10);
        let later = date(10);
        assert_eq!(
            verdict(Preconditions {
                if_unmodified_since: Some(&earlier),
                ..Default::default()
            }),
            Verdict::PreconditionFailed
        );
        assert_eq!(
            verdict(Preconditions {
                if_unmodified_since: Some(&later),
                ..Default::default()
            }),
            Verdict::Proceed
        );
    }

    #[test]
    fn if_range_with_a_stale_validator_ignores_the_range() {
        let etag = current().etag;
        let weak = format!("W/{etag}");
        let same = date(0);
        let other = date(-1);
        assert_eq!(
            verdict(Preconditions {
                if_range: Some(&etag),
                ..Default::default()
            }),
            Verdict::Proceed
        );
        assert_eq!(
            verdict(Preconditions {
                if_range: Some(&same),
                ..Default::default()
            }),
            Verdict::Proceed
        );
        assert_eq!(
            verdict(Preconditions {
                if_range: Some("\"old\""),
                ..Default::default()
            }),
            Verdict::IgnoreRange
        );
        assert_eq!(
            verdict(Preconditions {
                if_range: Some(&weak),
                ..Default::default()
            }),
            Verdict::IgnoreRange
        );
        assert_eq!(
            verdict(Preconditions {
                if_range: Some(&other),
                ..Default::default()
            }),
            Verdict::IgnoreRange
        );
    }
}
