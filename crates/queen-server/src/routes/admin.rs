//! Operator routes: resources, messages, consumer groups, status,
//! maintenance, and the metrics endpoints.

use std::fmt::Write as _;
use std::sync::Arc;

use axum::extract::{Path, State};
use axum::http::{header, HeaderValue, StatusCode};
use axum::response::{IntoResponse, Response};
use serde::Deserialize;

use super::broker::{Body, QueryMap};
use crate::error::json_response;
use crate::extract::{object_body, Params};
#[allow(unused_imports)]
use crate::openapi::*;
use crate::{ApiError, AppState};

type Answer = Result<Response, ApiError>;

fn ok(json: queen_engine::Json) -> Response {
    json_response(StatusCode::OK, json.0)
}

fn partition_id(raw: &str) -> Result<uuid::Uuid, ApiError> {
    uuid::Uuid::parse_str(raw).map_err(|_| ApiError::bad("partitionId", "must be a UUID"))
}

#[utoipa::path(get, path = "/api/v1/resources/overview", tag = "resources", responses((status = 200, description = "Counts across the system", body = Object), (status = 400, description = "Bad input, naming the field", body = ErrorBody), (status = 503, description = "PostgreSQL unreachable or the route paused; Retry-After", body = ErrorBody)))]
pub(crate) async fn overview(State(app): State<Arc<AppState>>) -> Answer {
    Ok(ok(app.engine.resources_overview().await?))
}

#[utoipa::path(get, path = "/api/v1/resources/queues", tag = "resources", responses((status = 200, description = "Every queue with its counts", body = Object), (status = 400, description = "Bad input, naming the field", body = ErrorBody), (status = 503, description = "PostgreSQL unreachable or the route paused; Retry-After", body = ErrorBody)))]
pub(crate) async fn queues(State(app): State<Arc<AppState>>) -> Answer {
    Ok(ok(app.engine.resources_queues().await?))
}

#[utoipa::path(get, path = "/api/v1/status/queues", tag = "status", params(PageParams), responses((status = 200, description = "A page of queues by name with their counts, and total, the number of queues", body = Object), (status = 400, description = "Bad input, naming the field", body = ErrorBody), (status = 503, description = "PostgreSQL unreachable or the route paused; Retry-After", body = ErrorBody)))]
pub(crate) async fn status_queues(State(app): State<Arc<AppState>>, query: QueryMap) -> Answer {
    let p = Params::from(query)?;
    let limit = p.int("limit", 1, 10_000)?.map(|l| l as i32);
    let offset = p.int("offset", 0, i32::MAX as i64)?.unwrap_or(0) as i32;
    Ok(ok(app.engine.queues_page(limit, offset).await?))
}

#[utoipa::path(get, path = "/api/v1/resources/queues/{queue}", tag = "resources", params(("queue" = String, Path)), responses((status = 200, description = "One queue with its partitions and groups", body = Object), (status = 404, description = "No such queue", body = ErrorBody), (status = 400, description = "Bad input, naming the field", body = ErrorBody), (status = 503, description = "PostgreSQL unreachable or the route paused; Retry-After", body = ErrorBody)))]
pub(crate) async fn queue(State(app): State<Arc<AppState>>, Path(queue): Path<String>) -> Answer {
    Ok(ok(app.engine.resources_queue(&queue).await?))
}

#[utoipa::path(get, path = "/api/v1/resources/queues/{queue}/depth", tag = "resources", params(("queue" = String, Path), DepthParams), responses((status = 200, description = "Backlog per partition, for the group or for queue mode", body = Object), (status = 404, description = "No such queue", body = ErrorBody), (status = 400, description = "Bad input, naming the field", body = ErrorBody), (status = 503, description = "PostgreSQL unreachable or the route paused; Retry-After", body = ErrorBody)))]
pub(crate) async fn queue_depth(
    State(app): State<Arc<AppState>>,
    Path(queue): Path<String>,
    query: QueryMap,
) -> Answer {
    let p = Params::from(query)?;
    Ok(ok(app.engine.resources_queue_depth(&queue, p.str("group")).await?))
}

