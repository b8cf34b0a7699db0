//! Timers (scheduled messages): `POST /api/v1/timers`, the cancel, peek
//! and list routes, and the `timers` rider of a transaction. The call is
//! decoded and checked here, once; `sql/functions/timers.sql` keeps
//! the upsert, the cancel against a concurrent fire, and the fire. The
//! sweeper (`Engine::fire_due_timers`, run by every broker) fires a due
//! timer as one message in the transaction that deletes its row.

pub use queen_wire::{PendingTimer, TimerPage, TimerPeek, TimerResult};
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use crate::db::Pool;
use base64::Engine as _;
use serde_json::value::RawValue;

use crate::notifier::Announce;
use crate::wire::{self, Fields, Kind};
use crate::EngineError;

/// Ops per call outside a transaction, and inside one.
pub(crate) const MAX_OPS: usize = 1024;
pub(crate) const MAX_OPS_IN_TX: usize = 64;
pub(crate) const MAX_KEY_BYTES: usize = 1024;
/// The decoded payload, at most.
pub const MAX_TIMER_PAYLOAD_BYTES: usize = 1024 * 1024;
/// How far ahead a timer may be scheduled by default (90 days).
pub const DEFAULT_TIMER_HORIZON: Duration = Duration::from_secs(90 * 24 * 3600);

/// Fields the server owns: refused when a caller sends them (and any field
/// that starts with `_`).
const SERVER_OWNED: &[&str] = &[
    "producerSub",
    "producer_sub",
    "messageId",
    "message_id",
    "tenant",
    "tenantId",
    "tenant_id",
    "deliverAt",
    "deliver_at",
    "delaySeconds",
    "delay_seconds",
    "attempts",
    "claimToken",
    "claim_token",
    "claimedUntil",
];

/// One timer operation.
#[derive(Debug, Clone)]
pub enum TimerOp {
    /// Schedule, or reschedule: one upsert per (queue, key).
    Schedule {
        /// The queue the message goes to when the timer fires.
        queue: String,
        /// The timer's name within its queue.
        key: String,
        /// The partition (`Default` when not given).
        partition: String,
        /// The message payload: JSON text.
        payload: Box<RawValue>,
        /// Delay from now in milliseconds; negative fires on the first cycle.
        delay_ms: i64,
        /// The fired message's transactionId (minted when not given).
        txn: String,
        /// Sent as `reschedule` (the answer is the same upsert's).
        reschedule: bool,
    },
    /// Cancel a pending timer.
    Cancel {
        /// The timer's queue.
        queue: String,
        /// The timer's name.
        key: String,
        /// Echoed in the answer.
        txn: Option<String>,
    },
}

impl TimerOp {
    fn queue_and_key(&self) -> (&str, &str) {
        match self {
            TimerOp::Schedule { queue, key, .. } | TimerOp::Cancel { queue, key, .. } => (queue, key),
        }
    }
}

/// A timers 400 (403, 413): `{"error", "reason", "detail"}`, the KV envelope.
fn reject(status: u16, error: &str, reason: &str, detail: &str) -> EngineError {
    EngineError::Rejected {
        status,
        body: serde_json::json!({"error": error, "reason": reason, "detail": detail}).to_string(),
    }
}

pub(crate) fn bad(reason: &str, detail: &str) -> EngineError {
    reject(400, "timers_bad_request", reason, detail)
}

/// Decodes and checks a timers call (`{"operations": [...]}`).
pub(crate) fn decode_timers(body: &str, horizon: Duration) -> Result<Vec<TimerOp>, EngineError> {
    if wire::has_nul_escape(body) {
        return Err(bad("timers_bad_body", "queues, keys and payloads must not contain NUL (\\u0000)"));
    }
    let bad_body = || bad("timers_bad_body", "the body must be {\"operations\": [...]}");
    let raw: &RawValue = serde_json::from_str(body).map_err(|_| bad_body())?;
    let ops = wire::fields(raw).and_then(|f| f.get("operations").copied()).ok_or_else(bad_body)?;
    decode_ops(ops, horizon, false)
}

