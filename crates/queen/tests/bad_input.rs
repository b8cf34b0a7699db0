//! Bad input: a 4xx with a JSON `error` naming the field, never a 500, and
//! nothing written.
#![allow(clippy::expect_used, clippy::unwrap_used)]

mod common;

use common::{txids, TestBroker};
use queen_server::ServerConfig;
use serde_json::{json, Value};

/// Asserts a 400 whose `error` names `field`.
#[track_caller]
fn assert_names(code: u16, body: &Value, field: &str) {
    assert_eq!(code, 400, "expected 400 naming {field}, got {code} {body}");
    let error = body["error"].as_str().unwrap_or_else(|| panic!("no error string in {body}"));
    assert!(error.contains(field), "error {error:?} does not name {field}");
}

/// The state of every cursor, to show a refused ack changed nothing.
async fn cursors(b: &TestBroker) -> Vec<String> {
    let client = b.sql().await;
    client
        .query(
            "SELECT concat_ws('/', partition_id, consumer_group, next_seq, lease_id, lease_expires_at, batch_end, retry_count)
               FROM queen.cursors ORDER BY 1",
            &[],
        )
        .await
        .unwrap()
        .iter()
        .map(|r| r.get(0))
        .collect()
}

#[tokio::test]
async fn push_refuses_a_body_that_is_not_json() {
    let b = TestBroker::start().await;
    for text in ["{\"items\": [", "items=1", ""] {
        let (code, body) = b.post_raw("/api/v1/push", text).await;
        assert_names(code, &body, "body");
    }
    assert_eq!(b.written_rows().await, 0);
}

#[tokio::test]
async fn push_refuses_a_body_without_items() {
    let b = TestBroker::start().await;
    let (code, body) = b.post("/api/v1/push", &json!({"messages": []})).await;
    assert_names(code, &body, "items");
    let (code, body) = b.post("/api/v1/push", &json!({"items": {"queue": "q"}})).await;
    assert_names(code, &body, "items");
    // An array is not read as the struct by position.
    for array in [json!([{"queue": "q"}]), json!([[{"queue": "q", "transactionId": "t", "payload": 1}]])] {
        let (code, body) = b.post("/api/v1/push", &array).await;
        assert_names(code, &body, "body");
    }
    assert_eq!(b.written_rows().await, 0);
}

#[tokio::test]
async fn push_refuses_an_item_without_a_queue_and_writes_none_of_the_others() {
    let b = TestBroker::start().await;
    let good = json!({"queue": "q", "partition": "Default", "transactionId": "ok", "payload": 1});
    for bad in [json!({"payload": 1}), json!({"queue": "", "payload": 1}), json!({"queue": 7, "payload": 1})]
    {
        let (code, body) = b.post("/api/v1/push", &json!({"items": [good, bad]})).await;
        assert_names(code, &body, "items[1].queue");
    }
    assert_eq!(b.written_rows().await, 0);
}

#[tokio::test]
async fn push_refuses_a_non_object_item() {
    let b = TestBroker::start().await;
    let good = json!({"queue": "q", "transactionId": "ok", "payload": 1});
    for bad in [json!("q"), json!(null), json!([1])] {
        let (code, body) = b.post("/api/v1/push", &json!({"items": [good, bad]})).await;
        assert_names(code, &body, "items[1]");
    }
    assert_eq!(b.written_rows().await, 0);
}

#[tokio::test]
async fn push_refuses_bad_partition_and_transaction_id_fields() {
    let b = TestBroker::start().await;
    let cases = [
        (json!({"queue": "q", "partition": 5, "payload": 1}), "items[0].partition"),
        (json!({"queue": "q", "partition": "", "payload": 1}), "items[0].partition"),
        (json!({"queue": "q", "transactionId": 5, "payload": 1}), "items[0].transactionId"),
        (json!({"queue": "q", "transactionId": "", "payload": 1}), "items[0].transactionId"),
        (json!({"queue": "x".repeat(300), "payload": 1}), "items[0].queue"),
    ];
    for (item, field) in cases {
        let (code, body) = b.post("/api/v1/push", &json!({"items": [item]})).await;
        assert_names(code, &body, field);
    }
    assert_eq!(b.written_rows().await, 0);
}

