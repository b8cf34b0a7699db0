//! Consumer groups: queue mode, the streams runners' groups, and where a new
//! group starts reading.

pub use queen_wire::QUEUE_MODE;

/// The consumer groups of streams runners: `streams.<query id>`.
pub const STREAMS_GROUP_PREFIX: &str = "streams.";

/// Where a new consumer group starts reading.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum SubscriptionMode {
    /// From the first message still in the queue (`all`, `from_beginning`).
    All,
    /// After the last message pushed before the group's first pop, in every
    /// partition (Queen 1.6's default).
    #[default]
    New,
}

impl SubscriptionMode {
    /// The name the pop routes and `DEFAULT_SUBSCRIPTION_MODE` use.
    pub fn as_str(self) -> &'static str {
        match self {
            SubscriptionMode::All => "all",
            SubscriptionMode::New => "new",
        }
    }
}

impl std::str::FromStr for SubscriptionMode {
    type Err = String;

    /// Queen's spellings; an empty value is Queen's old default, `all`.
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        match s.trim().to_ascii_lowercase().as_str() {
            "" | "all" | "from_beginning" => Ok(SubscriptionMode::All),
            "new" | "new-only" | "new_only" => Ok(SubscriptionMode::New),
            other => Err(format!(
                "unknown subscription mode {other:?}: expected all, from_beginning, new or new-only"
            )),
        }
    }
}

/// The consumer-group administration calls: SQL answers counts and times,
/// these write the answers.
pub(crate) mod admin {
    use queen_wire::{GroupDeleted, PartitionSeeked, Seeked, SubscriptionUpdated};

    use crate::db::Pool;
    use crate::EngineError;

    fn count(n: i64) -> u64 {
        u64::try_from(n).unwrap_or(0)
    }

    /// Deletes a group's cursors (on one queue or all), optionally its registration.
    pub(crate) async fn delete(
        pool: &Pool,
        group: &str,
        queue: Option<&str>,
        delete_metadata: bool,
    ) -> Result<GroupDeleted, EngineError> {
        let client = pool.get().await?;
        let stmt = client
            .prepare_cached(
                "SELECT d.deleted_partitions, d.metadata_deleted FROM queen.delete_consumer_group($1, $2, $3) d",
            )
            .await?;
        let row = client.query_one(&stmt, &[&group, &queue, &delete_metadata]).await?;
        Ok(GroupDeleted {
            success: true,
            consumer_group: group.to_owned(),
            queue_name: queue.map(str::to_owned),
            deleted_partitions: count(row.try_get(0)?),
            metadata_deleted: row.try_get(1)?,
        })
    }

    /// Sets the start position for lanes the group has not seen yet.
    pub(crate) async fn update_subscription(
        pool: &Pool,
        group: &str,
        timestamp: Option<&str>,
    ) -> Result<SubscriptionUpdated, EngineError> {
        let client = pool.get().await?;
        let stmt = client
            .prepare_cached("SELECT u.new_timestamp, u.rows_updated FROM queen.update_subscription($1, $2) u")
            .await?;
        let row = client.query_one(&stmt, &[&group, &timestamp]).await?;
        Ok(SubscriptionUpdated {
            success: true,
            consumer_group: group.to_owned(),
            new_timestamp: row.try_get(0)?,
            rows_updated: count(row.try_get(1)?),
        })
    }

    /// What a seek moved: the queue-level answer, or with a partition Queen's.
    pub(crate) enum Sought {
        Queue(Seeked),
        Partition(PartitionSeeked),
    }

    /// Moves a group's cursors on a queue, or on one `partition` of it.
    pub(crate) async fn seek(
        pool: &Pool,
        group: &str,
        queue: &str,
        partition: Option<&str>,
        to_end: bool,
        timestamp: Option<&str>,
    ) -> Result<Sought, EngineError> {
        let client = pool.get().await?;
        let stmt = client
            .prepare_cached(
                "SELECT s.partitions_updated, s.target_timestamp, s.cursor_moved_to::text
                   FROM queen.seek($1, $2, $3, $4, $5) s",
            )
            .await?;
        let row = client.query_one(&stmt, &[&group, &queue, &to_end, &timestamp, &partition]).await?;
        let moved = count(row.try_get(0)?);
        let target_timestamp: Option<String> = row.try_get(1)?;
        let (consumer_group, queue_name) = (group.to_owned(), queue.to_owned());
        Ok(match partition {
            None => Sought::Queue(Seeked {
                success: true,
                consumer_group,
                queue_name,
                seek_to_end: to_end,
                target_timestamp,
                partitions_updated: moved,
            }),
            Some(partition) => Sought::Partition(PartitionSeeked {
                success: true,
                consumer_group,
                queue_name,
                partition_name: partition.to_owned(),
                updated: moved > 0,
                cursor_moved_to: row.try_get(2)?,
                seek_to_end: to_end,
                target_timestamp,
                partitions_updated: moved,
            }),
        })
    }
}
