//! The consumer-group administration answers: a group deleted, its
//! subscription moved, its cursors sought. The engine writes them; the SDK
//! reads them.

use serde::{Deserialize, Serialize};

/// `DELETE /api/v1/consumer-groups/:group[/queues/:queue]`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct GroupDeleted {
    /// Always true: an unknown group deletes nothing, successfully.
    #[serde(default)]
    pub success: bool,
    /// The group.
    #[serde(default)]
    pub consumer_group: String,
    /// The queue, or `None` for every queue.
    #[serde(default)]
    pub queue_name: Option<String>,
    /// Cursors removed.
    #[serde(default)]
    pub deleted_partitions: u64,
    /// Whether a registration was removed.
    #[serde(default)]
    pub metadata_deleted: bool,
}

/// `POST /api/v1/consumer-groups/:group/subscription`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct SubscriptionUpdated {
    /// Always true.
    #[serde(default)]
    pub success: bool,
    /// The group.
    #[serde(default)]
    pub consumer_group: String,
    /// The new start time, in the broker's timestamp format.
    #[serde(default)]
    pub new_timestamp: Option<String>,
    /// Registrations updated (one per queue the group consumes; 0 for an unknown group).
    #[serde(default)]
    pub rows_updated: u64,
}

/// `POST /api/v1/consumer-groups/:group/queues/:queue/seek`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Seeked {
    /// Always true.
    #[serde(default)]
    pub success: bool,
    /// The group.
    #[serde(default)]
    pub consumer_group: String,
    /// The queue.
    #[serde(default)]
    pub queue_name: String,
    /// Whether the cursors went to the end.
    #[serde(default)]
    pub seek_to_end: bool,
    /// The time sought to, in the broker's timestamp format (`None` for the end).
    #[serde(default)]
    pub target_timestamp: Option<String>,
    /// Cursors moved (0 when the group has none on the queue).
    #[serde(default)]
    pub partitions_updated: u64,
}

/// `POST .../queues/:queue/partitions/:partition/seek`: Queen's shape, and
/// the queue-level fields.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct PartitionSeeked {
    /// Always true.
    #[serde(default)]
    pub success: bool,
    /// The group.
    #[serde(default)]
    pub consumer_group: String,
    /// The queue.
    #[serde(default)]
    pub queue_name: String,
    /// The partition sought on.
    #[serde(default)]
    pub partition_name: String,
    /// Whether the group's cursor there moved (`false`: the group has none
    /// on the partition yet).
    #[serde(default)]
    pub updated: bool,
    /// The id of the last message the group is now past (`None` when it is
    /// before every stored message, or did not move).
    #[serde(default)]
    pub cursor_moved_to: Option<String>,
    /// Whether the cursor went to the end.
    #[serde(default)]
    pub seek_to_end: bool,
    /// The time sought to, in the broker's timestamp format (`None` for the end).
    #[serde(default)]
    pub target_timestamp: Option<String>,
    /// Cursors moved: 1, or 0 when the group has none there.
    #[serde(default)]
    pub partitions_updated: u64,
}
