//! KV test helpers over HTTP: calls, result-shape checks and error checks.
//! Included by the kv_* test files with `#[path = "common/kv.rs"] mod kvh;`.
#![allow(dead_code)]

use std::collections::BTreeSet;

use serde_json::{json, Value};

use crate::common::TestBroker;

/// The KV batch route.
pub const KV: &str = "/api/v1/kv";

/// True for the one fixed-width UTC format: `YYYY-MM-DDTHH:MM:SS.ffffffZ`.
pub fn is_ts(s: &str) -> bool {
    let b = s.as_bytes();
    const PATTERN: &[u8] = b"dddd-dd-ddTdd:dd:dd.ddddddZ";
    b.len() == PATTERN.len()
        && b.iter().zip(PATTERN).all(|(c, p)| if *p == b'd' { c.is_ascii_digit() } else { c == p })
}

/// Asserts a timestamp field has the fixed-width format.
pub fn assert_ts(v: &Value) {
    let s = v.as_str().unwrap_or_else(|| panic!("timestamp must be a string, got {v}"));
    assert!(is_ts(s), "timestamp {s:?} is not in the fixed-width format");
}

/// The field names of a JSON object.
pub fn fields(v: &Value) -> BTreeSet<String> {
    v.as_object().unwrap_or_else(|| panic!("not an object: {v}")).keys().cloned().collect()
}

/// Asserts the object has exactly these field names.
pub fn assert_fields(v: &Value, names: &[&str]) {
    let want: BTreeSet<String> = names.iter().map(|s| s.to_string()).collect();
    assert_eq!(fields(v), want, "fields of {v}");
}

/// A `put` op that lives forever.
pub fn put(ns: &str, key: &str, value: Value) -> Value {
    json!({"op": "put", "ns": ns, "key": key, "value": value, "forever": true})
}

/// A `put` op with a TTL.
pub fn put_ttl(ns: &str, key: &str, value: Value, ttl: i64) -> Value {
    json!({"op": "put", "ns": ns, "key": key, "value": value, "ttlSeconds": ttl})
}

/// A `get` op.
pub fn get(ns: &str, key: &str) -> Value {
    json!({"op": "get", "ns": ns, "key": key})
}

/// POSTs `{"operations": ops}`; answers (status, body).
pub async fn call(b: &TestBroker, ops: Value) -> (u16, Value) {
    b.post(KV, &json!({ "operations": ops })).await
}

/// POSTs raw text to the KV route; answers (status, text).
pub async fn call_text(b: &TestBroker, body: &str) -> (u16, String) {
    let resp = b
        .http
        .post(b.url(KV))
        .header("content-type", "application/json")
        .body(body.to_owned())
        .send()
        .await
        .expect("request");
    let status = resp.status().as_u16();
    (status, resp.text().await.expect("body"))
}

/// Runs ops that must answer 200 with index-aligned results; answers them.
pub async fn ok(b: &TestBroker, ops: Value) -> Vec<Value> {
    let n = ops.as_array().map(Vec::len).expect("ops must be an array");
    let sent = ops.clone();
    let (status, body) = call(b, ops).await;
    assert_eq!(status, 200, "kv call failed: {body}");
    assert_fields(&body, &["results"]);
    let results = body["results"].as_array().expect("results").clone();
    assert_eq!(results.len(), n, "one result per op: {body}");
    for (i, r) in results.iter().enumerate() {
        assert_eq!(r["index"], json!(i), "results[{i}].index");
        assert_eq!(r["op"], sent[i]["op"], "results[{i}].op echoes the op sent");
    }
    results
}

/// Runs one op; answers its result element.
pub async fn one(b: &TestBroker, op: Value) -> Value {
    ok(b, json!([op])).await.remove(0)
}

/// Reads a key over HTTP.
pub async fn read(b: &TestBroker, ns: &str, key: &str) -> Value {
    one(b, get(ns, key)).await
}

/// Asserts a key has no live row.
pub async fn assert_absent(b: &TestBroker, ns: &str, key: &str) {
    let r = read(b, ns, key).await;
    assert_eq!(r["found"], json!(false), "{ns}/{key} must be absent: {r}");
}

/// Asserts an error body: `error` is the code, `reason` the id, `detail` a
/// string, and no `code` field that differs from `error`.
pub fn assert_error_body(status: u16, body: &Value, want_status: u16, reason: &str) {
    assert_eq!(status, want_status, "status for {reason}: {body}");
    let error = if want_status == 413 { "payload_too_large" } else { "kv_bad_request" };
    assert_eq!(body["error"], json!(error), "error code: {body}");
    assert_eq!(body["reason"], json!(reason), "reason: {body}");
    assert!(body["detail"].is_string(), "detail names the field: {body}");
    if let Some(code) = body.get("code") {
        assert_eq!(code, &body["error"], "a `code` must not differ from `error`: {body}");
    }
}

/// Sends ops that must be refused with `reason`; answers the body.
pub async fn refused(b: &TestBroker, ops: Value, want_status: u16, reason: &str) -> Value {
    let (status, body) = call(b, ops).await;
    assert_error_body(status, &body, want_status, reason);
    body
}

/// Rows physically in queen.kv (live or expired), for a namespace.
pub async fn physical_rows(b: &TestBroker, ns: &str) -> i64 {
    let sql = b.sql().await;
    sql.query_one("SELECT count(*) FROM queen.kv WHERE ns = $1", &[&ns]).await.expect("count").get(0)
}

/// Total rows in queen.kv.
pub async fn total_rows(b: &TestBroker) -> i64 {
    let sql = b.sql().await;
    sql.query_one("SELECT count(*) FROM queen.kv", &[]).await.expect("count").get(0)
}
