//! Natural batching of KV gets and of pushes: concurrent requests share one
//! statement and one round trip (and, for pushes, one commit). A batch leaves as soon as a slot is free
//! (no timer: a lone get waits for nothing), so under load the gets that
//! arrived while every slot was busy go together, and PostgreSQL sees a few
//! busy backends instead of one per client.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use deadpool_postgres::Pool;
use tokio::sync::{mpsc, oneshot, Semaphore};

use crate::kv::get_element;
use crate::push::{PushColumns, PushItem};
use crate::{EngineError, Json};

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

/// Upper bounds of the batch-size buckets (requests per statement).
pub const BATCH_SIZE_BOUNDS: [u64; 10] = [1, 2, 4, 8, 16, 32, 64, 128, 256, 1024];

/// How many batches carried how many requests: one counter per bucket of
/// [`BATCH_SIZE_BOUNDS`], plus the total carried.
#[derive(Default)]
pub(crate) struct SizeHistogram {
    counts: [AtomicU64; BATCH_SIZE_BOUNDS.len()],
    sum: AtomicU64,
}

impl SizeHistogram {
    fn record(&self, n: usize) {
        let n = n as u64;
        let i = BATCH_SIZE_BOUNDS.iter().position(|&b| n <= b).unwrap_or(BATCH_SIZE_BOUNDS.len() - 1);
        self.counts[i].fetch_add(1, Ordering::Relaxed);
        self.sum.fetch_add(n, Ordering::Relaxed);
    }

    pub(crate) fn snapshot(&self) -> BatchSizes {
        let buckets: Vec<u64> = self.counts.iter().map(|c| c.load(Ordering::Relaxed)).collect();
        BatchSizes { count: buckets.iter().sum(), sum: self.sum.load(Ordering::Relaxed), buckets }
    }
}

/// Batch sizes seen so far, for /metrics and the bench.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct BatchSizes {
    /// Batches per bucket of [`BATCH_SIZE_BOUNDS`] (not cumulative).
    pub buckets: Vec<u64>,
    /// Batches.
    pub count: u64,
    /// Requests they carried.
    pub sum: u64,
}

/// The batch sizes of each batcher.
#[derive(Default)]
pub(crate) struct BatchStats {
    pub(crate) gets: SizeHistogram,
    pub(crate) pushes: SizeHistogram,
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
        stats.gets.record(batch.len());
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

/// Most items, and payload bytes, in one batched push.
const MAX_PUSH_ITEMS: usize = 1000;
const MAX_PUSH_BYTES: usize = 4 * 1024 * 1024;

/// What a committed push tells the engine: the queues that got messages.
pub(crate) type Announce = Arc<dyn Fn(Vec<String>) + Send + Sync>;

/// One waiting push request.
struct Push {
    items: Vec<PushItem>,
    reply: oneshot::Sender<Result<Json, EngineError>>,
}

/// The front of the push batcher. Concurrent push requests share one
/// statement and one commit; each gets the answer a call of its own would
/// have had (dedup and maxSize judge the requests in arrival order), and
/// only after the commit.
#[derive(Clone)]
pub(crate) struct PushBatcher {
    tx: mpsc::UnboundedSender<Push>,
}

impl PushBatcher {
    pub(crate) fn start(pool: Pool, slots: usize, announce: Announce, stats: Arc<BatchStats>) -> Self {
        let (tx, rx) = mpsc::unbounded_channel();
        tokio::spawn(dispatch_pushes(pool, rx, Arc::new(Semaphore::new(slots.max(1))), announce, stats));
        PushBatcher { tx }
    }

