//! Consumer-group administration: list the groups with their lag, delete a
//! group, move its start position or its cursors.
//!
//! These are operator calls. A consumer never needs them to work: its
//! cursor, leases and registration live in the broker and its first pop
//! registers it. They exist for what a consumer cannot do for itself: see
//! which group falls behind, retire a group that will never pop again (its
//! cursors pin `completedRetentionSeconds`, which deletes only what every
//! group consumed), replay or skip a backlog after an incident.

use std::time::Duration;

use serde::Deserialize;

use crate::broker::{Broker, Seek};
use crate::client::Queen;
use crate::error::{Error, Result};

/// One consumer group on one queue, with its lag.
#[derive(Debug, Clone, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ConsumerGroup {
    /// The group.
    pub name: String,
    /// The queue it consumes.
    pub queue_name: String,
    /// Partitions the group has a cursor on.
    #[serde(default)]
    pub members: u64,
    /// Of those, the partitions with messages the group has not consumed.
    #[serde(default)]
    pub partitions_with_lag: u64,
    /// Messages the group has not consumed, over every partition.
    #[serde(default)]
    pub total_lag: u64,
    /// Age in seconds of the oldest message the group has not consumed (0 when none).
    #[serde(default)]
    pub max_time_lag: f64,
    /// `Stable` (nothing to consume) or `Lagging`.
    #[serde(default)]
    pub state: String,
    /// How the group registered: `all`, `new` or `timestamp`.
    #[serde(default)]
    pub subscription_mode: Option<String>,
    /// The start time of a `timestamp` subscription.
    #[serde(default)]
    pub subscription_timestamp: Option<String>,
    /// When the group registered on the queue (its first pop).
    #[serde(default)]
    pub subscription_created_at: Option<String>,
    /// One entry per partition the group has a cursor on, by partition name.
    #[serde(default)]
    pub partitions: Vec<GroupPartition>,
}

/// A consumer group's cursor on one partition.
#[derive(Debug, Clone, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct GroupPartition {
    /// The partition name.
    pub partition: String,
    /// The partition id.
    pub partition_id: String,
    /// The offset of the next message the group will get.
    pub offset: u64,
    /// Messages after the cursor.
    #[serde(default)]
    pub offset_lag: u64,
    /// Whether a lease on the partition is held now.
    #[serde(default)]
    pub lease_active: bool,
    /// When the group last had a message of the partition delivered.
    #[serde(default)]
    pub last_consumed_at: Option<String>,
}

/// The answers of [`Queen::delete_consumer_group`],
/// [`Queen::update_subscription`], [`Queen::seek`] and
/// [`Queen::seek_partition`]: the broker's own types.
pub use queen_wire::{GroupDeleted, PartitionSeeked, Seeked, SubscriptionUpdated};

fn decode<T: serde::de::DeserializeOwned>(json: &queen_wire::Json, what: &str) -> Result<T> {
    json.decode().map_err(|e| Error::decode(what, e))
}

impl<B: Broker> Queen<B> {
    /// Every consumer group, one entry per (group, queue), with its lag.
    ///
    /// For dashboards, alerts and autoscalers: the lag per partition says
    /// which group falls behind and where, which no consumer can see.
    pub async fn consumer_groups(&self) -> Result<Vec<ConsumerGroup>> {
        decode(&self.broker().consumer_groups(None).await?, "consumer groups answer")
    }

    /// One consumer group: one entry per queue it consumes (empty when it
    /// never popped), with its cursor on every partition.
    ///
    /// For the detail behind [`Queen::consumer_groups`]: which partitions
    /// lag, which hold a lease, when each last delivered.
    pub async fn consumer_group(&self, group: &str) -> Result<Vec<ConsumerGroup>> {
        decode(&self.broker().consumer_groups(Some(group)).await?, "consumer group answer")
    }

    /// The groups behind on some partition whose oldest unconsumed message
    /// is at least `min_lag` old (whole seconds).
    ///
    /// For alerting: a group with a backlog is normal, a backlog that
    /// stays unconsumed for long is a stuck or missing consumer.
    pub async fn lagging_groups(&self, min_lag: Duration) -> Result<Vec<ConsumerGroup>> {
        let secs = u32::try_from(min_lag.as_secs()).unwrap_or(u32::MAX);
        decode(&self.broker().lagging_groups(secs).await?, "lagging groups answer")
    }

    /// Deletes `group`'s cursors on `queue`, or on every queue when `None`.
    ///
    /// Why: a group that will never pop again still pins completed
    /// retention (a message is deleted only once every group consumed it)
    /// and shows as lagging forever. With `delete_registration` the group
    /// is forgotten, so its next pop registers it anew with that pop's
    /// subscription; without it the registration stays and the group
    /// restarts at its stored start position (`all`: the oldest retained
    /// message), which is a way to replay a queue from the start.
    pub async fn delete_consumer_group(
        &self,
        group: &str,
        queue: Option<&str>,
        delete_registration: bool,
    ) -> Result<GroupDeleted> {
        let json = self.broker().delete_consumer_group(group, queue, delete_registration).await?;
        decode(&json, "delete consumer group answer")
    }

    /// Sets `group`'s start position, on every queue it is registered on,
    /// to the first message created at or after `since` (RFC 3339).
    ///
    /// Why: the start position is fixed when a group registers (its first
    /// pop); this changes it afterwards, for the cursors the broker makes
    /// from the registration from now on. Cursors the group has stay where
    /// they are (move those with [`Queen::seek`]); a
    /// [`Queen::delete_consumer_group`] that keeps the registration then
    /// restarts the group at `since`. The broker refuses a `since` that is
    /// not a timestamp (400); an unknown group answers `rows_updated: 0`.
    pub async fn update_subscription(&self, group: &str, since: &str) -> Result<SubscriptionUpdated> {
        decode(&self.broker().update_subscription(group, since).await?, "update subscription answer")
    }

    /// Moves `group`'s cursors on `queue` to the end or to a time, and drops
    /// their leases.
    ///
    /// Why: to skip a backlog that is no longer worth processing
    /// ([`Seek::End`]), or to replay from a point in time after a bug was
    /// fixed ([`Seek::After`], backwards as well as forwards). Only
    /// cursors the group already has move; a batch in flight loses its
    /// lease, so its ack cannot move the cursor again: what the seek chose
    /// is what the group gets next.
    pub async fn seek(&self, group: &str, queue: &str, to: Seek) -> Result<Seeked> {
        decode(&self.broker().seek(group, queue, None, &to).await?, "seek answer")
    }

    /// [`Queen::seek`] on one partition of `queue`: the group's cursor there
    /// moves and loses its lease; its other partitions are untouched.
    ///
    /// Why: one lane is stuck on a poison backlog, or needs a replay, while
    /// the rest of the queue is fine. An unknown queue or partition is an
    /// error (404, "Partition not found"); a group with no cursor on the
    /// partition answers `updated: false`.
    pub async fn seek_partition(
        &self,
        group: &str,
        queue: &str,
        partition: &str,
        to: Seek,
    ) -> Result<PartitionSeeked> {
        decode(&self.broker().seek(group, queue, Some(partition), &to).await?, "partition seek answer")
    }
}
