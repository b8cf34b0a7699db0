//! The Rust SDK of Queen: a typed client over a [`Broker`], which is either
//! the HTTP API ([`HttpBroker`]) or, with the `embedded` feature, the engine
//! in this process (`EmbeddedBroker`, no HTTP, the same SQL). The request
//! and answer types are `queen-wire`'s, shared with the engine.
//!
//! ```no_run
//! # async fn demo() -> queen_client::Result<()> {
//! use queen_client::{Expiry, Queen, TxOutcome};
//!
//! let queen = Queen::connect("http://127.0.0.1:6632")?;
//! let orders = queen.queue("orders");
//! orders.push(&serde_json::json!({"order": 9137})).await?;
//! for msg in orders.pop().batch(10).fetch().await? {
//!     let key = format!("charge:{}", msg.transaction_id);
//!     match queen.tx().once("charges", &key, Expiry::secs(86_400)?).ack(&msg).commit().await? {
//!         TxOutcome::Committed { .. } => {}
//!         // Done before: nothing committed, so take the message off separately.
//!         TxOutcome::PreconditionLost { .. } => {
//!             queen.ack(&msg).await?;
//!         }
//!     }
//! }
//! # Ok(()) }
//! ```
//!
//! What this crate must not do:
//! - decide what input is valid beyond what the types already rule out
//!   (an expiry is required, `expect` is typed): every rule is the broker's,
//!   and its refusals come back as [`Error::Status`] with its code;
//! - turn a verdict into an error: an absent key, a write that did not
//!   apply and a lost `required` precondition are values, never `Err`;
//! - retry anything but a connection error or a 5xx: never a 4xx, never a
//!   200, whatever its body says;
//! - pass numbers through `f64`: payloads and KV values are raw JSON text,
//!   and a counter past `i64` is [`Error::Precision`], never a rounded number;
//! - hold state that correctness depends on: leases, cursors and KV values
//!   live in the broker; the only memory is a push buffer the caller flushes.
//!
//! # Module layering
//!
//! Each module imports only modules listed before it here, so no two
//! modules import each other:
//!
//! 1. `error`, then `message`: plain types;
//! 2. `broker` (the [`Broker`] trait), then `http` ([`HttpBroker`]) and `embedded`;
//! 3. `kv` ([`Kv`], over a broker), then `state` ([`State`], over [`Kv`]);
//! 4. `client`: the handles [`Queen`], [`Queue`] and [`Pop`];
//! 5. the features built on the handles: `buffer`, `consume`, `ephemeral`,
//!    `groups`, `locks`, `reads`, `timers`, then `tx` (which fences with a
//!    lock [`Permit`] and carries [`TimerSpec`]s).
//!
//! The constructor of a feature ([`Queen::tx`], [`Queue::consume`],
//! [`Queue::buffered`], [`Queen::locks`], …) is an `impl Queen` / `impl Queue`
//! block in the feature's own module, not in `client`: the handles never
//! import the features built on them, and a feature can be read, changed
//! or added without touching the handles.

#![deny(clippy::unwrap_used, clippy::expect_used)]
#![warn(missing_docs)]

mod broker;
mod buffer;
mod client;
mod consume;
#[cfg(feature = "embedded")]
mod embedded;
mod ephemeral;
mod error;
mod groups;
mod http;
mod kv;
mod locks;
mod message;
mod reads;
mod state;
mod timers;
mod tx;

pub use broker::{Broker, EphemeralVerb, Seek, StreamVerb};
pub use buffer::{Buffer, BufferOptions};
pub use client::{Pop, Queen, Queue, QueueOptions, Subscription, DEFAULT_STATE_NS};
pub use consume::{ConsumeStats, Consumer, HandlerError, StopSignal};
#[cfg(feature = "embedded")]
pub use embedded::EmbeddedBroker;
pub use ephemeral::{AckOutcome, EphemeralMessage, EphemeralOptions, EphemeralPop, EphemeralQueue};
pub use error::{Error, Result};
pub use groups::{ConsumerGroup, GroupDeleted, GroupPartition, PartitionSeeked, Seeked, SubscriptionUpdated};
pub use http::{HttpBroker, HttpConfig, RetryPolicy};
pub use kv::{
    parse_i64, BatchOutcome, Counter, Entry, Expect, Expiry, Incr, KeyEntry, KeyPage, Kv, KvBatch, KvResult,
    ListPage, ListedKey, Many, NamespaceCount, Page, Pages, Reason, Write,
};
pub use locks::{LockHolder, LockOp, LockResult, Locks, Permit, LOCKS_NAMESPACE};
pub use message::{
    state_key, Ack, AckResult, AckStatus, DeadLetter, DlqPage, DlqReplay, LeaseRenewal, Message, PushItem,
    PushResult, PushStatus, ReplayResult, QUEUE_MODE,
};
pub use reads::{ChangedPage, ChangedPartition, FetchEntry, Fetched, FetchedRecord, Reads};
pub use state::State;
pub use timers::{Delay, PendingTimer, TimerPage, TimerResult, TimerSpec, Timers};
pub use tx::{Tx, TxKv, TxOutcome, TxQueue, TxResult};

/// Engine types the [`Broker`] trait speaks.
#[cfg(feature = "embedded")]
pub use queen_engine::{DbConfig, EngineOptions};
pub use queen_wire::{DlqQuery, Json, PopRequest, ReplayTarget};
