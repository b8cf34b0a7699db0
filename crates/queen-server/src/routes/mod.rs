//! Route table. One module per area; each handler is wire-to-engine only.

mod admin;
mod broker;
mod kv;

use std::sync::Arc;

use axum::routing::{delete, get, post};
use axum::Router;

use crate::AppState;

pub(crate) fn router() -> Router<Arc<AppState>> {
    Router::new()
        .route("/health", get(broker::health))
        .route("/metrics", get(admin::metrics_json))
        .route("/metrics/prometheus", get(admin::metrics_prometheus))
        .route("/api/v1/resources/overview", get(admin::overview))
        .route("/api/v1/resources/queues", get(admin::queues))
        .route("/api/v1/resources/queues/{queue}/depth", get(admin::queue_depth))
        .route("/api/v1/resources/partitions", get(admin::partitions))
        .route("/api/v1/resources/namespaces", get(admin::namespaces))
        .route("/api/v1/resources/tasks", get(admin::tasks))
        .route("/api/v1/messages", get(admin::messages))
        .route(
            "/api/v1/messages/{partition_id}/{transaction_id}",
            get(admin::message).delete(admin::delete_message),
        )
        .route("/api/v1/messages/{partition_id}/{transaction_id}/retry", post(admin::retry_message))
        .route("/api/v1/consumer-groups", get(admin::consumer_groups))
        .route("/api/v1/consumer-groups/lagging", get(admin::lagging_groups))
        .route("/api/v1/status", get(admin::status))
        .route("/api/v1/status/queues", get(admin::queues))
        .route("/api/v1/stats/refresh", post(admin::stats_refresh))
        .route("/api/v1/system/maintenance", get(admin::maintenance).post(admin::set_push_maintenance))
        .route("/api/v1/system/maintenance/pop", get(admin::maintenance).post(admin::set_pop_maintenance))
        .route("/api/v1/configure", post(broker::configure))
        .route("/api/v1/push", post(broker::push))
        .route("/api/v1/pop/queue/{queue}", get(broker::pop_queue))
        .route("/api/v1/pop/queue/{queue}/partition/{partition}", get(broker::pop_partition))
        .route("/api/v1/ack", post(broker::ack))
        .route("/api/v1/ack/batch", post(broker::ack_batch))
        .route("/api/v1/lease/{lease}/extend", post(broker::extend_lease))
        .route("/api/v1/transaction", post(broker::transaction))
        .route("/api/v1/dlq", get(broker::dlq))
        .route("/api/v1/resources/queues/{queue}", get(admin::queue).delete(broker::delete_queue))
        .route("/api/v1/consumer-groups/{group}", get(admin::consumer_group).delete(broker::delete_group))
        .route("/api/v1/consumer-groups/{group}/subscription", post(broker::update_subscription))
        .route("/api/v1/consumer-groups/{group}/queues/{queue}", delete(broker::delete_group_queue))
        .route("/api/v1/consumer-groups/{group}/queues/{queue}/seek", post(broker::seek))
        .route("/api/v1/kv", post(kv::batch))
        .route("/api/v1/kv/{ns}/{*key}", get(kv::get_key).put(kv::put_key).delete(kv::delete_key))
        .fallback(broker::not_found)
}
