//! `Engine`'s calls of `crate::ack`: the facade over that module.

use crate::ack::*;
use crate::{Engine, EngineError, Json};

impl Engine {
    /// Acks (a JSON array of acknowledgments) as offset commits.
    pub async fn ack(&self, items: &str, consumer_group: Option<&str>) -> Result<Json, EngineError> {
        self.ack_items(decode_ack_items(items, consumer_group)?).await
    }

    /// Acks checked items; answers one result per item, in order.
    /// Concurrent calls share a statement and a commit (the ack batcher).
    pub async fn ack_items(&self, items: Vec<AckItem>) -> Result<Json, EngineError> {
        if items.is_empty() {
            return Ok(Json("[]".into()));
        }
        let n = items.len();
        let answers = match self.ack_batcher() {
            Some(batcher) if n <= BATCH_AT_MOST_ITEMS => batcher.call(items).await,
            _ => ack_call(self.pool(), &items).await,
        }?;
        self.traffic_ref().acked(n);
        serde_json::to_string(&answers).map(Json).map_err(|e| EngineError::Protocol(e.to_string()))
    }
}