/// Decodes a list of timer ops: the call's, or a transaction's rider.
pub(crate) fn decode_ops(
    raw: &RawValue,
    horizon: Duration,
    in_tx: bool,
) -> Result<Vec<TimerOp>, EngineError> {
    let where_ = if in_tx { "timers" } else { "operations" };
    let ops =
        wire::elements(raw).ok_or_else(|| bad("timers_bad_body", &format!("{where_} must be an array")))?;
    let max = if in_tx { MAX_OPS_IN_TX } else { MAX_OPS };
    if ops.len() > max {
        return Err(bad("timers_too_many_ops", &format!("at most {max} timer operations in {where_}")));
    }
    let decoded = ops
        .iter()
        .enumerate()
        .map(|(i, o)| decode_op(&format!("{where_}[{i}]"), o, horizon))
        .collect::<Result<Vec<_>, _>>()?;
    check_ops(&decoded, horizon)?;
    Ok(decoded)
}

/// The rules that hold for every caller, wire or typed: one op per key.
pub(crate) fn check_ops(ops: &[TimerOp], horizon: Duration) -> Result<(), EngineError> {
    let mut seen = std::collections::HashSet::new();
    for (i, op) in ops.iter().enumerate() {
        let f = format!("operations[{i}]");
        let (queue, key) = op.queue_and_key();
        check_name(queue, &format!("{f}.queue"), 255)?;
        check_name(key, &format!("{f}.timerKey"), MAX_KEY_BYTES)?;
        if let TimerOp::Schedule { partition, delay_ms, txn, payload, .. } = op {
            check_name(partition, &format!("{f}.partition"), 255)?;
            check_name(txn, &format!("{f}.txn"), 255)?;
            check_delay(*delay_ms, horizon, &f)?;
            if payload.get().len() > MAX_TIMER_PAYLOAD_BYTES {
                return Err(too_large(&f));
            }
        }
        if !seen.insert((queue, key)) {
            return Err(bad(
                "timers_duplicate_key",
                &format!("{f}: {queue}/{key} appears twice; one op per timer in one call"),
            ));
        }
    }
    Ok(())
}

fn too_large(f: &str) -> EngineError {
    reject(
        413,
        "payload_too_large",
        "timers_payload_too_large",
        &format!("{f}.payload is larger than {MAX_TIMER_PAYLOAD_BYTES} bytes"),
    )
}

pub(crate) fn check_name(s: &str, field: &str, max: usize) -> Result<(), EngineError> {
    if s.is_empty() || s.len() > max {
        return Err(bad(
            "timers_bad_field",
            &format!("{field} must be a non-empty string of at most {max} bytes"),
        ));
    }
    Ok(())
}

fn check_delay(delay_ms: i64, horizon: Duration, f: &str) -> Result<(), EngineError> {
    let horizon_ms = i64::try_from(horizon.as_millis()).unwrap_or(i64::MAX);
    if delay_ms > horizon_ms {
        return Err(reject(
            403,
            "timer_horizon_exceeded",
            "timer_horizon_exceeded",
            &format!("{f}.delayMs is past the horizon of {} seconds", horizon.as_secs()),
        ));
    }
    Ok(())
}

fn text(fields: &Fields<'_>, name: &str, f: &str) -> Result<Option<String>, EngineError> {
    match fields.get(name) {
        None => Ok(None),
        Some(v) if wire::kind(v) == Kind::Null => Ok(None),
        Some(v) if wire::kind(v) == Kind::String => Ok(Some(wire::string(v)?)),
        Some(_) => Err(bad("timers_bad_field", &format!("{f}.{name} must be a string"))),
    }
}

