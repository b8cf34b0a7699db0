//! Timers: `POST /api/v1/timers` (schedule, reschedule, cancel), the cancel
//! route that is never blocked (`DELETE /api/v1/timers/:queue/*timerKey`),
//! peek (`GET` of the same path) and the keyset list of a queue. Errors are
//! in the KV envelope (`{"error", "reason", "detail"}`); every verdict is a
//! 200.

use std::collections::HashMap;
use std::sync::Arc;

use axum::extract::rejection::PathRejection;
use axum::extract::{Path, State};
use axum::http::{header, HeaderValue, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::Extension;
use queen_engine::EngineError;

use super::broker::{Body, QueryMap};
use crate::error::json_response;
use crate::extract::json_body;
#[allow(unused_imports)]
use crate::openapi::*;
use crate::{ApiError, AppState, Caller};

fn timers_error(status: StatusCode, error: &str, reason: &str, detail: &str) -> Response {
    let body = serde_json::json!({"error": error, "reason": reason, "detail": detail});
    let mut resp = json_response(status, body.to_string());
    if status == StatusCode::SERVICE_UNAVAILABLE {
        resp.headers_mut().insert(header::RETRY_AFTER, HeaderValue::from_static("1"));
    }
    resp
}

fn timers_failure(e: ApiError) -> Response {
    match e {
        ApiError::BadRequest { field, problem } => timers_error(
            StatusCode::BAD_REQUEST,
            "timers_bad_request",
            "timers_bad_body",
            &format!("{field} {problem}"),
        ),
        ApiError::TooLarge => timers_error(
            StatusCode::PAYLOAD_TOO_LARGE,
            "payload_too_large",
            "timers_body_too_large",
            "the request body is larger than the broker accepts",
        ),
        ApiError::Engine(EngineError::UnstorableText(msg)) => {
            timers_error(StatusCode::BAD_REQUEST, "timers_bad_request", "timers_bad_body", &msg)
        }
        ApiError::Engine(EngineError::Timeout { code, message }) => {
            tracing::warn!(code, error = %message, "timers statement timed out, answering 503");
            timers_error(
                StatusCode::SERVICE_UNAVAILABLE,
                "timers_unavailable",
                code,
                crate::error::timeout_detail(code),
            )
        }
        ApiError::Engine(EngineError::Unavailable(msg) | EngineError::Conflict(msg)) => {
            tracing::warn!(error = %msg, "timers answering 503");
            timers_error(
                StatusCode::SERVICE_UNAVAILABLE,
                "timers_unavailable",
                "timers_unavailable",
                "PostgreSQL is not reachable or a concurrent call won; retry",
            )
        }
        other => other.into_response(),
    }
}

fn answer(result: Result<queen_engine::Json, EngineError>) -> Response {
    match result {
        Ok(json) => json_response(StatusCode::OK, json.0),
        Err(e) => timers_failure(e.into()),
    }
}

type TimerPath = Result<Path<(String, String)>, PathRejection>;

fn timer_path(path: TimerPath) -> Result<(String, String), Box<Response>> {
    path.map(|Path(p)| p).map_err(|_| {
        Box::new(timers_error(
            StatusCode::BAD_REQUEST,
            "timers_bad_request",
            "timers_bad_field",
            "the queue or timer key in the path is not valid UTF-8",
        ))
    })
}

/// `POST /api/v1/timers`.
#[utoipa::path(post, path = "/api/v1/timers", tag = "timers", request_body = TimersRequest, responses((status = 200, description = "One result per op, in order", body = Object), (status = 400, description = "timers_bad_request with its reason", body = KvErrorBody), (status = 403, description = "timer_horizon_exceeded", body = KvErrorBody), (status = 413, description = "payload_too_large", body = KvErrorBody), (status = 503, description = "timers_unavailable; Retry-After", body = KvErrorBody)))]
pub(crate) async fn timers(
    State(app): State<Arc<AppState>>,
    caller: Option<Extension<Caller>>,
    body: Body,
) -> Response {
    let text = match json_body(&body) {
        Ok(t) => t,
        Err(e) => return timers_failure(e),
    };
    // The fired message's producer is who scheduled it, as for a push.
    let sub = caller.as_ref().and_then(|c| c.sub.as_deref());
    let result = app.engine.timers_by(text, sub).await;
    if let Ok(json) = &result {
        crate::metrics::record_timers(&json.0);
    }
    answer(result)
}

/// `DELETE /api/v1/timers/:queue/*timerKey[?txn=]`: cancelled, absent or too_late.
#[utoipa::path(delete, path = "/api/v1/timers/{queue}/{*timerKey}", tag = "timers", params(("queue" = String, Path), ("timerKey" = String, Path, description = "The rest of the path, slashes included"), ("txn" = Option<String>, Query, description = "Echoed in the answer")), responses((status = 200, description = "cancelled, absent or too_late", body = Object), (status = 400, description = "timers_bad_request", body = KvErrorBody), (status = 503, description = "timers_unavailable; Retry-After", body = KvErrorBody)))]
pub(crate) async fn cancel(State(app): State<Arc<AppState>>, path: TimerPath, query: QueryMap) -> Response {
    let (queue, key) = match timer_path(path) {
        Ok(p) => p,
        Err(resp) => return *resp,
    };
    let txn = query.ok().and_then(|q| q.0.get("txn").cloned());
    let result = app.engine.timer_cancel(&queue, &key, txn.as_deref()).await;
    if let Ok(json) = &result {
        crate::metrics::record_timer_cancel(&json.0);
    }
    answer(result)
}

/// `GET /api/v1/timers/:queue/*timerKey`: `{"found": true, ...}` or `{"found": false}`.
#[utoipa::path(get, path = "/api/v1/timers/{queue}/{*timerKey}", tag = "timers", params(("queue" = String, Path), ("timerKey" = String, Path, description = "The rest of the path, slashes included")), responses((status = 200, description = "The pending timer with its payload, or found: false", body = Object), (status = 400, description = "timers_bad_request", body = KvErrorBody), (status = 503, description = "timers_unavailable; Retry-After", body = KvErrorBody)))]
pub(crate) async fn peek(State(app): State<Arc<AppState>>, path: TimerPath) -> Response {
    match timer_path(path) {
        Ok((queue, key)) => answer(app.engine.timer_peek(&queue, &key).await),
        Err(resp) => *resp,
    }
}

/// `GET /api/v1/timers/:queue?after=&limit=`: a keyset page in key order.
#[utoipa::path(get, path = "/api/v1/timers/{queue}", tag = "timers", params(("queue" = String, Path), ("after" = Option<String>, Query, description = "Exclusive keyset cursor: the nextAfter of the previous page"), ("limit" = Option<i64>, Query, description = "Clamped to 1..1000, default 100")), responses((status = 200, description = "rows, truncated, nextAfter", body = Object), (status = 400, description = "timers_bad_request", body = KvErrorBody), (status = 503, description = "timers_unavailable; Retry-After", body = KvErrorBody)))]
pub(crate) async fn list(
    State(app): State<Arc<AppState>>,
    path: Result<Path<String>, PathRejection>,
    query: QueryMap,
) -> Response {
    let Ok(Path(queue)) = path else {
        return timers_error(StatusCode::BAD_REQUEST, "timers_bad_request", "timers_bad_field", "bad queue");
    };
    let q: HashMap<String, String> = query.map(|q| q.0).unwrap_or_default();
    let limit = match q.get("limit").map(|l| l.parse::<i64>()) {
        None => None,
        Some(Ok(l)) => Some(l),
        // Any page size is clamped, never refused; one that is no integer is a typo.
        Some(Err(_)) => {
            return timers_error(
                StatusCode::BAD_REQUEST,
                "timers_bad_request",
                "timers_bad_field",
                "limit must be an integer",
            )
        }
    };
    let after = q.get("after").filter(|a| !a.is_empty());
    answer(app.engine.timer_list(&queue, after.map(String::as_str), limit).await)
}
