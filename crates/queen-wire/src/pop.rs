//! A pop request, as the pop routes' query string describes it.

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
