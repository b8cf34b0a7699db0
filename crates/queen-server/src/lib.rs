//! The Queen HTTP API over [`queen_engine::Engine`].
//!
//! Routes translate the wire into engine calls and the engine's JSON back
//! into responses. This crate never issues SQL and never decides what is
//! valid beyond the shape of a request (is the body JSON, is `batch` a
//! number); every rule lives in the SQL functions.

#![deny(clippy::unwrap_used, clippy::expect_used)]

mod error;
mod extract;
mod routes;

use std::future::Future;
use std::sync::Arc;

use axum::extract::DefaultBodyLimit;
use axum::Router;
use queen_engine::Engine;
use tokio::net::TcpListener;

pub use error::ApiError;

/// Settings of the HTTP layer.
#[derive(Debug, Clone)]
pub struct ServerConfig {
    /// Largest request body accepted; larger ones get 413.
    pub max_body_bytes: usize,
    /// Longest long poll a client may ask for.
    pub max_wait_ms: u64,
}

impl Default for ServerConfig {
    fn default() -> Self {
        ServerConfig { max_body_bytes: 32 * 1024 * 1024, max_wait_ms: 10 * 60 * 1000 }
    }
}

/// Shared by every handler.
pub(crate) struct AppState {
    pub engine: Arc<Engine>,
    pub config: ServerConfig,
}

/// The whole API as an axum router.
pub fn router(engine: Arc<Engine>, config: ServerConfig) -> Router {
    let limit = config.max_body_bytes;
    routes::router().with_state(Arc::new(AppState { engine, config })).layer(DefaultBodyLimit::max(limit))
}

/// Serves until `shutdown` resolves, then wakes the long polls, lets
/// in-flight requests finish, and closes the pool.
pub async fn serve(
    listener: TcpListener,
    engine: Arc<Engine>,
    config: ServerConfig,
    shutdown: impl Future<Output = ()> + Send + 'static,
) -> std::io::Result<()> {
    let app = router(engine.clone(), config);
    let waker = engine.clone();
    let result = axum::serve(listener, app)
        .with_graceful_shutdown(async move {
            shutdown.await;
            tracing::info!("shutting down: waking long polls, finishing in-flight requests");
            waker.shutdown();
        })
        .await;
    engine.close();
    result
}
