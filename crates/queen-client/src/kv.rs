//! Typed KV state (kv.md): reads, conditional writes, counters, prefix pages.
//!
//! The types carry the wire's distinctions: an expiry is a required argument
//! ([`Expiry`]: a TTL or forever, nothing else); "no precondition" is the
//! absence of an [`Expect`] (a different method), never a value that could
//! be mistaken for "must not exist"; an absent key is `None` while a stored
//! `null` is `Some(Entry)` whose value is the JSON `null`; a counter is an
//! `i64` or an [`Error::Precision`], never a rounded number.

use std::sync::Arc;

use futures_util::stream::{self, Stream, TryStreamExt};
use queen_wire::KvOp;
use serde::{Deserialize, Serialize};
use serde_json::value::RawValue;

use crate::broker::Broker;
use crate::error::{Error, Result};
use crate::message::to_raw;

pub use queen_wire::{Expect, Expiry};

/// Why a write did not apply (the closed set of kv.md).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Reason {
    /// A live key exists (`putIfAbsent`, `expect: Absent`).
    Exists,
    /// No live key (`expect: Version`, `delete`).
    Absent,
    /// The live version differs.
    Version,
    /// `incr` would pass `min` or `max`.
    Limit,
    /// `incr` on a live value that is not an integer.
    Type,
    /// A reason this client does not know.
    Other(String),
}

impl Reason {
    pub(crate) fn parse(s: &str) -> Reason {
        match s {
            "exists" => Reason::Exists,
            "absent" => Reason::Absent,
            "version" => Reason::Version,
            "limit" => Reason::Limit,
            "type" => Reason::Type,
            other => Reason::Other(other.to_owned()),
        }
    }
}

/// A live key as a read sees it.
#[derive(Debug, Clone)]
pub struct Entry {
    /// The key.
    pub key: String,
    /// The value as raw JSON; a stored `null` is the text `null`.
    pub value: Box<RawValue>,
    /// The version (positive, monotonic across the store).
    pub version: u64,
    /// When it dies; `None` for forever.
    pub expires_at: Option<String>,
    /// The last write.
    pub updated_at: Option<String>,
}

impl Entry {
    /// Decodes the value into `T`.
    pub fn json<T: serde::de::DeserializeOwned>(&self) -> Result<T> {
        serde_json::from_str(self.value.get()).map_err(|e| Error::decode("kv value", e))
    }

    /// Whether the stored value is the JSON `null`.
    pub fn is_null(&self) -> bool {
        self.value.get().trim() == "null"
    }
}

/// The answer of `get_many`.
#[derive(Debug, Clone)]
pub struct Many {
    /// The live keys, in key byte order.
    pub rows: Vec<Entry>,
    /// The absent keys, in request order.
    pub missing: Vec<String>,
    /// Keys cut by the read budget are in neither list.
    pub truncated: bool,
}

/// One keyset page of `get_prefix`.
#[derive(Debug, Clone)]
pub struct Page {
    /// The live keys under the prefix, in key byte order.
    pub rows: Vec<Entry>,
    /// Whether more keys follow.
    pub truncated: bool,
    /// The `after` of the next page (the last key) when truncated.
    pub next_after: Option<String>,
}

/// A live key as a keys-only prefix page sees it: everything but the value.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct KeyEntry {
    /// The key.
    pub key: String,
    /// The version (positive, monotonic across the store).
    pub version: u64,
    /// When it dies; `None` for forever.
    pub expires_at: Option<String>,
    /// The last write.
    pub updated_at: Option<String>,
}

/// One keyset page of `get_prefix_keys`: the keys without their values.
#[derive(Debug, Clone)]
pub struct KeyPage {
    /// The live keys under the prefix, in key byte order.
    pub rows: Vec<KeyEntry>,
    /// Whether more keys follow.
    pub truncated: bool,
    /// The `after` of the next page (the last key) when truncated.
    pub next_after: Option<String>,
}

/// A namespace as the KV browser counts it.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
pub struct NamespaceCount {
    /// The namespace.
    pub namespace: String,
    /// Its live keys.
    pub keys: u64,
    /// Its rows past their expiry that the sweeper has not deleted yet.
    pub expired: u64,
}

