//! The consume loop: workers that pop, run a handler, and settle.
//!
//! Every worker pops a batch (one partition lease), runs the handler while a
//! ticker renews the lease, then settles the whole batch in one ack call. In
//! `each` mode the messages of a batch run in order and the first failure is
//! nacked with the handler's error text; the rest of the batch is not acked,
//! so the broker redelivers it after the nack. In `batch` mode a failure
//! nacks the whole batch. Workers run concurrently on the caller's task (no
//! `'static` bound on the handler); spawn inside the handler for CPU work.

use std::fmt::Display;
use std::future::Future;
use std::pin::{pin, Pin};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Mutex;
use std::time::Duration;

use tokio::sync::watch;
use tokio::time::Instant;

use crate::broker::Broker;
use crate::client::Queue;
use crate::error::Result;
use crate::message::{Ack, Message};

/// A stop signal for consume loops, like a cancellation token. Clones share it.
#[derive(Clone, Debug)]
pub struct StopSignal {
    tx: std::sync::Arc<watch::Sender<bool>>,
}

impl Default for StopSignal {
    fn default() -> Self {
        StopSignal::new()
    }
}

impl StopSignal {
    /// A signal that has not fired.
    pub fn new() -> Self {
        StopSignal { tx: std::sync::Arc::new(watch::channel(false).0) }
    }

    /// Fires the signal (idempotent).
    pub fn stop(&self) {
        self.tx.send_replace(true);
    }

    /// Whether it has fired.
    pub fn is_stopped(&self) -> bool {
        *self.tx.borrow()
    }

    /// Resolves once the signal has fired.
    pub fn stopped(&self) -> impl Future<Output = ()> + Send + 'static {
        let mut rx = self.tx.subscribe();
        async move {
            let _ = rx.wait_for(|s| *s).await;
        }
    }

    /// Fires the signal on Ctrl-C (SIGINT); spawns a task that waits for it.
    pub fn on_ctrl_c(&self) -> &Self {
        let me = self.clone();
        tokio::spawn(async move {
            if tokio::signal::ctrl_c().await.is_ok() {
                me.stop();
            }
        });
        self
    }
}

/// What a consume loop did.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct ConsumeStats {
    /// Messages the handler completed.
    pub completed: u64,
    /// Messages nacked after a handler failure.
    pub failed: u64,
    /// Batches popped.
    pub batches: u64,
}

type StopFuture = Pin<Box<dyn Future<Output = ()> + Send>>;

/// A consume loop being built; run it with [`Consumer::each`] or [`Consumer::batches`].
pub struct Consumer<B> {
    queue: Queue<B>,
    concurrency: usize,
    batch: u32,
    partitions: u32,
    wait: Duration,
    idle: Option<Duration>,
    lease_seconds: Option<u32>,
    renew: bool,
    auto_ack: bool,
    limit: Option<u64>,
    stop: Option<StopFuture>,
}

struct Shared {
    last_activity: Mutex<Instant>,
    completed: AtomicU64,
    failed: AtomicU64,
    batches: AtomicU64,
    stopped: watch::Sender<bool>,
}

impl Shared {
    fn touch(&self) {
        if let Ok(mut t) = self.last_activity.lock() {
            *t = Instant::now();
        }
    }

    fn idle_for(&self) -> Duration {
        self.last_activity.lock().map(|t| t.elapsed()).unwrap_or_default()
    }

    fn stopping(&self) -> bool {
        *self.stopped.borrow()
    }
}

