//! Every route musicd answers, in one table: its label (metrics, access log) and, for the
//! ops endpoints, its path. The connection's dispatch, the axum router and `/metrics` all
//! read it from here, so a route cannot be counted under one name and served under another.
//!
//! The track route is `{prefix}/{id}` or `{prefix}/{id}/{name}` under every configured
//! prefix; [`TrackRoutes`] matches it. The id segment is percent-decoded (`%31` is `1`) so
//! that an escaped id gets the same answer as a plain one; `{name}` is cosmetic.

use std::borrow::Cow;
use std::sync::Arc;

use percent_encoding::percent_decode_str;

use super::service::split_at_byte;

/// A route, as counted and logged.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Route {
    /// `GET|HEAD {prefix}/{id}[/{name}]`.
    Track,
    /// `/healthz`: the process answers.
    Healthz,
    /// `/readyz`: its backends answer.
    Readyz,
    /// `/metrics`: Prometheus text.
    Metrics,
    /// Anything else (JSON 404, 405, 501).
    Other,
}

impl Route {
    /// Every route, in the order of [`Route::index`].
    pub(crate) const ALL: [Route; 5] = [
        Route::Track,
        Route::Healthz,
        Route::Readyz,
        Route::Metrics,
        Route::Other,
    ];

    /// The ops endpoints, served by the axum router.
    pub(crate) const OPS: [Route; 3] = [Route::Healthz, Route::Readyz, Route::Metrics];

    /// The label in metrics and logs.
    pub(crate) fn label(self) -> &'static str {
        match self {
            Route::Track => "track",
            Route::Healthz => "healthz",
            Route::Readyz => "readyz",
            Route::Metrics => "metrics",
            Route::Other => "other",
        }
    }

    /// The path of an ops endpoint.
    pub(crate) fn path(self) -> Option<&'static str> {
        match self {
            Route::Healthz => Some("/healthz"),
            Route::Readyz => Some("/readyz"),
            Route::Metrics => Some("/metrics"),
            Route::Track | Route::Other => None,
        }
    }

    /// Position in [`Route::ALL`] (metrics keep one row per route).
    pub(crate) fn index(self) -> usize {
        self as usize
    }

    /// The ops route at `path`, else [`Route::Other`].
    pub(crate) fn of_path(path: &str) -> Route {
        Route::OPS
            .into_iter()
            .find(|route| route.path() == Some(path))
            .unwrap_or(Route::Other)
    }
}

/// The track route under every configured prefix.
#[derive(Debug, Clone)]
pub(crate) struct TrackRoutes {
    prefixes: Arc<[String]>,
}

impl TrackRoutes {
    /// Track routes under these prefixes (`/musicdb`, `/stream/musicdb`).
    pub(crate) fn new(prefixes: &[String]) -> TrackRoutes {
        TrackRoutes {
            prefixes: prefixes.into(),
        }
    }

    /// The id, percent-decoded, when `path` (without query) is a track URL. An id whose
    /// escapes do not decode to UTF-8 is returned as received: it is not an ObjectId either
    /// way, and the client gets the usual 400 with what it sent.
    /// Borrowed from `path` unless it had escapes: a track request allocates nothing here.
    pub(crate) fn id<'a>(&self, path: &'a str) -> Option<Cow<'a, str>> {
        self.prefixes.iter().find_map(|prefix| {
            let rest = path.strip_prefix(prefix.as_str())?.strip_prefix('/')?;
            // memchr's searches, not `str`'s (callgrind, per track request: 322 -> 298
            // instructions here).
            let has = |byte: u8, text: &str| memchr::memchr(byte, text.as_bytes()).is_some();
            let (id, name) = split_at_byte(rest, b'/');
            let plain_name = name.is_none_or(|n| !n.is_empty() && !has(b'/', n));
            if id.is_empty() || !plain_name {
                return None;
            }
            // Nearly every id has no escape: one scan instead of decoding and validating.
            if !has(b'%', id) {
                return Some(Cow::Borrowed(id));
            }
            Some(
                percent_decode_str(id)
                    .decode_utf8()
                    .unwrap_or(Cow::Borrowed(id)),
            )
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn labels_and_indexes_agree() {
        for (i, route) in Route::ALL.into_iter().enumerate() {
            assert_eq!(route.index(), i);
            if let Some(path) = route.path() {
                assert_eq!(Route::of_path(path), route);
            }
        }
        assert_eq!(Route::of_path("/nope"), Route::Other);
    }

    #[test]
    fn track_urls_match_with_or_without_name_and_escapes_decode() {
        let routes = TrackRoutes::new(&["/musicdb".into(), "/stream/musicdb".into()]);
        let id = "6b0dc37d3ba0d873deac9381";
        assert_eq!(routes.id(&format!("/musicdb/{id}")).as_deref(), Some(id));
        assert_eq!(
            routes.id(&format!("/musicdb/{id}/a.mp3")).as_deref(),
            Some(id)
        );
        assert_eq!(
            routes.id(&format!("/stream/musicdb/{id}/a.mp3")).as_deref(),
            Some(id)
        );
        assert_eq!(
            routes
                .id("/musicdb/6b0dc37d3ba0d873deac938%31/x")
                .as_deref(),
            Some(id)
        );
        assert_eq!(routes.id("/musicdb/%ff/x").as_deref(), Some("%ff"));
        // An escape in the name is the name's: the id is used as received.
        let named = format!("/musicdb/{id}/a%20b.mp3");
        assert!(matches!(routes.id(&named), Some(Cow::Borrowed(got)) if got == id));
        for miss in [
            "/musicdb/",
            "/musicdb",
            "/musicdbx/abc",
            "/musicdb/abc/",
            "/musicdb/abc/a/b",
            "/other/abc",
        ] {
            assert_eq!(routes.id(miss), None, "{miss}");
        }
    }
}