#[utoipa::path(get, path = "/api/v1/status/queues/{queue}", tag = "status", params(("queue" = String, Path)), responses((status = 200, description = "The queue with its partitions, groups and depth", body = Object), (status = 404, description = "No such queue", body = ErrorBody), (status = 400, description = "Bad input, naming the field", body = ErrorBody), (status = 503, description = "PostgreSQL unreachable or the route paused; Retry-After", body = ErrorBody)))]
pub(crate) async fn status_queue(State(app): State<Arc<AppState>>, Path(queue): Path<String>) -> Answer {
    Ok(ok(app.engine.status_queue(&queue).await?))
}

#[utoipa::path(get, path = "/api/v1/status/analytics", tag = "status", params(AnalyticsParams), responses((status = 200, description = "Messages pushed and dead-lettered per bucket", body = Object), (status = 400, description = "Bad input, naming the field", body = ErrorBody), (status = 503, description = "PostgreSQL unreachable or the route paused; Retry-After", body = ErrorBody)))]
pub(crate) async fn status_analytics(State(app): State<Arc<AppState>>, query: QueryMap) -> Answer {
    let p = Params::from(query)?;
    let result =
        app.engine.status_analytics(p.str("interval"), p.str("from"), p.str("to"), p.str("queue")).await?;
    Ok(ok(result))
}

/// This process's own figures: brokers share no state, so each reports itself.
fn process_figures(app: &AppState) -> serde_json::Value {
    let (size, idle, max) = app.engine.pool_status();
    serde_json::json!({
        "pid": std::process::id(),
        "uptimeSeconds": app.started.elapsed().as_secs(),
        "rssBytes": queen_engine::process_rss_bytes(),
        "longPollsWaiting": app.engine.queues_waiting(),
        "pool": {"size": size, "idle": idle, "max": max},
    })
}

#[utoipa::path(get, path = "/api/v1/analytics/system-metrics", tag = "status", responses((status = 200, description = "This broker process and its database", body = Object), (status = 400, description = "Bad input, naming the field", body = ErrorBody), (status = 503, description = "PostgreSQL unreachable or the route paused; Retry-After", body = ErrorBody)))]
pub(crate) async fn system_metrics(State(app): State<Arc<AppState>>) -> Answer {
    let database = app.engine.database_metrics().await?;
    let database = serde_json::value::RawValue::from_string(database.0)
        .map_err(|e| ApiError::Engine(queen_engine::EngineError::Protocol(e.to_string())))?;
    let body = serde_json::json!({"process": process_figures(&app), "database": database});
    Ok(json_response(StatusCode::OK, body.to_string()))
}

#[utoipa::path(get, path = "/api/v1/analytics/worker-metrics", tag = "status", responses((status = 200, description = "Every live broker on the database (its registry heartbeat, at most a few seconds old), and which one answered", body = Object), (status = 503, description = "PostgreSQL unreachable; Retry-After", body = ErrorBody)))]
pub(crate) async fn worker_metrics(State(app): State<Arc<AppState>>) -> Answer {
    let brokers = app.engine.brokers().await?;
    let workers = serde_json::value::RawValue::from_string(brokers.0)
        .map_err(|e| ApiError::Engine(queen_engine::EngineError::Protocol(e.to_string())))?;
    let body = serde_json::json!({
        "workers": workers,
        "answeredBy": app.engine.broker_id().to_string(),
        "staleAfterSeconds": queen_engine::BROKER_STALE_AFTER_SECONDS,
    });
    Ok(json_response(StatusCode::OK, body.to_string()))
}

#[utoipa::path(post, path = "/api/v1/traces", tag = "messages", request_body = TraceRequest, responses((status = 201, description = "Recorded", body = Object), (status = 404, description = "No such message", body = ErrorBody), (status = 400, description = "Bad input, naming the field", body = ErrorBody), (status = 503, description = "PostgreSQL unreachable or the route paused; Retry-After", body = ErrorBody)))]
pub(crate) async fn add_trace(State(app): State<Arc<AppState>>, body: Body) -> Answer {
    let result = app.engine.trace_add(object_body(&body)?).await?;
    Ok(json_response(StatusCode::CREATED, result.0))
}