/// A key as the KV browser shows it: expired-but-unswept rows too.
#[derive(Debug, Clone, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ListedKey {
    /// The key.
    pub key: String,
    /// The value as raw JSON (a stored `null` is `"null"`).
    pub value: Box<RawValue>,
    /// The version.
    pub version: u64,
    /// When it dies; `None` for forever.
    pub expires_at: Option<String>,
    /// The last write.
    pub updated_at: Option<String>,
    /// Past its expiry but not swept yet: every other KV call treats it as absent.
    pub expired: bool,
}

impl ListedKey {
    /// The value decoded as `T`.
    pub fn json<T: serde::de::DeserializeOwned>(&self) -> Result<T> {
        serde_json::from_str(self.value.get()).map_err(|e| Error::decode("kv value", e))
    }
}

/// One page of the KV browser ([`Kv::list`]).
#[derive(Debug, Clone, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ListPage {
    /// The keys, in byte order.
    pub keys: Vec<ListedKey>,
    /// The cursor of the next page; `None` on the last one.
    pub next_cursor: Option<String>,
}

/// The answer of a write (`put`, `putIfAbsent`, `delete`, `check`, raw `incr`).
#[derive(Debug, Clone)]
pub struct Write {
    /// Whether it happened.
    pub applied: bool,
    /// Why not, when it did not.
    pub reason: Option<Reason>,
    /// The key.
    pub key: String,
    /// The value written, deleted, or current (the winner's); `None` when the
    /// broker sent none (an applied `check`). With `version == 0` nothing live is there.
    pub value: Option<Box<RawValue>>,
    /// The version written or current; 0 when nothing live is there.
    pub version: u64,
}

impl Write {
    /// The value a reader would see, `None` when nothing live is there.
    pub fn current(&self) -> Option<&RawValue> {
        if self.version == 0 {
            return None;
        }
        self.value.as_deref()
    }

    /// Decodes the value into `T`.
    pub fn json<T: serde::de::DeserializeOwned>(&self) -> Result<T> {
        let raw = self.value.as_deref().map(RawValue::get).unwrap_or("null");
        serde_json::from_str(raw).map_err(|e| Error::decode("kv value", e))
    }
}

/// The answer of `incr`: the counter as an `i64`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Counter {
    /// Whether the increment happened (with `max`/`min`, the admission decision).
    pub applied: bool,
    /// `Some(Reason::Limit)` when refused by a bound.
    pub reason: Option<Reason>,
    /// The new number, or the current one when refused (0 when absent).
    pub value: i64,
    /// The version (0 when nothing live is there).
    pub version: u64,
}

/// An increment: a delta and optional bounds.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Incr {
    /// Added to the counter (may be negative).
    pub delta: i64,
    /// Refuse (write nothing) if the result would be below this.
    pub min: Option<i64>,
    /// Refuse (write nothing) if the result would be above this.
    pub max: Option<i64>,
}

impl Incr {
    /// An increment by `delta` without bounds.
    pub fn by(delta: i64) -> Self {
        Incr { delta, min: None, max: None }
    }

    /// Sets the lower bound.
    pub fn min(mut self, min: i64) -> Self {
        self.min = Some(min);
        self
    }

    /// Sets the upper bound.
    pub fn max(mut self, max: i64) -> Self {
        self.max = Some(max);
        self
    }
}

impl From<i64> for Incr {
    fn from(delta: i64) -> Self {
        Incr::by(delta)
    }
}

fn number(n: i64) -> Result<Box<RawValue>> {
    RawValue::from_string(n.to_string()).map_err(|e| Error::decode("a number", e))
}

/// Builders of the wire ops, shared by [`Kv`] and the transaction rider.
pub(crate) mod ops {
    use super::*;

    pub fn get(ns: &str, key: &str) -> KvOp {
        KvOp::Get { ns: ns.into(), key: key.into() }
    }

    pub fn get_many<S: AsRef<str>>(ns: &str, keys: &[S]) -> Result<KvOp> {
        if keys.is_empty() {
            return Err(Error::Invalid("get_many needs at least one key".into()));
        }
        Ok(KvOp::GetMany { ns: ns.into(), keys: keys.iter().map(|k| k.as_ref().to_owned()).collect() })
    }

