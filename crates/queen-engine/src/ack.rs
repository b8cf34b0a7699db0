//! Acks: decoded and checked here, once; `queen.ack_rows` takes typed
//! arrays and keeps the offset-commit rules (cursor locks, leases, retries,
//! the dead-letter move); it answers each item's verdict, and the engine
//! writes each item's answer (`queen_wire::AckResult`).

use std::sync::Arc;

use crate::batch::{
    answer_batch, unless_alone, Answered, BatchKind, BatchStats, Batcher, Budget, Rerun, Waiting, STALL_AFTER,
};
use crate::db::Pool;
use queen_wire::{AckResult, AckVerdict};
use serde_json::value::RawValue;
use uuid::Uuid;

use crate::groups::QUEUE_MODE;
use crate::wire::{self, Kind};
use crate::EngineError;

/// One acknowledgment, checked.
#[derive(Debug, Clone)]
pub struct AckItem {
    /// The message's transaction id.
    pub transaction_id: String,
    /// Its partition.
    pub partition_id: Uuid,
    /// completed, failed, retry or dlq.
    pub status: String,
    /// The failure text a dead letter keeps.
    pub error: Option<String>,
    /// The lease the message was delivered under, when the client sends it.
    pub lease_id: Option<String>,
    /// The group, resolved: the item's, else the call's, else queue mode.
    pub consumer_group: String,
}

/// Decodes a JSON array of acknowledgments; `call_group` is the batch's
/// `consumerGroup`. The first bad item is refused with the 400 that names it.
pub fn decode_ack_items(items: &str, call_group: Option<&str>) -> Result<Vec<AckItem>, EngineError> {
    let raw: &RawValue =
        serde_json::from_str(items).map_err(|_| wire::bad_request("acknowledgments", "must be an array"))?;
    let list = wire::elements(raw).ok_or_else(|| wire::bad_request("acknowledgments", "must be an array"))?;
    list.iter()
        .enumerate()
        .map(|(i, item)| decode_item(&format!("acknowledgments[{i}]"), item, call_group))
        .collect()
}

/// One ack object; `at` is its JSON path.
pub(crate) fn decode_item(
    at: &str,
    item: &RawValue,
    call_group: Option<&str>,
) -> Result<AckItem, EngineError> {
    let bad = |field: &str, problem: &str| wire::bad_request(&format!("{at}{field}"), problem);
    let f = wire::fields(item).ok_or_else(|| bad("", "must be an object"))?;
    let transaction_id = match f.get("transactionId") {
        Some(v) if wire::kind(v) == Kind::String => wire::string(v)?,
        _ => String::new(),
    };
    if transaction_id.is_empty() {
        return Err(bad(".transactionId", "is required and must be a non-empty string"));
    }
    let partition_id = match f.get("partitionId") {
        Some(v) if wire::kind(v) == Kind::String => parse_uuid(&wire::string(v)?),
        _ => None,
    }
    .ok_or_else(|| bad(".partitionId", "is required and must be a UUID"))?;
    let status = match f.get("status") {
        None => "completed".to_owned(),
        Some(v) => match wire::kind(v) {
            Kind::Null => "completed".to_owned(),
            Kind::String => wire::string(v)?,
            _ => String::new(),
        },
    };
    if !matches!(status.as_str(), "completed" | "failed" | "retry" | "dlq") {
        return Err(bad(".status", "must be one of completed, failed, retry, dlq"));
    }
    let optional = |name: &str| -> Result<Option<String>, EngineError> {
        match f.get(name) {
            None => Ok(None),
            Some(v) => match wire::kind(v) {
                Kind::Null => Ok(None),
                Kind::String => wire::string(v).map(Some),
                _ => Err(bad(&format!(".{name}"), "must be a string")),
            },
        }
    };
    let error = optional("error")?;
    let lease_id = optional("leaseId")?;
    let item_group = optional("consumerGroup")?;
    let consumer_group = item_group
        .filter(|g| !g.is_empty())
        .or_else(|| call_group.filter(|g| !g.is_empty()).map(str::to_owned))
        .unwrap_or_else(|| QUEUE_MODE.to_owned());
    Ok(AckItem { transaction_id, partition_id, status, error, lease_id, consumer_group })
}

