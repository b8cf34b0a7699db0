//! The pop batcher: concurrent pops of queues, one `queen.pop_requests`
//! call and one commit; a lone pop is one `queen.pop_api` call.

use std::sync::Arc;

use crate::batch::{
    answer_batch, unless_alone, Answered, BatchKind, BatchStats, Batcher, Budget, Rerun, Waiting, STALL_AFTER,
};
use crate::db::Pool;
use crate::groups::{SubscriptionMode, QUEUE_MODE, STREAMS_GROUP_PREFIX};
use crate::notifier;
use crate::EngineError;
pub use queen_wire::{LeaseRenewal, PopRequest};

/// A pop with the broker's default start filled in, when it names a
/// consumer group but neither a mode nor a start: the start of a group is
/// fixed by its first pop, so the default applies there only (the SQL
/// ignores it for a registered group). `None`: use the pop as it is.
///
/// A streams runner's group (`streams.<query>`) starts at the oldest message
/// whatever the default: its runner sends no mode and its users push before
/// they run (README, "Upgrading from Queen 1.x").
pub(crate) fn with_default_subscription(req: &PopRequest, default: SubscriptionMode) -> Option<PopRequest> {
    let unset = |v: &Option<String>| v.as_deref().is_none_or(str::is_empty);
    let group = req.consumer_group.as_deref().filter(|g| *g != QUEUE_MODE)?;
    if !unset(&req.subscription_mode) || !unset(&req.subscription_from) {
        return None;
    }
    let mode = if group.starts_with(STREAMS_GROUP_PREFIX) { SubscriptionMode::All } else { default };
    Some(PopRequest { subscription_mode: Some(mode.as_str().to_owned()), ..req.clone() })
}

/// The long-poll waiters a pop waits with.
pub(crate) fn waiter_key(req: &PopRequest) -> &str {
    if req.is_by_tag() {
        notifier::ANY_QUEUE
    } else {
        &req.queue
    }
}

/// Pops in one statement, and the messages they may ask for together: a
/// batch holds its lanes' row locks until its commit, so it stays short.
const MAX_POPS: usize = 64;
const MAX_POP_MESSAGES: usize = 1000;

/// Concurrent pops of queues: one `queen.pop_requests` call, one commit.
/// Answers are the SQL's text (sealed payloads still sealed).
pub(crate) type PopBatcher = Batcher<PopRequest, Option<String>>;

pub(crate) fn start_pops(
    pool: Pool,
    slots: usize,
    key_id: Option<String>,
    stats: Arc<BatchStats>,
) -> PopBatcher {
    let budget = Budget {
        ceiling: [MAX_POPS, MAX_POP_MESSAGES],
        cost: |r: &PopRequest| [1, usize::try_from(r.batch).unwrap_or(0)],
    };
    let key_id: Option<Arc<str>> = key_id.map(Arc::from);
    Batcher::start(slots, budget, BatchKind::Pop, stats, STALL_AFTER, move |batch| {
        run_pops(pool.clone(), key_id.clone(), batch)
    })
}

async fn run_pops(
    pool: Pool,
    key_id: Option<Arc<str>>,
    batch: Vec<Waiting<PopRequest, Option<String>>>,
) -> Answered {
    let alone = |r: PopRequest| {
        let (pool, key_id) = (pool.clone(), key_id.clone());
        async move { pop_call(&pool, &r, key_id.as_deref()).await }
    };
    let Some(batch) = unless_alone(batch, &alone).await else { return Answered::Together };
    let requests: Vec<&PopRequest> = batch.iter().map(|w| &w.request).collect();
    let outcome = pop_many(&pool, &requests, key_id.as_deref()).await;
    drop(requests);
    answer_batch(batch, outcome, alone, Rerun::InArrivalOrder).await
}

/// One `pop_api` call: one request's pop.
pub(crate) async fn pop_call(
    pool: &Pool,
    r: &PopRequest,
    key_id: Option<&str>,
) -> Result<Option<String>, EngineError> {
    pop_one(pool, include_str!("../sql/statements/pop.sql"), [&r.queue, &r.partition], r, key_id).await
}

