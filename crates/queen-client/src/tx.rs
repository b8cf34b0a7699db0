//! Transactions: acks, pushes and KV ops in one commit (kv.md "Inside a
//! transaction", queen2-wire.md section 2).
//!
//! The KV handle of a transaction ([`TxKv`]) has no `get_prefix`: unbounded
//! read work under the transaction's locks is not expressible.

use std::num::NonZeroU64;

use queen_wire::KvOp;
use serde::{Deserialize, Serialize};
use serde_json::value::RawValue;

use crate::broker::Broker;
use crate::client::Queen;
use crate::error::{Error, Result};
use crate::kv::{ops, some_raw, Expect, Expiry, Incr, KvResult, RawResult, Reason, TypedResult};
use crate::locks::{Permit, LOCKS_NAMESPACE};
use crate::message::{AckStatus, Message, PushItem};
use crate::timers::{TimerResult, TimerSpec};

/// What a commit came to. A lost race is a value here, never an `Err`.
#[derive(Debug, Clone)]
pub enum TxOutcome {
    /// Everything committed.
    Committed {
        /// The broker's transaction id.
        transaction_id: Option<String>,
        /// One result per pushed item and per ack, in order, then one per KV op.
        results: Vec<TxResult>,
    },
    /// A `required` KV op (a `once`, a required `check`…) lost: nothing committed.
    PreconditionLost {
        /// The op that lost, in the flat index space (pushed items, acks, then KV ops).
        failed_index: usize,
        /// Its position among the KV ops of the bundle.
        kv_index: Option<usize>,
        /// Why it lost (`Exists` for a `once` that found the marker).
        kv_reason: Reason,
        /// The key.
        key: Option<String>,
        /// The winner's value (`None` when nothing live is there).
        value: Option<Box<RawValue>>,
        /// The winner's version (0 when absent).
        version: u64,
    },
}

impl TxOutcome {
    /// Whether the bundle committed.
    pub fn is_committed(&self) -> bool {
        matches!(self, TxOutcome::Committed { .. })
    }
}

/// The result of one slot of a committed bundle.
#[derive(Debug, Clone)]
pub enum TxResult {
    /// A pushed item.
    Push {
        /// Flat index.
        index: usize,
        /// The item's transaction id.
        transaction_id: String,
        /// The new message id.
        message_id: Option<String>,
    },
    /// An ack.
    Ack {
        /// Flat index.
        index: usize,
        /// The acked transaction id.
        transaction_id: String,
        /// Whether the ack dead-lettered the message.
        dlq: bool,
    },
    /// A KV op.
    Kv {
        /// Flat index.
        index: usize,
        /// The op's result.
        result: KvResult,
    },
    /// A timer op of the `timers` rider.
    Timer {
        /// Flat index (after every KV op).
        index: usize,
        /// The op's result.
        result: TimerResult,
    },
}

#[derive(Serialize)]
#[serde(rename_all = "camelCase")]
struct PushOp<'a> {
    r#type: &'static str,
    items: Vec<crate::message::PushWire<'a>>,
}

#[derive(Serialize)]
#[serde(rename_all = "camelCase")]
struct AckOp<'a> {
    r#type: &'static str,
    transaction_id: &'a str,
    partition_id: &'a str,
    status: &'static str,
    #[serde(skip_serializing_if = "Option::is_none")]
    lease_id: Option<&'a str>,
    #[serde(skip_serializing_if = "Option::is_none")]
    consumer_group: Option<&'a str>,
}