    pub fn get_prefix(
        ns: &str,
        prefix: &str,
        after: Option<&str>,
        limit: Option<u32>,
        keys_only: bool,
    ) -> Result<KvOp> {
        if prefix.is_empty() {
            return Err(Error::Invalid("get_prefix needs a non-empty prefix".into()));
        }
        Ok(KvOp::GetPrefix {
            ns: ns.into(),
            prefix: prefix.into(),
            after: after.map(str::to_owned),
            limit,
            keys_only,
        })
    }

    pub fn put<T: Serialize + ?Sized>(
        ns: &str,
        key: &str,
        value: &T,
        expiry: Expiry,
        expect: Option<Expect>,
        required: bool,
    ) -> Result<KvOp> {
        Ok(KvOp::Put { ns: ns.into(), key: key.into(), value: to_raw(value)?, expiry, expect, required })
    }

    pub fn put_if_absent<T: Serialize + ?Sized>(
        ns: &str,
        key: &str,
        value: &T,
        expiry: Expiry,
        required: bool,
    ) -> Result<KvOp> {
        Ok(KvOp::PutIfAbsent { ns: ns.into(), key: key.into(), value: to_raw(value)?, expiry, required })
    }

    pub fn delete(ns: &str, key: &str, expect: Option<Expect>, required: bool) -> KvOp {
        KvOp::Delete { ns: ns.into(), key: key.into(), expect: expect.map(Expect::wire), required }
    }

    pub fn check(ns: &str, key: &str, expect: Expect, required: bool) -> KvOp {
        KvOp::Check { ns: ns.into(), key: key.into(), expect, required }
    }

    pub fn incr(ns: &str, key: &str, by: Incr, expiry: Expiry, required: bool) -> Result<KvOp> {
        Ok(KvOp::Incr {
            ns: ns.into(),
            key: key.into(),
            delta: number(by.delta)?,
            min: by.min.map(number).transpose()?,
            max: by.max.map(number).transpose()?,
            expiry,
            required,
        })
    }
}

/// A KV result element and row as the wire has them (shared with the
/// engine's embedded answer).
pub(crate) type RawResult = queen_wire::KvResult;
type RawRow = queen_wire::KvRow;

pub(crate) fn some_raw<'de, D: serde::Deserializer<'de>>(
    d: D,
) -> std::result::Result<Option<Box<RawValue>>, D::Error> {
    Box::<RawValue>::deserialize(d).map(Some)
}

/// The SDK's typed rows from a wire row.
trait TypedRow {
    fn key_entry(self) -> KeyEntry;
    fn entry(self) -> Result<Entry>;
}

impl TypedRow for RawRow {
    fn key_entry(self) -> KeyEntry {
        KeyEntry {
            key: self.key,
            version: self.version,
            expires_at: self.expires_at,
            updated_at: self.updated_at,
        }
    }

    fn entry(self) -> Result<Entry> {
        let value = match self.value {
            Some(v) => v,
            None => return Err(Error::Decode(format!("row {} has no value", self.key))),
        };
        Ok(Entry {
            key: self.key,
            value,
            version: self.version,
            expires_at: self.expires_at,
            updated_at: self.updated_at,
        })
    }
}

/// The SDK's typed results from a wire result element.
pub(crate) trait TypedResult: Sized {
    fn get(self) -> Result<Option<Entry>>;
    fn many(self) -> Result<Many>;
    fn page(self) -> Result<Page>;
    fn key_page(self) -> KeyPage;
    fn write(self) -> Write;
    fn typed(self) -> Result<KvResult>;
}

impl TypedResult for RawResult {
    fn get(self) -> Result<Option<Entry>> {
        if self.found != Some(true) {
            return Ok(None);
        }
        let key = self.key.unwrap_or_default();
        let value =
            self.value.ok_or_else(|| Error::Decode(format!("get of {key} found a row without value")))?;
        Ok(Some(Entry {
            key,
            value,
            version: self.version.unwrap_or(0),
            expires_at: self.expires_at,
            updated_at: self.updated_at,
        }))
    }

