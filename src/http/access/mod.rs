//! Who may play what, decided before any lookup: signed expiring links
//! ([`crate::signing`], shared with `musicctl sign`),
//! CORS for web players on another origin ([`cors`]), and what the query asks for
//! (`?download`).

pub(crate) mod cors;

use percent_encoding::percent_decode_str;

use self::cors::Cors;
use super::client_ip::TrustedProxies;
use crate::config::Config;
use crate::http::service::Request;
use crate::signing::{LinkParams, Signing};

/// The access rules of a server.
#[derive(Debug, Clone, Default)]
pub(crate) struct AccessRules {
    /// Signed links.
    pub(crate) signing: Signing,
    pub(crate) cors: Cors,
    /// Whose forwarding headers name the client (for links bound to an address).
    pub(crate) trusted_proxies: TrustedProxies,
}

impl AccessRules {
    /// The rules a config asks for.
    pub(crate) fn from_config(config: &Config) -> AccessRules {
        AccessRules {
            signing: Signing::from_config(&config.signing),
            cors: Cors::new(&config.cors.allow_origins, config.cors.max_age_secs),
            trusted_proxies: TrustedProxies::new(config.trusted_proxies.clone()),
        }
    }
}

/// What a track request says about access, read from its head.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub(crate) struct AccessRequest {
    pub(crate) origin: Option<String>,
    /// `Access-Control-Request-Method` (a CORS preflight).
    pub(crate) preflight: bool,
    /// `expires`, `kid`, `sig`, `sid`, `ip` of the query.
    pub(crate) link: LinkParams,
    /// `?download` (any value): save the file rather than play it.
    pub(crate) download: bool,
}

impl AccessRequest {
    /// What `request`'s query says about access; `None` when it has none. Its headers are
    /// offered one by one to [`Self::take_header`].
    pub(crate) fn from_query(request: &Request<'_>) -> Option<AccessRequest> {
        request.query.map(|query| {
            let mut access = AccessRequest::default();
            access.read_query(query);
            access
        })
    }

    /// Keeps header `name` in `access` if it is about access (CORS): `false` when it is
    /// not. `access` stays `None` for most requests, which say nothing: no allocation then.
    pub(crate) fn take_header(
        access: &mut Option<AccessRequest>,
        name: &[u8],
        value: &[u8],
    ) -> bool {
        if name.eq_ignore_ascii_case(b"origin") {
            access.get_or_insert_default().origin =
                std::str::from_utf8(value).ok().map(str::to_string);
            true
        } else if name.eq_ignore_ascii_case(b"access-control-request-method") {
            access.get_or_insert_default().preflight = true;
            true
        } else {
            false
        }
    }

    /// Reads the query string (without `?`) of a track URL.
    pub(crate) fn read_query(&mut self, query: &str) {
        for pair in query.split('&') {
            let (name, raw) = pair.split_once('=').unwrap_or((pair, ""));
            let value = || Some(percent_decode_str(raw).decode_utf8_lossy().into_owned());
            match name {
                "expires" => self.link.expires = value(),
                // As written, never decoded: the text a cache's ban of a revoked key or
                // session matches is the URL's own, so `sid=a%7Eb` is refused rather than
                // played as `a~b` past that ban.
                "kid" => self.link.kid = Some(raw.to_string()),
                "sig" => self.link.sig = value(),
                "sid" => self.link.sid = Some(raw.to_string()),
                "ip" => self.link.ip = value(),
                "download" => self.download = true,
                _ => {}
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_query_gives_the_link_and_download() {
        let mut access = AccessRequest::default();
        access.read_query("expires=1700000000&kid=k1&sig=abc-_&download&x=1&sid=a%7Eb");
        assert_eq!(access.link.expires.as_deref(), Some("1700000000"));
        assert_eq!(access.link.kid.as_deref(), Some("k1"));
        // Not decoded: a revoked session's ban matches the URL's own text.
        assert_eq!(access.link.sid.as_deref(), Some("a%7Eb"));
        assert_eq!(access.link.sig.as_deref(), Some("abc-_"));
        assert!(access.download);
        let mut plain = AccessRequest::default();
        plain.read_query("x=1");
        assert_eq!(plain, AccessRequest::default());
    }
}
