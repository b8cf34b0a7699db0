//! The shared commit (`POST /api/v1/transaction`): the bundle decoded and
//! checked here, once; `queen.transaction_rows` applies its pushes, acks,
//! KV ops and timer ops as typed arrays in one PostgreSQL transaction.

use std::sync::Arc;

use crate::batch::{
    answer_members, unless_alone, Answered, BatchKind, BatchStats, Batcher, Budget, Rerun, Waiting,
    STALL_AFTER,
};
use std::time::Duration;

use serde::{Deserialize, Serialize};
use serde_json::value::RawValue;

use crate::ack::{self, AckColumns, AckItem};
use crate::db::Pool;
use crate::kv::decode::{decode_call, kv_reject};
use crate::kv::{name_outcomes, KvColumns, KvOp, KvResult};
use crate::push::{self, PushColumns, PushItem};
use crate::timers::{self, TimerColumns, TimerOp, TimerOutcomes, TimerResult, DEFAULT_TIMER_HORIZON};
use crate::wire::{self, Kind};
use crate::{EngineError, Json};
use queen_wire::TxRefusal;

/// A checked bundle. Slots are positions in the flat result index space:
/// one per pushed item and per ack, in `operations` order, then the KV ops.
#[derive(Debug, Default)]
pub struct Bundle {
    /// Pushed items with their result slots.
    pub pushes: Vec<(i32, PushItem)>,
    /// Acks with their result slots.
    pub acks: Vec<(i32, AckItem)>,
    /// The `kv` rider, applied after the pushes and acks.
    pub kv: Vec<KvOp>,
    /// The `timers` rider, applied last (its results follow the KV ones).
    pub timers: Vec<TimerOp>,
    /// The lease lent to acks that carry none: set when the bundle names
    /// exactly one distinct lease.
    pub lent_lease: Option<String>,
    /// Pushed items plus acks.
    pub slots: i32,
    /// The caller's authenticated `sub`, stamped on the rider's timers
    /// (their fired messages carry it as producerSub); the pushes carry
    /// their own.
    pub producer_sub: Option<String>,
}

/// Decodes a bundle, refusing bad input with the 400 that names it
/// (timers judged against the default horizon).
pub fn decode_bundle(body: &str) -> Result<Bundle, EngineError> {
    decode_bundle_for(body, DEFAULT_TIMER_HORIZON)
}

