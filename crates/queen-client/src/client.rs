//! [`Queen`], the typed client, and [`Queue`], its per-queue builder.
//!
//! These are the handles every feature module builds on, so this module
//! depends only on the layers below it (broker, http, kv, state, message):
//! the constructors of the feature types ([`Queen::tx`], [`Queue::consume`],
//! [`Queue::buffered`], [`Queen::locks`], …) are defined next to those types,
//! as `impl Queen` / `impl Queue` blocks in their own modules.

use std::sync::Arc;
use std::time::Duration;

#[cfg(feature = "embedded")]
use queen_engine::Engine;
use queen_wire::{DlqQuery, PopRequest, ReplayTarget};
use serde::{Deserialize, Serialize};

use crate::broker::Broker;
#[cfg(feature = "embedded")]
use crate::embedded::EmbeddedBroker;
use crate::error::{Error, Result};
use crate::http::{HttpBroker, HttpConfig};
use crate::kv::Kv;
use crate::message::{
    Ack, AckResult, AckStatus, AckWire, DlqPage, DlqReplay, LeaseRenewal, Message, PopAnswer, PushItem,
    PushResult,
};
use crate::state::State;

/// The namespace of [`Queen::state`] handles.
pub const DEFAULT_STATE_NS: &str = "state";

/// The typed client over any [`Broker`]. Cheap to clone (one `Arc`).
pub struct Queen<B> {
    broker: Arc<B>,
}

impl<B> Clone for Queen<B> {
    fn clone(&self) -> Self {
        Queen { broker: self.broker.clone() }
    }
}

impl Queen<HttpBroker> {
    /// A client of the broker at `url`, with the default HTTP settings.
    pub fn connect(url: &str) -> Result<Self> {
        Ok(Queen::new(HttpBroker::new(url)?))
    }

    /// A client of one or several brokers with explicit HTTP settings.
    pub fn http(config: HttpConfig) -> Result<Self> {
        Ok(Queen::new(HttpBroker::with_config(config)?))
    }
}

#[cfg(feature = "embedded")]
impl Queen<EmbeddedBroker> {
    /// A client of the engine in this process (no HTTP).
    pub fn embedded(engine: Arc<Engine>) -> Self {
        Queen::new(EmbeddedBroker::new(engine))
    }
}

impl<B: Broker> Queen<B> {
    /// A client over `broker`.
    pub fn new(broker: B) -> Self {
        Queen { broker: Arc::new(broker) }
    }

    /// A client over a shared broker.
    pub fn from_arc(broker: Arc<B>) -> Self {
        Queen { broker }
    }

    /// The broker underneath.
    pub fn broker(&self) -> &Arc<B> {
        &self.broker
    }

    /// A handle on queue `name` (nothing is sent until an operation runs).
    pub fn queue(&self, name: impl Into<String>) -> Queue<B> {
        Queue {
            queen: self.clone(),
            name: name.into(),
            namespace: None,
            task: None,
            partition: None,
            group: None,
            subscription: None,
        }
    }

    /// A handle whose pops span every queue configured with this namespace
    /// (and, with [`Queue::task`], that task), higher priority first. It
    /// pops and acks; it cannot push or configure (it names no queue).
    pub fn namespace(&self, namespace: impl Into<String>) -> Queue<B> {
        Queue { namespace: Some(namespace.into()), ..self.queue("") }
    }

    /// A handle whose pops span every queue configured with this task.
    pub fn task(&self, task: impl Into<String>) -> Queue<B> {
        Queue { task: Some(task.into()), ..self.queue("") }
    }

    /// The KV store.
    pub fn kv(&self) -> Kv<B> {
        Kv::new(self.broker.clone())
    }

    /// The state handle `name` of `message`'s lane, in [`DEFAULT_STATE_NS`].
    pub fn state(&self, message: &Message, name: &str) -> State<B> {
        self.state_in(DEFAULT_STATE_NS, message, name)
    }

    /// The state handle `name` of `message`'s lane, in namespace `ns`.
    ///
    /// The key is [`Message::state_key`]: `@p/<queue>/<partition>/<group>/<name>`.
    pub fn state_in(&self, ns: &str, message: &Message, name: &str) -> State<B> {
        State::new(self.kv(), ns.to_owned(), message.state_key(name))
    }

    /// Acks `message` as completed.
    pub async fn ack(&self, message: &Message) -> Result<AckResult> {
        self.single(Ack::completed(message)).await
    }

    /// Nacks `message` (`failed`) with an error text; it is redelivered or dead-lettered.
    pub async fn nack(&self, message: &Message, error: &str) -> Result<AckResult> {
        self.single(Ack::failed(message, error)).await
    }

