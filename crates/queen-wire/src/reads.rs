//! Reads by offset.

use serde::{Deserialize, Serialize};
use serde_json::value::RawValue;

/// One partition to read from `offset` on.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FetchEntry {
    /// The queue.
    pub queue: String,
    /// The partition (`Default` when the wire leaves it out).
    pub partition: String,
    /// The first offset to read.
    pub offset: i64,
    /// Byte budget of this entry's records (payload text and transaction id).
    pub max_bytes: Option<i64>,
}

/// One record read by offset.
#[derive(Debug, Clone, Deserialize, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct FetchedRecord {
    /// Its offset in the partition.
    pub offset: i64,
    /// The transaction id it was pushed with.
    pub transaction_id: String,
    /// The payload, as pushed.
    pub payload: Box<RawValue>,
    /// When it was pushed.
    pub ts: String,
}

/// What one fetch entry read, as the engine writes it (`error` only when
/// set, first) and the SDK reads it.
#[derive(Debug, Clone, Deserialize, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Fetched {
    /// `OFFSET_OUT_OF_RANGE` or `UNKNOWN_TOPIC_OR_PARTITION`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
    /// The next offset the partition will assign.
    pub high_watermark: i64,
    /// The oldest offset still kept.
    pub log_start_offset: i64,
    /// Records from the asked offset on, in offset order.
    pub records: Vec<FetchedRecord>,
}

/// A fetch call's answer: one entry per entry asked, in order.
#[derive(Debug, Clone, Deserialize, Serialize)]
pub struct FetchAnswer {
    /// What each entry read.
    pub entries: Vec<Fetched>,
}

/// One partition of a partitions/changed page.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct ChangedPartition {
    /// The partition's name.
    pub name: String,
    /// Its id.
    pub id: String,
    /// The last offset it assigned (-1 when none).
    pub last_offset: i64,
    /// The oldest offset it keeps.
    pub log_start: i64,
    /// When it was last pushed to.
    pub last_write_at: Option<String>,
}

/// One entry's page of partitions/changed.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize, Serialize)]
pub struct ChangedPartitions {
    /// `UNKNOWN_TOPIC_OR_PARTITION` for a queue that does not exist.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
    /// The partitions of this page, in creation order.
    #[serde(default)]
    pub partitions: Vec<ChangedPartition>,
    /// The `after` of the next page, when there is one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub next: Option<String>,
}

/// A partitions/changed call's answer: one page per entry asked, in order.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct PartitionsChanged {
    /// The broker's time up to which every write is counted: the next `since`.
    pub safe_time: String,
    /// Each entry's page.
    pub entries: Vec<ChangedPartitions>,
}