#[utoipa::path(get, path = "/api/v1/traces/{partition_id}/{transaction_id}", tag = "messages", params(("partition_id" = String, Path, description = "Partition UUID"), ("transaction_id" = String, Path)), responses((status = 200, description = "The message's trace events, oldest first", body = Object), (status = 400, description = "Bad input, naming the field", body = ErrorBody), (status = 503, description = "PostgreSQL unreachable or the route paused; Retry-After", body = ErrorBody)))]
pub(crate) async fn message_traces(
    State(app): State<Arc<AppState>>,
    Path((pid, tx)): Path<(String, String)>,
) -> Answer {
    Ok(ok(app.engine.traces_for_message(&partition_id(&pid)?, &tx).await?))
}

#[utoipa::path(get, path = "/api/v1/traces/by-name/{name}", tag = "messages", params(("name" = String, Path), PageParams), responses((status = 200, description = "Trace events with this name, newest first", body = Object), (status = 400, description = "Bad input, naming the field", body = ErrorBody), (status = 503, description = "PostgreSQL unreachable or the route paused; Retry-After", body = ErrorBody)))]
pub(crate) async fn traces_by_name(
    State(app): State<Arc<AppState>>,
    Path(name): Path<String>,
    query: QueryMap,
) -> Answer {
    let p = Params::from(query)?;
    let limit = p.int("limit", 1, 10_000)?.unwrap_or(100) as i32;
    let offset = p.int("offset", 0, i32::MAX as i64)?.unwrap_or(0) as i32;
    Ok(ok(app.engine.traces_by_name(&name, limit, offset).await?))
}

#[utoipa::path(get, path = "/api/v1/traces/names", tag = "messages", params(PageParams), responses((status = 200, description = "Every trace name with its counts", body = Object), (status = 400, description = "Bad input, naming the field", body = ErrorBody), (status = 503, description = "PostgreSQL unreachable or the route paused; Retry-After", body = ErrorBody)))]
pub(crate) async fn trace_names(State(app): State<Arc<AppState>>, query: QueryMap) -> Answer {
    let p = Params::from(query)?;
    let limit = p.int("limit", 1, 10_000)?.unwrap_or(50) as i32;
    let offset = p.int("offset", 0, i32::MAX as i64)?.unwrap_or(0) as i32;
    Ok(ok(app.engine.trace_names(limit, offset).await?))
}

#[utoipa::path(get, path = "/api/v1/resources/partitions", tag = "resources", params(PartitionsParams), responses((status = 200, description = "Partitions", body = Object), (status = 400, description = "Bad input, naming the field", body = ErrorBody), (status = 503, description = "PostgreSQL unreachable or the route paused; Retry-After", body = ErrorBody)))]
pub(crate) async fn partitions(State(app): State<Arc<AppState>>, query: QueryMap) -> Answer {
    let p = Params::from(query)?;
    Ok(ok(app.engine.resources_partitions(p.str("queue")).await?))
}

#[utoipa::path(get, path = "/api/v1/resources/namespaces", tag = "resources", responses((status = 200, description = "Queues grouped by namespace", body = Object), (status = 400, description = "Bad input, naming the field", body = ErrorBody), (status = 503, description = "PostgreSQL unreachable or the route paused; Retry-After", body = ErrorBody)))]
pub(crate) async fn namespaces(State(app): State<Arc<AppState>>) -> Answer {
    Ok(ok(app.engine.resources_grouped(false).await?))
}

#[utoipa::path(get, path = "/api/v1/resources/tasks", tag = "resources", responses((status = 200, description = "Queues grouped by task", body = Object), (status = 400, description = "Bad input, naming the field", body = ErrorBody), (status = 503, description = "PostgreSQL unreachable or the route paused; Retry-After", body = ErrorBody)))]
pub(crate) async fn tasks(State(app): State<Arc<AppState>>) -> Answer {
    Ok(ok(app.engine.resources_grouped(true).await?))
}

