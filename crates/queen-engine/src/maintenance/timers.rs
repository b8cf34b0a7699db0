//! The timer sweeper: fires due timers in bounded batches
//! (`crate::timers::fire_sealed`), then sleeps until the next is due.

use std::sync::Arc;
use std::time::Duration;

use tokio::sync::watch;

use super::Next;
use crate::db::Pool;
use crate::notifier::Announce;
use crate::timers::{fire_sealed, next_due_in, TimerStats};

/// The timer sweeper: every `every`, fires due timers in batches of
/// `batch` until none is left. Safe with many brokers (rows are claimed
/// with SKIP LOCKED); a failed round is retried on the next tick.
pub(crate) async fn sweep_timers(
    pool: Pool,
    every: Duration,
    batch: i32,
    announce: Announce,
    stats: Arc<TimerStats>,
    key: Option<crate::EncryptionKey>,
    shutdown: watch::Receiver<bool>,
) {
    // Idle, the sweeper sleeps until the next due timer, at most `IDLE_ROUNDS`
    // intervals: polling an empty table every interval cost a single
    // client's push 5% (measured). A schedule on this engine wakes it; one
    // on another engine is fired by that engine's own sweeper.
    const IDLE_ROUNDS: u32 = 5;
    let idle = every * IDLE_ROUNDS;
    super::run("timer sweep", every, usize::MAX, Some(&stats.wake), shutdown, || async {
        let fired = fire_sealed(&pool, batch, &announce, &stats, key.as_ref()).await?;
        if fired.fired as i32 >= batch {
            return Ok(Next::Again);
        }
        Ok(Next::SleepFor(match next_due_in(&pool).await? {
            Some(secs) => Duration::from_secs_f64(secs.max(0.0)).clamp(Duration::from_millis(5), idle),
            None => idle,
        }))
    })
    .await;
}