    /// Settles `message` with any status and an optional error text.
    pub async fn ack_as(
        &self,
        message: &Message,
        status: AckStatus,
        error: Option<&str>,
    ) -> Result<AckResult> {
        self.single(Ack { message, status, error }).await
    }

    async fn single(&self, ack: Ack<'_>) -> Result<AckResult> {
        self.ack_batch(&[ack])
            .await?
            .into_iter()
            .next()
            .ok_or_else(|| Error::Decode("ack answered no result".into()))
    }

    /// Acks several messages in one call; results are in request order.
    ///
    /// A refused item is a result with `success: false`, not an `Err`.
    pub async fn ack_batch(&self, acks: &[Ack<'_>]) -> Result<Vec<AckResult>> {
        if acks.is_empty() {
            return Ok(Vec::new());
        }
        let wire: Vec<AckWire> = acks.iter().map(AckWire::from).collect();
        let items = serde_json::to_string(&wire).map_err(|e| Error::decode("ack items", e))?;
        let json = self.broker.ack(&items, None).await?;
        json.decode().map_err(|e| Error::decode("ack answer", e))
    }

    /// Extends `lease_id` to now + `seconds`.
    pub async fn extend_lease(&self, lease_id: &str, seconds: u32) -> Result<LeaseRenewal> {
        let json = self.broker.extend_lease(lease_id, seconds).await?;
        json.decode().map_err(|e| Error::decode("lease answer", e))
    }

    /// Lists dead letters with any filter.
    pub async fn dlq(&self, query: &DlqQuery) -> Result<DlqPage> {
        let json = self.broker.dlq(query).await?;
        json.decode().map_err(|e| Error::decode("dlq answer", e))
    }

    /// Replays one dead-letter record (its `dlq_id` from [`Queen::dlq`]) as a
    /// new message with the transaction id `dlq:<dlq_id>`, onto its own lane
    /// or the queue/partition `target` names; `duplicate` when that message
    /// exists already (the record is then kept).
    pub async fn dlq_replay(&self, dlq_id: i64, target: &ReplayTarget) -> Result<DlqReplay> {
        let json = self.broker.dlq_replay(dlq_id, target).await?;
        json.decode().map_err(|e| Error::decode("dlq replay answer", e))
    }

    /// Deletes `queue`'s dead-letter records (only `consumer_group`'s when
    /// given); answers how many went.
    pub async fn dlq_purge(&self, queue: &str, consumer_group: Option<&str>) -> Result<u64> {
        #[derive(serde::Deserialize)]
        struct Purged {
            deleted: u64,
        }
        let json = self.broker.dlq_purge(queue, consumer_group).await?;
        let purged: Purged = json.decode().map_err(|e| Error::decode("dlq purge answer", e))?;
        Ok(purged.deleted)
    }
}

/// Where a consumer group starts reading, decided by its first pop.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Subscription {
    /// From the oldest retained message.
    All,
    /// Only messages pushed after the group registers.
    New,
    /// From an RFC 3339 timestamp.
    Since(String),
}

/// Queue options of a configure call; `None` keeps the stored value.
///
/// The same type reads the effective options the broker echoes.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", default)]
pub struct QueueOptions {
    /// Lease seconds of a pop.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub lease_time: Option<i64>,
    /// Nacks allowed before dead-lettering (N means N+1 deliveries).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub retry_limit: Option<i64>,
    /// Milliseconds a nacked batch (or one whose lease expired) waits before redelivery; 0 = at once.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub retry_delay: Option<i64>,
    /// Backlog limit of the queue (0 = none); a push past it is refused per item.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub max_size: Option<i64>,
    /// Seconds after which an undelivered message is skipped (0 = never).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub ttl: Option<i64>,
    /// Order of the queues a namespace or task pop visits (higher first).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub priority: Option<i64>,
    /// Whether exhausted messages go to the DLQ.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub dead_letter_queue: Option<bool>,
    /// Whether exhausting the retries dead-letters.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub dlq_after_max_retries: Option<bool>,
    /// Seconds a message waits before it can be delivered.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub delayed_processing: Option<i64>,
    /// Seconds a partition must be quiet before it is delivered.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub window_buffer: Option<i64>,
    /// The dedup window of transaction ids, in seconds.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub dedup_window_seconds: Option<i64>,
    /// Turns on the retention options below.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub retention_enabled: Option<bool>,
    /// Messages older than this many seconds are deleted, consumed or not.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub retention_seconds: Option<i64>,
    /// Messages every group consumed are deleted after this many seconds.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub completed_retention_seconds: Option<i64>,
    /// Messages still unconsumed after this many seconds are deleted (0 = never).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub max_wait_time_seconds: Option<i64>,
    /// Payloads encrypted at rest (the broker needs `QUEEN_ENCRYPTION_KEY`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub encryption_enabled: Option<bool>,
    /// Milliseconds a long poll for a batch larger than one may hold an
    /// under-full batch so one commit carries more (clamped to 0..=60000).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub min_pop_wait_time: Option<i64>,
    /// Queen 1.6's retention sink hold: stored, not acted on (no sinks here).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub retention_sink_hold: Option<String>,
    /// Queen 1.6's retention sink hold limit: stored, not acted on.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub retention_sink_hold_max_seconds: Option<i64>,
}