fn decode_op(f: &str, raw: &RawValue, horizon: Duration) -> Result<TimerOp, EngineError> {
    let fields =
        wire::fields(raw).ok_or_else(|| bad("timers_bad_body", &format!("{f} must be an object")))?;
    if let Some(owned) = fields.keys().find(|k| SERVER_OWNED.contains(&k.as_str()) || k.starts_with('_')) {
        return Err(bad(
            "timers_server_owned_field",
            &format!("{f}.{owned} is owned by the server and cannot be supplied"),
        ));
    }
    let op = text(&fields, "op", f)?.unwrap_or_default();
    let allowed: &[&str] = match op.as_str() {
        "schedule" | "reschedule" => {
            &["op", "queue", "timerKey", "payload", "delayMs", "txn", "partition", "payloadZstd"]
        }
        "cancel" => &["op", "queue", "timerKey", "txn"],
        _ => return Err(bad("timers_unknown_op", &format!("{f}.op must be schedule, reschedule or cancel"))),
    };
    if let Some(extra) = fields.keys().find(|k| !allowed.contains(&k.as_str())) {
        return Err(bad("timers_unknown_field", &format!("{f}.{extra} is not a field of {op}")));
    }
    let required = |name: &str| -> Result<String, EngineError> {
        text(&fields, name, f)?.ok_or_else(|| bad("timers_bad_field", &format!("{f}.{name} is required")))
    };
    let queue = required("queue")?;
    let key = required("timerKey")?;
    if op == "cancel" {
        return Ok(TimerOp::Cancel { queue, key, txn: text(&fields, "txn", f)? });
    }
    match fields.get("payloadZstd").map(|v| v.get()) {
        None | Some("false") | Some("null") => {}
        Some("true") => {
            return Err(bad(
                "timers_zstd_unsupported",
                &format!("{f}.payloadZstd: this broker takes uncompressed payloads only"),
            ))
        }
        Some(_) => return Err(bad("timers_bad_field", &format!("{f}.payloadZstd must be a boolean"))),
    }
    let encoded = required("payload")?;
    if encoded.len() > MAX_TIMER_PAYLOAD_BYTES / 3 * 4 + 4 {
        return Err(too_large(f));
    }
    let bytes = base64::engine::general_purpose::STANDARD
        .decode(encoded.as_bytes())
        .map_err(|_| bad("timers_bad_payload", &format!("{f}.payload must be base64")))?;
    let json =
        String::from_utf8(bytes).ok().and_then(|s| RawValue::from_string(s).ok()).ok_or_else(|| {
            bad("timers_bad_payload", &format!("{f}.payload must be base64 of a JSON document"))
        })?;
    if wire::has_nul_escape(json.get()) {
        return Err(bad("timers_bad_payload", &format!("{f}.payload must not contain NUL (\\u0000)")));
    }
    let delay_ms = match fields.get("delayMs") {
        Some(v) if wire::kind(v) == Kind::Number => v.get().parse::<i64>().map_err(|_| {
            bad("timers_bad_delay", &format!("{f}.delayMs must be an integer (milliseconds)"))
        })?,
        _ => {
            return Err(bad(
                "timers_bad_delay",
                &format!("{f}.delayMs is required (an integer of milliseconds)"),
            ))
        }
    };
    check_delay(delay_ms, horizon, f)?;
    Ok(TimerOp::Schedule {
        queue,
        key,
        partition: text(&fields, "partition", f)?.unwrap_or_else(|| crate::DEFAULT_PARTITION.to_owned()),
        payload: json,
        delay_ms,
        txn: text(&fields, "txn", f)?.unwrap_or_else(|| uuid::Uuid::new_v4().to_string()),
        reschedule: op == "reschedule",
    })
}

/// The ops as the typed arrays `queen.timer_apply` takes.
#[derive(Default)]
pub(crate) struct TimerColumns {
    pub(crate) ops: Vec<&'static str>,
    pub(crate) queues: Vec<String>,
    pub(crate) keys: Vec<String>,
    pub(crate) partitions: Vec<Option<String>>,
    pub(crate) payloads: Vec<Option<String>>,
    pub(crate) delays: Vec<Option<i64>>,
    pub(crate) txns: Vec<Option<String>>,
}

impl TimerColumns {
    pub(crate) fn of(ops: &[TimerOp]) -> Self {
        let mut c = TimerColumns::default();
        for op in ops {
            match op {
                TimerOp::Schedule { queue, key, partition, payload, delay_ms, txn, reschedule } => {
                    c.ops.push(if *reschedule { "reschedule" } else { "schedule" });
                    c.queues.push(queue.clone());
                    c.keys.push(key.clone());
                    c.partitions.push(Some(partition.clone()));
                    c.payloads.push(Some(payload.get().to_owned()));
                    c.delays.push(Some(*delay_ms));
                    c.txns.push(Some(txn.clone()));
                }
                TimerOp::Cancel { queue, key, txn } => {
                    c.ops.push("cancel");
                    c.queues.push(queue.clone());
                    c.keys.push(key.clone());
                    c.partitions.push(None);
                    c.payloads.push(None);
                    c.delays.push(None);
                    c.txns.push(txn.clone());
                }
            }
        }
        c
    }

