//! The pop batcher: concurrent pops of queues, one `queen.pop_requests`
//! call and one commit; a lone pop is one `queen.pop_api` call. SQL answers
//! a delivery's columns ([`Popped`]); [`Popped::answer`] writes the body.

use std::sync::Arc;

use serde_json::value::RawValue;
use tokio_postgres::Row;
use uuid::Uuid;

use crate::batch::{
    answer_batch, unless_alone, Answered, BatchKind, BatchStats, Batcher, Budget, Rerun, Waiting, STALL_AFTER,
};
use crate::db::Pool;
use crate::groups::{SubscriptionMode, QUEUE_MODE, STREAMS_GROUP_PREFIX};
use crate::notifier;
use crate::EngineError;
pub use queen_wire::{LeaseRenewal, PopAnswer, PopRequest, PoppedMessage};

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
/// Answers are the deliveries' columns (sealed payloads still sealed).
pub(crate) type PopBatcher = Batcher<PopRequest, Option<Popped>>;

/// A delivery as `queen.popped` answers it: the lanes claimed, in claim
/// order, with how many messages each gave, and every message's fields,
/// lane after lane. Payloads are as stored (perhaps sealed at rest).
#[derive(Debug)]
pub(crate) struct Popped {
    queue: String,
    lease_id: Option<Uuid>,
    consumer_group: String,
    lane_ids: Vec<Uuid>,
    lane_names: Vec<String>,
    lane_sizes: Vec<i32>,
    ids: Vec<Uuid>,
    transaction_ids: Vec<String>,
    trace_ids: Vec<Option<String>>,
    payloads: Vec<Option<String>>,
    producer_subs: Vec<Option<String>>,
    created_ats: Vec<String>,
}

impl Popped {
    /// The delivery of a `queen.popped` row; `None` for the all-NULL row of
    /// a pop that delivered nothing.
    fn from_row(row: &Row) -> Result<Option<Popped>, EngineError> {
        let Some(queue) = row.try_get::<_, Option<String>>(0)? else { return Ok(None) };
        Ok(Some(Popped {
            queue,
            lease_id: row.try_get(1)?,
            consumer_group: row.try_get(2)?,
            lane_ids: row.try_get(3)?,
            lane_names: row.try_get(4)?,
            lane_sizes: row.try_get(5)?,
            ids: row.try_get(6)?,
            transaction_ids: row.try_get(7)?,
            trace_ids: row.try_get(8)?,
            payloads: row.try_get(9)?,
            producer_subs: row.try_get(10)?,
            created_ats: row.try_get(11)?,
        }))
    }

    /// The pop's answer; `open` opens a payload sealed at rest.
    pub(crate) fn answer(
        self,
        open: impl Fn(String) -> Result<String, EngineError>,
    ) -> Result<PopAnswer, EngineError> {
        let n = self.ids.len();
        let lanes = self.lane_ids.len();
        let columns = [self.transaction_ids.len(), self.trace_ids.len(), self.payloads.len()];
        let columns = [columns[0], columns[1], columns[2], self.producer_subs.len(), self.created_ats.len()];
        let sized: usize = self.lane_sizes.iter().map(|&k| usize::try_from(k).unwrap_or(0)).sum();
        if lanes == 0
            || self.lane_names.len() != lanes
            || self.lane_sizes.len() != lanes
            || sized != n
            || columns.iter().any(|&c| c != n)
        {
            return Err(EngineError::Protocol(format!(
                "a pop answered {lanes} lanes of {sized} messages and {n} message ids"
            )));
        }
        let lease_id = self.lease_id.map(|l| l.to_string()).unwrap_or_default();
        let lane_of_each = self
            .lane_sizes
            .iter()
            .enumerate()
            .flat_map(|(lane, &k)| std::iter::repeat_n(lane, usize::try_from(k).unwrap_or(0)));
        let mut messages = Vec::with_capacity(n);
        let fields = self.ids.into_iter().zip(self.transaction_ids).zip(self.trace_ids).zip(self.payloads);
        let fields = fields.zip(self.producer_subs).zip(self.created_ats).zip(lane_of_each);
        for ((((((id, transaction_id), trace_id), payload), producer_sub), created_at), lane) in fields {
            let data = match payload {
                Some(text) => RawValue::from_string(open(text)?)
                    .map_err(|e| EngineError::Protocol(format!("a popped payload is not JSON: {e}")))?,
                None => RawValue::NULL.to_owned(),
            };
            messages.push(PoppedMessage {
                id: id.to_string(),
                transaction_id,
                trace_id,
                data,
                producer_sub,
                created_at,
                partition_id: self.lane_ids[lane].to_string(),
                partition: self.lane_names[lane].clone(),
                queue: self.queue.clone(),
                lease_id: lease_id.clone(),
                consumer_group: self.consumer_group.clone(),
            });
        }
        Ok(PopAnswer {
            success: true,
            partition: self.lane_names[0].clone(),
            partition_id: self.lane_ids[0].to_string(),
            queue: self.queue,
            lease_id,
            consumer_group: self.consumer_group,
            messages,
            partitions_claimed: lanes,
        })
    }
}

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
    batch: Vec<Waiting<PopRequest, Option<Popped>>>,
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
) -> Result<Option<Popped>, EngineError> {
    pop_one(pool, include_str!("../sql/statements/pop.sql"), [&r.queue, &r.partition], r, key_id).await
}

/// One `pop_matching` call: a pop by namespace and/or task, which names
/// tags where a queue pop names its queue and partition. Not batched (it
/// walks several queues). Payloads may be sealed at rest, as a pop's.
pub(crate) async fn pop_matching_call(
    pool: &Pool,
    r: &PopRequest,
    key_id: Option<&str>,
) -> Result<Option<Popped>, EngineError> {
    let sql = include_str!("../sql/statements/pop_matching.sql");
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
) -> Result<Option<Popped>, EngineError> {
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
    Popped::from_row(&row)
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
) -> Result<Vec<Option<Popped>>, EngineError> {
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
    let rows = client
        .query(
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
    if rows.len() != batch.len() {
        return Err(EngineError::Protocol(format!("{} pops answered {} rows", batch.len(), rows.len())));
    }
    rows.iter().map(Popped::from_row).collect()
}
