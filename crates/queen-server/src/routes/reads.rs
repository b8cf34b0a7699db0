//! Reads by offset: `POST /api/v1/fetch` and `POST /api/v1/partitions/changed`.
//! Entry errors (`OFFSET_OUT_OF_RANGE`, `UNKNOWN_TOPIC_OR_PARTITION`) are in
//! the 200 answer; bad input is the broker's 400.

use std::sync::Arc;

use axum::extract::State;
use axum::http::StatusCode;
use axum::response::Response;

use super::broker::Body;
use crate::error::json_response;
use crate::extract::json_body;
#[allow(unused_imports)]
use crate::openapi::*;
use crate::{ApiError, AppState};

/// `POST /api/v1/fetch`.
#[utoipa::path(post, path = "/api/v1/fetch", tag = "reads", request_body = FetchRequest, responses((status = 200, description = "One entry per entry asked, in order: highWatermark, logStartOffset, records, error", body = Object), (status = 400, description = "Bad input, naming the field", body = ErrorBody), (status = 503, description = "PostgreSQL unreachable; Retry-After", body = ErrorBody)))]
pub(crate) async fn fetch(State(app): State<Arc<AppState>>, body: Body) -> Result<Response, ApiError> {
    let answer = app.engine.fetch(json_body(&body)?).await?;
    metrics::counter!("queen_reads_total", "route" => "fetch").increment(1);
    Ok(json_response(StatusCode::OK, answer.0))
}

/// `POST /api/v1/partitions/changed`.
#[utoipa::path(post, path = "/api/v1/partitions/changed", tag = "reads", request_body = ChangedRequest, responses((status = 200, description = "safeTime and one page per entry, paged by next", body = Object), (status = 400, description = "Bad input, naming the field", body = ErrorBody), (status = 503, description = "PostgreSQL unreachable; Retry-After", body = ErrorBody)))]
pub(crate) async fn partitions_changed(
    State(app): State<Arc<AppState>>,
    body: Body,
) -> Result<Response, ApiError> {
    let answer = app.engine.partitions_changed(json_body(&body)?).await?;
    metrics::counter!("queen_reads_total", "route" => "partitions_changed").increment(1);
    Ok(json_response(StatusCode::OK, answer.0))
}
