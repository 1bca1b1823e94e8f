//! Which handler answers a request, and the rules every route shares: the track route
//! directly, `/healthz` directly (load balancers ask it as often as players ask for
//! tracks), the other ops endpoints and unknown paths through the axum router.
//!
//! The method rules of RFC 9110 are here: a method musicd does not implement is a 501
//! (§15.6.2), a known method a route does not allow a 405 with `Allow` (§15.5.6),
//! `OPTIONS *` the server's methods. CORS is decided here for the track route (preflight
//! and the grant on every answer). With `ops_listen`, `/metrics` and `/readyz` are answered
//! only there, and tracks only on the public address (404 elsewhere).

use axum::body::Body;
use axum::http::{HeaderMap, HeaderName, HeaderValue, Method, StatusCode, Uri, header};
use std::borrow::Cow;

use super::access::AccessRequest;
use super::app::{App, ListenerRole};
use super::error::ApiError;
use super::file::request::FileRequest;
use super::routes::Route;
use super::service::{Answer, Payload, Request};
use super::{ops, track};
use crate::catalog::CacheOutcome;

/// The methods the track route and the ops endpoints allow.
const ALLOWED: &str = "GET, HEAD";

/// What answered, and how.
pub(crate) struct Dispatched {
    /// The route, for metrics and the log.
    pub(crate) route: Route,
    /// Where the track's path came from.
    pub(crate) outcome: CacheOutcome,
    pub(crate) answer: Answer,
}

/// Answers one request on a listener of `role`.
pub(crate) async fn dispatch(app: &App, role: ListenerRole, request: &Request<'_>) -> Dispatched {
    let plain = |route, answer| Dispatched {
        route,
        outcome: CacheOutcome::None,
        answer,
    };
    let method = request.method;
    if !is_implemented(method) {
        let answer = Answer::json_error(StatusCode::NOT_IMPLEMENTED, "method not implemented");
        return plain(Route::Other, answer);
    }
    let no_route = || Answer::json_error(StatusCode::NOT_FOUND, "no such route");
    if let Some(id) = app.tracks.id(request.path) {
        if role.hides(Route::Track) {
            return plain(Route::Other, no_route());
        }
        // Not boxed: the exchange that awaits this is boxed already, so a second box only
        // cost an allocation and a copy of the route's kilobyte and a half (callgrind:
        // 340 instructions a request).
        return track_route(app, id, request).await;
    }
    let route = Route::of_path(request.path);
    if role.hides(route) {
        return plain(Route::Other, no_route());
    }
    if route == Route::Healthz {
        // Answered here for every method: load balancers ask it as often as players ask
        // for tracks, and the router never sees it.
        let get_or_head = *method == Method::GET || *method == Method::HEAD;
        let answer = if get_or_head {
            ops::healthz(&app.state)
        } else {
            not_allowed()
        };
        return plain(Route::Healthz, answer);
    }
    if request.path == "*" {
        let mut answer = Answer::new(StatusCode::OK, Default::default(), Payload::Empty);
        answer
            .headers
            .insert(header::ALLOW, HeaderValue::from_static(ALLOWED));
        return plain(Route::Other, answer);
    }
    match router_request(request) {
        // Boxed, like the resolver's remote path: kept out of every connection's resting
        // size.
        Some(routed) => plain(
            route,
            Answer::from_response(Box::pin(app.route(routed)).await),
        ),
        None => plain(
            Route::Other,
            Answer::json_error(StatusCode::BAD_REQUEST, "invalid request target"),
        ),
    }
}

/// `{prefix}/{id}[/{name}]`: CORS first, then the method, then the track.
async fn track_route(app: &App, id: Cow<'_, str>, request: &Request<'_>) -> Dispatched {
    // One pass over the header lines for both readers.
    let mut access = AccessRequest::from_query(request);
    let mut file_request = FileRequest::of(request);
    for (name, value) in request.headers() {
        if !file_request.take_header(name, value) {
            AccessRequest::take_header(&mut access, name, value);
        }
    }
    let rules = &app.state.access;
    let origin = access.as_ref().and_then(|a| a.origin.as_deref());
    let answer = if *request.method == Method::OPTIONS
        && access.as_ref().is_some_and(|a| a.preflight)
    {
        rules.cors.preflight(origin)
    } else if *request.method != Method::GET && *request.method != Method::HEAD {
        not_allowed()
    } else {
        file_request.download = access.as_ref().is_some_and(|a| a.download);
        let link = access.as_ref().map(|a| a.link.clone()).unwrap_or_default();
        let client = || rules.trusted_proxies.client_of(request);
        let (outcome, answer) = track::answer(&app.state, id, file_request, &link, client).await;
        let mut answer = answer.unwrap_or_else(ApiError::into_answer);
        rules.cors.decorate(origin, &mut answer.headers);
        return Dispatched {
            route: Route::Track,
            outcome,
            answer,
        };
    };
    Dispatched {
        route: Route::Track,
        outcome: CacheOutcome::None,
        answer,
    }
}

