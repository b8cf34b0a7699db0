//! The engine: one method per API operation, each one round trip.

mod ack;
mod admin;
mod dlq;
mod ephemeral;
mod fill_wait;
mod gauges;
mod groups;
mod kv;
mod kv_browse;
mod locks;
mod pop;
mod push;
mod reads;
mod retention;
mod sealing;
mod spool;
mod streams;
mod timers;
mod transaction;

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use crate::db::Pool;
use tokio::sync::watch;
use tokio_postgres::types::ToSql;

use crate::ack::AckBatcher;
use crate::batch::{BatchKind, BatchSizes, BatchStats};
use crate::ephemeral::Ephemeral;
use crate::groups::SubscriptionMode;
use crate::kv::read::GetBatcher;
use crate::kv::write::WriteBatcher;
use crate::maintenance::retention::RetentionStats;
use crate::notifier::{self, Announcer, Waiters};
use crate::pop::PopBatcher;
use crate::push::PushBatcher;
use crate::sealing::{EncryptionKey, SealedQueues};
use crate::timers::TimerStats;
use crate::transaction::BundleBatcher;
use crate::{DbConfig, EngineError, Json};

/// Tuning that does not change semantics.
#[derive(Debug, Clone)]
pub struct EngineOptions {
    /// How often a long poll re-checks without a notification (lease
    /// expiry, delayed messages and missed notifications rely on it).
    pub poll_interval: Duration,
    /// Byte ceiling of one multi-key KV read (`QUEEN_KV_MAX_READ_BYTES`).
    pub kv_max_read_bytes: i64,
    /// How often the KV sweeper runs; `None` disables it.
    pub kv_sweep_interval: Option<Duration>,
    /// Rows the sweeper deletes per statement.
    pub kv_sweep_batch: i32,
    /// Tell other brokers on the database of pushes (one coalesced NOTIFY
    /// outside the pushing transaction). Off, their long polls find new
    /// messages at their next re-check (`poll_interval`).
    pub cross_broker_wakeups: bool,
    /// Single-key KV gets that arrive together share one statement; this
    /// many such statements may run at once (0: every get runs alone). One
    /// is best for reads: a get waits for no flush, so a second statement
    /// in flight only splits the batch and adds a statement's fixed cost.
    pub kv_get_batch_slots: usize,
    /// Single-op KV writes that arrive together share one statement and
    /// one commit; this many such statements may run at once (0: every
    /// write runs alone). One is the default for writes too: everything
    /// that arrives during a commit joins the next one, where a second
    /// statement in flight splits the batch and adds a commit
    /// (bench/journal/2026-12-04-one-slot-per-batcher.md).
    pub kv_write_batch_slots: usize,
    /// Concurrent push requests share one statement and one commit; this
    /// many such statements may run at once (at least 1). Batches lock
    /// partitions in one order, so several never deadlock; one is the
    /// default, measured best on two cores ("Push slots" in
    /// bench/journal/2026-12-07-push-across-many-partitions.md):
    /// a second slot halves the batches and adds commits, and pushes of
    /// more than 16 items, which bypass the batcher, already run side by side.
    pub push_batch_slots: usize,
    /// Concurrent ack requests share one statement and one commit; this
    /// many such statements may run at once (0: every ack runs alone).
    pub ack_batch_slots: usize,
    /// Concurrent pops of queues (not by namespace or task) share one
    /// statement and one commit; this many such statements may run at
    /// once (0: every pop runs alone). Pops skip locked lanes, so a batch
    /// waits on no other.
    pub pop_batch_slots: usize,
    /// Concurrent transaction bundles of acks and KV ops (no pushes, no
    /// timers) share one statement and one commit; this many such
    /// statements may run at once (0: every bundle runs alone).
    pub transaction_batch_slots: usize,
    /// The timer sweeper's tick: while timers are due it looks every tick;
    /// idle, it sleeps until the next due timer (at most 5 ticks), and a
    /// schedule on this engine wakes it. `None` disables it (another broker
    /// on the database may fire them).
    pub timer_sweep_interval: Option<Duration>,
    /// Timers fired per transaction.
    pub timer_fire_batch: i32,
    /// How far ahead a timer may be scheduled (`timer_horizon_exceeded`).
    pub timer_horizon: Duration,
    /// How often the retention sweeper runs (queue options retention and
    /// `maxWaitTimeSeconds`); `None` disables it here.
    pub retention_sweep_interval: Option<Duration>,
    /// Messages the retention sweeper deletes per partition and statement.
    pub retention_sweep_batch: i32,
    /// How often the queue gauges are brought up to date (maintenance/gauges.rs); a
    /// queue's gauge is counted at most this often. `None` disables it here.
    pub queue_gauge_interval: Option<Duration>,
    /// Partitions from which a queue's operator counts come from its gauge
    /// instead of being counted on every page view.
    pub queue_gauge_min_partitions: i32,
    /// The URL other brokers send callers of this broker's ephemeral queues
    /// to (`--advertise-url`); `None`: `http://<hostname>` is recorded.
    pub advertise_url: Option<String>,
    /// The key of encryption at rest (`QUEEN_ENCRYPTION_KEY`); without it,
    /// encrypted queues can be neither configured nor pushed to nor read.
    pub encryption_key: Option<EncryptionKey>,
    /// The push spool (`FILE_BUFFER_DIR`): pushes that cannot reach
    /// PostgreSQL are kept on disk and drained later; `None`: they are
    /// answered 503. The drainer runs once `Engine::start_spool_drain` is
    /// called (`queen_server::serve` does).
    pub spool: Option<crate::spool::SpoolOptions>,
    /// Where a consumer group starts when its first pop names no
    /// `subscriptionMode` or `subscriptionFrom` (`DEFAULT_SUBSCRIPTION_MODE`).
    pub default_subscription_mode: SubscriptionMode,
}

