//! Which handler answers a parsed request: the track route directly, the ops endpoints
//! and unknown paths through the axum router, and the method rules of RFC 9110 here:
//! a method musicd does not implement is a 501 (§15.6.2), a known method a route does not
//! allow a 405 with `Allow` (§15.5.6), `OPTIONS *` the server's methods.

use axum::body::Body;
use axum::http::{HeaderValue, Method, Request, StatusCode, Version, header};

use super::head::Target;
use crate::catalog::CacheOutcome;
use crate::http::App;
use crate::http::answer::{Answer, Payload};
use crate::http::routes::Route;
use crate::http::track;

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
    match target {
        Target::Track { id, request } => {
            if method != Method::GET && method != Method::HEAD {
                return plain(Route::Track, not_allowed());
            }
            let (outcome, answer) = track::answer(&app.state, id, request).await;
            Dispatched {
                route: Route::Track,
                outcome,
                answer,
            }
        }
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
