//! Broker core routes: configure, push, pop, ack, lease, transaction, DLQ,
//! queues and consumer groups.

use std::sync::Arc;
use std::time::Duration;

use axum::body::Bytes;
use axum::extract::rejection::{BytesRejection, QueryRejection};
use axum::extract::{Path, Query, State};
use axum::http::{header, HeaderValue, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::Extension;
use queen_engine::{DlqQuery, PopRequest};
use serde::Deserialize;
use serde_json::value::RawValue;
use std::collections::HashMap;

use crate::error::json_response;
use crate::extract::{json_body, object_body, Params};
#[allow(unused_imports)]
use crate::openapi::*;
use crate::{ApiError, AppState, Caller};

pub(crate) type Body = Result<Bytes, BytesRejection>;
pub(crate) type QueryMap = Result<Query<HashMap<String, String>>, QueryRejection>;
type Answer = Result<Response, ApiError>;

fn ok(json: queen_engine::Json) -> Response {
    json_response(StatusCode::OK, json.0)
}

/// How long `/health` and `/ready` wait for the database's answer.
const PROBE_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(2);

/// Liveness: 200 while the process serves, the database reachable or not
/// (`database` says which); `/ready` is the probe that needs the database.
#[utoipa::path(get, path = "/health", tag = "broker", responses((status = 200, description = "The process serves; `database` is connected or disconnected", body = Object)))]
pub(crate) async fn health(State(app): State<Arc<AppState>>) -> Response {
    let connected = matches!(tokio::time::timeout(PROBE_TIMEOUT, app.engine.health()).await, Ok(Ok(())));
    let (status, database) = if connected { ("healthy", "connected") } else { ("degraded", "disconnected") };
    json_response(
        StatusCode::OK,
        serde_json::json!({"status": status, "database": database, "version": env!("CARGO_PKG_VERSION")})
            .to_string(),
    )
}

/// Readiness: 200 once the schema is migrated and while the database
/// answers; else 503 with `Retry-After`.
#[utoipa::path(get, path = "/ready", tag = "broker", responses((status = 200, description = "Ready: the database answers and the schema is migrated", body = Object), (status = 503, description = "Not ready; Retry-After", body = ErrorBody)))]
pub(crate) async fn ready(State(app): State<Arc<AppState>>) -> Response {
    let verdict = match tokio::time::timeout(PROBE_TIMEOUT, app.engine.ready()).await {
        Ok(verdict) => verdict,
        Err(_) => Err(queen_engine::EngineError::Unavailable("the database did not answer in time".into())),
    };
    match verdict {
        Ok(()) => json_response(StatusCode::OK, serde_json::json!({"status": "ready"}).to_string()),
        Err(e) => {
            let migrating = app.engine.awaiting_migration();
            let body = serde_json::json!({
                "status": "unavailable", "error": "not ready", "code": "not_ready",
                "database": if migrating { "not migrated" } else { "disconnected" }, "detail": e.to_string(),
            });
            let mut resp = json_response(StatusCode::SERVICE_UNAVAILABLE, body.to_string());
            resp.headers_mut().insert(header::RETRY_AFTER, HeaderValue::from_static("1"));
            resp
        }
    }
}

pub(crate) async fn not_found() -> Response {
    json_response(
        StatusCode::NOT_FOUND,
        serde_json::json!({"error": "not found", "code": "not_found"}).to_string(),
    )
}

#[utoipa::path(post, path = "/api/v1/configure", tag = "broker", request_body = ConfigureRequest, responses((status = 200, description = "The effective options", body = Object), (status = 400, description = "Bad input, naming the field", body = ErrorBody), (status = 503, description = "PostgreSQL unreachable or the route paused; Retry-After", body = ErrorBody)))]
pub(crate) async fn configure(State(app): State<Arc<AppState>>, body: Body) -> Answer {
    Ok(ok(app.engine.configure(json_body(&body)?).await?))
}

#[derive(Deserialize)]
struct PushBody<'a> {
    #[serde(borrow)]
    items: Option<&'a RawValue>,
}

