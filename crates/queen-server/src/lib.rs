//! The Queen HTTP API over [`queen_engine::Engine`].
//!
//! Routes translate the wire into engine calls and the engine's JSON back
//! into responses. This crate never issues SQL and never decides what is
//! valid beyond the shape of a request (is the body JSON, is `batch` a
//! number); every rule lives in the SQL functions.

#![deny(clippy::unwrap_used, clippy::expect_used)]
#![warn(missing_docs)]

mod auth;
mod body_guard;
mod dashboard;
mod edge;
mod error;
mod extract;
mod jwks;
mod metrics;
mod openapi;
mod routes;
mod tls;
mod uri_guard;

use std::future::Future;
use std::sync::Arc;

use axum::extract::DefaultBodyLimit;
use axum::Router;
use queen_engine::Engine;
use tokio::net::TcpListener;

pub use auth::{AuthConfig, AuthConfigError, Caller, Role};
pub use error::ApiError;
pub use jwks::JwksSettings;
pub use tls::{TlsIdentity, TlsSetupError};

/// Settings of the HTTP layer.
#[derive(Debug, Clone)]
pub struct ServerConfig {
    /// Largest request body accepted; larger ones get 413.
    pub max_body_bytes: usize,
    /// Longest long poll a client may ask for.
    pub max_wait_ms: u64,
    /// Time a client has to send a request's headers, and also how long an
    /// idle keep-alive connection is kept; then the connection is closed.
    pub header_read_timeout: std::time::Duration,
    /// Time a client has to send a whole request body; then 408.
    pub body_read_timeout: std::time::Duration,
    /// Who may call the API; the default is off (no credentials needed).
    pub auth: AuthConfig,
    /// Serve HTTPS with this certificate; plain HTTP when absent.
    pub tls: Option<TlsIdentity>,
}

impl Default for ServerConfig {
    fn default() -> Self {
        ServerConfig {
            max_body_bytes: 32 * 1024 * 1024,
            max_wait_ms: 10 * 60 * 1000,
            header_read_timeout: std::time::Duration::from_secs(60),
            body_read_timeout: std::time::Duration::from_secs(60),
            auth: AuthConfig::default(),
            tls: None,
        }
    }
}

/// Shared by every handler.
pub(crate) struct AppState {
    pub engine: Arc<Engine>,
    pub config: ServerConfig,
    pub started: std::time::Instant,
    /// Push bodies decoded and in the engine at once, in KiB (see
    /// [`PUSH_DECODED_KIB`]).
    pub push_budget: tokio::sync::Semaphore,
}

/// At most this many KiB of push bodies are decoded and in the engine at
/// once; a larger body takes the whole budget. A decoded item holds several
/// times its JSON, and only a pool's worth of pushes run at once anyway, so
/// the others wait holding only their bodies: the broker's memory stays
/// flat when many clients push large batches.
pub(crate) const PUSH_DECODED_KIB: usize = 1024;

/// The whole API as an axum router, `/openapi.json` included.
pub fn router(engine: Arc<Engine>, config: ServerConfig) -> Router {
    let limit = config.max_body_bytes;
    let body = body_guard::BodyLimits { max_bytes: limit, read_timeout: config.body_read_timeout };
    let edge = Arc::new(edge::Edge {
        engine: engine.clone(),
        auth: config.auth.clone(),
        body,
        ids: edge::RequestIds::new(),
    });
    // Installed before the first request so every family is recorded.
    let _ = metrics::handle();
    let (routes, doc) = routes::router().split_for_parts();
    let doc = Arc::new(openapi::finish(doc).to_pretty_json().unwrap_or_default());
    routes
        .route("/openapi.json", axum::routing::get(move || serve_document(doc.clone())))
        .merge(dashboard::router())
        .method_not_allowed_fallback(method_not_allowed)
        .with_state(Arc::new(AppState {
            engine,
            config,
            started: std::time::Instant::now(),
            push_budget: tokio::sync::Semaphore::new(PUSH_DECODED_KIB),
        }))
        .layer(axum::middleware::from_fn_with_state(edge, edge::edge))
        .layer(DefaultBodyLimit::max(limit))
}

/// The OpenAPI 3.1 document of every route, as served at `/openapi.json`.
pub fn openapi_json() -> String {
    let (_, doc) = routes::router().split_for_parts();
    openapi::finish(doc).to_pretty_json().unwrap_or_default()
}