pub(crate) fn decode_bundle_for(body: &str, horizon: Duration) -> Result<Bundle, EngineError> {
    let bad = wire::bad_request;
    let raw: &RawValue = serde_json::from_str(body).map_err(|_| bad("body", "must be a JSON object"))?;
    let f = wire::fields(raw).ok_or_else(|| bad("body", "must be a JSON object"))?;
    let ops = f
        .get("operations")
        .and_then(|o| wire::elements(o))
        .ok_or_else(|| bad("operations", "is required and must be an array"))?;
    let required_leases = match f.get("requiredLeases") {
        None => Vec::new(),
        Some(r) => match wire::kind(r) {
            Kind::Null => Vec::new(),
            Kind::Array => wire::elements(r).unwrap_or_default(),
            _ => return Err(bad("requiredLeases", "must be an array of strings")),
        },
    };

    let mut push_raw: Vec<(i32, &RawValue)> = Vec::new();
    let mut ack_raw: Vec<(i32, &RawValue)> = Vec::new();
    let mut leases: Vec<String> = Vec::new();
    let mut slot = 0i32;
    for (i, op) in ops.iter().enumerate() {
        let of = wire::fields(op).ok_or_else(|| bad(&format!("operations[{i}]"), "must be an object"))?;
        let kind = match of.get("type") {
            Some(t) if wire::kind(t) == Kind::String => Some(wire::string(t)?),
            _ => None,
        };
        match kind.as_deref() {
            Some("push") => {
                let items = of.get("items").and_then(|it| wire::elements(it)).ok_or_else(|| {
                    bad(&format!("operations[{i}].items"), "is required and must be an array")
                })?;
                for item in items {
                    push_raw.push((slot, item));
                    slot += 1;
                }
            }
            Some("ack") => {
                ack_raw.push((slot, op));
                slot += 1;
                if let Some(l) = of.get("leaseId").filter(|l| wire::kind(l) == Kind::String) {
                    let lease = wire::string(l)?;
                    if !lease.is_empty() {
                        leases.push(lease.to_lowercase());
                    }
                }
            }
            _ => return Err(bad(&format!("operations[{i}].type"), "must be \"push\" or \"ack\"")),
        }
    }
    let kv_raw = match f.get("kv") {
        None => None,
        Some(k) => match wire::kind(k) {
            Kind::Null => None,
            Kind::Array => Some(*k),
            _ => return Err(kv_reject("kv_bad_body", "kv must be an array of kv operations")),
        },
    };
    let has_kv = kv_raw.and_then(wire::elements).is_some_and(|k| !k.is_empty());
    let timers = match f.get("timers") {
        None => Vec::new(),
        Some(t) if wire::kind(t) == Kind::Null => Vec::new(),
        Some(t) => timers::decode_ops(t, horizon, true)?,
    };
    if slot == 0 && !has_kv && timers.is_empty() {
        return Err(bad("operations", "Transaction has no operations to commit"));
    }
    for l in required_leases {
        let text = match wire::kind(l) {
            Kind::Null => continue,
            Kind::String => wire::string(l)?,
            _ => l.get().to_owned(),
        };
        if !text.is_empty() {
            leases.push(text.to_lowercase());
        }
    }
    leases.sort();
    leases.dedup();
    let lent_lease = if leases.len() == 1 { leases.pop() } else { None };

    // Items are named by their position among the bundle's pushes and acks.
    let pushes = push_raw
        .iter()
        .enumerate()
        .map(|(k, (s, item))| push::decode_item(k, item).map(|p| (*s, p)))
        .collect::<Result<_, _>>()?;
    let acks = ack_raw
        .iter()
        .enumerate()
        .map(|(k, (s, item))| ack::decode_item(&format!("acknowledgments[{k}]"), item, None).map(|a| (*s, a)))
        .collect::<Result<_, _>>()?;
    let kv = match kv_raw.filter(|_| has_kv) {
        Some(k) => decode_call(k.get(), true)?,
        None => Vec::new(),
    };
    Ok(Bundle { pushes, acks, kv, timers, lent_lease, slots: slot, producer_sub: None })
}

impl Bundle {
    /// Acks and KV ops only: nothing to seal, announce or wake after the
    /// commit, and no partition lock to order, so it may share a statement.
    pub(crate) fn batchable(&self) -> bool {
        self.pushes.is_empty() && self.timers.is_empty()
    }
}

/// One `transaction_rows` call; the push items already sealed where their
/// queues need it, and the timer ops as columns.
pub(crate) async fn bundle_call(
    pool: &Pool,
    bundle: &Bundle,
    push_slots: &[i32],
    push: &PushColumns<'_>,
    timer_columns: &TimerColumns,
    max_read: i64,
) -> Result<Json, EngineError> {
    let tx_id = uuid::Uuid::new_v4().to_string();
    let ack_slots: Vec<i32> = bundle.acks.iter().map(|(slot, _)| *slot).collect();
    let acks = AckColumns::of(bundle.acks.iter().map(|(_, a)| a));
    let kv = KvColumns::of(&bundle.kv);
    let mut params: Vec<&(dyn tokio_postgres::types::ToSql + Sync)> = vec![
        &tx_id,
        &bundle.lent_lease,
        &max_read,
        &bundle.slots,
        &push_slots,
        &push.queues,
        &push.partitions,
        &push.transaction_ids,
        &push.trace_ids,
        &push.payloads,
        &ack_slots,
    ];
    params.extend(acks.params());
    params.extend(kv.params());
    params.extend(timer_columns.params());
    let subs = push.subs();
    params.push(&subs);
    params.push(&bundle.producer_sub);
    let client = pool.get().await?;
    let stmt = client.prepare_cached(include_str!("../sql/statements/transaction.sql")).await?;
    let row = match client.query_one(&stmt, &params).await {
        Ok(row) => row,
        Err(EngineError::PreconditionLost(lost)) => {
            return Err(EngineError::Refused(lost.transaction_body(&tx_id)))
        }
        Err(EngineError::TransactionRefused(refusal)) => {
            return Err(EngineError::Refused(refusal.body(&tx_id)))
        }
        Err(e) => return Err(e),
    };
    drop(client);
    let record: Option<String> = row.try_get(0)?;
    answer(&record.ok_or_else(|| EngineError::Protocol("transaction answered NULL".into()))?, bundle, push)
}