#[tokio::test]
async fn ack_refuses_a_partition_id_that_is_not_a_uuid() {
    let b = TestBroker::start().await;
    b.push_txids("q", "Default", &txids("t", 2)).await;
    let popped = b.pop_some("q", "batch=2").await;
    let before = cursors(&b).await;
    let m = &popped["messages"][0];
    let (code, body) = b
        .post(
            "/api/v1/ack",
            &json!({"transactionId": "t-0", "partitionId": "Default", "status": "completed"}),
        )
        .await;
    assert_names(code, &body, "partitionId");
    let (code, body) = b
        .post("/api/v1/ack", &json!({"transactionId": "t-0", "status": "completed", "leaseId": m["leaseId"]}))
        .await;
    assert_names(code, &body, "partitionId");
    // In a batch, one bad item refuses the whole call: the good one is not applied.
    let good = json!({"transactionId": "t-1", "partitionId": m["partitionId"], "leaseId": m["leaseId"], "status": "completed"});
    let bad = json!({"transactionId": "t-0", "partitionId": "not-a-uuid", "status": "completed"});
    let (code, body) = b.post("/api/v1/ack/batch", &json!({"acknowledgments": [good, bad]})).await;
    assert_names(code, &body, "acknowledgments[1].partitionId");
    assert_eq!(cursors(&b).await, before);
}

#[tokio::test]
async fn ack_refuses_a_bad_status_and_other_malformed_fields() {
    let b = TestBroker::start().await;
    b.push_txids("q", "Default", &txids("t", 1)).await;
    let popped = b.pop_some("q", "batch=1").await;
    let before = cursors(&b).await;
    let pid = popped["partitionId"].clone();
    let cases = [
        (json!({"transactionId": "t-0", "partitionId": pid, "status": "done"}), "status"),
        (json!({"transactionId": "t-0", "partitionId": pid, "status": 1}), "status"),
        (json!({"partitionId": pid, "status": "completed"}), "transactionId"),
        (json!({"transactionId": "t-0", "partitionId": pid, "status": "failed", "error": 3}), "error"),
        (json!({"transactionId": "t-0", "partitionId": pid, "leaseId": 3}), "leaseId"),
        (json!({"transactionId": "t-0", "partitionId": pid, "consumerGroup": 3}), "consumerGroup"),
    ];
    for (ack, field) in cases {
        let (code, body) = b.post("/api/v1/ack", &ack).await;
        assert_names(code, &body, field);
    }
    let (code, body) = b.post_raw("/api/v1/ack", "{\"transactionId\": ").await;
    assert_names(code, &body, "body");
    let (code, body) =
        b.post("/api/v1/ack/batch", &json!([[{"transactionId": "t-0", "partitionId": pid}]])).await;
    assert_names(code, &body, "body");
    let (code, body) = b.post("/api/v1/ack/batch", &json!({"acks": []})).await;
    assert_names(code, &body, "acknowledgments");
    let (code, body) = b.post("/api/v1/ack/batch", &json!({"acknowledgments": {}})).await;
    assert_names(code, &body, "acknowledgments");
    let (code, body) = b.post("/api/v1/ack/batch", &json!({"acknowledgments": [], "consumerGroup": 5})).await;
    assert_eq!(code, 400, "{body}");
    assert_eq!(cursors(&b).await, before);
}

#[tokio::test]
async fn pop_refuses_bad_query_parameters_and_registers_nothing() {
    let b = TestBroker::start().await;
    let cases = [
        ("batch=abc", "batch"),
        ("batch=0", "batch"),
        ("batch=-3", "batch"),
        ("wait=maybe", "wait"),
        ("wait=true&timeout=-1", "timeout"),
        ("timeout=soon", "timeout"),
        ("partitions=abc", "partitions"),
        ("partitions=0", "partitions"),
        ("leaseSeconds=0", "leaseSeconds"),
        ("autoAck=yes", "autoAck"),
    ];
    for (query, field) in cases {
        let (code, body) = b.get(&format!("/api/v1/pop/queue/q?{query}")).await;
        assert_names(code, &body, field);
        let (code, body) = b.get(&format!("/api/v1/pop/queue/q/partition/p?{query}")).await;
        assert_names(code, &body, field);
    }
    assert_eq!(b.written_rows().await, 0, "no queue, group or cursor was created");
}