    pub(crate) async fn push(&self, items: Vec<PushItem>) -> Result<Json, EngineError> {
        let (reply, rx) = oneshot::channel();
        self.tx
            .send(Push { items, reply })
            .map_err(|_| EngineError::Unavailable("the engine is shutting down".into()))?;
        rx.await.map_err(|_| EngineError::Unavailable("the push batch was dropped".into()))?
    }
}

fn payload_bytes(p: &Push) -> usize {
    p.items.iter().map(|i| i.payload.as_ref().map_or(0, |r| r.get().len())).sum()
}

async fn dispatch_pushes(
    pool: Pool,
    mut rx: mpsc::UnboundedReceiver<Push>,
    slots: Arc<Semaphore>,
    announce: Announce,
    stats: Arc<BatchStats>,
) {
    // A request that did not fit the last batch opens the next one.
    let mut held: Option<Push> = None;
    loop {
        let Ok(permit) = slots.clone().acquire_owned().await else { return };
        let first = match held.take() {
            Some(p) => p,
            None => match rx.recv().await {
                Some(p) => p,
                None => return,
            },
        };
        let (mut items, mut bytes) = (first.items.len(), payload_bytes(&first));
        let mut batch = vec![first];
        while let Ok(p) = rx.try_recv() {
            let (n, b) = (p.items.len(), payload_bytes(&p));
            if items + n > MAX_PUSH_ITEMS || bytes + b > MAX_PUSH_BYTES {
                held = Some(p);
                break;
            }
            items += n;
            bytes += b;
            batch.push(p);
        }
        stats.pushes.record(batch.len());
        let (pool, announce) = (pool.clone(), announce.clone());
        tokio::spawn(async move {
            run_pushes(&pool, batch, &announce).await;
            drop(permit);
        });
    }
}

async fn run_pushes(pool: &Pool, mut batch: Vec<Push>, announce: &Announce) {
    if batch.len() == 1 {
        if let Some(p) = batch.pop() {
            let answer = push_call(pool, PushColumns::of(&p.items), None, announce).await;
            let _ = p.reply.send(answer);
        }
        return;
    }
    let counts: Vec<usize> = batch.iter().map(|p| p.items.len()).collect();
    let requests: Vec<i32> =
        counts.iter().enumerate().flat_map(|(n, &c)| std::iter::repeat_n(n as i32, c)).collect();
    let cols = PushColumns::of(batch.iter().flat_map(|p| p.items.iter()));
    let outcome =
        push_call(pool, cols, Some(requests), announce).await.and_then(|json| split(&json, &counts));
    match outcome {
        Ok(answers) => {
            for (p, a) in batch.into_iter().zip(answers) {
                let _ = p.reply.send(Ok(a));
            }
        }
        // The database may have committed before the connection dropped:
        // each caller hears the failure and resends (transaction ids dedup).
        Err(EngineError::Unavailable(m)) => {
            for p in batch {
                let _ = p.reply.send(Err(EngineError::Unavailable(m.clone())));
            }
        }
        // The statement failed and rolled back: each request alone, so one
        // poison request fails by itself.
        Err(_) => {
            for p in batch {
                let answer = push_call(pool, PushColumns::of(&p.items), None, announce).await;
                let _ = p.reply.send(answer);
            }
        }
    }
}

/// One `push_rows` call; announces the queues that got messages after the commit.
pub(crate) async fn push_call(
    pool: &Pool,
    c: PushColumns<'_>,
    requests: Option<Vec<i32>>,
    announce: &Announce,
) -> Result<Json, EngineError> {
    let client = pool.get().await?;
    let stmt = client.prepare_cached(include_str!("../sql/statements/push.sql")).await?;
    let row = client
        .query_one(
            &stmt,
            &[&c.queues, &c.partitions, &c.transaction_ids, &c.trace_ids, &c.payloads, &requests],
        )
        .await?;
    drop(client);
    let result: Option<String> = row.try_get(0)?;
    let queued: Option<Vec<String>> = row.try_get(1)?;
    if let Some(queues) = queued {
        announce(queues);
    }
    result.map(Json).ok_or_else(|| EngineError::Protocol("push answered NULL".into()))
}

/// The batch's result array cut into each request's own, indexes from 0.
fn split(json: &Json, counts: &[usize]) -> Result<Vec<Json>, EngineError> {
    let all: Vec<serde_json::Value> = json.decode().map_err(|e| EngineError::Protocol(e.to_string()))?;
    if all.len() != counts.iter().sum::<usize>() {
        return Err(EngineError::Protocol("push answered a result per item of another batch".into()));
    }
    let mut rest = all.into_iter();
    counts
        .iter()
        .map(|&n| {
            let mut mine: Vec<serde_json::Value> = rest.by_ref().take(n).collect();
            for (i, r) in mine.iter_mut().enumerate() {
                if let Some(obj) = r.as_object_mut() {
                    obj.insert("index".into(), i.into());
                }
            }
            serde_json::to_string(&mine).map(Json).map_err(|e| EngineError::Protocol(e.to_string()))
        })
        .collect()
}
