//! The KV request decoded and checked once, in Rust, for every caller
//! (HTTP, path sugar, embedded). The checks, their order and their error
//! bodies are those of kv.md; SQL keeps what needs the database.

use serde_json::value::RawValue;

use crate::kv::{Expect, Expiry, KvOp};
use crate::wire::{self, Fields, Kind};
use crate::EngineError;

/// Ops per call outside a transaction, and inside one.
pub(crate) const MAX_OPS: usize = 256;
pub(crate) const MAX_OPS_IN_TX: usize = 64;
const MAX_KEY_BYTES: usize = 512;
const MAX_VALUE_BYTES: usize = 65536;
const MAX_KEYS: usize = 1000;
const MAX_TTL_SECONDS: u64 = 3_153_600_000;
const OP_NAMES: &str = "get, getMany, getPrefix, put, putIfAbsent, delete, check, incr";

/// A KV 400 (or 413): `{"error", "reason", "detail"}`.
pub(crate) fn kv_reject(reason: &str, detail: &str) -> EngineError {
    reject_with(400, reason, detail)
}

fn too_large(reason: &str, detail: &str) -> EngineError {
    reject_with(413, reason, detail)
}

fn reject_with(status: u16, reason: &str, detail: &str) -> EngineError {
    let error = if status == 413 { "payload_too_large" } else { "kv_bad_request" };
    EngineError::Rejected {
        status,
        body: serde_json::json!({"error": error, "reason": reason, "detail": detail}).to_string(),
    }
}

/// Decodes a KV call (`{"operations": [...]}` or a bare array). `in_tx`
/// applies the transaction rider's limits.
pub(crate) fn decode_call(body: &str, in_tx: bool) -> Result<Vec<KvOp>, EngineError> {
    // Neither text nor jsonb can hold NUL: refuse it before looking inside.
    if wire::has_nul_escape(body) {
        return Err(kv_reject("kv_bad_key", "keys and values must not contain NUL (\\u0000)"));
    }
    let bad_body =
        || kv_reject("kv_bad_body", "the body must be {\"operations\": [...]} or an array of operations");
    let raw: &RawValue = serde_json::from_str(body).map_err(|_| bad_body())?;
    let ops_raw = match wire::kind(raw) {
        Kind::Object => {
            let f = wire::fields(raw).ok_or_else(bad_body)?;
            if f.contains_key("tenant") {
                return Err(kv_reject(
                    "kv_tenant_not_an_input",
                    "tenant is derived by the broker, never sent",
                ));
            }
            f.get("operations").copied()
        }
        Kind::Array => Some(raw),
        _ => None,
    };
    let ops = ops_raw.and_then(wire::elements).ok_or_else(bad_body)?;
    let max = if in_tx { MAX_OPS_IN_TX } else { MAX_OPS };
    if ops.len() > max {
        let per = if in_tx { "transaction" } else { "call" };
        return Err(kv_reject("kv_too_many_ops", &format!("at most {max} kv operations per {per}")));
    }
    let decoded = ops
        .iter()
        .enumerate()
        // A bundle's ops are its `kv` list; name them as the caller wrote them.
        .map(|(i, o)| decode_op(&format!("{}[{i}]", if in_tx { "kv" } else { "operations" }), o, in_tx))
        .collect::<Result<Vec<_>, _>>()?;
    refuse_duplicate_writes(&decoded)?;
    Ok(decoded)
}

/// At most one write per key in one call: the order of a call's writes is
/// the key order, so two writes of one key would have no defined outcome.
fn refuse_duplicate_writes(ops: &[KvOp]) -> Result<(), EngineError> {
    let mut seen = std::collections::HashSet::new();
    for op in ops {
        if let Some((ns, key)) = op.written_key() {
            if !seen.insert((ns, key)) {
                return Err(kv_reject(
                    "kv_duplicate_key_in_call",
                    &format!("at most one write per key in one call; {ns}/{key} appears twice"),
                ));
            }
        }
    }
    Ok(())
}