/// One `pop_matching` call: a pop by namespace and/or task, which names
/// tags where a queue pop names its queue and partition. Not batched (it
/// walks several queues). Payloads may be sealed at rest, as a pop's.
pub(crate) async fn pop_matching_call(
    pool: &Pool,
    r: &PopRequest,
    key_id: Option<&str>,
) -> Result<Option<String>, EngineError> {
    let sql = "SELECT queen.pop_matching($1, $2, $3, $4, $5, $6, $7, $8, $9, $10)::text";
    pop_one(pool, sql, [&r.namespace, &r.task], r, key_id).await
}

/// A lone pop: `sql` takes what it pops from (queue and partition, or
/// namespace and task), then the rest of the request, then the key id.
async fn pop_one(
    pool: &Pool,
    sql: &'static str,
    from: [&(dyn tokio_postgres::types::ToSql + Sync); 2],
    r: &PopRequest,
    key_id: Option<&str>,
) -> Result<Option<String>, EngineError> {
    let client = pool.get().await?;
    let stmt = client.prepare_cached(sql).await?;
    let row = client
        .query_one(
            &stmt,
            &[
                from[0],
                from[1],
                &r.consumer_group,
                &r.batch,
                &r.partitions,
                &r.lease_seconds,
                &r.auto_ack,
                &r.subscription_mode,
                &r.subscription_from,
                &key_id,
            ],
        )
        .await?;
    Ok(row.try_get(0)?)
}

/// Extends every lane leased under `lease_id` by `seconds` from now.
pub(crate) async fn extend_lease(
    pool: &Pool,
    lease_id: &str,
    seconds: i32,
) -> Result<LeaseRenewal, EngineError> {
    let client = pool.get().await?;
    let stmt =
        client.prepare_cached("SELECT e.renewed, e.expires_at FROM queen.extend_lease($1, $2) e").await?;
    let row = client.query_one(&stmt, &[&lease_id, &seconds]).await?;
    let renewed: i32 = row.try_get(0)?;
    let expires_at: Option<String> = row.try_get(1)?;
    let renewed = u32::try_from(renewed).map_err(|e| EngineError::Protocol(e.to_string()))?;
    Ok(LeaseRenewal::new(lease_id, renewed, expires_at))
}

/// Several requests' pops in one statement: one answer per request.
async fn pop_many(
    pool: &Pool,
    batch: &[&PopRequest],
    key_id: Option<&str>,
) -> Result<Vec<Option<String>>, EngineError> {
    let queues: Vec<&str> = batch.iter().map(|r| r.queue.as_str()).collect();
    let partitions: Vec<Option<&str>> = batch.iter().map(|r| r.partition.as_deref()).collect();
    let groups: Vec<Option<&str>> = batch.iter().map(|r| r.consumer_group.as_deref()).collect();
    let batches: Vec<i32> = batch.iter().map(|r| r.batch).collect();
    let partition_counts: Vec<i32> = batch.iter().map(|r| r.partitions).collect();
    let lease_seconds: Vec<Option<i32>> = batch.iter().map(|r| r.lease_seconds).collect();
    let auto_acks: Vec<bool> = batch.iter().map(|r| r.auto_ack).collect();
    let modes: Vec<Option<&str>> = batch.iter().map(|r| r.subscription_mode.as_deref()).collect();
    let froms: Vec<Option<&str>> = batch.iter().map(|r| r.subscription_from.as_deref()).collect();
    let client = pool.get().await?;
    let stmt = client.prepare_cached(include_str!("../sql/statements/pop_batch.sql")).await?;
    let row = client
        .query_one(
            &stmt,
            &[
                &queues,
                &partitions,
                &groups,
                &batches,
                &partition_counts,
                &lease_seconds,
                &auto_acks,
                &modes,
                &froms,
                &key_id,
            ],
        )
        .await?;
    let answers: Vec<Option<String>> = row.try_get(0)?;
    Ok(answers)
}
