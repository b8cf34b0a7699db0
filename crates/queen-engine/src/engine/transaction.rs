//! `Engine`'s calls of `crate::transaction`: the facade over that module.

use crate::push::{PushColumns, PushItem};
use crate::timers::{self, TimerColumns};
use crate::transaction::*;
use crate::wire::{self};
use crate::{Engine, EngineError, Json};

impl Engine {
    /// Pushes, acks and KV operations in one commit. A refused bundle (a
    /// rejected ack, a duplicate push, a lost `required` precondition) is
    /// `Err(EngineError::Refused(body))` and changed nothing.
    pub async fn transaction(&self, body: &str) -> Result<Json, EngineError> {
        self.transaction_by(body, None).await
    }

    /// As [`Engine::transaction`], with the pushes stamped with their
    /// producer's identity (the caller's authenticated `sub`).
    pub async fn transaction_by(&self, body: &str, producer_sub: Option<&str>) -> Result<Json, EngineError> {
        let mut bundle = decode_bundle_for(body, self.timer_horizon())?;
        if let Some(sub) = producer_sub {
            for (_, item) in &mut bundle.pushes {
                item.producer_sub = Some(sub.to_owned());
            }
            bundle.producer_sub = Some(sub.to_owned());
        }
        self.transaction_bundle(bundle).await
    }

    /// Applies a checked bundle in one commit. A bundle of acks and KV ops
    /// only (no pushes, no timers) goes through the bundle batcher, where
    /// concurrent ones share a statement and a commit.
    pub async fn transaction_bundle(&self, bundle: Bundle) -> Result<Json, EngineError> {
        let answer = match self.bundle_batcher() {
            Some(batcher) if bundle.batchable() => {
                let acked = bundle.acks.len();
                let answer = batcher.call(bundle).await?;
                self.traffic_ref().acked(acked);
                return Ok(answer);
            }
            _ => self.bundle_sealed(&bundle).await,
        };
        match answer {
            // Rolled back whole: learn the queue's encryption flag and send it again.
            Err(EngineError::EncryptionChanged(queues)) => {
                self.refresh_sealed(&queues).await?;
                self.bundle_sealed(&bundle).await
            }
            other => other,
        }
    }

    async fn bundle_sealed(&self, bundle: &Bundle) -> Result<Json, EngineError> {
        if bundle.timers.len() > timers::MAX_OPS_IN_TX {
            return Err(wire::bad_request("timers", "holds more than 64 timer operations"));
        }
        timers::check_ops(&bundle.timers, self.timer_horizon())?;
        let (push_slots, mut items): (Vec<i32>, Vec<PushItem>) = bundle.pushes.iter().cloned().unzip();
        crate::push::own_transaction_ids(&mut items);
        let items = self.seal_items(&items)?;
        let mut queues: Vec<String> = items.iter().map(|i| i.queue.clone()).collect();
        let push = PushColumns::of(items.iter());
        let timer_ops = self.seal_timer_ops(&bundle.timers)?;
        let timer_columns = TimerColumns::of(&timer_ops);
        let answer =
            bundle_call(self.pool(), bundle, &push_slots, &push, &timer_columns, self.kv_max_read_bytes())
                .await?;
        queues.sort();
        queues.dedup();
        self.announce_pushes(queues);
        if !bundle.timers.is_empty() {
            self.timer_stats_ref().wake.notify_one();
        }
        self.traffic_ref().pushed(bundle.pushes.len());
        self.traffic_ref().acked(bundle.acks.len());
        Ok(answer)
    }
}
