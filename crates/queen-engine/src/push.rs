//! Pushes: the items decoded and checked here, once, for HTTP and embedded
//! callers alike; `queen.push_rows` takes them as typed arrays and keeps
//! only the rules that need the database (partition locks, offsets, the
//! dedup window, maxSize).

use std::sync::Arc;

use crate::batch::{
    answer_batch, unless_alone, Answered, BatchKind, BatchStats, Batcher, Budget, Rerun, Waiting,
    MAX_BATCH_BYTES, STALL_AFTER,
};
use crate::db::Pool;
use crate::notifier::Announce;
use serde_json::value::RawValue;

use crate::wire::{self, Kind};
use crate::{EngineError, Json};

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
    /// A transaction id this engine drew for an item that came without
    /// one, before its first attempt (so a spooled copy keeps it). Fresh,
    /// so that attempt skips the dedup lookup; a drained copy carries it
    /// as its own `transaction_id` and is deduplicated.
    pub(crate) drawn_id: Option<String>,
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
        drawn_id: None,
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

/// The typed arrays `queen.push_rows` takes, borrowed from the items, and
/// (built with [`PushColumns::drawn`], for `statements/push.sql`) what the
/// engine draws for them: a transaction id (a UUIDv7) for each item that
/// came without one, and the random half of each new message id. Drawn
/// here, they spare the database a PL/pgSQL call and two calls of its
/// OpenSSL-backed `gen_random_uuid()` per item. Bundles and stream cycles
/// carry their drawn transaction ids as their own ([`own_transaction_ids`])
/// and leave the id tails to the database.
pub(crate) struct PushColumns<'a> {
    pub queues: Vec<&'a str>,
    pub partitions: Vec<&'a str>,
    pub transaction_ids: Vec<Option<&'a str>>,
    pub trace_ids: Vec<Option<&'a str>>,
    pub payloads: Vec<Option<&'a str>>,
    pub producer_subs: Vec<Option<&'a str>>,
    /// Transaction ids the engine drew before the push (`PushItem::drawn_id`).
    pub drawn_ids: Vec<Option<&'a str>>,
    /// `Some` for an item without a transaction id (empty until drawn).
    pub new_txids: Vec<Option<String>>,
    /// The low 64 bits of each item's message id, variant bits set; `None`
    /// (the database draws them) only if the system's random source failed.
    pub tails: Option<Vec<i64>>,
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
            drawn_ids: Vec::new(),
            new_txids: Vec::new(),
            tails: None,
        };
        for it in items {
            c.queues.push(&it.queue);
            c.partitions.push(&it.partition);
            c.transaction_ids.push(it.transaction_id.as_deref());
            c.trace_ids.push(it.trace_id.as_deref());
            c.payloads.push(it.payload.as_ref().map(|p| p.get()));
            c.producer_subs.push(it.producer_sub.as_deref());
            c.drawn_ids.push(it.drawn_id.as_deref());
        }
        c
    }

    /// The columns with the drawn transaction ids and id tails.
    pub(crate) fn drawn(items: impl IntoIterator<Item = &'a PushItem>) -> Self {
        let mut c = Self::of(items);
        c.draw();
        c
    }

    /// Draws the transaction ids and id tails, from one read of the
    /// system's random source.
    fn draw(&mut self) {
        let mut bits = vec![[0u8; 18]; self.queues.len()];
        if getrandom::fill(bits.as_flattened_mut()).is_err() {
            // The database draws them instead (queen.push_rows), but for
            // those drawn already.
            self.new_txids = self.drawn_ids.iter().map(|d| d.map(str::to_owned)).collect();
            return;
        }
        let millis = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| u64::try_from(d.as_millis()).unwrap_or(u64::MAX));
        let mut tails = Vec::with_capacity(bits.len());
        for ((own, drawn), b) in self.transaction_ids.iter().zip(&self.drawn_ids).zip(&bits) {
            let mut random = [0u8; 10];
            random.copy_from_slice(&b[..10]);
            self.new_txids.push(match drawn {
                Some(id) => Some((*id).to_owned()),
                None => own.is_none().then(|| v7(millis, random)),
            });
            let mut tail = [0u8; 8];
            tail.copy_from_slice(&b[10..]);
            // RFC 9562 variant bits (10) on top, as gen_random_uuid's half has.
            let tail = (u64::from_be_bytes(tail) & 0x3FFF_FFFF_FFFF_FFFF) | 0x8000_0000_0000_0000;
            tails.push(tail as i64);
        }
        self.tails = Some(tails);
    }

    /// The producer identities, or `None` (a NULL array) when no item has one,
    /// as without authentication.
    pub(crate) fn subs(&self) -> Option<&Vec<Option<&'a str>>> {
        self.producer_subs.iter().any(Option::is_some).then_some(&self.producer_subs)
    }

    /// The 201 body for the items in `range` (indexes from 0), from what
    /// `queen.push_rows` answered for every item.
    pub(crate) fn answer(&self, pushed: &Pushed, range: std::ops::Range<usize>) -> Result<Json, EngineError> {
        use std::fmt::Write;
        let verdicts = pushed.verdicts.as_bytes();
        if pushed.ids.len() != self.queues.len()
            || verdicts.len() != self.queues.len()
            || range.end > self.queues.len()
        {
            return Err(EngineError::Protocol("push answered a result per item of another batch".into()));
        }
        let quoted = |s: &str| serde_json::to_string(s).unwrap_or_else(|_| "null".into());
        let mut out = String::with_capacity(range.len() * 160 + 2);
        out.push('[');
        for (index, k) in range.enumerate() {
            if index > 0 {
                out.push(',');
            }
            let drawn = self.new_txids.get(k).and_then(Option::as_deref);
            // Null only if the database drew the id (the random source failed).
            let txid = self.transaction_ids[k].or(drawn).map_or_else(|| "null".to_owned(), quoted);
            let queue = self.queues[k];
            let id = match pushed.ids[k] {
                Some(id) => format!("\"{id}\""),
                None => "null".into(),
            };
            let status = match verdicts[k] {
                b'q' => "queued",
                b'd' => "duplicate",
                b'f' => "failed",
                other => {
                    return Err(EngineError::Protocol(format!("push answered verdict {:?}", other as char)))
                }
            };
            let _ = write!(
                out,
                "{{\"index\":{index},\"message_id\":{id},\"transaction_id\":{},\"queueName\":{},\"status\":\"{status}\"",
                txid,
                quoted(queue)
            );
            if status == "failed" {
                let _ = write!(
                    out,
                    ",\"error\":{}",
                    quoted(&format!("Queue '{queue}' would exceed max capacity"))
                );
            }
            out.push('}');
        }
        out.push(']');
        Ok(Json(out))
    }
}

