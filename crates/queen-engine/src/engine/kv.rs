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
        let mut ops = decode_call(body, false).map_err(kv_input_error)?;
        match ops.as_slice() {
            [] => Ok(Json("{\"results\": []}".into())),
            [_] => match ops.pop() {
                Some(op) => self.kv_one(op).await.map_err(kv_input_error),
                None => Ok(Json("{\"results\": []}".into())),
            },
            _ => {
                let ctx = format!("{{\"maxReadBytes\":{}}}", self.kv_max_read_bytes());
                let client = self.pool().get().await?;
                let stmt = client.prepare_cached(include_str!("../../sql/statements/kv_apply.sql")).await?;
                let cols = KvColumns::of(&ops);
                let mut params = cols.params();
                params.push(&ctx);
                let row = client.query_one(&stmt, &params).await;
                let answer: Option<String> = row.map_err(kv_input_error)?.try_get(0)?;
                answer.map(Json).ok_or_else(|| EngineError::Protocol("kv_apply answered NULL".into()))
            }
        }
    }

    /// One checked op, one statement: no JSON is parsed in SQL. Single-key
    /// gets and writes go through their batchers, which share a statement
    /// (and a commit) between concurrent calls.
    async fn kv_one(&self, op: KvOp) -> Result<Json, EngineError> {
        match op {
            KvOp::Get { ns, key } => {
                if let Some(batcher) = self.get_batcher() {
                    return Ok(Json(results(&batcher.call(GetKey { ns, key }).await?)));
                }
                let client = self.pool().get().await?;
                let stmt = client.prepare_cached(include_str!("../../sql/statements/kv_get.sql")).await?;
                let row = client.query_opt(&stmt, &[&ns, &key]).await?;
                return Ok(Json(results(&get_element(&key, row)?)));
            }
            KvOp::GetMany { ref ns, ref keys } => {
                let client = self.pool().get().await?;
                let stmt =
                    client.prepare_cached(include_str!("../../sql/statements/kv_get_many.sql")).await?;
                let row = client.query_one(&stmt, &[ns, keys, &self.kv_max_read_bytes()]).await?;
                let inner: String = row.try_get(0)?;
                return Ok(Json(results(&element(op.name(), &inner))));
            }
            KvOp::GetPrefix { ref ns, ref prefix, ref after, limit, keys_only } => {
                let client = self.pool().get().await?;
                let stmt =
                    client.prepare_cached(include_str!("../../sql/statements/kv_get_prefix.sql")).await?;
                let limit = limit.map(|l| l as i32);
                let row = client
                    .query_one(&stmt, &[ns, prefix, after, &limit, &keys_only, &self.kv_max_read_bytes()])
                    .await?;
                let inner: String = row.try_get(0)?;
                return Ok(Json(results(&element(op.name(), &inner))));
            }
            _ => {}
        }
        let name = op.name();
        let required = op.is_required();
        let key = op.written_key().map(|(_, k)| k.to_owned()).unwrap_or_default();
        let verdict = match self.write_batcher() {
            Some(batcher) => batcher.call(op).await?,
            None => write_one(&self.pool().get().await?, &op).await?,
        };
        if required {
            refuse_if_lost(&verdict, &key)?;
        }
        Ok(Json(results(&element(name, &verdict))))
    }

    /// Runs typed KV operations in one transaction.
    pub async fn kv_ops(&self, ops: &[KvOp]) -> Result<KvOutcome, EngineError> {
        match self.kv(&ops_to_wire(ops)).await {
            Ok(json) => {
                let answer: KvAnswer = json.decode().map_err(|e| EngineError::Protocol(e.to_string()))?;
                answer
                    .results
                    .map(KvOutcome::Done)
                    .ok_or_else(|| EngineError::Protocol("kv answered no results".into()))
            }
            Err(EngineError::Refused(body)) => {
                let answer: KvAnswer =
                    serde_json::from_str(&body).map_err(|e| EngineError::Protocol(e.to_string()))?;
                answer.precondition_lost().map(KvOutcome::PreconditionLost).ok_or_else(|| {
                    EngineError::Protocol(format!("kv refused without a lost precondition: {body}"))
                })
            }
            Err(e) => Err(e),
        }
    }

    /// Deletes up to `batch` expired rows; answers how many.
    pub async fn kv_sweep(&self, batch: i32) -> Result<i32, EngineError> {
        let client = self.pool().get().await?;
        let stmt = client.prepare_cached("SELECT queen.kv_sweep($1)").await?;
        Ok(client.query_one(&stmt, &[&batch]).await?.try_get(0)?)
    }
}
