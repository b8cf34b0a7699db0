//! Timers.

use serde::{Deserialize, Serialize};

/// The answer to one timer op, as the engine writes it (in a timers call,
/// and inside a transaction's results) and the SDK reads it. `queue`,
/// `timerKey` and `txn` are written even when null; `messageId` and
/// `deliverAt` only when a schedule set them.
#[derive(Debug, Clone, Deserialize, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct TimerResult {
    /// Whether the op applied.
    pub ok: bool,
    /// `scheduled`, `rescheduled`, `cancelled`, `absent` or `too_late`.
    pub status: String,
    /// The timer's queue.
    pub queue: Option<String>,
    /// The timer's key.
    pub timer_key: Option<String>,
    /// The fired message's transactionId.
    pub txn: Option<String>,
    /// The id the fired message will have.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub message_id: Option<String>,
    /// When it fires (fixed-width UTC).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub deliver_at: Option<String>,
}
