//! Timers.

use serde::Deserialize;

/// The answer to one timer op.
#[derive(Debug, Clone, Deserialize)]
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
    pub message_id: Option<String>,
    /// When it fires (fixed-width UTC).
    pub deliver_at: Option<String>,
}