    fn many(self) -> Result<Many> {
        Ok(Many {
            rows: self.rows.unwrap_or_default().into_iter().map(RawRow::entry).collect::<Result<_>>()?,
            missing: self.missing.unwrap_or_default(),
            truncated: self.truncated.unwrap_or(false),
        })
    }

    fn page(self) -> Result<Page> {
        Ok(Page {
            rows: self.rows.unwrap_or_default().into_iter().map(RawRow::entry).collect::<Result<_>>()?,
            truncated: self.truncated.unwrap_or(false),
            next_after: self.next_after,
        })
    }

    fn key_page(self) -> KeyPage {
        KeyPage {
            rows: self.rows.unwrap_or_default().into_iter().map(RawRow::key_entry).collect(),
            truncated: self.truncated.unwrap_or(false),
            next_after: self.next_after,
        }
    }

    fn write(self) -> Write {
        Write {
            applied: self.applied.unwrap_or(false),
            reason: self.reason.as_deref().map(Reason::parse),
            key: self.key.unwrap_or_default(),
            value: self.value,
            version: self.version.unwrap_or(0),
        }
    }

    /// The typed result of whichever op this answers.
    fn typed(self) -> Result<KvResult> {
        Ok(match self.op.as_str() {
            "get" => KvResult::Get(self.get()?),
            "getMany" => KvResult::Many(self.many()?),
            "getPrefix" => KvResult::Page(self.page()?),
            _ => KvResult::Write(self.write()),
        })
    }
}

/// A KV result of any op (used for transaction results).
#[derive(Debug, Clone)]
pub enum KvResult {
    /// A `get`: `None` when absent.
    Get(Option<Entry>),
    /// A `getMany`.
    Many(Many),
    /// A `getPrefix` page.
    Page(Page),
    /// A keys-only `getPrefix` page (only from a [`KvBatch`]).
    Keys(KeyPage),
    /// A write or `check`.
    Write(Write),
}

/// Reads a raw JSON integer as `i64`, or says why it cannot.
pub fn parse_i64(raw: &RawValue) -> Result<i64> {
    let text = raw.get().trim();
    if let Ok(n) = text.parse::<i64>() {
        return Ok(n);
    }
    let digits = text.strip_prefix('-').unwrap_or(text);
    if !digits.is_empty() && digits.bytes().all(|b| b.is_ascii_digit()) {
        return Err(Error::Precision { raw: text.to_owned() });
    }
    Err(Error::Decode(format!("expected an integer, got {text}")))
}

impl Write {
    /// The counter of an `incr` answer.
    pub fn counter(&self) -> Result<Counter> {
        if self.reason == Some(Reason::Type) {
            let raw = self.value.as_deref().map(RawValue::get).unwrap_or("null").to_owned();
            return Err(Error::NotACounter { key: self.key.clone(), raw });
        }
        let value = match self.value.as_deref() {
            Some(raw) => parse_i64(raw)?,
            None => 0,
        };
        Ok(Counter { applied: self.applied, reason: self.reason.clone(), value, version: self.version })
    }
}

/// The KV store of a broker.
pub struct Kv<B> {
    broker: Arc<B>,
}

impl<B> Clone for Kv<B> {
    fn clone(&self) -> Self {
        Kv { broker: self.broker.clone() }
    }
}

/// What a call came to: one result per op, or a lost `required` precondition.
enum Ran {
    Results(Vec<RawResult>),
    Lost(BatchOutcome),
}

impl<B: Broker> Kv<B> {
    pub(crate) fn new(broker: Arc<B>) -> Self {
        Kv { broker }
    }

    /// Sends `ops` as one call (one PostgreSQL transaction), index-aligned.
    async fn call(&self, ops: &[KvOp]) -> Result<Ran> {
        let body = format!("{{\"operations\":{}}}", queen_wire::ops_to_wire(ops));
        let json = self.broker.kv(&body).await?;
        let answer: queen_wire::KvAnswer = json.decode().map_err(|e| Error::decode("kv answer", e))?;
        if let Some(lost) = answer.precondition_lost() {
            return Ok(Ran::Lost(BatchOutcome::PreconditionLost {
                failed_index: lost.failed_index,
                reason: Reason::parse(&lost.kv_reason),
                key: lost.key,
                value: lost.value.filter(|_| lost.version > 0),
                version: lost.version,
            }));
        }
        match answer.results {
            Some(results) if results.len() == ops.len() => Ok(Ran::Results(results)),
            Some(results) => {
                Err(Error::Decode(format!("kv answered {} results for {} ops", results.len(), ops.len())))
            }
            None => Err(Error::Decode(format!("kv answered no results (reason {:?})", answer.reason))),
        }
    }

