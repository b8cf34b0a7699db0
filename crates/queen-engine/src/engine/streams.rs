//! `Engine`'s calls of `crate::streams`: the facade over that module.

use crate::push::{PushColumns, Pushed};
use crate::streams::*;
use crate::{CycleRefusal, Engine, EngineError, Json};

impl Engine {
    /// `POST /streams/v1/queries`.
    pub async fn stream_register(&self, body: &str) -> Result<Json, EngineError> {
        self.stream_register_query(&decode_registration(body)?).await
    }

    /// Registers (or re-registers) a query; answers the runner's JSON.
    pub async fn stream_register_query(&self, r: &StreamRegistration) -> Result<Json, EngineError> {
        let answer = register(self.pool(), r).await?;
        serde_json::to_string(&answer).map(Json).map_err(|e| EngineError::Protocol(e.to_string()))
    }

    /// `POST /streams/v1/state/get`.
    pub async fn stream_state(&self, body: &str) -> Result<Json, EngineError> {
        self.stream_state_read(&decode_state_read(body)?).await
    }

    /// Reads state rows; no rows for ids that name nothing.
    pub async fn stream_state_read(&self, r: &StateRead) -> Result<Json, EngineError> {
        // Sealed state (an encrypted source) is opened row by row.
        let rows = state_rows(self.pool(), r, |value| self.open_sealed(value)).await?;
        serde_json::to_string(&StateRows { success: true, rows })
            .map(Json)
            .map_err(|e| EngineError::Protocol(e.to_string()))
    }

    /// `POST /streams/v1/cycle`.
    pub async fn stream_cycle(&self, body: &str) -> Result<Json, EngineError> {
        self.stream_cycle_by(body, None).await
    }

    /// As [`Engine::stream_cycle`], the emits stamped with the caller's
    /// authenticated `sub` (producerSub), as a push's items are.
    pub async fn stream_cycle_by(&self, body: &str, producer_sub: Option<&str>) -> Result<Json, EngineError> {
        let mut cycle = decode_cycle(body)?;
        if let Some(sub) = producer_sub {
            for item in &mut cycle.pushes {
                item.producer_sub = Some(sub.to_owned());
            }
        }
        self.stream_cycle_run(&cycle).await
    }

    /// Commits one cycle; a refusal is `EngineError::Refused` with the runner's answer.
    pub async fn stream_cycle_run(&self, c: &Cycle) -> Result<Json, EngineError> {
        let mut seal_state = false;
        let mut tries = 0;
        loop {
            let sealed_before: Vec<String> =
                c.pushes.iter().map(|p| p.queue.clone()).filter(|q| self.is_sealed_queue(q)).collect();
            match self.stream_cycle_sealed(c, seal_state).await {
                // An emit bound for a queue that just turned encrypted, or
                // state of an encrypted source: learn it, seal, resend. A
                // queue named whose emits were already sealed can only be
                // the source, so its state is sealed from then on.
                Err(EngineError::EncryptionChanged(queues)) if tries < 3 => {
                    tries += 1;
                    let source = queues.iter().all(|q| sealed_before.contains(q));
                    let source = source || queues.iter().all(|q| !c.pushes.iter().any(|p| &p.queue == q));
                    self.refresh_sealed(&queues).await?;
                    seal_state = seal_state || source;
                }
                other => return other,
            }
        }
    }

    async fn stream_cycle_sealed(&self, c: &Cycle, seal_state: bool) -> Result<Json, EngineError> {
        let mut items = c.pushes.clone();
        crate::push::own_transaction_ids(&mut items);
        let pushes = self.seal_items(&items)?;
        let push = PushColumns::of(pushes.iter());
        let upsert_keys: Vec<&str> = c.upserts.iter().map(|(k, _)| k.as_str()).collect();
        let upsert_values: Vec<&str> = c.upserts.iter().map(|(_, v)| v.get()).collect();
        // The state of an encrypted source, sealed (SQL keeps only windowEnd of the value).
        let upsert_sealed: Option<Vec<String>> = match (
            seal_state && !c.upserts.is_empty(),
            self.encryption_key(),
        ) {
            (false, _) => None,
            (true, None) => return Err(EngineError::Encryption(
                "a stream's source queue is encrypted at rest and this broker has no QUEEN_ENCRYPTION_KEY"
                    .into(),
            )),
            (true, Some(key)) => Some(upsert_values.iter().map(|v| key.seal(v)).collect::<Result<_, _>>()?),
        };
        let ack = c.ack.as_ref();
        let client = self.pool().get().await?;
        let stmt = client.prepare_cached(include_str!("../../sql/statements/stream_cycle.sql")).await?;
        let row = match client
            .query_one(
                &stmt,
                &[
                    &c.query_id,
                    &c.partition_id,
                    &c.consumer_group,
                    &upsert_keys,
                    &upsert_values,
                    &upsert_sealed,
                    &c.deletes,
                    &push.queues,
                    &push.partitions,
                    &push.transaction_ids,
                    &push.trace_ids,
                    &push.payloads,
                    &ack.is_some(),
                    &ack.and_then(|a| a.transaction_id.as_deref()),
                    &ack.map(|a| a.lease_id.as_str()),
                    &ack.map_or("completed", |a| a.status.as_str()),
                    &ack.map_or(0, |a| a.count),
                    &c.release_lease,
                    &push.subs(),
                ],
            )
            .await
        {
            Ok(row) => row,
            Err(EngineError::CycleRefused(CycleRefusal::Refused(error))) => return Err(refused(&error)),
            // A copy committed while this one waited: it rolled back, and
            // answers as the replay it is.
            Err(EngineError::CycleRefused(CycleRefusal::Replayed { queue_name })) => {
                let done =
                    CycleDone { replayed: true, queue_name, state_ops: 0, released: false, dlq: false };
                return cycle_answer(c, &done, None);
            }
            Err(e) => return Err(e),
        };
        drop(client);
        let done = CycleDone {
            replayed: row.try_get(0)?,
            queue_name: row.try_get(1)?,
            state_ops: row.try_get(2)?,
            released: row.try_get(3)?,
            dlq: row.try_get(4)?,
        };
        let queued: Option<Vec<String>> = row.try_get(5)?;
        let ids: Option<Vec<Option<uuid::Uuid>>> = row.try_get(6)?;
        if let Some(queues) = queued.filter(|q| !q.is_empty()) {
            self.announce_pushes(queues);
        }
        // No ids: the cycle pushed nothing (none to push, or a replay).
        let push_results = match ids {
            Some(ids) => {
                let pushed = Pushed { verdicts: "q".repeat(ids.len()), ids };
                Some(push.answer(&pushed, 0..pushed.ids.len())?)
            }
            None => None,
        };
        cycle_answer(c, &done, push_results.as_ref())
    }
}
