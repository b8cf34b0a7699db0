//! Streams, the server side of the Queen 2.x stream runtime
//! (`/streams/v1/queries`, `/streams/v1/state/get`, `/streams/v1/cycle`).
//! Requests are decoded and checked here; `sql/functions/streams.sql`
//! keeps the registry, the lease fence, the cursor move and the state rows,
//! and a cycle is one statement: its state ops, the pushes of its emits and
//! the ack of its source messages commit together or not at all.
//!
//! Refusals the runner handles (a stale lease, an unknown query) are HTTP
//! 200 `{"success": false, "error"}`: the client re-sends any 5xx, and a
//! refused cycle must not be re-sent.

use std::collections::BTreeMap;

use serde_json::value::RawValue;
use uuid::Uuid;

use crate::push::{decode_item_in, PushItem};
use crate::wire::{self, Kind};
use crate::EngineError;

/// Longest state key, in bytes (a CHECK in migration 0011 holds it too).
pub const MAX_STATE_KEY_BYTES: usize = 1024;

/// A query registration (`POST /streams/v1/queries`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StreamRegistration {
    /// The query's name (1 to 255 characters).
    pub name: String,
    /// The source queue (may be empty, as the runner sends it).
    pub source_queue: String,
    /// The sink queue, when the stream has one.
    pub sink_queue: Option<String>,
    /// The runner's hash of the stream's shape.
    pub config_hash: String,
    /// Wipe the state when the hash changed.
    pub reset: bool,
}

/// A state read (`POST /streams/v1/state/get`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StateRead {
    /// `None` when the wire's id is not a UUID: no such query, no rows.
    pub query_id: Option<Uuid>,
    /// The source partition; `None` as for `query_id`.
    pub partition_id: Option<Uuid>,
    /// Only these keys; empty means all.
    pub keys: Vec<String>,
    /// Only keys starting with this.
    pub key_prefix: Option<String>,
    /// Only rows whose `value.windowEnd` is a number at or before this (its JSON text).
    pub ripe_at_or_before: Option<String>,
}

/// The ack of a cycle's source messages.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CycleAck {
    /// The last source message the cycle covers, in offset order.
    pub transaction_id: Option<String>,
    /// The lease the source messages were popped under.
    pub lease_id: String,
    /// `completed`; anything else releases the lease without moving the cursor.
    pub status: String,
    /// Source messages covered, from the batch start.
    pub count: i32,
}

/// A cycle (`POST /streams/v1/cycle`), state ops collapsed to the last op per key.
#[derive(Debug, Clone)]
pub struct Cycle {
    /// The registered query.
    pub query_id: Uuid,
    /// The source partition the cycle is about.
    pub partition_id: Uuid,
    /// The group the source was popped as.
    pub consumer_group: String,
    /// Keys to set, with their values' JSON text, in key order.
    pub upserts: Vec<(String, Box<RawValue>)>,
    /// Keys to delete, in key order.
    pub deletes: Vec<String>,
    /// The emits, in emit order.
    pub pushes: Vec<PushItem>,
    /// `None` for an idle flush.
    pub ack: Option<CycleAck>,
    /// Commit the whole leased batch (false: a gate's partial ack, lease kept).
    pub release_lease: bool,
}

fn bad(field: &str, problem: &str) -> EngineError {
    wire::bad_request(field, problem)
}

/// The runner's 200 refusal; the one writer of it (a refusal the database
/// raises, `CycleRefusal::Refused`, is answered here too).
pub(crate) fn refused(error: &str) -> EngineError {
    EngineError::Refused(serde_json::json!({"success": false, "error": error}).to_string())
}

/// A registration's answer (`POST /streams/v1/queries`), in the runner's
/// snake_case.
#[derive(Debug, serde::Serialize)]
pub(crate) struct Registered {
    success: bool,
    query_id: String,
    name: String,
    config_hash: String,
    fresh: bool,
    reset: bool,
}

