//! `Engine`'s calls of `crate::dlq`: the facade over that module.

use crate::dlq::*;
use crate::wire::{self};
use crate::{Engine, EngineError, Json};
use tokio_postgres::types::ToSql;

impl Engine {
    /// Replays one dead-letter record (`POST /api/v1/dlq/:id/replay`):
    /// `moved`, or `duplicate` (nothing written, the record kept); 404 when
    /// the record is gone.
    pub async fn dlq_replay(&self, dlq_id: i64, target: &ReplayTarget) -> Result<Json, EngineError> {
        const REPLAY: &str = "SELECT result::text, queued FROM queen.dlq_replay($1, $2, $3, $4)";
        let (queue, partition) = (target.queue.as_deref(), target.partition.as_deref());
        let first = self.move_dead_letter(REPLAY, &[&dlq_id, &queue, &partition, &None::<&str>]).await;
        match first {
            // The destination is encrypted and the stored payload is plain:
            // seal it here (SQL never sees the key) and move it with that.
            Err(EngineError::EncryptionChanged(queues)) => {
                self.refresh_sealed(&queues).await?;
                let sealed = self.sealed_payload_of(dlq_id).await?;
                self.move_dead_letter(REPLAY, &[&dlq_id, &queue, &partition, &sealed]).await
            }
            other => other,
        }
    }

    /// Moves the newest dead-letter record of a message back onto its lane
    /// (`POST /api/v1/messages/:pid/:txn/retry`), by the replay's rule.
    pub async fn retry_message(
        &self,
        partition_id: &uuid::Uuid,
        transaction_id: &str,
    ) -> Result<Json, EngineError> {
        const RETRY: &str = "SELECT result::text, queued FROM queen.message_retry($1, $2, $3, $4)";
        let first =
            self.move_dead_letter(RETRY, &[partition_id, &transaction_id, &None::<i64>, &None::<&str>]).await;
        match first {
            Err(EngineError::EncryptionChanged(queues)) => {
                self.refresh_sealed(&queues).await?;
                let client = self.pool().get().await?;
                let stmt =
                    client.prepare_cached(include_str!("../../sql/statements/dlq_record_of.sql")).await?;
                let id: Option<i64> =
                    client.query_opt(&stmt, &[partition_id, &transaction_id]).await?.map(|r| r.get(0));
                drop(client);
                let sealed = match id {
                    Some(id) => self.sealed_payload_of(id).await?,
                    None => None,
                };
                self.move_dead_letter(RETRY, &[partition_id, &transaction_id, &id, &sealed]).await
            }
            other => other,
        }
    }

    /// Deletes one queue's dead-letter records, or one group's of it, in
    /// one statement; answers `{deleted, queue, consumerGroup}`.
    pub async fn dlq_purge(&self, queue: &str, consumer_group: Option<&str>) -> Result<Json, EngineError> {
        if queue.is_empty() {
            return Err(wire::bad_request("queue", "is required: a purge names the queue it empties"));
        }
        let client = self.pool().get().await?;
        let stmt = client.prepare_cached("SELECT queen.dlq_purge($1, $2)").await?;
        let deleted: i64 = client.query_one(&stmt, &[&queue, &consumer_group]).await?.try_get(0)?;
        drop(client);
        let answer = serde_json::json!({"deleted": deleted, "queue": queue, "consumerGroup": consumer_group});
        Ok(Json(answer.to_string()))
    }

    /// Runs a move statement (`result`, `queued`), then wakes the long polls
    /// of the queue it pushed to, as a push does after its commit.
    async fn move_dead_letter(
        &self,
        sql: &'static str,
        params: &[&(dyn ToSql + Sync)],
    ) -> Result<Json, EngineError> {
        let client = self.pool().get().await?;
        let stmt = client.prepare_cached(sql).await?;
        let row = client.query_one(&stmt, params).await?;
        drop(client);
        let result: String = row.try_get(0)?;
        let queued: Option<Vec<String>> = row.try_get(1)?;
        if let Some(queues) = queued.filter(|q| !q.is_empty()) {
            self.traffic_ref().pushed(1);
            (self.announce_fn())(queues);
        }
        Ok(Json(result))
    }

    /// The record's payload sealed with this broker's key (`None` when the
    /// record is gone: the move then answers 404). A payload already sealed
    /// is passed as stored.
    async fn sealed_payload_of(&self, dlq_id: i64) -> Result<Option<String>, EngineError> {
        let client = self.pool().get().await?;
        let stmt = client.prepare_cached(include_str!("../../sql/statements/dlq_payload.sql")).await?;
        let row = client.query_opt(&stmt, &[&dlq_id]).await?;
        drop(client);
        let Some(row) = row else { return Ok(None) };
        let stored: Option<String> = row.try_get(0)?;
        let plain = stored.unwrap_or_else(|| "null".to_owned());
        if plain.starts_with(crate::sealing::SEALED_PREFIX) {
            return Ok(Some(plain));
        }
        let key = self.encryption_key().ok_or_else(|| {
            EngineError::Encryption(
                "the replay's destination is encrypted at rest and this broker has no QUEEN_ENCRYPTION_KEY"
                    .into(),
            )
        })?;
        key.seal(&plain).map(Some)
    }
}
