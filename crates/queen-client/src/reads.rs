//! Reads by offset: a partition's messages from an offset on, with no lease
//! taken and no cursor moved, and the partitions written since a time.

use serde::Deserialize;
use serde_json::json;

use crate::broker::Broker;
use crate::client::Queen;
use crate::error::{Error, Result};

pub use queen_wire::{FetchEntry, Fetched, FetchedRecord};

pub use queen_wire::ChangedPartition;

/// One page of partitions/changed.
#[derive(Debug, Clone, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ChangedPage {
    /// The broker's time up to which every write is counted: the next `since`.
    pub safe_time: String,
    /// The partitions of this page, in creation order.
    pub partitions: Vec<ChangedPartition>,
    /// The `after` of the next page, when there is one.
    pub next: Option<String>,
    /// `UNKNOWN_TOPIC_OR_PARTITION` for a queue that does not exist.
    pub error: Option<String>,
}

/// The offset reads of one client.
pub struct Reads<B> {
    queen: Queen<B>,
}

impl<B: Broker> Queen<B> {
    /// Reads by offset: no lease, no cursor moved.
    pub fn reads(&self) -> Reads<B> {
        Reads::new(self.clone())
    }
}

impl<B: Broker> Reads<B> {
    fn new(queen: Queen<B>) -> Self {
        Reads { queen }
    }

    /// Reads each entry's partition from its offset on; one answer per entry.
    pub async fn fetch(&self, entries: &[FetchEntry], max_bytes: Option<i64>) -> Result<Vec<Fetched>> {
        let list: Vec<_> = entries
            .iter()
            .map(|e| {
                let mut v = json!({"queue": e.queue, "partition": e.partition, "offset": e.offset});
                if let Some(m) = e.max_bytes {
                    v["maxBytes"] = json!(m);
                }
                v
            })
            .collect();
        let mut body = json!({ "entries": list });
        if let Some(m) = max_bytes {
            body["maxBytes"] = json!(m);
        }
        #[derive(Deserialize)]
        struct Answer {
            entries: Vec<Fetched>,
        }
        let answer: Answer = self
            .queen
            .broker()
            .fetch(&body.to_string())
            .await?
            .decode()
            .map_err(|e| Error::decode("fetch answer", e))?;
        Ok(answer.entries)
    }

    /// One page of the partitions of `queue` written at or after `since`.
    pub async fn changed(
        &self,
        queue: &str,
        since: Option<&str>,
        after: Option<&str>,
        limit: Option<u32>,
    ) -> Result<ChangedPage> {
        let mut entry = json!({ "queue": queue });
        if let Some(s) = since {
            entry["since"] = json!(s);
        }
        if let Some(a) = after {
            entry["after"] = json!(a);
        }
        if let Some(l) = limit {
            entry["limit"] = json!(l);
        }
        let body = json!({ "entries": [entry] }).to_string();
        let mut answer: queen_wire::PartitionsChanged = self
            .queen
            .broker()
            .partitions_changed(&body)
            .await?
            .decode()
            .map_err(|e| Error::decode("partitions/changed answer", e))?;
        let e = answer.entries.pop().ok_or_else(|| Error::Decode("partitions/changed: no entry".into()))?;
        Ok(ChangedPage {
            safe_time: answer.safe_time,
            partitions: e.partitions,
            next: e.next,
            error: e.error,
        })
    }
}
