//! `Engine`'s calls of `crate::push`: the facade over that module.

use crate::push::*;
use crate::{Engine, EngineError, Json};

impl Engine {
    /// Pushes a JSON array of items; answers the per-item results array.
    pub async fn push(&self, items: &str) -> Result<Json, EngineError> {
        self.push_items(decode_push_items(items)?).await
    }

    /// Pushes checked items; answers the per-item results array (201 body).
    /// Concurrent calls share a statement and a commit (the push batcher).
    ///
    /// With a spool (`EngineOptions::spool`), a push that cannot reach
    /// PostgreSQL, or finds pushes paused, is spooled and answered
    /// `buffered`; so is every push while the spool holds records, to keep
    /// each partition in the order the pushes were acknowledged (spool.rs).
    pub async fn push_items(&self, mut items: Vec<PushItem>) -> Result<Json, EngineError> {
        if items.is_empty() {
            return Ok(Json("[]".into()));
        }
        let Some(spool) = self.spool() else { return self.push_now(&items).await };
        draw_missing_ids(&mut items);
        if self.awaiting_migration() {
            let cause = EngineError::Unavailable("the database schema is not migrated yet".into());
            return self.spool_items(spool, &items, cause);
        }
        if spool.holds_records() {
            let cause = EngineError::Unavailable("the push spool is draining".into());
            return self.spool_items(spool, &items, cause);
        }
        match self.push_now(&items).await {
            Err(e @ (EngineError::Unavailable(_) | EngineError::Paused(_))) => {
                self.spool_items(spool, &items, e)
            }
            other => other,
        }
    }

    /// Pushes into PostgreSQL now, spool or not.
    pub(crate) async fn push_now(&self, items: &[PushItem]) -> Result<Json, EngineError> {
        let answer = match self.push_sealed(items).await {
            // A queue's encryption flag changed under our hint: learn it, seal again.
            Err(EngineError::EncryptionChanged(queues)) => {
                self.refresh_sealed(&queues).await?;
                self.push_sealed(items).await
            }
            other => other,
        }?;
        self.traffic_ref().pushed(items.len());
        Ok(answer)
    }

    async fn push_sealed(&self, items: &[PushItem]) -> Result<Json, EngineError> {
        let items = self.seal_items(items)?;
        if items.len() > BATCH_AT_MOST_ITEMS {
            let (cols, pushed) = push_call(self.pool(), items.iter(), None, &self.announce_fn()).await?;
            return cols.answer(&pushed, 0..items.len());
        }
        self.push_batcher().call(items.into_owned()).await
    }
}