fn decode_op(f: &str, o: &RawValue, in_tx: bool) -> Result<KvOp, EngineError> {
    let fields =
        wire::fields(o).ok_or_else(|| kv_reject("kv_bad_body", &format!("{f} must be an object")))?;
    if fields.contains_key("tenant") {
        return Err(kv_reject(
            "kv_tenant_not_an_input",
            &format!("{f}.tenant is derived by the broker, never sent"),
        ));
    }
    let name = match fields.get("op") {
        Some(v) if wire::kind(v) == Kind::String => wire::string(v)?,
        _ => String::new(),
    };
    if !matches!(
        name.as_str(),
        "get" | "getMany" | "getPrefix" | "put" | "putIfAbsent" | "delete" | "check" | "incr"
    ) {
        return Err(kv_reject("kv_unknown_op", &format!("{f}.op must be one of {OP_NAMES}")));
    }
    if in_tx && name == "getPrefix" {
        return Err(kv_reject(
            "kv_get_prefix_not_allowed_in_transaction",
            &format!("{f}: getPrefix is not allowed inside a transaction"),
        ));
    }
    let ns = match fields.get("ns") {
        Some(v) if wire::kind(v) == Kind::String => Some(wire::string(v)?),
        _ => None,
    }
    .filter(|ns| valid_namespace(ns))
    .ok_or_else(|| {
        kv_reject("kv_bad_namespace", &format!("{f}.ns must match ^[a-z0-9][a-z0-9._-]{{0,63}}$"))
    })?;

    let key = match name.as_str() {
        "getMany" | "getPrefix" => String::new(),
        _ => key_arg(fields.get("key").copied(), &format!("{f}.key"))?,
    };
    let mut keys = Vec::new();
    if name == "getMany" {
        let list =
            fields.get("keys").and_then(|k| wire::elements(k)).filter(|k| !k.is_empty()).ok_or_else(
                || kv_reject("kv_bad_key", &format!("{f}.keys must be a non-empty array of keys")),
            )?;
        if list.len() > MAX_KEYS {
            return Err(kv_reject("kv_too_many_keys", &format!("{f}.keys holds more than {MAX_KEYS} keys")));
        }
        let field = format!("{f}.keys[]");
        keys = list.into_iter().map(|k| key_arg(Some(k), &field)).collect::<Result<_, _>>()?;
    }
    let mut prefix = String::new();
    let mut after = None;
    let mut limit = None;
    let mut keys_only = false;
    if name == "getPrefix" {
        let required =
            || kv_reject("kv_prefix_required", &format!("{f}.prefix is required and must not be empty"));
        match fields.get("prefix") {
            None => return Err(required()),
            Some(p) if wire::kind(p) == Kind::Null || p.get() == "\"\"" => return Err(required()),
            Some(p) => prefix = key_arg(Some(p), &format!("{f}.prefix"))?,
        }
        if let Some(a) = fields.get("after").filter(|a| wire::kind(a) != Kind::Null) {
            after = Some(key_arg(Some(a), &format!("{f}.after"))?);
        }
        limit = int_arg(&fields, "limit", f, "kv_bad_body")?.map(|l| page_limit(&l));
        match wire::kind_of(&fields, "keysOnly") {
            None | Some(Kind::Null) => {}
            Some(Kind::Boolean) => keys_only = fields.get("keysOnly").is_some_and(|v| wire::boolean(v)),
            Some(_) => return Err(kv_reject("kv_bad_body", &format!("{f}.keysOnly must be a boolean"))),
        }
    }

    let mut value = None;
    if name == "put" || name == "putIfAbsent" {
        let v = fields.get("value").ok_or_else(|| {
            kv_reject("kv_bad_body", &format!("{f}.value is required (null is a legal value)"))
        })?;
        if v.get().len() > MAX_VALUE_BYTES {
            return Err(too_large("kv_value_too_large", &format!("{f}.value is larger than 64 KiB")));
        }
        if has_lone_surrogate(v.get()) {
            return Err(EngineError::UnstorableText(format!("{f}.value holds a lone surrogate escape")));
        }
        value = Some((*v).to_owned());
    }

    let mut expiry = None;
    if matches!(name.as_str(), "put" | "putIfAbsent" | "incr") {
        let given = |n: &str| !matches!(wire::kind_of(&fields, n), None | Some(Kind::Null));
        if given("ttlSeconds") == given("forever") {
            return Err(kv_reject(
                "kv_expiry_not_specified",
                &format!("{f} must carry exactly one of ttlSeconds or forever: true"),
            ));
        }
        if given("forever") {
            if fields.get("forever").map(|v| v.get()) != Some("true") {
                return Err(kv_reject("kv_bad_ttl", &format!("{f}.forever must be true when given")));
            }
            expiry = Some(Expiry::Forever);
        } else {
            let ttl = int_arg(&fields, "ttlSeconds", f, "kv_bad_ttl")?.unwrap_or_default();
            match ttl.parse::<u64>() {
                Ok(s) if s <= MAX_TTL_SECONDS && Expiry::secs(s).is_ok() => expiry = Expiry::secs(s).ok(),
                _ => {
                    return Err(kv_reject(
                        "kv_bad_ttl",
                        &format!("{f}.ttlSeconds must be an integer from 1 to {MAX_TTL_SECONDS}"),
                    ))
                }
            }
        }
    } else if fields.contains_key("ttlSeconds") || fields.contains_key("forever") {
        return Err(kv_reject("kv_bad_ttl", &format!("{f}: {name} takes no expiry")));
    }

    let mut expect = None;
    match fields.get("expect").filter(|e| wire::kind(e) != Kind::Null) {
        Some(e) => {
            if !matches!(name.as_str(), "put" | "delete" | "check") {
                return Err(kv_reject("kv_bad_expect", &format!("{f}: {name} never carries expect")));
            }
            let t = e.get();
            if t.is_empty() || t.len() > 18 || !t.bytes().all(|b| b.is_ascii_digit()) {
                return Err(kv_reject("kv_bad_expect", &format!("{f}.expect must be an integer >= 0")));
            }
            expect = t.parse::<u64>().ok();
        }
        None if name == "check" => {
            return Err(kv_reject("kv_bad_expect", &format!("{f}: check needs expect, an integer >= 0")));
        }
        None => {}
    }

    let required = match wire::kind_of(&fields, "required") {
        None | Some(Kind::Null) => false,
        Some(Kind::Boolean) => fields.get("required").is_some_and(|v| wire::boolean(v)),
        Some(_) => return Err(kv_reject("kv_bad_body", &format!("{f}.required must be a boolean"))),
    };

    let as_expect = Expect::from_wire;
    let expiry = expiry.unwrap_or(Expiry::Forever);
    Ok(match name.as_str() {
        "get" => KvOp::Get { ns, key },
        "getMany" => KvOp::GetMany { ns, keys },
        "getPrefix" => KvOp::GetPrefix { ns, prefix, after, limit, keys_only },
        "put" => {
            KvOp::Put { ns, key, value: raw_or_null(value), expiry, expect: expect.map(as_expect), required }
        }
        "putIfAbsent" => KvOp::PutIfAbsent { ns, key, value: raw_or_null(value), expiry, required },
        "delete" => KvOp::Delete { ns, key, expect, required },
        "check" => KvOp::Check { ns, key, expect: as_expect(expect.unwrap_or_default()), required },
        _ => {
            let delta = int_arg(&fields, "delta", f, "kv_bad_body")?.unwrap_or_else(|| "1".into());
            let min = int_arg(&fields, "min", f, "kv_bad_body")?;
            let max = int_arg(&fields, "max", f, "kv_bad_body")?;
            KvOp::Incr {
                ns,
                key,
                delta: raw_number(delta),
                min: min.map(raw_number),
                max: max.map(raw_number),
                expiry,
                required,
            }
        }
    })
}

