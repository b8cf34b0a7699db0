//! Dead-letter replay and purge: the request checked here, once; the move
//! (claim, push as `dlq:<record id>`, remove) is `queen.dlq_replay`
//! (sql/functions/dlq.sql), which the retry route runs too.

pub use queen_wire::{DeadLetter, DlqKeysetPage, DlqPage, DlqQuery, ReplayTarget};
use serde_json::value::RawValue;

use crate::db::Pool;
use crate::wire::{self, Kind};
use crate::EngineError;

/// A page of dead letters as a listing statement answers it
/// (`statements/dlq_list.sql`, `dlq_page.sql`): the total on every row, one
/// row per dead letter (a row of NULLs when the page is empty) and where
/// the next keyset page starts.
struct DeadLetterRows {
    total: u64,
    messages: Vec<DeadLetter>,
    next_before: Option<i64>,
}

impl DeadLetterRows {
    fn read(rows: &[tokio_postgres::Row]) -> Result<Self, EngineError> {
        let first =
            rows.first().ok_or_else(|| EngineError::Protocol("a DLQ listing answered no row".into()))?;
        let total: i64 = first.try_get(0)?;
        let next_before: Option<i64> = first.try_get(15)?;
        let mut messages = Vec::with_capacity(rows.len());
        for row in rows {
            let Some(dlq_id) = row.try_get::<_, Option<i64>>(1)? else { continue };
            let payload: Option<String> = row.try_get(3)?;
            let data = RawValue::from_string(payload.unwrap_or_else(|| "null".to_owned()))
                .map_err(|e| EngineError::Protocol(format!("a dead letter's payload: {e}")))?;
            messages.push(DeadLetter {
                dlq_id: Some(dlq_id),
                id: row.try_get::<_, Option<uuid::Uuid>>(2)?.map(|u| u.to_string()),
                data,
                error_message: row.try_get(4)?,
                transaction_id: row.try_get(5)?,
                trace_id: row.try_get(6)?,
                partition_id: row.try_get::<_, Option<uuid::Uuid>>(7)?.map(|u| u.to_string()),
                producer_sub: row.try_get(8)?,
                queue: row.try_get(9)?,
                partition: row.try_get(10)?,
                consumer_group: row.try_get(11)?,
                retry_count: row.try_get::<_, i32>(12)?.into(),
                created_at: row.try_get(13)?,
                failed_at: row.try_get(14)?,
            });
        }
        let total = u64::try_from(total).map_err(|e| EngineError::Protocol(e.to_string()))?;
        Ok(DeadLetterRows { total, messages, next_before })
    }
}

/// `GET /api/v1/dlq`: one page of the filter, newest failures first.
pub(crate) async fn list(pool: &Pool, q: &DlqQuery) -> Result<DlqPage, EngineError> {
    let client = pool.get().await?;
    let stmt = client.prepare_cached(include_str!("../sql/statements/dlq_list.sql")).await?;
    let rows = client
        .query(&stmt, &[&q.queue, &q.consumer_group, &q.partition, &q.from, &q.to, &q.limit, &q.offset])
        .await?;
    drop(client);
    let r = DeadLetterRows::read(&rows)?;
    Ok(DlqPage { messages: r.messages, total: r.total })
}

/// The dashboard's dead letters: a keyset page before `before`, newest first.
pub(crate) async fn keyset_page(
    pool: &Pool,
    queue: Option<&str>,
    before: Option<i64>,
    limit: i32,
) -> Result<DlqKeysetPage, EngineError> {
    let client = pool.get().await?;
    let stmt = client.prepare_cached(include_str!("../sql/statements/dlq_page.sql")).await?;
    let rows = client.query(&stmt, &[&queue, &before, &limit]).await?;
    drop(client);
    let r = DeadLetterRows::read(&rows)?;
    Ok(DlqKeysetPage { messages: r.messages, next_before: r.next_before, total: r.total })
}

/// Names longer than this are refused, as a push refuses them.
const MAX_NAME_CHARS: usize = 255;

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
