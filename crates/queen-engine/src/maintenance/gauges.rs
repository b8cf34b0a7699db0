//! Queue gauges: the counts of a queue too large to count on every page
//! view (at least `queue_gauge_min_partitions` partitions), counted in the
//! background. The rules live in `queen.refresh_queue_gauge` (which queue
//! is due, and how often: never more than a twentieth of the time) and
//! `queen.queue_counts` (the operator pages read the gauge when a queue has
//! one, and count a smaller queue on the spot); this task only drives them.

use std::time::Duration;

use tokio::sync::watch;

use crate::db::Pool;
use crate::EngineError;

/// Queues one tick may count before it sleeps again.
pub(crate) const MAX_QUEUES_PER_TICK: usize = 100;

/// Counts the due queue with the stalest gauge; `false` when none was due.
pub(crate) async fn refresh_one(
    pool: &Pool,
    min_partitions: i32,
    every: Duration,
) -> Result<bool, EngineError> {
    let client = pool.get().await?;
    let stmt = client
        .prepare_cached("SELECT queen.refresh_queue_gauge($1, make_interval(secs => $2::float8))")
        .await?;
    let row = client.query_one(&stmt, &[&min_partitions, &every.as_secs_f64()]).await?;
    Ok(row.try_get(0)?)
}

/// Every `every`, counts the queues whose gauges are due, one statement each.
pub(crate) async fn refresh_gauges(
    pool: Pool,
    every: Duration,
    min_partitions: i32,
    shutdown: watch::Receiver<bool>,
) {
    super::run("queue gauges", every, MAX_QUEUES_PER_TICK, None, shutdown, || async {
        Ok(if refresh_one(&pool, min_partitions, every).await? {
            super::Next::Again
        } else {
            super::Next::Sleep
        })
    })
    .await;
}