#[utoipa::path(post, path = "/api/v1/push", tag = "broker", request_body = PushRequest, responses((status = 201, description = "One result per item, in order: queued, duplicate or failed", body = [Object]), (status = 413, description = "Body too large", body = ErrorBody), (status = 400, description = "Bad input, naming the field", body = ErrorBody), (status = 503, description = "PostgreSQL unreachable or the route paused; Retry-After", body = ErrorBody)))]
pub(crate) async fn push(
    State(app): State<Arc<AppState>>,
    caller: Option<Extension<Caller>>,
    body: Body,
) -> Answer {
    let kib = body.as_ref().map_or(0, Bytes::len) / 1024 + 1;
    let weight = u32::try_from(kib.min(crate::PUSH_DECODED_KIB)).unwrap_or(1);
    // Never closed; were it, the push would go on without waiting.
    let _budget = app.push_budget.acquire_many(weight).await.ok();
    let mut items = {
        let text = object_body(&body)?;
        let parsed: PushBody = serde_json::from_str(text)
            .map_err(|_| ApiError::bad("body", "must be an object with an items array"))?;
        let items = parsed.items.ok_or_else(|| ApiError::bad("items", "is required"))?;
        queen_engine::decode_push_items(items.get())?
    };
    // The decoded items own their texts: the body need not wait for the
    // database with them (under load most pushes wait for a connection).
    drop(body);
    // The producer is who authenticated, whatever the body says.
    if let Some(sub) = caller.as_ref().and_then(|c| c.sub.as_deref()) {
        for item in &mut items {
            item.producer_sub = Some(sub.to_owned());
        }
    }
    let result = app.engine.push_items(items).await?;
    Ok(json_response(StatusCode::CREATED, result.0))
}

#[utoipa::path(get, path = "/api/v1/pop/queue/{queue}", tag = "broker", params(("queue" = String, Path), PopParams), responses((status = 200, description = "Messages under a lease", body = Object), (status = 204, description = "Nothing to pop"), (status = 400, description = "Bad input, naming the field", body = ErrorBody), (status = 503, description = "PostgreSQL unreachable or the route paused; Retry-After", body = ErrorBody)))]
pub(crate) async fn pop_queue(
    State(app): State<Arc<AppState>>,
    Path(queue): Path<String>,
    query: QueryMap,
) -> Answer {
    pop(app, queue, None, Params::from(query)?).await
}

#[utoipa::path(get, path = "/api/v1/pop/queue/{queue}/partition/{partition}", tag = "broker", params(("queue" = String, Path), ("partition" = String, Path), PopParams), responses((status = 200, description = "Messages under a lease", body = Object), (status = 204, description = "Nothing to pop"), (status = 400, description = "Bad input, naming the field", body = ErrorBody), (status = 503, description = "PostgreSQL unreachable or the route paused; Retry-After", body = ErrorBody)))]
pub(crate) async fn pop_partition(
    State(app): State<Arc<AppState>>,
    Path((queue, partition)): Path<(String, String)>,
    query: QueryMap,
) -> Answer {
    pop(app, queue, Some(partition), Params::from(query)?).await
}

#[utoipa::path(get, path = "/api/v1/pop", tag = "broker", params(PopParams, ("namespace" = Option<String>, Query, description = "Pop from the queues of this namespace"), ("task" = Option<String>, Query, description = "Pop from the queues of this task")), responses((status = 200, description = "Messages of one queue under a lease", body = Object), (status = 204, description = "Nothing to pop"), (status = 400, description = "Bad input, naming the field", body = ErrorBody), (status = 503, description = "PostgreSQL unreachable or the route paused; Retry-After", body = ErrorBody)))]
pub(crate) async fn pop_tagged(State(app): State<Arc<AppState>>, query: QueryMap) -> Answer {
    pop(app, String::new(), None, Params::from(query)?).await
}

