//! KV state. Every call, HTTP or embedded, is decoded and checked once by
//! `kv::decode`; a call of one op then runs one typed statement
//! (`sql/statements/kv_*.sql`), shared with concurrent one-op calls by the
//! get and write batchers (`batch.rs`); a call of several runs
//! `queen.kv_apply`, which applies them in one transaction in a
//! deadlock-free order.

pub(crate) mod browse;
pub(crate) mod decode;
pub(crate) mod read;
pub(crate) mod write;

pub use queen_wire::{
    ops_to_wire, Expect, Expiry, KvAnswer, KvOp, KvResult, KvResults, KvRow, PreconditionLost,
};
use serde_json::value::RawValue;

use crate::{EngineError, Json};

/// Text PostgreSQL's `json` refuses although it is JSON (a lone surrogate
/// such as `"\ud800"`) fails the cast with 22P02 before `queen.kv_apply`
/// runs: it is bad input, answered in the KV envelope, not a 500.
pub(crate) fn kv_input_error(e: EngineError) -> EngineError {
    match e {
        EngineError::UnstorableText(detail) => EngineError::Rejected {
            status: 400,
            body: serde_json::json!({
                "error": "kv_bad_request",
                "reason": "kv_bad_body",
                "detail": format!("the body is not JSON PostgreSQL accepts: {detail}"),
            })
            .to_string(),
        },
        other => other,
    }
}

/// What a KV call answered.
#[derive(Debug)]
pub enum KvOutcome {
    /// Every op ran; results are index-aligned.
    Done(Vec<KvResult>),
    /// A `required` op lost its precondition: nothing was written.
    PreconditionLost(PreconditionLost),
}

/// The typed arrays of `queen.kv_apply`: one element per op.
#[derive(Default)]
pub(crate) struct KvColumns<'a> {
    op: Vec<&'static str>,
    ns: Vec<&'a str>,
    key: Vec<Option<&'a str>>,
    value: Vec<Option<&'a str>>,
    ttl: Vec<Option<i64>>,
    forever: Vec<Option<bool>>,
    expect: Vec<Option<i64>>,
    required: Vec<bool>,
    delta: Vec<Option<&'a str>>,
    min: Vec<Option<&'a str>>,
    max: Vec<Option<&'a str>>,
    keys: Vec<Option<String>>,
    prefix: Vec<Option<&'a str>>,
    after: Vec<Option<&'a str>>,
    limit: Vec<Option<i32>>,
    keys_only: Vec<Option<bool>>,
}

impl<'a> KvColumns<'a> {
    pub(crate) fn of(ops: impl IntoIterator<Item = &'a KvOp>) -> Self {
        let mut c = KvColumns::default();
        for op in ops {
            c.add(op);
        }
        c
    }

    fn add(&mut self, op: &'a KvOp) {
        let expiry = |e: &Expiry| e.columns();
        let (mut key, mut value, mut exp, mut expect, mut required) = (None, None, (None, None), None, false);
        let (mut delta, mut min, mut max, mut keys) = (None, None, None, None);
        let (mut prefix, mut after, mut limit, mut keys_only) = (None, None, None, None);
        let ns = match op {
            KvOp::Get { ns, key: k } => {
                key = Some(k.as_str());
                ns
            }
            KvOp::GetMany { ns, keys: ks } => {
                keys = Some(serde_json::to_string(ks).unwrap_or_default());
                ns
            }
            KvOp::GetPrefix { ns, prefix: p, after: a, limit: l, keys_only: k } => {
                prefix = Some(p.as_str());
                after = a.as_deref();
                limit = Some(l.unwrap_or(100) as i32);
                keys_only = Some(*k);
                ns
            }
            KvOp::Put { ns, key: k, value: v, expiry: e, expect: x, required: r } => {
                (key, value, exp, expect, required) =
                    (Some(k.as_str()), Some(v.get()), expiry(e), x.map(|x| x.wire() as i64), *r);
                ns
            }
            KvOp::PutIfAbsent { ns, key: k, value: v, expiry: e, required: r } => {
                (key, value, exp, required) = (Some(k.as_str()), Some(v.get()), expiry(e), *r);
                ns
            }
            KvOp::Delete { ns, key: k, expect: x, required: r } => {
                (key, expect, required) = (Some(k.as_str()), x.map(|x| x as i64), *r);
                ns
            }
            KvOp::Check { ns, key: k, expect: x, required: r } => {
                (key, expect, required) = (Some(k.as_str()), Some(x.wire() as i64), *r);
                ns
            }
            KvOp::Incr { ns, key: k, delta: d, min: lo, max: hi, expiry: e, required: r } => {
                (key, exp, required) = (Some(k.as_str()), expiry(e), *r);
                (delta, min, max) =
                    (Some(d.get()), lo.as_ref().map(|m| m.get()), hi.as_ref().map(|m| m.get()));
                ns
            }
        };
        self.op.push(op.name());
        self.ns.push(ns);
        self.key.push(key);
        self.value.push(value);
        self.ttl.push(exp.0);
        self.forever.push(exp.1);
        self.expect.push(expect);
        self.required.push(required);
        self.delta.push(delta);
        self.min.push(min);
        self.max.push(max);
        self.keys.push(keys);
        self.prefix.push(prefix);
        self.after.push(after);
        self.limit.push(limit);
        self.keys_only.push(keys_only);
    }

