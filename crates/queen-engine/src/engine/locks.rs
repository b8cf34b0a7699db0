//! `Engine`'s calls of `crate::locks`: the facade over that module.

use crate::locks::*;
use crate::{Engine, EngineError, Json};

impl Engine {
    /// A locks call given as wire JSON: `{"results": [...]}`, one per op.
    pub async fn locks(&self, body: &str) -> Result<Json, EngineError> {
        let ops = decode_locks(body)?;
        self.run_locks(&ops).await
    }

    /// Typed lock operations, checked as the HTTP route checks them.
    pub async fn lock_ops(&self, ops: &[LockOp]) -> Result<Vec<LockResult>, EngineError> {
        for (i, op) in ops.iter().enumerate() {
            op.check(&format!("operations[{i}]"))?;
        }
        let json = self.run_locks(ops).await?;
        let r: Results = json.decode().map_err(|e| EngineError::Protocol(e.to_string()))?;
        Ok(r.results)
    }

    async fn run_locks(&self, ops: &[LockOp]) -> Result<Json, EngineError> {
        if ops.is_empty() {
            return Ok(Json("{\"results\": []}".into()));
        }
        let c = LockColumns::of(ops);
        let client = self.pool().get().await?;
        let stmt = client.prepare_cached(include_str!("../../sql/statements/locks.sql")).await?;
        let row = client
            .query_one(&stmt, &[&c.ops, &c.names, &c.owners, &c.ttls, &c.limits, &c.tokens, &c.slots])
            .await?;
        let answer: Option<String> = row.try_get(0)?;
        answer.map(Json).ok_or_else(|| EngineError::Protocol("lock_apply answered NULL".into()))
    }
}
