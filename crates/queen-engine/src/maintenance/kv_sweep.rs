//! The KV sweeper: deletes expired rows in bounded batches. Safe with many
//! brokers (`queen.kv_sweep` skips locked rows) and invisible to reads
//! (expired rows are already absent by predicate).

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use tokio::sync::watch;

use super::Next;
use crate::db::Pool;
use crate::EngineError;

/// Deletes up to `batch` expired rows; again at once while a batch is full.
async fn step(pool: &Pool, batch: i32, pruned: &AtomicU64) -> Result<Next, EngineError> {
    let client = pool.get().await?;
    let stmt = client.prepare_cached("SELECT queen.kv_sweep($1)").await?;
    let n: i32 = client.query_one(&stmt, &[&batch]).await?.try_get(0)?;
    pruned.fetch_add(n.max(0) as u64, Ordering::Relaxed);
    Ok(if n < batch { Next::Sleep } else { Next::Again })
}

pub(crate) async fn sweep(
    pool: Pool,
    every: Duration,
    batch: i32,
    pruned: Arc<AtomicU64>,
    shutdown: watch::Receiver<bool>,
) {
    super::run("kv sweep", every, usize::MAX, None, shutdown, || step(&pool, batch, &pruned)).await;
}