    /// The sixteen arrays, in the order `kv_apply.sql` and `transaction.sql` take them.
    pub(crate) fn params(&self) -> Vec<&(dyn tokio_postgres::types::ToSql + Sync)> {
        vec![
            &self.op,
            &self.ns,
            &self.key,
            &self.value,
            &self.ttl,
            &self.forever,
            &self.expect,
            &self.required,
            &self.delta,
            &self.min,
            &self.max,
            &self.keys,
            &self.prefix,
            &self.after,
            &self.limit,
            &self.keys_only,
        ]
    }
}

/// An op's outcome as SQL answers it (`KvResult`'s fields without `index`
/// and `op`): read into the wire type, which the engine then writes.
pub(crate) fn outcome(record: &str) -> Result<KvResult, EngineError> {
    serde_json::from_str(record).map_err(|e| EngineError::Protocol(format!("a KV outcome: {e}")))
}

/// The outcomes of a call's ops as SQL answers them (a JSON array).
pub(crate) fn outcomes(records: &str) -> Result<Vec<KvResult>, EngineError> {
    serde_json::from_str(records).map_err(|e| EngineError::Protocol(format!("KV outcomes: {e}")))
}

/// Names each outcome after its op: `index` (from `first`, the flat index
/// space of a transaction), `op`, and `type: "kv"` inside a transaction.
pub(crate) fn name_outcomes(results: &mut [KvResult], names: &[&str], first: usize, in_transaction: bool) {
    for (i, (r, name)) in results.iter_mut().zip(names).enumerate() {
        r.index = first + i;
        r.op = (*name).to_owned();
        r.kind = in_transaction.then(|| "kv".to_owned());
    }
}

/// The get outcome from the live row (or its absence): value, version,
/// expiry and last write as `kv_get.sql` and `kv_get_batch.sql` select them.
pub(crate) fn get_outcome(key: &str, row: Option<tokio_postgres::Row>) -> Result<KvResult, EngineError> {
    let mut r = KvResult { key: Some(key.to_owned()), found: Some(row.is_some()), ..KvResult::default() };
    if let Some(row) = row {
        let value: String = row.try_get(0)?;
        let version: i64 = row.try_get(1)?;
        r.value = Some(RawValue::from_string(value).map_err(|e| EngineError::Protocol(e.to_string()))?);
        r.version = Some(u64::try_from(version).map_err(|e| EngineError::Protocol(e.to_string()))?);
        r.expires_at = row.try_get(2)?;
        r.updated_at = row.try_get(3)?;
    }
    Ok(r)
}

/// A `required` op that did not apply lost its precondition: the facts the
/// refusal carries (the call wrote nothing; `index` is the op's).
pub(crate) fn lost(result: &KvResult, index: usize) -> Option<PreconditionLost> {
    (result.applied == Some(false)).then(|| PreconditionLost {
        failed_index: index,
        kv_reason: result.reason.clone().unwrap_or_default(),
        key: result.key.clone(),
        version: result.version.unwrap_or(0),
        value: result.value.clone(),
    })
}

/// The body of a KV call that ran.
pub(crate) fn results_body(results: &[KvResult]) -> Result<Json, EngineError> {
    serde_json::to_string(&KvResults { results }).map(Json).map_err(|e| EngineError::Protocol(e.to_string()))
}

/// The verdict of one write (put, putIfAbsent, delete, check, incr) as its
/// own statement: the JSON object its SQL function answered.
pub(crate) async fn write_one(client: &crate::db::Conn, op: &KvOp) -> Result<KvResult, EngineError> {
    let ttl = |e: &Expiry| e.columns().0;
    let forever = |e: &Expiry| e.columns().1;
    let version = |v: u64| v as i64;
    let row = match op {
        KvOp::Put { ns, key, value, expiry, expect, .. } => {
            let stmt = client.prepare_cached(include_str!("../../sql/statements/kv_put.sql")).await?;
            let expect = expect.map(|e| version(e.wire()));
            client.query_one(&stmt, &[ns, key, &value.get(), &ttl(expiry), &forever(expiry), &expect]).await?
        }
        KvOp::PutIfAbsent { ns, key, value, expiry, .. } => {
            let stmt = client.prepare_cached(include_str!("../../sql/statements/kv_put.sql")).await?;
            client
                .query_one(&stmt, &[ns, key, &value.get(), &ttl(expiry), &forever(expiry), &Some(0i64)])
                .await?
        }
        KvOp::Delete { ns, key, expect, .. } => {
            let stmt = client.prepare_cached(include_str!("../../sql/statements/kv_delete.sql")).await?;
            client.query_one(&stmt, &[ns, key, &expect.map(version)]).await?
        }
        KvOp::Check { ns, key, expect, .. } => {
            let stmt = client.prepare_cached(include_str!("../../sql/statements/kv_check.sql")).await?;
            client.query_one(&stmt, &[ns, key, &version(expect.wire())]).await?
        }
        KvOp::Incr { ns, key, delta, min, max, expiry, .. } => {
            let stmt = client.prepare_cached(include_str!("../../sql/statements/kv_incr.sql")).await?;
            let (min, max) = (min.as_ref().map(|m| m.get()), max.as_ref().map(|m| m.get()));
            client
                .query_one(&stmt, &[ns, key, &delta.get(), &min, &max, &ttl(expiry), &forever(expiry)])
                .await?
        }
        KvOp::Get { .. } | KvOp::GetMany { .. } | KvOp::GetPrefix { .. } => {
            return Err(EngineError::Protocol(format!("{} is not a write", op.name())));
        }
    };
    let record: String = row.try_get(0)?;
    outcome(&record)
}