/// Registers (or re-registers) a query: SQL answers the id and what
/// happened, this writes the answer.
pub(crate) async fn register(
    pool: &crate::db::Pool,
    r: &StreamRegistration,
) -> Result<Registered, EngineError> {
    let client = pool.get().await?;
    let stmt = client.prepare_cached(include_str!("../sql/statements/stream_register.sql")).await?;
    let row =
        client.query_one(&stmt, &[&r.name, &r.source_queue, &r.sink_queue, &r.config_hash, &r.reset]).await?;
    let id: Uuid = row.try_get(0)?;
    Ok(Registered {
        success: true,
        query_id: id.to_string(),
        name: r.name.clone(),
        config_hash: r.config_hash.clone(),
        fresh: row.try_get(1)?,
        reset: row.try_get(2)?,
    })
}

/// A state read's answer (`POST /streams/v1/state/get`).
#[derive(Debug, serde::Serialize)]
pub(crate) struct StateRows {
    pub(crate) success: bool,
    pub(crate) rows: Vec<StateRow>,
}

/// One state row: its key, its value as stored (opened when sealed) and
/// when it was last written.
#[derive(Debug, serde::Serialize)]
pub(crate) struct StateRow {
    key: String,
    value: Box<RawValue>,
    updated_at: String,
}

/// The state rows a read names, in key order; none when its ids name
/// nothing. `open` opens a value sealed at rest.
pub(crate) async fn state_rows(
    pool: &crate::db::Pool,
    r: &StateRead,
    open: impl Fn(String) -> Result<String, EngineError>,
) -> Result<Vec<StateRow>, EngineError> {
    let (Some(query), Some(partition)) = (r.query_id, r.partition_id) else { return Ok(Vec::new()) };
    let client = pool.get().await?;
    let stmt = client.prepare_cached(include_str!("../sql/statements/stream_state.sql")).await?;
    let rows =
        client.query(&stmt, &[&query, &partition, &r.keys, &r.key_prefix, &r.ripe_at_or_before]).await?;
    rows.iter()
        .map(|row| {
            let value = RawValue::from_string(open(row.try_get(1)?)?)
                .map_err(|e| EngineError::Protocol(format!("a state value is not JSON: {e}")))?;
            Ok(StateRow { key: row.try_get(0)?, value, updated_at: row.try_get(2)? })
        })
        .collect()
}

/// What `queen.stream_cycle` did.
pub(crate) struct CycleDone {
    /// A copy of this cycle had committed: nothing applied.
    pub replayed: bool,
    /// The source queue.
    pub queue_name: String,
    /// State upserts and deletes applied.
    pub state_ops: i32,
    /// The ack ended the lease.
    pub released: bool,
    /// The ack dead-lettered the batch's first message.
    pub dlq: bool,
}

#[derive(serde::Serialize)]
struct CycleAnswer<'a> {
    success: bool,
    query_id: String,
    partition_id: String,
    #[serde(rename = "queueName")]
    queue_name: &'a str,
    state_ops_applied: i32,
    push_results: &'a RawValue,
    ack_result: Option<CycleAcked>,
    #[serde(skip_serializing_if = "Option::is_none")]
    replayed: Option<bool>,
}

#[derive(serde::Serialize)]
struct CycleAcked {
    success: bool,
    count: i32,
    lease_released: bool,
    dlq: bool,
}

/// A cycle's answer, from what it did; `push_results` is the emits'
/// answer, written by the push's one writer (`PushColumns::answer`), or
/// `None` when it pushed nothing.
pub(crate) fn cycle_answer(
    c: &Cycle,
    done: &CycleDone,
    push_results: Option<&crate::Json>,
) -> Result<crate::Json, EngineError> {
    let protocol = |e: serde_json::Error| EngineError::Protocol(format!("stream cycle answer: {e}"));
    let push_results: &RawValue =
        serde_json::from_str(push_results.map_or("[]", |p| p.0.as_str())).map_err(protocol)?;
    let ack_result = c.ack.as_ref().map(|a| CycleAcked {
        success: true,
        count: if done.replayed { 0 } else { a.count },
        lease_released: done.released,
        dlq: done.dlq,
    });
    let answer = CycleAnswer {
        success: true,
        query_id: c.query_id.to_string(),
        partition_id: c.partition_id.to_string(),
        queue_name: &done.queue_name,
        state_ops_applied: done.state_ops,
        push_results,
        ack_result,
        replayed: done.replayed.then_some(true),
    };
    serde_json::to_string(&answer).map(crate::Json).map_err(protocol)
}

