//! `Engine`'s calls of `crate::kv::browse`: the facade over that module.

use crate::kv::browse::*;
use crate::{Engine, EngineError, Json};

impl Engine {
    /// Every KV namespace with its live key count and its expired rows the
    /// sweeper has not deleted yet: `{"namespaces": [{namespace, keys, expired}]}`.
    pub async fn kv_namespace_counts(&self) -> Result<Json, EngineError> {
        written(&namespace_counts(self.pool()).await?)
    }

    /// One keyset page of a namespace's keys in byte order, bounded by the
    /// limit and by the KV read byte ceiling (at least one row when one
    /// exists): `{namespace, keys: [...], nextCursor}`.
    pub async fn kv_list(&self, req: &KvListRequest) -> Result<Json, EngineError> {
        written(&list(self.pool(), req, self.kv_max_read_bytes()).await?)
    }
}

fn written(answer: &impl serde::Serialize) -> Result<Json, EngineError> {
    serde_json::to_string(answer).map(Json).map_err(|e| EngineError::Protocol(e.to_string()))
}
