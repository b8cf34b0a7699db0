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

impl TimerResult {
    /// The element of an op on `queue`/`key` that ended in `status`: applied
    /// when `scheduled`, `rescheduled` or `cancelled`.
    pub fn new(
        status: String,
        queue: &str,
        key: &str,
        txn: Option<String>,
        message_id: Option<String>,
        deliver_at: Option<String>,
    ) -> Self {
        TimerResult {
            ok: matches!(status.as_str(), "scheduled" | "rescheduled" | "cancelled"),
            status,
            queue: Some(queue.to_owned()),
            timer_key: Some(key.to_owned()),
            txn,
            message_id,
            deliver_at,
        }
    }
}

/// A pending timer, as peek and list show it.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct PendingTimer {
    /// Its queue.
    pub queue: String,
    /// Its key.
    pub timer_key: String,
    /// The partition it fires into.
    pub partition: String,
    /// The fired message's transactionId.
    pub txn: String,
    /// The fired message's id.
    pub message_id: String,
    /// When it fires.
    pub deliver_at: String,
    /// Fires that could not push (a full queue).
    pub attempts: i64,
    /// Why the last fire could not push.
    #[serde(default)]
    pub last_error: Option<String>,
    /// When it was first scheduled.
    #[serde(default)]
    pub created_at: String,
    /// When it was last scheduled or tried.
    #[serde(default)]
    pub updated_at: String,
    /// The payload (peek only).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub payload: Option<Box<serde_json::value::RawValue>>,
}

/// A timer peek's answer: `{"found": false}`, or the timer with its payload.
#[derive(Debug, Clone, Serialize)]
pub struct TimerPeek {
    /// Whether the timer is pending.
    pub found: bool,
    /// Always false when found: the payload is answered opened.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub encrypted: Option<bool>,
    /// The timer.
    #[serde(flatten)]
    pub timer: Option<PendingTimer>,
}

impl TimerPeek {
    /// The answer for `timer`, pending or not.
    pub fn of(timer: Option<PendingTimer>) -> Self {
        TimerPeek { found: timer.is_some(), encrypted: timer.as_ref().map(|_| false), timer }
    }
}

/// A keyset page of pending timers.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct TimerPage {
    /// The timers, in key order.
    pub rows: Vec<PendingTimer>,
    /// More rows follow.
    pub truncated: bool,
    /// The `after` of the next page.
    pub next_after: Option<String>,
}

impl TimerPage {
    /// The page of `rows`, read with one row more than `limit` when more
    /// follow: truncated then, and the next page starts after its last key.
    pub fn of(mut rows: Vec<PendingTimer>, limit: usize) -> Self {
        let truncated = rows.len() > limit;
        rows.truncate(limit);
        let next_after = if truncated { rows.last().map(|t| t.timer_key.clone()) } else { None };
        TimerPage { rows, truncated, next_after }
    }
}
