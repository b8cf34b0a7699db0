//! Natural batching of KV gets: concurrent single-key gets share one
//! statement and one round trip. A batch leaves as soon as a slot is free
//! (no timer: a lone get waits for nothing), so under load the gets that
//! arrived while every slot was busy go together, and PostgreSQL sees a few
//! busy backends instead of one per client.

use std::sync::Arc;

use deadpool_postgres::Pool;
use tokio::sync::{mpsc, oneshot, Semaphore};

use crate::kv::get_element;
use crate::EngineError;

/// Most gets in one statement.
const MAX_BATCH: usize = 256;

/// One waiting get.
struct Get {
    ns: String,
    key: String,
    reply: oneshot::Sender<Result<String, EngineError>>,
}

/// The front of the get batcher: cheap to clone, one per engine.
#[derive(Clone)]
pub(crate) struct GetBatcher {
    tx: mpsc::UnboundedSender<Get>,
}

/// Gets of every batch, and batches, for the bench and /metrics.
#[derive(Default)]
pub(crate) struct BatchStats {
    pub(crate) batches: std::sync::atomic::AtomicU64,
    pub(crate) items: std::sync::atomic::AtomicU64,
}

impl GetBatcher {
    /// Starts the dispatcher; at most `slots` batches run at once.
    pub(crate) fn start(pool: Pool, slots: usize, stats: Arc<BatchStats>) -> Self {
        let (tx, rx) = mpsc::unbounded_channel();
        tokio::spawn(dispatch(pool, rx, Arc::new(Semaphore::new(slots.max(1))), stats));
        GetBatcher { tx }
    }

    /// The get result element of one key (`found` or not), as `kv_one` answers it.
    pub(crate) async fn get(&self, ns: &str, key: &str) -> Result<String, EngineError> {
        let (reply, rx) = oneshot::channel();
        self.tx
            .send(Get { ns: ns.to_owned(), key: key.to_owned(), reply })
            .map_err(|_| EngineError::Unavailable("the engine is shutting down".into()))?;
        rx.await.map_err(|_| EngineError::Unavailable("the get batch was dropped".into()))?
    }
}

async fn dispatch(
    pool: Pool,
    mut rx: mpsc::UnboundedReceiver<Get>,
    slots: Arc<Semaphore>,
    stats: Arc<BatchStats>,
) {
    loop {
        // Take the slot first: while every slot is busy, gets pile up in the
        // channel and leave together.
        let Ok(permit) = slots.clone().acquire_owned().await else { return };
        let Some(first) = rx.recv().await else { return };
        let mut batch = vec![first];
        while batch.len() < MAX_BATCH {
            match rx.try_recv() {
                Ok(g) => batch.push(g),
                Err(_) => break,
            }
        }
        stats.batches.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        stats.items.fetch_add(batch.len() as u64, std::sync::atomic::Ordering::Relaxed);
        let pool = pool.clone();
        tokio::spawn(async move {
            run(&pool, batch).await;
            drop(permit);
        });
    }
}

/// One statement for the whole batch; if it fails as a whole, each get is
/// tried alone so that one member's failure stays its own.
async fn run(pool: &Pool, mut batch: Vec<Get>) {
    if batch.len() == 1 {
        let result = many(pool, &batch).await.map(|mut e| e.pop().unwrap_or_default());
        if let Some(g) = batch.pop() {
            let _ = g.reply.send(result);
        }
        return;
    }
    match many(pool, &batch).await {
        Ok(elements) => {
            for (g, e) in batch.into_iter().zip(elements) {
                let _ = g.reply.send(Ok(e));
            }
        }
        Err(_) => {
            for g in batch {
                let one = many(pool, std::slice::from_ref(&g)).await.map(|mut e| e.pop().unwrap_or_default());
                let _ = g.reply.send(one);
            }
        }
    }
}

async fn many(pool: &Pool, batch: &[Get]) -> Result<Vec<String>, EngineError> {
    let client = pool.get().await?;
    let mut rows: Vec<Option<tokio_postgres::Row>> = (0..batch.len()).map(|_| None).collect();
    if let [one] = batch {
        let stmt = client.prepare_cached(include_str!("../sql/statements/kv_get.sql")).await?;
        rows[0] = client.query_opt(&stmt, &[&one.ns, &one.key]).await?;
    } else {
        let ns: Vec<&str> = batch.iter().map(|g| g.ns.as_str()).collect();
        let keys: Vec<&str> = batch.iter().map(|g| g.key.as_str()).collect();
        let stmt = client.prepare_cached(include_str!("../sql/statements/kv_get_batch.sql")).await?;
        for row in client.query(&stmt, &[&ns, &keys]).await? {
            let n: i64 = row.try_get(4)?;
            if let Some(slot) = usize::try_from(n - 1).ok().and_then(|i| rows.get_mut(i)) {
                *slot = Some(row);
            }
        }
    }
    batch.iter().zip(rows).map(|(g, row)| get_element(&g.key, row)).collect()
}
