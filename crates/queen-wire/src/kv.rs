//! KV operations as the wire and the embedded API carry them.

use std::num::NonZeroU64;
use std::time::Duration;

use serde_json::value::RawValue;

/// A value a KV type refused to hold (a zero TTL, a fractional TTL, a
/// version 0 precondition): the message says which.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Invalid(pub String);

impl std::fmt::Display for Invalid {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for Invalid {}

/// How long a written key lives. Every write names one; there is no default.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Expiry {
    /// Dies this many seconds after the write (after the creation, for `incr`).
    Ttl(NonZeroU64),
    /// Lives until deleted.
    Forever,
}

impl Expiry {
    /// A TTL of `seconds`; zero is refused.
    pub fn secs(seconds: u64) -> Result<Self, Invalid> {
        NonZeroU64::new(seconds)
            .map(Expiry::Ttl)
            .ok_or_else(|| Invalid("a TTL must be at least 1 second".into()))
    }

    /// A TTL of a whole number of seconds; zero or a fraction is refused.
    pub fn ttl(d: Duration) -> Result<Self, Invalid> {
        if d.subsec_nanos() != 0 {
            return Err(Invalid(format!("a TTL is whole seconds, not {d:?}")));
        }
        Expiry::secs(d.as_secs())
    }

    /// The `(ttl seconds, forever)` pair every KV statement takes.
    pub fn columns(self) -> (Option<i64>, Option<bool>) {
        match self {
            Expiry::Ttl(s) => (Some(i64::try_from(s.get()).unwrap_or(i64::MAX)), None),
            Expiry::Forever => (None, Some(true)),
        }
    }
}

/// A precondition on a key's live version.
///
/// A write without one is a different method or a `None` (`put` versus
/// `put_expect`), so "no precondition" and "must not exist" cannot be
/// confused; a version is never 0.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Expect {
    /// The key must not exist (wire `expect: 0`).
    Absent,
    /// The live version must be this one (a pure update: creates nothing).
    Version(NonZeroU64),
}

impl Expect {
    /// The precondition the wire's `expect: n` means: 0 is absent.
    pub fn from_wire(version: u64) -> Self {
        NonZeroU64::new(version).map_or(Expect::Absent, Expect::Version)
    }

    /// The version the wire sends: 0 for absent.
    pub fn wire(self) -> u64 {
        match self {
            Expect::Absent => 0,
            Expect::Version(v) => v.get(),
        }
    }
}

/// One KV operation. `value`, `delta`, `min` and `max` are raw JSON text so
/// that numbers keep every digit.
// Field meanings are the wire's (kv.md): `ns` namespace, `key` key,
// `expect` version precondition, `required` aborts the whole call when the
// precondition is lost; documenting each field again would add nothing.
#[allow(missing_docs)]
#[derive(Debug, Clone)]
pub enum KvOp {
    /// Read one key.
    Get { ns: String, key: String },
    /// Read many keys of one namespace.
    GetMany { ns: String, keys: Vec<String> },
    /// One keyset page of the keys under a prefix (not allowed in transactions).
    GetPrefix { ns: String, prefix: String, after: Option<String>, limit: Option<u32>, keys_only: bool },
    /// Write a value; `expect: None` is an unconditional upsert.
    Put {
        ns: String,
        key: String,
        value: Box<RawValue>,
        expiry: Expiry,
        expect: Option<Expect>,
        required: bool,
    },
    /// Write only if no live key exists.
    PutIfAbsent { ns: String, key: String, value: Box<RawValue>, expiry: Expiry, required: bool },
    /// Delete a live key.
    Delete { ns: String, key: String, expect: Option<u64>, required: bool },
    /// Assert a version without writing.
    Check { ns: String, key: String, expect: Expect, required: bool },
    /// Add an integer; the expiry applies only when the row is created.
    Incr {
        ns: String,
        key: String,
        delta: Box<RawValue>,
        min: Option<Box<RawValue>>,
        max: Option<Box<RawValue>>,
        expiry: Expiry,
        required: bool,
    },
}

fn text(s: &str) -> String {
    // Serialising a str cannot fail.
    serde_json::to_string(s).unwrap_or_default()
}