/// The request as the axum router takes it: every header, the target in origin form.
/// `None`: a target the `http` crate cannot hold.
fn router_request(request: &Request<'_>) -> Option<axum::http::Request<Body>> {
    let uri = match request.query {
        Some(query) => Uri::try_from(format!("{}?{query}", request.path)),
        None => Uri::try_from(request.path),
    }
    .ok()?;
    let mut headers = HeaderMap::new();
    for (name, value) in request.headers() {
        // h1 validated both; a name or value `http` still refuses is left out.
        if let (Ok(name), Ok(value)) =
            (HeaderName::from_bytes(name), HeaderValue::from_bytes(value))
        {
            headers.append(name, value);
        }
    }
    let mut routed = axum::http::Request::new(Body::empty());
    *routed.method_mut() = request.method.clone();
    *routed.uri_mut() = uri;
    *routed.version_mut() = request.version;
    *routed.headers_mut() = headers;
    Some(routed)
}

/// Whether musicd implements `method` at all (on some route): the methods of RFC 9110
/// §9.3, except CONNECT, which only a proxy has a use for.
fn is_implemented(method: &Method) -> bool {
    [
        Method::GET,
        Method::HEAD,
        Method::POST,
        Method::PUT,
        Method::DELETE,
        Method::OPTIONS,
        Method::TRACE,
        Method::PATCH,
    ]
    .contains(method)
}

fn not_allowed() -> Answer {
    let mut answer = Answer::json_error(StatusCode::METHOD_NOT_ALLOWED, "method not allowed");
    answer
        .headers
        .insert(header::ALLOW, HeaderValue::from_static(ALLOWED));
    answer
}

#[cfg(test)]
mod tests {
    //! The rules every route shares, decided without a socket: each request is a head's
    //! bytes handed to the real dispatch of an app whose backends are down (nothing here
    //! reaches them: every answer is decided before a lookup).

    use std::net::IpAddr;
    use std::time::{Duration, Instant};

    use super::*;
    use crate::config::Config;
    use crate::http::AppState;

    const ID: &str = "6b0dc37d3ba0d873deac9381";

    async fn app(allow_origins: &[&str]) -> App {
        let media = std::env::temp_dir();
        let mut config = Config::defaults_with_roots(vec![media]).expect("config");
        config.redis.target = crate::redis_link::RedisTarget::Single("redis://127.0.0.1:1".into());
        config.redis.timeout = Duration::from_millis(20);
        config.mongodb.uri = "mongodb://127.0.0.1:1/".into();
        config.mongodb.timeout = Duration::from_millis(20);
        config.cors.allow_origins = allow_origins.iter().map(|o| o.to_string()).collect();
        let state = AppState::new(&config).await.expect("state");
        App::new(state, &config.route_prefixes)
    }

    /// Dispatches `method target` with `headers` (lines without the final blank line).
    async fn ask(
        app: &App,
        role: ListenerRole,
        method: &str,
        target: &str,
        headers: &str,
    ) -> Answer {
        let head = format!("{method} {target} HTTP/1.1\r\nHost: h\r\n{headers}\r\n");
        let method = Method::from_bytes(method.as_bytes()).expect("method");
        let request = Request::new(
            &method,
            axum::http::Version::HTTP_11,
            target,
            target,
            IpAddr::from([127, 0, 0, 1]),
            Instant::now(),
            head.as_bytes(),
        );
        dispatch(app, role, &request).await.answer
    }