impl Default for EngineOptions {
    fn default() -> Self {
        EngineOptions {
            poll_interval: Duration::from_millis(250),
            kv_max_read_bytes: 4 * 1024 * 1024,
            kv_sweep_interval: Some(Duration::from_secs(30)),
            kv_sweep_batch: 1000,
            cross_broker_wakeups: true,
            kv_get_batch_slots: 1,
            kv_write_batch_slots: 1,
            push_batch_slots: 1,
            ack_batch_slots: 1,
            pop_batch_slots: 1,
            transaction_batch_slots: 1,
            timer_sweep_interval: Some(Duration::from_millis(200)),
            timer_fire_batch: 500,
            timer_horizon: crate::timers::DEFAULT_TIMER_HORIZON,
            retention_sweep_interval: Some(Duration::from_secs(10)),
            retention_sweep_batch: 1000,
            queue_gauge_interval: Some(Duration::from_secs(10)),
            queue_gauge_min_partitions: 2000,
            encryption_key: None,
            advertise_url: None,
            default_subscription_mode: SubscriptionMode::default(),
            spool: None,
        }
    }
}

/// The broker engine. Cheap to share behind an `Arc`; holds the pool and the
/// long-poll waiters, nothing else.
pub struct Engine {
    pool: Pool,
    waiters: Arc<Waiters>,
    announcer: Arc<Announcer>,
    get_batcher: Option<GetBatcher>,
    write_batcher: Option<WriteBatcher>,
    push_batcher: PushBatcher,
    ack_batcher: Option<AckBatcher>,
    pop_batcher: Option<PopBatcher>,
    bundle_batcher: Option<BundleBatcher>,
    batch_stats: Arc<BatchStats>,
    shutdown: watch::Sender<bool>,
    options: EngineOptions,
    kv_pruned: Arc<AtomicU64>,
    timer_stats: Arc<TimerStats>,
    retention_stats: Arc<RetentionStats>,
    sealed_queues: SealedQueues,
    fill_waits: crate::fill_wait::FillWaits,
    ephemeral: Arc<Ephemeral>,
    identity: Arc<crate::registry::Identity>,
    traffic: Arc<crate::registry::Traffic>,
    pub(crate) spool: Option<Arc<crate::spool::Spool>>,
    /// Set by [`Engine::expect_migration`] until a migration succeeds: the
    /// broker serves (health, readiness, the push spool) before its schema is there.
    awaiting_migration: std::sync::atomic::AtomicBool,
}