    pub(crate) fn params(&self) -> [&(dyn tokio_postgres::types::ToSql + Sync); 7] {
        [&self.ops, &self.queues, &self.keys, &self.partitions, &self.payloads, &self.delays, &self.txns]
    }
}

/// What `queen.timer_apply` answers, index-aligned with the ops: each op's
/// outcome, txn, and for a schedule the promised message id and due time.
/// Read from the statement's columns, or from a transaction's record.
#[derive(Debug, Default, serde::Deserialize)]
#[serde(rename_all = "camelCase")]
pub(crate) struct TimerOutcomes {
    statuses: Vec<String>,
    txns: Vec<Option<String>>,
    message_ids: Vec<Option<String>>,
    deliver_ats: Vec<Option<String>>,
}

impl TimerOutcomes {
    pub(crate) fn read(row: &tokio_postgres::Row) -> Result<Self, EngineError> {
        Ok(TimerOutcomes {
            statuses: row.try_get(0)?,
            txns: row.try_get(1)?,
            message_ids: row.try_get(2)?,
            deliver_ats: row.try_get(3)?,
        })
    }

    /// Each op's element, in op order.
    pub(crate) fn results(self, ops: &[TimerOp]) -> Result<Vec<TimerResult>, EngineError> {
        let n = ops.len();
        if [self.statuses.len(), self.txns.len(), self.message_ids.len(), self.deliver_ats.len()]
            .iter()
            .any(|&c| c != n)
        {
            return Err(EngineError::Protocol(
                "timer_apply answered another number of results than ops".into(),
            ));
        }
        let outcomes = self.statuses.into_iter().zip(self.txns).zip(self.message_ids).zip(self.deliver_ats);
        Ok(ops
            .iter()
            .zip(outcomes)
            .map(|(op, (((status, txn), message_id), deliver_at))| {
                let (queue, key) = match op {
                    TimerOp::Schedule { queue, key, .. } | TimerOp::Cancel { queue, key, .. } => (queue, key),
                };
                TimerResult::new(status, queue, key, txn, message_id, deliver_at)
            })
            .collect())
    }
}

/// The body of a timers call: one answer per op.
#[derive(serde::Serialize)]
pub(crate) struct Results {
    pub(crate) results: Vec<TimerResult>,
}

/// One sweep's outcome.
#[derive(Debug, Clone, Default)]
pub struct Fired {
    /// Timers fired.
    pub fired: usize,
    /// How late each fired, in milliseconds after its due time.
    pub lag_ms: Vec<f64>,
}

/// Upper bounds (ms) of the fire-lag histogram buckets.
pub const FIRE_LAG_BOUNDS_MS: [f64; 8] = [10.0, 50.0, 100.0, 250.0, 500.0, 1000.0, 2500.0, 10000.0];

/// Counters of the timers this engine fired.
#[derive(Debug, Default)]
pub(crate) struct TimerStats {
    fired: AtomicU64,
    lag_buckets: [AtomicU64; 8],
    lag_sum_us: AtomicU64,
    /// Rung when this engine schedules a timer, so an idle sweeper looks now.
    pub(crate) wake: tokio::sync::Notify,
}

/// A copy of the fire counters.
#[derive(Debug, Clone, Default)]
pub struct TimerStatsSnapshot {
    /// Timers fired.
    pub fired: u64,
    /// Fires per lag bucket ([`FIRE_LAG_BOUNDS_MS`]; not cumulative; above the last bound not counted).
    pub lag_buckets: [u64; 8],
    /// Sum of the fire lags, in seconds.
    pub lag_sum_seconds: f64,
}

impl TimerStats {
    fn record(&self, fired: &Fired) {
        self.fired.fetch_add(fired.fired as u64, Ordering::Relaxed);
        for lag in &fired.lag_ms {
            let lag = lag.max(0.0);
            self.lag_sum_us.fetch_add((lag * 1000.0) as u64, Ordering::Relaxed);
            if let Some(i) = FIRE_LAG_BOUNDS_MS.iter().position(|b| lag <= *b) {
                self.lag_buckets[i].fetch_add(1, Ordering::Relaxed);
            }
        }
    }

