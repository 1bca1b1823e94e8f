//! The application behind the HTTP/1.1 layer: [`App`] (state, the track routes, the axum
//! router for the ops endpoints) and the [`ListenerRole`] that decides which of them a
//! listener shows. [`super::endpoint`] is what h1 calls.

use axum::Router;
use axum::extract::Request as RouterRequest;
use axum::http::StatusCode;
use axum::response::Response;
use axum::routing::{MethodRouter, get};

use super::error::json_status;
use super::routes::{Route, TrackRoutes};
use super::{AppState, ops};

/// What a listener serves.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum ListenerRole {
    /// Everything (no `ops_listen`).
    All,
    /// Tracks and `/healthz`; `/metrics` and `/readyz` are on the ops listener.
    Public,
    /// The ops endpoints only (`ops_listen`).
    Ops,
}

impl ListenerRole {
    /// Whether `route` is answered 404 on a listener of this role.
    pub(crate) fn hides(self, route: Route) -> bool {
        match self {
            ListenerRole::All => false,
            // Backend errors and cache figures stay off the public address.
            ListenerRole::Public => matches!(route, Route::Readyz | Route::Metrics),
            ListenerRole::Ops => !matches!(route, Route::Healthz | Route::Readyz | Route::Metrics),
        }
    }
}

/// The application: state, the track routes, and the axum router for the rest.
#[derive(Clone)]
pub(crate) struct App {
    /// Shared by every request.
    pub(crate) state: AppState,
    /// Which paths are tracks.
    pub(crate) tracks: TrackRoutes,
    router: Router,
}

impl App {
    /// Track routes under every configured prefix, ops endpoints, JSON 404s.
    pub(crate) fn new(state: AppState, prefixes: &[String]) -> App {
        let mut router = Router::new();
        for route in Route::OPS {
            let handler: MethodRouter<AppState> = match route {
                Route::Readyz => get(ops::readyz),
                Route::Metrics => get(ops::metrics),
                // `http::dispatch` answers these before the router.
                Route::Healthz | Route::Track | Route::Other => continue,
            };
            if let Some(path) = route.path() {
                router = router.route(path, handler);
            }
        }
        let router = router
            .fallback(|| async { json_status(StatusCode::NOT_FOUND, "no such route") })
            .with_state(state.clone());
        App {
            state,
            tracks: TrackRoutes::new(prefixes),
            router,
        }
    }

    /// Answers a request through the axum router.
    pub(crate) async fn route(&self, request: RouterRequest) -> Response {
        let mut router = self.router.clone();
        match tower_service::Service::call(&mut router, request).await {
            Ok(response) => response,
            Err(never) => match never {},
        }
    }
}
