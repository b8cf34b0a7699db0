//! Streams (`/streams/v1/*`, the Queen 2.x stream runtime): register a
//! query, read its state, commit a cycle. A refusal the runner handles is
//! a 200 with `success: false`; bad input is the broker's 400.

use std::sync::Arc;

use axum::extract::State;
use axum::http::StatusCode;
use axum::response::Response;
use axum::Extension;

use super::broker::Body;
use crate::error::json_response;
use crate::extract::json_body;
#[allow(unused_imports)]
use crate::openapi::*;
use crate::{ApiError, AppState, Caller};

/// `POST /streams/v1/queries`.
#[utoipa::path(post, path = "/streams/v1/queries", tag = "streams", request_body = Object, responses((status = 200, description = "query_id, fresh, reset", body = Object), (status = 400, description = "Bad input, naming the field", body = ErrorBody), (status = 409, description = "config_hash mismatch (send reset: true to start over)", body = Object), (status = 503, description = "PostgreSQL unreachable; Retry-After", body = ErrorBody)))]
pub(crate) async fn register(State(app): State<Arc<AppState>>, body: Body) -> Result<Response, ApiError> {
    let answer = app.engine.stream_register(json_body(&body)?).await?;
    Ok(json_response(StatusCode::OK, answer.0))
}

/// `POST /streams/v1/state/get`.
#[utoipa::path(post, path = "/streams/v1/state/get", tag = "streams", request_body = Object, responses((status = 200, description = "rows: key, value, updated_at, in key order", body = Object), (status = 400, description = "Bad input, naming the field", body = ErrorBody), (status = 503, description = "PostgreSQL unreachable; Retry-After", body = ErrorBody)))]
pub(crate) async fn state_get(State(app): State<Arc<AppState>>, body: Body) -> Result<Response, ApiError> {
    let answer = app.engine.stream_state(json_body(&body)?).await?;
    Ok(json_response(StatusCode::OK, answer.0))
}

/// `POST /streams/v1/cycle`.
#[utoipa::path(post, path = "/streams/v1/cycle", tag = "streams", request_body = Object, responses((status = 200, description = "Committed (success: true), or refused with nothing applied (success: false, error)", body = Object), (status = 400, description = "Bad input, naming the field", body = ErrorBody), (status = 503, description = "PostgreSQL unreachable or push paused; Retry-After", body = ErrorBody)))]
pub(crate) async fn cycle(
    State(app): State<Arc<AppState>>,
    caller: Option<Extension<Caller>>,
    body: Body,
) -> Result<Response, ApiError> {
    // Emits are pushes: their producer is who authenticated.
    let sub = caller.as_ref().and_then(|c| c.sub.as_deref());
    let answer = app.engine.stream_cycle_by(json_body(&body)?, sub).await;
    let outcome = match &answer {
        Ok(_) => "committed",
        Err(queen_engine::EngineError::Refused(_)) => "refused",
        Err(_) => "failed",
    };
    metrics::counter!("queen_stream_cycles_total", "outcome" => outcome).increment(1);
    Ok(json_response(StatusCode::OK, answer?.0))
}
