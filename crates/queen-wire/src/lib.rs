//! The Queen broker's wire types: what a caller sends and what it is
//! answered, as the engine (embedded) and the HTTP API both carry them. No
//! I/O and no rules that need the database: `queen-engine` checks and runs
//! these, `queen-client` sends them over HTTP or to an embedded engine.

#![deny(clippy::unwrap_used, clippy::expect_used)]
#![warn(missing_docs)]

pub mod ack;
pub mod dlq;
pub mod ephemeral;
pub mod groups;
pub mod kv;
pub mod locks;
pub mod pop;
pub mod queues;
pub mod reads;
pub mod timers;

pub use ack::{AckRefused, AckResult, AckVerdict, PushRefused, TxRefusal};
pub use dlq::{DeadLetter, DlqKeysetPage, DlqPage, DlqQuery, ReplayTarget};
pub use ephemeral::EphemeralPop;
pub use groups::{GroupDeleted, PartitionSeeked, Seeked, SubscriptionUpdated};
pub use kv::{
    ops_to_wire, Expect, Expiry, Invalid, KvAnswer, KvOp, KvResult, KvResults, KvRow, PreconditionLost,
};
pub use locks::{LockHolder, LockOp, LockResult};
pub use pop::{LeaseRenewal, PopAnswer, PopRequest, PoppedMessage};
pub use queues::QueueDeleted;
pub use reads::{
    ChangedPartition, ChangedPartitions, FetchAnswer, FetchEntry, Fetched, FetchedRecord, PartitionsChanged,
};
pub use timers::{PendingTimer, TimerPage, TimerPeek, TimerResult};

/// The consumer group name of queue mode: one more cursor per partition.
pub const QUEUE_MODE: &str = "__QUEUE_MODE__";

/// The KV namespace of locks and semaphores.
pub const LOCKS_NAMESPACE: &str = "queen-locks";

/// A JSON document produced by the database, kept as its exact text.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Json(pub String);

impl Json {
    /// The JSON text.
    pub fn as_str(&self) -> &str {
        &self.0
    }

    /// Decodes the document into a typed value.
    pub fn decode<T: serde::de::DeserializeOwned>(&self) -> Result<T, serde_json::Error> {
        serde_json::from_str(&self.0)
    }
}
