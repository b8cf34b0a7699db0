//! `Engine`'s calls of `crate::fill_wait`: the facade over that module.

use crate::{Engine, EngineError, PopRequest, QUEUE_MODE};
use std::time::Duration;
use tokio::time::Instant;

impl Engine {
    /// The queue's `minPopWaitTime` (zero for a queue not yet created).
    async fn min_pop_wait(&self, queue: &str) -> Result<Duration, EngineError> {
        if let Some(wait) = self.fill_waits().cached(queue) {
            return Ok(wait);
        }
        let client = self.pool().get().await?;
        let stmt = client.prepare_cached(include_str!("../../sql/statements/fill_wait.sql")).await?;
        let row = client.query_opt(&stmt, &[&queue]).await?;
        let millis = row.map(|r| r.try_get::<_, i32>(0)).transpose()?.unwrap_or(0);
        self.fill_waits().learn(queue, u64::try_from(millis).unwrap_or(0));
        Ok(Duration::from_millis(u64::try_from(millis).unwrap_or(0)))
    }

    /// Holds a long poll's claim while its queue's backlog is non-empty but
    /// smaller than the batch, until the queue's fill wait or `deadline`
    /// passes, or the backlog fills the batch. Pushes wake it through
    /// `notified`'s waiters; without one it re-checks every poll interval.
    pub(crate) async fn fill_wait(&self, req: &PopRequest, deadline: Instant) -> Result<(), EngineError> {
        if req.batch <= 1 || req.is_by_tag() {
            return Ok(());
        }
        let wait = self.min_pop_wait(&req.queue).await?;
        if wait.is_zero() {
            return Ok(());
        }
        let until = (Instant::now() + wait).min(deadline);
        let group = req.consumer_group.as_deref().unwrap_or(QUEUE_MODE);
        let handle = self.waiters_ref().handle(&req.queue);
        let result = async {
            loop {
                let notified = handle.notified();
                tokio::pin!(notified);
                notified.as_mut().enable();
                let backlog: Option<i32> = {
                    let client = self.pool().get().await?;
                    let stmt = client.prepare_cached("SELECT queen.pop_backlog($1, $2, $3, $4)").await?;
                    client
                        .query_one(&stmt, &[&req.queue, &req.partition, &group, &req.batch])
                        .await?
                        .try_get(0)?
                };
                // Empty (a plain long poll from here) or full: claim now.
                let under_full = matches!(backlog, Some(n) if n > 0 && n < req.batch);
                let now = Instant::now();
                if !under_full || now >= until {
                    return Ok(());
                }
                let nap = (until - now).min(self.poll_interval());
                tokio::select! {
                    _ = &mut notified => {}
                    _ = tokio::time::sleep(nap) => {}
                }
            }
        }
        .await;
        self.waiters_ref().release(&req.queue, handle);
        result
    }
}