async fn pop(app: Arc<AppState>, queue: String, partition: Option<String>, p: Params) -> Answer {
    let (namespace, task) = if queue.is_empty() {
        let tag = |name| p.str(name).filter(|v| !v.is_empty()).map(str::to_owned);
        let (namespace, task) = (tag("namespace"), tag("task"));
        if namespace.is_none() && task.is_none() {
            return Err(ApiError::bad("namespace", "or task is required to pop without a queue"));
        }
        (namespace, task)
    } else {
        (None, None)
    };
    let batch = p.int("batch", 1, 10_000)?.unwrap_or(100);
    let req = PopRequest {
        queue,
        partition,
        consumer_group: p.str("consumerGroup").map(str::to_owned),
        // Checked above to fit.
        batch: batch as i32,
        partitions: p.int("partitions", 1, 10_000)?.unwrap_or(1) as i32,
        lease_seconds: p.int("leaseSeconds", 1, 86_400 * 7)?.map(|v| v as i32),
        auto_ack: p.bool("autoAck")?.unwrap_or(false),
        subscription_mode: p.str("subscriptionMode").map(str::to_owned),
        subscription_from: p.str("subscriptionFrom").map(str::to_owned),
        namespace,
        task,
    };
    let wait = p.bool("wait")?.unwrap_or(false);
    let max_wait = app.config.max_wait_ms as i64;
    let timeout = p.int("timeout", 0, max_wait)?.unwrap_or(30_000.min(max_wait)) as u64;
    let found = if wait {
        app.engine.pop_wait(&req, Duration::from_millis(timeout)).await?
    } else {
        app.engine.pop(&req).await?
    };
    Ok(match found {
        Some(json) => ok(json),
        None => StatusCode::NO_CONTENT.into_response(),
    })
}

#[derive(Deserialize)]
struct BatchAckBody<'a> {
    #[serde(borrow)]
    acknowledgments: Option<&'a RawValue>,
    #[serde(rename = "consumerGroup")]
    consumer_group: Option<String>,
}

#[utoipa::path(post, path = "/api/v1/ack", tag = "broker", request_body = AckItem, responses((status = 200, description = "One result; a refusal is success false", body = [Object]), (status = 400, description = "Bad input, naming the field", body = ErrorBody), (status = 503, description = "PostgreSQL unreachable or the route paused; Retry-After", body = ErrorBody)))]
pub(crate) async fn ack(State(app): State<Arc<AppState>>, body: Body) -> Answer {
    let text = json_body(&body)?;
    // A single ack is a batch of one; the item carries its own group.
    let items = format!("[{text}]");
    Ok(ok(app.engine.ack(&items, None).await?))
}

#[utoipa::path(post, path = "/api/v1/ack/batch", tag = "broker", request_body = BatchAckRequest, responses((status = 200, description = "One result per acknowledgment, in order", body = [Object]), (status = 400, description = "Bad input, naming the field", body = ErrorBody), (status = 503, description = "PostgreSQL unreachable or the route paused; Retry-After", body = ErrorBody)))]
pub(crate) async fn ack_batch(State(app): State<Arc<AppState>>, body: Body) -> Answer {
    let text = object_body(&body)?;
    let parsed: BatchAckBody = serde_json::from_str(text).map_err(|_| {
        ApiError::bad(
            "body",
            "must be an object with an acknowledgments array and an optional consumerGroup string",
        )
    })?;
    let items = parsed.acknowledgments.ok_or_else(|| ApiError::bad("acknowledgments", "is required"))?;
    Ok(ok(app.engine.ack(items.get(), parsed.consumer_group.as_deref()).await?))
}

#[derive(Deserialize)]
struct ExtendBody {
    seconds: Option<i64>,
}

