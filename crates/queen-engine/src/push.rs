//! Pushes: the items decoded and checked here, once, for HTTP and embedded
//! callers alike; `queen.push_rows` takes them as typed arrays and keeps
//! only the rules that need the database (partition locks, offsets, the
//! dedup window, maxSize).

use serde_json::value::RawValue;

use crate::wire::{self, Kind};
use crate::{Engine, EngineError, Json};

/// The partition of an item that names none.
pub const DEFAULT_PARTITION: &str = "Default";

/// One message to push, checked.
#[derive(Debug, Clone)]
pub struct PushItem {
    /// Queue name (1 to 255 characters); created on first push.
    pub queue: String,
    /// Partition name (1 to 255 characters); created on first push.
    pub partition: String,
    /// Dedup key; the database draws a time-ordered one when `None`.
    pub transaction_id: Option<String>,
    /// Carried to the consumer as is.
    pub trace_id: Option<String>,
    /// The payload as sent, byte for byte; `None` when the item had none.
    pub payload: Option<Box<RawValue>>,
    /// Who pushed it, as the broker's authentication established (a JWT's
    /// `sub`); never decoded from a request, so a consumer can trust it.
    pub producer_sub: Option<String>,
}

/// Decodes a JSON array of push items, refusing the first bad one with the
/// 400 that names it (`items[i].field`).
pub fn decode_push_items(items: &str) -> Result<Vec<PushItem>, EngineError> {
    let raw: &RawValue =
        serde_json::from_str(items).map_err(|_| wire::bad_request("items", "must be an array"))?;
    let elements = wire::elements(raw).ok_or_else(|| wire::bad_request("items", "must be an array"))?;
    elements.iter().enumerate().map(|(i, item)| decode_item(i, item)).collect()
}

/// One push item; `i` is its index among the call's items (the 400 names it).
pub(crate) fn decode_item(i: usize, item: &RawValue) -> Result<PushItem, EngineError> {
    decode_item_in("items", i, item)
}

/// One push item of the list `list` (the 400 names `list[i].field`).
pub(crate) fn decode_item_in(list: &str, i: usize, item: &RawValue) -> Result<PushItem, EngineError> {
    let at = |field: &str| format!("{list}[{i}]{field}");
    let f = wire::fields(item).ok_or_else(|| wire::bad_request(&at(""), "must be an object"))?;
    let queue = match f.get("queue") {
        Some(q) if wire::kind(q) == Kind::String => wire::string(q)?,
        _ => return Err(wire::bad_request(&at(".queue"), "is required and must be a non-empty string")),
    };
    if queue.is_empty() {
        return Err(wire::bad_request(&at(".queue"), "is required and must be a non-empty string"));
    }
    if queue.chars().count() > 255 {
        return Err(wire::bad_request(&at(".queue"), "must be at most 255 characters"));
    }
    let partition = optional_name(&f, "partition", &at)?;
    if partition.as_ref().is_some_and(|p| p.chars().count() > 255) {
        return Err(wire::bad_request(&at(".partition"), "must be at most 255 characters"));
    }
    let transaction_id = optional_name(&f, "transactionId", &at)?;
    let trace_id = match f.get("traceId") {
        Some(t) if wire::kind(t) == Kind::String => Some(wire::string(t)?),
        _ => None,
    };
    let payload = f.get("payload").map(|p| (*p).to_owned());
    // A \u0000 escape could forge the envelope of a sealed payload (sealing.rs);
    // Queen's jsonb column refuses it too.
    if payload.as_ref().is_some_and(|p| wire::has_nul_escape(p.get())) {
        return Err(wire::bad_request(&at(".payload"), "must not contain \\u0000"));
    }
    Ok(PushItem {
        queue,
        partition: partition.unwrap_or_else(|| DEFAULT_PARTITION.to_owned()),
        transaction_id,
        trace_id,
        payload,
        // A `producerSub` in the body is ignored: only authentication sets it.
        producer_sub: None,
    })
}

/// A string field that may be absent or null, but not empty.
fn optional_name(
    f: &wire::Fields<'_>,
    name: &str,
    at: &dyn Fn(&str) -> String,
) -> Result<Option<String>, EngineError> {
    let bad = || wire::bad_request(&at(&format!(".{name}")), "must be a non-empty string");
    match f.get(name) {
        None => Ok(None),
        Some(v) => match wire::kind(v) {
            Kind::Null => Ok(None),
            Kind::String => match wire::string(v)? {
                s if s.is_empty() => Err(bad()),
                s => Ok(Some(s)),
            },
            _ => Err(bad()),
        },
    }
}

