//! `Engine`'s calls of `crate::kv::browse`: the facade over that module.

use crate::kv::browse::*;
use crate::{Engine, EngineError, Json};

impl Engine {
    /// Every KV namespace with its live key count and its expired rows the
    /// sweeper has not deleted yet: `{"namespaces": [{namespace, keys, expired}]}`.
    pub async fn kv_namespace_counts(&self) -> Result<Json, EngineError> {
        self.call_json("SELECT queen.kv_namespace_counts()::text", &[]).await
    }

    /// One keyset page of a namespace's keys in byte order, bounded by the
    /// limit and by the KV read byte ceiling (at least one row when one
    /// exists): `{namespace, keys: [...], nextCursor}`.
    pub async fn kv_list(&self, req: &KvListRequest) -> Result<Json, EngineError> {
        let limit = req.limit as i32;
        self.call_json(
            "SELECT queen.kv_list($1, $2, $3, $4, $5)::text",
            &[&req.namespace, &req.prefix, &req.cursor, &limit, &self.kv_max_read_bytes()],
        )
        .await
    }
}
