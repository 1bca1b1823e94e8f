//! The axum router: the ops endpoints of the route table and the JSON 404/405 for paths
//! no route has. The track route never goes through it (see [`super::h1`]).

use axum::Router;
use axum::extract::Request;
use axum::http::StatusCode;
use axum::response::Response;
use axum::routing::{MethodRouter, get};

use super::error::json_status;
use super::routes::{Route, TrackRoutes};
use super::{AppState, ops};

/// The application: state, the track routes, and the axum router for the rest.
#[derive(Clone)]
pub struct App {
    /// Shared by every request.
    pub state: AppState,
    /// Which paths are tracks.
    pub tracks: TrackRoutes,
    router: Router,
}

impl App {
    /// Answers a request through the axum router.
    pub async fn route(&self, request: Request) -> Response {
        let mut router = self.router.clone();
        match tower_service::Service::call(&mut router, request).await {
            Ok(response) => response,
            Err(never) => match never {},
        }
    }
}

/// The application: track routes under every configured prefix, ops endpoints, JSON 404s.
pub fn app(state: AppState, prefixes: &[String]) -> App {
    let mut router = Router::new();
    for route in Route::OPS {
        let handler: MethodRouter<AppState> = match route {
            Route::Healthz => get(ops::healthz),
            Route::Readyz => get(ops::readyz),
            Route::Metrics => get(ops::metrics),
            Route::Track | Route::Other => continue,
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