/// The typed arrays `queen.push_rows` takes, borrowed from the items.
pub(crate) struct PushColumns<'a> {
    pub queues: Vec<&'a str>,
    pub partitions: Vec<&'a str>,
    pub transaction_ids: Vec<Option<&'a str>>,
    pub trace_ids: Vec<Option<&'a str>>,
    pub payloads: Vec<Option<&'a str>>,
    pub producer_subs: Vec<Option<&'a str>>,
}

impl<'a> PushColumns<'a> {
    pub(crate) fn of(items: impl IntoIterator<Item = &'a PushItem>) -> Self {
        let mut c = PushColumns {
            queues: Vec::new(),
            partitions: Vec::new(),
            transaction_ids: Vec::new(),
            trace_ids: Vec::new(),
            payloads: Vec::new(),
            producer_subs: Vec::new(),
        };
        for it in items {
            c.queues.push(&it.queue);
            c.partitions.push(&it.partition);
            c.transaction_ids.push(it.transaction_id.as_deref());
            c.trace_ids.push(it.trace_id.as_deref());
            c.payloads.push(it.payload.as_ref().map(|p| p.get()));
            c.producer_subs.push(it.producer_sub.as_deref());
        }
        c
    }

    /// The producer identities, or `None` (a NULL array) when no item has one,
    /// as without authentication.
    pub(crate) fn subs(&self) -> Option<&Vec<Option<&'a str>>> {
        self.producer_subs.iter().any(Option::is_some).then_some(&self.producer_subs)
    }
}

/// Requests with more items than this run alone: they already share their
/// own commit, and batching them would turn one-partition pushes into the
/// slower many-partition path.
const BATCH_AT_MOST_ITEMS: usize = 16;

impl Engine {
    /// Pushes a JSON array of items; answers the per-item results array.
    pub async fn push(&self, items: &str) -> Result<Json, EngineError> {
        self.push_items(decode_push_items(items)?).await
    }

    /// Pushes checked items; answers the per-item results array (201 body).
    /// Concurrent calls share a statement and a commit (the push batcher).
    pub async fn push_items(&self, items: Vec<PushItem>) -> Result<Json, EngineError> {
        if items.is_empty() {
            return Ok(Json("[]".into()));
        }
        let answer = match self.push_sealed(&items).await {
            // A queue's encryption flag changed under our hint: learn it, seal again.
            Err(EngineError::EncryptionChanged(queues)) => {
                self.refresh_sealed(&queues).await?;
                self.push_sealed(&items).await
            }
            other => other,
        }?;
        self.traffic_ref().pushed(items.len());
        Ok(answer)
    }

    async fn push_sealed(&self, items: &[PushItem]) -> Result<Json, EngineError> {
        let items = self.seal_items(items)?;
        if items.len() > BATCH_AT_MOST_ITEMS {
            return crate::batch::push_call(
                self.pool(),
                PushColumns::of(items.iter()),
                None,
                &self.announce_fn(),
            )
            .await;
        }
        self.push_batcher().call(items.into_owned()).await
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used)]
mod tests {
    use super::*;

    fn body(e: EngineError) -> String {
        match e {
            EngineError::Rejected { body, .. } => body,
            other => panic!("not a rejection: {other}"),
        }
    }

    #[test]
    fn the_first_bad_item_is_named() {
        let e = decode_push_items(r#"[{"queue":"q"},{"queue":""}]"#).unwrap_err();
        assert!(body(e).contains("items[1].queue is required and must be a non-empty string"));
        let e = decode_push_items(r#"[{"queue":"q","partition":5}]"#).unwrap_err();
        assert!(body(e).contains("items[0].partition must be a non-empty string"));
        let e = decode_push_items(r#"{"queue":"q"}"#).unwrap_err();
        assert!(body(e).contains("items must be an array"));
        let e = decode_push_items(&format!(r#"[{{"queue":"{}"}}]"#, "é".repeat(256))).unwrap_err();
        assert!(body(e).contains("items[0].queue must be at most 255 characters"));
    }

    #[test]
    fn payloads_keep_their_text_and_absent_fields_default() {
        let items = decode_push_items(r#"[{"queue":"q","payload":{"n": 12345678901234567890.50}}]"#).unwrap();
        assert_eq!(items[0].partition, "Default");
        assert_eq!(items[0].payload.as_ref().unwrap().get(), r#"{"n": 12345678901234567890.50}"#);
        assert!(items[0].transaction_id.is_none());
        let items = decode_push_items(r#"[{"queue":"q","transactionId":null,"traceId":7}]"#).unwrap();
        assert!(items[0].payload.is_none() && items[0].trace_id.is_none());
    }
}
