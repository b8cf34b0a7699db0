//! KV routes: `POST /api/v1/kv` (the complete surface) and the path sugar
//! `GET|PUT|DELETE /api/v1/kv/:ns/*key` for curl users; and the read-only
//! KV browser, `GET /api/v1/resources/kv/namespaces` and
//! `POST /api/v1/resources/kv/list`.

use std::collections::BTreeMap;
use std::sync::Arc;

use axum::body::Bytes;
use axum::extract::rejection::PathRejection;
use axum::extract::{Path, RawQuery, State};
use axum::http::{header, HeaderValue, StatusCode};
use axum::response::{IntoResponse, Response};
use queen_engine::{EngineError, KvOutcome, KvResult, KvResults};
use serde_json::value::RawValue;

use super::broker::Body;
use crate::error::json_response;
use crate::extract::json_body;
#[allow(unused_imports)]
use crate::openapi::*;
use crate::{ApiError, AppState};

/// A KV error body: `error` is the code clients branch on.
fn kv_error(status: StatusCode, error: &str, reason: &str, detail: &str) -> Response {
    let body = serde_json::json!({"error": error, "reason": reason, "detail": detail});
    let mut resp = json_response(status, body.to_string());
    if status == StatusCode::SERVICE_UNAVAILABLE {
        resp.headers_mut().insert(header::RETRY_AFTER, HeaderValue::from_static("1"));
    }
    resp
}

/// Engine errors in the KV envelope.
pub(crate) fn kv_failure(e: ApiError) -> Response {
    match e {
        ApiError::BadRequest { field, problem } => {
            kv_error(StatusCode::BAD_REQUEST, "kv_bad_request", "kv_bad_body", &format!("{field} {problem}"))
        }
        ApiError::TooLarge => kv_error(
            StatusCode::PAYLOAD_TOO_LARGE,
            "payload_too_large",
            "kv_body_too_large",
            "the request body is larger than the broker accepts",
        ),
        ApiError::BodyTimeout => kv_error(
            StatusCode::REQUEST_TIMEOUT,
            "request_timeout",
            "kv_body_timeout",
            "the request body did not arrive in time",
        ),
        ApiError::Engine(EngineError::Unavailable(msg)) => {
            tracing::warn!(error = %msg, "kv answering 503");
            let reason = if msg.contains("imeout") { "kv_timeout" } else { "kv_pool_exhausted" };
            kv_error(
                StatusCode::SERVICE_UNAVAILABLE,
                "kv_unavailable",
                reason,
                "PostgreSQL is not reachable; retry",
            )
        }
        ApiError::Engine(EngineError::Timeout { code, message }) => {
            tracing::warn!(code, error = %message, "kv statement timed out, answering 503");
            let body = serde_json::json!({"error": "kv_unavailable", "reason": "kv_timeout", "code": code,
                "detail": crate::error::timeout_detail(code)});
            let mut resp = json_response(StatusCode::SERVICE_UNAVAILABLE, body.to_string());
            resp.headers_mut().insert(header::RETRY_AFTER, HeaderValue::from_static("1"));
            resp
        }
        ApiError::Engine(EngineError::Conflict(msg)) => {
            tracing::warn!(error = %msg, "kv conflict, answering 503");
            kv_error(
                StatusCode::SERVICE_UNAVAILABLE,
                "kv_unavailable",
                "kv_timeout",
                "a concurrent call won; retry",
            )
        }
        ApiError::Engine(e @ (EngineError::Database(_) | EngineError::Protocol(_))) => {
            tracing::error!(error = %e, "kv internal error");
            kv_error(
                StatusCode::INTERNAL_SERVER_ERROR,
                "kv_error",
                "kv_internal",
                "the broker failed; see its log",
            )
        }
        other => other.into_response(),
    }
}

/// `POST /api/v1/kv`.
#[utoipa::path(post, path = "/api/v1/kv", tag = "kv", request_body = KvRequest, responses((status = 200, description = "Index-aligned results, or the kv_precondition body of a lost required precondition", body = Object), (status = 400, description = "kv_bad_request with its reason", body = KvErrorBody), (status = 413, description = "Body too large", body = KvErrorBody), (status = 503, description = "kv_unavailable; Retry-After", body = KvErrorBody)))]
pub(crate) async fn batch(State(app): State<Arc<AppState>>, body: Body) -> Response {
    let text = match json_body(&body) {
        Ok(t) => t,
        Err(e) => return kv_failure(e),
    };
    match app.engine.kv_outcome(text).await {
        Ok(outcome) => {
            crate::metrics::record_kv(&outcome);
            match outcome_body(&outcome, None) {
                Ok(body) => json_response(StatusCode::OK, body),
                Err(e) => kv_failure(e),
            }
        }
        Err(e) => kv_failure(e.into()),
    }
}

