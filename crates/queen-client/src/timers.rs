//! Timers (scheduled messages): [`Timers`] schedules, cancels, peeks and
//! lists; [`crate::Tx::schedule_timer`] puts a timer in a transaction
//! bundle, so it commits or rolls back with the pushes, acks and KV writes.

use std::time::Duration;

use base64::Engine as _;
use serde::{Deserialize, Serialize};
use serde_json::json;
use serde_json::value::RawValue;

use crate::broker::Broker;
use crate::client::Queen;
use crate::error::{Error, Result};

pub use queen_wire::TimerResult;

/// When a timer fires: milliseconds from now (negative fires at once).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Delay(pub i64);

impl From<Duration> for Delay {
    fn from(d: Duration) -> Self {
        Delay(i64::try_from(d.as_millis()).unwrap_or(i64::MAX))
    }
}

/// One timer to schedule.
#[derive(Debug, Clone)]
pub struct TimerSpec {
    /// The queue its message goes to.
    pub queue: String,
    /// Its name within the queue.
    pub key: String,
    /// The message payload (JSON).
    pub payload: Box<RawValue>,
    /// When it fires.
    pub delay: Delay,
    /// The partition (`Default` when `None`).
    pub partition: Option<String>,
    /// The fired message's transactionId (minted by the broker when `None`).
    pub txn: Option<String>,
}

impl TimerSpec {
    /// A timer with a serialisable payload.
    pub fn new<T: Serialize + ?Sized>(
        queue: &str,
        key: &str,
        payload: &T,
        delay: impl Into<Delay>,
    ) -> Result<Self> {
        let payload =
            serde_json::value::to_raw_value(payload).map_err(|e| Error::decode("timer payload", e))?;
        Ok(TimerSpec {
            queue: queue.to_owned(),
            key: key.to_owned(),
            payload,
            delay: delay.into(),
            partition: None,
            txn: None,
        })
    }

    /// Fires into this partition.
    pub fn partition(mut self, partition: &str) -> Self {
        self.partition = Some(partition.to_owned());
        self
    }

    /// The fired message's transactionId.
    pub fn txn(mut self, txn: &str) -> Self {
        self.txn = Some(txn.to_owned());
        self
    }

    /// The op as the wire carries it (the payload base64-encoded).
    pub(crate) fn wire(&self) -> serde_json::Value {
        let mut v = json!({
            "op": "schedule", "queue": self.queue, "timerKey": self.key, "delayMs": self.delay.0,
            "payload": base64::engine::general_purpose::STANDARD.encode(self.payload.get()),
        });
        if let Some(p) = &self.partition {
            v["partition"] = json!(p);
        }
        if let Some(t) = &self.txn {
            v["txn"] = json!(t);
        }
        v
    }
}

/// A pending timer, as peek and list show it, and a keyset page of them:
/// the broker's own types.
pub use queen_wire::{PendingTimer, TimerPage};

/// The timer operations of one client.
pub struct Timers<B> {
    queen: Queen<B>,
}

impl<B: Broker> Queen<B> {
    /// Timers (scheduled messages).
    pub fn timers(&self) -> Timers<B> {
        Timers::new(self.clone())
    }
}

impl<B: Broker> Timers<B> {
    fn new(queen: Queen<B>) -> Self {
        Timers { queen }
    }

    /// Schedules (or reschedules: the same upsert) several timers in one call.
    pub async fn schedule_many(&self, specs: &[TimerSpec]) -> Result<Vec<TimerResult>> {
        let body = json!({"operations": specs.iter().map(TimerSpec::wire).collect::<Vec<_>>()}).to_string();
        #[derive(Deserialize)]
        struct Answer {
            results: Vec<TimerResult>,
        }
        let a: Answer = self
            .queen
            .broker()
            .timers(&body)
            .await?
            .decode()
            .map_err(|e| Error::decode("timers answer", e))?;
        Ok(a.results)
    }

    /// Schedules one timer: `scheduled`, or `rescheduled` when the key existed.
    pub async fn schedule(&self, spec: TimerSpec) -> Result<TimerResult> {
        self.schedule_many(std::slice::from_ref(&spec))
            .await?
            .pop()
            .ok_or_else(|| Error::Decode("timers: no result".into()))
    }

    /// Cancels a timer: `cancelled`, `absent` (not pending: maybe fired) or
    /// `too_late` (being fired now).
    pub async fn cancel(&self, queue: &str, key: &str) -> Result<TimerResult> {
        self.queen
            .broker()
            .timer_cancel(queue, key, None)
            .await?
            .decode()
            .map_err(|e| Error::decode("timer cancel answer", e))
    }

    /// The pending timer, or `None`.
    pub async fn peek(&self, queue: &str, key: &str) -> Result<Option<PendingTimer>> {
        let json = self.queen.broker().timer_peek(queue, key).await?;
        #[derive(Deserialize)]
        struct Found {
            found: bool,
        }
        let found: Found = json.decode().map_err(|e| Error::decode("timer peek answer", e))?;
        if !found.found {
            return Ok(None);
        }
        json.decode().map(Some).map_err(|e| Error::decode("timer peek answer", e))
    }

    /// A keyset page of one queue's pending timers.
    pub async fn list(&self, queue: &str, after: Option<&str>, limit: Option<u32>) -> Result<TimerPage> {
        self.queen
            .broker()
            .timer_list(queue, after, limit)
            .await?
            .decode()
            .map_err(|e| Error::decode("timer list answer", e))
    }
}