#[derive(Serialize)]
#[serde(rename_all = "camelCase")]
struct Body<'a> {
    operations: &'a [Box<RawValue>],
    required_leases: &'a [String],
    #[serde(skip_serializing_if = "<[_]>::is_empty")]
    kv: &'a [Box<RawValue>],
    #[serde(skip_serializing_if = "<[_]>::is_empty")]
    timers: &'a [serde_json::Value],
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct Answer {
    #[serde(default)]
    transaction_id: Option<String>,
    #[serde(default)]
    success: bool,
    #[serde(default)]
    reason: Option<String>,
    #[serde(default)]
    error: Option<String>,
    #[serde(default)]
    results: Vec<Box<RawValue>>,
    #[serde(default)]
    failed_index: Option<usize>,
    #[serde(default)]
    kv_reason: Option<String>,
    #[serde(default)]
    key: Option<String>,
    #[serde(default, deserialize_with = "some_raw")]
    value: Option<Box<RawValue>>,
    #[serde(default)]
    version: Option<u64>,
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct Slot {
    #[serde(rename = "type", default)]
    kind: String,
    #[serde(default)]
    index: usize,
    #[serde(default)]
    transaction_id: String,
    #[serde(default)]
    message_id: Option<String>,
    #[serde(default)]
    dlq: Option<bool>,
}

/// A transaction being built. Nothing is sent until [`Tx::commit`].
pub struct Tx<B> {
    queen: Queen<B>,
    ops: Vec<Box<RawValue>>,
    leases: Vec<String>,
    kv: Vec<KvOp>,
    timers: Vec<serde_json::Value>,
    slots: usize,
    error: Option<Error>,
}

fn raw_json<T: Serialize>(value: &T) -> Result<Box<RawValue>> {
    serde_json::value::to_raw_value(value).map_err(|e| Error::decode("transaction op", e))
}

impl<B: Broker> Queen<B> {
    /// A transaction builder: acks, pushes, KV ops and timers in one commit.
    pub fn tx(&self) -> Tx<B> {
        Tx::new(self.clone())
    }
}

impl<B: Broker> Tx<B> {
    fn new(queen: Queen<B>) -> Self {
        Tx {
            queen,
            ops: Vec::new(),
            leases: Vec::new(),
            kv: Vec::new(),
            timers: Vec::new(),
            slots: 0,
            error: None,
        }
    }

    fn keep(&mut self, r: Result<()>) {
        if let Err(e) = r {
            self.error.get_or_insert(e);
        }
    }

    /// Acks `message` as completed in this bundle, fenced by its lease.
    pub fn ack(self, message: &Message) -> Self {
        self.ack_as(message, AckStatus::Completed)
    }

    /// Settles `message` with `status` in this bundle.
    pub fn ack_as(mut self, message: &Message, status: AckStatus) -> Self {
        let op = AckOp {
            r#type: "ack",
            transaction_id: &message.transaction_id,
            partition_id: &message.partition_id,
            status: status.as_str(),
            lease_id: message.lease_id.as_deref(),
            consumer_group: message.group(),
        };
        let r = raw_json(&op).map(|op| self.ops.push(op));
        self.keep(r);
        if let Some(lease) = &message.lease_id {
            if !self.leases.contains(lease) {
                self.leases.push(lease.clone());
            }
        }
        self.slots += 1;
        self
    }

    /// Pushes to queue `name` in this bundle.
    pub fn queue(self, name: impl Into<String>) -> TxQueue<B> {
        TxQueue { tx: self, queue: name.into(), partition: None }
    }

    fn push_items(mut self, queue: &str, partition: Option<&str>, items: &[PushItem]) -> Self {
        let op = PushOp { r#type: "push", items: items.iter().map(|i| i.wire(queue, partition)).collect() };
        let r = raw_json(&op).map(|op| self.ops.push(op));
        self.keep(r);
        self.slots += items.len();
        self
    }

    /// The gate: the bundle commits only if nobody marked `key` first (value `true`).
    ///
    /// A `putIfAbsent` with `required`: a redelivery whose work is already
    /// done gets [`TxOutcome::PreconditionLost`] and nothing commits (its
    /// ack included). Put it first, on a key derived from the message.
    pub fn once(self, ns: &str, key: &str, expiry: Expiry) -> Self {
        self.once_with(ns, key, &true, expiry)
    }

    /// The gate, storing `value` as the marker (the loser reads it back).
    pub fn once_with<T: Serialize + ?Sized>(
        mut self,
        ns: &str,
        key: &str,
        value: &T,
        expiry: Expiry,
    ) -> Self {
        let r = ops::put_if_absent(ns, key, value, expiry, true).map(|op| self.kv.push(op));
        self.keep(r);
        self
    }

    /// KV ops in this bundle (no `get_prefix`: it is not allowed in a transaction).
    pub fn kv(self) -> TxKv<B> {
        TxKv { tx: self, required: false }
    }

    /// Fences the bundle with a held permit: if the permit's token is no
    /// longer current (it lapsed and passed on), nothing in the bundle
    /// commits and the answer is [`TxOutcome::PreconditionLost`].
    pub fn guard(mut self, permit: &Permit) -> Self {
        match u64::try_from(permit.token).ok().and_then(NonZeroU64::new) {
            Some(v) => self.kv.push(ops::check(LOCKS_NAMESPACE, &permit.key(), Expect::Version(v), true)),
            None => self.keep(Err(Error::Invalid("a permit's token is above 0".into()))),
        }
        self
    }

    /// Schedules (or reschedules) a timer in this bundle.
    pub fn schedule_timer(mut self, spec: &TimerSpec) -> Self {
        self.timers.push(spec.wire());
        self
    }

    /// Cancels a timer in this bundle (`absent` and `too_late` are verdicts, not errors).
    pub fn cancel_timer(mut self, queue: &str, key: &str) -> Self {
        self.timers.push(serde_json::json!({"op": "cancel", "queue": queue, "timerKey": key}));
        self
    }

    /// Sends the bundle.
    ///
    /// `Ok(Committed)` or `Ok(PreconditionLost)`; a bundle the broker rolled
    /// back for another reason (an ack it did not honour, a duplicate push)
    /// is `Err(Error::Refused)` with the broker's message.
    pub async fn commit(self) -> Result<TxOutcome> {
        if let Some(e) = self.error {
            return Err(e);
        }
        if self.ops.is_empty() && self.kv.is_empty() && self.timers.is_empty() {
            return Err(Error::Invalid("Transaction has no operations to commit".into()));
        }
        let kv: Vec<Box<RawValue>> = self
            .kv
            .iter()
            .map(|op| RawValue::from_string(op.to_wire()).map_err(|e| Error::decode("kv op", e)))
            .collect::<Result<_>>()?;
        let body =
            Body { operations: &self.ops, required_leases: &self.leases, kv: &kv, timers: &self.timers };
        let body = serde_json::to_string(&body).map_err(|e| Error::decode("transaction body", e))?;
        let json = self.queen.broker().transaction(&body).await?;
        let answer: Answer = json.decode().map_err(|e| Error::decode("transaction answer", e))?;
        if !answer.success {
            if answer.reason.as_deref() == Some("kv_precondition") {
                let failed_index = answer.failed_index.unwrap_or(0);
                return Ok(TxOutcome::PreconditionLost {
                    failed_index,
                    kv_index: failed_index.checked_sub(self.slots),
                    kv_reason: Reason::parse(answer.kv_reason.as_deref().unwrap_or("")),
                    key: answer.key,
                    value: answer.value.filter(|_| answer.version.unwrap_or(0) > 0),
                    version: answer.version.unwrap_or(0),
                });
            }
            return Err(Error::Refused {
                message: answer.error.unwrap_or_else(|| "the transaction rolled back".into()),
                reason: answer.reason,
            });
        }
        let mut results = Vec::with_capacity(answer.results.len());
        for raw in answer.results {
            let slot: Slot =
                serde_json::from_str(raw.get()).map_err(|e| Error::decode("transaction result", e))?;
            results.push(match slot.kind.as_str() {
                "push" => TxResult::Push {
                    index: slot.index,
                    transaction_id: slot.transaction_id,
                    message_id: slot.message_id,
                },
                "ack" => TxResult::Ack {
                    index: slot.index,
                    transaction_id: slot.transaction_id,
                    dlq: slot.dlq.unwrap_or(false),
                },
                "timer" => {
                    #[derive(Deserialize)]
                    struct TimerSlot {
                        #[serde(default)]
                        index: usize,
                        #[serde(flatten)]
                        result: TimerResult,
                    }
                    let t: TimerSlot = serde_json::from_str(raw.get())
                        .map_err(|e| Error::decode("transaction timer result", e))?;
                    TxResult::Timer { index: t.index, result: t.result }
                }
                _ => {
                    let r: RawResult = serde_json::from_str(raw.get())
                        .map_err(|e| Error::decode("transaction kv result", e))?;
                    TxResult::Kv { index: r.index, result: r.typed()? }
                }
            });
        }
        Ok(TxOutcome::Committed { transaction_id: answer.transaction_id, results })
    }
}

/// Pushes to one queue inside a transaction.
pub struct TxQueue<B> {
    tx: Tx<B>,
    queue: String,
    partition: Option<String>,
}

impl<B: Broker> TxQueue<B> {
    /// Pushes to this partition (by default the item carries none: `Default`).
    pub fn partition(mut self, partition: impl Into<String>) -> Self {
        self.partition = Some(partition.into());
        self
    }

    /// Pushes one payload and returns to the bundle.
    pub fn push<T: Serialize + ?Sized>(self, payload: &T) -> Tx<B> {
        match PushItem::new(payload) {
            Ok(item) => self.push_batch(&[item]),
            Err(e) => {
                let mut tx = self.tx;
                tx.keep(Err(e));
                tx
            }
        }
    }

    /// Pushes several items and returns to the bundle.
    pub fn push_batch(self, items: &[PushItem]) -> Tx<B> {
        let TxQueue { tx, queue, partition } = self;
        tx.push_items(&queue, partition.as_deref(), items)
    }
}

/// KV ops inside a transaction. Each method adds one op and returns the bundle.
pub struct TxKv<B> {
    tx: Tx<B>,
    required: bool,
}

impl<B: Broker> TxKv<B> {
    /// Makes the next op `required`: if its precondition is lost, nothing in the bundle commits.
    pub fn required(mut self) -> Self {
        self.required = true;
        self
    }

    fn add(self, op: Result<KvOp>) -> Tx<B> {
        let mut tx = self.tx;
        let r = op.map(|op| tx.kv.push(op));
        tx.keep(r);
        tx
    }

    /// Reads one key (it sees the state before this bundle's write of it).
    pub fn get(self, ns: &str, key: &str) -> Tx<B> {
        self.add(Ok(ops::get(ns, key)))
    }

    /// Reads many keys (after this bundle's writes).
    pub fn get_many<S: AsRef<str>>(self, ns: &str, keys: &[S]) -> Tx<B> {
        let op = ops::get_many(ns, keys);
        self.add(op)
    }

    /// Writes unconditionally.
    pub fn put<T: Serialize + ?Sized>(self, ns: &str, key: &str, value: &T, expiry: Expiry) -> Tx<B> {
        let op = ops::put(ns, key, value, expiry, None, self.required);
        self.add(op)
    }

    /// Writes if `expect` holds.
    pub fn put_expect<T: Serialize + ?Sized>(
        self,
        ns: &str,
        key: &str,
        value: &T,
        expiry: Expiry,
        expect: Expect,
    ) -> Tx<B> {
        let op = ops::put(ns, key, value, expiry, Some(expect), self.required);
        self.add(op)
    }

    /// Writes if no live key exists.
    pub fn put_if_absent<T: Serialize + ?Sized>(
        self,
        ns: &str,
        key: &str,
        value: &T,
        expiry: Expiry,
    ) -> Tx<B> {
        let op = ops::put_if_absent(ns, key, value, expiry, self.required);
        self.add(op)
    }

    /// Deletes a live key.
    pub fn delete(self, ns: &str, key: &str) -> Tx<B> {
        let op = ops::delete(ns, key, None, self.required);
        self.add(Ok(op))
    }

    /// Deletes a live key if `expect` holds.
    pub fn delete_expect(self, ns: &str, key: &str, expect: Expect) -> Tx<B> {
        let op = ops::delete(ns, key, Some(expect), self.required);
        self.add(Ok(op))
    }

    /// Asserts `expect` without writing (use [`TxKv::required`] to fence the bundle on it).
    pub fn check(self, ns: &str, key: &str, expect: Expect) -> Tx<B> {
        let op = ops::check(ns, key, expect, self.required);
        self.add(Ok(op))
    }

    /// Adds to a counter; the expiry applies only when the key is created.
    pub fn incr(self, ns: &str, key: &str, by: impl Into<Incr>, expiry: Expiry) -> Tx<B> {
        let op = ops::incr(ns, key, by.into(), expiry, self.required);
        self.add(op)
    }
}