#[tokio::test]
async fn configure_refuses_malformed_bodies() {
    let b = TestBroker::start().await;
    let cases = [
        (json!({"options": {}}), "queue"),
        (json!({"queue": "", "options": {}}), "queue"),
        (json!({"queue": "q", "options": []}), "options"),
        (json!({"queue": "q", "mode": "overwrite"}), "mode"),
        (json!({"queue": "q", "namespace": 5}), "namespace"),
        (json!({"queue": "q", "options": {"deadLetterQueue": "yes"}}), "deadLetterQueue"),
        (json!({"queue": "q", "options": {"retryLimit": -1}}), "retryLimit"),
        (json!({"queue": "q", "options": {"retryLimit": 1.5}}), "retryLimit"),
    ];
    for (body, field) in cases {
        let (code, answer) = b.post("/api/v1/configure", &body).await;
        assert_names(code, &answer, field);
    }
    let (code, answer) = b.post_raw("/api/v1/configure", "nope").await;
    assert_names(code, &answer, "body");
    assert_eq!(b.written_rows().await, 0);
}

#[tokio::test]
async fn a_body_over_the_limit_is_413_and_writes_nothing() {
    let b =
        TestBroker::start_with(ServerConfig { max_body_bytes: 1024 * 1024, ..ServerConfig::default() }).await;
    let blob = "x".repeat(2 * 1024 * 1024);
    let body = json!({"items": [{"queue": "q", "transactionId": "big", "payload": blob}]}).to_string();
    let (code, answer) = b.post_raw("/api/v1/push", body).await;
    assert_eq!(code, 413, "{answer}");
    assert!(answer["error"].is_string(), "{answer}");
    assert_eq!(b.written_rows().await, 0);
    // Just under the limit is fine.
    let blob = "x".repeat(1000 * 1024);
    let body = json!({"items": [{"queue": "q", "transactionId": "ok", "payload": blob}]}).to_string();
    let (code, answer) = b.post_raw("/api/v1/push", body).await;
    assert_eq!(code, 201, "{answer}");
}

#[tokio::test]
async fn unknown_routes_are_a_json_404() {
    let b = TestBroker::start().await;
    let (code, body) = b.get("/api/v1/nope").await;
    assert_eq!(code, 404);
    assert!(body["error"].is_string(), "{body}");
}

// ------------------------------------------------------------ keys: NUL, invalid UTF-8, percent-encoding, length

/// The error code a 4xx body carries: `error` in the KV envelope (the one
/// with a `reason`), `code` in the broker envelope.
fn error_code(body: &Value) -> Option<&str> {
    if body.get("reason").is_some() {
        body["error"].as_str()
    } else {
        body["code"].as_str()
    }
}

/// Asserts a clear refusal: `want` status, a JSON body with a snake_case
/// error code, and for the KV envelope a reason from `reasons` (if given).
#[track_caller]
fn assert_refusal(what: &str, status: u16, body: &Value, want: u16, reasons: &[&str]) {
    assert_eq!(status, want, "{what}: expected {want}, got {status} {body}");
    let code = error_code(body).unwrap_or_else(|| panic!("{what}: no error code in {body}"));
    assert!(
        !code.is_empty() && code.bytes().all(|c| c.is_ascii_lowercase() || c == b'_'),
        "{what}: error code {code:?} is not an identifier: {body}"
    );
    if !reasons.is_empty() {
        let reason = body["reason"].as_str().unwrap_or_else(|| panic!("{what}: no reason in {body}"));
        assert!(reasons.contains(&reason), "{what}: reason {reason:?} is not one of {reasons:?}: {body}");
    }
    if let (Some(code), true) = (body.get("code"), body.get("reason").is_some()) {
        assert_eq!(code, &body["error"], "{what}: a KV `code` must not differ from `error`");
    }
}

/// Sends `body` bytes as they are (no JSON encoding) with `method`.
async fn send_bytes(
    b: &TestBroker,
    method: reqwest::Method,
    path: &str,
    body: Option<Vec<u8>>,
) -> (u16, Value) {
    let mut req = b.http.request(method, b.url(path));
    if let Some(bytes) = body {
        req = req.header("content-type", "application/json").body(bytes);
    }
    let resp = req.send().await.expect("request");
    let status = resp.status().as_u16();
    let bytes = resp.bytes().await.expect("body");
    let body = serde_json::from_slice(&bytes)
        .unwrap_or_else(|_| Value::String(format!("<not JSON> {}", String::from_utf8_lossy(&bytes))));
    (status, body)
}