#[utoipa::path(get, path = "/api/v1/messages", tag = "messages", params(MessagesParams), responses((status = 200, description = "Messages with their state", body = Object), (status = 400, description = "Bad input, naming the field", body = ErrorBody), (status = 503, description = "PostgreSQL unreachable or the route paused; Retry-After", body = ErrorBody)))]
pub(crate) async fn messages(State(app): State<Arc<AppState>>, query: QueryMap) -> Answer {
    let p = Params::from(query)?;
    let limit = p.int("limit", 1, 10_000)?.unwrap_or(200) as i32;
    let offset = p.int("offset", 0, i32::MAX as i64)?.unwrap_or(0) as i32;
    Ok(ok(app.engine.messages(p.str("queue"), p.str("partition"), p.str("status"), limit, offset).await?))
}

#[utoipa::path(get, path = "/api/v1/messages/{partition_id}/{transaction_id}", tag = "messages", params(("partition_id" = String, Path, description = "Partition UUID"), ("transaction_id" = String, Path)), responses((status = 200, description = "One message with its per-group consumption state", body = Object), (status = 404, description = "No such message", body = ErrorBody), (status = 400, description = "Bad input, naming the field", body = ErrorBody), (status = 503, description = "PostgreSQL unreachable or the route paused; Retry-After", body = ErrorBody)))]
pub(crate) async fn message(
    State(app): State<Arc<AppState>>,
    Path((pid, tx)): Path<(String, String)>,
) -> Answer {
    Ok(ok(app.engine.message(&partition_id(&pid)?, &tx).await?))
}

#[utoipa::path(delete, path = "/api/v1/messages/{partition_id}/{transaction_id}", tag = "messages", params(("partition_id" = String, Path, description = "Partition UUID"), ("transaction_id" = String, Path)), responses((status = 200, description = "Deleted", body = Object), (status = 404, description = "No such message", body = ErrorBody), (status = 400, description = "Bad input, naming the field", body = ErrorBody), (status = 503, description = "PostgreSQL unreachable or the route paused; Retry-After", body = ErrorBody)))]
pub(crate) async fn delete_message(
    State(app): State<Arc<AppState>>,
    Path((pid, tx)): Path<(String, String)>,
) -> Answer {
    Ok(ok(app.engine.delete_message(&partition_id(&pid)?, &tx).await?))
}

#[utoipa::path(post, path = "/api/v1/messages/{partition_id}/{transaction_id}/retry", tag = "messages", params(("partition_id" = String, Path, description = "Partition UUID"), ("transaction_id" = String, Path)), responses((status = 200, description = "Moved out of the DLQ and re-appended", body = Object), (status = 404, description = "No such dead letter", body = ErrorBody), (status = 400, description = "Bad input, naming the field", body = ErrorBody), (status = 503, description = "PostgreSQL unreachable or the route paused; Retry-After", body = ErrorBody)))]
pub(crate) async fn retry_message(
    State(app): State<Arc<AppState>>,
    Path((pid, tx)): Path<(String, String)>,
) -> Answer {
    Ok(ok(app.engine.retry_message(&partition_id(&pid)?, &tx).await?))
}

/// `?group=` reads one group by a path that no name can clash with (a
/// group named `lagging` has no `/consumer-groups/:group` of its own).
#[utoipa::path(get, path = "/api/v1/consumer-groups", tag = "groups", params(GroupsParams), responses((status = 200, description = "Every group with its lag, or one group's entries (group)", body = Object), (status = 400, description = "Bad input, naming the field", body = ErrorBody), (status = 503, description = "PostgreSQL unreachable or the route paused; Retry-After", body = ErrorBody)))]
pub(crate) async fn consumer_groups(State(app): State<Arc<AppState>>, query: QueryMap) -> Answer {
    let p = Params::from(query)?;
    let group = p.0.get("group").map(String::as_str);
    Ok(ok(app.engine.consumer_groups(group, None).await?))
}