enum Handler<'h, FE, FB> {
    Each(&'h FE),
    Batch(&'h FB),
}

impl<B: Broker> Queue<B> {
    /// A consume-loop builder.
    pub fn consume(&self) -> Consumer<B> {
        Consumer::new(self.clone())
    }
}

impl<B: Broker> Consumer<B> {
    fn new(queue: Queue<B>) -> Self {
        Consumer {
            queue,
            concurrency: 1,
            batch: 1,
            partitions: 1,
            wait: Duration::from_secs(2),
            idle: None,
            lease_seconds: None,
            renew: true,
            auto_ack: false,
            limit: None,
            stop: None,
        }
    }

    /// How many workers pop and handle at once (each holds its own lease).
    pub fn concurrency(mut self, n: usize) -> Self {
        self.concurrency = n.max(1);
        self
    }

    /// Messages per pop.
    pub fn batch(mut self, n: u32) -> Self {
        self.batch = n.max(1);
        self
    }

    /// Partitions one pop may claim.
    pub fn partitions(mut self, n: u32) -> Self {
        self.partitions = n.max(1);
        self
    }

    /// The long-poll of each pop (2 s by default); a stop waits at most this long.
    pub fn wait(mut self, wait: Duration) -> Self {
        self.wait = wait;
        self
    }

    /// Stops when no message has arrived for `idle`.
    pub fn stop_after_idle(mut self, idle: Duration) -> Self {
        self.idle = Some(idle);
        self
    }

    /// Stops after this many messages were handled (completed or failed).
    pub fn limit(mut self, messages: u64) -> Self {
        self.limit = Some(messages);
        self
    }

    /// The lease of each pop; renewals extend it by the same amount (60 s by default).
    pub fn lease_seconds(mut self, seconds: u32) -> Self {
        self.lease_seconds = Some(seconds.max(1));
        self
    }

    /// Turns off the lease renewal while the handler runs.
    pub fn no_renew(mut self) -> Self {
        self.renew = false;
        self
    }

    /// Commits at delivery: no lease, no acks (a failed handler loses the message).
    pub fn auto_ack(mut self) -> Self {
        self.auto_ack = true;
        self
    }

    /// Stops gracefully when `stop` resolves: no new pops, in-flight batches finish and settle.
    pub fn stop_when(mut self, stop: impl Future<Output = ()> + Send + 'static) -> Self {
        self.stop = Some(Box::pin(stop));
        self
    }

    /// Stops gracefully when `signal` fires.
    pub fn stop_on(self, signal: &StopSignal) -> Self {
        self.stop_when(signal.stopped())
    }

    /// Runs `handler` on every message, in order within a batch.
    pub async fn each<F, Fut, E>(self, handler: F) -> Result<ConsumeStats>
    where
        F: Fn(Message) -> Fut,
        Fut: Future<Output = std::result::Result<(), E>>,
        E: Display,
    {
        self.run::<F, fn(Vec<Message>) -> Fut, Fut, E>(Handler::Each(&handler)).await
    }

    /// Runs `handler` on every popped batch.
    pub async fn batches<F, Fut, E>(self, handler: F) -> Result<ConsumeStats>
    where
        F: Fn(Vec<Message>) -> Fut,
        Fut: Future<Output = std::result::Result<(), E>>,
        E: Display,
    {
        self.run::<fn(Message) -> Fut, F, Fut, E>(Handler::Batch(&handler)).await
    }

    async fn run<FE, FB, Fut, E>(mut self, handler: Handler<'_, FE, FB>) -> Result<ConsumeStats>
    where
        FE: Fn(Message) -> Fut,
        FB: Fn(Vec<Message>) -> Fut,
        Fut: Future<Output = std::result::Result<(), E>>,
        E: Display,
    {
        let shared = Shared {
            last_activity: Mutex::new(Instant::now()),
            completed: AtomicU64::new(0),
            failed: AtomicU64::new(0),
            batches: AtomicU64::new(0),
            stopped: watch::channel(false).0,
        };
        let stop = self.stop.take();
        let workers =
            futures_util::future::join_all((0..self.concurrency).map(|_| self.worker(&shared, &handler)));
        let outcome = match stop {
            None => workers.await,
            Some(stop) => {
                let mut workers = pin!(workers);
                tokio::select! {
                    done = &mut workers => done,
                    _ = stop => {
                        shared.stopped.send_replace(true);
                        workers.await
                    }
                }
            }
        };
        for r in outcome {
            r?;
        }
        Ok(ConsumeStats {
            completed: shared.completed.load(Ordering::Relaxed),
            failed: shared.failed.load(Ordering::Relaxed),
            batches: shared.batches.load(Ordering::Relaxed),
        })
    }

    fn handled(&self, shared: &Shared) -> u64 {
        shared.completed.load(Ordering::Relaxed) + shared.failed.load(Ordering::Relaxed)
    }

    async fn worker<FE, FB, Fut, E>(&self, shared: &Shared, handler: &Handler<'_, FE, FB>) -> Result<()>
    where
        FE: Fn(Message) -> Fut,
        FB: Fn(Vec<Message>) -> Fut,
        Fut: Future<Output = std::result::Result<(), E>>,
        E: Display,
    {
        let req = self.queue.pop_request(self.batch, self.partitions, self.lease_seconds, self.auto_ack);
        let mut errors = 0u32;
        loop {
            if shared.stopping() || self.limit.is_some_and(|l| self.handled(shared) >= l) {
                return Ok(());
            }
            let mut wait = self.wait;
            if let Some(idle) = self.idle {
                let idle_for = shared.idle_for();
                if idle_for >= idle {
                    return Ok(());
                }
                wait = wait.min(idle - idle_for);
            }
            let messages = match self.queue.pop_with(&req, Some(wait)).await {
                Ok(m) => {
                    errors = 0;
                    m
                }
                Err(e) if e.is_client_error() => return Err(e),
                Err(e) => {
                    errors += 1;
                    let nap = Duration::from_millis(100u64.saturating_mul(1 << errors.min(6)));
                    tracing::warn!(queue = %self.queue.name(), error = %e, ?nap, "pop failed; backing off");
                    tokio::time::sleep(nap).await;
                    continue;
                }
            };
            if messages.is_empty() {
                continue;
            }
            shared.touch();
            shared.batches.fetch_add(1, Ordering::Relaxed);
            self.handle_batch(shared, handler, messages).await;
            shared.touch();
        }
    }

    /// Runs the handler over one batch with the lease renewed, then settles it.
    async fn handle_batch<FE, FB, Fut, E>(
        &self,
        shared: &Shared,
        handler: &Handler<'_, FE, FB>,
        messages: Vec<Message>,
    ) where
        FE: Fn(Message) -> Fut,
        FB: Fn(Vec<Message>) -> Fut,
        Fut: Future<Output = std::result::Result<(), E>>,
        E: Display,
    {
        let lease = messages.first().and_then(|m| m.lease_id.clone());
        let work = async {
            match handler {
                Handler::Each(f) => {
                    for (i, m) in messages.iter().enumerate() {
                        if let Err(e) = f(m.clone()).await {
                            return (i, Some(e.to_string()));
                        }
                    }
                    (messages.len(), None)
                }
                Handler::Batch(f) => match f(messages.clone()).await {
                    Ok(()) => (messages.len(), None),
                    Err(e) => (0, Some(e.to_string())),
                },
            }
        };
        let (done, failure) = match (&lease, self.renew && !self.auto_ack) {
            (Some(lease), true) => self.with_renewal(lease, work).await,
            _ => work.await,
        };
        let failed_count = match (&failure, handler) {
            (None, _) => 0,
            (Some(_), Handler::Each(_)) => 1,
            (Some(_), Handler::Batch(_)) => messages.len() as u64,
        };
        shared.completed.fetch_add(done as u64, Ordering::Relaxed);
        shared.failed.fetch_add(failed_count, Ordering::Relaxed);
        if self.auto_ack {
            if let Some(e) = failure {
                tracing::warn!(queue = %self.queue.name(), error = %e, "handler failed on an auto-acked message");
            }
            return;
        }
        let mut acks: Vec<Ack> = messages[..done].iter().map(Ack::completed).collect();
        if let Some(error) = &failure {
            match handler {
                Handler::Each(_) => acks.push(Ack::failed(&messages[done], error)),
                Handler::Batch(_) => acks.extend(messages.iter().map(|m| Ack::failed(m, error))),
            }
        }
        match self.queue.queen().ack_batch(&acks).await {
            Ok(results) => {
                for r in results.iter().filter(|r| !r.success) {
                    tracing::warn!(
                        queue = %self.queue.name(), transaction_id = %r.transaction_id,
                        error = ?r.error, "ack refused; the message will be redelivered"
                    );
                }
            }
            Err(e) => {
                tracing::warn!(queue = %self.queue.name(), error = %e, "ack failed; the batch will be redelivered")
            }
        }
    }

    /// Drives `work` while extending `lease` every half lease period.
    async fn with_renewal<T>(&self, lease: &str, work: impl Future<Output = T>) -> T {
        let seconds = self.lease_seconds.unwrap_or(60);
        let every = Duration::from_millis((u64::from(seconds) * 1000 / 2).max(200));
        let mut ticker = tokio::time::interval_at(Instant::now() + every, every);
        ticker.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        let mut work = pin!(work);
        loop {
            tokio::select! {
                out = &mut work => return out,
                _ = ticker.tick() => {
                    match self.queue.queen().extend_lease(lease, seconds).await {
                        Ok(r) if r.success => {}
                        Ok(_) => tracing::warn!(lease, "lease renewal found no lease; the batch may be redelivered"),
                        Err(e) => tracing::warn!(lease, error = %e, "lease renewal failed"),
                    }
                }
            }
        }
    }
}

/// The error a handler may return when it has no error type of its own.
pub type HandlerError = Box<dyn std::error::Error + Send + Sync>;