/// Rows in queen.kv.
async fn kv_rows(b: &TestBroker) -> i64 {
    b.scalar("SELECT count(*) FROM queen.kv").await
}

/// Asserts no KV row and no broker row exists.
async fn assert_nothing_written(b: &TestBroker, what: &str) {
    assert_eq!(kv_rows(b).await, 0, "{what}: a KV row was written");
    assert_eq!(b.written_rows().await, 0, "{what}: a broker row was written");
}

/// A KV put op with a canary before it, so a half-applied call would show.
fn with_canary(op: Value) -> Value {
    json!({"operations": [{"op": "put", "ns": "canary", "key": "canary", "value": 1, "forever": true}, op]})
}

/// Byte sequences that are not UTF-8.
const NOT_UTF8: [&[u8]; 8] = [
    b"\xff",             // never valid
    b"\xc3\x28",         // bad continuation byte
    b"\x80",             // lone continuation byte
    b"\xed\xa0\x80",     // an encoded surrogate (U+D800)
    b"\xc0\xaf",         // overlong '/'
    b"\xe0\x80\xaf",     // overlong '/', 3 bytes
    b"\xf4\x90\x80\x80", // above U+10FFFF
    b"\xe2\x82",         // truncated (the string ends inside the character)
];

/// The same sequences percent-encoded for a URL path.
fn pct(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("%{b:02X}")).collect()
}