fn raw_or_null(v: Option<Box<RawValue>>) -> Box<RawValue> {
    v.unwrap_or_else(|| raw_number("null".into()))
}

/// Text already checked to be one JSON token.
fn raw_number(text: String) -> Box<RawValue> {
    RawValue::from_string(text).unwrap_or_else(|_| Box::<RawValue>::default())
}

/// `^[a-z0-9][a-z0-9._-]{0,63}$`.
pub(crate) fn valid_namespace(ns: &str) -> bool {
    let b = ns.as_bytes();
    !b.is_empty()
        && b.len() <= 64
        && (b[0].is_ascii_lowercase() || b[0].is_ascii_digit())
        && b[1..]
            .iter()
            .all(|&c| c.is_ascii_lowercase() || c.is_ascii_digit() || matches!(c, b'.' | b'_' | b'-'))
}

/// A key: a non-empty string of at most 512 bytes.
fn key_arg(v: Option<&RawValue>, field: &str) -> Result<String, EngineError> {
    let v = v
        .filter(|v| wire::kind(v) == Kind::String)
        .ok_or_else(|| kv_reject("kv_bad_key", &format!("{field} must be a string")))?;
    let key = wire::string(v)?;
    if key.is_empty() {
        return Err(kv_reject("kv_bad_key", &format!("{field} must not be empty")));
    }
    if key.len() > MAX_KEY_BYTES {
        return Err(too_large("kv_key_too_large", &format!("{field} is longer than {MAX_KEY_BYTES} bytes")));
    }
    Ok(key)
}

/// An optional integer JSON number of any size, as its text.
fn int_arg(fields: &Fields<'_>, name: &str, f: &str, reason: &str) -> Result<Option<String>, EngineError> {
    match fields.get(name) {
        None => Ok(None),
        Some(v) if wire::kind(v) == Kind::Null => Ok(None),
        Some(v) => {
            let t = v.get();
            let digits = t.strip_prefix('-').unwrap_or(t);
            if wire::kind(v) != Kind::Number
                || digits.is_empty()
                || !digits.bytes().all(|b| b.is_ascii_digit())
            {
                return Err(kv_reject(reason, &format!("{f}.{name} must be an integer")));
            }
            Ok(Some(t.to_owned()))
        }
    }
}