    /// Runs ops none of which is `required`: a lost precondition cannot be the answer.
    async fn run(&self, ops: &[KvOp]) -> Result<Vec<RawResult>> {
        match self.call(ops).await? {
            Ran::Results(results) => Ok(results),
            Ran::Lost(_) => Err(Error::Decode("kv answered a lost precondition to ops not required".into())),
        }
    }

    async fn one(&self, op: KvOp) -> Result<RawResult> {
        self.run(std::slice::from_ref(&op))
            .await?
            .into_iter()
            .next()
            .ok_or_else(|| Error::Decode("kv answered no result".into()))
    }

    /// A batch: several ops sent as one call, run in one PostgreSQL
    /// transaction and answered index-aligned (see [`KvBatch`]).
    ///
    /// Why: one round trip instead of one per key, and one snapshot and one
    /// commit for all of them, so a change that spans keys (move a value,
    /// bump a counter and record why, read several prefixes at once) is
    /// all-or-nothing once its guards are [`KvBatch::required`].
    pub fn batch(&self) -> KvBatch<B> {
        KvBatch { kv: self.clone(), ops: Vec::new(), required: false, error: None }
    }

    /// Reads one key: `None` when absent (a stored `null` is `Some`).
    pub async fn get(&self, ns: &str, key: &str) -> Result<Option<Entry>> {
        self.one(ops::get(ns, key)).await?.get()
    }

    /// Reads many keys of one namespace: rows and missing keys.
    pub async fn get_many<S: AsRef<str>>(&self, ns: &str, keys: &[S]) -> Result<Many> {
        self.one(ops::get_many(ns, keys)?).await?.many()
    }

    /// One page of the live keys under `prefix`, strictly after `after`.
    ///
    /// `limit` defaults to 100 on the broker and is clamped into 1..=1000.
    pub async fn get_prefix(
        &self,
        ns: &str,
        prefix: &str,
        after: Option<&str>,
        limit: Option<u32>,
    ) -> Result<Page> {
        self.one(ops::get_prefix(ns, prefix, after, limit, false)?).await?.page()
    }

    /// One page of the live keys under `prefix`, strictly after `after`,
    /// without their values (`keysOnly: true`).
    ///
    /// Why: to list, count or walk keys (find the members of a set, pick
    /// keys to delete) without moving the values over the wire. The page's
    /// byte budget then counts key bytes instead of values, so a page of
    /// large values still holds up to `limit` keys. Each page is its own
    /// snapshot, as with [`Kv::get_prefix`]; `limit` defaults to 100 and is
    /// clamped into 1..=1000 by the broker.
    pub async fn get_prefix_keys(
        &self,
        ns: &str,
        prefix: &str,
        after: Option<&str>,
        limit: Option<u32>,
    ) -> Result<KeyPage> {
        Ok(self.one(ops::get_prefix(ns, prefix, after, limit, true)?).await?.key_page())
    }

    /// Every namespace with its live key count and its expired rows not yet
    /// swept (the KV browser; a read-only token may call it).
    pub async fn namespaces(&self) -> Result<Vec<NamespaceCount>> {
        #[derive(Deserialize)]
        struct Answer {
            namespaces: Vec<NamespaceCount>,
        }
        let json = self.broker.kv_namespaces().await?;
        Ok(json.decode::<Answer>().map_err(|e| Error::decode("kv namespaces answer", e))?.namespaces)
    }

