//! Ephemeral queues.

use std::time::Duration;

/// A pop request.
#[derive(Debug, Clone)]
pub struct EphemeralPop {
    /// The queue.
    pub queue: String,
    /// Only this partition (all, in name order, otherwise).
    pub partition: Option<String>,
    /// The group (queue mode otherwise).
    pub group: Option<String>,
    /// At most this many messages.
    pub batch: usize,
    /// Commit at delivery: no lease, nothing to ack.
    pub auto_ack: bool,
    /// Long-poll up to this long (`None`: answer at once).
    pub wait: Option<Duration>,
}