/// PostgreSQL's UUID input as the ack checks it: 32 hex digits, each group
/// of `8-4-4-4-12` optionally followed by a dash, any case.
fn parse_uuid(s: &str) -> Option<Uuid> {
    let b = s.as_bytes();
    let mut hex = String::with_capacity(32);
    let mut i = 0;
    for (n, len) in [8usize, 4, 4, 4, 12].into_iter().enumerate() {
        let group = b.get(i..i + len)?;
        if !group.iter().all(u8::is_ascii_hexdigit) {
            return None;
        }
        hex.push_str(std::str::from_utf8(group).ok()?);
        i += len;
        if n < 4 && b.get(i) == Some(&b'-') {
            i += 1;
        }
    }
    if i != b.len() {
        return None;
    }
    u128::from_str_radix(&hex, 16).ok().map(Uuid::from_u128)
}

/// The typed arrays of `queen.ack_rows`.
#[derive(Default)]
pub(crate) struct AckColumns<'a> {
    pub transaction_ids: Vec<&'a str>,
    pub partition_ids: Vec<Uuid>,
    pub statuses: Vec<&'a str>,
    pub errors: Vec<Option<&'a str>>,
    pub lease_ids: Vec<Option<&'a str>>,
    pub groups: Vec<&'a str>,
}

impl<'a> AckColumns<'a> {
    pub(crate) fn of(items: impl IntoIterator<Item = &'a AckItem>) -> Self {
        let mut c = AckColumns::default();
        for a in items {
            c.transaction_ids.push(&a.transaction_id);
            c.partition_ids.push(a.partition_id);
            c.statuses.push(&a.status);
            c.errors.push(a.error.as_deref());
            c.lease_ids.push(a.lease_id.as_deref());
            c.groups.push(&a.consumer_group);
        }
        c
    }

    /// The six arrays, in the order `ack_rows` and every statement over it take them.
    pub(crate) fn params(&self) -> [&(dyn tokio_postgres::types::ToSql + Sync); 6] {
        [
            &self.transaction_ids,
            &self.partition_ids,
            &self.statuses,
            &self.errors,
            &self.lease_ids,
            &self.groups,
        ]
    }
}

/// Ack requests of more items than this run alone: they fill a statement
/// by themselves.
pub(crate) const BATCH_AT_MOST_ITEMS: usize = 64;

// The ack batcher: concurrent acks, one `queen.ack_requests` call, one commit.

/// Acks in one statement.
const MAX_ACK_ITEMS: usize = 1000;

/// Concurrent ack requests: one `queen.ack_requests` call, one commit.
pub(crate) type AckBatcher = Batcher<Vec<AckItem>, Vec<AckResult>>;

pub(crate) fn start_acks(pool: Pool, slots: usize, stats: Arc<BatchStats>) -> AckBatcher {
    let budget =
        Budget { ceiling: [MAX_ACK_ITEMS, usize::MAX], cost: |items: &Vec<AckItem>| [items.len(), 0] };
    Batcher::start(slots, budget, BatchKind::Ack, stats, STALL_AFTER, move |batch| {
        run_acks(pool.clone(), batch)
    })
}

async fn run_acks(pool: Pool, batch: Vec<Waiting<Vec<AckItem>, Vec<AckResult>>>) -> Answered {
    let alone = |items: Vec<AckItem>| {
        let pool = pool.clone();
        async move { ack_call(&pool, &items).await }
    };
    let Some(batch) = unless_alone(batch, &alone).await else { return Answered::Together };
    let requests: Vec<i32> =
        batch.iter().enumerate().flat_map(|(n, w)| std::iter::repeat_n(n as i32, w.request.len())).collect();
    let cols = AckColumns::of(batch.iter().flat_map(|w| w.request.iter()));
    let outcome = ack_many(&pool, &cols, &requests).await.and_then(|columns| {
        let mut rest = columns.answer(batch.iter().flat_map(|w| w.request.iter()))?.into_iter();
        Ok(batch.iter().map(|w| renumbered(rest.by_ref().take(w.request.len()))).collect())
    });
    drop(cols);
    answer_batch(batch, outcome, alone, Rerun::SideBySide).await
}

/// What `queen.ack_rows` answers, per item in order: its verdict, whether
/// its cursor's lease ended, whether it was dead-lettered.
struct AckOutcomes {
    verdicts: Vec<String>,
    released: Vec<bool>,
    dlq: Vec<bool>,
}