#[tokio::test]
async fn kv_keys_and_namespaces_with_nul_are_refused_on_every_route_and_write_nothing() {
    let b = TestBroker::start().await;
    let mut tried = 0;
    let nul_key = "a\u{0}b";
    let ops = [
        json!({"op": "put", "ns": "app", "key": nul_key, "value": 1, "forever": true}),
        json!({"op": "putIfAbsent", "ns": "app", "key": nul_key, "value": 1, "forever": true}),
        json!({"op": "incr", "ns": "app", "key": nul_key, "ttlSeconds": 60}),
        json!({"op": "delete", "ns": "app", "key": nul_key}),
        json!({"op": "check", "ns": "app", "key": nul_key, "expect": 0}),
        json!({"op": "get", "ns": "app", "key": nul_key}),
        json!({"op": "get", "ns": "app", "key": "\u{0}"}),
        json!({"op": "getMany", "ns": "app", "keys": ["ok", nul_key]}),
        json!({"op": "getPrefix", "ns": "app", "prefix": nul_key}),
        json!({"op": "getPrefix", "ns": "app", "prefix": "a", "after": nul_key}),
        json!({"op": "put", "ns": "ap\u{0}p", "key": "k", "value": 1, "forever": true}),
        json!({"op": "get", "ns": "\u{0}", "key": "k"}),
        json!({"op": "put", "ns": "app", "key": "k", "value": "v\u{0}", "forever": true}),
        json!({"op": "put", "ns": "app", "key": "k", "value": {"a\u{0}": 1}, "forever": true}),
    ];
    for op in &ops {
        let (status, body) = b.post("/api/v1/kv", &with_canary(op.clone())).await;
        assert_refusal(&format!("kv {op}"), status, &body, 400, &["kv_bad_key", "kv_bad_namespace"]);
        tried += 1;
        let (status, body) = b.post("/api/v1/transaction", &json!({"operations": [], "kv": [op]})).await;
        assert_refusal(&format!("transaction {op}"), status, &body, 400, &[]);
        tried += 1;
    }
    // The escape itself written as an escaped backslash is data, not NUL (checked last).
    // A transaction with a push and a NUL key writes neither.
    let (status, body) = b
        .post(
            "/api/v1/transaction",
            &json!({"operations": [{"type": "push", "items": [{"queue": "q", "transactionId": "t", "payload": 1}]}],
                    "kv": [{"op": "put", "ns": "app", "key": nul_key, "value": 1, "forever": true}]}),
        )
        .await;
    assert_refusal("transaction push + NUL key", status, &body, 400, &[]);
    tried += 1;
    // Path routes: %00 in the key or the namespace.
    for (method, path, body) in [
        (reqwest::Method::GET, "/api/v1/kv/app/a%00b", None),
        (reqwest::Method::GET, "/api/v1/kv/app/%00", None),
        (reqwest::Method::PUT, "/api/v1/kv/app/a%00b", Some(r#"{"value": 1, "forever": true}"#)),
        (reqwest::Method::DELETE, "/api/v1/kv/app/a%00b", None),
        (reqwest::Method::GET, "/api/v1/kv/ap%00p/k", None),
        (reqwest::Method::PUT, "/api/v1/kv/%00/k", Some(r#"{"value": 1, "forever": true}"#)),
        (reqwest::Method::PUT, "/api/v1/kv/app/k", Some(r#"{"value": "v\u0000", "forever": true}"#)),
    ] {
        let (status, answer) =
            send_bytes(&b, method.clone(), path, body.map(|s| s.as_bytes().to_vec())).await;
        assert_refusal(
            &format!("{method} {path}"),
            status,
            &answer,
            400,
            &["kv_bad_key", "kv_bad_namespace"],
        );
        tried += 1;
    }
    // Broker routes: NUL in queue, partition, transactionId, consumer group.
    for item in [
        json!({"queue": "q\u{0}", "payload": 1}),
        json!({"queue": "q", "partition": "p\u{0}", "payload": 1}),
        json!({"queue": "q", "transactionId": "t\u{0}", "payload": 1}),
    ] {
        let (status, answer) = b.post("/api/v1/push", &json!({ "items": [item] })).await;
        assert_refusal(&format!("push {item}"), status, &answer, 400, &[]);
        tried += 1;
    }
    for path in ["/api/v1/pop/queue/q%00?wait=false", "/api/v1/pop/queue/q?wait=false&consumerGroup=g%00"] {
        let (status, answer) = b.get(path).await;
        assert_refusal(path, status, &answer, 400, &[]);
        tried += 1;
    }
    assert_nothing_written(&b, "NUL").await;
    // Control: `\\u0000` is a backslash and "u0000", a legal key, stored byte for byte.
    let (status, answer) = b
        .post_raw(
            "/api/v1/kv",
            r#"[{"op": "put", "ns": "app", "key": "a\\u0000b", "value": 1, "forever": true}]"#,
        )
        .await;
    assert_eq!(status, 200, "{answer}");
    assert_eq!(
        b.scalar("SELECT count(*) FROM queen.kv WHERE key = 'a\\u0000b' AND octet_length(key) = 8").await,
        1
    );
    eprintln!(
        "bad input figures: NUL: {tried} inputs refused with a 4xx and an error code, 0 5xx, nothing written"
    );
}

#[tokio::test]
async fn invalid_utf8_bytes_in_request_bodies_are_refused_on_every_route_and_write_nothing() {
    let b = TestBroker::start().await;
    let mut tried = 0;
    for bad in NOT_UTF8 {
        let splice = |template: &str| -> Vec<u8> {
            let (head, tail) = template.split_once("@@").unwrap();
            [head.as_bytes(), bad, tail.as_bytes()].concat()
        };
        let kv_reasons: &[&str] = &["kv_bad_body"];
        for (path, template, reasons) in [
            (
                "/api/v1/kv",
                r#"{"operations": [{"op": "put", "ns": "app", "key": "a@@b", "value": 1, "forever": true}]}"#,
                kv_reasons,
            ),
            (
                "/api/v1/kv",
                r#"{"operations": [{"op": "put", "ns": "ap@@p", "key": "k", "value": 1, "forever": true}]}"#,
                kv_reasons,
            ),
            (
                "/api/v1/kv",
                r#"{"operations": [{"op": "put", "ns": "app", "key": "k", "value": "@@", "forever": true}]}"#,
                kv_reasons,
            ),
            ("/api/v1/kv", r#"[{"op": "getPrefix", "ns": "app", "prefix": "@@"}]"#, kv_reasons),
            ("/api/v1/kv", r#"[{"op": "get", "ns": "app", "key": "@@"}]"#, kv_reasons),
            (
                "/api/v1/transaction",
                r#"{"operations": [], "kv": [{"op": "put", "ns": "app", "key": "@@", "value": 1, "forever": true}]}"#,
                &[],
            ),
            (
                "/api/v1/transaction",
                r#"{"operations": [{"type": "push", "items": [{"queue": "q", "payload": "@@"}]}]}"#,
                &[],
            ),
            ("/api/v1/push", r#"{"items": [{"queue": "q@@", "payload": 1}]}"#, &[]),
            ("/api/v1/push", r#"{"items": [{"queue": "q", "transactionId": "@@", "payload": 1}]}"#, &[]),
            ("/api/v1/configure", r#"{"queue": "q@@", "options": {}}"#, &[]),
        ] {
            let (status, answer) = send_bytes(&b, reqwest::Method::POST, path, Some(splice(template))).await;
            assert_refusal(&format!("{path} with {bad:x?}"), status, &answer, 400, reasons);
            tried += 1;
        }
        for (method, template) in [
            (reqwest::Method::PUT, r#"{"value": "@@", "forever": true}"#),
            (reqwest::Method::DELETE, r#"{"expect": 1, "x": "@@"}"#),
        ] {
            let (status, answer) =
                send_bytes(&b, method.clone(), "/api/v1/kv/app/k", Some(splice(template))).await;
            assert_refusal(&format!("{method} path route with {bad:x?}"), status, &answer, 400, kv_reasons);
            tried += 1;
        }
    }
    assert_nothing_written(&b, "invalid UTF-8 body").await;
    eprintln!("bad input figures: invalid UTF-8 bodies: {tried} inputs refused, 0 5xx, nothing written");
}

#[tokio::test]
async fn invalid_utf8_percent_escapes_in_path_keys_and_namespaces_are_refused_and_write_nothing() {
    let b = TestBroker::start().await;
    let mut tried = 0;
    for bad in NOT_UTF8 {
        let enc = pct(bad);
        for (method, path, body) in [
            (reqwest::Method::GET, format!("/api/v1/kv/app/k{enc}"), None),
            (reqwest::Method::GET, format!("/api/v1/kv/app/{enc}"), None),
            (
                reqwest::Method::PUT,
                format!("/api/v1/kv/app/a/{enc}/b"),
                Some(r#"{"value": 1, "forever": true}"#),
            ),
            (reqwest::Method::DELETE, format!("/api/v1/kv/app/k{enc}"), None),
            (reqwest::Method::GET, format!("/api/v1/kv/ap{enc}p/k"), None),
            (reqwest::Method::PUT, format!("/api/v1/kv/{enc}/k"), Some(r#"{"value": 1, "forever": true}"#)),
        ] {
            let (status, answer) =
                send_bytes(&b, method.clone(), &path, body.map(|s| s.as_bytes().to_vec())).await;
            assert_refusal(
                &format!("{method} {path}"),
                status,
                &answer,
                400,
                &["kv_bad_key", "kv_bad_namespace"],
            );
            tried += 1;
        }
    }
    assert_nothing_written(&b, "invalid UTF-8 in the path").await;
    eprintln!(
        "bad input figures: invalid UTF-8 path escapes: {tried} inputs refused, 0 5xx, nothing written"
    );
}

#[tokio::test]
async fn percent_encoding_edge_cases_in_path_routes_decode_exactly_once() {
    let b = TestBroker::start().await;
    // %2F in a namespace is a slash: not a namespace character.
    for path in ["/api/v1/kv/a%2Fb/k", "/api/v1/kv/a%2fb/k", "/api/v1/kv/%2F/k"] {
        let (status, answer) = b.get(path).await;
        assert_refusal(path, status, &answer, 400, &["kv_bad_namespace"]);
    }
    assert_nothing_written(&b, "%2F in a namespace").await;
    // In a key, decoded once: %2F is '/', %25XX is the literal text %XX (never
    // decoded a second time into NUL or a slash), '+' is not a space.
    let cases: [(&str, &str); 7] = [
        ("a%2Fb", "a/b"),
        ("dbl%2500", "dbl%00"),
        ("dbl%252F", "dbl%2F"),
        ("dbl%25FF", "dbl%FF"),
        ("dbl%2525", "dbl%25"),
        ("plus+sign", "plus+sign"),
        ("sp%20ace", "sp ace"),
    ];
    for (encoded, key) in cases {
        let (status, answer) = send_bytes(
            &b,
            reqwest::Method::PUT,
            &format!("/api/v1/kv/app/{encoded}"),
            Some(br#"{"value": 1, "forever": true}"#.to_vec()),
        )
        .await;
        assert_eq!(status, 200, "{encoded}: {answer}");
        assert_eq!(answer["key"], json!(key), "{encoded} decodes once to {key:?}");
    }
    let client = b.sql().await;
    let mut stored: Vec<String> = client
        .query("SELECT key FROM queen.kv WHERE ns = 'app'", &[])
        .await
        .unwrap()
        .iter()
        .map(|r| r.get(0))
        .collect();
    stored.sort();
    let mut want: Vec<String> = cases.iter().map(|(_, k)| k.to_string()).collect();
    want.sort();
    assert_eq!(stored, want, "each key is stored exactly as decoded once");
    // The literal "%00" key is text, reachable by the batch route.
    let (_, got) = b.post("/api/v1/kv", &json!([{"op": "get", "ns": "app", "key": "dbl%00"}])).await;
    assert_eq!(got["results"][0]["found"], json!(true), "{got}");
}

#[tokio::test]
async fn malformed_percent_escapes_in_path_keys_are_refused_and_write_nothing() {
    let b = TestBroker::start().await;
    for key in ["trail%", "trail%4", "bad%zzx", "pct%%", "%G1", "mid%-1x"] {
        for (method, body) in [
            (reqwest::Method::GET, None),
            (reqwest::Method::PUT, Some(br#"{"value": 1, "forever": true}"#.to_vec())),
            (reqwest::Method::DELETE, None),
        ] {
            let path = format!("/api/v1/kv/app/{key}");
            let (status, answer) = send_bytes(&b, method.clone(), &path, body).await;
            assert_refusal(&format!("{method} {path}"), status, &answer, 400, &["kv_bad_key"]);
        }
    }
    assert_nothing_written(&b, "malformed percent escapes").await;
}

#[tokio::test]
async fn invalid_utf8_in_broker_path_parameters_is_a_json_400_with_an_error_code() {
    let b = TestBroker::start().await;
    for path in [
        "/api/v1/pop/queue/q%FF?wait=false",
        "/api/v1/pop/queue/q/partition/p%FF?wait=false",
        "/api/v1/resources/queues/q%FF",
        "/api/v1/consumer-groups/g%FF",
    ] {
        let (status, answer) = b.get(path).await;
        assert_refusal(path, status, &answer, 400, &[]);
    }
    let (status, answer) = b.post_empty("/api/v1/lease/l%FF/extend").await;
    assert_refusal("lease extend", status, &answer, 400, &[]);
    assert_nothing_written(&b, "invalid UTF-8 in a broker path").await;
}

#[tokio::test]
async fn invalid_utf8_in_a_query_parameter_is_refused_and_registers_nothing() {
    let b = TestBroker::start().await;
    b.push_txids("q", "Default", &txids("t", 1)).await;
    let before = b.written_rows().await;
    for path in [
        "/api/v1/pop/queue/q?wait=false&consumerGroup=g%FF",
        "/api/v1/pop/queue/q?wait=false&consumerGroup=%C0%AF",
    ] {
        let (status, answer) = b.get(path).await;
        assert_refusal(path, status, &answer, 400, &[]);
    }
    assert_eq!(b.written_rows().await, before, "no group, cursor or lease was written");
}

/// Sends a raw HTTP/1.1 request; answers the status code.
async fn raw_request(b: &TestBroker, request_line_target: &[u8]) -> u16 {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let addr = b.base.trim_start_matches("http://").to_owned();
    let mut stream = tokio::net::TcpStream::connect(addr).await.expect("connect");
    let request =
        [b"GET ", request_line_target, b" HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n"].concat();
    stream.write_all(&request).await.expect("write");
    let mut answer = Vec::new();
    stream.read_to_end(&mut answer).await.expect("read");
    let text = String::from_utf8_lossy(&answer);
    text.split(' ').nth(1).and_then(|s| s.parse().ok()).unwrap_or_else(|| panic!("not HTTP: {text}"))
}

#[tokio::test]
async fn raw_bytes_in_the_request_target_are_refused_before_routing() {
    let b = TestBroker::start().await;
    // Not percent-encoded at all: the HTTP parser refuses the request line
    // (an empty 400; no route, and so no JSON envelope, is reached).
    for target in [
        &b"/api/v1/kv/app/k\xff"[..],
        b"/api/v1/kv/app/k\x00",
        b"/api/v1/kv/app/a b",
        b"/api/v1/kv/app/k\x7f",
    ] {
        let status = raw_request(&b, target).await;
        assert_eq!(status, 400, "{target:x?}");
    }
    // A URL too long to be a request line is 414, never a 5xx.
    let long = format!("/api/v1/kv/app/{}", "k".repeat(70_000));
    assert_eq!(raw_request(&b, long.as_bytes()).await, 414);
    assert_nothing_written(&b, "raw bytes in the target").await;
}

#[tokio::test]
async fn over_long_keys_and_namespaces_are_refused_on_every_route_and_write_nothing() {
    let b = TestBroker::start().await;
    let mut tried = 0;
    let keys = ["k".repeat(513), "€".repeat(171), "😀".repeat(129), "k".repeat(64 * 1024)];
    for key in &keys {
        assert!(key.len() > 512);
        let ops = [
            json!({"op": "put", "ns": "app", "key": key, "value": 1, "forever": true}),
            json!({"op": "putIfAbsent", "ns": "app", "key": key, "value": 1, "ttlSeconds": 60}),
            json!({"op": "incr", "ns": "app", "key": key, "forever": true}),
            json!({"op": "delete", "ns": "app", "key": key}),
            json!({"op": "check", "ns": "app", "key": key, "expect": 0}),
            json!({"op": "get", "ns": "app", "key": key}),
            json!({"op": "getMany", "ns": "app", "keys": ["ok", key]}),
            json!({"op": "getPrefix", "ns": "app", "prefix": key}),
            json!({"op": "getPrefix", "ns": "app", "prefix": "k", "after": key}),
        ];
        for op in &ops {
            let (status, body) = b.post("/api/v1/kv", &with_canary(op.clone())).await;
            assert_refusal(
                &format!("kv {} ({} bytes)", op["op"], key.len()),
                status,
                &body,
                413,
                &["kv_key_too_large"],
            );
            tried += 1;
        }
        for op in &ops[..6] {
            let (status, body) = b.post("/api/v1/transaction", &json!({"operations": [], "kv": [op]})).await;
            assert_refusal(&format!("transaction {}", op["op"]), status, &body, 413, &["kv_key_too_large"]);
            tried += 1;
        }
        if key.len() < 8 * 1024 {
            let encoded: String = key.bytes().map(|c| format!("%{c:02X}")).collect();
            for (method, body) in [
                (reqwest::Method::GET, None),
                (reqwest::Method::PUT, Some(br#"{"value": 1, "forever": true}"#.to_vec())),
                (reqwest::Method::DELETE, None),
            ] {
                let (status, answer) =
                    send_bytes(&b, method.clone(), &format!("/api/v1/kv/app/{encoded}"), body).await;
                assert_refusal(
                    &format!("{method} path ({} bytes)", key.len()),
                    status,
                    &answer,
                    413,
                    &["kv_key_too_large"],
                );
                tried += 1;
            }
        }
    }
    // Namespaces: at most 64 characters of [a-z0-9._-].
    let long_ns = "n".repeat(65);
    for (status, answer) in [
        b.post(
            "/api/v1/kv",
            &with_canary(json!({"op": "put", "ns": long_ns, "key": "k", "value": 1, "forever": true})),
        )
        .await,
        b.post(
            "/api/v1/transaction",
            &json!({"operations": [], "kv": [{"op": "get", "ns": long_ns, "key": "k"}]}),
        )
        .await,
        b.get(&format!("/api/v1/kv/{long_ns}/k")).await,
        send_bytes(
            &b,
            reqwest::Method::PUT,
            &format!("/api/v1/kv/{long_ns}/k"),
            Some(br#"{"value": 1, "forever": true}"#.to_vec()),
        )
        .await,
    ] {
        assert_refusal("65-character namespace", status, &answer, 400, &["kv_bad_namespace"]);
        tried += 1;
    }
    assert_nothing_written(&b, "over-long keys").await;
    // The boundary is exact: 512 bytes of 4-byte characters, through the path route.
    let key = "😀".repeat(128);
    let encoded: String = key.bytes().map(|c| format!("%{c:02X}")).collect();
    let (status, answer) = send_bytes(
        &b,
        reqwest::Method::PUT,
        &format!("/api/v1/kv/app/{encoded}"),
        Some(br#"{"value": 1, "forever": true}"#.to_vec()),
    )
    .await;
    assert_eq!(status, 200, "{answer}");
    assert_eq!(kv_rows(&b).await, 1);
    eprintln!("bad input figures: over-long keys/namespaces: {tried} inputs refused, 0 5xx, nothing written");
}
