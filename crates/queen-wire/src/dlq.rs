//! Dead-letter listings and replays.

use serde::{Deserialize, Serialize};
use serde_json::value::RawValue;

/// Filters of the DLQ listing.
#[derive(Debug, Clone, Default)]
pub struct DlqQuery {
    /// Queue name.
    pub queue: Option<String>,
    /// Consumer group.
    pub consumer_group: Option<String>,
    /// Partition name.
    pub partition: Option<String>,
    /// Failed at or after (ISO).
    pub from: Option<String>,
    /// Failed at or before (ISO).
    pub to: Option<String>,
    /// Page size.
    pub limit: i32,
    /// Rows to skip.
    pub offset: i32,
}

/// Where a replayed dead letter goes: its own lane unless a queue or a
/// partition is named (the partition defaults to the record's own name).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ReplayTarget {
    /// Destination queue (created by the push if missing).
    pub queue: Option<String>,
    /// Destination partition (created by the push if missing).
    pub partition: Option<String>,
}

/// A dead letter, as the engine writes it (the listing and the dashboard's
/// page) and the SDK reads it. Every field is written, null or not.
#[derive(Debug, Clone, Deserialize, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct DeadLetter {
    /// The record's id: what a replay takes. One per (message, consumer
    /// group) that dead-lettered it.
    #[serde(default)]
    pub dlq_id: Option<i64>,
    /// The message id.
    #[serde(default)]
    pub id: Option<String>,
    /// The payload.
    pub data: Box<RawValue>,
    /// The nack's error text (or "Retries exhausted").
    #[serde(default)]
    pub error_message: Option<String>,
    /// The transaction id.
    pub transaction_id: String,
    /// The trace id, when the push had one.
    #[serde(default)]
    pub trace_id: Option<String>,
    /// The partition id.
    #[serde(default)]
    pub partition_id: Option<String>,
    /// Who pushed it (the producer's JWT sub), when known.
    #[serde(default)]
    pub producer_sub: Option<String>,
    /// The queue.
    #[serde(default)]
    pub queue: String,
    /// The partition name.
    #[serde(default)]
    pub partition: Option<String>,
    /// The consumer group that dead-lettered it.
    #[serde(default)]
    pub consumer_group: Option<String>,
    /// Retries charged before it was dead-lettered.
    #[serde(default)]
    pub retry_count: i64,
    /// When it was pushed.
    #[serde(default)]
    pub created_at: Option<String>,
    /// When it was dead-lettered.
    #[serde(default)]
    pub failed_at: Option<String>,
}

/// A page of the DLQ listing (`GET /api/v1/dlq`).
#[derive(Debug, Clone, Deserialize, Serialize)]
pub struct DlqPage {
    /// Dead letters, newest failure first.
    pub messages: Vec<DeadLetter>,
    /// How many match the filter in all.
    pub total: u64,
}

/// A keyset page of dead letters, newest record first (the dashboard's).
#[derive(Debug, Clone, Deserialize, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct DlqKeysetPage {
    /// Dead letters, newest record first.
    pub messages: Vec<DeadLetter>,
    /// The record id the next page starts before; `None` on the last page.
    pub next_before: Option<i64>,
    /// Dead letters of the queue (or of all queues) in all.
    pub total: u64,
}
