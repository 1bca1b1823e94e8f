//! [`Endpoint`]: the application as one listener on one event loop serves it, and the
//! [`Service`] h1 calls. It dispatches each request ([`super::dispatch`]), then counts the
//! exchange in [`super::metrics`] and writes its access-log line ([`super::access_log`]).

use std::fs::File;
use std::sync::Arc;

use super::access_log::{self, Finished, LogBuffer};
use super::app::{App, ListenerRole};
use super::client_ip::TrustedProxies;
use super::dispatch::{Dispatched, dispatch};
use super::routes::Route;
use super::service::{Answer, Exchange, Request, Service};
use crate::catalog::CacheOutcome;

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
                ended: exchange.ended,
                line,
            },
        );
    }

    fn file_changed(&self, file: &File) {
        self.app.state.files.cache.evict_open(file);
    }
}
