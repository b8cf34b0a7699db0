//! `Engine`'s calls of `crate::admin`: the facade over that module.

use crate::admin::*;
use crate::{Engine, EngineError, Json};

impl Engine {
    /// Counts over the whole broker.
    pub async fn resources_overview(&self) -> Result<Json, EngineError> {
        self.call_json("SELECT queen.resources_overview()::text", &[]).await
    }

    /// Every queue with its options and message counts.
    pub async fn resources_queues(&self) -> Result<Json, EngineError> {
        self.queues_page(None, 0).await
    }

    /// A page of queues by name (`limit` `None`: all), with `total`, the number of queues.
    pub async fn queues_page(&self, limit: Option<i32>, offset: i32) -> Result<Json, EngineError> {
        self.call_json("SELECT queen.resources_queues($1, $2)::text", &[&limit, &offset]).await
    }

    /// A keyset page of messages, newest first, strictly before `before`
    /// (the previous page's `nextBefore`: created_at text, partition id, seq).
    pub async fn messages_before(
        &self,
        queue: Option<&str>,
        status: Option<&str>,
        before: Option<&[String]>,
        limit: i32,
    ) -> Result<Json, EngineError> {
        let before: Option<Vec<String>> = before.map(<[String]>::to_vec);
        self.call_json(
            "SELECT queen.messages_before($1, $2, $3, $4)::text",
            &[&queue, &status, &before, &limit],
        )
        .await
    }

    /// A keyset page of queues by name after `after`, with their counts,
    /// dead letters and oldest unconsumed message's age; `nextAfter` continues.
    pub async fn queues_after(&self, after: Option<&str>, limit: i32) -> Result<Json, EngineError> {
        self.call_json("SELECT queen.queues_page($1, $2)::text", &[&after, &limit]).await
    }

    /// One queue's summary as a row of [`Engine::queues_after`] (counts, dead
    /// letters, oldest message, lag per group, options), without its
    /// partitions; `queues` is empty when there is no such queue.
    pub async fn queue_summary(&self, queue: &str) -> Result<Json, EngineError> {
        self.call_json("SELECT queen.queues_page(NULL, 1, $1)::text", &[&queue]).await
    }

    /// A keyset page of one queue's partitions by name after `after`, with
    /// their counts and each consumer group's lag and lease holder on them.
    pub async fn queue_partitions_page(
        &self,
        queue: &str,
        after: Option<&str>,
        limit: i32,
    ) -> Result<Json, EngineError> {
        self.call_json("SELECT queen.queue_partitions_page($1, $2, $3)::text", &[&queue, &after, &limit])
            .await
    }

    /// One queue with its partitions (404 when missing).
    pub async fn resources_queue(&self, queue: &str) -> Result<Json, EngineError> {
        self.call_json("SELECT queen.resources_queue($1)::text", &[&queue]).await
    }

    /// Backlog per partition of one queue, for one group or for queue mode;
    /// depth and oldest-message age (404 when missing).
    pub async fn resources_queue_depth(&self, queue: &str, group: Option<&str>) -> Result<Json, EngineError> {
        self.call_json("SELECT queen.resources_queue_depth($1, $2)::text", &[&queue, &group]).await
    }

    /// One queue with its partitions, groups and depth (404 when missing).
    pub async fn status_queue(&self, queue: &str) -> Result<Json, EngineError> {
        self.call_json("SELECT queen.status_queue($1)::text", &[&queue]).await
    }

    /// Messages pushed and dead-lettered per `minute`, `hour` or `day`
    /// bucket; `from`/`to` are ISO 8601 (the last 24 h by default).
    pub async fn status_analytics(
        &self,
        interval: Option<&str>,
        from: Option<&str>,
        to: Option<&str>,
        queue: Option<&str>,
    ) -> Result<Json, EngineError> {
        self.call_json(
            "SELECT queen.status_analytics($1, queen.timestamp_param('from', $2), \
             queen.timestamp_param('to', $3), $4)::text",
            &[&interval, &from, &to, &queue],
        )
        .await
    }

    /// Connections, size and version of the database.
    pub async fn database_metrics(&self) -> Result<Json, EngineError> {
        self.call_json("SELECT queen.database_metrics()::text", &[]).await
    }

    /// Records a trace event against a message; `body` is the request JSON.
    pub async fn trace_add(&self, body: &str) -> Result<Json, EngineError> {
        self.call_json("SELECT queen.trace_add($1::text::json)::text", &[&body]).await
    }

    /// The trace events of one message, oldest first.
    pub async fn traces_for_message(
        &self,
        partition_id: &uuid::Uuid,
        transaction_id: &str,
    ) -> Result<Json, EngineError> {
        self.call_json("SELECT queen.traces_for_message($1, $2)::text", &[partition_id, &transaction_id])
            .await
    }

    /// Trace events carrying one name, newest first, with their messages.
    pub async fn traces_by_name(&self, name: &str, limit: i32, offset: i32) -> Result<Json, EngineError> {
        self.call_json("SELECT queen.traces_by_name($1, $2, $3)::text", &[&name, &limit, &offset]).await
    }

    /// Every trace name with its counts.
    pub async fn trace_names(&self, limit: i32, offset: i32) -> Result<Json, EngineError> {
        self.call_json("SELECT queen.trace_names($1, $2)::text", &[&limit, &offset]).await
    }

    /// Partitions, of one queue or of all.
    pub async fn resources_partitions(&self, queue: Option<&str>) -> Result<Json, EngineError> {
        self.call_json("SELECT queen.resources_partitions($1)::text", &[&queue]).await
    }