#[utoipa::path(post, path = "/api/v1/lease/{lease}/extend", tag = "broker", params(("lease" = String, Path)), request_body(content = Option<ExtendRequest>, description = "May be empty"), responses((status = 200, description = "The new expiry, or success false", body = Object), (status = 400, description = "Bad input, naming the field", body = ErrorBody), (status = 503, description = "PostgreSQL unreachable or the route paused; Retry-After", body = ErrorBody)))]
pub(crate) async fn extend_lease(
    State(app): State<Arc<AppState>>,
    Path(lease): Path<String>,
    body: Body,
) -> Answer {
    // The official client sends no body at all (an empty dict is not sent).
    let seconds = match &body {
        Ok(b) if b.iter().all(u8::is_ascii_whitespace) => 60,
        _ => {
            let parsed: ExtendBody = serde_json::from_str(object_body(&body)?)
                .map_err(|_| ApiError::bad("seconds", "must be an integer"))?;
            match parsed.seconds {
                None => 60,
                Some(s) if (1..=86_400 * 7).contains(&s) => s,
                Some(_) => return Err(ApiError::bad("seconds", "must be from 1 to 604800")),
            }
        }
    };
    Ok(ok(app.engine.extend_lease(&lease, seconds as i32).await?))
}

#[utoipa::path(post, path = "/api/v1/transaction", tag = "broker", request_body = TransactionRequest, responses((status = 200, description = "Committed, rolled back (success false), or a lost KV precondition (kv_precondition)", body = Object), (status = 413, description = "Body too large", body = ErrorBody), (status = 400, description = "Bad input, naming the field", body = ErrorBody), (status = 503, description = "PostgreSQL unreachable or the route paused; Retry-After", body = ErrorBody)))]
pub(crate) async fn transaction(
    State(app): State<Arc<AppState>>,
    caller: Option<Extension<Caller>>,
    body: Body,
) -> Answer {
    let sub = caller.as_ref().and_then(|c| c.sub.as_deref());
    Ok(ok(app.engine.transaction_by(json_body(&body)?, sub).await?))
}

#[utoipa::path(get, path = "/api/v1/dlq", tag = "broker", params(DlqParams), responses((status = 200, description = "Dead letters", body = Object), (status = 400, description = "Bad input, naming the field", body = ErrorBody), (status = 503, description = "PostgreSQL unreachable or the route paused; Retry-After", body = ErrorBody)))]
pub(crate) async fn dlq(State(app): State<Arc<AppState>>, query: QueryMap) -> Answer {
    let p = Params::from(query)?;
    let q = DlqQuery {
        queue: p.str("queue").map(str::to_owned),
        consumer_group: p.str("consumerGroup").map(str::to_owned),
        partition: p.str("partition").map(str::to_owned),
        from: p.str("from").map(str::to_owned),
        to: p.str("to").map(str::to_owned),
        limit: p.int("limit", 1, 10_000)?.unwrap_or(100) as i32,
        offset: p.int("offset", 0, i32::MAX as i64)?.unwrap_or(0) as i32,
    };
    Ok(ok(app.engine.dlq(&q).await?))
}

#[utoipa::path(post, path = "/api/v1/dlq/{id}/replay", tag = "broker", params(("id" = i64, Path, description = "The record's dlqId, as GET /api/v1/dlq lists it")), request_body(content = Option<DlqReplayRequest>, description = "Optional: replay into another queue and/or partition (created if missing)"), responses((status = 200, description = "moved (pushed as dlq:<id>, the record removed) or duplicate (nothing written, the record kept)", body = DlqReplayAnswer), (status = 404, description = "No such dead-letter record (gone, or replayed already)", body = ErrorBody), (status = 409, description = "The destination is full (maxSize); the record kept", body = ErrorBody), (status = 400, description = "Bad input, naming the field", body = ErrorBody), (status = 503, description = "PostgreSQL unreachable, or push maintenance on; Retry-After", body = ErrorBody)))]
pub(crate) async fn dlq_replay(
    State(app): State<Arc<AppState>>,
    Path(id): Path<String>,
    body: Body,
) -> Answer {
    let id = queen_engine::parse_dlq_id(&id)?;
    // The body is optional: an empty one replays in place.
    let text = match &body {
        Ok(bytes) if bytes.iter().all(u8::is_ascii_whitespace) => "",
        _ => object_body(&body)?,
    };
    let target = queen_engine::decode_replay_target(text)?;
    Ok(ok(app.engine.dlq_replay(id, &target).await?))
}

