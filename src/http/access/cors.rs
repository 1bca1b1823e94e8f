//! CORS for web players on another origin: `Access-Control-Allow-Origin` on track answers
//! (errors included, so a player can read why), `Content-Range` and the validators exposed
//! for seeking with `fetch` or Media Source, and preflights for `Range` requests.

use axum::http::{HeaderValue, StatusCode, header};

use crate::http::service::{Answer, Headers, Payload};

/// Headers a player's script may read off a track answer.
const EXPOSE: &str = "Content-Range, Content-Length, Accept-Ranges, ETag";
/// Request headers a preflight may ask for.
const ALLOW_HEADERS: &str = "range, if-range, if-none-match, if-modified-since";
const ALLOW_METHODS: &str = "GET, HEAD";

/// Which origins may read track answers.
#[derive(Debug, Clone, Default)]
pub(crate) struct Cors {
    any: bool,
    origins: Vec<String>,
    max_age_secs: u32,
}

impl Cors {
    /// `["*"]`: every origin; a list: those; empty: CORS off.
    pub(crate) fn new(allow_origins: &[String], max_age_secs: u32) -> Cors {
        Cors {
            any: allow_origins.iter().any(|o| o == "*"),
            origins: allow_origins
                .iter()
                .filter(|o| *o != "*")
                .cloned()
                .collect(),
            max_age_secs,
        }
    }

    fn on(&self) -> bool {
        self.any || !self.origins.is_empty()
    }

    fn allowed(&self, origin: &str) -> bool {
        self.any || self.origins.iter().any(|o| o.eq_ignore_ascii_case(origin))
    }

    /// Adds the CORS headers of a track answer to a request from `origin`.
    pub(crate) fn decorate(&self, origin: Option<&str>, headers: &mut Headers) {
        if !self.on() {
            return;
        }
        if !self.any {
            // The answer differs by origin: caches must keep them apart.
            headers.append(header::VARY, HeaderValue::from_static("Origin"));
        }
        let Some(origin) = origin.filter(|o| self.allowed(o)) else {
            return;
        };
        let value = if self.any {
            HeaderValue::from_static("*")
        } else {
            match HeaderValue::from_str(origin) {
                Ok(value) => value,
                Err(_) => return,
            }
        };
        headers.insert(header::ACCESS_CONTROL_ALLOW_ORIGIN, value);
        headers.insert(
            header::ACCESS_CONTROL_EXPOSE_HEADERS,
            HeaderValue::from_static(EXPOSE),
        );
    }

    /// The answer to a preflight (`OPTIONS` with `Access-Control-Request-Method`) for a
    /// track: 204, with the CORS grant when the origin is allowed.
    pub(crate) fn preflight(&self, origin: Option<&str>) -> Answer {
        let mut answer = Answer::new(StatusCode::NO_CONTENT, Default::default(), Payload::Empty);
        answer
            .headers
            .insert(header::ALLOW, HeaderValue::from_static(ALLOW_METHODS));
        if !self.on() || !origin.is_some_and(|o| self.allowed(o)) {
            if self.on() && !self.any {
                answer
                    .headers
                    .insert(header::VARY, HeaderValue::from_static("Origin"));
            }
            return answer;
        }
        self.decorate(origin, &mut answer.headers);
        answer.headers.remove(header::ACCESS_CONTROL_EXPOSE_HEADERS);
        let headers = &mut answer.headers;
        headers.insert(
            header::ACCESS_CONTROL_ALLOW_METHODS,
            HeaderValue::from_static(ALLOW_METHODS),
        );
        headers.insert(
            header::ACCESS_CONTROL_ALLOW_HEADERS,
            HeaderValue::from_static(ALLOW_HEADERS),
        );
        headers.insert(
            header::ACCESS_CONTROL_MAX_AGE,
            HeaderValue::from(self.max_age_secs),
        );
        answer
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn listed_origins_are_echoed_with_vary_and_others_get_nothing() {
        let cors = Cors::new(&["https://player.example".into()], 600);
        let mut headers = Headers::default();
        cors.decorate(Some("https://player.example"), &mut headers);
        assert_eq!(
            headers[header::ACCESS_CONTROL_ALLOW_ORIGIN],
            "https://player.example"
        );
        assert_eq!(headers[header::VARY], "Origin");
        assert!(
            headers[header::ACCESS_CONTROL_EXPOSE_HEADERS]
                .to_str()
                .expect("ascii")
                .contains("Content-Range")
        );
        let mut other = Headers::default();
        cors.decorate(Some("https://evil.example"), &mut other);
        assert!(other.get(header::ACCESS_CONTROL_ALLOW_ORIGIN).is_none());
        assert_eq!(other[header::VARY], "Origin");
    }

    #[test]
    fn a_star_allows_everyone_and_off_adds_nothing() {
        let mut headers = Headers::default();
        Cors::new(&["*".into()], 600).decorate(Some("https://a.example"), &mut headers);
        assert_eq!(headers[header::ACCESS_CONTROL_ALLOW_ORIGIN], "*");
        assert!(headers.get(header::VARY).is_none());
        let mut none = Headers::default();
        Cors::new(&[], 600).decorate(Some("https://a.example"), &mut none);
        assert!(none.is_empty());
    }

    #[test]
    fn preflights_grant_range_to_allowed_origins() {
        let cors = Cors::new(&["https://player.example".into()], 600);
        let answer = cors.preflight(Some("https://player.example"));
        assert_eq!(answer.status, StatusCode::NO_CONTENT);
        let h = &answer.headers;
        assert_eq!(h[header::ACCESS_CONTROL_ALLOW_METHODS], "GET, HEAD");
        assert!(
            h[header::ACCESS_CONTROL_ALLOW_HEADERS]
                .to_str()
                .expect("ascii")
                .contains("range")
        );
        assert_eq!(h[header::ACCESS_CONTROL_MAX_AGE], "600");
        let refused = cors.preflight(Some("https://evil.example"));
        assert!(
            refused
                .headers
                .get(header::ACCESS_CONTROL_ALLOW_ORIGIN)
                .is_none()
        );
    }
}
