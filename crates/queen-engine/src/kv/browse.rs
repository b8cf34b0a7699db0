//! The KV browser: every namespace with its key count, and keyset pages of
//! one namespace's keys, expired-but-unswept rows included and labelled.
//! Read-only; the request is checked here once (kv.md's error envelope),
//! SQL takes typed parameters.

use serde_json::value::RawValue;

use crate::db::Pool;
use crate::kv::decode::{has_lone_surrogate, kv_reject, valid_namespace};
use crate::kv::KvRow;
use crate::wire::{self, Kind};
use crate::EngineError;

/// Keys of a page when the request names no limit.
pub const KV_LIST_DEFAULT_LIMIT: u32 = 100;
/// The most keys of a page; a larger limit is clamped to it.
pub const KV_LIST_MAX_LIMIT: u32 = 1000;
/// Keys are at most this long, so a longer prefix or cursor matches nothing.
const MAX_KEY_BYTES: usize = 512;

/// One page request of `POST /api/v1/resources/kv/list`, checked.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct KvListRequest {
    /// The namespace browsed.
    pub namespace: String,
    /// Only keys that start with it (empty: every key).
    pub prefix: String,
    /// The page starts strictly after this key.
    pub cursor: Option<String>,
    /// Keys of the page, 1..=[`KV_LIST_MAX_LIMIT`].
    pub limit: u32,
}

/// Decodes `{namespace, prefix?, cursor?, limit?}`; every refusal is a KV
/// 400 (`kv_bad_request` with a reason).
pub fn decode_kv_list(body: &str) -> Result<KvListRequest, EngineError> {
    if wire::has_nul_escape(body) {
        return Err(kv_reject("kv_bad_key", "keys and prefixes must not contain NUL (\\u0000)"));
    }
    let bad_body =
        || kv_reject("kv_bad_body", "the body must be {\"namespace\", \"prefix\"?, \"cursor\"?, \"limit\"?}");
    let raw: &RawValue = serde_json::from_str(body).map_err(|_| bad_body())?;
    let fields = wire::fields(raw).ok_or_else(bad_body)?;
    if let Some(name) =
        fields.keys().find(|k| !matches!(k.as_str(), "namespace" | "prefix" | "cursor" | "limit"))
    {
        return Err(kv_reject("kv_bad_body", &format!("unknown field {name:?}")));
    }
    let string = |name: &str, reason: &str| -> Result<Option<String>, EngineError> {
        match fields.get(name) {
            None => Ok(None),
            Some(v) if wire::kind(v) == Kind::Null && name != "namespace" => Ok(None),
            Some(v) if wire::kind(v) == Kind::String => {
                let s = wire::string(v)
                    .map_err(|_| kv_reject(reason, &format!("{name} is not storable text")))?;
                if has_lone_surrogate(v.get()) {
                    return Err(kv_reject(reason, &format!("{name} holds a lone surrogate")));
                }
                Ok(Some(s))
            }
            Some(_) => Err(kv_reject(reason, &format!("{name} must be a string"))),
        }
    };
    let namespace = string("namespace", "kv_bad_namespace")?
        .ok_or_else(|| kv_reject("kv_bad_namespace", "namespace is required"))?;
    if !valid_namespace(&namespace) {
        return Err(kv_reject("kv_bad_namespace", "namespace must match ^[a-z0-9][a-z0-9._-]{0,63}$"));
    }
    let prefix = string("prefix", "kv_bad_prefix")?.unwrap_or_default();
    if prefix.len() > MAX_KEY_BYTES {
        return Err(kv_reject("kv_bad_prefix", &format!("prefix is longer than {MAX_KEY_BYTES} bytes")));
    }
    let cursor = string("cursor", "kv_bad_cursor")?;
    if cursor.as_ref().is_some_and(|c| c.is_empty() || c.len() > MAX_KEY_BYTES) {
        return Err(kv_reject("kv_bad_cursor", &format!("cursor must be a key: 1 to {MAX_KEY_BYTES} bytes")));
    }
    let limit = match fields.get("limit") {
        None => KV_LIST_DEFAULT_LIMIT,
        Some(v) if wire::kind(v) == Kind::Null => KV_LIST_DEFAULT_LIMIT,
        Some(v) => {
            let bad = || kv_reject("kv_bad_limit", "limit must be an integer of at least 1");
            if wire::kind(v) != Kind::Number || !v.get().bytes().all(|b| b.is_ascii_digit()) {
                return Err(bad());
            }
            // Digits only: a number too large for u64 is still a valid (clamped) limit.
            let n = v.get().parse::<u64>().unwrap_or(u64::MAX);
            if n == 0 {
                return Err(bad());
            }
            n.min(u64::from(KV_LIST_MAX_LIMIT)) as u32
        }
    };
    Ok(KvListRequest { namespace, prefix, cursor, limit })
}

/// One namespace of `GET /api/v1/resources/kv/namespaces`.
#[derive(Debug, serde::Serialize)]
pub(crate) struct NamespaceCount {
    namespace: String,
    /// Live keys.
    keys: i64,
    /// Expired rows the sweeper has not deleted yet.
    expired: i64,
}

/// `{"namespaces": [...]}`.
#[derive(Debug, serde::Serialize)]
pub(crate) struct NamespaceCounts {
    namespaces: Vec<NamespaceCount>,
}