/// What `queen.tx_record` answers for a bundle that committed.
#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct TxRecord {
    transaction_id: String,
    /// Each push item's message id, in push-item order.
    #[serde(default)]
    push_ids: Vec<String>,
    /// Whether each ack dead-lettered its message, in ack order (a
    /// committed bundle applied every ack).
    #[serde(default)]
    ack_dlq: Vec<bool>,
    /// Each KV op's outcome, in op order.
    #[serde(default)]
    kv: Vec<KvResult>,
    /// Each timer op's outcome, in op order; `None` without timer ops.
    #[serde(default)]
    timers: Option<TimerOutcomes>,
}

/// One element of a committed transaction's results; `index` is its place
/// in the flat index space (push items and acks by slot, then KV ops, then
/// timer ops).
#[derive(Serialize)]
#[serde(untagged)]
enum TxElement<'a> {
    Push(PushElement<'a>),
    Ack(AckElement<'a>),
    Kv(&'a KvResult),
    Timer(TimerElement<'a>),
}

#[derive(Serialize)]
#[serde(rename_all = "camelCase")]
struct PushElement<'a> {
    index: i32,
    #[serde(rename = "type")]
    kind: &'static str,
    success: bool,
    transaction_id: Option<&'a str>,
    message_id: &'a str,
    queue_name: &'a str,
}

#[derive(Serialize)]
#[serde(rename_all = "camelCase")]
struct AckElement<'a> {
    index: i32,
    #[serde(rename = "type")]
    kind: &'static str,
    success: bool,
    transaction_id: &'a str,
    error: Option<&'a str>,
    dlq: bool,
}

#[derive(Serialize)]
struct TimerElement<'a> {
    index: usize,
    #[serde(rename = "type")]
    kind: &'static str,
    #[serde(flatten)]
    result: &'a TimerResult,
}

/// A committed transaction's answer.
#[derive(Serialize)]
#[serde(rename_all = "camelCase")]
struct TxAnswer<'a> {
    transaction_id: &'a str,
    success: bool,
    results: Vec<TxElement<'a>>,
}

