//! Ephemeral queues (`/api/v1/ephemeral/*`): in-memory queues owned by one
//! broker (`queen_engine` ephemeral module). Another broker answers 421
//! `ephemeral_not_owner` with the owner's URL.

use std::sync::Arc;
use std::time::Duration;

use axum::extract::{Path, State};
use axum::http::StatusCode;
use axum::response::Response;
use queen_engine::EphemeralPop;

use super::broker::{Body, QueryMap};
use crate::error::json_response;
use crate::extract::{json_body, Params};
#[allow(unused_imports)]
use crate::openapi::*;
use crate::{ApiError, AppState};

type Answer = Result<Response, ApiError>;

fn metered(route: &'static str) {
    metrics::counter!("queen_ephemeral_requests_total", "route" => route).increment(1);
}

/// `POST /api/v1/ephemeral/configure`.
#[utoipa::path(post, path = "/api/v1/ephemeral/configure", tag = "ephemeral", request_body = Object, responses((status = 201, description = "The declared options", body = Object), (status = 400, description = "Bad options", body = ErrorBody), (status = 421, description = "Another broker owns the queue (owner)", body = ErrorBody), (status = 503, description = "PostgreSQL unreachable (the owner is looked up there); Retry-After", body = ErrorBody)))]
pub(crate) async fn configure(State(app): State<Arc<AppState>>, body: Body) -> Answer {
    metered("configure");
    Ok(json_response(StatusCode::CREATED, app.engine.ephemeral_configure(json_body(&body)?).await?.0))
}

/// `POST /api/v1/ephemeral/push`.
#[utoipa::path(post, path = "/api/v1/ephemeral/push", tag = "ephemeral", request_body = Object, responses((status = 201, description = "{pushed}", body = Object), (status = 400, description = "Bad input", body = ErrorBody), (status = 429, description = "queue_full", body = ErrorBody), (status = 421, description = "Another broker owns the queue (owner)", body = ErrorBody), (status = 503, description = "This broker's ephemeral memory is full", body = ErrorBody)))]
pub(crate) async fn push(State(app): State<Arc<AppState>>, body: Body) -> Answer {
    metered("push");
    Ok(json_response(StatusCode::CREATED, app.engine.ephemeral_push(json_body(&body)?).await?.0))
}

/// `GET /api/v1/ephemeral/pop?queue=&partition=&batch=&wait=&timeout=&group=&autoAck=`.
#[utoipa::path(get, path = "/api/v1/ephemeral/pop", tag = "ephemeral", responses((status = 200, description = "{queue, messages: [{id, partition, payload, attempts}]} (empty: messages [])", body = Object), (status = 400, description = "Bad input", body = ErrorBody), (status = 421, description = "Another broker owns the queue (owner)", body = ErrorBody), (status = 503, description = "PostgreSQL unreachable (the owner is looked up there); Retry-After", body = ErrorBody)))]
pub(crate) async fn pop(State(app): State<Arc<AppState>>, query: QueryMap) -> Answer {
    metered("pop");
    let p = Params::from(query)?;
    let queue = p.str("queue").ok_or_else(|| ApiError::bad("queue", "is required"))?.to_owned();
    let wait = p.bool("wait")?.unwrap_or(false);
    let max_wait = (app.config.max_wait_ms as i64).min(300_000);
    let timeout = p.int("timeout", 0, i64::MAX)?.unwrap_or(30_000).min(max_wait) as u64;
    let req = EphemeralPop {
        queue,
        partition: p.str("partition").map(str::to_owned),
        group: p.str("group").map(str::to_owned),
        batch: p.int("batch", 1, 10_000)?.unwrap_or(1) as usize,
        auto_ack: p.bool("autoAck")?.unwrap_or(false),
        wait: wait.then(|| Duration::from_millis(timeout)),
    };
    Ok(json_response(StatusCode::OK, app.engine.ephemeral_pop(&req).await?.0))
}

/// `POST /api/v1/ephemeral/ack`.
#[utoipa::path(post, path = "/api/v1/ephemeral/ack", tag = "ephemeral", request_body = Object, responses((status = 200, description = "{results: [{id, outcome: acked|redelivered|stale|unknown}]}", body = Object), (status = 400, description = "Bad input", body = ErrorBody), (status = 421, description = "Another broker owns the queue (owner)", body = ErrorBody), (status = 503, description = "PostgreSQL unreachable (the owner is looked up there); Retry-After", body = ErrorBody)))]
pub(crate) async fn ack(State(app): State<Arc<AppState>>, body: Body) -> Answer {
    metered("ack");
    Ok(json_response(StatusCode::OK, app.engine.ephemeral_ack(json_body(&body)?).await?.0))
}

/// `POST /api/v1/ephemeral/reset`.
#[utoipa::path(post, path = "/api/v1/ephemeral/reset", tag = "ephemeral", request_body = Object, responses((status = 400, description = "Bad input", body = ErrorBody), (status = 200, description = "{queue, dropped}", body = Object), (status = 421, description = "Another broker owns the queue (owner)", body = ErrorBody), (status = 503, description = "PostgreSQL unreachable (the owner is looked up there); Retry-After", body = ErrorBody)))]
pub(crate) async fn reset(State(app): State<Arc<AppState>>, body: Body) -> Answer {
    metered("reset");
    Ok(json_response(StatusCode::OK, app.engine.ephemeral_reset(json_body(&body)?).await?.0))
}

/// `DELETE /api/v1/ephemeral/queue/:queue`.
#[utoipa::path(delete, path = "/api/v1/ephemeral/queue/{queue}", tag = "ephemeral", params(("queue" = String, Path)), responses((status = 400, description = "Bad input", body = ErrorBody), (status = 200, description = "{queue, deleted, declared}", body = Object), (status = 421, description = "Another broker owns the queue (owner)", body = ErrorBody), (status = 503, description = "PostgreSQL unreachable (the owner is looked up there); Retry-After", body = ErrorBody)))]
pub(crate) async fn delete(State(app): State<Arc<AppState>>, Path(queue): Path<String>) -> Answer {
    metered("delete");
    Ok(json_response(StatusCode::OK, app.engine.ephemeral_delete(&queue).await?.0))
}

/// `GET /api/v1/ephemeral/queues`.
#[utoipa::path(get, path = "/api/v1/ephemeral/queues", tag = "ephemeral", responses((status = 200, description = "The ephemeral queues this broker owns", body = Object)))]
pub(crate) async fn queues(State(app): State<Arc<AppState>>) -> Answer {
    Ok(json_response(StatusCode::OK, app.engine.ephemeral_queues().0))
}

/// `GET /api/v1/ephemeral/queues/:queue/depth`.
#[utoipa::path(get, path = "/api/v1/ephemeral/queues/{queue}/depth", tag = "ephemeral", params(("queue" = String, Path)), responses((status = 400, description = "Bad input", body = ErrorBody), (status = 200, description = "pending, bytes, partitions, groups", body = Object), (status = 404, description = "ephemeral_queue_not_found", body = ErrorBody), (status = 421, description = "Another broker owns the queue (owner)", body = ErrorBody), (status = 503, description = "PostgreSQL unreachable (the owner is looked up there); Retry-After", body = ErrorBody)))]
pub(crate) async fn depth(
    State(app): State<Arc<AppState>>,
    Path(queue): Path<String>,
    query: QueryMap,
) -> Answer {
    let p = Params::from(query)?;
    Ok(json_response(StatusCode::OK, app.engine.ephemeral_depth(&queue, p.str("group")).await?.0))
}