#[utoipa::path(get, path = "/api/v1/consumer-groups/lagging", tag = "groups", params(LaggingParams), responses((status = 200, description = "Groups lagging by at least minLagSeconds", body = Object), (status = 400, description = "Bad input, naming the field", body = ErrorBody), (status = 503, description = "PostgreSQL unreachable or the route paused; Retry-After", body = ErrorBody)))]
pub(crate) async fn lagging_groups(State(app): State<Arc<AppState>>, query: QueryMap) -> Answer {
    let p = Params::from(query)?;
    let min = p.int("minLagSeconds", 0, i64::from(i32::MAX))?.unwrap_or(3600) as f64;
    Ok(ok(app.engine.consumer_groups(None, Some(min)).await?))
}

#[utoipa::path(get, path = "/api/v1/consumer-groups/{group}", tag = "groups", params(("group" = String, Path)), responses((status = 200, description = "One group per queue", body = Object), (status = 400, description = "Bad input, naming the field", body = ErrorBody), (status = 503, description = "PostgreSQL unreachable or the route paused; Retry-After", body = ErrorBody)))]
pub(crate) async fn consumer_group(State(app): State<Arc<AppState>>, Path(group): Path<String>) -> Answer {
    Ok(ok(app.engine.consumer_groups(Some(&group), None).await?))
}

#[utoipa::path(get, path = "/api/v1/status", tag = "status", responses((status = 200, description = "Throughput and backlog summary", body = Object), (status = 400, description = "Bad input, naming the field", body = ErrorBody), (status = 503, description = "PostgreSQL unreachable or the route paused; Retry-After", body = ErrorBody)))]
pub(crate) async fn status(State(app): State<Arc<AppState>>) -> Answer {
    Ok(ok(app.engine.status().await?))
}

#[utoipa::path(get, path = "/api/v1/status/buffers", tag = "status", responses((status = 200, description = "The push spool (Queen's file buffer): items and bytes waiting, damaged segments, whether the database answered last", body = Object)))]
pub(crate) async fn status_buffers(State(app): State<Arc<AppState>>) -> Response {
    ok(app.engine.spool_status())
}