    #[tokio::test]
    async fn unknown_methods_are_501_and_known_ones_a_route_refuses_are_405_with_allow() {
        let app = app(&[]).await;
        let track = format!("/musicdb/{ID}/a.mp3");
        for method in ["BREW", "CONNECT"] {
            let answer = ask(&app, ListenerRole::All, method, &track, "").await;
            assert_eq!(answer.status, StatusCode::NOT_IMPLEMENTED, "{method}");
        }
        for method in ["POST", "PUT", "DELETE", "PATCH", "TRACE", "OPTIONS"] {
            let answer = ask(&app, ListenerRole::All, method, &track, "").await;
            assert_eq!(answer.status, StatusCode::METHOD_NOT_ALLOWED, "{method}");
            assert_eq!(answer.headers[header::ALLOW], "GET, HEAD", "{method}");
        }
        let answer = ask(&app, ListenerRole::All, "DELETE", "/healthz", "").await;
        assert_eq!(answer.status, StatusCode::METHOD_NOT_ALLOWED);
        assert_eq!(answer.headers[header::ALLOW], "GET, HEAD");
        let answer = ask(&app, ListenerRole::All, "OPTIONS", "*", "").await;
        assert_eq!(answer.status, StatusCode::OK);
        assert_eq!(answer.headers[header::ALLOW], "GET, HEAD");
    }

    #[tokio::test]
    async fn cors_grants_listed_origins_on_preflights_and_answers_and_nothing_to_others() {
        let app = app(&["https://player.example"]).await;
        let track = format!("/musicdb/{ID}/a.mp3");
        let preflight = "Origin: https://player.example\r\nAccess-Control-Request-Method: GET\r\n";
        let answer = ask(&app, ListenerRole::All, "OPTIONS", &track, preflight).await;
        assert_eq!(answer.status, StatusCode::NO_CONTENT);
        assert_eq!(
            answer.headers[header::ACCESS_CONTROL_ALLOW_ORIGIN],
            "https://player.example"
        );
        assert!(
            answer
                .headers
                .contains_key(header::ACCESS_CONTROL_ALLOW_METHODS)
        );
        // An answer decided before any lookup (a malformed id) carries the grant too.
        let origin = "Origin: https://player.example\r\n";
        let answer = ask(
            &app,
            ListenerRole::All,
            "GET",
            "/musicdb/nothex/a.mp3",
            origin,
        )
        .await;
        assert_eq!(answer.status, StatusCode::BAD_REQUEST);
        assert_eq!(
            answer.headers[header::ACCESS_CONTROL_ALLOW_ORIGIN],
            "https://player.example"
        );
        let other = "Origin: https://evil.example\r\n";
        let answer = ask(
            &app,
            ListenerRole::All,
            "GET",
            "/musicdb/nothex/a.mp3",
            other,
        )
        .await;
        assert!(
            !answer
                .headers
                .contains_key(header::ACCESS_CONTROL_ALLOW_ORIGIN)
        );
        let other_preflight =
            "Origin: https://evil.example\r\nAccess-Control-Request-Method: GET\r\n";
        let answer = ask(&app, ListenerRole::All, "OPTIONS", &track, other_preflight).await;
        assert_eq!(answer.status, StatusCode::NO_CONTENT);
        assert!(
            !answer
                .headers
                .contains_key(header::ACCESS_CONTROL_ALLOW_ORIGIN)
        );
    }

    #[tokio::test]
    async fn each_listener_role_answers_only_its_routes() {
        let app = app(&[]).await;
        let bad_track = "/musicdb/nothex/a.mp3";
        let status = |answer: Answer| answer.status;
        for (role, path, expected) in [
            (ListenerRole::All, "/metrics", StatusCode::OK),
            (ListenerRole::All, bad_track, StatusCode::BAD_REQUEST),
            (ListenerRole::Public, "/metrics", StatusCode::NOT_FOUND),
            (ListenerRole::Public, "/readyz", StatusCode::NOT_FOUND),
            (ListenerRole::Public, "/healthz", StatusCode::OK),
            (ListenerRole::Public, bad_track, StatusCode::BAD_REQUEST),
            (ListenerRole::Ops, "/metrics", StatusCode::OK),
            (ListenerRole::Ops, "/healthz", StatusCode::OK),
            (ListenerRole::Ops, bad_track, StatusCode::NOT_FOUND),
            (ListenerRole::Ops, "/nowhere", StatusCode::NOT_FOUND),
        ] {
            let got = status(ask(&app, role, "GET", path, "").await);
            assert_eq!(got, expected, "{role:?} {path}");
        }
    }
}