impl Engine {
    /// Opens the pool and the notification connection. Does not migrate.
    pub fn connect(db: &DbConfig, options: EngineOptions) -> Result<Self, EngineError> {
        let pool = Pool::new(db.pool()?, db.prepared_statements);
        let waiters = Arc::new(Waiters::default());
        let announcer = Arc::new(Announcer::new(options.cross_broker_wakeups));
        let (shutdown, shutdown_rx) = watch::channel(false);
        let (pg, tls) = db.listen_spec()?;
        // Behind a transaction-mode pooler a LISTEN would silently hear
        // nothing; without a direct URL for it, the re-check interval serves.
        let listen = db.prepared_statements || db.listen_url.is_some();
        if !listen {
            tracing::warn!(
                "prepared statements are off and no listen URL is set: pushes on other brokers \
                 reach this broker's long polls at the re-check interval"
            );
        }
        tokio::spawn(notifier::run(pg, tls, listen, waiters.clone(), announcer.clone(), shutdown_rx.clone()));
        let kv_pruned = Arc::new(AtomicU64::new(0));
        if let Some(every) = options.kv_sweep_interval {
            tokio::spawn(crate::maintenance::kv_sweep::sweep(
                pool.clone(),
                every,
                options.kv_sweep_batch,
                kv_pruned.clone(),
                shutdown_rx.clone(),
            ));
        }
        let timer_stats = Arc::new(TimerStats::default());
        if let Some(every) = options.timer_sweep_interval {
            tokio::spawn(crate::maintenance::timers::sweep_timers(
                pool.clone(),
                every,
                options.timer_fire_batch.max(1),
                announce_fn(&waiters, &announcer),
                timer_stats.clone(),
                options.encryption_key.clone(),
                shutdown_rx.clone(),
            ));
        }
        if let Some(every) = options.queue_gauge_interval {
            tokio::spawn(crate::maintenance::gauges::refresh_gauges(
                pool.clone(),
                every,
                options.queue_gauge_min_partitions.max(1),
                shutdown_rx.clone(),
            ));
        }
        let retention_stats = Arc::new(RetentionStats::default());
        if let Some(every) = options.retention_sweep_interval {
            tokio::spawn(crate::maintenance::retention::sweep_retention(
                pool.clone(),
                every,
                options.retention_sweep_batch.max(1),
                retention_stats.clone(),
                shutdown_rx,
            ));
        }
        let ephemeral = Arc::new(Ephemeral::new(
            options.advertise_url.clone().unwrap_or_else(|| "http://localhost:6632".to_owned()),
        ));
        tokio::spawn(crate::ephemeral::sweep_ephemeral(
            pool.clone(),
            ephemeral.clone(),
            shutdown.subscribe(),
        ));
        let identity = Arc::new(crate::registry::Identity {
            id: ephemeral.owner_id(),
            url: options.advertise_url.clone().unwrap_or_else(|| "http://localhost:6632".to_owned()),
            started: std::time::SystemTime::now(),
            started_instant: std::time::Instant::now(),
        });
        let spool = match &options.spool {
            Some(spool_options) => {
                let database = crate::spool::database_dir_name(&db.pg_config()?);
                let spool = crate::spool::Spool::open(spool_options, &database, &identity.id.to_string())
                    .map_err(|e| {
                        EngineError::Setup(format!("the push spool in {}: {e}", spool_options.dir.display()))
                    })?;
                Some(Arc::new(spool))
            }
            None => None,
        };
        let traffic = Arc::new(crate::registry::Traffic::default());
        tokio::spawn(crate::registry::run_registry(
            pool.clone(),
            waiters.clone(),
            announcer.clone(),
            identity.clone(),
            traffic.clone(),
            shutdown.subscribe(),
        ));
        let batch_stats = Arc::new(BatchStats::default());
        let get_batcher = (options.kv_get_batch_slots > 0).then(|| {
            crate::kv::read::start_gets(
                pool.clone(),
                options.kv_get_batch_slots,
                options.kv_max_read_bytes,
                batch_stats.clone(),
            )
        });
        let write_batcher = (options.kv_write_batch_slots > 0).then(|| {
            crate::kv::write::start_writes(pool.clone(), options.kv_write_batch_slots, batch_stats.clone())
        });
        let announce = announce_fn(&waiters, &announcer);
        let push_batcher =
            crate::push::start_pushes(pool.clone(), options.push_batch_slots, announce, batch_stats.clone());
        let ack_batcher = (options.ack_batch_slots > 0)
            .then(|| crate::ack::start_acks(pool.clone(), options.ack_batch_slots, batch_stats.clone()));
        let pop_batcher = (options.pop_batch_slots > 0).then(|| {
            let key_id = options.encryption_key.as_ref().map(|k| k.id().to_owned());
            crate::pop::start_pops(pool.clone(), options.pop_batch_slots, key_id, batch_stats.clone())
        });
        let bundle_batcher = (options.transaction_batch_slots > 0).then(|| {
            let max_read = options.kv_max_read_bytes;
            crate::transaction::start_bundles(
                pool.clone(),
                options.transaction_batch_slots,
                max_read,
                batch_stats.clone(),
            )
        });
        Ok(Engine {
            pool,
            waiters,
            announcer,
            get_batcher,
            write_batcher,
            push_batcher,
            ack_batcher,
            pop_batcher,
            bundle_batcher,
            batch_stats,
            shutdown,
            options,
            kv_pruned,
            timer_stats,
            retention_stats,
            sealed_queues: SealedQueues::default(),
            fill_waits: crate::fill_wait::FillWaits::default(),
            ephemeral,
            identity,
            traffic,
            spool,
            awaiting_migration: false.into(),
        })
    }