/// A getPrefix page size: any integer, clamped to 1..=1000.
fn page_limit(text: &str) -> u32 {
    if text.starts_with('-') {
        return 1;
    }
    match text.parse::<u64>() {
        Ok(n) => n.clamp(1, 1000) as u32,
        // More digits than u64 holds: far above the cap.
        Err(_) => 1000,
    }
}

/// Whether JSON text holds a `\uD800`-`\uDFFF` escape that is not half of a
/// surrogate pair (jsonb refuses it).
pub(crate) fn has_lone_surrogate(text: &str) -> bool {
    let b = text.as_bytes();
    let hex = |at: usize| -> Option<u16> {
        let h = b.get(at..at + 4)?;
        u16::from_str_radix(std::str::from_utf8(h).ok()?, 16).ok()
    };
    let mut i = 0;
    while i < b.len() {
        if b[i] != b'\\' {
            i += 1;
            continue;
        }
        if b.get(i + 1) != Some(&b'u') {
            i += 2;
            continue;
        }
        match hex(i + 2) {
            Some(hi @ 0xD800..=0xDBFF) => {
                let _ = hi;
                let paired = b.get(i + 6) == Some(&b'\\')
                    && b.get(i + 7) == Some(&b'u')
                    && matches!(hex(i + 8), Some(0xDC00..=0xDFFF));
                if !paired {
                    return true;
                }
                i += 12;
            }
            Some(0xDC00..=0xDFFF) => return true,
            _ => i += 6,
        }
    }
    false
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used)]
mod tests {
    use super::*;

    fn reason(body: &str) -> (u16, String, String) {
        match decode_call(body, false) {
            Err(EngineError::Rejected { status, body }) => {
                let v: serde_json::Value = serde_json::from_str(&body).unwrap();
                (status, v["reason"].as_str().unwrap().into(), v["detail"].as_str().unwrap().into())
            }
            other => panic!("not rejected: {other:?}"),
        }
    }

    #[test]
    fn refusals_name_the_op_and_field() {
        assert_eq!(reason(r#"[{"op":"get","ns":"Bad","key":"k"}]"#).1, "kv_bad_namespace");
        let (s, r, d) =
            reason(r#"[{"op":"get","ns":"a","key":"k"},{"op":"put","ns":"a","key":"k2","value":1}]"#);
        assert_eq!((s, r.as_str()), (400, "kv_expiry_not_specified"));
        assert_eq!(d, "operations[1] must carry exactly one of ttlSeconds or forever: true");
        let (s, r, _) = reason(&format!(r#"[{{"op":"get","ns":"a","key":"{}"}}]"#, "k".repeat(513)));
        assert_eq!((s, r.as_str()), (413, "kv_key_too_large"));
        assert_eq!(
            reason(r#"[{"op":"get","ns":"a","key":"k","ttlSeconds":null}]"#).2,
            "operations[0]: get takes no expiry"
        );
        assert_eq!(reason(r#"{"operations":[],"tenant":"x"}"#).1, "kv_tenant_not_an_input");
        assert_eq!(
            reason(r#"[{"op":"incr","ns":"a","key":"k","forever":true,"delta":1.5}]"#).2,
            "operations[0].delta must be an integer"
        );
        assert_eq!(
            reason(r#"[{"op":"check","ns":"a","key":"k","expect":1},{"op":"delete","ns":"a","key":"k"}]"#).1,
            "kv_duplicate_key_in_call"
        );
        assert_eq!(reason(r#"[{"op":"getPrefix","ns":"a","prefix":""}]"#).1, "kv_prefix_required");
        assert_eq!(
            reason(r#"[{"op":"put","ns":"a","key":"\u0000","value":1,"forever":true}]"#).1,
            "kv_bad_key"
        );
    }

    #[test]
    fn good_ops_decode_to_their_types() {
        let ops = decode_call(
            r#"{"operations":[{"op":"put","ns":"a","key":"k","value":{"n":1.50},"ttlSeconds":60,"expect":0},
                              {"op":"getPrefix","ns":"a","prefix":"p","limit":99999999999999999999999}]}"#,
            false,
        )
        .unwrap();
        match &ops[0] {
            KvOp::Put { value, expiry, expect, .. } => {
                assert_eq!(value.get(), r#"{"n":1.50}"#);
                assert_eq!(*expiry, Expiry::secs(60).unwrap());
                assert_eq!(*expect, Some(Expect::Absent));
            }
            other => panic!("{other:?}"),
        }
        assert!(matches!(&ops[1], KvOp::GetPrefix { limit: Some(1000), .. }));
    }

    #[test]
    fn lone_surrogates_are_found_and_pairs_pass() {
        assert!(has_lone_surrogate(r#""\ud800""#));
        assert!(has_lone_surrogate(r#""\udc00x""#));
        assert!(!has_lone_surrogate(r#""\ud83d\ude00""#));
        assert!(!has_lone_surrogate(r#""\\ud800""#));
    }
}
