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

use super::access::AccessRequest;
use super::app::{App, ListenerRole};
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
    /// The answer.
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
        return Box::pin(track_route(app, id, request)).await;
    }
    let route = Route::of_path(request.path);
    if role.hides(route) {
        return plain(Route::Other, no_route());
    }
    let get_or_head = *method == Method::GET || *method == Method::HEAD;
    if route == Route::Healthz && get_or_head {
        return plain(Route::Healthz, ops::healthz_answer(&app.state));
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
async fn track_route(app: &App, id: String, request: &Request<'_>) -> Dispatched {
    let access = AccessRequest::read(request);
    let rules = &app.state.access;
    let origin = access.as_ref().and_then(|a| a.origin.as_deref());
    let answer =
        if *request.method == Method::OPTIONS && access.as_ref().is_some_and(|a| a.preflight) {
            rules.cors.preflight(origin)
        } else if *request.method != Method::GET && *request.method != Method::HEAD {
            not_allowed()
        } else {
            let mut file_request = FileRequest::read(request);
            file_request.download = access.as_ref().is_some_and(|a| a.download);
            let link = access.as_ref().map(|a| a.link.clone()).unwrap_or_default();
            let (outcome, mut answer) = track::answer(&app.state, id, file_request, &link).await;
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
