//! `Engine`'s pops: one attempt, and the long poll that waits for messages.

use std::time::Duration;

use tokio::time::Instant;

use crate::pop::PopRequest;
use crate::sealing::EncryptionKey;
use crate::{Engine, EngineError, Json};

impl Engine {
    /// One pop attempt; `None` when nothing is deliverable now.
    pub async fn pop(&self, req: &PopRequest) -> Result<Option<Json>, EngineError> {
        let defaulted = crate::pop::with_default_subscription(req, self.options.default_subscription_mode);
        let req = defaulted.as_ref().unwrap_or(req);
        let key_id = self.encryption_key().map(EncryptionKey::id);
        let popped = if req.is_by_tag() {
            // A pop by namespace/task names tags where a queue pop names its
            // queue and partition; the rest of the call is the same.
            crate::pop::pop_matching_call(self.pool(), req, key_id).await?
        } else {
            match &self.pop_batcher {
                Some(batcher) => batcher.call(req.clone()).await?,
                None => crate::pop::pop_call(&self.pool, req, key_id).await?,
            }
        };
        let Some(popped) = popped else { return Ok(None) };
        // The payloads may be sealed at rest: each is opened on its own.
        let answer = popped.answer(|payload| self.open_sealed(payload))?;
        let answer = serde_json::to_string(&answer).map_err(|e| EngineError::Protocol(e.to_string()))?;
        self.traffic_ref().popped();
        Ok(Some(Json(answer)))
    }

    /// Long poll: pops until a message is delivered, `timeout` passes, or the
    /// engine shuts down. Woken by push notifications, with polling as the
    /// fallback.
    pub async fn pop_wait(&self, req: &PopRequest, timeout: Duration) -> Result<Option<Json>, EngineError> {
        let deadline = Instant::now() + timeout;
        // The queue's minPopWaitTime: an under-full batch may wait to fill.
        self.fill_wait(req, deadline).await?;
        let handle = self.waiters.handle(crate::pop::waiter_key(req));
        let mut shutdown = self.shutdown.subscribe();
        let result = loop {
            let notified = handle.notified();
            tokio::pin!(notified);
            // Registered before the attempt, so a push between the attempt
            // and the wait is not missed.
            notified.as_mut().enable();
            // An unreachable database does not end the wait: the poll keeps
            // trying until its deadline and answers 503 only if the database
            // is still gone then. Any other error ends it at once.
            let unavailable = match self.pop(req).await {
                Ok(Some(found)) => break Ok(Some(found)),
                Ok(None) => None,
                Err(
                    e
                    @ (EngineError::Unavailable(_) | EngineError::Conflict(_) | EngineError::Timeout { .. }),
                ) => Some(e),
                Err(e) => break Err(e),
            };
            let now = Instant::now();
            if now >= deadline || *shutdown.borrow() {
                break unavailable.map_or(Ok(None), Err);
            }
            let nap = (deadline - now).min(self.options.poll_interval);
            tokio::select! {
                _ = &mut notified => {}
                _ = tokio::time::sleep(nap) => {}
                _ = shutdown.changed() => break Ok(None),
            }
        };
        self.waiters.release(crate::pop::waiter_key(req), handle);
        result
    }

    /// Extends every partition lease held under `lease_id`.
    pub async fn extend_lease(&self, lease_id: &str, seconds: i32) -> Result<Json, EngineError> {
        let renewal = crate::pop::extend_lease(self.pool(), lease_id, seconds).await?;
        serde_json::to_string(&renewal).map(Json).map_err(|e| EngineError::Protocol(e.to_string()))
    }
}