fn object(body: &str) -> Result<wire::Fields<'_>, EngineError> {
    let raw: &RawValue = serde_json::from_str(body).map_err(|_| bad("body", "must be a JSON object"))?;
    wire::fields(raw).ok_or_else(|| bad("body", "must be a JSON object"))
}

fn required_string(f: &wire::Fields<'_>, name: &str) -> Result<String, EngineError> {
    match f.get(name) {
        Some(v) if wire::kind(v) == Kind::String => wire::string(v),
        Some(v) if wire::kind(v) != Kind::Null => Err(bad(name, "must be a string")),
        _ => Err(bad(name, "is required")),
    }
}

fn optional_string(f: &wire::Fields<'_>, name: &str) -> Result<Option<String>, EngineError> {
    match f.get(name) {
        None => Ok(None),
        Some(v) => match wire::kind(v) {
            Kind::Null => Ok(None),
            Kind::String => wire::string(v).map(Some),
            _ => Err(bad(name, "must be a string or null")),
        },
    }
}

fn optional_bool(f: &wire::Fields<'_>, name: &str, default: bool) -> Result<bool, EngineError> {
    match f.get(name) {
        None => Ok(default),
        Some(v) => match wire::kind(v) {
            Kind::Null => Ok(default),
            Kind::Boolean => Ok(wire::boolean(v)),
            _ => Err(bad(name, "must be a boolean")),
        },
    }
}

/// Decodes a registration.
pub fn decode_registration(body: &str) -> Result<StreamRegistration, EngineError> {
    let f = object(body)?;
    let name = required_string(&f, "name")?;
    if name.is_empty() {
        return Err(bad("name", "is required"));
    }
    if name.chars().count() > 255 {
        return Err(bad("name", "must be at most 255 characters"));
    }
    let source_queue = required_string(&f, "source_queue")?;
    let sink_queue = optional_string(&f, "sink_queue")?;
    for (field, q) in [("source_queue", Some(&source_queue)), ("sink_queue", sink_queue.as_ref())] {
        if q.is_some_and(|q| q.chars().count() > 255) {
            return Err(bad(field, "must be at most 255 characters"));
        }
    }
    let config_hash = required_string(&f, "config_hash")?;
    if config_hash.is_empty() {
        return Err(bad("config_hash", "is required"));
    }
    if config_hash.len() > 128 {
        return Err(bad("config_hash", "must be at most 128 bytes"));
    }
    let reset = optional_bool(&f, "reset", false)?;
    Ok(StreamRegistration { name, source_queue, sink_queue, config_hash, reset })
}

/// Decodes a state read.
pub fn decode_state_read(body: &str) -> Result<StateRead, EngineError> {
    let f = object(body)?;
    let query_id = required_string(&f, "query_id")?.parse::<Uuid>().ok();
    let partition_id = required_string(&f, "partition_id")?.parse::<Uuid>().ok();
    let keys = match f.get("keys") {
        None => Vec::new(),
        Some(v) if wire::kind(v) == Kind::Null => Vec::new(),
        Some(v) => wire::elements(v)
            .ok_or_else(|| bad("keys", "must be an array of strings"))?
            .into_iter()
            .map(|k| match wire::kind(k) {
                Kind::String => wire::string(k),
                _ => Err(bad("keys", "must be an array of strings")),
            })
            .collect::<Result<_, _>>()?,
    };
    let key_prefix = optional_string(&f, "key_prefix")?.filter(|p| !p.is_empty());
    let ripe_at_or_before = match f.get("ripe_at_or_before") {
        None => None,
        Some(v) => match wire::kind(v) {
            Kind::Null => None,
            Kind::Number => Some(v.get().to_owned()),
            _ => return Err(bad("ripe_at_or_before", "must be a number or null")),
        },
    };
    Ok(StateRead { query_id, partition_id, keys, key_prefix, ripe_at_or_before })
}