#[utoipa::path(delete, path = "/api/v1/dlq", tag = "broker", params(DlqPurgeParams), responses((status = 200, description = "How many records were deleted", body = DlqPurgeAnswer), (status = 400, description = "No queue named: nothing deleted", body = ErrorBody), (status = 403, description = "Needs the admin role when JWT is on", body = ErrorBody), (status = 503, description = "PostgreSQL unreachable or the route paused; Retry-After", body = ErrorBody)))]
pub(crate) async fn dlq_purge(State(app): State<Arc<AppState>>, query: QueryMap) -> Answer {
    let p = Params::from(query)?;
    let queue = p
        .str("queue")
        .ok_or_else(|| ApiError::bad("queue", "is required: a purge names the queue it empties"))?;
    Ok(ok(app.engine.dlq_purge(queue, p.str("consumerGroup")).await?))
}

#[utoipa::path(delete, path = "/api/v1/resources/queues/{queue}", tag = "broker", params(("queue" = String, Path)), responses((status = 200, description = "deleted is false for a queue that did not exist", body = Object), (status = 400, description = "Bad input, naming the field", body = ErrorBody), (status = 503, description = "PostgreSQL unreachable or the route paused; Retry-After", body = ErrorBody)))]
pub(crate) async fn delete_queue(State(app): State<Arc<AppState>>, Path(queue): Path<String>) -> Answer {
    Ok(ok(app.engine.delete_queue(&queue).await?))
}

#[utoipa::path(delete, path = "/api/v1/consumer-groups/{group}", tag = "groups", params(("group" = String, Path), DeleteGroupParams), responses((status = 200, description = "The group's cursors removed", body = Object), (status = 400, description = "Bad input, naming the field", body = ErrorBody), (status = 503, description = "PostgreSQL unreachable or the route paused; Retry-After", body = ErrorBody)))]
pub(crate) async fn delete_group(
    State(app): State<Arc<AppState>>,
    Path(group): Path<String>,
    query: QueryMap,
) -> Answer {
    let p = Params::from(query)?;
    let meta = p.bool("deleteMetadata")?.unwrap_or(true);
    Ok(ok(app.engine.delete_consumer_group(&group, None, meta).await?))
}

/// `DELETE /api/v1/consumer-groups/lagging` deletes the group named
/// `lagging`: Queen's `lagging` route is GET only, so the name is free here.
#[utoipa::path(delete, path = "/api/v1/consumer-groups/lagging", tag = "groups", params(DeleteGroupParams), responses((status = 200, description = "The cursors of the group named lagging removed", body = Object), (status = 400, description = "Bad input, naming the field", body = ErrorBody), (status = 503, description = "PostgreSQL unreachable or the route paused; Retry-After", body = ErrorBody)))]
pub(crate) async fn delete_lagging_group(state: State<Arc<AppState>>, query: QueryMap) -> Answer {
    delete_group(state, Path("lagging".to_owned()), query).await
}

#[utoipa::path(delete, path = "/api/v1/consumer-groups/{group}/queues/{queue}", tag = "groups", params(("group" = String, Path), ("queue" = String, Path), DeleteGroupParams), responses((status = 200, description = "The group's cursors on the queue removed", body = Object), (status = 400, description = "Bad input, naming the field", body = ErrorBody), (status = 503, description = "PostgreSQL unreachable or the route paused; Retry-After", body = ErrorBody)))]
pub(crate) async fn delete_group_queue(
    State(app): State<Arc<AppState>>,
    Path((group, queue)): Path<(String, String)>,
    query: QueryMap,
) -> Answer {
    let p = Params::from(query)?;
    let meta = p.bool("deleteMetadata")?.unwrap_or(true);
    Ok(ok(app.engine.delete_consumer_group(&group, Some(&queue), meta).await?))
}

#[derive(Deserialize)]
struct SubscriptionBody {
    #[serde(rename = "subscriptionTimestamp")]
    subscription_timestamp: Option<String>,
}

