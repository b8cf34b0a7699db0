//! The [`Broker`] trait: the wire operations. `HttpBroker` implements it
//! over HTTP; `EmbeddedBroker` (feature `embedded`) in process over the engine.
//!
//! The trait speaks wire JSON text, like the engine's `Engine`, so both
//! implementations stay thin and the typed layer ([`crate::Queen`]) is
//! written once. Its answers are normalised: a transaction or KV call that
//! the broker answers with HTTP 200 but a `success: false` body is `Ok` with
//! that body on both implementations; the typed layer reads the verdict.

use std::future::Future;
use std::time::Duration;

use queen_wire::{DlqQuery, EphemeralPop, Json, PopRequest, ReplayTarget};

use crate::error::Result;

/// The operations of a Queen broker, in wire JSON.
///
/// Bodies and answers are the JSON of the HTTP API (queen2-wire.md); the
/// futures are `Send`, so the typed layer can run them on any task.
pub trait Broker: Send + Sync {
    /// Creates or reconfigures a queue; `body` is the configure request.
    fn configure(&self, body: &str) -> impl Future<Output = Result<Json>> + Send;

    /// Pushes a JSON array of items; answers the per-item results array.
    fn push(&self, items: &str) -> impl Future<Output = Result<Json>> + Send;

    /// Pops; `wait` long-polls up to that long. `None` when nothing came.
    fn pop(
        &self,
        req: &PopRequest,
        wait: Option<Duration>,
    ) -> impl Future<Output = Result<Option<Json>>> + Send;

    /// Acks a JSON array of acknowledgments (a batch; one item for a single ack).
    fn ack(&self, items: &str, consumer_group: Option<&str>) -> impl Future<Output = Result<Json>> + Send;

    /// Extends the lease of every partition held under `lease_id` to now + `seconds`.
    fn extend_lease(&self, lease_id: &str, seconds: u32) -> impl Future<Output = Result<Json>> + Send;

    /// Commits a transaction bundle; a refused bundle is `Ok` with its `success: false` body.
    fn transaction(&self, body: &str) -> impl Future<Output = Result<Json>> + Send;

    /// Lists dead letters.
    fn dlq(&self, query: &DlqQuery) -> impl Future<Output = Result<Json>> + Send;

    /// Replays one dead-letter record by its `dlq_id` (`POST /api/v1/dlq/{id}/replay`),
    /// onto its own lane or the queue/partition `target` names.
    fn dlq_replay(&self, dlq_id: i64, target: &ReplayTarget) -> impl Future<Output = Result<Json>> + Send;

    /// Deletes a queue's dead-letter records, or one group's (`DELETE /api/v1/dlq`).
    fn dlq_purge(
        &self,
        queue: &str,
        consumer_group: Option<&str>,
    ) -> impl Future<Output = Result<Json>> + Send;

    /// Deletes a queue (answers `deleted: false` when it did not exist).
    fn delete_queue(&self, queue: &str) -> impl Future<Output = Result<Json>> + Send;

    /// Consumer groups with their lag, one entry per (group, queue), as a
    /// JSON array: every group when `group` is `None`, else that group's.
    /// (`GET /api/v1/consumer-groups[/{group}]`.)
    fn consumer_groups(&self, group: Option<&str>) -> impl Future<Output = Result<Json>> + Send;

    /// The groups behind on some partition whose oldest unconsumed message
    /// is at least `min_lag_seconds` old (clamped to `i32::MAX`), as a JSON
    /// array. (`GET /api/v1/consumer-groups/lagging`.)
    fn lagging_groups(&self, min_lag_seconds: u32) -> impl Future<Output = Result<Json>> + Send;

    /// Deletes `group`'s cursors on `queue` (every queue when `None`); with
    /// `delete_metadata` its registration too, else the group gets fresh
    /// cursors at its stored start position.
    /// (`DELETE /api/v1/consumer-groups/{group}[/queues/{queue}]`.)
    fn delete_consumer_group(
        &self,
        group: &str,
        queue: Option<&str>,
        delete_metadata: bool,
    ) -> impl Future<Output = Result<Json>> + Send;

    /// Sets `group`'s stored start position (its subscription) on every
    /// queue to an RFC 3339 `timestamp`; existing cursors stay.
    /// (`POST /api/v1/consumer-groups/{group}/subscription`.)
    fn update_subscription(&self, group: &str, timestamp: &str) -> impl Future<Output = Result<Json>> + Send;

    /// Moves `group`'s existing cursors on `queue`, or on its one
    /// `partition`, and clears their leases.
    /// (`POST /api/v1/consumer-groups/{group}/queues/{queue}/seek`, or
    /// `.../partitions/{partition}/seek`; an unknown partition is a 404.)
    fn seek(
        &self,
        group: &str,
        queue: &str,
        partition: Option<&str>,
        to: &Seek,
    ) -> impl Future<Output = Result<Json>> + Send;

