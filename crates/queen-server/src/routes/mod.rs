//! Route table. One module per area; each handler is wire-to-engine only.
//!
//! Every route goes through `routes!`, so the OpenAPI document is built
//! from the same attributes that mount the handlers.

mod admin;
mod broker;
mod ephemeral;
mod kv;
mod locks;
mod reads;
mod streams;
mod timers;

pub(crate) use kv::kv_failure;

use std::sync::Arc;

use utoipa_axum::router::OpenApiRouter;
use utoipa_axum::routes;

use crate::AppState;

pub(crate) fn router() -> OpenApiRouter<Arc<AppState>> {
    OpenApiRouter::new()
        .routes(routes!(broker::health))
        .routes(routes!(broker::ready))
        .routes(routes!(admin::metrics_json))
        .routes(routes!(admin::metrics_prometheus))
        .routes(routes!(admin::overview))
        .routes(routes!(admin::queues))
        .routes(routes!(admin::queue_depth))
        .routes(routes!(admin::partitions))
        .routes(routes!(admin::namespaces))
        .routes(routes!(admin::tasks))
        .routes(routes!(admin::messages))
        .routes(routes!(admin::message, admin::delete_message))
        .routes(routes!(admin::retry_message))
        .routes(routes!(admin::consumer_groups))
        .routes(routes!(admin::lagging_groups, broker::delete_lagging_group))
        .routes(routes!(admin::status))
        .routes(routes!(admin::status_queues))
        .routes(routes!(admin::status_queue))
        .routes(routes!(admin::status_analytics))
        .routes(routes!(admin::status_buffers))
        .routes(routes!(admin::system_metrics))
        .routes(routes!(admin::worker_metrics))
        .routes(routes!(admin::add_trace))
        .routes(routes!(admin::trace_names))
        .routes(routes!(admin::traces_by_name))
        .routes(routes!(admin::message_traces))
        .routes(routes!(admin::stats_refresh))
        .routes(routes!(admin::maintenance, admin::set_push_maintenance))
        .routes(routes!(admin::pop_maintenance, admin::set_pop_maintenance))
        .routes(routes!(broker::configure))
        .routes(routes!(broker::push))
        .routes(routes!(broker::pop_queue))
        .routes(routes!(broker::pop_partition))
        .routes(routes!(broker::pop_tagged))
        .routes(routes!(broker::ack))
        .routes(routes!(broker::ack_batch))
        .routes(routes!(broker::extend_lease))
        .routes(routes!(broker::transaction))
        .routes(routes!(broker::dlq, broker::dlq_purge))
        .routes(routes!(broker::dlq_replay))
        .routes(routes!(admin::queue, broker::delete_queue))
        .routes(routes!(admin::consumer_group, broker::delete_group))
        .routes(routes!(broker::update_subscription))
        .routes(routes!(broker::delete_group_queue))
        .routes(routes!(broker::seek))
        .routes(routes!(broker::seek_partition))
        .routes(routes!(kv::batch))
        .routes(routes!(kv::get_key, kv::put_key, kv::delete_key))
        .routes(routes!(kv::namespaces))
        .routes(routes!(kv::list))
        .routes(routes!(locks::locks))
        .routes(routes!(ephemeral::configure))
        .routes(routes!(ephemeral::push))
        .routes(routes!(ephemeral::pop))
        .routes(routes!(ephemeral::ack))
        .routes(routes!(ephemeral::reset))
        .routes(routes!(ephemeral::delete))
        .routes(routes!(ephemeral::queues))
        .routes(routes!(ephemeral::depth))
        .routes(routes!(streams::register))
        .routes(routes!(streams::state_get))
        .routes(routes!(streams::cycle))
        .routes(routes!(reads::fetch))
        .routes(routes!(timers::timers))
        .routes(routes!(timers::list))
        .routes(routes!(timers::peek, timers::cancel))
        .routes(routes!(reads::partitions_changed))
        .fallback(broker::not_found)
}
