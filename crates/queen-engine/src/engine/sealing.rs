//! `Engine`'s calls of `crate::sealing`: the facade over that module.

use crate::push::PushItem;
use crate::sealing::*;
use crate::{Engine, EngineError};
use serde_json::value::RawValue;

impl Engine {
    /// Opens the envelopes in an answer built by SQL.
    pub(crate) fn open_sealed(&self, text: String) -> Result<String, EngineError> {
        open_all(self.encryption_key(), text)
    }

    /// `answer` written as JSON, its payloads sealed at rest opened.
    pub(crate) fn answer_opened(&self, answer: &impl serde::Serialize) -> Result<crate::Json, EngineError> {
        let text = serde_json::to_string(answer).map_err(|e| EngineError::Protocol(e.to_string()))?;
        self.open_sealed(text).map(crate::Json)
    }

    /// Seals the payloads of items bound for queues believed encrypted.
    /// Borrowed as is when no queue is (the common case).
    pub(crate) fn seal_items<'a>(
        &self,
        items: &'a [PushItem],
    ) -> Result<std::borrow::Cow<'a, [PushItem]>, EngineError> {
        let sealed = self.sealed_queues();
        if sealed.is_empty() || !items.iter().any(|i| sealed.contains(&i.queue)) {
            return Ok(std::borrow::Cow::Borrowed(items));
        }
        let key = self.encryption_key().ok_or_else(|| missing_key_for(items, sealed))?;
        let mut out = items.to_vec();
        for item in out.iter_mut().filter(|i| sealed.contains(&i.queue)) {
            let plain = item.payload.as_ref().map_or("null", |p| p.get());
            let envelope = key.seal(plain)?;
            item.payload = Some(
                RawValue::from_string(envelope)
                    .map_err(|e| EngineError::Protocol(format!("sealed payload: {e}")))?,
            );
        }
        Ok(std::borrow::Cow::Owned(out))
    }

    /// Seals the payloads of timers scheduled into queues believed encrypted
    /// (a timer fires its stored payload as is). Borrowed when none is.
    pub(crate) fn seal_timer_ops<'a>(
        &self,
        ops: &'a [crate::timers::TimerOp],
    ) -> Result<std::borrow::Cow<'a, [crate::timers::TimerOp]>, EngineError> {
        use crate::timers::TimerOp;
        let sealed = self.sealed_queues();
        let bound = |op: &TimerOp| matches!(op, TimerOp::Schedule { queue, .. } if sealed.contains(queue));
        if sealed.is_empty() || !ops.iter().any(bound) {
            return Ok(std::borrow::Cow::Borrowed(ops));
        }
        let key = self.encryption_key().ok_or_else(|| {
            EngineError::Encryption(
                "a timer's queue is encrypted at rest and this broker has no QUEEN_ENCRYPTION_KEY".into(),
            )
        })?;
        let mut out = ops.to_vec();
        for op in out.iter_mut() {
            if let TimerOp::Schedule { queue, payload, .. } = op {
                if sealed.contains(queue) {
                    *payload = RawValue::from_string(key.seal(payload.get())?)
                        .map_err(|e| EngineError::Protocol(format!("sealed payload: {e}")))?;
                }
            }
        }
        Ok(std::borrow::Cow::Owned(out))
    }

    /// Whether this engine believes `queue` is encrypted (a hint).
    pub(crate) fn is_sealed_queue(&self, queue: &str) -> bool {
        self.sealed_queues().contains(queue)
    }

    /// Whether a queue is encrypted now (false when it does not exist).
    pub(crate) async fn queue_encrypted(&self, queue: &str) -> Result<bool, EngineError> {
        let client = self.pool().get().await?;
        let stmt =
            client.prepare_cached(include_str!("../../sql/statements/seal_queue_encrypted.sql")).await?;
        Ok(client.query_one(&stmt, &[&queue]).await?.try_get(0)?)
    }

    /// Re-reads the encryption flag of `queues` after a QN409.
    pub(crate) async fn refresh_sealed(&self, queues: &[String]) -> Result<(), EngineError> {
        let client = self.pool().get().await?;
        let stmt =
            client.prepare_cached(include_str!("../../sql/statements/seal_queues_encrypted.sql")).await?;
        let rows = client.query(&stmt, &[&queues]).await?;
        drop(client);
        for q in queues {
            let encrypted = rows.iter().any(|r| r.get::<_, &str>(0) == q && r.get::<_, bool>(1));
            self.sealed_queues().set(q, encrypted);
        }
        Ok(())
    }
}

impl Engine {
    /// Seals what a queue stored before its encryption was turned on (its
    /// messages, dead letters, timers and stream state). Run after the
    /// configure commits: configure waits for pushes in flight, so every
    /// plain row of the queue is visible to this pass.
    pub(crate) async fn seal_queue_at_rest(&self, queue: &str) -> Result<u64, EngineError> {
        let Some(key) = self.encryption_key() else { return Ok(0) };
        reseal_tables(self.pool(), key, Some(queue), &SEALED_TABLES, 500, |_, _| {}).await
    }

    /// At start-up, after the migrations: refuses to serve when rows are
    /// sealed with a key this broker does not hold (naming it); moves the
    /// queues of a retired key it holds to its current key; records its
    /// current key as one that may seal rows. `queen serve` runs it after
    /// `migrate` (not `queen migrate`, which holds no key).
    pub async fn check_encryption_keys(&self) -> Result<(), EngineError> {
        let ids = self.encryption_key().map(EncryptionKey::ids).unwrap_or_default();
        let mut client = self.pool().get().await?;
        // One transaction: behind a transaction-mode pooler its statements
        // stay on one server, prepared statements or not (as the migration).
        let tx = client.transaction().await?;
        if let Some(key) = self.encryption_key() {
            tx.execute(include_str!("../../sql/statements/seal_keys_adopt.sql"), &[&key.id(), &ids]).await?;
        }
        let missing: Vec<String> = tx
            .query_one(include_str!("../../sql/statements/seal_keys_unheld.sql"), &[&ids])
            .await?
            .try_get(0)?;
        if missing.is_empty() {
            tx.commit().await?;
            return Ok(());
        }
        // A key recorded but not held: look for its rows (a scan, only in
        // this case); a key no row uses any more is forgotten.
        let found: Vec<String> =
            tx.query_one("SELECT queen.sealed_key_ids_other_than($1)", &[&ids]).await?.try_get(0)?;
        if let Some(id) = found.first() {
            return Err(EngineError::Encryption(format!(
                "rows are sealed with key id {id}, which this broker does not have (its key ids: {}); \
                 add that key to QUEEN_ENCRYPTION_KEYS, or re-seal with `queen encryption rotate` \
                 on a host that holds it",
                if ids.is_empty() { "none".to_owned() } else { ids.join(", ") }
            )));
        }
        tx.execute(include_str!("../../sql/statements/seal_keys_forget.sql"), &[&missing]).await?;
        tx.commit().await?;
        Ok(())
    }
}