    /// Runs a KV call (`{"operations": [...]}`, kv.md): one op or a batch of
    /// up to 256, run in one PostgreSQL transaction and answered
    /// index-aligned (`results[i]` belongs to `operations[i]`); any op of
    /// the wire, `getPrefix` with `keysOnly: true` included. A lost
    /// `required` precondition is `Ok` with its `{"ok": false, ...}` body.
    fn kv(&self, body: &str) -> impl Future<Output = Result<Json>> + Send;

    /// Every KV namespace with its live key count and its expired rows not
    /// yet swept (`GET /api/v1/resources/kv/namespaces`).
    fn kv_namespaces(&self) -> impl Future<Output = Result<Json>> + Send;

    /// One page of the KV browser, `{namespace, prefix?, cursor?, limit?}`
    /// (`POST /api/v1/resources/kv/list`).
    fn kv_list(&self, body: &str) -> impl Future<Output = Result<Json>> + Send;

    /// Runs a locks call (`{"operations": [...]}`): one result per op.
    fn locks(&self, body: &str) -> impl Future<Output = Result<Json>> + Send;

    /// Runs a timers call (`{"operations": [...]}`): one result per op.
    fn timers(&self, body: &str) -> impl Future<Output = Result<Json>> + Send;

    /// Cancels one timer (the route that never waits for a fire).
    fn timer_cancel(
        &self,
        queue: &str,
        key: &str,
        txn: Option<&str>,
    ) -> impl Future<Output = Result<Json>> + Send;

    /// One pending timer, or `{"found": false}`.
    fn timer_peek(&self, queue: &str, key: &str) -> impl Future<Output = Result<Json>> + Send;

    /// A keyset page of one queue's pending timers.
    fn timer_list(
        &self,
        queue: &str,
        after: Option<&str>,
        limit: Option<u32>,
    ) -> impl Future<Output = Result<Json>> + Send;

    /// Reads by offset (`{"entries": [...], "maxBytes"?}`).
    fn fetch(&self, body: &str) -> impl Future<Output = Result<Json>> + Send;

    /// The partitions written since a time (`{"entries": [...]}`).
    fn partitions_changed(&self, body: &str) -> impl Future<Output = Result<Json>> + Send;

    /// An ephemeral-queue call: `verb` is configure, push, ack or reset; `body` its JSON.
    fn ephemeral(&self, verb: EphemeralVerb, body: &str) -> impl Future<Output = Result<Json>> + Send;

    /// Pops from an ephemeral queue (`{queue, messages}`, messages empty when none).
    fn ephemeral_pop(&self, req: &EphemeralPop) -> impl Future<Output = Result<Json>> + Send;

    /// Deletes an ephemeral queue (`{queue, deleted, declared}`).
    fn ephemeral_delete(&self, queue: &str) -> impl Future<Output = Result<Json>> + Send;

    /// The depth of an ephemeral queue; a missing one is an error with code `ephemeral_queue_not_found`.
    fn ephemeral_depth(&self, queue: &str) -> impl Future<Output = Result<Json>> + Send;

    /// A streams call (`/streams/v1/*`, the stream runtime's wire): a refused cycle is `Ok`
    /// with its `success: false` body.
    fn streams(&self, verb: StreamVerb, body: &str) -> impl Future<Output = Result<Json>> + Send;
}

/// Where [`Broker::seek`] moves a consumer group's cursors.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Seek {
    /// Past the last message: the group skips the whole backlog.
    End,
    /// To the first message created strictly after this RFC 3339 time
    /// (past the last one when none is), so the group replays or skips up
    /// to that moment.
    After(String),
}

impl Seek {
    /// The engine's `(to_end, timestamp)` pair, also the HTTP body's fields.
    pub(crate) fn parts(&self) -> (bool, Option<&str>) {
        match self {
            Seek::End => (true, None),
            Seek::After(ts) => (false, Some(ts)),
        }
    }
}

/// The body-carrying ephemeral-queue calls.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum EphemeralVerb {
    /// `POST /api/v1/ephemeral/configure`.
    Configure,
    /// `POST /api/v1/ephemeral/push`.
    Push,
    /// `POST /api/v1/ephemeral/ack`.
    Ack,
    /// `POST /api/v1/ephemeral/reset`.
    Reset,
}

impl EphemeralVerb {
    fn path(self) -> &'static str {
        match self {
            EphemeralVerb::Configure => "configure",
            EphemeralVerb::Push => "push",
            EphemeralVerb::Ack => "ack",
            EphemeralVerb::Reset => "reset",
        }
    }
}

/// The streams calls.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum StreamVerb {
    /// `POST /streams/v1/queries`: register a query.
    Register,
    /// `POST /streams/v1/state/get`: read a query's state.
    State,
    /// `POST /streams/v1/cycle`: commit a cycle.
    Cycle,
}

impl StreamVerb {
    pub(crate) fn path(self) -> &'static [&'static str] {
        match self {
            StreamVerb::Register => &["streams", "v1", "queries"],
            StreamVerb::State => &["streams", "v1", "state", "get"],
            StreamVerb::Cycle => &["streams", "v1", "cycle"],
        }
    }
}

impl EphemeralVerb {
    pub(crate) fn wire(self) -> [&'static str; 4] {
        ["api", "v1", "ephemeral", self.path()]
    }
}