/// The 200 body of a KV call: its results (or, with `element`, the one
/// result the path routes answer bare), or the kv_precondition body of a
/// lost `required` precondition.
fn outcome_body(outcome: &KvOutcome, element: Option<usize>) -> Result<String, ApiError> {
    let protocol = |e: serde_json::Error| ApiError::Engine(EngineError::Protocol(e.to_string()));
    match (outcome, element) {
        (KvOutcome::PreconditionLost(lost), _) => Ok(lost.kv_body()),
        (KvOutcome::Done(results), None) => serde_json::to_string(&KvResults { results }).map_err(protocol),
        (KvOutcome::Done(results), Some(i)) => match results.get(i) {
            Some(r) => serde_json::to_string(r).map_err(protocol),
            None => Err(ApiError::Engine(EngineError::Protocol("kv answered no result".into()))),
        },
    }
}

type KeyPath = Result<Path<(String, String)>, PathRejection>;

/// The path routes answer the bare result element.
async fn path_op(app: &AppState, op: &str, ns: &str, key: &str, body: Option<&str>) -> Response {
    let mut fields: BTreeMap<String, Box<RawValue>> = BTreeMap::new();
    if let Some(text) = body.filter(|t| !t.trim().is_empty()) {
        match serde_json::from_str::<BTreeMap<String, Box<RawValue>>>(text) {
            Ok(map) => fields = map,
            Err(_) => {
                return kv_error(
                    StatusCode::BAD_REQUEST,
                    "kv_bad_request",
                    "kv_bad_body",
                    "the body must be a JSON object",
                )
            }
        }
    }
    for name in ["op", "ns", "key"] {
        if fields.contains_key(name) {
            return kv_error(
                StatusCode::BAD_REQUEST,
                "kv_bad_request",
                "kv_field_in_path",
                &format!("{name} comes from the path and must not be in the body"),
            );
        }
    }
    let raw = |s: &str| RawValue::from_string(serde_json::to_string(s).unwrap_or_default());
    for (name, value) in [("op", op), ("ns", ns), ("key", key)] {
        match raw(value) {
            Ok(v) => {
                fields.insert(name.into(), v);
            }
            Err(_) => return kv_failure(ApiError::bad(name, "could not be encoded")),
        }
    }
    let op_text = match serde_json::to_string(&fields) {
        Ok(t) => t,
        Err(_) => return kv_failure(ApiError::bad("body", "could not be encoded")),
    };
    let outcome = match app.engine.kv_outcome(&format!("[{op_text}]")).await {
        Ok(outcome) => outcome,
        Err(e) => return kv_failure(e.into()),
    };
    crate::metrics::record_kv(&outcome);
    let body = match outcome_body(&outcome, Some(0)) {
        Ok(body) => body,
        Err(e) => return kv_failure(e),
    };
    let mut resp = json_response(StatusCode::OK, body);
    if let KvOutcome::Done(results) = &outcome {
        if let Some(KvResult { found: Some(true), version: Some(v), .. }) =
            results.first().filter(|_| op == "get")
        {
            if let Ok(etag) = HeaderValue::from_str(&format!("\"{v}\"")) {
                resp.headers_mut().insert(header::ETAG, etag);
            }
        }
    }
    resp
}

fn key_from(path: KeyPath, query: &Option<String>) -> Result<(String, String), Box<Response>> {
    if query.is_some() {
        return Err(Box::new(kv_error(
            StatusCode::BAD_REQUEST,
            "kv_bad_request",
            "kv_no_query_string",
            "the KV path routes take no query string",
        )));
    }
    path.map(|Path(p)| p).map_err(|_| {
        Box::new(kv_error(
            StatusCode::BAD_REQUEST,
            "kv_bad_request",
            "kv_bad_key",
            "the key in the path is not valid UTF-8",
        ))
    })
}

/// `GET /api/v1/kv/:ns/*key`.
#[utoipa::path(get, path = "/api/v1/kv/{ns}/{*key}", tag = "kv", params(("ns" = String, Path), ("key" = String, Path, description = "The rest of the path, slashes included")), responses((status = 200, description = "The bare get result; ETag is the version", body = Object), (status = 400, description = "kv_bad_request with its reason", body = KvErrorBody), (status = 413, description = "Body too large", body = KvErrorBody), (status = 503, description = "kv_unavailable; Retry-After", body = KvErrorBody)))]
pub(crate) async fn get_key(
    State(app): State<Arc<AppState>>,
    path: KeyPath,
    RawQuery(q): RawQuery,
) -> Response {
    match key_from(path, &q) {
        Ok((ns, key)) => path_op(&app, "get", &ns, &key, None).await,
        Err(resp) => *resp,
    }
}