/// A UUIDv7 string from a millisecond time and 10 random bytes.
fn v7(millis: u64, random: [u8; 10]) -> String {
    uuid::Builder::from_unix_timestamp_millis(millis, &random).into_uuid().to_string()
}

/// Draws a transaction id for each item that has none (see
/// [`PushItem::drawn_id`]); left to the database if the system's random
/// source fails.
pub(crate) fn draw_missing_ids(items: &mut [PushItem]) {
    let missing = items.iter().filter(|i| i.transaction_id.is_none() && i.drawn_id.is_none()).count();
    if missing == 0 {
        return;
    }
    let mut bits = vec![[0u8; 10]; missing];
    if getrandom::fill(bits.as_flattened_mut()).is_err() {
        return;
    }
    let millis = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| u64::try_from(d.as_millis()).unwrap_or(u64::MAX));
    let targets = items.iter_mut().filter(|i| i.transaction_id.is_none() && i.drawn_id.is_none());
    for (item, random) in targets.zip(bits) {
        item.drawn_id = Some(v7(millis, random));
    }
}

/// Gives every item without a transaction id one, drawn as a push draws
/// them: for callers whose answers name each item's transaction id (a
/// bundle's push results, a stream cycle's push_results), which
/// `queen.push_rows` does not answer. Should the system's random source
/// fail, the random bits come from a process-wide counter and the clock
/// instead, so that no answer names an empty id. (They pass as the items'
/// own ids, so each costs one dedup probe that a push's drawn id skips.)
pub(crate) fn own_transaction_ids(items: &mut [PushItem]) {
    use std::sync::atomic::{AtomicU64, Ordering};
    static FALLBACK: AtomicU64 = AtomicU64::new(0);
    draw_missing_ids(items);
    let now = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap_or_default();
    let millis = u64::try_from(now.as_millis()).unwrap_or(u64::MAX);
    for item in items.iter_mut().filter(|i| i.transaction_id.is_none()) {
        let drawn = item.drawn_id.take().unwrap_or_else(|| {
            let mut random = [0u8; 10];
            random[..8].copy_from_slice(&FALLBACK.fetch_add(1, Ordering::Relaxed).to_be_bytes());
            random[8..].copy_from_slice(&(now.subsec_nanos() as u16).to_be_bytes());
            v7(millis, random)
        });
        item.transaction_id = Some(drawn);
    }
}