impl KvOp {
    /// The op's wire name.
    pub fn name(&self) -> &'static str {
        match self {
            KvOp::Get { .. } => "get",
            KvOp::GetMany { .. } => "getMany",
            KvOp::GetPrefix { .. } => "getPrefix",
            KvOp::Put { .. } => "put",
            KvOp::PutIfAbsent { .. } => "putIfAbsent",
            KvOp::Delete { .. } => "delete",
            KvOp::Check { .. } => "check",
            KvOp::Incr { .. } => "incr",
        }
    }

    /// The key a write (or check) locks; `None` for reads.
    pub fn written_key(&self) -> Option<(&str, &str)> {
        match self {
            KvOp::Put { ns, key, .. }
            | KvOp::PutIfAbsent { ns, key, .. }
            | KvOp::Delete { ns, key, .. }
            | KvOp::Check { ns, key, .. }
            | KvOp::Incr { ns, key, .. } => Some((ns, key)),
            _ => None,
        }
    }

    /// Whether a lost precondition aborts the call.
    pub fn is_required(&self) -> bool {
        match self {
            KvOp::Put { required, .. }
            | KvOp::PutIfAbsent { required, .. }
            | KvOp::Delete { required, .. }
            | KvOp::Check { required, .. }
            | KvOp::Incr { required, .. } => *required,
            _ => false,
        }
    }

    /// Bytes of the value a write carries (what a batch is bounded by).
    pub fn value_bytes(&self) -> usize {
        match self {
            KvOp::Put { value, key, .. } | KvOp::PutIfAbsent { value, key, .. } => {
                value.get().len() + key.len()
            }
            KvOp::Get { key, .. }
            | KvOp::Delete { key, .. }
            | KvOp::Check { key, .. }
            | KvOp::Incr { key, .. } => key.len(),
            KvOp::GetMany { keys, .. } => keys.iter().map(String::len).sum(),
            KvOp::GetPrefix { prefix, .. } => prefix.len(),
        }
    }

    /// The wire form of the op.
    pub fn to_wire(&self) -> String {
        let mut f: Vec<(&str, String)> = Vec::with_capacity(8);
        let expiry = |f: &mut Vec<(&str, String)>, e: &Expiry| match e {
            Expiry::Ttl(s) => f.push(("ttlSeconds", s.to_string())),
            Expiry::Forever => f.push(("forever", "true".into())),
        };
        match self {
            KvOp::Get { ns, key } => f.extend([("op", text("get")), ("ns", text(ns)), ("key", text(key))]),
            KvOp::GetMany { ns, keys } => {
                let keys = serde_json::to_string(keys).unwrap_or_default();
                f.extend([("op", text("getMany")), ("ns", text(ns)), ("keys", keys)]);
            }
            KvOp::GetPrefix { ns, prefix, after, limit, keys_only } => {
                f.extend([("op", text("getPrefix")), ("ns", text(ns)), ("prefix", text(prefix))]);
                if let Some(a) = after {
                    f.push(("after", text(a)));
                }
                if let Some(l) = limit {
                    f.push(("limit", l.to_string()));
                }
                if *keys_only {
                    f.push(("keysOnly", "true".into()));
                }
            }
            KvOp::Put { ns, key, value, expiry: e, expect, required } => {
                f.extend([
                    ("op", text("put")),
                    ("ns", text(ns)),
                    ("key", text(key)),
                    ("value", value.get().into()),
                ]);
                expiry(&mut f, e);
                if let Some(x) = expect {
                    f.push(("expect", x.wire().to_string()));
                }
                if *required {
                    f.push(("required", "true".into()));
                }
            }
            KvOp::PutIfAbsent { ns, key, value, expiry: e, required } => {
                f.extend([
                    ("op", text("putIfAbsent")),
                    ("ns", text(ns)),
                    ("key", text(key)),
                    ("value", value.get().into()),
                ]);
                expiry(&mut f, e);
                if *required {
                    f.push(("required", "true".into()));
                }
            }
            KvOp::Delete { ns, key, expect, required } => {
                f.extend([("op", text("delete")), ("ns", text(ns)), ("key", text(key))]);
                if let Some(x) = expect {
                    f.push(("expect", x.to_string()));
                }
                if *required {
                    f.push(("required", "true".into()));
                }
            }
            KvOp::Check { ns, key, expect, required } => {
                f.extend([
                    ("op", text("check")),
                    ("ns", text(ns)),
                    ("key", text(key)),
                    ("expect", expect.wire().to_string()),
                ]);
                if *required {
                    f.push(("required", "true".into()));
                }
            }
            KvOp::Incr { ns, key, delta, min, max, expiry: e, required } => {
                f.extend([
                    ("op", text("incr")),
                    ("ns", text(ns)),
                    ("key", text(key)),
                    ("delta", delta.get().into()),
                ]);
                if let Some(m) = min {
                    f.push(("min", m.get().into()));
                }
                if let Some(m) = max {
                    f.push(("max", m.get().into()));
                }
                expiry(&mut f, e);
                if *required {
                    f.push(("required", "true".into()));
                }
            }
        }
        let body: Vec<String> = f.iter().map(|(k, v)| format!("{}:{v}", text(k))).collect();
        format!("{{{}}}", body.join(","))
    }
}

