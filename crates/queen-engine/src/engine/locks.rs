//! `Engine`'s calls of `crate::locks`: the facade over that module.

use crate::locks::*;
use crate::{Engine, EngineError, Json};

impl Engine {
    /// A locks call given as wire JSON: `{"results": [...]}`, one per op.
    pub async fn locks(&self, body: &str) -> Result<Json, EngineError> {
        let ops = decode_locks(body)?;
        let results = self.run_locks(&ops).await?;
        serde_json::to_string(&Results { results })
            .map(Json)
            .map_err(|e| EngineError::Protocol(e.to_string()))
    }

    /// Typed lock operations, checked as the HTTP route checks them.
    pub async fn lock_ops(&self, ops: &[LockOp]) -> Result<Vec<LockResult>, EngineError> {
        for (i, op) in ops.iter().enumerate() {
            op.check(&format!("operations[{i}]"))?;
        }
        self.run_locks(ops).await
    }

    /// The ops' answers, index-aligned: SQL's outcomes, named after their ops.
    async fn run_locks(&self, ops: &[LockOp]) -> Result<Vec<LockResult>, EngineError> {
        if ops.is_empty() {
            return Ok(Vec::new());
        }
        let c = LockColumns::of(ops);
        let client = self.pool().get().await?;
        let stmt = client.prepare_cached(include_str!("../../sql/statements/locks.sql")).await?;
        let row = client
            .query_one(&stmt, &[&c.ops, &c.names, &c.owners, &c.ttls, &c.limits, &c.tokens, &c.slots])
            .await?;
        let answer: Option<String> = row.try_get(0)?;
        let answer = answer.ok_or_else(|| EngineError::Protocol("lock_apply answered NULL".into()))?;
        let mut results: Vec<LockResult> = serde_json::from_str(&answer)
            .map_err(|e| EngineError::Protocol(format!("lock outcomes: {e}")))?;
        if results.len() != ops.len() {
            return Err(EngineError::Protocol(
                "lock_apply answered another number of results than ops".into(),
            ));
        }
        for (i, (r, op)) in results.iter_mut().zip(ops).enumerate() {
            r.index = i;
            r.op = op.op_name().to_owned();
            r.name = op.name().to_owned();
        }
        Ok(results)
    }
}
