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
use crate::{ApiError, AppState};

type Answer = Result<Response, ApiError>;

fn ok(json: queen_engine::Json) -> Response {
    json_response(StatusCode::OK, json.0)
}

fn partition_id(raw: &str) -> Result<uuid::Uuid, ApiError> {
    uuid::Uuid::parse_str(raw).map_err(|_| ApiError::bad("partitionId", "must be a UUID"))
}

pub(crate) async fn overview(State(app): State<Arc<AppState>>) -> Answer {
    Ok(ok(app.engine.resources_overview().await?))
}

pub(crate) async fn queues(State(app): State<Arc<AppState>>) -> Answer {
    Ok(ok(app.engine.resources_queues().await?))
}

pub(crate) async fn queue(State(app): State<Arc<AppState>>, Path(queue): Path<String>) -> Answer {
    Ok(ok(app.engine.resources_queue(&queue).await?))
}

pub(crate) async fn queue_depth(State(app): State<Arc<AppState>>, Path(queue): Path<String>) -> Answer {
    Ok(ok(app.engine.resources_queue_depth(&queue).await?))
}

pub(crate) async fn partitions(State(app): State<Arc<AppState>>, query: QueryMap) -> Answer {
    let p = Params::from(query)?;
    Ok(ok(app.engine.resources_partitions(p.str("queue")).await?))
}

pub(crate) async fn namespaces(State(app): State<Arc<AppState>>) -> Answer {
    Ok(ok(app.engine.resources_grouped(false).await?))
}

pub(crate) async fn tasks(State(app): State<Arc<AppState>>) -> Answer {
    Ok(ok(app.engine.resources_grouped(true).await?))
}

pub(crate) async fn messages(State(app): State<Arc<AppState>>, query: QueryMap) -> Answer {
    let p = Params::from(query)?;
    let limit = p.int("limit", 1, 10_000)?.unwrap_or(200) as i32;
    let offset = p.int("offset", 0, i32::MAX as i64)?.unwrap_or(0) as i32;
    Ok(ok(app.engine.messages(p.str("queue"), p.str("partition"), p.str("status"), limit, offset).await?))
}

pub(crate) async fn message(
    State(app): State<Arc<AppState>>,
    Path((pid, tx)): Path<(String, String)>,
) -> Answer {
    Ok(ok(app.engine.message(&partition_id(&pid)?, &tx).await?))
}

pub(crate) async fn delete_message(
    State(app): State<Arc<AppState>>,
    Path((pid, tx)): Path<(String, String)>,
) -> Answer {
    Ok(ok(app.engine.delete_message(&partition_id(&pid)?, &tx).await?))
}

pub(crate) async fn retry_message(
    State(app): State<Arc<AppState>>,
    Path((pid, tx)): Path<(String, String)>,
) -> Answer {
    Ok(ok(app.engine.retry_message(&partition_id(&pid)?, &tx).await?))
}

pub(crate) async fn consumer_groups(State(app): State<Arc<AppState>>) -> Answer {
    Ok(ok(app.engine.consumer_groups(None, None).await?))
}

pub(crate) async fn lagging_groups(State(app): State<Arc<AppState>>, query: QueryMap) -> Answer {
    let p = Params::from(query)?;
    let min = p.int("minLagSeconds", 0, i64::from(i32::MAX))?.unwrap_or(3600) as f64;
    Ok(ok(app.engine.consumer_groups(None, Some(min)).await?))
}

pub(crate) async fn consumer_group(State(app): State<Arc<AppState>>, Path(group): Path<String>) -> Answer {
    Ok(ok(app.engine.consumer_groups(Some(&group), None).await?))
}

pub(crate) async fn status(State(app): State<Arc<AppState>>) -> Answer {
    Ok(ok(app.engine.status().await?))
}

pub(crate) async fn stats_refresh() -> Response {
    // Counts are computed live from the tables; there is no cache to refresh.
    json_response(StatusCode::OK, r#"{"success":true,"message":"statistics are always live"}"#.into())
}

pub(crate) async fn maintenance(State(app): State<Arc<AppState>>) -> Answer {
    Ok(ok(app.engine.maintenance().await?))
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

pub(crate) async fn set_push_maintenance(State(app): State<Arc<AppState>>, body: Body) -> Answer {
    let on = switch(&body)?;
    Ok(ok(app.engine.set_maintenance(Some(on), None).await?))
}

pub(crate) async fn set_pop_maintenance(State(app): State<Arc<AppState>>, body: Body) -> Answer {
    let on = switch(&body)?;
    Ok(ok(app.engine.set_maintenance(None, Some(on)).await?))
}

/// `GET /metrics`: the JSON summary.
pub(crate) async fn metrics_json(State(app): State<Arc<AppState>>) -> Response {
    let (size, idle, max) = app.engine.pool_status();
    json_response(
        StatusCode::OK,
        serde_json::json!({
            "uptimeSeconds": app.started.elapsed().as_secs(),
            "database": {"poolSize": size, "idleConnections": idle, "maxConnections": max},
            "longPolls": {"queuesWaiting": app.engine.queues_waiting()},
            "kv": {"rowsPruned": app.engine.kv_rows_pruned()},
        })
        .to_string(),
    )
}

fn label(v: &str) -> String {
    v.replace('\\', "\\\\").replace('"', "\\\"").replace('\n', "\\n")
}

/// `GET /metrics/prometheus`: recorder families plus figures read from
/// PostgreSQL at scrape time (so every broker reports the same depths).
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
