//! The application behind the HTTP/1.1 layer: [`App`] (state, the track routes, the axum
//! router for the ops endpoints) and [`Endpoint`], the [`Service`] one listener on one
//! event loop calls. h1 hands it each request; it dispatches ([`super::dispatch`]), counts
//! the exchange in [`super::metrics`] and writes its access-log line ([`super::access_log`]).

use std::fs::File;
use std::sync::Arc;

use axum::Router;
use axum::extract::Request as RouterRequest;
use axum::http::StatusCode;
use axum::response::Response;
use axum::routing::{MethodRouter, get};

use super::access_log::{self, Finished, LogBuffer};
use super::client_ip::TrustedProxies;
use super::dispatch::{Dispatched, dispatch};
use super::error::json_status;
use super::routes::{Route, TrackRoutes};
use super::service::{Answer, Exchange, Request, Service};
use super::{AppState, ops};
use crate::catalog::CacheOutcome;

/// What a listener serves.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ListenerRole {
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
pub struct App {
    /// Shared by every request.
    pub state: AppState,
    /// Which paths are tracks.
    pub(crate) tracks: TrackRoutes,
    router: Router,
}

impl App {
    /// Track routes under every configured prefix, ops endpoints, JSON 404s.
    pub fn new(state: AppState, prefixes: &[String]) -> App {
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

    /// Answers a request through the axum router.
    pub(crate) async fn route(&self, request: RouterRequest) -> Response {
        let mut router = self.router.clone();
        match tower_service::Service::call(&mut router, request).await {
            Ok(response) => response,
            Err(never) => match never {},
        }
    }
}

/// The application as one listener on one event loop serves it: its role, and the loop's
/// own access-log buffer (whose lock no other core takes).
pub(crate) struct Endpoint {
    pub(crate) app: App,
    pub(crate) role: ListenerRole,
    pub(crate) log: Option<Arc<LogBuffer>>,
    pub(crate) trusted_proxies: Arc<TrustedProxies>,
}

impl Service for Endpoint {
    type Context = (Route, CacheOutcome);

    async fn call(&self, request: &Request<'_>) -> (Answer, (Route, CacheOutcome)) {
        self.app.state.metrics.response_started();
        let Dispatched {
            route,
            outcome,
            mut answer,
        } = dispatch(&self.app, self.role, request).await;
        if route == Route::Track {
            answer.pacing = self.app.state.files.pacing;
        }
        (answer, (route, outcome))
    }

    fn finish(&self, exchange: &Exchange<'_>, context: Option<(Route, CacheOutcome)>) {
        let metrics = &self.app.state.metrics;
        let (route, cache) = context.unwrap_or_else(|| {
            // A refusal never reached `call`: it starts and ends here.
            metrics.response_started();
            (Route::Other, CacheOutcome::None)
        });
        let line = self
            .log
            .is_some()
            .then(|| access_log::entry(exchange, cache, &self.trusted_proxies));
        access_log::finish(
            metrics,
            self.log.as_deref(),
            Finished {
                route,
                status: exchange.status.as_u16(),
                bytes: exchange.bytes,
                cache,
                started: exchange.started,
                head_written: exchange.head_written,
                line,
            },
        );
    }

    fn file_changed(&self, file: &File) {
        self.app.state.files.cache.evict_open(file);
    }
}