#[derive(Serialize)]
struct ConfigureBody<'a> {
    queue: &'a str,
    namespace: Option<&'a str>,
    task: Option<&'a str>,
    #[serde(skip_serializing_if = "Option::is_none")]
    mode: Option<&'static str>,
    options: &'a QueueOptions,
}

#[derive(Deserialize)]
struct ConfigureAnswer {
    #[serde(default)]
    options: QueueOptions,
}

/// A handle on one queue, with the partition and consumer group its calls use.
pub struct Queue<B> {
    pub(crate) queen: Queen<B>,
    pub(crate) name: String,
    /// With an empty name: pops span the queues of this namespace / task.
    pub(crate) namespace: Option<String>,
    pub(crate) task: Option<String>,
    pub(crate) partition: Option<String>,
    pub(crate) group: Option<String>,
    pub(crate) subscription: Option<Subscription>,
}

impl<B> Clone for Queue<B> {
    fn clone(&self) -> Self {
        Queue {
            queen: self.queen.clone(),
            name: self.name.clone(),
            namespace: self.namespace.clone(),
            task: self.task.clone(),
            partition: self.partition.clone(),
            group: self.group.clone(),
            subscription: self.subscription.clone(),
        }
    }
}

impl<B: Broker> Queue<B> {
    /// The queue name.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// The client.
    pub fn queen(&self) -> &Queen<B> {
        &self.queen
    }

    /// Tags a named queue with a namespace (sent by `configure`); on a
    /// handle without a name, pops span that namespace's queues.
    pub fn in_namespace(mut self, namespace: impl Into<String>) -> Self {
        self.namespace = Some(namespace.into());
        self
    }

    /// Tags a named queue with a task (sent by `configure`); on a handle
    /// without a name, narrows its pops to the queues of this task.
    pub fn task(mut self, task: impl Into<String>) -> Self {
        self.task = Some(task.into());
        self
    }

    /// Pushes to and pops from this partition only.
    pub fn partition(mut self, partition: impl Into<String>) -> Self {
        self.partition = Some(partition.into());
        self
    }

    /// Pops (and consumes) as consumer group `group`; without it, queue mode.
    pub fn group(mut self, group: impl Into<String>) -> Self {
        self.group = Some(group.into());
        self
    }

    /// Where the group starts when it registers (its first pop); later pops ignore it.
    pub fn subscription(mut self, subscription: Subscription) -> Self {
        self.subscription = Some(subscription);
        self
    }

    /// Creates the queue or merges `options` into its configuration; answers the effective options.
    pub async fn configure(&self, options: &QueueOptions) -> Result<QueueOptions> {
        self.configure_mode(options, None).await
    }

    /// Resets every option to its default, then applies `options`.
    pub async fn configure_replace(&self, options: &QueueOptions) -> Result<QueueOptions> {
        self.configure_mode(options, Some("replace")).await
    }

    async fn configure_mode(
        &self,
        options: &QueueOptions,
        mode: Option<&'static str>,
    ) -> Result<QueueOptions> {
        let body = ConfigureBody {
            queue: &self.name,
            namespace: self.namespace.as_deref(),
            task: self.task.as_deref(),
            mode,
            options,
        };
        let body = serde_json::to_string(&body).map_err(|e| Error::decode("configure body", e))?;
        let json = self.queen.broker.configure(&body).await?;
        let answer: ConfigureAnswer = json.decode().map_err(|e| Error::decode("configure answer", e))?;
        Ok(answer.options)
    }

    /// Deletes the queue; `false` when it did not exist.
    pub async fn delete(&self) -> Result<bool> {
        let json = self.queen.broker.delete_queue(&self.name).await?;
        let answer: queen_wire::QueueDeleted =
            json.decode().map_err(|e| Error::decode("delete answer", e))?;
        Ok(answer.deleted)
    }

