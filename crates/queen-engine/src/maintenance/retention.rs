//! The retention sweeper: queue options `retentionSeconds`,
//! `completedRetentionSeconds` (with `retentionEnabled`) and
//! `maxWaitTimeSeconds`. The rules live in `queen.retention_sweep`
//! (sql/functions/retention.sql); this task only drives it in short,
//! bounded calls and counts what went.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use crate::db::Pool;
use tokio::sync::watch;
use uuid::Uuid;

use crate::EngineError;

/// Partitions one sweep call visits.
const PARTITIONS_PER_CALL: i32 = 200;
/// Passes over every partition one tick may make while they keep finding
/// messages to remove (a busy partition sheds `batch` per pass).
const MAX_PASSES_PER_TICK: usize = 50;

/// Messages the sweeper of this engine removed.
#[derive(Debug, Default)]
pub(crate) struct RetentionStats {
    retained: AtomicU64,
    evicted: AtomicU64,
}

/// What one engine's retention sweeper has removed since it started.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct RetentionStatsSnapshot {
    /// Removed by `retentionSeconds` or `completedRetentionSeconds`.
    pub retained: u64,
    /// Unconsumed messages removed by `maxWaitTimeSeconds`.
    pub evicted: u64,
}

impl RetentionStats {
    pub(crate) fn snapshot(&self) -> RetentionStatsSnapshot {
        RetentionStatsSnapshot {
            retained: self.retained.load(Ordering::Relaxed),
            evicted: self.evicted.load(Ordering::Relaxed),
        }
    }
}

/// One pass over every partition of the queues with retention or eviction
/// on. `None` when another broker's sweep held the lock.
pub(crate) async fn pass(
    pool: &Pool,
    batch: i32,
    stats: &RetentionStats,
) -> Result<Option<RetentionStatsSnapshot>, EngineError> {
    let mut after: Option<Uuid> = None;
    let mut removed = RetentionStatsSnapshot::default();
    loop {
        let client = pool.get().await?;
        let stmt = client
            .prepare_cached(
                "SELECT next_after, retained, evicted, busy FROM queen.retention_sweep($1, $2, $3)",
            )
            .await?;
        let row = client.query_one(&stmt, &[&after, &PARTITIONS_PER_CALL, &batch]).await?;
        drop(client);
        if row.try_get::<_, bool>(3)? {
            return Ok(None);
        }
        let retained: i64 = row.try_get(1)?;
        let evicted: i64 = row.try_get(2)?;
        stats.retained.fetch_add(retained.max(0) as u64, Ordering::Relaxed);
        stats.evicted.fetch_add(evicted.max(0) as u64, Ordering::Relaxed);
        removed.retained += retained.max(0) as u64;
        removed.evicted += evicted.max(0) as u64;
        after = row.try_get(0)?;
        if after.is_none() {
            return Ok(Some(removed));
        }
    }
}

/// Every `every`, passes over the partitions until a pass removes nothing
/// (at most [`MAX_PASSES_PER_TICK`]). A failed pass is retried next tick.
pub(crate) async fn sweep_retention(
    pool: Pool,
    every: Duration,
    batch: i32,
    stats: Arc<RetentionStats>,
    shutdown: watch::Receiver<bool>,
) {
    super::run("retention sweep", every, MAX_PASSES_PER_TICK, None, shutdown, || async {
        Ok(match pass(&pool, batch, &stats).await? {
            Some(removed) if removed.retained + removed.evicted > 0 => super::Next::Again,
            _ => super::Next::Sleep,
        })
    })
    .await;
}
