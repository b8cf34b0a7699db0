//! KV operations as the wire and the embedded API carry them.

use serde_json::value::RawValue;

/// Every write carries exactly one expiry; there is no default.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Expiry {
    /// Dies this many seconds after the write (must be > 0).
    Ttl(u64),
    /// Lives until deleted.
    Forever,
}

impl Expiry {
    /// The `(ttl seconds, forever)` pair every KV statement takes.
    pub fn columns(self) -> (Option<i64>, Option<bool>) {
        match self {
            Expiry::Ttl(s) => (Some(s as i64), None),
            Expiry::Forever => (None, Some(true)),
        }
    }
}

/// A precondition on the version of a key.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Expect {
    /// The key must not exist (live).
    Absent,
    /// The live version must be this one.
    Version(u64),
}

impl Expect {
    /// The version the wire sends: 0 for absent.
    pub fn wire(self) -> u64 {
        match self {
            Expect::Absent => 0,
            Expect::Version(v) => v,
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