impl AckOutcomes {
    fn read(row: &tokio_postgres::Row) -> Result<Self, EngineError> {
        Ok(AckOutcomes { verdicts: row.try_get(0)?, released: row.try_get(1)?, dlq: row.try_get(2)? })
    }

    /// Each item's answer, indexed from 0 across `items`.
    fn answer<'a>(self, items: impl Iterator<Item = &'a AckItem>) -> Result<Vec<AckResult>, EngineError> {
        let items: Vec<&AckItem> = items.collect();
        let n = items.len();
        if self.verdicts.len() != n || self.released.len() != n || self.dlq.len() != n {
            return Err(EngineError::Protocol("an ack answered another number of results than items".into()));
        }
        items
            .into_iter()
            .zip(self.verdicts)
            .zip(self.released.into_iter().zip(self.dlq))
            .enumerate()
            .map(|(index, ((item, verdict), (released, dlq)))| {
                let verdict = AckVerdict::named(&verdict)
                    .ok_or_else(|| EngineError::Protocol(format!("an ack verdict {verdict:?}")))?;
                Ok(AckResult::new(index, item.transaction_id.clone(), verdict, released, dlq))
            })
            .collect()
    }
}

/// A request's answers, indexed from 0 within the request.
fn renumbered(answers: impl Iterator<Item = AckResult>) -> Vec<AckResult> {
    answers.enumerate().map(|(index, a)| AckResult { index, ..a }).collect()
}

/// One `ack_rows` call: one request's acks, answered in order.
pub(crate) async fn ack_call(pool: &Pool, items: &[AckItem]) -> Result<Vec<AckResult>, EngineError> {
    let c = AckColumns::of(items);
    let client = pool.get().await?;
    let stmt = client.prepare_cached(include_str!("../sql/statements/ack.sql")).await?;
    let row = client.query_one(&stmt, &c.params()).await?;
    drop(client);
    AckOutcomes::read(&row)?.answer(items.iter())
}

/// Several requests' acks in one statement: the outcome of every item of
/// the batch, in order.
async fn ack_many(pool: &Pool, c: &AckColumns<'_>, requests: &[i32]) -> Result<AckOutcomes, EngineError> {
    let client = pool.get().await?;
    let stmt = client.prepare_cached(include_str!("../sql/statements/ack_batch.sql")).await?;
    let mut params = c.params().to_vec();
    params.push(&requests);
    let row = client.query_one(&stmt, &params).await?;
    AckOutcomes::read(&row)
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used)]
mod tests {
    use super::*;

    #[test]
    fn uuids_are_read_as_postgresql_reads_them() {
        let u = parse_uuid("01a23c37-da83-70ec-916f-db5e099885d6").unwrap();
        assert_eq!(parse_uuid("01A23C37DA8370EC916FDB5E099885D6"), Some(u));
        assert_eq!(parse_uuid("01a23c37da83-70ec916f-db5e099885d6"), Some(u));
        assert_eq!(parse_uuid("01a23c37-da83-70ec-916f-db5e099885d"), None);
        assert_eq!(parse_uuid("{01a23c37-da83-70ec-916f-db5e099885d6}"), None);
    }

    #[test]
    fn the_first_bad_ack_is_named_and_groups_resolve() {
        let pid = "01a23c37-da83-70ec-916f-db5e099885d6";
        let ok = format!(r#"{{"transactionId":"t","partitionId":"{pid}","consumerGroup":""}}"#);
        let bad = format!(r#"{{"transactionId":"t","partitionId":"{pid}","status":"done"}}"#);
        match decode_ack_items(&format!("[{ok},{bad}]"), None) {
            Err(EngineError::Rejected { body, .. }) => {
                assert!(
                    body.contains("acknowledgments[1].status must be one of completed, failed, retry, dlq")
                )
            }
            other => panic!("{other:?}"),
        }
        let items = decode_ack_items(&format!("[{ok}]"), Some("g")).unwrap();
        assert_eq!(items[0].consumer_group, "g");
        assert_eq!(items[0].status, "completed");
        let items = decode_ack_items(&format!("[{ok}]"), None).unwrap();
        assert_eq!(items[0].consumer_group, QUEUE_MODE);
    }
}