async fn method_not_allowed() -> axum::response::Response {
    let body = serde_json::json!({"error": "method not allowed", "code": "method_not_allowed"});
    error::json_response(axum::http::StatusCode::METHOD_NOT_ALLOWED, body.to_string())
}

async fn serve_document(doc: Arc<String>) -> axum::response::Response {
    error::json_response(axum::http::StatusCode::OK, doc.as_str().to_owned())
}

/// Serves until `shutdown` resolves, then wakes the long polls, lets
/// in-flight requests finish, and closes the pool.
///
/// Our own accept loop rather than `axum::serve`, which sets no timer and so
/// no header read timeout: a client that opens connections and never
/// finishes its headers would hold them for ever.
pub async fn serve(
    listener: TcpListener,
    engine: Arc<Engine>,
    config: ServerConfig,
    shutdown: impl Future<Output = ()> + Send + 'static,
) -> std::io::Result<()> {
    let header_read_timeout = config.header_read_timeout;
    let tls = config.tls.clone();
    // Pushes spooled while PostgreSQL was away drain from here on.
    engine.start_spool_drain();
    let app = router(engine.clone(), config);
    // Connection tasks watch `stop_rx` being dropped (shutdown begun) and
    // hold `done_rx` clones until their connection is closed.
    let (stop_tx, stop_rx) = tokio::sync::watch::channel(());
    let (done_tx, done_rx) = tokio::sync::watch::channel(());
    let mut shutdown = std::pin::pin!(shutdown);
    loop {
        let stream = tokio::select! {
            accepted = listener.accept() => match accepted {
                Ok((stream, _)) => stream,
                Err(e) => {
                    // Out of file descriptors and the like: wait, never spin or stop.
                    tracing::warn!(error = %e, "accept failed");
                    tokio::time::sleep(std::time::Duration::from_millis(50)).await;
                    continue;
                }
            },
            () = &mut shutdown => break,
        };
        let _ = stream.set_nodelay(true);
        let service = hyper_util::service::TowerToHyperService::new(app.clone());
        let stop_tx = stop_tx.clone();
        let done_rx = done_rx.clone();
        let tls = tls.clone();
        tokio::spawn(async move {
            match tls {
                None => serve_connection(stream, service, header_read_timeout, &stop_tx).await,
                Some(tls) => {
                    // The handshake gets the same time a client has for its headers.
                    match tokio::time::timeout(header_read_timeout, tls.acceptor.accept(stream)).await {
                        Ok(Ok(stream)) => {
                            serve_connection(stream, service, header_read_timeout, &stop_tx).await
                        }
                        Ok(Err(e)) => tracing::debug!(error = %e, "TLS handshake failed"),
                        Err(_) => tracing::debug!("TLS handshake timed out"),
                    }
                }
            }
            drop(done_rx);
        });
    }
    drop(listener);
    tracing::info!("shutting down: waking long polls, finishing in-flight requests");
    engine.shutdown();
    drop(stop_rx);
    drop(done_rx);
    done_tx.closed().await;
    engine.leave_registry().await;
    engine.close();
    Ok(())
}

/// Serves one accepted connection (plain or TLS) until it closes; on
/// shutdown it finishes the request in flight and then closes.
async fn serve_connection<I>(
    io: I,
    service: hyper_util::service::TowerToHyperService<Router>,
    header_read_timeout: std::time::Duration,
    stop_tx: &tokio::sync::watch::Sender<()>,
) where
    I: tokio::io::AsyncRead + tokio::io::AsyncWrite + Unpin + Send + 'static,
{
    let mut builder = hyper::server::conn::http1::Builder::new();
    builder.timer(hyper_util::rt::TokioTimer::new()).header_read_timeout(header_read_timeout);
    let conn = builder.serve_connection(hyper_util::rt::TokioIo::new(io), service);
    let mut conn = std::pin::pin!(conn);
    let mut stopping = std::pin::pin!(stop_tx.closed());
    let mut draining = false;
    loop {
        tokio::select! {
            result = conn.as_mut() => {
                if let Err(e) = result {
                    tracing::debug!(error = %e, "connection ended with an error");
                }
                break;
            }
            () = &mut stopping, if !draining => {
                draining = true;
                conn.as_mut().graceful_shutdown();
            }
        }
    }
}
