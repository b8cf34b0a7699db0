//! The KV write batcher: concurrent single-op writes, one statement and one
//! commit; the common batches (puts, incrs on distinct keys) set-based.

use std::sync::Arc;

use crate::batch::{
    answer_batch, unless_alone, Answered, BatchKind, BatchStats, Batcher, Budget, Rerun, Waiting,
    MAX_BATCH_BYTES, STALL_AFTER,
};
use crate::db::Pool;
use crate::kv::{outcome, write_one, Expect, KvColumns, KvOp, KvResult};
use crate::EngineError;

/// Writes in one statement.
const MAX_WRITES: usize = 256;

/// Concurrent single-op KV writes: one `queen.kv_write_rows` call, one commit.
pub(crate) type WriteBatcher = Batcher<KvOp, KvResult>;

pub(crate) fn start_writes(pool: Pool, slots: usize, stats: Arc<BatchStats>) -> WriteBatcher {
    let budget = Budget { ceiling: [MAX_WRITES, MAX_BATCH_BYTES], cost: |op: &KvOp| [1, op.value_bytes()] };
    Batcher::start(slots, budget, BatchKind::KvWrite, stats, STALL_AFTER, move |batch| {
        run_writes(pool.clone(), batch)
    })
}

async fn run_writes(pool: Pool, batch: Vec<Waiting<KvOp, KvResult>>) -> Answered {
    let alone = |op: KvOp| {
        let pool = pool.clone();
        async move {
            let client = pool.get().await?;
            write_one(&client, &op).await
        }
    };
    let Some(batch) = unless_alone(batch, &alone).await else { return Answered::Together };
    let ops: Vec<&KvOp> = batch.iter().map(|w| &w.request).collect();
    let outcome = write_many(&pool, &ops).await;
    drop(ops);
    answer_batch(batch, outcome, alone, Rerun::SideBySide).await
}

/// The verdicts of several single-op writes, index-aligned with `ops`.
/// `queen.kv_write_rows` applies them in (ns, key) byte order, arrival
/// order within a key: the order every KV writer locks keys in.
async fn write_many(pool: &Pool, ops: &[&KvOp]) -> Result<Vec<KvResult>, EngineError> {
    if let Some(puts) = PutColumns::of(ops) {
        let client = pool.get().await?;
        let stmt = client.prepare_cached(include_str!("../../sql/statements/kv_put_batch.sql")).await?;
        let row = client
            .query_one(&stmt, &[&puts.ns, &puts.key, &puts.value, &puts.ttl, &puts.forever, &puts.if_absent])
            .await?;
        let verdicts: Option<Vec<String>> = row.try_get(0)?;
        return verdicts.unwrap_or_default().iter().map(|v| outcome(v)).collect();
    }
    if let Some(incrs) = IncrColumns::of(ops) {
        let client = pool.get().await?;
        let stmt = client.prepare_cached(include_str!("../../sql/statements/kv_incr_batch.sql")).await?;
        let row = client
            .query_one(
                &stmt,
                &[&incrs.ns, &incrs.key, &incrs.delta, &incrs.min, &incrs.max, &incrs.ttl, &incrs.forever],
            )
            .await?;
        let verdicts: Option<Vec<String>> = row.try_get(0)?;
        return verdicts.unwrap_or_default().iter().map(|v| outcome(v)).collect();
    }
    let c = KvColumns::of(ops.iter().copied());
    let client = pool.get().await?;
    let stmt = client.prepare_cached(include_str!("../../sql/statements/kv_write_batch.sql")).await?;
    let row = client.query_one(&stmt, &c.params()).await?;
    let verdicts: Vec<String> = row.try_get(0)?;
    verdicts.iter().map(|v| outcome(v)).collect()
}

/// The arrays of `kv_put_batch.sql`: a batch of puts (no expect, or expect
/// 0) and putIfAbsents on distinct keys, the common batch, which one
/// set-based statement answers. Any other batch runs `kv_write_rows`.
struct PutColumns<'a> {
    ns: Vec<&'a str>,
    key: Vec<&'a str>,
    value: Vec<&'a str>,
    ttl: Vec<Option<i64>>,
    forever: Vec<Option<bool>>,
    if_absent: Vec<bool>,
}

impl<'a> PutColumns<'a> {
    fn of(ops: &[&'a KvOp]) -> Option<Self> {
        let mut c = PutColumns {
            ns: Vec::with_capacity(ops.len()),
            key: Vec::with_capacity(ops.len()),
            value: Vec::with_capacity(ops.len()),
            ttl: Vec::with_capacity(ops.len()),
            forever: Vec::with_capacity(ops.len()),
            if_absent: Vec::with_capacity(ops.len()),
        };
        let mut keys = std::collections::HashSet::with_capacity(ops.len());
        for op in ops {
            let (ns, key, value, expiry, if_absent) = match op {
                KvOp::Put { ns, key, value, expiry, expect: None, .. } => (ns, key, value, expiry, false),
                KvOp::Put { ns, key, value, expiry, expect: Some(Expect::Absent), .. }
                | KvOp::PutIfAbsent { ns, key, value, expiry, .. } => (ns, key, value, expiry, true),
                _ => return None,
            };
            if !keys.insert((ns.as_str(), key.as_str())) {
                return None;
            }
            let (ttl, forever) = expiry.columns();
            c.ns.push(ns);
            c.key.push(key);
            c.value.push(value.get());
            c.ttl.push(ttl);
            c.forever.push(forever);
            c.if_absent.push(if_absent);
        }
        Some(c)
    }
}

/// The arrays of `kv_incr_batch.sql`: a batch of incrs on distinct keys whose
/// first value (0 + delta) is within each member's own limits, so that only
/// a live row can refuse. Limits too large for an i128 send the batch to
/// `kv_write_rows`, which compares them in SQL.
struct IncrColumns<'a> {
    ns: Vec<&'a str>,
    key: Vec<&'a str>,
    delta: Vec<&'a str>,
    min: Vec<Option<&'a str>>,
    max: Vec<Option<&'a str>>,
    ttl: Vec<Option<i64>>,
    forever: Vec<Option<bool>>,
}

impl<'a> IncrColumns<'a> {
    fn of(ops: &[&'a KvOp]) -> Option<Self> {
        let mut c = IncrColumns {
            ns: Vec::with_capacity(ops.len()),
            key: Vec::with_capacity(ops.len()),
            delta: Vec::with_capacity(ops.len()),
            min: Vec::with_capacity(ops.len()),
            max: Vec::with_capacity(ops.len()),
            ttl: Vec::with_capacity(ops.len()),
            forever: Vec::with_capacity(ops.len()),
        };
        let mut keys = std::collections::HashSet::with_capacity(ops.len());
        for op in ops {
            let KvOp::Incr { ns, key, delta, min, max, expiry, .. } = op else { return None };
            if !keys.insert((ns.as_str(), key.as_str())) {
                return None;
            }
            let first: i128 = delta.get().parse().ok()?;
            if let Some(min) = min {
                if first < min.get().parse::<i128>().ok()? {
                    return None;
                }
            }
            if let Some(max) = max {
                if first > max.get().parse::<i128>().ok()? {
                    return None;
                }
            }
            let (ttl, forever) = expiry.columns();
            c.ns.push(ns);
            c.key.push(key);
            c.delta.push(delta.get());
            c.min.push(min.as_deref().map(serde_json::value::RawValue::get));
            c.max.push(max.as_deref().map(serde_json::value::RawValue::get));
            c.ttl.push(ttl);
            c.forever.push(forever);
        }
        Some(c)
    }
}