    pub(crate) fn snapshot(&self) -> TimerStatsSnapshot {
        let mut lag_buckets = [0u64; 8];
        for (out, b) in lag_buckets.iter_mut().zip(&self.lag_buckets) {
            *out = b.load(Ordering::Relaxed);
        }
        TimerStatsSnapshot {
            fired: self.fired.load(Ordering::Relaxed),
            lag_buckets,
            lag_sum_seconds: self.lag_sum_us.load(Ordering::Relaxed) as f64 / 1e6,
        }
    }
}

/// One fire transaction: up to `limit` due timers become messages; the long
/// polls of their queues are woken after the commit.
pub(crate) async fn fire_once(
    pool: &Pool,
    limit: i32,
    announce: &Announce,
    stats: &TimerStats,
) -> Result<Fired, EngineError> {
    let client = pool.get().await?;
    let stmt = client.prepare_cached("SELECT fired, queued, lag_ms FROM queen.timers_fire($1)").await?;
    let row = client.query_one(&stmt, &[&limit]).await?;
    drop(client);
    let fired: i32 = row.try_get(0)?;
    let queued: Option<Vec<String>> = row.try_get(1)?;
    let lag_ms: Option<Vec<f64>> = row.try_get(2)?;
    if let Some(queues) = queued.filter(|q| !q.is_empty()) {
        announce(queues);
    }
    let fired = Fired { fired: fired.max(0) as usize, lag_ms: lag_ms.unwrap_or_default() };
    stats.record(&fired);
    Ok(fired)
}

/// Fires due timers; a plain timer of a queue that turned encrypted (one the
/// sealing pass after its configure missed, cut short) makes `timers_fire`
/// refuse the round (QN409): its timers are sealed here, and fired again.
pub(crate) async fn fire_sealed(
    pool: &Pool,
    limit: i32,
    announce: &Announce,
    stats: &TimerStats,
    key: Option<&crate::EncryptionKey>,
) -> Result<Fired, EngineError> {
    match (fire_once(pool, limit, announce, stats).await, key) {
        (Err(EngineError::EncryptionChanged(queues)), Some(key)) => {
            for q in &queues {
                crate::sealing::reseal_tables(pool, key, Some(q), &["timers"], limit, |_, _| {}).await?;
            }
            fire_once(pool, limit, announce, stats).await
        }
        (other, _) => other,
    }
}

/// Seconds until the earliest pending timer is due (negative: overdue).
pub(crate) async fn next_due_in(pool: &Pool) -> Result<Option<f64>, EngineError> {
    let client = pool.get().await?;
    let stmt = client.prepare_cached(include_str!("../sql/statements/timers_next_due.sql")).await?;
    Ok(client.query_one(&stmt, &[]).await?.try_get(0)?)
}

/// A page of `queue`'s pending timers after `after` (`queen.timer_page`): up
/// to `limit`, and one row more when more follow.
pub(crate) async fn timer_page(
    pool: &Pool,
    queue: &str,
    after: Option<&str>,
    limit: usize,
) -> Result<Vec<PendingTimer>, EngineError> {
    let client = pool.get().await?;
    let stmt = client.prepare_cached(include_str!("../sql/statements/timer_page.sql")).await?;
    let limit = i32::try_from(limit).unwrap_or(i32::MAX);
    let rows = client.query(&stmt, &[&queue, &after, &limit]).await?;
    rows.iter().map(|row| pending_timer(row, &Ok)).collect()
}

/// `queue`'s pending timer `key` with its payload (`queen.timer_row`);
/// `open` opens the payload when it is sealed at rest.
pub(crate) async fn timer_row(
    pool: &Pool,
    queue: &str,
    key: &str,
    open: impl Fn(String) -> Result<String, EngineError>,
) -> Result<Option<PendingTimer>, EngineError> {
    let client = pool.get().await?;
    let stmt = client.prepare_cached(include_str!("../sql/statements/timer_row.sql")).await?;
    let row = client.query_opt(&stmt, &[&queue, &key]).await?;
    row.map(|row| pending_timer(&row, &open)).transpose()
}