/// Every namespace with its live and expired rows, in name order.
pub(crate) async fn namespace_counts(pool: &Pool) -> Result<NamespaceCounts, EngineError> {
    let client = pool.get().await?;
    let stmt = client
        .prepare_cached("SELECT n.namespace, n.live, n.expired FROM queen.kv_namespace_counts() n")
        .await?;
    let rows = client.query(&stmt, &[]).await?;
    let namespaces = rows
        .iter()
        .map(|r| Ok(NamespaceCount { namespace: r.try_get(0)?, keys: r.try_get(1)?, expired: r.try_get(2)? }))
        .collect::<Result<_, EngineError>>()?;
    Ok(NamespaceCounts { namespaces })
}

/// A listed key: the row as a KV get answers it, and whether it expired
/// (the sweeper has not deleted it yet).
#[derive(Debug, serde::Serialize)]
pub(crate) struct ListedKey {
    #[serde(flatten)]
    row: KvRow,
    expired: bool,
}

/// One page of `POST /api/v1/resources/kv/list`.
#[derive(Debug, serde::Serialize)]
#[serde(rename_all = "camelCase")]
pub(crate) struct KvListPage {
    namespace: String,
    keys: Vec<ListedKey>,
    /// The page's last key when more follow.
    next_cursor: Option<String>,
}

/// One keyset page of `req`'s namespace (`queen.kv_list`), at most
/// `max_bytes` of keys and values past its first row.
pub(crate) async fn list(
    pool: &Pool,
    req: &KvListRequest,
    max_bytes: i64,
) -> Result<KvListPage, EngineError> {
    let limit = i32::try_from(req.limit).unwrap_or(i32::MAX);
    let client = pool.get().await?;
    let stmt = client.prepare_cached(include_str!("../../sql/statements/kv_list.sql")).await?;
    let rows = client.query(&stmt, &[&req.namespace, &req.prefix, &req.cursor, &limit, &max_bytes]).await?;
    let more = match rows.first() {
        Some(r) => r.try_get::<_, bool>(6)?,
        None => false,
    };
    let keys = rows
        .iter()
        .map(|r| {
            let value = RawValue::from_string(r.try_get(1)?)
                .map_err(|e| EngineError::Protocol(format!("a KV value is not JSON: {e}")))?;
            let version: i64 = r.try_get(2)?;
            Ok(ListedKey {
                row: KvRow {
                    key: r.try_get(0)?,
                    value: Some(value),
                    version: u64::try_from(version).map_err(|e| EngineError::Protocol(e.to_string()))?,
                    expires_at: r.try_get(3)?,
                    updated_at: r.try_get(4)?,
                },
                expired: r.try_get(5)?,
            })
        })
        .collect::<Result<Vec<_>, EngineError>>()?;
    let next_cursor = if more { keys.last().map(|k| k.row.key.clone()) } else { None };
    Ok(KvListPage { namespace: req.namespace.clone(), keys, next_cursor })
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    fn reason(body: &str) -> String {
        match decode_kv_list(body) {
            Err(EngineError::Rejected { status: 400, body }) => {
                let v: serde_json::Value = serde_json::from_str(&body).unwrap();
                assert_eq!(v["error"], "kv_bad_request");
                v["reason"].as_str().unwrap().to_owned()
            }
            other => panic!("{body}: {other:?}"),
        }
    }

    #[test]
    fn decodes_and_clamps() {
        let r = decode_kv_list(r#"{"namespace":"ns"}"#).unwrap();
        assert_eq!(r, KvListRequest { namespace: "ns".into(), prefix: "".into(), cursor: None, limit: 100 });
        let r = decode_kv_list(r#"{"namespace":"ns","prefix":"a/","cursor":"a/b","limit":5000}"#).unwrap();
        assert_eq!((r.prefix.as_str(), r.cursor.as_deref(), r.limit), ("a/", Some("a/b"), 1000));
        let r = decode_kv_list(r#"{"namespace":"ns","limit":99999999999999999999999}"#).unwrap();
        assert_eq!(r.limit, 1000);
        let r = decode_kv_list(r#"{"namespace":"ns","cursor":null,"limit":null}"#).unwrap();
        assert_eq!((r.cursor, r.limit), (None, 100));
    }

    #[test]
    fn refuses_bad_input() {
        assert_eq!(reason("[]"), "kv_bad_body");
        assert_eq!(reason("nope"), "kv_bad_body");
        assert_eq!(reason(r#"{"namespace":"ns","extra":1}"#), "kv_bad_body");
        assert_eq!(reason("{}"), "kv_bad_namespace");
        assert_eq!(reason(r#"{"namespace":null}"#), "kv_bad_namespace");
        assert_eq!(reason(r#"{"namespace":"Bad NS"}"#), "kv_bad_namespace");
        assert_eq!(reason(r#"{"namespace":7}"#), "kv_bad_namespace");
        assert_eq!(reason(r#"{"namespace":"ns","prefix":1}"#), "kv_bad_prefix");
        assert_eq!(reason(r#"{"namespace":"ns","cursor":1}"#), "kv_bad_cursor");
        assert_eq!(reason(r#"{"namespace":"ns","cursor":""}"#), "kv_bad_cursor");
        assert_eq!(reason(r#"{"namespace":"ns","cursor":["a"]}"#), "kv_bad_cursor");
        for limit in ["0", "-1", "1.5", "1e3", "\"10\"", "true"] {
            assert_eq!(
                reason(&format!(r#"{{"namespace":"ns","limit":{limit}}}"#)),
                "kv_bad_limit",
                "{limit}"
            );
        }
        assert_eq!(reason(r#"{"namespace":"ns","prefix":"a\u0000"}"#), "kv_bad_key");
        assert_eq!(reason(r#"{"namespace":"ns","prefix":"\ud800"}"#), "kv_bad_prefix");
    }
}
