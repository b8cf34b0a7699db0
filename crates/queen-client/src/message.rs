//! Messages, pushes and acks: the typed shapes of the queue wire.

use serde::{Deserialize, Serialize};
use serde_json::value::RawValue;

use crate::error::{Error, Result};

/// The consumer group name of queue mode (no group).
pub const QUEUE_MODE: &str = queen_wire::QUEUE_MODE;

/// Serialises any value to raw JSON text, keeping a [`RawValue`]'s digits.
pub(crate) fn to_raw<T: Serialize + ?Sized>(value: &T) -> Result<Box<RawValue>> {
    serde_json::value::to_raw_value(value).map_err(|e| Error::decode("encoding a value", e))
}

/// A message delivered by a pop.
#[derive(Debug, Clone, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Message {
    /// The message id (a UUIDv7 minted by the broker).
    pub id: String,
    /// The producer's transaction id (the dedup and ack key).
    pub transaction_id: String,
    /// The partition's id; acks need it.
    pub partition_id: String,
    /// The partition's name.
    #[serde(default)]
    pub partition: String,
    /// The queue's name.
    #[serde(default)]
    pub queue: String,
    /// The lease this message was delivered under; `None` with auto-ack.
    #[serde(default, deserialize_with = "empty_is_none")]
    pub lease_id: Option<String>,
    /// The consumer group, [`QUEUE_MODE`] in queue mode.
    #[serde(default = "queue_mode")]
    pub consumer_group: String,
    /// The payload, as the producer sent it (`null` is a legal payload).
    pub data: Box<RawValue>,
    /// When the message was pushed (RFC 3339 UTC).
    pub created_at: String,
    /// The trace id, if the producer set one.
    #[serde(default)]
    pub trace_id: Option<String>,
}

fn queue_mode() -> String {
    QUEUE_MODE.to_owned()
}

fn empty_is_none<'de, D: serde::Deserializer<'de>>(d: D) -> std::result::Result<Option<String>, D::Error> {
    Ok(Option::<String>::deserialize(d)?.filter(|s| !s.is_empty()))
}

impl Message {
    /// Decodes the payload into `T`.
    pub fn json<T: serde::de::DeserializeOwned>(&self) -> Result<T> {
        serde_json::from_str(self.data.get()).map_err(|e| Error::decode("message payload", e))
    }

    /// The consumer group, `None` in queue mode.
    pub fn group(&self) -> Option<&str> {
        (self.consumer_group != QUEUE_MODE).then_some(self.consumer_group.as_str())
    }

    /// The KV key of state `name` of this message's lane:
    /// `@p/<queue>/<partition>/<group>/<name>` (group `__QUEUE_MODE__` in queue mode).
    ///
    /// The key derives from the partition, so the lane serialises every
    /// reader and writer of it inside one consumer group.
    pub fn state_key(&self, name: &str) -> String {
        state_key(&self.queue, &self.partition, &self.consumer_group, name)
    }
}

/// The state-handle key derivation: `@p/<queue>/<partition>/<group>/<name>`.
pub fn state_key(queue: &str, partition: &str, group: &str, name: &str) -> String {
    format!("@p/{queue}/{partition}/{group}/{name}")
}

/// The wire shape of a pop answer.
#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
pub(crate) struct PopAnswer {
    #[serde(default)]
    pub queue: String,
    #[serde(default)]
    pub messages: Vec<Message>,
}

impl PopAnswer {
    pub(crate) fn into_messages(self) -> Vec<Message> {
        let queue = self.queue;
        self.messages
            .into_iter()
            .map(|mut m| {
                if m.queue.is_empty() {
                    m.queue.clone_from(&queue);
                }
                m
            })
            .collect()
    }
}

/// How a message is settled.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum AckStatus {
    /// Done; commits the cursor past it.
    Completed,
    /// Failed; charges the retry budget and redelivers (or dead-letters).
    Failed,
    /// Redeliver without charging the retry budget.
    Retry,
    /// Dead-letter at once.
    Dlq,
}

impl AckStatus {
    /// The wire name.
    pub fn as_str(self) -> &'static str {
        match self {
            AckStatus::Completed => "completed",
            AckStatus::Failed => "failed",
            AckStatus::Retry => "retry",
            AckStatus::Dlq => "dlq",
        }
    }
}

/// One item of a batch ack.
#[derive(Debug, Clone, Copy)]
pub struct Ack<'a> {
    /// The message.
    pub message: &'a Message,
    /// How to settle it.
    pub status: AckStatus,
    /// The error text (recorded in the DLQ for a nack).
    pub error: Option<&'a str>,
}

impl<'a> Ack<'a> {
    /// A completed ack.
    pub fn completed(message: &'a Message) -> Self {
        Ack { message, status: AckStatus::Completed, error: None }
    }

    /// A nack (`failed`) with its error text.
    pub fn failed(message: &'a Message, error: &'a str) -> Self {
        Ack { message, status: AckStatus::Failed, error: Some(error) }
    }
}