/// The wire array of several ops.
pub fn ops_to_wire(ops: &[KvOp]) -> String {
    let items: Vec<String> = ops.iter().map(KvOp::to_wire).collect();
    format!("[{}]", items.join(","))
}

/// Reads a present JSON value (`null` included) as `Some`, so that a stored
/// `null` and an absent field stay apart.
fn some_raw<'de, D: serde::Deserializer<'de>>(d: D) -> Result<Option<Box<RawValue>>, D::Error> {
    <Box<RawValue> as serde::Deserialize>::deserialize(d).map(Some)
}

/// One result element of a KV call, as the wire has it: the engine writes
/// every KV element with this type (its `Serialize`), and the engine's
/// embedded answer and the SDK's HTTP answer are read with it. SQL answers
/// the same fields without `index`, `op` and `type`, which the engine sets.
/// Which fields are set depends on the op: reads set `found` (get) or
/// `rows`; writes set `applied`.
#[derive(Debug, Default, serde::Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct KvResult {
    /// Position in the call (flat index inside a transaction).
    #[serde(default)]
    pub index: usize,
    /// The op name sent.
    #[serde(default)]
    pub op: String,
    /// `kv` inside a transaction's results, absent in a KV call's.
    #[serde(default, rename = "type")]
    pub kind: Option<String>,
    /// The key, for single-key ops.
    #[serde(default)]
    pub key: Option<String>,
    /// get: whether a live key exists. Distinct from `value`, since null is a legal value.
    #[serde(default)]
    pub found: Option<bool>,
    /// Writes: whether the write happened.
    #[serde(default)]
    pub applied: Option<bool>,
    /// Why a write did not apply: exists, absent, version, limit or type.
    #[serde(default)]
    pub reason: Option<String>,
    /// The value (written, current, or read), as raw JSON; `Some("null")` is a stored null.
    #[serde(default, deserialize_with = "some_raw")]
    pub value: Option<Box<RawValue>>,
    /// The version (0 when nothing live is there).
    #[serde(default)]
    pub version: Option<u64>,
    /// Expiry of a read row (`None` for forever).
    #[serde(default)]
    pub expires_at: Option<String>,
    /// Last write of a read row.
    #[serde(default)]
    pub updated_at: Option<String>,
    /// getMany / getPrefix rows.
    #[serde(default)]
    pub rows: Option<Vec<KvRow>>,
    /// getMany: absent keys in request order.
    #[serde(default)]
    pub missing: Option<Vec<String>>,
    /// Multi-key reads: more rows exist than were returned.
    #[serde(default)]
    pub truncated: Option<bool>,
    /// getPrefix: the `after` of the next page.
    #[serde(default)]
    pub next_after: Option<String>,
}

impl serde::Serialize for KvResult {
    /// The fields the op answers, and only those. A row's `expiresAt` is
    /// written even when null (forever), as is a page's `nextAfter` (null on
    /// the last page): presence follows the op, not the value.
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        use serde::ser::SerializeMap;
        let mut m = s.serialize_map(None)?;
        m.serialize_entry("index", &self.index)?;
        m.serialize_entry("op", &self.op)?;
        if let Some(kind) = &self.kind {
            m.serialize_entry("type", kind)?;
        }
        if let Some(key) = &self.key {
            m.serialize_entry("key", key)?;
        }
        if let Some(found) = self.found {
            m.serialize_entry("found", &found)?;
        }
        if let Some(applied) = self.applied {
            m.serialize_entry("applied", &applied)?;
        }
        if let Some(reason) = &self.reason {
            m.serialize_entry("reason", reason)?;
        }
        if let Some(value) = &self.value {
            m.serialize_entry("value", value)?;
        }
        if let Some(version) = self.version {
            m.serialize_entry("version", &version)?;
        }
        if self.found == Some(true) {
            m.serialize_entry("expiresAt", &self.expires_at)?;
            m.serialize_entry("updatedAt", &self.updated_at)?;
        }
        if let Some(rows) = &self.rows {
            m.serialize_entry("rows", rows)?;
        }
        if let Some(missing) = &self.missing {
            m.serialize_entry("missing", missing)?;
        }
        if let Some(truncated) = self.truncated {
            m.serialize_entry("truncated", &truncated)?;
        }
        if self.op == "getPrefix" {
            m.serialize_entry("nextAfter", &self.next_after)?;
        }
        m.end()
    }
}