/// What `queen.push_rows` answers, one element per item.
pub(crate) struct Pushed {
    /// The message id (a duplicate's is its first occurrence's); `None`
    /// when maxSize refused the item.
    pub ids: Vec<Option<uuid::Uuid>>,
    /// One character per item: `q` queued, `d` duplicate, `f` refused.
    pub verdicts: String,
}

/// Requests with more items than this run alone: they already share their
/// own commit, and batching them would turn one-partition pushes into the
/// slower many-partition path.
pub(crate) const BATCH_AT_MOST_ITEMS: usize = 16;

// The push batcher: concurrent pushes, one `queen.push_rows` call, one commit.

/// Items in one push statement.
const MAX_PUSH_ITEMS: usize = 1000;

/// Concurrent push requests: one `queen.push_rows` call, one commit.
pub(crate) type PushBatcher = Batcher<Vec<PushItem>, Json>;

pub(crate) fn start_pushes(
    pool: Pool,
    slots: usize,
    announce: Announce,
    stats: Arc<BatchStats>,
) -> PushBatcher {
    let budget = Budget {
        ceiling: [MAX_PUSH_ITEMS, MAX_BATCH_BYTES],
        cost: |items: &Vec<PushItem>| [items.len(), payload_bytes(items)],
    };
    Batcher::start(slots, budget, BatchKind::Push, stats, STALL_AFTER, move |batch| {
        run_pushes(pool.clone(), batch, announce.clone())
    })
}

fn payload_bytes(items: &[PushItem]) -> usize {
    items.iter().map(|i| i.payload.as_ref().map_or(0, |r| r.get().len())).sum()
}

async fn run_pushes(pool: Pool, batch: Vec<Waiting<Vec<PushItem>, Json>>, announce: Announce) -> Answered {
    let alone = |items: Vec<PushItem>| {
        let (pool, announce) = (pool.clone(), announce.clone());
        async move {
            let (cols, pushed) = push_call(&pool, items.iter(), None, &announce).await?;
            cols.answer(&pushed, 0..items.len())
        }
    };
    let Some(batch) = unless_alone(batch, &alone).await else { return Answered::Together };
    let counts: Vec<usize> = batch.iter().map(|w| w.request.len()).collect();
    let requests: Vec<i32> =
        counts.iter().enumerate().flat_map(|(n, &c)| std::iter::repeat_n(n as i32, c)).collect();
    let items = batch.iter().flat_map(|w| w.request.iter());
    let outcome = push_call(&pool, items, Some(requests), &announce).await.and_then(|(cols, pushed)| {
        let mut start = 0;
        counts
            .iter()
            .map(|&n| {
                start += n;
                cols.answer(&pushed, start - n..start)
            })
            .collect::<Result<Vec<Json>, EngineError>>()
    });
    answer_batch(batch, outcome, alone, Rerun::SideBySide).await
}