/// Decodes a cycle. An id that is not a UUID names nothing: the runner's
/// 200 refusal, without a database call.
pub fn decode_cycle(body: &str) -> Result<Cycle, EngineError> {
    let f = object(body)?;
    let query_id =
        required_string(&f, "query_id")?.parse::<Uuid>().map_err(|_| refused("query not found"))?;
    let partition_id =
        required_string(&f, "partition_id")?.parse::<Uuid>().map_err(|_| refused("partition not found"))?;
    let consumer_group = optional_string(&f, "consumer_group")?.unwrap_or_default();

    let mut last_op: BTreeMap<String, Option<Box<RawValue>>> = BTreeMap::new();
    if let Some(ops) = f.get("state_ops").filter(|v| wire::kind(v) != Kind::Null) {
        let ops = wire::elements(ops).ok_or_else(|| bad("state_ops", "must be an array"))?;
        for (i, op) in ops.iter().enumerate() {
            let at = |field: &str| format!("state_ops[{i}]{field}");
            let of = wire::fields(op).ok_or_else(|| bad(&at(""), "must be an object"))?;
            let key = match of.get("key") {
                Some(k) if wire::kind(k) == Kind::String => wire::string(k)?,
                _ => return Err(bad(&at(".key"), "is required and must be a string")),
            };
            if key.len() > MAX_STATE_KEY_BYTES {
                return Err(bad(&at(".key"), &format!("must be at most {MAX_STATE_KEY_BYTES} bytes")));
            }
            let kind = match of.get("type") {
                Some(t) if wire::kind(t) == Kind::String => wire::string(t)?,
                _ => String::new(),
            };
            match kind.as_str() {
                "upsert" => {
                    let value =
                        of.get("value").ok_or_else(|| bad(&at(".value"), "is required for an upsert"))?;
                    if wire::has_nul_escape(value.get()) {
                        return Err(bad(&at(".value"), "must not contain \\u0000"));
                    }
                    last_op.insert(key, Some((*value).to_owned()));
                }
                "delete" => {
                    last_op.insert(key, None);
                }
                _ => return Err(bad(&at(".type"), "must be \"upsert\" or \"delete\"")),
            }
        }
    }
    let mut upserts = Vec::new();
    let mut deletes = Vec::new();
    for (key, value) in last_op {
        match value {
            Some(v) => upserts.push((key, v)),
            None => deletes.push(key),
        }
    }

    let pushes = match f.get("push_items").filter(|v| wire::kind(v) != Kind::Null) {
        None => Vec::new(),
        Some(items) => wire::elements(items)
            .ok_or_else(|| bad("push_items", "must be an array"))?
            .iter()
            .enumerate()
            .map(|(i, item)| decode_item_in("push_items", i, item))
            .collect::<Result<_, _>>()?,
    };

    let ack = match f.get("ack") {
        None => None,
        Some(a) if wire::kind(a) == Kind::Null => None,
        Some(a) => {
            let af = wire::fields(a).ok_or_else(|| bad("ack", "must be an object or null"))?;
            let lease_id =
                optional_string(&af, "leaseId").map_err(|_| bad("ack.leaseId", "must be a string"))?;
            // A cycle without a lease cannot be fenced: refused like a stale one.
            let lease_id =
                lease_id.filter(|l| !l.is_empty()).ok_or_else(|| refused("invalid or expired lease"))?;
            let transaction_id = optional_string(&af, "transactionId")
                .map_err(|_| bad("ack.transactionId", "must be a string or null"))?;
            let status = optional_string(&af, "status")
                .map_err(|_| bad("ack.status", "must be a string"))?
                .unwrap_or_else(|| "completed".to_owned());
            let count = match af.get("count") {
                None => 0,
                Some(c) if wire::kind(c) == Kind::Null => 0,
                Some(c) => c
                    .get()
                    .parse::<i32>()
                    .ok()
                    .filter(|n| *n >= 0)
                    .ok_or_else(|| bad("ack.count", "must be an integer >= 0"))?,
            };
            if consumer_group.is_empty() {
                return Err(bad("consumer_group", "is required with an ack"));
            }
            Some(CycleAck { transaction_id, lease_id, status, count })
        }
    };
    let release_lease = optional_bool(&f, "release_lease", true)?;
    Ok(Cycle { query_id, partition_id, consumer_group, upserts, deletes, pushes, ack, release_lease })
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used)]
mod tests {
    use super::*;

    fn refusal(e: EngineError) -> String {
        match e {
            EngineError::Rejected { body, .. } | EngineError::Refused(body) => body,
            other => panic!("{other:?}"),
        }
    }

    const Q: &str = "01a24147-78fd-78fb-956d-1bdaf4933099";

