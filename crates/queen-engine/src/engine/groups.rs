//! `Engine`'s consumer-group calls: dead letters listed, groups deleted,
//! subscriptions moved, cursors sought.

use crate::dlq::DlqQuery;
use crate::groups::admin;
use crate::{Engine, EngineError, Json};

impl Engine {
    /// Lists dead letters (payloads sealed at rest opened).
    pub async fn dlq(&self, q: &DlqQuery) -> Result<Json, EngineError> {
        let page = crate::dlq::list(self.pool(), q).await?;
        self.answer_opened(&page)
    }

    /// Deletes a group's cursors (on one queue or all), optionally its registration.
    pub async fn delete_consumer_group(
        &self,
        group: &str,
        queue: Option<&str>,
        delete_metadata: bool,
    ) -> Result<Json, EngineError> {
        written(&admin::delete(self.pool(), group, queue, delete_metadata).await?)
    }

    /// Sets the start position for lanes the group has not seen yet.
    pub async fn update_subscription(
        &self,
        group: &str,
        timestamp: Option<&str>,
    ) -> Result<Json, EngineError> {
        written(&admin::update_subscription(self.pool(), group, timestamp).await?)
    }

    /// Moves a group's cursors on a queue, or on one `partition` of it, to
    /// the end or to a timestamp. One SQL function serves both routes so
    /// their rules cannot drift; a named partition the queue lacks is a 404.
    pub async fn seek(
        &self,
        group: &str,
        queue: &str,
        partition: Option<&str>,
        to_end: bool,
        timestamp: Option<&str>,
    ) -> Result<Json, EngineError> {
        match admin::seek(self.pool(), group, queue, partition, to_end, timestamp).await? {
            admin::Sought::Queue(answer) => written(&answer),
            admin::Sought::Partition(answer) => written(&answer),
        }
    }
}

fn written(answer: &impl serde::Serialize) -> Result<Json, EngineError> {
    serde_json::to_string(answer).map(Json).map_err(|e| EngineError::Protocol(e.to_string()))
}