/// `PUT /api/v1/kv/:ns/*key` with `{value, ttlSeconds | forever, expect?, required?}`.
#[utoipa::path(put, path = "/api/v1/kv/{ns}/{*key}", tag = "kv", params(("ns" = String, Path), ("key" = String, Path, description = "The rest of the path, slashes included")), request_body = KvPutBody, responses((status = 200, description = "The bare put result", body = Object), (status = 400, description = "kv_bad_request with its reason", body = KvErrorBody), (status = 413, description = "Body too large", body = KvErrorBody), (status = 503, description = "kv_unavailable; Retry-After", body = KvErrorBody)))]
pub(crate) async fn put_key(
    State(app): State<Arc<AppState>>,
    path: KeyPath,
    RawQuery(q): RawQuery,
    body: Body,
) -> Response {
    let (ns, key) = match key_from(path, &q) {
        Ok(k) => k,
        Err(resp) => return *resp,
    };
    match json_body(&body) {
        Ok(text) => path_op(&app, "put", &ns, &key, Some(text)).await,
        Err(e) => kv_failure(e),
    }
}

/// `DELETE /api/v1/kv/:ns/*key` with an optional `{expect?, required?}`.
#[utoipa::path(delete, path = "/api/v1/kv/{ns}/{*key}", tag = "kv", params(("ns" = String, Path), ("key" = String, Path, description = "The rest of the path, slashes included")), request_body(content = Option<KvDeleteBody>, description = "May be empty"), responses((status = 200, description = "The bare delete result", body = Object), (status = 400, description = "kv_bad_request with its reason", body = KvErrorBody), (status = 413, description = "Body too large", body = KvErrorBody), (status = 503, description = "kv_unavailable; Retry-After", body = KvErrorBody)))]
pub(crate) async fn delete_key(
    State(app): State<Arc<AppState>>,
    path: KeyPath,
    RawQuery(q): RawQuery,
    body: Result<Bytes, axum::extract::rejection::BytesRejection>,
) -> Response {
    let (ns, key) = match key_from(path, &q) {
        Ok(k) => k,
        Err(resp) => return *resp,
    };
    let empty = matches!(&body, Ok(b) if b.iter().all(u8::is_ascii_whitespace));
    if empty {
        return path_op(&app, "delete", &ns, &key, None).await;
    }
    match json_body(&body) {
        Ok(text) => path_op(&app, "delete", &ns, &key, Some(text)).await,
        Err(e) => kv_failure(e),
    }
}

/// The KV browser routes take no query string: a key or prefix in a URL
/// would end up in access logs.
fn refuse_query(query: &Option<String>) -> Option<Response> {
    query.is_some().then(|| {
        kv_error(
            StatusCode::BAD_REQUEST,
            "kv_bad_request",
            "kv_no_query_string",
            "the KV browser routes take no query string; send the page request as the JSON body",
        )
    })
}

/// `GET /api/v1/resources/kv/namespaces`.
#[utoipa::path(get, path = "/api/v1/resources/kv/namespaces", tag = "kv", responses((status = 200, description = "Every namespace with its live key count and its expired rows not yet swept", body = KvNamespacesAnswer), (status = 400, description = "kv_bad_request, reason kv_no_query_string", body = KvErrorBody), (status = 503, description = "kv_unavailable; Retry-After", body = KvErrorBody)))]
pub(crate) async fn namespaces(State(app): State<Arc<AppState>>, RawQuery(q): RawQuery) -> Response {
    if let Some(refusal) = refuse_query(&q) {
        return refusal;
    }
    match app.engine.kv_namespace_counts().await {
        Ok(json) => json_response(StatusCode::OK, json.0),
        Err(e) => kv_failure(e.into()),
    }
}

/// `POST /api/v1/resources/kv/list`: one keyset page of one namespace.
#[utoipa::path(post, path = "/api/v1/resources/kv/list", tag = "kv", request_body = KvListBody, responses((status = 200, description = "The keys of the page in byte order, expired-but-unswept rows labelled; nextCursor when more remain", body = KvListAnswer), (status = 400, description = "kv_bad_request with its reason (kv_bad_namespace, kv_bad_prefix, kv_bad_cursor, kv_bad_limit, kv_bad_body, kv_no_query_string)", body = KvErrorBody), (status = 413, description = "Body too large", body = KvErrorBody), (status = 503, description = "kv_unavailable; Retry-After", body = KvErrorBody)))]
pub(crate) async fn list(State(app): State<Arc<AppState>>, RawQuery(q): RawQuery, body: Body) -> Response {
    if let Some(refusal) = refuse_query(&q) {
        return refusal;
    }
    let request = match json_body(&body).map_err(kv_failure) {
        Ok(text) => match queen_engine::decode_kv_list(text) {
            Ok(r) => r,
            Err(e) => return kv_failure(e.into()),
        },
        Err(resp) => return resp,
    };
    match app.engine.kv_list(&request).await {
        Ok(json) => json_response(StatusCode::OK, json.0),
        Err(e) => kv_failure(e.into()),
    }
}
