//! Dead-letter listings and replays.

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
