//! `POST /api/v1/locks`: acquire, renew, release and get, in the KV
//! envelope (`{"error", "reason", "detail"}`); every verdict is a 200.

use std::sync::Arc;

use axum::extract::State;
use axum::http::{header, HeaderValue, StatusCode};
use axum::response::{IntoResponse, Response};
use queen_engine::EngineError;

use super::broker::Body;
use crate::error::json_response;
use crate::extract::json_body;
#[allow(unused_imports)]
use crate::openapi::*;
use crate::{ApiError, AppState};

fn locks_error(status: StatusCode, error: &str, reason: &str, detail: &str) -> Response {
    let body = serde_json::json!({"error": error, "reason": reason, "detail": detail});
    let mut resp = json_response(status, body.to_string());
    if status == StatusCode::SERVICE_UNAVAILABLE {
        resp.headers_mut().insert(header::RETRY_AFTER, HeaderValue::from_static("1"));
    }
    resp
}

fn locks_failure(e: ApiError) -> Response {
    match e {
        ApiError::BadRequest { field, problem } => locks_error(
            StatusCode::BAD_REQUEST,
            "locks_bad_request",
            "locks_bad_body",
            &format!("{field} {problem}"),
        ),
        ApiError::Engine(EngineError::UnstorableText(msg)) => {
            locks_error(StatusCode::BAD_REQUEST, "locks_bad_request", "locks_bad_body", &msg)
        }
        ApiError::Engine(EngineError::Timeout { code, message }) => {
            tracing::warn!(code, error = %message, "locks statement timed out, answering 503");
            locks_error(
                StatusCode::SERVICE_UNAVAILABLE,
                "locks_unavailable",
                code,
                crate::error::timeout_detail(code),
            )
        }
        ApiError::Engine(EngineError::Unavailable(msg) | EngineError::Conflict(msg)) => {
            tracing::warn!(error = %msg, "locks answering 503");
            locks_error(
                StatusCode::SERVICE_UNAVAILABLE,
                "locks_unavailable",
                "locks_unavailable",
                "PostgreSQL is not reachable or a concurrent call won; retry",
            )
        }
        other => other.into_response(),
    }
}

/// `POST /api/v1/locks`.
#[utoipa::path(post, path = "/api/v1/locks", tag = "locks", request_body = LocksRequest, responses((status = 200, description = "One result per op, in order", body = Object), (status = 400, description = "locks_bad_request with its reason", body = KvErrorBody), (status = 503, description = "locks_unavailable; Retry-After", body = KvErrorBody)))]
pub(crate) async fn locks(State(app): State<Arc<AppState>>, body: Body) -> Response {
    let text = match json_body(&body) {
        Ok(t) => t,
        Err(e) => return locks_failure(e),
    };
    match app.engine.locks(text).await {
        Ok(json) => {
            crate::metrics::record_locks(&json.0);
            json_response(StatusCode::OK, json.0)
        }
        Err(e) => locks_failure(e.into()),
    }
}