/// A row of a multi-key read.
#[derive(Debug, serde::Deserialize, serde::Serialize)]
#[serde(rename_all = "camelCase")]
pub struct KvRow {
    /// The key.
    pub key: String,
    /// Absent when the page was `keysOnly`.
    #[serde(default, deserialize_with = "some_raw", skip_serializing_if = "Option::is_none")]
    pub value: Option<Box<RawValue>>,
    /// The version.
    pub version: u64,
    /// `None` for forever (written as null).
    #[serde(default)]
    pub expires_at: Option<String>,
    /// Last write.
    #[serde(default)]
    pub updated_at: Option<String>,
}

/// `{"results": [element]}`: the body of a KV call that ran.
#[derive(Debug, serde::Serialize)]
pub struct KvResults<'a> {
    /// One element per op, index-aligned.
    pub results: &'a [KvResult],
}

/// The body of a KV call: its results, or the refusal of a lost `required`
/// precondition (`reason: "kv_precondition"`, nothing written).
#[derive(Debug, serde::Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct KvAnswer {
    /// One result per op, index-aligned.
    #[serde(default)]
    pub results: Option<Vec<KvResult>>,
    /// `kv_precondition` when a required op lost.
    #[serde(default)]
    pub reason: Option<String>,
    /// Index of the op that lost.
    #[serde(default)]
    pub failed_index: Option<usize>,
    /// exists, absent, version, limit or type.
    #[serde(default)]
    pub kv_reason: Option<String>,
    /// The key of the op that lost.
    #[serde(default)]
    pub key: Option<String>,
    /// The winner's value.
    #[serde(default, deserialize_with = "some_raw")]
    pub value: Option<Box<RawValue>>,
    /// The winner's version (0 when absent).
    #[serde(default)]
    pub version: Option<u64>,
}

impl KvAnswer {
    /// The lost precondition this body reports, if it is one.
    pub fn precondition_lost(&self) -> Option<PreconditionLost> {
        (self.results.is_none() && self.reason.as_deref() == Some("kv_precondition")).then(|| {
            PreconditionLost {
                failed_index: self.failed_index.unwrap_or(0),
                kv_reason: self.kv_reason.clone().unwrap_or_default(),
                key: self.key.clone(),
                version: self.version.unwrap_or(0),
                value: self.value.clone(),
            }
        })
    }
}

/// A lost `required` precondition: nothing was written. SQL reports one
/// with these fields (SQLSTATE QN201); [`PreconditionLost::kv_body`] and
/// [`PreconditionLost::transaction_body`] write the two answers that carry it.
#[derive(Debug, Clone, serde::Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct PreconditionLost {
    /// Index of the op that lost.
    pub failed_index: usize,
    /// exists, absent, version, limit or type.
    #[serde(default)]
    pub kv_reason: String,
    /// The key.
    #[serde(default)]
    pub key: Option<String>,
    /// The winner's version (0 when absent).
    #[serde(default)]
    pub version: u64,
    /// The winner's value.
    #[serde(default, deserialize_with = "some_raw")]
    pub value: Option<Box<RawValue>>,
}

/// The refusal fields every lost-precondition body carries.
#[derive(serde::Serialize)]
#[serde(rename_all = "camelCase")]
struct LostFields<'a> {
    ok: bool,
    reason: &'static str,
    failed_index: usize,
    kv_reason: &'a str,
    key: &'a Option<String>,
    version: u64,
    value: &'a Option<Box<RawValue>>,
}

/// A transaction's refusal of a lost precondition: the transaction's
/// fields, then the KV call's.
#[derive(serde::Serialize)]
#[serde(rename_all = "camelCase")]
struct TransactionLost<'a> {
    transaction_id: &'a str,
    success: bool,
    error: String,
    results: [(); 0],
    #[serde(flatten)]
    lost: LostFields<'a>,
}

impl PreconditionLost {
    fn fields(&self) -> LostFields<'_> {
        LostFields {
            ok: false,
            reason: "kv_precondition",
            failed_index: self.failed_index,
            kv_reason: &self.kv_reason,
            key: &self.key,
            version: self.version,
            value: &self.value,
        }
    }

    /// The 200 body of a KV call whose `required` op lost.
    pub fn kv_body(&self) -> String {
        // Strings, numbers and raw JSON only: serialising cannot fail.
        serde_json::to_string(&self.fields()).unwrap_or_default()
    }

    /// The 200 body of a transaction that rolled back because a `required`
    /// KV op lost.
    pub fn transaction_body(&self, transaction_id: &str) -> String {
        let body = TransactionLost {
            transaction_id,
            success: false,
            error: format!(
                "kv precondition lost at index {} ({}); the transaction rolled back",
                self.failed_index, self.kv_reason
            ),
            results: [],
            lost: self.fields(),
        };
        serde_json::to_string(&body).unwrap_or_default()
    }
}