/// One `push_rows` call; announces the queues that got messages after the
/// commit. The columns are built once a connection is in hand: under load
/// most pushes wait for one, and a waiting push then holds only its items.
pub(crate) async fn push_call<'a>(
    pool: &Pool,
    items: impl IntoIterator<Item = &'a PushItem>,
    requests: Option<Vec<i32>>,
    announce: &Announce,
) -> Result<(PushColumns<'a>, Pushed), EngineError> {
    let client = pool.get().await?;
    let c = PushColumns::drawn(items);
    let stmt = client.prepare_cached(include_str!("../sql/statements/push.sql")).await?;
    let row = client
        .query_one(
            &stmt,
            &[
                &c.queues,
                &c.partitions,
                &c.transaction_ids,
                &c.trace_ids,
                &c.payloads,
                &requests,
                &c.subs(),
                &c.new_txids,
                &c.tails,
            ],
        )
        .await?;
    drop(client);
    let ids: Option<Vec<Option<uuid::Uuid>>> = row.try_get(0)?;
    let verdicts: Option<String> = row.try_get(1)?;
    let queued: Option<Vec<String>> = row.try_get(2)?;
    if let Some(queues) = queued {
        announce(queues);
    }
    match (ids, verdicts) {
        (Some(ids), Some(verdicts)) => Ok((c, Pushed { ids, verdicts })),
        _ => Err(EngineError::Protocol("push answered NULL".into())),
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
    fn the_engine_draws_v7_transaction_ids_and_variant_tails_for_items_without_one() {
        let items =
            decode_push_items(r#"[{"queue":"q"},{"queue":"q","transactionId":"mine"},{"queue":"q"}]"#)
                .unwrap();
        let c = PushColumns::drawn(&items);
        assert_eq!(c.new_txids.len(), 3);
        assert!(c.new_txids[1].is_none(), "an item's own id is kept");
        for drawn in [&c.new_txids[0], &c.new_txids[2]] {
            let id = uuid::Uuid::parse_str(drawn.as_deref().unwrap()).unwrap();
            assert_eq!(id.get_version_num(), 7);
            assert_eq!(id.get_variant(), uuid::Variant::RFC4122);
        }
        assert_ne!(c.new_txids[0], c.new_txids[2]);
        let tails = c.tails.as_ref().unwrap();
        assert_eq!(tails.len(), 3);
        // The top two bits are the RFC 9562 variant, 10.
        assert!(tails.iter().all(|&t| (t as u64) >> 62 == 0b10), "{tails:?}");
    }

    #[test]
    fn bundles_and_cycles_carry_a_drawn_id_as_their_own_and_keep_given_ones() {
        let mut items =
            decode_push_items(r#"[{"queue":"q"},{"queue":"q","transactionId":"mine"},{"queue":"q"}]"#)
                .unwrap();
        own_transaction_ids(&mut items);
        assert_eq!(items[1].transaction_id.as_deref(), Some("mine"));
        for item in [&items[0], &items[2]] {
            let id = uuid::Uuid::parse_str(item.transaction_id.as_deref().unwrap()).unwrap();
            assert_eq!(id.get_version_num(), 7);
            assert!(item.drawn_id.is_none(), "the drawn id became the item's own");
        }
        assert_ne!(items[0].transaction_id, items[2].transaction_id);
    }

    #[test]
    fn the_answer_names_each_item_of_its_range_from_index_0() {
        let items = decode_push_items(
            r#"[{"queue":"a","transactionId":"t0"},{"queue":"q\"x","transactionId":"t1"},{"queue":"q\"x","transactionId":"t1"},{"queue":"f"}]"#,
        )
        .unwrap();
        let c = PushColumns::drawn(&items);
        let id = uuid::Uuid::new_v4();
        let pushed = Pushed { ids: vec![Some(id), Some(id), Some(id), None], verdicts: "qqdf".into() };
        let body: serde_json::Value = serde_json::from_str(&c.answer(&pushed, 1..4).unwrap().0).unwrap();
        let drawn = c.new_txids[3].clone().unwrap();
        assert_eq!(
            body,
            serde_json::json!([
                {"index": 0, "message_id": id.to_string(), "transaction_id": "t1", "queueName": "q\"x", "status": "queued"},
                {"index": 1, "message_id": id.to_string(), "transaction_id": "t1", "queueName": "q\"x", "status": "duplicate"},
                {"index": 2, "message_id": null, "transaction_id": drawn, "queueName": "f", "status": "failed",
                 "error": "Queue 'f' would exceed max capacity"},
            ])
        );
        assert!(c.answer(&pushed, 2..5).is_err(), "a range past the items is refused, not a panic");
        let short = Pushed { ids: vec![Some(id)], verdicts: "q".into() };
        assert!(c.answer(&short, 0..1).is_err(), "an answer for another batch is refused");
        let odd = Pushed { ids: vec![None; 4], verdicts: "qqqz".into() };
        assert!(c.answer(&odd, 0..4).is_err());
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
