//! The Queen broker engine: the embedded API.
//!
//! Every operation is one call to one SQL function (see `sql/functions`), so
//! one operation is one round trip and every rule is enforced once, in the
//! database. The functions answer with the wire JSON; this crate hands it on
//! as [`Json`] without re-encoding it, so payload numbers keep every digit.
//!
//! This crate must not hold state that correctness depends on: several
//! engines (in several processes) may serve one database. The only memory it
//! keeps is the set of long-poll waiters, which a missed wake-up merely
//! delays (the waiters poll as a fallback).

#![deny(clippy::unwrap_used, clippy::expect_used)]
#![warn(missing_docs)]

mod ack;
mod admin;
mod batch;
mod config;
mod db;
mod dlq;
mod engine;
mod ephemeral;
mod error;
mod fill_wait;
mod groups;
mod kv;
mod locks;
mod maintenance;
mod migrate;
mod notifier;
mod outage;
mod pg_tls;
mod pop;
mod push;
mod reads;
mod registry;
mod sealing;
mod spool;
mod streams;
mod timers;
mod transaction;
mod wire;

pub use ack::{decode_ack_items, AckItem};
pub use admin::QueueDepth;
pub use batch::{BatchKind, BatchSizes, BATCH_SIZE_BOUNDS};
pub use config::{DbConfig, DEFAULT_LOCK_TIMEOUT, DEFAULT_STATEMENT_TIMEOUT};
pub use dlq::DlqQuery;
pub use dlq::{decode_replay_target, parse_dlq_id, ReplayTarget};
pub use engine::{Engine, EngineOptions};
pub use ephemeral::{EphemeralConfig, EphemeralPop, BROKER_BYTES as EPHEMERAL_BROKER_BYTES};
pub use error::{CycleRefusal, EngineError};
pub use groups::{SubscriptionMode, QUEUE_MODE};
pub use kv::browse::{decode_kv_list, KvListRequest, KV_LIST_DEFAULT_LIMIT, KV_LIST_MAX_LIMIT};
pub use kv::{
    ops_to_wire, Expect, Expiry, KvAnswer, KvOp, KvOutcome, KvResult, KvResults, KvRow, PreconditionLost,
};
pub use locks::{LockHolder, LockOp, LockResult, LOCKS_NAMESPACE, MAX_LIMIT as MAX_LOCK_LIMIT};
pub use maintenance::retention::RetentionStatsSnapshot;
pub use migrate::{migrate, schema_digest, MIGRATIONS};
pub use pg_tls::{split_tls_options, SslMode, TlsOptions};
pub use pop::PopRequest;
pub use push::{decode_push_items, PushItem, DEFAULT_PARTITION};
pub use reads::{ChangedEntry, FetchEntry, Fetched, FetchedRecord, MAX_CHANGED_PAGE, MAX_FETCH_ENTRIES};
pub use registry::{
    process_rss_bytes, TrafficMinute, TrafficTotals, STALE_AFTER_SECONDS as BROKER_STALE_AFTER_SECONDS,
};
pub use sealing::{rotate, BadKey, EncryptionKey, RotateReport, SEALED_TABLES};
pub use spool::{SpoolError, SpoolOptions};
pub use streams::{
    decode_cycle, decode_registration, decode_state_read, Cycle, CycleAck, StateRead, StreamRegistration,
    MAX_STATE_KEY_BYTES,
};
pub use timers::{
    Fired, TimerOp, TimerResult, TimerStatsSnapshot, DEFAULT_TIMER_HORIZON, FIRE_LAG_BOUNDS_MS,
    MAX_TIMER_PAYLOAD_BYTES,
};
pub use transaction::{decode_bundle, Bundle};

pub use queen_wire::Json;
