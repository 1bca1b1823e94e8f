//! Which handler answers a parsed request: the track route directly, the ops endpoints
//! and unknown paths through the axum router, and the method rules of RFC 9110 here:
//! a method musicd does not implement is a 501 (§15.6.2), a known method a route does not
//! allow a 405 with `Allow` (§15.5.6), `OPTIONS *` the server's methods. With `ops_listen`,
//! `/metrics` and `/readyz` are answered only there (404 on the public address).

use axum::body::Body;
use axum::http::{HeaderValue, Method, Request, StatusCode, Version, header};

use super::head::Target;
use crate::catalog::CacheOutcome;
use crate::http::answer::{Answer, Payload};
use crate::http::routes::Route;
use crate::http::{App, ListenerRole};
use crate::http::{ops, track};

/// The methods the track route and the ops endpoints allow.
const ALLOWED: &str = "GET, HEAD";

/// What answered, and how.
pub(super) struct Dispatched {
    /// The route, for metrics and the log.
    pub route: Route,
    /// Where the track's path came from.
    pub outcome: CacheOutcome,
    /// The answer.
    pub answer: Answer,
}

/// Answers one request.
pub(super) async fn dispatch(
    app: &App,
    role: ListenerRole,
    method: Method,
    version: Version,
    target: Target,
) -> Dispatched {
    let plain = |route, answer| Dispatched {
        route,
        outcome: CacheOutcome::None,
        answer,
    };
    if !is_implemented(&method) {
        let answer = Answer::json_error(StatusCode::NOT_IMPLEMENTED, "method not implemented");
        return plain(Route::Other, answer);
    }
    let hidden = |route: Route| match role {
        ListenerRole::All => false,
        // Backend errors and cache figures stay off the public address.
        ListenerRole::Public => matches!(route, Route::Readyz | Route::Metrics),
        ListenerRole::Ops => !matches!(route, Route::Healthz | Route::Readyz | Route::Metrics),
    };
    let no_route = || Answer::json_error(StatusCode::NOT_FOUND, "no such route");
    match target {
        Target::Track { .. } if hidden(Route::Track) => plain(Route::Other, no_route()),
        Target::Other { uri, .. } if hidden(Route::of_path(uri.path())) => {
            plain(Route::Other, no_route())
        }
        Target::Track {
            id,
            request,
            access,
        } => {
            let rules = &app.state.access;
            let origin = access.as_ref().and_then(|a| a.origin.clone());
            if method == Method::OPTIONS && access.as_ref().is_some_and(|a| a.preflight) {
                return plain(Route::Track, rules.cors.preflight(origin.as_deref()));
            }
            if method != Method::GET && method != Method::HEAD {
                return plain(Route::Track, not_allowed());
            }
            let link = access.map(|a| a.link).unwrap_or_default();
            let (outcome, mut answer) = track::answer(&app.state, id, request, &link).await;
            rules.cors.decorate(origin.as_deref(), &mut answer.headers);
            Dispatched {
                route: Route::Track,
                outcome,
                answer,
            }
        }
        Target::Healthz => plain(Route::Healthz, ops::healthz_answer(&app.state)),
        Target::Other { uri, .. } if uri.path() == "*" => {
            let mut answer = Answer::new(StatusCode::OK, Default::default(), Payload::Empty);
            answer
                .headers
                .insert(header::ALLOW, HeaderValue::from_static(ALLOWED));
            plain(Route::Other, answer)
        }
        Target::Other { uri, headers } => {
            let route = Route::of_path(uri.path());
            let mut request = Request::new(Body::empty());
            *request.method_mut() = method;
            *request.uri_mut() = uri;
            *request.version_mut() = version;
            *request.headers_mut() = headers;
            // Boxed, like the resolver's remote path: kept out of every connection's
            // resting size.
            let response = Box::pin(app.route(request)).await;
            plain(route, Answer::from_response(response))
        }
    }
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
