//! Dead-letter replay and purge: the request checked here, once; the move
//! (claim, push as `dlq:<record id>`, remove) is `queen.dlq_replay`
//! (sql/functions/0006_groups.sql), which the retry route runs too.

use serde_json::value::RawValue;
use tokio_postgres::types::ToSql;

use crate::wire::{self, Kind};
use crate::{Engine, EngineError, Json};

/// Names longer than this are refused, as a push refuses them.
const MAX_NAME_CHARS: usize = 255;

/// Where a replayed dead letter goes: its own lane unless a queue or a
/// partition is named (the partition defaults to the record's own name).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ReplayTarget {
    /// Destination queue (created by the push if missing).
    pub queue: Option<String>,
    /// Destination partition (created by the push if missing).
    pub partition: Option<String>,
}

/// Decodes the optional body of `POST /api/v1/dlq/:id/replay`,
/// `{queue?, partition?}`; an empty body replays in place.
pub fn decode_replay_target(body: &str) -> Result<ReplayTarget, EngineError> {
    if body.trim().is_empty() {
        return Ok(ReplayTarget::default());
    }
    let raw: &RawValue =
        serde_json::from_str(body).map_err(|_| wire::bad_request("body", "must be a JSON object"))?;
    let fields = wire::fields(raw).ok_or_else(|| wire::bad_request("body", "must be a JSON object"))?;
    let name = |field: &str| -> Result<Option<String>, EngineError> {
        let bad = || wire::bad_request(field, "must be a non-empty string of at most 255 characters");
        match fields.get(field) {
            None => Ok(None),
            Some(v) => match wire::kind(v) {
                Kind::Null => Ok(None),
                Kind::String => match wire::string(v)? {
                    s if s.is_empty() || s.chars().count() > MAX_NAME_CHARS => Err(bad()),
                    s => Ok(Some(s)),
                },
                _ => Err(bad()),
            },
        }
    };
    Ok(ReplayTarget { queue: name("queue")?, partition: name("partition")? })
}

/// Reads a dead-letter record id from the path: a positive integer.
pub fn parse_dlq_id(raw: &str) -> Result<i64, EngineError> {
    raw.parse::<i64>()
        .ok()
        .filter(|id| *id > 0)
        .ok_or_else(|| wire::bad_request("id", "must be a positive integer (a dlqId of GET /api/v1/dlq)"))
}

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
                let stmt = client
                    .prepare_cached(
                        "SELECT id FROM queen.dead_letters WHERE partition_id = $1 AND transaction_id = $2 \
                         ORDER BY id DESC LIMIT 1",
                    )
                    .await?;
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
        let stmt =
            client.prepare_cached("SELECT payload::text FROM queen.dead_letters WHERE id = $1").await?;
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

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used)]
mod tests {
    use super::*;

    #[test]
    fn a_replay_body_is_optional_and_names_are_checked() {
        assert_eq!(decode_replay_target("").unwrap(), ReplayTarget::default());
        assert_eq!(decode_replay_target("{}").unwrap(), ReplayTarget::default());
        let t = decode_replay_target(r#"{"queue":"q2","partition":"p"}"#).unwrap();
        assert_eq!((t.queue.as_deref(), t.partition.as_deref()), (Some("q2"), Some("p")));
        for bad in [r#"{"queue":""}"#, r#"{"queue":5}"#, r#"{"partition":[]}"#, "[]", "nope"] {
            assert!(
                matches!(decode_replay_target(bad), Err(EngineError::Rejected { status: 400, .. })),
                "{bad}"
            );
        }
        let long = format!(r#"{{"queue":"{}"}}"#, "q".repeat(256));
        assert!(decode_replay_target(&long).is_err());
    }

    #[test]
    fn a_dlq_id_is_a_positive_integer() {
        assert_eq!(parse_dlq_id("42").unwrap(), 42);
        for bad in ["0", "-1", "abc", "1.5", ""] {
            assert!(parse_dlq_id(bad).is_err(), "{bad}");
        }
    }
}