    pub(crate) fn pool(&self) -> &Pool {
        &self.pool
    }

    pub(crate) fn timer_horizon(&self) -> Duration {
        self.options.timer_horizon
    }

    pub(crate) fn timer_stats_ref(&self) -> &TimerStats {
        &self.timer_stats
    }

    pub(crate) fn retention_stats_ref(&self) -> &RetentionStats {
        &self.retention_stats
    }

    pub(crate) fn encryption_key(&self) -> Option<&EncryptionKey> {
        self.options.encryption_key.as_ref()
    }

    pub(crate) fn ephemeral(&self) -> &Ephemeral {
        &self.ephemeral
    }

    pub(crate) fn sealed_queues(&self) -> &SealedQueues {
        &self.sealed_queues
    }

    pub(crate) fn retention_batch(&self) -> i32 {
        self.options.retention_sweep_batch.max(1)
    }

    /// The gauge loop's interval (10 s when it is off here) and threshold.
    pub(crate) fn gauge_settings(&self) -> (Duration, i32) {
        (
            self.options.queue_gauge_interval.unwrap_or(Duration::from_secs(10)),
            self.options.queue_gauge_min_partitions.max(1),
        )
    }

    pub(crate) fn kv_max_read_bytes(&self) -> i64 {
        self.options.kv_max_read_bytes
    }

    /// What a committed push calls with the queues that got messages.
    pub(crate) fn announce_fn(&self) -> crate::notifier::Announce {
        announce_fn(&self.waiters, &self.announcer)
    }

    pub(crate) fn fill_waits(&self) -> &crate::fill_wait::FillWaits {
        &self.fill_waits
    }

    pub(crate) fn waiters_ref(&self) -> &Waiters {
        &self.waiters
    }

    /// How often a waiting pop re-checks without a wake-up.
    pub(crate) fn poll_interval(&self) -> Duration {
        self.options.poll_interval
    }

    /// The push spool, when configured.
    pub(crate) fn spool(&self) -> Option<&crate::spool::Spool> {
        self.spool.as_deref()
    }

    /// Changes to true when the engine shuts down.
    pub(crate) fn shutdown_signal(&self) -> watch::Receiver<bool> {
        self.shutdown.subscribe()
    }

    /// `GET /api/v1/status/buffers`: the push spool (Queen's file buffer).
    pub fn spool_status(&self) -> Json {
        let body = match self.spool() {
            Some(spool) => spool.status(),
            None => serde_json::json!({
                "enabled": false, "pending": 0, "pendingRecords": 0, "bytes": 0, "failed": 0,
                "dbHealthy": serde_json::Value::Null, "worker": self.identity.id.to_string(),
            }),
        };
        Json(body.to_string())
    }

    pub(crate) fn push_batcher(&self) -> &PushBatcher {
        &self.push_batcher
    }

    pub(crate) fn get_batcher(&self) -> Option<&GetBatcher> {
        self.get_batcher.as_ref()
    }

    pub(crate) fn write_batcher(&self) -> Option<&WriteBatcher> {
        self.write_batcher.as_ref()
    }

    pub(crate) fn ack_batcher(&self) -> Option<&AckBatcher> {
        self.ack_batcher.as_ref()
    }

