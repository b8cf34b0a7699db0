//! `Engine`'s calls of `crate::reads`: the facade over that module.

use crate::reads::*;
use crate::wire::bad_request;
use crate::{Engine, EngineError, Json};
use uuid::Uuid;

impl Engine {
    /// A fetch call given as wire JSON.
    pub async fn fetch(&self, body: &str) -> Result<Json, EngineError> {
        let (entries, call_max) = decode_fetch(body)?;
        let answer = FetchAnswer { entries: self.run_fetch(&entries, call_max).await? };
        serde_json::to_string(&answer).map(Json).map_err(|e| EngineError::Protocol(e.to_string()))
    }

    /// Typed fetch: one answer per entry, in order.
    pub async fn fetch_entries(
        &self,
        entries: &[FetchEntry],
        max_bytes: Option<i64>,
    ) -> Result<Vec<Fetched>, EngineError> {
        if entries.len() > MAX_FETCH_ENTRIES {
            return Err(bad_request("entries", &format!("holds more than {MAX_FETCH_ENTRIES} entries")));
        }
        for (i, e) in entries.iter().enumerate() {
            let f = format!("entries[{i}]");
            if e.queue.is_empty() || e.queue.len() > 255 {
                return Err(bad_request(&format!("{f}.queue"), "must be a queue name (1 to 255 bytes)"));
            }
            if e.offset < 0 {
                return Err(bad_request(&format!("{f}.offset"), "must be an integer >= 0"));
            }
        }
        self.run_fetch(entries, max_bytes).await
    }

    /// One `queen.fetch` call; payloads sealed at rest are opened.
    async fn run_fetch(
        &self,
        entries: &[FetchEntry],
        call_max: Option<i64>,
    ) -> Result<Vec<Fetched>, EngineError> {
        let queues: Vec<&str> = entries.iter().map(|e| e.queue.as_str()).collect();
        let partitions: Vec<&str> = entries.iter().map(|e| e.partition.as_str()).collect();
        let offsets: Vec<i64> = entries.iter().map(|e| e.offset).collect();
        let budgets: Vec<i64> =
            entries.iter().map(|e| e.max_bytes.unwrap_or(DEFAULT_ENTRY_BYTES).max(1)).collect();
        let call_max = call_max.unwrap_or(DEFAULT_CALL_BYTES).clamp(1, MAX_CALL_BYTES);
        let client = self.pool().get().await?;
        let stmt = client.prepare_cached(include_str!("../../sql/statements/fetch.sql")).await?;
        let row = client
            .query_one(&stmt, &[&queues, &partitions, &offsets, &budgets, &call_max, &MAX_RECORDS])
            .await?;
        drop(client);
        let columns = FetchColumns::read(&row)?;
        columns.entries(|payload| self.open_sealed(payload))
    }

    /// A partitions/changed call given as wire JSON.
    pub async fn partitions_changed(&self, body: &str) -> Result<Json, EngineError> {
        let entries = decode_changed(body)?;
        self.run_changed(&entries).await
    }

    /// Typed partitions/changed: the answer as wire JSON.
    pub async fn partitions_changed_entries(&self, entries: &[ChangedEntry]) -> Result<Json, EngineError> {
        if entries.len() > MAX_FETCH_ENTRIES {
            return Err(bad_request("entries", &format!("holds more than {MAX_FETCH_ENTRIES} entries")));
        }
        self.run_changed(entries).await
    }

    async fn run_changed(&self, entries: &[ChangedEntry]) -> Result<Json, EngineError> {
        let queues: Vec<&str> = entries.iter().map(|e| e.queue.as_str()).collect();
        let limits: Vec<i32> =
            entries.iter().map(|e| e.limit.unwrap_or(MAX_CHANGED_PAGE).clamp(1, MAX_CHANGED_PAGE)).collect();
        let since: Vec<Option<&str>> = entries.iter().map(|e| e.since.as_deref()).collect();
        let after: Vec<Option<Uuid>> = entries.iter().map(|e| e.after).collect();
        let client = self.pool().get().await?;
        let stmt = client.prepare_cached(include_str!("../../sql/statements/partitions_changed.sql")).await?;
        let row = client.query_one(&stmt, &[&queues, &limits, &since, &after]).await?;
        let answer = ChangedColumns::read(&row)?.answer(&limits)?;
        serde_json::to_string(&answer).map(Json).map_err(|e| EngineError::Protocol(e.to_string()))
    }
}
