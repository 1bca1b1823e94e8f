//! The HTTP caches in front (varnish with `deploy/varnish.vcl`, every URL of
//! `[http_caches] ban_urls`): the URL regexes a ban names, and the one `BAN` sender that
//! `musicctl purge` and the change-stream follower both use, with one rule for "taken".
//!
//! A Redis glob under the key prefix becomes a URL regex under every route prefix:
//! `track_6b0e*` bans `^(/musicdb|/stream/musicdb)/6b0e[^/?]*([/?]|$)`. A pattern that does
//! not start with the key prefix names no track URL and bans nothing.

use std::time::Duration;

use tokio::io::{AsyncReadExt, AsyncWriteExt};

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

/// The regex of the cached authorizations (`deploy/varnish.vcl` keeps musicd's 204 for a
/// signed URL as `authorize:{url}`) of revoked links: `sid:S` and `kid:K` members, or `*`
/// for every one.
pub(crate) fn authorizations_regex(members: &[&str]) -> String {
    if members.contains(&"*") {
        return "^authorize:".to_string();
    }
    let values = |kind: &str| -> Vec<String> {
        members
            .iter()
            .filter_map(|m| m.strip_prefix(kind))
            .map(regex_escape)
            .collect()
    };
    let mut alternatives = Vec::new();
    for (kind, name) in [("sid:", "sid"), ("kid:", "kid")] {
        let values = values(kind);
        if !values.is_empty() {
            alternatives.push(format!("{name}=({})", values.join("|")));
        }
    }
    format!("^authorize:[^?]*\\?(.*&)?({})(&|$)", alternatives.join("|"))
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

/// Why a `BAN` got no answer.
#[derive(Debug, thiserror::Error)]
pub enum BanError {
    /// The cache's address is not `http://host:port`.
    #[error("{0}: only http:// URLs are supported")]
    Url(String),
    /// No connection.
    #[error("connect: {0}")]
    Connect(std::io::Error),
    /// The request could not be sent.
    #[error("send: {0}")]
    Send(std::io::Error),
    /// The answer could not be read.
    #[error("read: {0}")]
    Read(std::io::Error),
    /// What came back is not an HTTP answer.
    #[error("not an HTTP answer")]
    NotHttp,
    /// Nothing came back in time.
    #[error("no answer within {0:?}")]
    Timeout(Duration),
}

/// Whether a cache took a ban, by its status: `deploy/varnish.vcl` answers 200, and any
/// 2xx from another cache means the same.
pub(crate) fn taken(status: u16) -> bool {
    (200..300).contains(&status)
}

/// One `BAN` with `X-Ban-Url: regex` to the cache at `base` (`http://host:port`), within
/// `timeout`; the status it answered.
pub(crate) async fn ban(base: &str, regex: &str, timeout: Duration) -> Result<u16, BanError> {
    let authority = base
        .strip_prefix("http://")
        .ok_or_else(|| BanError::Url(base.to_string()))?
        .trim_end_matches('/')
        .to_string();
    let exchange = async {
        let mut stream = tokio::net::TcpStream::connect(authority.as_str())
            .await
            .map_err(BanError::Connect)?;
        let request = format!(
            "BAN / HTTP/1.1\r\nHost: {authority}\r\nX-Ban-Url: {regex}\r\nConnection: close\r\n\r\n"
        );
        stream
            .write_all(request.as_bytes())
            .await
            .map_err(BanError::Send)?;
        let mut answer = Vec::with_capacity(512);
        let mut buf = [0u8; 1024];
        loop {
            let n = stream.read(&mut buf).await.map_err(BanError::Read)?;
            answer.extend_from_slice(&buf[..n]);
            let mut headers = [httparse::EMPTY_HEADER; 32];
            let mut response = httparse::Response::new(&mut headers);
            match response.parse(&answer) {
                Ok(httparse::Status::Complete(_)) => return Ok(response.code.unwrap_or(0)),
                Ok(httparse::Status::Partial) if n > 0 => {}
                _ => return Err(BanError::NotHttp),
            }
        }
    };
    tokio::time::timeout(timeout, exchange)
        .await
        .unwrap_or(Err(BanError::Timeout(timeout)))
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