    #[test]
    fn state_ops_collapse_to_the_last_op_per_key_in_byte_order() {
        let body = format!(
            r#"{{"query_id":"{Q}","partition_id":"{Q}","consumer_group":"g",
                "state_ops":[{{"type":"upsert","key":"b","value":{{"n":1}}}},{{"type":"upsert","key":"a\u001fx","value":2.50}},
                             {{"type":"delete","key":"b"}},{{"type":"delete","key":"c"}},{{"type":"upsert","key":"c","value":null}}],
                "push_items":[{{"queue":"dst","partition":"p","payload":{{"v":12345678901234567890}}}}],
                "ack":{{"transactionId":"t","leaseId":"L","status":"completed","count":3}},"release_lease":false}}"#
        );
        let c = decode_cycle(&body).unwrap();
        let ups: Vec<(&str, &str)> = c.upserts.iter().map(|(k, v)| (k.as_str(), v.get())).collect();
        assert_eq!(ups, [("a\u{1f}x", "2.50"), ("c", "null")]);
        assert_eq!(c.deletes, ["b"]);
        assert_eq!(c.pushes[0].payload.as_ref().unwrap().get(), r#"{"v":12345678901234567890}"#);
        let ack = c.ack.unwrap();
        assert_eq!((ack.lease_id.as_str(), ack.count, c.release_lease), ("L", 3, false));
    }

    #[test]
    fn bad_cycles_are_refused_naming_the_field_or_as_the_runner_expects() {
        let base =
            |extra: &str| format!(r#"{{"query_id":"{Q}","partition_id":"{Q}","consumer_group":"g"{extra}}}"#);
        let e = refusal(decode_cycle(&base(r#","state_ops":[{"type":"merge","key":"k"}]"#)).unwrap_err());
        assert!(e.contains("state_ops[0].type"), "{e}");
        let e = refusal(decode_cycle(&base(r#","state_ops":[{"type":"upsert","key":"k"}]"#)).unwrap_err());
        assert!(e.contains("state_ops[0].value"), "{e}");
        let e = refusal(decode_cycle(&base(r#","push_items":[{"partition":"p"}]"#)).unwrap_err());
        assert!(e.contains("push_items[0].queue"), "{e}");
        let e = refusal(decode_cycle(&base(r#","ack":{"leaseId":null,"count":1}"#)).unwrap_err());
        assert!(e.contains("invalid or expired lease") && e.contains("\"success\":false"), "{e}");
        let e = refusal(decode_cycle(r#"{"query_id":"nope","partition_id":"x"}"#).unwrap_err());
        assert!(e.contains("query not found"), "{e}");
        let e = refusal(decode_cycle(&base(r#","ack":{"leaseId":"L","count":-1}"#)).unwrap_err());
        assert!(e.contains("ack.count"), "{e}");
        let long = "k".repeat(MAX_STATE_KEY_BYTES + 1);
        let e = refusal(
            decode_cycle(&base(&format!(r#","state_ops":[{{"type":"delete","key":"{long}"}}]"#)))
                .unwrap_err(),
        );
        assert!(e.contains("state_ops[0].key"), "{e}");
    }

    #[test]
    fn registrations_and_reads_check_their_fields() {
        let r = decode_registration(r#"{"name":"q","source_queue":"","config_hash":"h","sink_queue":null}"#)
            .unwrap();
        assert_eq!((r.source_queue.as_str(), r.sink_queue, r.reset), ("", None, false));
        let e = refusal(decode_registration(r#"{"source_queue":"s","config_hash":"h"}"#).unwrap_err());
        assert!(e.contains("name is required"), "{e}");
        let e =
            refusal(decode_registration(r#"{"name":"q","source_queue":"s","config_hash":""}"#).unwrap_err());
        assert!(e.contains("config_hash is required"), "{e}");
        let s =
            decode_state_read(r#"{"query_id":"x","partition_id":"y","keys":[],"ripe_at_or_before":17.5}"#)
                .unwrap();
        assert_eq!((s.query_id, s.ripe_at_or_before.as_deref()), (None, Some("17.5")));
        let e = refusal(decode_state_read(r#"{"query_id":5,"partition_id":"y"}"#).unwrap_err());
        assert!(e.contains("query_id"), "{e}");
    }
}