    /// One page of the KV browser: the keys of `ns` under `prefix` (empty:
    /// all) strictly after `cursor`, values included, expired rows not yet
    /// swept labelled `expired`. `limit` defaults to 100 and is clamped to
    /// 1000 by the broker.
    ///
    /// Why beside [`Kv::get_prefix`]: an operator's view, which shows what
    /// the table holds (expired rows too) and takes an empty prefix.
    pub async fn list(
        &self,
        ns: &str,
        prefix: &str,
        cursor: Option<&str>,
        limit: Option<u32>,
    ) -> Result<ListPage> {
        let body = serde_json::json!({"namespace": ns, "prefix": prefix, "cursor": cursor, "limit": limit});
        let json = self.broker.kv_list(&body.to_string()).await?;
        json.decode::<ListPage>().map_err(|e| Error::decode("kv list answer", e))
    }

    /// A walker over every page under `prefix`, following `nextAfter`.
    pub fn pages(&self, ns: &str, prefix: &str) -> Pages<B> {
        Pages {
            kv: self.clone(),
            ns: ns.into(),
            prefix: prefix.into(),
            after: None,
            limit: None,
            done: false,
        }
    }

    /// Every live key under `prefix` as a stream, page by page (each page its own snapshot).
    pub fn list_all(&self, ns: &str, prefix: &str) -> impl Stream<Item = Result<Entry>> + Send {
        self.pages(ns, prefix).into_stream()
    }

    /// Writes `value` unconditionally, with its own expiry (never inherited).
    pub async fn put<T: Serialize + ?Sized>(
        &self,
        ns: &str,
        key: &str,
        value: &T,
        expiry: Expiry,
    ) -> Result<Write> {
        Ok(self.one(ops::put(ns, key, value, expiry, None, false)?).await?.write())
    }

    /// Writes `value` only if `expect` holds; answers the current state when it does not.
    pub async fn put_expect<T: Serialize + ?Sized>(
        &self,
        ns: &str,
        key: &str,
        value: &T,
        expiry: Expiry,
        expect: Expect,
    ) -> Result<Write> {
        Ok(self.one(ops::put(ns, key, value, expiry, Some(expect), false)?).await?.write())
    }

    /// Writes `value` only if no live key exists; the loser gets the winner's value.
    pub async fn put_if_absent<T: Serialize + ?Sized>(
        &self,
        ns: &str,
        key: &str,
        value: &T,
        expiry: Expiry,
    ) -> Result<Write> {
        Ok(self.one(ops::put_if_absent(ns, key, value, expiry, false)?).await?.write())
    }

    /// Marks `key` done (value `true`) if nobody did first: `applied` is the answer.
    pub async fn once(&self, ns: &str, key: &str, expiry: Expiry) -> Result<Write> {
        self.put_if_absent(ns, key, &true, expiry).await
    }

    /// Deletes a live key.
    pub async fn delete(&self, ns: &str, key: &str) -> Result<Write> {
        Ok(self.one(ops::delete(ns, key, None, false)).await?.write())
    }

    /// Deletes a live key only if `expect` holds.
    pub async fn delete_expect(&self, ns: &str, key: &str, expect: Expect) -> Result<Write> {
        Ok(self.one(ops::delete(ns, key, Some(expect), false)).await?.write())
    }

    /// Asserts `expect` without writing.
    pub async fn check(&self, ns: &str, key: &str, expect: Expect) -> Result<Write> {
        Ok(self.one(ops::check(ns, key, expect, false)).await?.write())
    }

    /// Adds to a counter; the expiry applies only when the key is created.
    ///
    /// A value past `i64` is [`Error::Precision`] (see [`Kv::incr_raw`]):
    /// the broker applied the increment, only the answer does not fit. A
    /// live value that is not an integer is [`Error::NotACounter`] (nothing written).
    pub async fn incr(&self, ns: &str, key: &str, by: impl Into<Incr>, expiry: Expiry) -> Result<Counter> {
        self.incr_raw(ns, key, by, expiry).await?.counter()
    }

    /// Adds to a counter and answers the raw write: `value` holds every digit.
    pub async fn incr_raw(&self, ns: &str, key: &str, by: impl Into<Incr>, expiry: Expiry) -> Result<Write> {
        Ok(self.one(ops::incr(ns, key, by.into(), expiry, false)?).await?.write())
    }
}