    /// Pushes one payload (with a fresh transaction id).
    pub async fn push<T: Serialize + ?Sized>(&self, payload: &T) -> Result<PushResult> {
        self.push_item(PushItem::new(payload)?).await
    }

    /// Pushes one item.
    pub async fn push_item(&self, item: PushItem) -> Result<PushResult> {
        self.push_batch(std::slice::from_ref(&item))
            .await?
            .into_iter()
            .next()
            .ok_or_else(|| Error::Decode("push answered no result".into()))
    }

    /// Pushes several items in one call; results are in input order.
    pub async fn push_batch(&self, items: &[PushItem]) -> Result<Vec<PushResult>> {
        if items.is_empty() {
            return Ok(Vec::new());
        }
        let partition = Some(self.partition.as_deref().unwrap_or("Default"));
        let wire: Vec<_> = items.iter().map(|i| i.wire(&self.name, partition)).collect();
        let text = serde_json::to_string(&wire).map_err(|e| Error::decode("push items", e))?;
        let json = self.queen.broker.push(&text).await?;
        json.decode().map_err(|e| Error::decode("push answer", e))
    }

    /// A pop builder (batch 1, no wait, by default).
    pub fn pop(&self) -> Pop<B> {
        Pop { queue: self.clone(), batch: 1, wait: None, partitions: 1, lease_seconds: None, auto_ack: false }
    }

    /// One page of this queue's dead letters (filtered by the handle's group and partition).
    pub async fn dlq(&self, limit: u32, offset: u32) -> Result<DlqPage> {
        let query = DlqQuery {
            queue: Some(self.name.clone()),
            consumer_group: self.group.clone(),
            partition: self.partition.clone(),
            from: None,
            to: None,
            limit: clamp_i32(limit),
            offset: clamp_i32(offset),
        };
        self.queen.dlq(&query).await
    }

    pub(crate) fn pop_request(
        &self,
        batch: u32,
        partitions: u32,
        lease: Option<u32>,
        auto_ack: bool,
    ) -> PopRequest {
        let (mode, from) = match &self.subscription {
            None => (None, None),
            Some(Subscription::All) => (Some("all".to_owned()), None),
            Some(Subscription::New) => (Some("new".to_owned()), None),
            Some(Subscription::Since(ts)) => (None, Some(ts.clone())),
        };
        PopRequest {
            queue: self.name.clone(),
            partition: self.partition.clone(),
            consumer_group: self.group.clone(),
            batch: clamp_i32(batch.max(1)),
            partitions: clamp_i32(partitions.max(1)),
            lease_seconds: lease.map(clamp_i32),
            auto_ack,
            subscription_mode: mode,
            subscription_from: from,
            namespace: self.namespace.clone(),
            task: self.task.clone(),
        }
    }

    pub(crate) async fn pop_with(&self, req: &PopRequest, wait: Option<Duration>) -> Result<Vec<Message>> {
        match self.queen.broker.pop(req, wait).await? {
            None => Ok(Vec::new()),
            Some(json) => {
                let answer: PopAnswer = json.decode().map_err(|e| Error::decode("pop answer", e))?;
                Ok(answer.into_messages())
            }
        }
    }
}

fn clamp_i32(n: u32) -> i32 {
    i32::try_from(n).unwrap_or(i32::MAX)
}

/// A pop call being built.
pub struct Pop<B> {
    queue: Queue<B>,
    batch: u32,
    wait: Option<Duration>,
    partitions: u32,
    lease_seconds: Option<u32>,
    auto_ack: bool,
}

impl<B: Broker> Pop<B> {
    /// The message budget of the call (a global cap over the partitions).
    pub fn batch(mut self, n: u32) -> Self {
        self.batch = n;
        self
    }

    /// Long-polls up to `timeout` for a message.
    pub fn wait(mut self, timeout: Duration) -> Self {
        self.wait = Some(timeout);
        self
    }

    /// How many partitions one call may claim (one lease shared by all).
    pub fn partitions(mut self, n: u32) -> Self {
        self.partitions = n;
        self
    }

    /// Overrides the queue's lease time for this pop.
    pub fn lease_seconds(mut self, seconds: u32) -> Self {
        self.lease_seconds = Some(seconds);
        self
    }

    /// Commits the cursor at delivery: no lease, no ack needed.
    pub fn auto_ack(mut self) -> Self {
        self.auto_ack = true;
        self
    }

    /// Sends the pop; empty when nothing was deliverable.
    pub async fn fetch(self) -> Result<Vec<Message>> {
        let req = self.queue.pop_request(self.batch, self.partitions, self.lease_seconds, self.auto_ack);
        self.queue.pop_with(&req, self.wait).await
    }
}