/// The answer of a committed bundle, from its record. `push` names its
/// push items (queue, transaction id) as sent, in push-item order.
fn answer(record: &str, bundle: &Bundle, push: &PushColumns<'_>) -> Result<Json, EngineError> {
    let protocol = |e: serde_json::Error| EngineError::Protocol(format!("a transaction record: {e}"));
    let mut r: TxRecord = serde_json::from_str(record).map_err(protocol)?;
    let timers = r.timers.take().unwrap_or_default().results(&bundle.timers)?;
    if r.push_ids.len() != bundle.pushes.len()
        || push.queues.len() != bundle.pushes.len()
        || r.ack_dlq.len() != bundle.acks.len()
        || r.kv.len() != bundle.kv.len()
    {
        return Err(EngineError::Protocol(
            "a transaction answered another number of results than ops".into(),
        ));
    }
    let names: Vec<&str> = bundle.kv.iter().map(KvOp::name).collect();
    let first_kv = usize::try_from(bundle.slots).map_err(|e| EngineError::Protocol(e.to_string()))?;
    name_outcomes(&mut r.kv, &names, first_kv, true);
    let mut slots: Vec<(i32, TxElement<'_>)> = Vec::with_capacity(bundle.pushes.len() + bundle.acks.len());
    for (i, ((slot, _), id)) in bundle.pushes.iter().zip(&r.push_ids).enumerate() {
        slots.push((
            *slot,
            TxElement::Push(PushElement {
                index: *slot,
                kind: "push",
                success: true,
                transaction_id: push.transaction_ids[i],
                message_id: id,
                queue_name: push.queues[i],
            }),
        ));
    }
    for ((slot, ack), dlq) in bundle.acks.iter().zip(&r.ack_dlq) {
        slots.push((
            *slot,
            TxElement::Ack(AckElement {
                index: *slot,
                kind: "ack",
                success: true,
                transaction_id: &ack.transaction_id,
                error: None,
                dlq: *dlq,
            }),
        ));
    }
    slots.sort_by_key(|(slot, _)| *slot);
    let first_timer = first_kv + r.kv.len();
    let results = (slots.into_iter().map(|(_, e)| e))
        .chain(r.kv.iter().map(TxElement::Kv))
        .chain(timers.iter().enumerate().map(|(i, result)| {
            TxElement::Timer(TimerElement { index: first_timer + i, kind: "timer", result })
        }))
        .collect();
    let body = TxAnswer { transaction_id: &r.transaction_id, success: true, results };
    serde_json::to_string(&body).map(Json).map_err(protocol)
}

/// A bundle of a batch that was refused: its refusal's facts
/// (`{"kvLost": ...}`, `{"ackRefused": ...}`), from which the engine
/// writes its answer.
fn refusal(facts: &str, tx_id: &str) -> EngineError {
    match serde_json::from_str::<TxRefusal>(facts) {
        Ok(refusal) => EngineError::Refused(refusal.body(tx_id)),
        Err(e) => EngineError::Protocol(format!("a bundle's refusal: {e}")),
    }
}

/// A bundle of acks and KV ops alone (a batch of one, or a member of a
/// batch that failed as a whole).
pub(crate) async fn plain_bundle_call(
    pool: &Pool,
    bundle: &Bundle,
    max_read: i64,
) -> Result<Json, EngineError> {
    let push = PushColumns::of(std::iter::empty());
    bundle_call(pool, bundle, &[], &push, &TimerColumns::default(), max_read).await
}

/// Several bundles of acks and KV ops in one statement: one answer per
/// bundle, `Err(EngineError::Refused)` for a bundle refused (it changed
/// nothing; the others committed).
pub(crate) async fn plain_bundles_call(
    pool: &Pool,
    bundles: &[&Bundle],
    max_read: i64,
) -> Result<Vec<Result<Json, EngineError>>, EngineError> {
    let tx_ids: Vec<String> = bundles.iter().map(|_| uuid::Uuid::new_v4().to_string()).collect();
    let lent: Vec<Option<&str>> = bundles.iter().map(|b| b.lent_lease.as_deref()).collect();
    let slots: Vec<i32> = bundles.iter().map(|b| b.slots).collect();
    let ack_counts = bundles.iter().map(|b| count(b.acks.len())).collect::<Result<Vec<i32>, _>>()?;
    let kv_counts = bundles.iter().map(|b| count(b.kv.len())).collect::<Result<Vec<i32>, _>>()?;
    let ack_slots: Vec<i32> = bundles.iter().flat_map(|b| b.acks.iter().map(|(slot, _)| *slot)).collect();
    let acks = AckColumns::of(bundles.iter().flat_map(|b| b.acks.iter().map(|(_, a)| a)));
    let kv = KvColumns::of(bundles.iter().flat_map(|b| b.kv.iter()));
    let mut params: Vec<&(dyn tokio_postgres::types::ToSql + Sync)> =
        vec![&tx_ids, &lent, &max_read, &slots, &ack_counts, &kv_counts, &ack_slots];
    params.extend(acks.params());
    params.extend(kv.params());
    let client = pool.get().await?;
    let stmt = client.prepare_cached(include_str!("../sql/statements/transaction_batch.sql")).await?;
    let row = client.query_one(&stmt, &params).await?;
    drop(client);
    let answers: Vec<String> = row.try_get(0)?;
    let refused: Vec<bool> = row.try_get(1)?;
    let no_pushes = PushColumns::of(std::iter::empty());
    if refused.len() != answers.len() || answers.len() != bundles.len() {
        return Err(EngineError::Protocol("a bundle batch answered unequal columns".into()));
    }
    Ok(answers
        .into_iter()
        .zip(refused)
        .zip(bundles.iter().zip(&tx_ids))
        .map(
            |((body, refused), (bundle, tx_id))| {
                if refused {
                    Err(refusal(&body, tx_id))
                } else {
                    answer(&body, bundle, &no_pushes)
                }
            },
        )
        .collect())
}

/// A length as the SQL's integer (a bundle holds far fewer items).
fn count(n: usize) -> Result<i32, EngineError> {
    i32::try_from(n).map_err(|_| EngineError::Protocol("a bundle too large to count".into()))
}

// The bundle batcher: concurrent bundles, one `queen.transaction_batch`
// call, one commit.

/// Bundles in one statement, and their acks and KV ops together.
const MAX_BUNDLES: usize = 64;
const MAX_BUNDLE_ITEMS: usize = 1000;

/// Concurrent bundles of acks and KV ops: one `queen.transaction_batch`
/// call, one commit. Each bundle is decided before it is applied, so a
/// refused one answers alone and writes nothing while the others commit;
/// a refusal that cannot be decided ahead fails the statement, and then
/// each bundle runs alone (all-or-nothing per bundle, no subtransaction).
pub(crate) type BundleBatcher = Batcher<Bundle, Json>;

pub(crate) fn start_bundles(
    pool: Pool,
    slots: usize,
    max_read: i64,
    stats: Arc<BatchStats>,
) -> BundleBatcher {
    let budget = Budget {
        ceiling: [MAX_BUNDLES, MAX_BUNDLE_ITEMS],
        cost: |b: &Bundle| [1, b.acks.len() + b.kv.len()],
    };
    Batcher::start(slots, budget, BatchKind::Transaction, stats, STALL_AFTER, move |batch| {
        run_bundles(pool.clone(), max_read, batch)
    })
}

async fn run_bundles(pool: Pool, max_read: i64, batch: Vec<Waiting<Bundle, Json>>) -> Answered {
    let alone = |b: Bundle| {
        let pool = pool.clone();
        async move { plain_bundle_call(&pool, &b, max_read).await }
    };
    let Some(batch) = unless_alone(batch, &alone).await else { return Answered::Together };
    let bundles: Vec<&Bundle> = batch.iter().map(|w| &w.request).collect();
    let outcome = plain_bundles_call(&pool, &bundles, max_read).await;
    drop(bundles);
    answer_members(batch, outcome, alone, Rerun::SideBySide).await
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used)]
mod tests {
    use super::*;