    pub(crate) fn bundle_batcher(&self) -> Option<&BundleBatcher> {
        self.bundle_batcher.as_ref()
    }

    /// How many requests each statement of a batcher carried so far (the
    /// ratio of `sum` to `count` is the mean batch size).
    pub fn batch_sizes(&self, kind: BatchKind) -> BatchSizes {
        self.batch_stats.of(kind).snapshot()
    }

    /// Expired KV rows the sweeper of this engine has deleted.
    pub fn kv_rows_pruned(&self) -> u64 {
        self.kv_pruned.load(Ordering::Relaxed)
    }

    /// Applies the migrations (idempotent, safe with concurrent brokers).
    pub async fn migrate(&self) -> Result<(), EngineError> {
        let mut client = self.pool.get().await?;
        crate::migrate(&mut client).await?;
        self.awaiting_migration.store(false, Ordering::SeqCst);
        Ok(())
    }

    /// Marks the schema as not there yet: until [`Engine::migrate`]
    /// succeeds, [`Engine::ready`] fails, pushes go to the spool (when
    /// there is one) and the spool does not drain.
    pub fn expect_migration(&self) {
        self.awaiting_migration.store(true, Ordering::SeqCst);
    }

    /// Whether a migration this engine waits for has not succeeded yet.
    pub fn awaiting_migration(&self) -> bool {
        self.awaiting_migration.load(Ordering::SeqCst)
    }

    /// Whether the engine can serve requests that need the database: the
    /// schema is migrated and the database answers.
    pub async fn ready(&self) -> Result<(), EngineError> {
        if self.awaiting_migration() {
            return Err(EngineError::Unavailable("the database schema is not migrated yet".into()));
        }
        self.health().await
    }

    /// Whether this engine keeps pushes in a spool when the database is away.
    pub fn has_spool(&self) -> bool {
        self.spool.is_some()
    }

    /// Succeeds when the database answers.
    pub async fn health(&self) -> Result<(), EngineError> {
        let client = self.pool.get().await?;
        client.simple_query("SELECT 1").await?;
        Ok(())
    }

    /// Pool statistics: (connections open, connections idle, max size).
    pub fn pool_status(&self) -> (usize, usize, usize) {
        let s = self.pool.deadpool().status();
        (s.size, s.available, s.max_size)
    }

    /// After a commit that pushed to `queues`: wakes this engine's long
    /// polls now and tells the other brokers shortly.
    pub(crate) fn announce_pushes(&self, queues: Vec<String>) {
        self.announce_fn()(queues);
    }

    /// Every live broker on this database, this one included (their
    /// heartbeat rows: pid, host, URL, uptime, memory, pool, long polls).
    pub async fn brokers(&self) -> Result<Json, EngineError> {
        crate::registry::list(&self.pool).await
    }

    /// This engine's traffic counters (messages pushed, pops that
    /// delivered, messages acked since it started).
    pub fn traffic(&self) -> crate::registry::TrafficTotals {
        self.traffic.totals()
    }

    pub(crate) fn traffic_ref(&self) -> &crate::registry::Traffic {
        &self.traffic
    }

    /// Writes the traffic counted since the last heartbeat to
    /// `queen.broker_minutes` now (the heartbeat does it every 5 s).
    pub async fn flush_traffic(&self) -> Result<(), EngineError> {
        crate::registry::flush_traffic(&self.pool, &self.identity, &self.traffic).await
    }

    /// The last 60 minutes of traffic (oldest first, the current minute
    /// last), each minute summed over every broker on the database; the
    /// current broker's last 5 s are not in it until its next heartbeat.
    pub async fn traffic_hour(&self) -> Result<Vec<crate::registry::TrafficMinute>, EngineError> {
        crate::registry::traffic_hour(&self.pool).await
    }

    /// Leaves the broker registry (a graceful stop; best effort), after
    /// writing the traffic counted since the last heartbeat.
    pub async fn leave_registry(&self) {
        if let Err(e) = self.flush_traffic().await {
            tracing::debug!(error = %e, "cannot write the broker's last traffic");
        }
        if let Err(e) = crate::registry::leave(&self.pool, &self.identity).await {
            tracing::debug!(error = %e, "cannot leave the broker registry");
        }
    }

    /// This broker's id in the registry.
    pub fn broker_id(&self) -> uuid::Uuid {
        self.identity.id
    }

