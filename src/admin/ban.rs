//! Purges that reach the HTTP caches in front: `BAN` requests to every varnish named in
//! `[http_caches] ban_urls`, with `X-Ban-Url` a regular expression over the track URLs of
//! the purged ids (`deploy/varnish.vcl` bans the cached objects whose URL matches).
//!
//! A Redis glob under the key prefix becomes a URL regex under every route prefix:
//! `track_6b0e*` bans `^(/musicdb|/stream/musicdb)/6b0e[^/?]*([/?]|$)`. A pattern that does
//! not start with the key prefix names no track URL and bans nothing.

use serde::Serialize;

use super::AdminError;

/// The URL regex of one track id under these route prefixes.
pub(crate) fn id_regex(prefixes: &[String], id: &str) -> String {
    format!("{}{}([/?]|$)", prefix_group(prefixes), regex_escape(id))
}

/// The URL regex of several track ids (an alternation) under these route prefixes.
pub(crate) fn ids_regex(prefixes: &[String], ids: &[String]) -> String {
    let ids: Vec<String> = ids.iter().map(|id| regex_escape(id)).collect();
    format!("{}({})([/?]|$)", prefix_group(prefixes), ids.join("|"))
}

/// The URL regex of every track URL under these route prefixes.
pub(crate) fn everything_regex(prefixes: &[String]) -> String {
    prefix_group(prefixes)
}

/// The URL regex of the ids a Redis glob under `key_prefix` matches; `None` when the
/// glob is not under the key prefix (it names no track).
pub(crate) fn glob_regex(prefixes: &[String], key_prefix: &str, glob: &str) -> Option<String> {
    let ids = glob.strip_prefix(key_prefix)?;
    let mut out = prefix_group(prefixes);
    let mut chars = ids.chars().peekable();
    while let Some(c) = chars.next() {
        match c {
            '*' => out.push_str("[^/?]*"),
            '?' => out.push_str("[^/?]"),
            '[' => {
                // A glob class is a regex class: copy it through to its end.
                out.push('[');
                for inner in chars.by_ref() {
                    if inner == ']' {
                        break;
                    }
                    if inner == '\\' || inner == '/' {
                        out.push('\\');
                    }
                    out.push(inner);
                }
                out.push(']');
            }
            '\\' => {
                if let Some(next) = chars.next() {
                    out.push_str(&regex_escape(&next.to_string()));
                }
            }
            other => out.push_str(&regex_escape(&other.to_string())),
        }
    }
    out.push_str("([/?]|$)");
    Some(out)
}

fn prefix_group(prefixes: &[String]) -> String {
    let alternatives: Vec<String> = prefixes.iter().map(|p| regex_escape(p)).collect();
    format!("^({})/", alternatives.join("|"))
}

fn regex_escape(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    for c in text.chars() {
        if "\\.+*?()|[]{}^$#&-~".contains(c) {
            out.push('\\');
        }
        out.push(c);
    }
    out
}

/// Sends `BAN` with `X-Ban-Url: regex` to a cache at `base` (`http://host:port`); the
/// status it answered.
pub(crate) fn ban(base: &str, regex: &str) -> Result<u16, AdminError> {
    crate::blocking_http::request(base, "BAN", "/", &[("X-Ban-Url", regex)])
        .map(|a| a.status)
        .map_err(AdminError::from)
}

/// What one cache did with a ban.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct BanOutcome {
    /// The cache (`[http_caches] ban_urls`).
    pub(crate) url: String,
    /// The URL regex banned.
    pub(crate) regex: String,
    /// The status it answered (200: taken).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(crate) status: Option<u16>,
    /// Why it could not be asked.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(crate) error: Option<String>,
    /// Not sent: a dry run.
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    pub(crate) dry_run: bool,
}

impl BanOutcome {
    /// Whether the cache took the ban (a dry run takes nothing and fails nothing).
    pub(crate) fn taken(&self) -> bool {
        self.dry_run || self.status == Some(200)
    }

    /// One line: `ban: url regex -> status`.
    pub(crate) fn render(&self) -> String {
        match (self.status, &self.error) {
            (Some(status), _) => format!("ban: {} {} -> {status}", self.url, self.regex),
            (None, Some(error)) => format!("ban: {} failed: {error}", self.url),
            (None, None) => format!("ban: {} {} (dry run)", self.url, self.regex),
        }
    }
}

/// Bans `regex` in every cache of `urls` (none when `regex` is `None`: the purge named no
/// track URL).
pub(crate) fn ban_everywhere(
    urls: &[String],
    regex: Option<&str>,
    dry_run: bool,
) -> Vec<BanOutcome> {
    let Some(regex) = regex else {
        return Vec::new();
    };
    urls.iter()
        .map(|url| {
            let mut outcome = BanOutcome {
                url: url.clone(),
                regex: regex.to_string(),
                status: None,
                error: None,
                dry_run,
            };
            if !dry_run {
                match ban(url, regex) {
                    Ok(status) => outcome.status = Some(status),
                    Err(err) => outcome.error = Some(err.to_string()),
                }
            }
            outcome
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn prefixes() -> Vec<String> {
        vec!["/musicdb".into(), "/stream/musicdb".into()]
    }

    #[test]
    fn ids_and_globs_become_url_regexes_under_every_prefix() {
        assert_eq!(
            id_regex(&prefixes(), "6b0dc37d3ba0d873deac9381"),
            "^(/musicdb|/stream/musicdb)/6b0dc37d3ba0d873deac9381([/?]|$)"
        );
        assert_eq!(
            glob_regex(&prefixes(), "track_", "track_6b0e*").as_deref(),
            Some("^(/musicdb|/stream/musicdb)/6b0e[^/?]*([/?]|$)")
        );
        assert_eq!(
            glob_regex(&prefixes(), "track_", "track_*").as_deref(),
            Some("^(/musicdb|/stream/musicdb)/[^/?]*([/?]|$)")
        );
        assert_eq!(
            glob_regex(&prefixes(), "track_", "track_[ab]?").as_deref(),
            Some("^(/musicdb|/stream/musicdb)/[ab][^/?]([/?]|$)")
        );
        assert_eq!(glob_regex(&prefixes(), "track_", "other_*"), None);
        assert_eq!(
            ids_regex(&prefixes(), &["6b0d".into(), "6b0e".into()]),
            "^(/musicdb|/stream/musicdb)/(6b0d|6b0e)([/?]|$)"
        );
        assert_eq!(
            everything_regex(&prefixes()),
            "^(/musicdb|/stream/musicdb)/"
        );
    }
}