    fn refused(body: &str) -> String {
        match decode_bundle(body) {
            Err(EngineError::Rejected { body, .. }) => body,
            other => panic!("not rejected: {other:?}"),
        }
    }

    #[test]
    fn slots_follow_operations_order_and_one_lease_is_lent() {
        let pid = "01a23c37-da83-70ec-916f-db5e099885d6";
        let b = decode_bundle(&format!(
            r#"{{"operations":[{{"type":"ack","transactionId":"t","partitionId":"{pid}"}},
                {{"type":"push","items":[{{"queue":"q"}},{{"queue":"r"}}]}}],
               "requiredLeases":["ABC"],"kv":[{{"op":"get","ns":"a","key":"k"}}]}}"#
        ))
        .unwrap();
        assert_eq!(b.acks[0].0, 0);
        assert_eq!(b.pushes.iter().map(|(s, _)| *s).collect::<Vec<_>>(), vec![1, 2]);
        assert_eq!(b.slots, 3);
        assert_eq!(b.lent_lease.as_deref(), Some("abc"));
        assert_eq!(b.kv.len(), 1);
    }

    #[test]
    fn bad_bundles_are_named_as_before() {
        assert!(refused("[]").contains("body must be a JSON object"));
        assert!(refused(r#"{"operations":[{"type":"pop"}]}"#)
            .contains(r#"operations[0].type must be \"push\" or \"ack\""#));
        assert!(refused(r#"{"operations":[]}"#).contains("Transaction has no operations to commit"));
        assert!(refused(r#"{"operations":[{"type":"push","items":[{"queue":""}]}]}"#)
            .contains("items[0].queue is required"));
        assert!(refused(r#"{"operations":[],"kv":{}}"#).contains("kv must be an array of kv operations"));
        let many: Vec<String> = (0..65).map(|i| format!(r#"{{"op":"get","ns":"a","key":"k{i}"}}"#)).collect();
        assert!(refused(&format!(r#"{{"operations":[],"kv":[{}]}}"#, many.join(","))).contains("at most 64"));
    }
}
