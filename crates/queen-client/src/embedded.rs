//! [`EmbeddedBroker`]: the [`Broker`] operations in process, over the
//! engine's calls (feature `embedded`).

use std::sync::Arc;
use std::time::Duration;

use queen_engine::{DbConfig, Engine, EngineError, EngineOptions};
use queen_wire::{DlqQuery, EphemeralPop, Json, PopRequest, ReplayTarget};

use crate::broker::{Broker, EphemeralVerb, Seek, StreamVerb};
use crate::error::{Error, Result};

/// The broker inside this process: the engine's SQL calls, no HTTP.
#[derive(Clone)]
pub struct EmbeddedBroker {
    engine: Arc<Engine>,
}

impl EmbeddedBroker {
    /// Wraps an engine that is already connected (and migrated).
    pub fn new(engine: Arc<Engine>) -> Self {
        EmbeddedBroker { engine }
    }

    /// Connects an engine to `db`, applies the migrations, and wraps it.
    pub async fn connect(db: &DbConfig, options: EngineOptions) -> Result<Self> {
        let engine = Engine::connect(db, options)?;
        engine.migrate().await?;
        Ok(EmbeddedBroker { engine: Arc::new(engine) })
    }

    /// The engine.
    pub fn engine(&self) -> &Arc<Engine> {
        &self.engine
    }

    /// Wakes the long polls and closes the pool; later calls fail.
    pub fn close(&self) {
        self.engine.close();
    }
}

/// A business refusal is the 200 answer of the HTTP route.
fn refusal_is_answer(r: std::result::Result<Json, EngineError>) -> Result<Json> {
    match r {
        Ok(json) => Ok(json),
        Err(EngineError::Refused(body)) => Ok(Json(body)),
        Err(e) => Err(e.into()),
    }
}

impl Broker for EmbeddedBroker {
    async fn configure(&self, body: &str) -> Result<Json> {
        Ok(self.engine.configure(body).await?)
    }

    async fn push(&self, items: &str) -> Result<Json> {
        Ok(self.engine.push(items).await?)
    }

    async fn pop(&self, req: &PopRequest, wait: Option<Duration>) -> Result<Option<Json>> {
        Ok(match wait {
            Some(timeout) => self.engine.pop_wait(req, timeout).await?,
            None => self.engine.pop(req).await?,
        })
    }

    async fn ack(&self, items: &str, consumer_group: Option<&str>) -> Result<Json> {
        Ok(self.engine.ack(items, consumer_group).await?)
    }

    async fn extend_lease(&self, lease_id: &str, seconds: u32) -> Result<Json> {
        let seconds = i32::try_from(seconds).map_err(|_| Error::Invalid("lease seconds too large".into()))?;
        Ok(self.engine.extend_lease(lease_id, seconds).await?)
    }

    async fn transaction(&self, body: &str) -> Result<Json> {
        refusal_is_answer(self.engine.transaction(body).await)
    }

    async fn dlq(&self, query: &DlqQuery) -> Result<Json> {
        Ok(self.engine.dlq(query).await?)
    }

    async fn dlq_replay(&self, dlq_id: i64, target: &ReplayTarget) -> Result<Json> {
        Ok(self.engine.dlq_replay(dlq_id, target).await?)
    }

    async fn dlq_purge(&self, queue: &str, consumer_group: Option<&str>) -> Result<Json> {
        Ok(self.engine.dlq_purge(queue, consumer_group).await?)
    }

    async fn delete_queue(&self, queue: &str) -> Result<Json> {
        Ok(self.engine.delete_queue(queue).await?)
    }

    async fn consumer_groups(&self, group: Option<&str>) -> Result<Json> {
        Ok(self.engine.consumer_groups(group, None).await?)
    }

    async fn lagging_groups(&self, min_lag_seconds: u32) -> Result<Json> {
        let min = min_lag_seconds.min(i32::MAX as u32);
        Ok(self.engine.consumer_groups(None, Some(f64::from(min))).await?)
    }

    async fn delete_consumer_group(
        &self,
        group: &str,
        queue: Option<&str>,
        delete_metadata: bool,
    ) -> Result<Json> {
        Ok(self.engine.delete_consumer_group(group, queue, delete_metadata).await?)
    }

    async fn update_subscription(&self, group: &str, timestamp: &str) -> Result<Json> {
        Ok(self.engine.update_subscription(group, Some(timestamp)).await?)
    }

    async fn seek(&self, group: &str, queue: &str, partition: Option<&str>, to: &Seek) -> Result<Json> {
        let (to_end, timestamp) = to.parts();
        Ok(self.engine.seek(group, queue, partition, to_end, timestamp).await?)
    }

    async fn kv(&self, body: &str) -> Result<Json> {
        refusal_is_answer(self.engine.kv(body).await)
    }

    async fn kv_namespaces(&self) -> Result<Json> {
        Ok(self.engine.kv_namespace_counts().await?)
    }

    async fn kv_list(&self, body: &str) -> Result<Json> {
        let request = queen_engine::decode_kv_list(body)?;
        Ok(self.engine.kv_list(&request).await?)
    }

    async fn locks(&self, body: &str) -> Result<Json> {
        Ok(self.engine.locks(body).await?)
    }

    async fn timers(&self, body: &str) -> Result<Json> {
        Ok(self.engine.timers(body).await?)
    }

    async fn timer_cancel(&self, queue: &str, key: &str, txn: Option<&str>) -> Result<Json> {
        Ok(self.engine.timer_cancel(queue, key, txn).await?)
    }

    async fn timer_peek(&self, queue: &str, key: &str) -> Result<Json> {
        Ok(self.engine.timer_peek(queue, key).await?)
    }

    async fn timer_list(&self, queue: &str, after: Option<&str>, limit: Option<u32>) -> Result<Json> {
        Ok(self.engine.timer_list(queue, after, limit.map(i64::from)).await?)
    }

    async fn fetch(&self, body: &str) -> Result<Json> {
        Ok(self.engine.fetch(body).await?)
    }

    async fn partitions_changed(&self, body: &str) -> Result<Json> {
        Ok(self.engine.partitions_changed(body).await?)
    }

    async fn ephemeral(&self, verb: EphemeralVerb, body: &str) -> Result<Json> {
        Ok(match verb {
            EphemeralVerb::Configure => self.engine.ephemeral_configure(body).await?,
            EphemeralVerb::Push => self.engine.ephemeral_push(body).await?,
            EphemeralVerb::Ack => self.engine.ephemeral_ack(body).await?,
            EphemeralVerb::Reset => self.engine.ephemeral_reset(body).await?,
        })
    }

    async fn ephemeral_pop(&self, req: &EphemeralPop) -> Result<Json> {
        Ok(self.engine.ephemeral_pop(req).await?)
    }

    async fn ephemeral_delete(&self, queue: &str) -> Result<Json> {
        Ok(self.engine.ephemeral_delete(queue).await?)
    }

    async fn ephemeral_depth(&self, queue: &str) -> Result<Json> {
        Ok(self.engine.ephemeral_depth(queue, None).await?)
    }

    async fn streams(&self, verb: StreamVerb, body: &str) -> Result<Json> {
        let answer = match verb {
            StreamVerb::Register => self.engine.stream_register(body).await,
            StreamVerb::State => self.engine.stream_state(body).await,
            StreamVerb::Cycle => self.engine.stream_cycle(body).await,
        };
        match answer {
            Err(EngineError::Refused(body)) => Ok(Json(body)),
            other => Ok(other?),
        }
    }
}
