//! The KV get batcher: concurrent single-key gets, one statement, bounded
//! in the bytes of values it answers (`kv_max_read_bytes`).

use std::sync::Arc;

use crate::batch::{
    answer_batch, unless_alone, Answered, BatchKind, BatchStats, Batcher, Budget, Rerun, Waiting, STALL_AFTER,
};
use crate::db::Pool;
use crate::kv::{get_outcome, KvResult};
use crate::EngineError;

/// Gets in one statement.
const MAX_GETS: usize = 256;

/// One key a get reads.
pub(crate) struct GetKey {
    pub(crate) ns: String,
    pub(crate) key: String,
}

/// Concurrent single-key gets: one `unnest` join on the primary key.
pub(crate) type GetBatcher = Batcher<GetKey, KvResult>;

/// `max_read`: the bytes of values one statement may answer
/// (`kv_max_read_bytes`); the rest of a batch is asked again.
pub(crate) fn start_gets(pool: Pool, slots: usize, max_read: i64, stats: Arc<BatchStats>) -> GetBatcher {
    let budget = Budget { ceiling: [MAX_GETS, usize::MAX], cost: |_| [1, 0] };
    Batcher::start(slots, budget, BatchKind::KvGet, stats, STALL_AFTER, move |batch| {
        run_gets(pool.clone(), max_read, batch)
    })
}

async fn run_gets(pool: Pool, max_read: i64, batch: Vec<Waiting<GetKey, KvResult>>) -> Answered {
    let alone = |g: GetKey| {
        let pool = pool.clone();
        async move {
            get_many(&pool, &[&g], max_read)
                .await?
                .pop()
                .ok_or_else(|| EngineError::Protocol("a KV get answered nothing".into()))
        }
    };
    let Some(batch) = unless_alone(batch, &alone).await else { return Answered::Together };
    let keys: Vec<&GetKey> = batch.iter().map(|w| &w.request).collect();
    let outcome = get_many(&pool, &keys, max_read).await;
    drop(keys);
    answer_batch(batch, outcome, alone, Rerun::SideBySide).await
}

/// The answers of `batch`, index-aligned. Each statement answers at most
/// `max_read` bytes of values (and always its first row): what did not fit
/// is asked again, so a batch of large values never makes one huge answer.
async fn get_many(pool: &Pool, batch: &[&GetKey], max_read: i64) -> Result<Vec<KvResult>, EngineError> {
    let client = pool.get().await?;
    let mut rows: Vec<Option<tokio_postgres::Row>> = (0..batch.len()).map(|_| None).collect();
    if let [one] = batch {
        let stmt = client.prepare_cached(include_str!("../../sql/statements/kv_get.sql")).await?;
        rows[0] = client.query_opt(&stmt, &[&one.ns, &one.key]).await?;
    } else {
        let stmt = client.prepare_cached(include_str!("../../sql/statements/kv_get_batch.sql")).await?;
        let mut asked: Vec<usize> = (0..batch.len()).collect();
        while !asked.is_empty() {
            let ns: Vec<&str> = asked.iter().map(|&i| batch[i].ns.as_str()).collect();
            let keys: Vec<&str> = asked.iter().map(|&i| batch[i].key.as_str()).collect();
            let mut again = Vec::new();
            for row in client.query(&stmt, &[&ns, &keys, &max_read]).await? {
                let n: i64 = row.try_get(4)?;
                let included: bool = row.try_get(5)?;
                let Some(&member) = usize::try_from(n - 1).ok().and_then(|i| asked.get(i)) else { continue };
                if included {
                    rows[member] = Some(row);
                } else {
                    again.push(member);
                }
            }
            // The first row is always included, so each pass answers one at least.
            if again.len() >= asked.len() {
                return Err(EngineError::Protocol(
                    "a KV get batch answered no row within its byte ceiling".into(),
                ));
            }
            asked = again;
        }
    }
    batch.iter().zip(rows).map(|(g, row)| get_outcome(&g.key, row)).collect()
}