/// What a [`KvBatch`] came to. A lost race is a value, never an `Err`.
#[derive(Debug, Clone)]
pub enum BatchOutcome {
    /// The call ran: one result per op, in the order the ops were added
    /// (`results[i]` answers op `i`). A write that did not apply and was not
    /// `required` is here with `applied: false`; the rest committed.
    Done(Vec<KvResult>),
    /// A [`KvBatch::required`] op lost its precondition: nothing in the
    /// call was written.
    PreconditionLost {
        /// The index of the op that lost, in the order the ops were added.
        failed_index: usize,
        /// Why it lost (`Exists` for a `once` that found the marker).
        reason: Reason,
        /// The key.
        key: Option<String>,
        /// The current value (`None` when nothing live is there).
        value: Option<Box<RawValue>>,
        /// The current version (0 when absent).
        version: u64,
    },
}

impl BatchOutcome {
    /// Whether the call ran (no `required` op lost).
    pub fn is_done(&self) -> bool {
        matches!(self, BatchOutcome::Done(_))
    }
}

/// Several KV ops sent as one `POST /api/v1/kv` call. Nothing is sent until
/// [`KvBatch::run`].
///
/// The broker's rules for a call hold (kv.md): the ops run in one
/// PostgreSQL transaction; writes are applied in `(ns, key)` byte order, so
/// two batches never deadlock on each other; `get_many` and `get_prefix` run
/// after the batch's writes and see them, while a `get` sees the state
/// before the batch's write of its key; at most 256 ops and one write per
/// key (the broker refuses more, as [`Error::Status`] with its reason).
/// Unlike a [`crate::Tx`], a batch may hold prefix reads, but no push or ack.
#[must_use = "a batch sends nothing until `run`"]
pub struct KvBatch<B> {
    kv: Kv<B>,
    ops: Vec<KvOp>,
    required: bool,
    error: Option<Error>,
}

impl<B: Broker> KvBatch<B> {
    fn add(mut self, op: Result<KvOp>) -> Self {
        self.required = false;
        match op {
            Ok(op) => self.ops.push(op),
            Err(e) => {
                self.error.get_or_insert(e);
            }
        }
        self
    }

    /// Makes the next op `required`: if its precondition is lost, nothing in
    /// the batch is written and the answer is [`BatchOutcome::PreconditionLost`].
    pub fn required(mut self) -> Self {
        self.required = true;
        self
    }

    /// Ops added so far.
    pub fn len(&self) -> usize {
        self.ops.len()
    }

    /// Whether no op was added.
    pub fn is_empty(&self) -> bool {
        self.ops.is_empty()
    }

    /// Reads one key (the state before this batch's write of it): [`KvResult::Get`].
    pub fn get(self, ns: &str, key: &str) -> Self {
        self.add(Ok(ops::get(ns, key)))
    }

    /// Reads many keys (after this batch's writes): [`KvResult::Many`].
    pub fn get_many<S: AsRef<str>>(self, ns: &str, keys: &[S]) -> Self {
        let op = ops::get_many(ns, keys);
        self.add(op)
    }

    /// One page under `prefix` (after this batch's writes): [`KvResult::Page`].
    pub fn get_prefix(self, ns: &str, prefix: &str, after: Option<&str>, limit: Option<u32>) -> Self {
        let op = ops::get_prefix(ns, prefix, after, limit, false);
        self.add(op)
    }

    /// One page of keys without values under `prefix`: [`KvResult::Keys`].
    pub fn get_prefix_keys(self, ns: &str, prefix: &str, after: Option<&str>, limit: Option<u32>) -> Self {
        let op = ops::get_prefix(ns, prefix, after, limit, true);
        self.add(op)
    }

    /// Writes unconditionally: [`KvResult::Write`].
    pub fn put<T: Serialize + ?Sized>(self, ns: &str, key: &str, value: &T, expiry: Expiry) -> Self {
        let op = ops::put(ns, key, value, expiry, None, self.required);
        self.add(op)
    }

    /// Writes if `expect` holds.
    pub fn put_expect<T: Serialize + ?Sized>(
        self,
        ns: &str,
        key: &str,
        value: &T,
        expiry: Expiry,
        expect: Expect,
    ) -> Self {
        let op = ops::put(ns, key, value, expiry, Some(expect), self.required);
        self.add(op)
    }

