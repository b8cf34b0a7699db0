//! `Engine`'s calls of `crate::timers`: the facade over that module.

use crate::timers::*;
use crate::wire::{self};
use crate::{Engine, EngineError, Json};

fn written(answer: &impl serde::Serialize) -> Result<Json, EngineError> {
    serde_json::to_string(answer).map(Json).map_err(|e| EngineError::Protocol(e.to_string()))
}

impl Engine {
    /// A timers call given as wire JSON: `{"results": [...]}`.
    pub async fn timers(&self, body: &str) -> Result<Json, EngineError> {
        self.timers_by(body, None).await
    }

    /// As [`Engine::timers`], the timers stamped with the caller's
    /// authenticated `sub`, which their fired messages carry as producerSub.
    pub async fn timers_by(&self, body: &str, producer_sub: Option<&str>) -> Result<Json, EngineError> {
        let ops = decode_timers(body, self.timer_horizon())?;
        let results = self.run_timers(&ops, producer_sub).await?;
        serde_json::to_string(&Results { results })
            .map(Json)
            .map_err(|e| EngineError::Protocol(e.to_string()))
    }

    /// Typed timer ops, checked as the HTTP route checks them.
    pub async fn timer_ops(&self, ops: &[TimerOp]) -> Result<Vec<TimerResult>, EngineError> {
        if ops.len() > MAX_OPS {
            return Err(bad(
                "timers_too_many_ops",
                &format!("at most {MAX_OPS} timer operations in operations"),
            ));
        }
        check_ops(ops, self.timer_horizon())?;
        for op in ops {
            if let TimerOp::Schedule { payload, .. } = op {
                if wire::has_nul_escape(payload.get()) {
                    return Err(bad("timers_bad_payload", "payload must not contain NUL (\\u0000)"));
                }
            }
        }
        self.run_timers(ops, None).await
    }

    /// The ops' outcomes, in op order.
    async fn run_timers(&self, ops: &[TimerOp], sub: Option<&str>) -> Result<Vec<TimerResult>, EngineError> {
        if ops.is_empty() {
            return Ok(Vec::new());
        }
        match self.run_timers_sealed(ops, sub).await {
            // A queue turned encrypted under our hint: learn it, seal, resend.
            Err(EngineError::EncryptionChanged(queues)) => {
                self.refresh_sealed(&queues).await?;
                self.run_timers_sealed(ops, sub).await
            }
            other => other,
        }
    }

    async fn run_timers_sealed(
        &self,
        ops: &[TimerOp],
        sub: Option<&str>,
    ) -> Result<Vec<TimerResult>, EngineError> {
        let ops = self.seal_timer_ops(ops)?;
        let c = TimerColumns::of(&ops);
        let client = self.pool().get().await?;
        let stmt = client.prepare_cached(include_str!("../../sql/statements/timers.sql")).await?;
        let mut params = c.params().to_vec();
        params.push(&sub);
        let row = client.query_one(&stmt, &params).await?;
        if ops.iter().any(|op| matches!(op, TimerOp::Schedule { .. })) {
            self.timer_stats_ref().wake.notify_one();
        }
        TimerOutcomes::read(&row)?.results(&ops)
    }

    /// Cancels one timer; never waits for a fire in progress (`too_late`).
    pub async fn timer_cancel(&self, queue: &str, key: &str, txn: Option<&str>) -> Result<Json, EngineError> {
        check_name(queue, "queue", 255)?;
        check_name(key, "timerKey", MAX_KEY_BYTES)?;
        let op =
            TimerOp::Cancel { queue: queue.to_owned(), key: key.to_owned(), txn: txn.map(str::to_owned) };
        let result = self.run_timers(&[op], None).await?.pop();
        written(&result.ok_or_else(|| EngineError::Protocol("a timer cancel answered nothing".into()))?)
    }

    /// One timer with its payload (opened, when sealed at rest), or `{"found": false}`.
    pub async fn timer_peek(&self, queue: &str, key: &str) -> Result<Json, EngineError> {
        check_name(queue, "queue", 255)?;
        check_name(key, "timerKey", MAX_KEY_BYTES)?;
        let timer = timer_row(self.pool(), queue, key, |p| self.open_sealed(p)).await?;
        written(&TimerPeek::of(timer))
    }

    /// A keyset page of one queue's pending timers (limit clamped to 1..=1000).
    pub async fn timer_list(
        &self,
        queue: &str,
        after: Option<&str>,
        limit: Option<i64>,
    ) -> Result<Json, EngineError> {
        check_name(queue, "queue", 255)?;
        let limit = limit.unwrap_or(100).clamp(1, 1000) as usize;
        let rows = timer_page(self.pool(), queue, after, limit).await?;
        written(&TimerPage::of(rows, limit))
    }

    /// Fires up to `limit` due timers in one transaction (the sweeper
    /// calls this on every broker; tests call it to fire now).
    pub async fn fire_due_timers(&self, limit: i32) -> Result<Fired, EngineError> {
        fire_sealed(self.pool(), limit, &self.announce_fn(), self.timer_stats_ref(), self.encryption_key())
            .await
    }

    /// Timers fired by this engine, and their fire lag.
    pub fn timer_stats(&self) -> TimerStatsSnapshot {
        self.timer_stats_ref().snapshot()
    }

    /// Pending timers, those already due, and lock permits held: one read.
    pub async fn timer_and_lock_gauges(&self) -> Result<(i64, i64, i64), EngineError> {
        let client = self.pool().get().await?;
        let stmt = client.prepare_cached(include_str!("../../sql/statements/timer_lock_gauges.sql")).await?;
        let row = client.query_one(&stmt, &[]).await?;
        Ok((row.try_get(0)?, row.try_get(1)?, row.try_get(2)?))
    }
}
