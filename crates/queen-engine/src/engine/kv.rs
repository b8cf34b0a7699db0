//! `Engine`'s calls of `crate::kv`: the facade over that module.

use crate::kv::decode::decode_call;
use crate::kv::read::GetKey;
use crate::kv::*;
use crate::{Engine, EngineError, Json};

impl Engine {
    /// Runs a KV call given as wire JSON (`{"operations": [...]}` or a bare
    /// array). A lost `required` precondition is `Err(EngineError::Refused)`
    /// carrying the 200 body.
    pub async fn kv(&self, body: &str) -> Result<Json, EngineError> {
        match self.kv_outcome(body).await? {
            KvOutcome::Done(results) => results_body(&results),
            KvOutcome::PreconditionLost(lost) => Err(EngineError::Refused(lost.kv_body())),
        }
    }

    /// A KV call given as wire JSON, answered typed: the HTTP routes write
    /// its body (`KvResults`, `PreconditionLost::kv_body`) and count its
    /// verdicts from it.
    pub async fn kv_outcome(&self, body: &str) -> Result<KvOutcome, EngineError> {
        let ops = decode_call(body, false).map_err(kv_input_error)?;
        self.kv_call(ops).await
    }

    /// Runs typed KV operations in one transaction. They are checked as a
    /// wire call is (the one checker reads the wire form).
    pub async fn kv_ops(&self, ops: &[KvOp]) -> Result<KvOutcome, EngineError> {
        let ops = decode_call(&ops_to_wire(ops), false).map_err(kv_input_error)?;
        self.kv_call(ops).await
    }

    /// One checked call: its outcomes, index-aligned with `ops`, named
    /// after them. The one path of HTTP and embedded calls.
    async fn kv_call(&self, mut ops: Vec<KvOp>) -> Result<KvOutcome, EngineError> {
        let names: Vec<&'static str> = ops.iter().map(KvOp::name).collect();
        let mut results = match ops.len() {
            0 => Vec::new(),
            1 => match ops.pop() {
                Some(op) => match self.kv_one(op).await.map_err(kv_input_error)? {
                    Ok(result) => vec![result],
                    Err(lost) => return Ok(KvOutcome::PreconditionLost(lost)),
                },
                None => Vec::new(),
            },
            _ => {
                let ctx = format!("{{\"maxReadBytes\":{}}}", self.kv_max_read_bytes());
                let client = self.pool().get().await?;
                let stmt = client.prepare_cached(include_str!("../../sql/statements/kv_apply.sql")).await?;
                let cols = KvColumns::of(&ops);
                let mut params = cols.params();
                params.push(&ctx);
                let row = match client.query_one(&stmt, &params).await {
                    Ok(row) => row,
                    Err(EngineError::PreconditionLost(lost)) => {
                        return Ok(KvOutcome::PreconditionLost(*lost))
                    }
                    Err(e) => return Err(kv_input_error(e)),
                };
                let records: Option<String> = row.try_get(0)?;
                outcomes(&records.ok_or_else(|| EngineError::Protocol("kv_apply answered NULL".into()))?)?
            }
        };
        if results.len() != names.len() {
            return Err(EngineError::Protocol(
                "a KV call answered another number of results than ops".into(),
            ));
        }
        name_outcomes(&mut results, &names, 0, false);
        Ok(KvOutcome::Done(results))
    }

    /// One checked op, one statement: no JSON is parsed in SQL. Single-key
    /// gets and writes go through their batchers, which share a statement
    /// (and a commit) between concurrent calls. A `required` write that did
    /// not apply answers its lost precondition (it wrote nothing).
    async fn kv_one(&self, op: KvOp) -> Result<Result<KvResult, PreconditionLost>, EngineError> {
        let result = match op {
            KvOp::Get { ns, key } => match self.get_batcher() {
                Some(batcher) => batcher.call(GetKey { ns, key }).await?,
                None => {
                    let client = self.pool().get().await?;
                    let stmt = client.prepare_cached(include_str!("../../sql/statements/kv_get.sql")).await?;
                    let row = client.query_opt(&stmt, &[&ns, &key]).await?;
                    get_outcome(&key, row)?
                }
            },
            KvOp::GetMany { ref ns, ref keys } => {
                let client = self.pool().get().await?;
                let stmt =
                    client.prepare_cached(include_str!("../../sql/statements/kv_get_many.sql")).await?;
                let row = client.query_one(&stmt, &[ns, keys, &self.kv_max_read_bytes()]).await?;
                let record: String = row.try_get(0)?;
                outcome(&record)?
            }
            KvOp::GetPrefix { ref ns, ref prefix, ref after, limit, keys_only } => {
                let client = self.pool().get().await?;
                let stmt =
                    client.prepare_cached(include_str!("../../sql/statements/kv_get_prefix.sql")).await?;
                let limit = limit.map(|l| l as i32);
                let row = client
                    .query_one(&stmt, &[ns, prefix, after, &limit, &keys_only, &self.kv_max_read_bytes()])
                    .await?;
                let record: String = row.try_get(0)?;
                outcome(&record)?
            }
            _ => {
                let required = op.is_required();
                let result = match self.write_batcher() {
                    Some(batcher) => batcher.call(op).await?,
                    None => write_one(&self.pool().get().await?, &op).await?,
                };
                if let Some(lost) = lost(&result, 0).filter(|_| required) {
                    return Ok(Err(lost));
                }
                result
            }
        };
        Ok(Ok(result))
    }

    /// Deletes up to `batch` expired rows; answers how many.
    pub async fn kv_sweep(&self, batch: i32) -> Result<i32, EngineError> {
        let client = self.pool().get().await?;
        let stmt = client.prepare_cached("SELECT queen.kv_sweep($1)").await?;
        Ok(client.query_one(&stmt, &[&batch]).await?.try_get(0)?)
    }
}
