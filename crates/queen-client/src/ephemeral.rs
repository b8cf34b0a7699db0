//! Ephemeral queues, typed: [`EphemeralQueue`] pushes, pops, acks and
//! configures a queue held in its owning broker's memory. Fast, bounded,
//! and lost on a broker restart by design: use a durable queue for what
//! must survive.

use std::time::Duration;

use serde::{Deserialize, Serialize};
use serde_json::json;
use serde_json::value::RawValue;

use crate::broker::{Broker, EphemeralVerb};
use crate::client::Queen;
use crate::error::{Error, Result};

pub use queen_wire::EphemeralPop;

/// Options of an ephemeral queue; `None` keeps the broker's default.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct EphemeralOptions {
    /// Payload bytes the queue may hold.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub max_bytes: Option<u64>,
    /// Messages the queue may hold.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub max_length: Option<u64>,
    /// `"reject"` (429 when full) or `"dropOldest"`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub policy: Option<String>,
    /// Undelivered messages older than this are dropped.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub ttl_seconds: Option<u64>,
    /// Lease of a popped message.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub lease_seconds: Option<u64>,
    /// Deliveries before a message is dropped.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub retry_limit: Option<u32>,
}

/// A message popped from an ephemeral queue.
#[derive(Debug, Clone, Deserialize)]
pub struct EphemeralMessage {
    /// Its id (ack with it).
    pub id: String,
    /// Its partition.
    pub partition: String,
    /// The payload as pushed, byte for byte.
    pub payload: Box<RawValue>,
    /// Deliveries so far, this one included.
    pub attempts: u32,
}

impl EphemeralMessage {
    /// The payload decoded.
    pub fn json<T: serde::de::DeserializeOwned>(&self) -> Result<T> {
        serde_json::from_str(self.payload.get()).map_err(|e| Error::decode("ephemeral payload", e))
    }
}

#[derive(Deserialize)]
struct Popped {
    messages: Vec<EphemeralMessage>,
}

#[derive(Deserialize)]
struct Acked {
    results: Vec<AckOutcome>,
}

/// What an ack did: `acked`, `redelivered`, `stale` or `unknown`.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
pub struct AckOutcome {
    /// The message id.
    pub id: String,
    /// The outcome.
    pub outcome: String,
}

/// A handle on one ephemeral queue.
pub struct EphemeralQueue<B> {
    queen: Queen<B>,
    name: String,
    group: Option<String>,
    partition: Option<String>,
}

impl<B> Clone for EphemeralQueue<B> {
    fn clone(&self) -> Self {
        EphemeralQueue {
            queen: self.queen.clone(),
            name: self.name.clone(),
            group: self.group.clone(),
            partition: self.partition.clone(),
        }
    }
}

impl<B: Broker> Queen<B> {
    /// An ephemeral queue: in the owning broker's memory, lost on its restart.
    pub fn ephemeral(&self, name: impl Into<String>) -> EphemeralQueue<B> {
        EphemeralQueue::new(self.clone(), name.into())
    }
}

impl<B: Broker> EphemeralQueue<B> {
    fn new(queen: Queen<B>, name: String) -> Self {
        EphemeralQueue { queen, name, group: None, partition: None }
    }

    /// Pops and acks as this group (each group sees every message; members compete).
    pub fn group(mut self, group: impl Into<String>) -> Self {
        self.group = Some(group.into());
        self
    }

    /// Pushes to and pops from this partition only.
    pub fn partition(mut self, partition: impl Into<String>) -> Self {
        self.partition = Some(partition.into());
        self
    }

    /// Declares the queue's options; answers the broker's `{queue, declared, options}`.
    pub async fn configure(&self, options: &EphemeralOptions) -> Result<serde_json::Value> {
        let body = json!({"queue": self.name, "options": options}).to_string();
        let answer = self.queen.broker().ephemeral(EphemeralVerb::Configure, &body).await?;
        answer.decode().map_err(|e| Error::decode("ephemeral configure", e))
    }

    /// Pushes payloads, all or none; answers how many.
    pub async fn push<T: Serialize>(&self, payloads: &[T]) -> Result<u64> {
        let messages: Vec<serde_json::Value> = payloads
            .iter()
            .map(|p| serde_json::to_value(p).map(|v| json!({"payload": v})))
            .collect::<std::result::Result<_, _>>()
            .map_err(|e| Error::decode("ephemeral payload", e))?;
        let mut body = json!({"queue": self.name, "messages": messages});
        if let Some(p) = &self.partition {
            body["partition"] = json!(p);
        }
        let answer = self.queen.broker().ephemeral(EphemeralVerb::Push, &body.to_string()).await?;
        let v: serde_json::Value = answer.decode().map_err(|e| Error::decode("ephemeral push", e))?;
        Ok(v["pushed"].as_u64().unwrap_or(0))
    }

    /// Pops up to `batch`; `wait` long-polls; `auto_ack` commits at delivery.
    pub async fn pop(
        &self,
        batch: usize,
        wait: Option<Duration>,
        auto_ack: bool,
    ) -> Result<Vec<EphemeralMessage>> {
        let req = EphemeralPop {
            queue: self.name.clone(),
            partition: self.partition.clone(),
            group: self.group.clone(),
            batch: batch.clamp(1, 10_000),
            auto_ack,
            wait,
        };
        let answer = self.queen.broker().ephemeral_pop(&req).await?;
        let popped: Popped = answer.decode().map_err(|e| Error::decode("ephemeral pop", e))?;
        Ok(popped.messages)
    }

    /// Acks messages: `completed` true drops them, false redelivers (until the retry limit).
    pub async fn ack(&self, messages: &[EphemeralMessage], completed: bool) -> Result<Vec<AckOutcome>> {
        let status = if completed { "completed" } else { "failed" };
        let acks: Vec<serde_json::Value> =
            messages.iter().map(|m| json!({"id": m.id, "status": status})).collect();
        let body = json!({"queue": self.name, "group": self.group, "acks": acks}).to_string();
        let answer = self.queen.broker().ephemeral(EphemeralVerb::Ack, &body).await?;
        let acked: Acked = answer.decode().map_err(|e| Error::decode("ephemeral ack", e))?;
        Ok(acked.results)
    }

    /// Drops every message and lease; keeps the options. Answers how many were dropped.
    pub async fn reset(&self) -> Result<u64> {
        let body = json!({"queue": self.name}).to_string();
        let answer = self.queen.broker().ephemeral(EphemeralVerb::Reset, &body).await?;
        let v: serde_json::Value = answer.decode().map_err(|e| Error::decode("ephemeral reset", e))?;
        Ok(v["dropped"].as_u64().unwrap_or(0))
    }

    /// Deletes the queue and its declared options; `false` when there was none.
    pub async fn delete(&self) -> Result<bool> {
        let answer = self.queen.broker().ephemeral_delete(&self.name).await?;
        let v: serde_json::Value = answer.decode().map_err(|e| Error::decode("ephemeral delete", e))?;
        Ok(v["deleted"].as_bool().unwrap_or(false))
    }

    /// The queue's depth (`pending`, `bytes`, per partition and group).
    pub async fn depth(&self) -> Result<serde_json::Value> {
        let answer = self.queen.broker().ephemeral_depth(&self.name).await?;
        answer.decode().map_err(|e| Error::decode("ephemeral depth", e))
    }
}