    /// Queues grouped by `namespace` or by `task`.
    pub async fn resources_grouped(&self, by_task: bool) -> Result<Json, EngineError> {
        let by = if by_task { "task" } else { "namespace" };
        self.call_json("SELECT queen.resources_grouped($1)::text", &[&by]).await
    }

    /// Messages with their queue-mode state, newest first.
    pub async fn messages(
        &self,
        queue: Option<&str>,
        partition: Option<&str>,
        status: Option<&str>,
        limit: i32,
        offset: i32,
    ) -> Result<Json, EngineError> {
        self.call_json(
            "SELECT queen.messages_list($1, $2, $3, $4, $5)::text",
            &[&queue, &partition, &status, &limit, &offset],
        )
        .await
    }

    /// The messages carrying `transaction_id` on any partition, newest first.
    pub async fn messages_by_transaction(
        &self,
        transaction_id: &str,
        limit: i32,
    ) -> Result<Json, EngineError> {
        self.call_json("SELECT queen.messages_by_transaction($1, $2)::text", &[&transaction_id, &limit]).await
    }

    /// One message with the consumption state of every group (404 when missing).
    pub async fn message(
        &self,
        partition_id: &uuid::Uuid,
        transaction_id: &str,
    ) -> Result<Json, EngineError> {
        self.call_json("SELECT queen.message_detail($1, $2)::text", &[partition_id, &transaction_id]).await
    }

    /// Removes a message from its lane.
    pub async fn delete_message(
        &self,
        partition_id: &uuid::Uuid,
        transaction_id: &str,
    ) -> Result<Json, EngineError> {
        self.call_json("SELECT queen.message_delete($1, $2)::text", &[partition_id, &transaction_id]).await
    }

    /// Dead letters of one queue or all, newest first, a keyset page before
    /// `before` (an internal row id; `nextBefore` continues), with the total.
    pub async fn dlq_page(
        &self,
        queue: Option<&str>,
        before: Option<i64>,
        limit: i32,
    ) -> Result<Json, EngineError> {
        let page = crate::dlq::keyset_page(self.pool(), queue, before, limit).await?;
        self.answer_opened(&page)
    }

    /// Removes a dead letter from the DLQ without redelivering it (404 when missing).
    pub async fn delete_dead_letter(
        &self,
        partition_id: &uuid::Uuid,
        transaction_id: &str,
    ) -> Result<Json, EngineError> {
        self.call_json("SELECT queen.dead_letter_delete($1, $2)::text", &[partition_id, &transaction_id])
            .await
    }

    /// KV namespaces with their live key counts, `limit` per page after `after`.
    pub async fn kv_namespaces(&self, after: Option<&str>, limit: i32) -> Result<Json, EngineError> {
        self.call_json("SELECT queen.kv_namespaces($1, $2)::text", &[&after, &limit]).await
    }

    /// A keyset page of one KV namespace's live keys with their values,
    /// under `prefix` (empty: all), after `after`.
    pub async fn kv_page(
        &self,
        ns: &str,
        prefix: &str,
        after: Option<&str>,
        limit: i32,
    ) -> Result<Json, EngineError> {
        self.call_json("SELECT queen.kv_page($1, $2, $3, $4)::text", &[&ns, &prefix, &after, &limit]).await
    }

    /// Consumer groups (one entry per group and queue), optionally one name or only the lagging.
    pub async fn consumer_groups(
        &self,
        name: Option<&str>,
        min_lag_seconds: Option<f64>,
    ) -> Result<Json, EngineError> {
        self.call_json("SELECT queen.consumer_groups_list($1, $2)::text", &[&name, &min_lag_seconds]).await
    }

    /// Consumer groups of one queue or all, as [`Engine::consumer_groups`]
    /// lists them, a keyset page by (queue, group) after `after`.
    pub async fn consumer_groups_page(
        &self,
        queue: Option<&str>,
        after: Option<(&str, &str)>,
        limit: i32,
    ) -> Result<Json, EngineError> {
        let (after_queue, after_group) = (after.map(|a| a.0), after.map(|a| a.1));
        self.call_json(
            "SELECT queen.consumer_groups_page($1, $2, $3, $4)::text",
            &[&queue, &after_queue, &after_group, &limit],
        )
        .await
    }

    /// The maintenance switches.
    pub async fn maintenance(&self) -> Result<Json, EngineError> {
        self.call_json("SELECT queen.maintenance()::text", &[]).await
    }

    /// Sets the push and/or pop switch (`None` leaves one as it is).
    pub async fn set_maintenance(&self, push: Option<bool>, pop: Option<bool>) -> Result<Json, EngineError> {
        self.call_json("SELECT queen.set_maintenance($1, $2)::text", &[&push, &pop]).await
    }

    /// One summary of the broker's state.
    pub async fn status(&self) -> Result<Json, EngineError> {
        self.call_json("SELECT queen.status()::text", &[]).await
    }

    /// Per-queue depth, oldest visible message age and DLQ depth.
    pub async fn queue_depths(&self) -> Result<Vec<QueueDepth>, EngineError> {
        let client = self.pool().get().await?;
        let stmt = client
            .prepare_cached("SELECT queue, depth, oldest_age_seconds, dead_letters FROM queen.queue_depths()")
            .await?;
        let rows = client.query(&stmt, &[]).await?;
        rows.iter()
            .map(|r| {
                Ok(QueueDepth {
                    queue: r.try_get(0)?,
                    depth: r.try_get(1)?,
                    oldest_age_seconds: r.try_get(2)?,
                    dead_letters: r.try_get(3)?,
                })
            })
            .collect()
    }
}