fn pending_timer(
    row: &tokio_postgres::Row,
    open: &dyn Fn(String) -> Result<String, EngineError>,
) -> Result<PendingTimer, EngineError> {
    let payload: Option<String> = row.try_get(10)?;
    let payload = payload
        .map(|p| {
            RawValue::from_string(open(p)?)
                .map_err(|e| EngineError::Protocol(format!("a timer's payload is not JSON: {e}")))
        })
        .transpose()?;
    Ok(PendingTimer {
        queue: row.try_get(0)?,
        timer_key: row.try_get(1)?,
        partition: row.try_get(2)?,
        txn: row.try_get(3)?,
        message_id: row.try_get(4)?,
        deliver_at: row.try_get(5)?,
        attempts: i64::from(row.try_get::<_, i32>(6)?),
        last_error: row.try_get(7)?,
        created_at: row.try_get(8)?,
        updated_at: row.try_get(9)?,
        payload,
    })
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used)]
mod tests {
    use super::*;

    fn reason(body: &str) -> (u16, String) {
        match decode_timers(body, DEFAULT_TIMER_HORIZON) {
            Err(EngineError::Rejected { status, body }) => {
                let v: serde_json::Value = serde_json::from_str(&body).unwrap();
                (status, v["reason"].as_str().unwrap().to_owned())
            }
            other => panic!("expected a refusal, got {other:?}"),
        }
    }

    fn b64(s: &str) -> String {
        base64::engine::general_purpose::STANDARD.encode(s)
    }

    #[test]
    fn a_schedule_decodes_its_payload_and_defaults() {
        let ops = decode_timers(
            &format!(
                r#"{{"operations":[{{"op":"schedule","queue":"q","timerKey":"k","payload":"{}","delayMs":-5}},
                   {{"op":"cancel","queue":"q","timerKey":"j"}}]}}"#,
                b64(r#"{"a":12345678901234567890}"#)
            ),
            DEFAULT_TIMER_HORIZON,
        )
        .unwrap();
        match &ops[0] {
            TimerOp::Schedule { partition, payload, delay_ms, txn, reschedule, .. } => {
                assert_eq!(partition, "Default");
                assert_eq!(payload.get(), r#"{"a":12345678901234567890}"#);
                assert_eq!(*delay_ms, -5);
                assert!(!txn.is_empty());
                assert!(!reschedule);
            }
            other => panic!("{other:?}"),
        }
        assert!(matches!(&ops[1], TimerOp::Cancel { queue, key, txn: None } if queue == "q" && key == "j"));
    }

    #[test]
    fn bad_calls_are_refused_with_their_reason_and_status() {
        let p = b64("1");
        assert_eq!(reason("[]"), (400, "timers_bad_body".into()));
        let twice = format!(
            r#"{{"operations":[{{"op":"schedule","queue":"q","timerKey":"k","payload":"{p}","delayMs":1}},
               {{"op":"cancel","queue":"q","timerKey":"k"}}]}}"#
        );
        assert_eq!(reason(&twice), (400, "timers_duplicate_key".into()));
        for owned in ["messageId", "deliverAt", "tenant", "_x", "attempts"] {
            let body = format!(
                r#"{{"operations":[{{"op":"schedule","queue":"q","timerKey":"k","payload":"{p}","delayMs":1,"{owned}":1}}]}}"#
            );
            assert_eq!(reason(&body), (400, "timers_server_owned_field".into()), "{owned}");
        }
        let far = format!(
            r#"{{"operations":[{{"op":"schedule","queue":"q","timerKey":"k","payload":"{p}","delayMs":7776000001}}]}}"#
        );
        assert_eq!(reason(&far), (403, "timer_horizon_exceeded".into()));
        let not_json = format!(
            r#"{{"operations":[{{"op":"schedule","queue":"q","timerKey":"k","payload":"{}","delayMs":1}}]}}"#,
            b64("not json")
        );
        assert_eq!(reason(&not_json), (400, "timers_bad_payload".into()));
        let no_delay =
            format!(r#"{{"operations":[{{"op":"schedule","queue":"q","timerKey":"k","payload":"{p}"}}]}}"#);
        assert_eq!(reason(&no_delay), (400, "timers_bad_delay".into()));
        let big = b64(&format!("\"{}\"", "x".repeat(MAX_TIMER_PAYLOAD_BYTES)));
        let too_big = format!(
            r#"{{"operations":[{{"op":"schedule","queue":"q","timerKey":"k","payload":"{big}","delayMs":1}}]}}"#
        );
        assert_eq!(reason(&too_big), (413, "timers_payload_too_large".into()));
        assert_eq!(
            reason(r#"{"operations":[{"op":"fire","queue":"q","timerKey":"k"}]}"#),
            (400, "timers_unknown_op".into())
        );
    }
}