    /// Queues that have a long poll waiting in this process.
    pub fn queues_waiting(&self) -> usize {
        self.waiters.queues_waiting()
    }

    /// Calls one SQL function that answers with JSON text (or NULL).
    async fn call(
        &self,
        sql: &'static str,
        params: &[&(dyn ToSql + Sync)],
    ) -> Result<Option<String>, EngineError> {
        let client = self.pool.get().await?;
        let stmt = client.prepare_cached(sql).await?;
        let row = client.query_one(&stmt, params).await?;
        drop(client);
        // Any answer may carry payloads sealed at rest (pops, DLQ, messages).
        row.try_get::<_, Option<String>>(0)?.map(|text| self.open_sealed(text)).transpose()
    }

    pub(crate) async fn call_json(
        &self,
        sql: &'static str,
        params: &[&(dyn ToSql + Sync)],
    ) -> Result<Json, EngineError> {
        self.call(sql, params)
            .await?
            .map(Json)
            .ok_or_else(|| EngineError::Protocol(format!("{sql} answered NULL")))
    }

    /// Creates or reconfigures a queue; `body` is the configure request JSON.
    pub async fn configure(&self, body: &str) -> Result<Json, EngineError> {
        let asks_encryption = serde_json::from_str::<serde_json::Value>(body)
            .ok()
            .is_some_and(|v| v["options"]["encryptionEnabled"] == serde_json::Value::Bool(true));
        if asks_encryption && self.encryption_key().is_none() {
            let msg = "options.encryptionEnabled needs QUEEN_ENCRYPTION_KEY (64 hex characters) on every \
                       broker; this broker has none, so the queue was not configured";
            return Err(EngineError::Rejected {
                status: 400,
                body: serde_json::json!({"error": msg, "code": "encryption_key_missing",
                    "field": "options.encryptionEnabled", "detail": msg})
                .to_string(),
            });
        }
        let key_id = self.encryption_key().map(EncryptionKey::id);
        // Whether this configure may turn encryption on: then what the queue
        // stored before is sealed once it commits.
        let was_plain = match serde_json::from_str::<serde_json::Value>(body).ok() {
            Some(v) if asks_encryption => match v["queue"].as_str() {
                Some(q) => !self.queue_encrypted(q).await?,
                None => false,
            },
            _ => false,
        };
        let answer =
            self.call_json("SELECT queen.configure($1::text::json, $2)::text", &[&body, &key_id]).await?;
        if let Ok(v) = answer.decode::<serde_json::Value>() {
            if let (Some(q), Some(on)) = (v["queue"].as_str(), v["options"]["encryptionEnabled"].as_bool()) {
                self.sealed_queues().set(q, on);
                if on && was_plain {
                    self.seal_queue_at_rest(q).await?;
                }
            }
            if let (Some(q), Some(ms)) = (v["queue"].as_str(), v["options"]["minPopWaitTime"].as_u64()) {
                self.fill_waits().learn(q, ms);
            }
        }
        Ok(answer)
    }

    /// Deletes a queue with its partitions, messages, cursors and dead letters.
    pub async fn delete_queue(&self, queue: &str) -> Result<Json, EngineError> {
        let client = self.pool.get().await?;
        let stmt = client.prepare_cached("SELECT d.existed FROM queen.delete_queue($1) d").await?;
        let existed: bool = client.query_one(&stmt, &[&queue]).await?.try_get(0)?;
        serde_json::to_string(&queen_wire::QueueDeleted::new(queue, existed))
            .map(Json)
            .map_err(|e| EngineError::Protocol(e.to_string()))
    }

    /// Wakes every long poll (they answer empty) and stops the listener.
    pub fn shutdown(&self) {
        self.shutdown.send_replace(true);
    }

    /// Closes the pool; in-flight calls finish, new ones fail.
    pub fn close(&self) {
        self.shutdown();
        self.pool.deadpool().close();
    }
}

/// Wakes this engine's long polls on `queues` and queues them for the other brokers.
fn announce_fn(waiters: &Arc<Waiters>, announcer: &Arc<Announcer>) -> crate::notifier::Announce {
    let (waiters, announcer) = (waiters.clone(), announcer.clone());
    Arc::new(move |queues: Vec<String>| {
        waiters.wake(queues.iter().map(String::as_str));
        announcer.add(queues);
    })
}