/// The wire form of one acknowledgment.
#[derive(Serialize)]
#[serde(rename_all = "camelCase")]
pub(crate) struct AckWire<'a> {
    pub transaction_id: &'a str,
    pub partition_id: &'a str,
    pub status: &'static str,
    pub error: Option<&'a str>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub lease_id: Option<&'a str>,
    pub consumer_group: Option<&'a str>,
}

impl<'a> From<&Ack<'a>> for AckWire<'a> {
    fn from(a: &Ack<'a>) -> Self {
        AckWire {
            transaction_id: &a.message.transaction_id,
            partition_id: &a.message.partition_id,
            status: a.status.as_str(),
            error: a.error,
            lease_id: a.message.lease_id.as_deref(),
            consumer_group: a.message.group(),
        }
    }
}

pub use queen_wire::AckResult;

/// A message to push.
#[derive(Debug, Clone)]
pub struct PushItem {
    /// The payload.
    pub payload: Box<RawValue>,
    /// The dedup key; a UUID is minted when `None`.
    pub transaction_id: Option<String>,
    /// The partition; the queue handle's (or `Default`) when `None`.
    pub partition: Option<String>,
    /// An optional trace id (a UUID).
    pub trace_id: Option<String>,
}

impl PushItem {
    /// An item with a payload serialised from `payload`.
    pub fn new<T: Serialize + ?Sized>(payload: &T) -> Result<Self> {
        Ok(PushItem::raw(to_raw(payload)?))
    }

    /// An item with a raw JSON payload, kept byte for byte.
    pub fn raw(payload: Box<RawValue>) -> Self {
        PushItem { payload, transaction_id: None, partition: None, trace_id: None }
    }

    /// Sets the transaction id (the dedup key).
    pub fn transaction_id(mut self, id: impl Into<String>) -> Self {
        self.transaction_id = Some(id.into());
        self
    }

    /// Sets the partition.
    pub fn partition(mut self, partition: impl Into<String>) -> Self {
        self.partition = Some(partition.into());
        self
    }

    /// Sets the trace id.
    pub fn trace_id(mut self, id: impl Into<String>) -> Self {
        self.trace_id = Some(id.into());
        self
    }

    pub(crate) fn wire<'a>(&'a self, queue: &'a str, partition: Option<&'a str>) -> PushWire<'a> {
        PushWire {
            queue,
            partition: self.partition.as_deref().or(partition),
            payload: &self.payload,
            transaction_id: self.transaction_id.clone().unwrap_or_else(|| uuid::Uuid::new_v4().to_string()),
            trace_id: self.trace_id.as_deref(),
        }
    }
}

/// The wire form of one pushed item.
#[derive(Serialize)]
#[serde(rename_all = "camelCase")]
pub(crate) struct PushWire<'a> {
    pub queue: &'a str,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub partition: Option<&'a str>,
    pub payload: &'a RawValue,
    pub transaction_id: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub trace_id: Option<&'a str>,
}

/// What the broker did with a pushed item.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum PushStatus {
    /// Stored.
    Queued,
    /// A duplicate inside the dedup window; `message_id` is the original's.
    Duplicate,
    /// Accepted into a broker-side buffer.
    Buffered,
    /// Not stored; see `error`.
    Failed,
}

/// The broker's answer for one pushed item.
#[derive(Debug, Clone, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct PushResult {
    /// Position in the push.
    #[serde(default)]
    pub index: usize,
    /// The message id (the original one for a duplicate).
    #[serde(rename = "message_id", default)]
    pub message_id: Option<String>,
    /// The transaction id of the item.
    #[serde(rename = "transaction_id")]
    pub transaction_id: String,
    /// The queue.
    #[serde(rename = "queueName", default)]
    pub queue: String,
    /// The verdict.
    pub status: PushStatus,
    /// Why it failed.
    #[serde(default)]
    pub error: Option<String>,
}

pub use queen_wire::LeaseRenewal;

pub use queen_wire::DeadLetter;

/// What a dead-letter replay did.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "camelCase")]
pub enum ReplayResult {
    /// Pushed, and the record removed.
    Moved,
    /// The destination holds a message with its transaction id already:
    /// nothing written, the record kept.
    Duplicate,
}

/// The answer of a dead-letter replay.
#[derive(Debug, Clone, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct DlqReplay {
    /// Moved or duplicate.
    pub result: ReplayResult,
    /// The group whose record it was.
    pub consumer_group: String,
    /// The record replayed.
    pub dlq_id: i64,
    /// The dead letter's own transaction id.
    pub original_transaction_id: String,
    /// The transaction id it was pushed with: `dlq:<dlq_id>`.
    pub replayed_as: String,
    /// Destination queue.
    pub queue: String,
    /// Destination partition.
    pub partition: String,
    /// The new message's id (or the earlier one's, for a duplicate).
    #[serde(default)]
    pub message_id: Option<String>,
}

pub use queen_wire::DlqPage;