#[utoipa::path(post, path = "/api/v1/consumer-groups/{group}/subscription", tag = "groups", params(("group" = String, Path)), request_body = SubscriptionRequest, responses((status = 200, description = "The registration updated", body = Object), (status = 400, description = "Bad input, naming the field", body = ErrorBody), (status = 503, description = "PostgreSQL unreachable or the route paused; Retry-After", body = ErrorBody)))]
pub(crate) async fn update_subscription(
    State(app): State<Arc<AppState>>,
    Path(group): Path<String>,
    body: Body,
) -> Answer {
    let parsed: SubscriptionBody = serde_json::from_str(object_body(&body)?)
        .map_err(|_| ApiError::bad("subscriptionTimestamp", "must be an ISO 8601 string"))?;
    Ok(ok(app.engine.update_subscription(&group, parsed.subscription_timestamp.as_deref()).await?))
}

#[derive(Deserialize)]
struct SeekBody {
    #[serde(rename = "toEnd")]
    to_end: Option<bool>,
    timestamp: Option<String>,
}

/// The seek body, read once for both seek routes; `empty` is what a request
/// without a body means (the routes differ there, as Queen's do).
fn seek_body(body: &Body, empty: &'static str) -> Result<SeekBody, ApiError> {
    let blank = matches!(body, Ok(b) if b.iter().all(u8::is_ascii_whitespace));
    let text = if blank { empty } else { object_body(body)? };
    serde_json::from_str(text)
        .map_err(|_| ApiError::bad("body", "must be {\"toEnd\": true} or {\"timestamp\": ISO}"))
}

#[utoipa::path(post, path = "/api/v1/consumer-groups/{group}/queues/{queue}/seek", tag = "groups", params(("group" = String, Path), ("queue" = String, Path)), request_body = SeekRequest, responses((status = 200, description = "The cursors moved", body = Object), (status = 404, description = "No such queue", body = ErrorBody), (status = 400, description = "Bad input, naming the field", body = ErrorBody), (status = 503, description = "PostgreSQL unreachable or the route paused; Retry-After", body = ErrorBody)))]
pub(crate) async fn seek(
    State(app): State<Arc<AppState>>,
    Path((group, queue)): Path<(String, String)>,
    body: Body,
) -> Answer {
    // The official client sends no body for `{}`.
    let parsed = seek_body(&body, "{}")?;
    let result = app
        .engine
        .seek(&group, &queue, None, parsed.to_end.unwrap_or(false), parsed.timestamp.as_deref())
        .await?;
    Ok(ok(result))
}

#[utoipa::path(post, path = "/api/v1/consumer-groups/{group}/queues/{queue}/partitions/{partition}/seek", tag = "groups", params(("group" = String, Path), ("queue" = String, Path), ("partition" = String, Path)), request_body(content = SeekRequest, description = "As the queue-level seek; no body at all seeks to the end, as Queen's route does"), responses((status = 200, description = "The group's cursor on the partition moved (`updated: false` when the group has none there): {success, consumerGroup, queueName, partitionName, updated, cursorMovedTo, seekToEnd, targetTimestamp, partitionsUpdated}", body = Object), (status = 404, description = "No such queue or partition (`Partition not found`)", body = ErrorBody), (status = 400, description = "Bad input, naming the field", body = ErrorBody), (status = 503, description = "PostgreSQL unreachable or the route paused; Retry-After", body = ErrorBody)))]
pub(crate) async fn seek_partition(
    State(app): State<Arc<AppState>>,
    Path((group, queue, partition)): Path<(String, String, String)>,
    body: Body,
) -> Answer {
    // Queen's route takes no body and seeks to the end.
    let parsed = seek_body(&body, r#"{"toEnd": true}"#)?;
    let result = app
        .engine
        .seek(&group, &queue, Some(&partition), parsed.to_end.unwrap_or(false), parsed.timestamp.as_deref())
        .await?;
    Ok(ok(result))
}
