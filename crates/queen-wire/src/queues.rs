//! Queue administration answers.

use serde::{Deserialize, Serialize};

/// `DELETE /api/v1/resources/queues/:queue`: a missing queue answers
/// `deleted: false`, since SDKs delete before create as a cleanup idiom.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct QueueDeleted {
    /// Whether a queue was deleted.
    pub deleted: bool,
    /// The queue's name.
    #[serde(default)]
    pub queue: String,
    /// Whether the queue existed (the same as `deleted`).
    #[serde(default)]
    pub existed: bool,
}

impl QueueDeleted {
    /// The answer for `queue`, which `existed` or not.
    pub fn new(queue: &str, existed: bool) -> Self {
        QueueDeleted { deleted: existed, queue: queue.to_owned(), existed }
    }
}