    /// Writes if no live key exists.
    pub fn put_if_absent<T: Serialize + ?Sized>(
        self,
        ns: &str,
        key: &str,
        value: &T,
        expiry: Expiry,
    ) -> Self {
        let op = ops::put_if_absent(ns, key, value, expiry, self.required);
        self.add(op)
    }

    /// Deletes a live key.
    pub fn delete(self, ns: &str, key: &str) -> Self {
        let op = ops::delete(ns, key, None, self.required);
        self.add(Ok(op))
    }

    /// Deletes a live key if `expect` holds.
    pub fn delete_expect(self, ns: &str, key: &str, expect: Expect) -> Self {
        let op = ops::delete(ns, key, Some(expect), self.required);
        self.add(Ok(op))
    }

    /// Asserts `expect` without writing (with [`KvBatch::required`], a guard on the batch).
    pub fn check(self, ns: &str, key: &str, expect: Expect) -> Self {
        let op = ops::check(ns, key, expect, self.required);
        self.add(Ok(op))
    }

    /// Adds to a counter; the expiry applies only when the key is created.
    /// Read the answer with [`Write::counter`].
    pub fn incr(self, ns: &str, key: &str, by: impl Into<Incr>, expiry: Expiry) -> Self {
        let op = ops::incr(ns, key, by.into(), expiry, self.required);
        self.add(op)
    }

    /// Sends the batch. An argument refused while building (an empty prefix,
    /// `get_many` without keys, a value that does not serialise) is the
    /// `Err` of the first such op, and nothing is sent.
    pub async fn run(self) -> Result<BatchOutcome> {
        if let Some(e) = self.error {
            return Err(e);
        }
        if self.ops.is_empty() {
            // What the broker answers to an empty call, without the round trip.
            return Ok(BatchOutcome::Done(Vec::new()));
        }
        let raw = match self.kv.call(&self.ops).await? {
            Ran::Results(raw) => raw,
            Ran::Lost(lost) => return Ok(lost),
        };
        let mut results = Vec::with_capacity(raw.len());
        for (i, (op, r)) in self.ops.iter().zip(raw).enumerate() {
            if r.index != i || r.op != op.name() {
                return Err(Error::Decode(format!(
                    "kv result {i} is for op {} {:?}, not {}",
                    r.index,
                    r.op,
                    op.name()
                )));
            }
            results.push(match op {
                KvOp::GetPrefix { keys_only: true, .. } => KvResult::Keys(r.key_page()),
                _ => r.typed()?,
            });
        }
        Ok(BatchOutcome::Done(results))
    }
}

/// Walks the pages under a prefix through `nextAfter`.
pub struct Pages<B> {
    kv: Kv<B>,
    ns: String,
    prefix: String,
    after: Option<String>,
    limit: Option<u32>,
    done: bool,
}

impl<B: Broker> Pages<B> {
    /// Sets the page size (clamped by the broker into 1..=1000).
    pub fn limit(mut self, limit: u32) -> Self {
        self.limit = Some(limit);
        self
    }

    /// Starts strictly after `key` (an exclusive keyset cursor).
    pub fn after(mut self, key: impl Into<String>) -> Self {
        self.after = Some(key.into());
        self
    }

    /// The next page, or `None` when the walk is over.
    pub async fn next_page(&mut self) -> Result<Option<Page>> {
        if self.done {
            return Ok(None);
        }
        let page = self.kv.get_prefix(&self.ns, &self.prefix, self.after.as_deref(), self.limit).await?;
        match (&page.next_after, page.truncated) {
            (Some(next), true) => self.after = Some(next.clone()),
            _ => self.done = true,
        }
        Ok(Some(page))
    }

    /// Every entry of every remaining page.
    pub async fn collect_all(mut self) -> Result<Vec<Entry>> {
        let mut all = Vec::new();
        while let Some(page) = self.next_page().await? {
            all.extend(page.rows);
        }
        Ok(all)
    }

    /// The remaining entries as a stream.
    pub fn into_stream(self) -> impl Stream<Item = Result<Entry>> + Send {
        stream::try_unfold(self, |mut pages| async move {
            let next = pages.next_page().await?;
            Ok::<_, Error>(
                next.map(|page| (stream::iter(page.rows.into_iter().map(Ok::<Entry, Error>)), pages)),
            )
        })
        .try_flatten()
    }
}
