//! A pop request, as the pop routes' query string describes it, and what a
//! pop answers.

use serde::{Deserialize, Serialize};
use serde_json::value::RawValue;

/// One pop call, as the query string of the pop routes describes it.
#[derive(Debug, Clone, Default)]
pub struct PopRequest {
    /// The queue to pop from.
    pub queue: String,
    /// Only this partition, or any free partition when `None`.
    pub partition: Option<String>,
    /// The consumer group; `None` is queue mode.
    pub consumer_group: Option<String>,
    /// The message budget of the whole call (a global cap).
    pub batch: i32,
    /// How many partitions the call may claim.
    pub partitions: i32,
    /// Overrides the queue's lease time for this pop.
    pub lease_seconds: Option<i32>,
    /// Commit the cursor at delivery instead of leasing.
    pub auto_ack: bool,
    /// Start position of a group that registers with this pop.
    pub subscription_mode: Option<String>,
    /// `now` or an ISO timestamp, for a group that registers with this pop.
    pub subscription_from: Option<String>,
    /// With `queue` empty: pop from the queues carrying this namespace
    /// (and `task`, when given), higher priority first.
    pub namespace: Option<String>,
    /// With `queue` empty: pop from the queues carrying this task.
    pub task: Option<String>,
}

impl PopRequest {
    /// A pop across the queues of a namespace and/or task, not one queue.
    pub fn is_by_tag(&self) -> bool {
        self.queue.is_empty()
    }
}

/// The answer to a lease extension, as the engine writes it and the SDK
/// reads it: the expiry under three names (2.x clients read `newExpiresAt`,
/// 1.x ones `expiresAt` or `lease_expires_at`), null when nothing was
/// renewed.
#[derive(Debug, Clone, PartialEq, Eq, serde::Deserialize, serde::Serialize)]
pub struct LeaseRenewal {
    /// The lease id, as sent.
    #[serde(rename = "leaseId", default)]
    pub lease_id: String,
    /// Whether any partition was renewed.
    pub success: bool,
    /// How many partitions the lease covers.
    #[serde(default)]
    pub renewed: u32,
    /// The new expiry; `None` when the lease is gone.
    #[serde(rename = "newExpiresAt", default)]
    pub new_expires_at: Option<String>,
    /// The same expiry, as 1.x clients name it.
    #[serde(rename = "expiresAt", default)]
    pub expires_at: Option<String>,
    /// The same expiry, as 1.x clients name it.
    #[serde(default)]
    pub lease_expires_at: Option<String>,
}

impl LeaseRenewal {
    /// The answer for `lease_id`: `renewed` lanes now leased until `expires_at`.
    pub fn new(lease_id: &str, renewed: u32, expires_at: Option<String>) -> Self {
        LeaseRenewal {
            lease_id: lease_id.to_owned(),
            success: renewed > 0,
            renewed,
            new_expires_at: expires_at.clone(),
            expires_at: expires_at.clone(),
            lease_expires_at: expires_at,
        }
    }
}

/// What a pop that delivered answers (200): the first lane claimed, the
/// lease, and every message in delivery order, lane after lane. Written by
/// the engine alone (the SQL answers its columns).
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct PopAnswer {
    /// Always true (an empty pop answers 204 without a body).
    pub success: bool,
    /// The queue's name.
    pub queue: String,
    /// The first partition claimed.
    pub partition: String,
    /// The first partition's id.
    pub partition_id: String,
    /// The lease every claimed lane is held under; empty with auto-ack.
    pub lease_id: String,
    /// The consumer group, [`crate::QUEUE_MODE`] in queue mode.
    pub consumer_group: String,
    /// The messages, in offset order within each lane.
    pub messages: Vec<PoppedMessage>,
    /// How many partitions the pop claimed.
    pub partitions_claimed: usize,
}

/// One delivered message: its own fields, and its lane's and lease's, which
/// an ack sends back.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct PoppedMessage {
    /// The message id.
    pub id: String,
    /// The producer's transaction id (the dedup and ack key).
    pub transaction_id: String,
    /// The trace id, if the producer set one.
    pub trace_id: Option<String>,
    /// The payload as the producer sent it.
    pub data: Box<RawValue>,
    /// The authenticated producer, when the push carried one.
    pub producer_sub: Option<String>,
    /// When the message was pushed (RFC 3339 UTC, microseconds).
    pub created_at: String,
    /// The partition's id.
    pub partition_id: String,
    /// The partition's name.
    pub partition: String,
    /// The queue's name.
    pub queue: String,
    /// The lease it was delivered under; empty with auto-ack.
    pub lease_id: String,
    /// The consumer group, [`crate::QUEUE_MODE`] in queue mode.
    pub consumer_group: String,
}