#[utoipa::path(post, path = "/api/v1/stats/refresh", tag = "status", responses((status = 200, description = "Statistics are always live", body = Object)))]
pub(crate) async fn stats_refresh() -> Response {
    // Counts are computed live from the tables; there is no cache to refresh.
    json_response(StatusCode::OK, r#"{"success":true,"message":"statistics are always live"}"#.into())
}

#[utoipa::path(get, path = "/api/v1/system/maintenance", tag = "status", responses((status = 200, description = "The push and pop switches", body = Object), (status = 400, description = "Bad input, naming the field", body = ErrorBody), (status = 503, description = "PostgreSQL unreachable or the route paused; Retry-After", body = ErrorBody)))]
pub(crate) async fn maintenance(State(app): State<Arc<AppState>>) -> Answer {
    Ok(ok(app.engine.maintenance().await?))
}

#[utoipa::path(get, path = "/api/v1/system/maintenance/pop", tag = "status", responses((status = 200, description = "The push and pop switches", body = Object), (status = 400, description = "Bad input, naming the field", body = ErrorBody), (status = 503, description = "PostgreSQL unreachable or the route paused; Retry-After", body = ErrorBody)))]
pub(crate) async fn pop_maintenance(state: State<Arc<AppState>>) -> Answer {
    maintenance(state).await
}

#[derive(Deserialize)]
struct Switch {
    enabled: Option<bool>,
}

fn switch(body: &Body) -> Result<bool, ApiError> {
    let parsed: Switch = serde_json::from_str(object_body(body)?)
        .map_err(|_| ApiError::bad("enabled", "must be a boolean (enabled (boolean) is required)"))?;
    parsed.enabled.ok_or_else(|| ApiError::bad("enabled", "is required (enabled (boolean) is required)"))
}

#[utoipa::path(post, path = "/api/v1/system/maintenance", tag = "status", request_body = MaintenanceSwitch, responses((status = 200, description = "The switches", body = Object), (status = 400, description = "Bad input, naming the field", body = ErrorBody), (status = 503, description = "PostgreSQL unreachable or the route paused; Retry-After", body = ErrorBody)))]
pub(crate) async fn set_push_maintenance(State(app): State<Arc<AppState>>, body: Body) -> Answer {
    let on = switch(&body)?;
    Ok(ok(app.engine.set_maintenance(Some(on), None).await?))
}

#[utoipa::path(post, path = "/api/v1/system/maintenance/pop", tag = "status", request_body = MaintenanceSwitch, responses((status = 200, description = "The switches", body = Object), (status = 400, description = "Bad input, naming the field", body = ErrorBody), (status = 503, description = "PostgreSQL unreachable or the route paused; Retry-After", body = ErrorBody)))]
pub(crate) async fn set_pop_maintenance(State(app): State<Arc<AppState>>, body: Body) -> Answer {
    let on = switch(&body)?;
    Ok(ok(app.engine.set_maintenance(None, Some(on)).await?))
}

/// `GET /metrics`: the JSON summary.
#[utoipa::path(get, path = "/metrics", tag = "status", responses((status = 200, description = "Pool, long polls, sweeper", body = Object)))]
pub(crate) async fn metrics_json(State(app): State<Arc<AppState>>) -> Response {
    let (size, idle, max) = app.engine.pool_status();
    json_response(
        StatusCode::OK,
        serde_json::json!({
            "uptimeSeconds": app.started.elapsed().as_secs(),
            "database": {"poolSize": size, "idleConnections": idle, "maxConnections": max},
            "longPolls": {"queuesWaiting": app.engine.queues_waiting()},
            "kv": {"rowsPruned": app.engine.kv_rows_pruned()},
            "retention": {
                "messagesRetained": app.engine.retention_stats().retained,
                "messagesEvicted": app.engine.retention_stats().evicted,
            },
        })
        .to_string(),
    )
}

fn label(v: &str) -> String {
    v.replace('\\', "\\\\").replace('"', "\\\"").replace('\n', "\\n")
}

/// `GET /metrics/prometheus`: recorder families plus figures read from
/// PostgreSQL at scrape time (so every broker reports the same depths).
#[utoipa::path(get, path = "/metrics/prometheus", tag = "status", responses((status = 200, description = "Prometheus text format", body = String, content_type = "text/plain")))]
pub(crate) async fn metrics_prometheus(State(app): State<Arc<AppState>>) -> Response {
    let mut out = match crate::metrics::handle() {
        Some(h) => {
            h.run_upkeep();
            h.render()
        }
        None => String::new(),
    };
    let (size, idle, max) = app.engine.pool_status();
    let _ = writeln!(
        out,
        "# TYPE queen_uptime_seconds gauge\nqueen_uptime_seconds {}",
        app.started.elapsed().as_secs()
    );
    let _ = writeln!(out, "# TYPE queen_db_pool_connections gauge\nqueen_db_pool_connections {size}");
    let _ = writeln!(out, "# TYPE queen_db_pool_idle gauge\nqueen_db_pool_idle {idle}");
    let _ = writeln!(out, "# TYPE queen_db_pool_max gauge\nqueen_db_pool_max {max}");
    let _ = writeln!(
        out,
        "# TYPE queen_long_poll_queues_waiting gauge\nqueen_long_poll_queues_waiting {}",
        app.engine.queues_waiting()
    );
    let _ = writeln!(
        out,
        "# TYPE queen_kv_sweeper_rows_pruned_total counter\nqueen_kv_sweeper_rows_pruned_total {}",
        app.engine.kv_rows_pruned()
    );
    let retention = app.engine.retention_stats();
    let _ = writeln!(
        out,
        "# TYPE queen_messages_removed_total counter\n\
         queen_messages_removed_total{{reason=\"retention\"}} {}\n\
         queen_messages_removed_total{{reason=\"max_wait\"}} {}",
        retention.retained, retention.evicted
    );
    let timers = app.engine.timer_stats();
    let _ =
        writeln!(out, "# TYPE queen_timers_fired_total counter\nqueen_timers_fired_total {}", timers.fired);
    let _ = writeln!(out, "# TYPE queen_timer_fire_lag_seconds histogram");
    let mut cumulative = 0;
    for (bound, n) in queen_engine::FIRE_LAG_BOUNDS_MS.iter().zip(&timers.lag_buckets) {
        cumulative += n;
        let _ =
            writeln!(out, "queen_timer_fire_lag_seconds_bucket{{le=\"{}\"}} {cumulative}", bound / 1000.0);
    }
    let _ = writeln!(out, "queen_timer_fire_lag_seconds_bucket{{le=\"+Inf\"}} {}", timers.fired);
    let _ = writeln!(out, "queen_timer_fire_lag_seconds_sum {}", timers.lag_sum_seconds);
    let _ = writeln!(out, "queen_timer_fire_lag_seconds_count {}", timers.fired);
    if let Ok((pending, due, locks)) = app.engine.timer_and_lock_gauges().await {
        let _ = writeln!(out, "# TYPE queen_timers_pending gauge\nqueen_timers_pending {pending}");
        let _ = writeln!(out, "# TYPE queen_timers_due gauge\nqueen_timers_due {due}");
        let _ = writeln!(out, "# TYPE queen_locks_held gauge\nqueen_locks_held {locks}");
    }
    let _ = writeln!(out, "# TYPE queen_batch_size histogram");
    for kind in queen_engine::BatchKind::ALL {
        let (sizes, kind) = (app.engine.batch_sizes(kind), kind.label());
        let mut cumulative = 0;
        for (bound, n) in queen_engine::BATCH_SIZE_BOUNDS.iter().zip(&sizes.buckets) {
            cumulative += n;
            let _ = writeln!(out, "queen_batch_size_bucket{{kind=\"{kind}\",le=\"{bound}\"}} {cumulative}");
        }
        let _ = writeln!(out, "queen_batch_size_bucket{{kind=\"{kind}\",le=\"+Inf\"}} {}", sizes.count);
        let _ = writeln!(out, "queen_batch_size_sum{{kind=\"{kind}\"}} {}", sizes.sum);
        let _ = writeln!(out, "queen_batch_size_count{{kind=\"{kind}\"}} {}", sizes.count);
    }
    // A batch whose statement failed as a whole and whose members then ran
    // alone: a deadlock between batches, or a poison member, shows here.
    let _ = writeln!(out, "# TYPE queen_batch_retried_total counter");
    for kind in queen_engine::BatchKind::ALL {
        let retried = app.engine.batch_sizes(kind).retried;
        let _ = writeln!(out, "queen_batch_retried_total{{kind=\"{}\"}} {retried}", kind.label());
    }
    match app.engine.queue_depths().await {
        Ok(depths) => {
            let _ = writeln!(out, "# TYPE queen_queue_depth gauge");
            for d in &depths {
                let _ = writeln!(out, "queen_queue_depth{{queue=\"{}\"}} {}", label(&d.queue), d.depth);
            }
            let _ = writeln!(out, "# TYPE queen_queue_oldest_message_age_seconds gauge");
            for d in &depths {
                let _ = writeln!(
                    out,
                    "queen_queue_oldest_message_age_seconds{{queue=\"{}\"}} {}",
                    label(&d.queue),
                    d.oldest_age_seconds
                );
            }
            let _ = writeln!(out, "# TYPE queen_dlq_depth gauge");
            for d in &depths {
                let _ = writeln!(out, "queen_dlq_depth{{queue=\"{}\"}} {}", label(&d.queue), d.dead_letters);
            }
            let _ = writeln!(out, "# TYPE queen_database_up gauge\nqueen_database_up 1");
        }
        Err(e) => {
            tracing::warn!(error = %e, "metrics: cannot read queue depths");
            let _ = writeln!(out, "# TYPE queen_database_up gauge\nqueen_database_up 0");
        }
    }
    (StatusCode::OK, [(header::CONTENT_TYPE, HeaderValue::from_static("text/plain; version=0.0.4"))], out)
        .into_response()
}
