//! The one middleware every request passes: its request id, its span, its
//! metrics, then credentials, the body and the target, in that order.
//!
//! One function rather than a stack of layers: each `from_fn` layer cloned a
//! boxed service, boxed a future and nested another state machine per
//! request, and the stack of six (with tower-http's trace and request-id
//! layers) cost a small request more of the broker's CPU than its handler
//! (measured: a KV get 110 µs of broker CPU with the stack, 65 µs without
//! it; bench/journal/2026-12-04-broker-overhead-dispatcher-edge.md). What each
//! step does is unchanged:
//! - `x-request-id`: the client's, or a new one; echoed on every answer.
//! - a `request` span (method, route template, request id; never the URI,
//!   so KV keys in path routes stay out of logs and traces), with DEBUG
//!   events when a request starts and finishes and an ERROR one for a 5xx,
//!   as tower-http's trace layer logged them;
//! - request counters and latency by route, method and status, refusals
//!   included;
//! - credentials (`auth`), before anything else of the request is looked at;
//! - the whole body read within its limits (`body_guard`);
//! - a target that cannot mean one thing refused (`uri_guard`);
//! - until the schema is migrated, 503 for the routes that need it.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Instant;

use axum::extract::{Request, State};
use axum::http::{HeaderName, HeaderValue};
use axum::middleware::Next;
use axum::response::Response;
use tracing::Instrument;

use crate::auth::AuthConfig;
use crate::body_guard::BodyLimits;

static X_REQUEST_ID: HeaderName = HeaderName::from_static("x-request-id");

/// What the edge needs, built once per router.
pub(crate) struct Edge {
    pub(crate) engine: Arc<queen_engine::Engine>,
    pub(crate) auth: AuthConfig,
    pub(crate) body: BodyLimits,
    pub(crate) ids: RequestIds,
}

/// Request ids in the form of a random (v4) UUID, without a system call per
/// request: one random base per process, and a counter folded into its low
/// 62 bits (below the variant bits, so the form holds). A UUID drawn per
/// request asked the kernel for 16 random bytes each time.
pub(crate) struct RequestIds {
    base: u128,
    next: AtomicU64,
}

impl RequestIds {
    pub(crate) fn new() -> Self {
        RequestIds { base: uuid::Uuid::new_v4().as_u128(), next: AtomicU64::new(0) }
    }

    fn next(&self) -> HeaderValue {
        let n = self.next.fetch_add(1, Ordering::Relaxed) & ((1 << 62) - 1);
        let id = uuid::Uuid::from_u128(self.base ^ u128::from(n));
        let mut text = [0u8; uuid::fmt::Hyphenated::LENGTH];
        HeaderValue::from_str(id.hyphenated().encode_lower(&mut text))
            .unwrap_or_else(|_| HeaderValue::from_static("unknown"))
    }
}

pub(crate) async fn edge(State(edge): State<Arc<Edge>>, mut req: Request, next: Next) -> Response {
    let id = match req.headers().get(&X_REQUEST_ID) {
        Some(id) => id.clone(),
        None => {
            let id = edge.ids.next();
            req.headers_mut().insert(X_REQUEST_ID.clone(), id.clone());
            id
        }
    };
    let span = request_span(&req, &id);
    let mut resp = measured(edge, req, next).instrument(span).await;
    resp.headers_mut().entry(X_REQUEST_ID.clone()).or_insert(id);
    resp
}

async fn measured(edge: Arc<Edge>, req: Request, next: Next) -> Response {
    tracing::debug!("started processing request");
    let started = Instant::now();
    let route = crate::metrics::route_of(&req);
    let method = req.method().clone();
    let resp = checked(&edge, req, next).await;
    let status = resp.status();
    crate::metrics::record_request(route, &method, status, started);
    let latency_ms = started.elapsed().as_millis();
    if status == axum::http::StatusCode::SERVICE_UNAVAILABLE {
        // An outage, a paused route or a probe before readiness: the
        // outage is logged once where it is seen (outage.rs), not per request.
        tracing::debug!(status = status.as_u16(), latency_ms, "answered 503");
    } else if status.is_server_error() {
        tracing::error!(status = status.as_u16(), latency_ms, "response failed");
    } else {
        tracing::debug!(status = status.as_u16(), latency_ms, "finished processing request");
    }
    resp
}

async fn checked(edge: &Edge, mut req: Request, next: Next) -> Response {
    if let Some(refusal) = crate::auth::check(&edge.auth, &mut req).await {
        return refusal;
    }
    let req = match crate::body_guard::read(edge.body, req).await {
        Ok(req) => req,
        Err(refusal) => return refusal,
    };
    if let Some(refusal) = crate::uri_guard::check(req.uri()) {
        return refusal;
    }
    if edge.engine.awaiting_migration() && needs_schema(&edge.engine, &req) {
        return starting();
    }
    next.run(req).await
}

/// Until the schema is migrated, every route that reads or writes it waits;
/// the probes, the API document and the spool's status do not, nor a push
/// when there is a spool (it is spooled, and drained after the migration).
fn needs_schema(engine: &queen_engine::Engine, req: &Request) -> bool {
    let path = req.uri().path();
    let free = matches!(path, "/health" | "/ready" | "/openapi.json" | "/api/v1/status/buffers")
        || (path == "/api/v1/push" && engine.has_spool());
    !free
}

/// 503 while the database is unreachable or not yet migrated.
fn starting() -> Response {
    let body = serde_json::json!({
        "error": "database unavailable, retry", "code": "unavailable",
        "detail": "the broker is waiting for PostgreSQL (unreachable or not yet migrated)",
    });
    let mut resp = crate::error::json_response(axum::http::StatusCode::SERVICE_UNAVAILABLE, body.to_string());
    resp.headers_mut().insert(axum::http::header::RETRY_AFTER, HeaderValue::from_static("1"));
    resp
}

/// One span per request, named by the route template and the request id;
/// never the URI, so KV keys in path routes do not reach the logs.
fn request_span(req: &Request, id: &HeaderValue) -> tracing::Span {
    let route =
        req.extensions().get::<axum::extract::MatchedPath>().map(|p| p.as_str()).unwrap_or("unmatched");
    let id = id.to_str().unwrap_or_default();
    tracing::info_span!("request", method = %req.method(), route = %route, request_id = %id)
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    #[test]
    fn request_ids_are_distinct_v4_uuids() {
        let ids = RequestIds::new();
        let drawn: Vec<String> = (0..1000).map(|_| ids.next().to_str().unwrap().to_owned()).collect();
        let distinct: std::collections::HashSet<&String> = drawn.iter().collect();
        assert_eq!(distinct.len(), drawn.len());
        for id in &drawn {
            let uuid = uuid::Uuid::parse_str(id).unwrap();
            assert_eq!(uuid.get_version_num(), 4, "{id}");
            assert_eq!(uuid.get_variant(), uuid::Variant::RFC4122, "{id}");
        }
        // Another process (another base) draws other ids.
        assert_ne!(RequestIds::new().next(), RequestIds::new().next());
    }
}
