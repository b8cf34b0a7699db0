//! One mapping from engine errors to `(status, JSON body)`.
//!
//! Business refusals are 200 (a 5xx would make clients resend); a database
//! that cannot be reached is 503 with `Retry-After`; our own bugs are 500
//! and are logged, never echoed in detail.

use axum::http::{header, HeaderValue, StatusCode};
use axum::response::{IntoResponse, Response};
use queen_engine::EngineError;

/// An error answer of the HTTP API.
#[derive(Debug)]
pub enum ApiError {
    /// From the engine.
    Engine(EngineError),
    /// A request whose shape is wrong before it reaches the engine.
    BadRequest {
        /// The JSON path or parameter name.
        field: String,
        /// What is wrong with it.
        problem: String,
    },
    /// The body is larger than the limit.
    TooLarge,
    /// The body did not arrive within the read deadline.
    BodyTimeout,
}

impl ApiError {
    /// A 400 naming `field`.
    pub fn bad(field: impl Into<String>, problem: impl Into<String>) -> Self {
        ApiError::BadRequest { field: field.into(), problem: problem.into() }
    }
}

impl From<EngineError> for ApiError {
    fn from(e: EngineError) -> Self {
        ApiError::Engine(e)
    }
}

/// A JSON text answered as is.
pub(crate) fn json_response(status: StatusCode, body: String) -> Response {
    (status, [(header::CONTENT_TYPE, HeaderValue::from_static("application/json"))], body).into_response()
}

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        match self {
            ApiError::BadRequest { field, problem } => {
                let msg = format!("{field} {problem}");
                let body = serde_json::json!({
                    "error": msg, "code": "bad_request", "field": field, "detail": msg,
                });
                json_response(StatusCode::BAD_REQUEST, body.to_string())
            }
            ApiError::TooLarge => {
                let body = serde_json::json!({
                    "error": "payload_too_large", "code": "payload_too_large",
                    "detail": "the request body is larger than the broker accepts",
                });
                json_response(StatusCode::PAYLOAD_TOO_LARGE, body.to_string())
            }
            ApiError::BodyTimeout => {
                let body = serde_json::json!({
                    "error": "request body not received in time", "code": "request_timeout",
                    "detail": "the whole body must arrive within the broker's body read timeout",
                });
                json_response(StatusCode::REQUEST_TIMEOUT, body.to_string())
            }
            ApiError::Engine(EngineError::Rejected { status, body }) => {
                json_response(StatusCode::from_u16(status).unwrap_or(StatusCode::BAD_REQUEST), body)
            }
            ApiError::Engine(EngineError::Refused(body)) => json_response(StatusCode::OK, body),
            ApiError::Engine(EngineError::PreconditionLost(lost)) => {
                json_response(StatusCode::OK, lost.kv_body())
            }
            ApiError::Engine(EngineError::UnstorableText(detail)) => {
                let body = serde_json::json!({
                    "error": "body contains a string PostgreSQL cannot store (\\u0000 or a lone surrogate)",
                    "code": "bad_request",
                    "detail": detail,
                });
                json_response(StatusCode::BAD_REQUEST, body.to_string())
            }
            ApiError::Engine(EngineError::Paused(body)) => {
                let mut resp = json_response(StatusCode::SERVICE_UNAVAILABLE, body);
                resp.headers_mut().insert(header::RETRY_AFTER, HeaderValue::from_static("1"));
                resp
            }
            ApiError::Engine(e @ (EngineError::Unavailable(_) | EngineError::Conflict(_))) => {
                tracing::warn!(error = %e, "answering 503");
                let body = serde_json::json!({
                    "error": "database unavailable, retry", "code": "unavailable",
                    "detail": "the broker cannot reach PostgreSQL right now",
                });
                let mut resp = json_response(StatusCode::SERVICE_UNAVAILABLE, body.to_string());
                resp.headers_mut().insert(header::RETRY_AFTER, HeaderValue::from_static("1"));
                resp
            }
            ApiError::Engine(EngineError::Timeout { code, message }) => {
                tracing::warn!(code, error = %message, "a statement timed out; answering 503");
                let body = serde_json::json!({
                    "error": "the database did not answer in time, retry", "code": code,
                    "detail": timeout_detail(code),
                });
                let mut resp = json_response(StatusCode::SERVICE_UNAVAILABLE, body.to_string());
                resp.headers_mut().insert(header::RETRY_AFTER, HeaderValue::from_static("1"));
                resp
            }
            ApiError::Engine(EngineError::Encryption(detail)) => {
                tracing::error!(error = %detail, "encryption at rest");
                let body = serde_json::json!({
                    "error": "encryption at rest cannot be honoured by this broker",
                    "code": "encryption_unavailable",
                    "detail": detail,
                });
                json_response(StatusCode::INTERNAL_SERVER_ERROR, body.to_string())
            }
            ApiError::Engine(EngineError::EncryptionChanged(queues)) => {
                let body = serde_json::json!({
                    "error": "a queue's encryption setting changed during the call; retry",
                    "code": "unavailable",
                    "detail": format!("queues {queues:?}"),
                });
                let mut resp = json_response(StatusCode::SERVICE_UNAVAILABLE, body.to_string());
                resp.headers_mut().insert(header::RETRY_AFTER, HeaderValue::from_static("1"));
                resp
            }
            ApiError::Engine(e) => {
                tracing::error!(error = %e, "internal error");
                let body = serde_json::json!({
                    "error": "internal error", "code": "internal",
                    "detail": "the broker failed; see its log",
                });
                json_response(StatusCode::INTERNAL_SERVER_ERROR, body.to_string())
            }
        }
    }
}

/// What a timed-out call tells its client: it wrote nothing.
pub(crate) fn timeout_detail(code: &str) -> &'static str {
    if code == "lock_timeout" {
        "a row the call needs is locked by another session past the lock timeout; nothing was written"
    } else {
        "the statement ran past the statement timeout and was cancelled; nothing was written"
    }
}

/// An answer sent before the request body was read: hyper cannot reuse the
/// connection (the unread body would be taken for the next request), so
/// say so, or a client would send its next request on a closing connection.
pub(crate) fn close_after(resp: &mut Response) {
    resp.headers_mut().insert(header::CONNECTION, HeaderValue::from_static("close"));
}
