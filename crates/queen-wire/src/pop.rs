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
